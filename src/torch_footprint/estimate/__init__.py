"""Placeholder for the estimate stage (see DESIGN.md); filled in by later issues."""
