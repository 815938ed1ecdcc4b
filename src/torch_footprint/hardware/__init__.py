"""The accelerator database, the local device and its calibrated ceilings.

``tfp.hardware.list()`` returns every row (built-in, this machine's CPU, and a user file
given as ``extra``); ``tfp.hardware.get("h100-sxm")`` one of them.
"""

from __future__ import annotations

import builtins
import os

from .catalog import get, load
from .db import DTYPES, Accelerator, find, load_file

__all__ = ["DTYPES", "Accelerator", "find", "get", "list", "load", "load_file"]


def list(extra: str | os.PathLike[str] | None = None) -> builtins.list[Accelerator]:  # noqa: A001
    """Every accelerator: the built-in database, this machine's CPU, then ``extra``'s rows."""
    return load(extra)
