"""Renderers: terminal tables and files. Formatting only, no arithmetic."""
