"""torch-footprint: what a PyTorch model costs and what hardware it needs."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
_VERBS = ("profile", "Profile", "memory", "bench", "fit", "predict", "gpus", "calibrate", "llm")
__all__ = ["FootprintError", "hardware", "__version__", *_VERBS, "make_report"]


def __getattr__(name: str) -> Any:  # keep `import torch_footprint` (and the CLI's start) light
    if name in _VERBS:
        from . import api

        return getattr(api, name)
    if name == "make_report":  # `footprint report`; the name `report` is the renderers' package
        from .api import report

        return report
    if name == "hardware":
        import importlib

        return importlib.import_module(".hardware", __name__)
    if name == "FootprintError":
        from .errors import FootprintError

        return FootprintError
    raise AttributeError(f"module 'torch_footprint' has no attribute {name!r}")
