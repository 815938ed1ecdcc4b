"""Pure functions over a trace."""

from .summary import ModuleRow, OperatorRow, Totals, by_module, by_operator, totals, unknown_ops

__all__ = ["ModuleRow", "OperatorRow", "Totals", "by_module", "by_operator", "totals", "unknown_ops"]
