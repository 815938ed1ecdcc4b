"""Results drawn in a notebook: under IPython (Jupyter), every result type renders as HTML,
registered with IPython's own formatter by the types' names, so the result types hold no
renderer and this module imports none of them. A result with a report page shows it; a
watched run its timeline; a diff and a budget check their tables."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# (module, class) of every result a verb returns that has a report page
RESULT_TYPES = (("torch_footprint.analysis.profile", "Profile"), ("torch_footprint.estimate.memory", "MemoryEstimate"),
                ("torch_footprint.estimate.kernels.prediction", "Prediction"),
                ("torch_footprint.estimate.recommend", "FitResult"), ("torch_footprint.measure.runner", "BenchResult"),
                ("torch_footprint.estimate.llm.result", "LlmResult"), ("torch_footprint.results.overview", "Overview"))
# and those drawn another way
OTHER_TYPES = (("torch_footprint.measure.watch", "WatchResult"), ("torch_footprint.results.diff", "Diff"),
               ("torch_footprint.results.budget", "CheckResult"))


def _page(result: Any) -> str:
    from .html import render_html

    return render_html(result, fragment=True)


def _watch(result: Any) -> str:
    from .html import CSS
    from .watch import watch_section_html

    return f'<div class="footprint"><style>{CSS.replace("body{", ".footprint{")}</style>' \
           f"{watch_section_html(result.to_dict())}</div>"


def _table(head: list[str], rows: list[list[str]], caption: str) -> str:
    from html import escape

    cells = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return (f"<table><caption>{escape(caption)}</caption><thead><tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in head) + f"</tr></thead><tbody>{cells}</tbody></table>")


def _diff(result: Any) -> str:
    from .verdicts import change, value

    d = result.to_dict()
    rows = [[c["metric"], value(c["before"], c["unit"]), value(c["after"], c["unit"]), change(c["change"], c["unit"]),
             "" if c["percent"] is None else f"{c['percent']:+.2f}%", c["verdict"]] for c in d["metrics"]]
    mods = [[c["module"] or "<root>", c["metric"], value(c["before"], c["unit"]), value(c["after"], c["unit"]),
             change(c["change"], c["unit"]), c["verdict"]] for c in d["modules"]]
    return (_table(["metric", "before", "after", "change", "%", ""], rows, "by metric")
            + (_table(["module", "metric", "before", "after", "change", ""], mods, "by module (changed only)")
               if mods else ""))


def _check(result: Any) -> str:
    from .verdicts import value

    d = result.to_dict()
    rows = [[o["metric"], o["rule"], value(o["value"], o["unit"]), value(o["limit"], o["unit"]),
             "ok" if o["passed"] else "OVER"] for o in d["results"]]
    failed = sum(1 for o in d["results"] if not o["passed"])
    return _table(["metric", "rule", "value", "limit", ""], rows,
                  "every cap holds" if not failed else f"over budget: {failed} of {len(rows)} caps failed")


VIEWS: dict[str, Callable[[Any], str]] = {"WatchResult": _watch, "Diff": _diff, "CheckResult": _check}


def notebook_views() -> bool:
    """Register the HTML views with the running IPython shell, once; whether one runs."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get() if callable(get) else None
    if shell is None:
        return False
    formatter = shell.display_formatter.formatters["text/html"]
    if not getattr(formatter, "_footprint_views", False):
        for module, name in RESULT_TYPES:
            formatter.for_type_by_name(module, name, lambda result, _cycle=None: _page(result))
        for module, name in OTHER_TYPES:
            view = VIEWS[name]
            formatter.for_type_by_name(module, name, lambda result, _cycle=None, view=view: view(result))
        formatter._footprint_views = True
    return True
