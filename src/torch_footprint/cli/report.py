"""``footprint report``: a self-contained HTML report with plots."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..errors import FootprintError
from ..settings import Target, Workload
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_doc, save_html

EXAMPLES = """examples:
  footprint report resnet50 --train --optimizer adamw --gpu a100-sxm-80gb -o resnet50.html
  footprint report hf:gpt2 --input-ids 8,1024 --train --precision bf16-mixed -o gpt2.html
  footprint profile vit_b_16 --json vit.json && footprint show vit.json --html vit.html
  footprint diff before.json after.json
  footprint check resnet50 --budget budget.toml
  footprint profile resnet50 --csv modules.csv
  footprint schema > footprint-schema.json
"""


def _own(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE.html", help="the HTML file to write")
    p.add_argument("--chrome-trace", metavar="FILE.json", help="also write the predicted timeline on --gpu as a "
                                                              "Chrome trace (Perfetto, chrome://tracing)")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.progress import progress
    from ..results.record import envelope

    w, view = r[Workload], r[View]
    if not (args.output or view.json or args.chrome_trace):
        raise FootprintError("say where the report goes: -o FILE.html (and/or --json FILE.json)")
    if args.chrome_trace and not r[Target].gpu:
        raise FootprintError("--chrome-trace times the operators on an accelerator: add --gpu ID")
    with progress(f"report {w.model}: tracing") as update:
        rep = api.report(w.model, **settings_of(r))
        update(f"report {w.model}: drawing")
        doc = envelope("report", rep.to_dict())  # one envelope: the HTML and the JSON carry the same time
        save_html(args.output, doc, view.depth)
        save_doc(view.json, doc)
    if args.chrome_trace:
        from ..files import write_json
        from ..report.chrome_trace import chrome_trace

        write_json(args.chrome_trace, chrome_trace(rep))
        print(f"wrote {args.chrome_trace}")
    return 0


COMMAND = Command(
    "report", COMMANDS["report"][1], run, takes={**api.VERBS["report"], View: ("depth", "json", "debug")},
    helps={"gpu": "the accelerator of the roofline and the memory capacity line",
           "depth": "module depth of the bars (default: the shallowest with five modules)",
           "json": "also write the report's data as JSON (`footprint show FILE --html` re-renders it)"},
    extra=_own, examples=EXAMPLES)
