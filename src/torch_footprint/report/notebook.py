"""Results drawn in a notebook: under IPython (Jupyter), every result type renders as the
report's HTML, registered with IPython's own formatter by the types' names, so the result
types hold no renderer and this module imports none of them."""

from __future__ import annotations

import sys

# (module, class) of every result a verb returns that has a page
RESULT_TYPES = (("torch_footprint.analysis.profile", "Profile"), ("torch_footprint.estimate.memory", "MemoryEstimate"),
                ("torch_footprint.estimate.kernels.prediction", "Prediction"),
                ("torch_footprint.estimate.recommend", "FitResult"), ("torch_footprint.measure.runner", "BenchResult"),
                ("torch_footprint.estimate.llm.result", "LlmResult"), ("torch_footprint.results.overview", "Overview"))


def notebook_views() -> bool:
    """Register the HTML views with the running IPython shell, once; whether one runs."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get() if callable(get) else None
    if shell is None:
        return False
    formatter = shell.display_formatter.formatters["text/html"]
    if not getattr(formatter, "_footprint_views", False):
        from .html import render_html

        for module, name in RESULT_TYPES:
            formatter.for_type_by_name(module, name, lambda result, _cycle=None: render_html(result, fragment=True))
        formatter._footprint_views = True
    return True
