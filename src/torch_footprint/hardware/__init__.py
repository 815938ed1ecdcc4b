"""Placeholder for the hardware stage (see DESIGN.md); filled in by later issues."""
