"""``footprint predict``: roofline latency of one model on one accelerator, by module and operator."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..errors import FootprintError
from ..settings import Target, Workload
from .commands import COMMANDS
from .fit import EXAMPLES
from .options import Command, View, settings_of
from .output import save_json, show


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.hardware import render_prediction
    from ..report.progress import progress

    w, target, view = r[Workload], r[Target], r[View]
    if len(target.gpu) != 1:
        raise FootprintError("predict times one accelerator: give --gpu once (`footprint fit` compares several)")
    with progress(f"predict {w.model}: tracing"):
        pred = api.predict(w.model, target.gpu[0], **settings_of(r))
    show(render_prediction, pred, depth=view.depth, top=view.top)
    save_json(view.json, "predict", pred.to_dict(ops=True))
    return 0


COMMAND = Command(
    "predict", COMMANDS["predict"][1], run,
    takes={**api.VERBS["predict"], View: ("depth", "top", "json", "debug")}, defaults={"depth": 1},
    required=("gpu",),
    helps={"json": "also write the prediction, with every operator, as JSON",
           "gpu": "accelerator id or name (see `footprint gpus`)"},
    examples=EXAMPLES)
