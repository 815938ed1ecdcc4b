"""torch-footprint: what a PyTorch model costs and what hardware it needs.

The verbs (``profile``, ``memory``, ``bench``, ``predict``, ``fit``, ``llm``, ``make_report``,
``diff``, ``check``, ``gpus``, ``calibrate``, ``watch``) and the setting records they take
(``Workload``, ``Training``, ``Parallel``, ``Target``, ``Memory``, ``Serving``,
``Measurement``, ``Sections``, ``Calibration``) load lazily, so ``import torch_footprint``
and the command line start fast.
"""

from __future__ import annotations

import importlib
from typing import Any


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one source)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-footprint")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _version()
_VERBS = ("profile", "memory", "bench", "fit", "plan", "predict", "gpus", "calibrate", "llm", "diff", "check", "watch")
_RECORDS = ("Workload", "Training", "Parallel", "Target", "Memory", "Serving", "Measurement", "Sections",
            "Calibration", "Plan")
_HOMES = {**dict.fromkeys(_VERBS, ".api"), **dict.fromkeys(_RECORDS, ".settings"), "Profile": ".analysis",
          "FootprintError": ".errors", "ExitCode": ".errors"}
__all__ = [*_VERBS, *_RECORDS, "ExitCode", "FootprintError", "Profile", "__version__", "hardware", "make_report"]


def __dir__() -> list[str]:  # the verbs load lazily: list them for tab completion and help()
    return sorted({*(n for n in globals() if n.startswith("__")), *__all__})


def __getattr__(name: str) -> Any:  # keep `import torch_footprint` (and the CLI's start) light
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    if name == "make_report":  # api.report (``torch_footprint.report`` is the renderers' package)
        return importlib.import_module(".api", __name__).report
    if name == "hardware":
        return importlib.import_module(".hardware", __name__)
    raise AttributeError(f"module 'torch_footprint' has no attribute {name!r}")
