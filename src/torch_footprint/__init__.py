"""torch-footprint: what a PyTorch model costs and what hardware it needs."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["FootprintError", "Profile", "bench", "memory", "profile", "__version__"]


def __getattr__(name: str) -> Any:  # keep `import torch_footprint` (and the CLI's start) light
    if name in ("profile", "Profile", "memory", "bench"):
        from . import api

        return getattr(api, name)
    if name == "FootprintError":
        from .errors import FootprintError

        return FootprintError
    raise AttributeError(f"module 'torch_footprint' has no attribute {name!r}")
