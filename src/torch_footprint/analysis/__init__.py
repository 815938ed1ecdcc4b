"""Pure functions over a trace, and the result objects they make."""

from .profile import Profile
from .summary import ModuleRow, OperatorRow, Totals, by_module, by_operator, totals, unknown_ops

__all__ = ["ModuleRow", "OperatorRow", "Profile", "Totals", "by_module", "by_operator", "totals", "unknown_ops"]
