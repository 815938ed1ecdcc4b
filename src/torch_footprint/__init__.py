"""torch-footprint: what a PyTorch model costs and what hardware it needs."""

from __future__ import annotations

import sys
import types
from typing import Any

__version__ = "0.1.0"
__all__ = ["FootprintError", "Profile", "bench", "fit", "hardware", "memory", "predict", "profile", "__version__"]
_VERBS = ("profile", "Profile", "memory", "fit", "predict")


def __getattr__(name: str) -> Any:  # keep `import torch_footprint` (and the CLI's start) light
    if name in _VERBS:
        from . import api

        return getattr(api, name)
    if name == "hardware":
        import importlib

        return importlib.import_module(".hardware", __name__)
    if name == "FootprintError":
        from .errors import FootprintError

        return FootprintError
    raise AttributeError(f"module 'torch_footprint' has no attribute {name!r}")


class _Package(types.ModuleType):
    """``bench`` is a verb and a subpackage: the verb keeps the name when the subpackage loads."""

    @property
    def bench(self) -> Any:
        from .api import bench

        return bench

    @bench.setter
    def bench(self, value: Any) -> None:  # the import system binding the subpackage
        pass


sys.modules[__name__].__class__ = _Package
