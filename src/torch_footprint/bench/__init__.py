"""Placeholder for the bench stage (see DESIGN.md); filled in by later issues."""
