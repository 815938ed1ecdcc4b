"""``footprint profile``: parameters, FLOPs and MACs by module and operator."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..settings import Workload
from .commands import COMMANDS, EXAMPLES
from .options import Command, View, settings_of
from .output import save_json, save_text, show


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.progress import progress
    from ..report.terminal import render_profile

    w, view = r[Workload], r[View]
    with progress(f"profile {w.model}: tracing"):
        prof = api.profile(w.model, **settings_of(r))
    show(render_profile, prof, by=view.by, depth=view.depth)
    if view.json:
        save_json(view.json, "profile", prof.to_dict(depth=None, include_trace=True))
    if view.csv:
        from ..report.csv import MODULE_COLUMNS, OPERATOR_COLUMNS, table_csv

        rows = prof.by_module(None) if view.by == "module" else prof.by_operator()
        save_text(view.csv, table_csv([x.to_dict() for x in rows],
                                      MODULE_COLUMNS if view.by == "module" else OPERATOR_COLUMNS))
    return 0


COMMAND = Command(
    "profile", COMMANDS["profile"][1], run,
    takes={**api.VERBS["profile"], View: ("depth", "by", "json", "csv", "debug")},
    defaults={"depth": 2},
    helps={"json": "also write the profile, with its trace, as JSON",
           "csv": "also write the table shown (--by module: every module) as CSV",
           "train": "trace a training step's forward and backward (train mode)",
           "precision": "cast parameters and floating inputs: fp32, fp16, bf16, fp64 (default: as the model is "
                        "built)"},
    examples=EXAMPLES)
