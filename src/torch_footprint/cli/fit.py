"""``footprint fit``: which accelerator runs this model: fits, largest batch, predicted speed."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..settings import Workload
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_json, save_text, show

EXAMPLES = """examples:
  footprint gpus
  footprint fit resnet50 --batch 32
  footprint fit hf:meta-llama/Llama-3.1-8B --input-ids 1,4096 --train --optimizer adamw --precision bf16-mixed
  footprint fit vit_b_16 --latency 10ms --precision fp16
  footprint fit hf:meta-llama/Llama-3.1-70B --input-ids 1,4096 --train --optimizer adamw \\
      --precision bf16-mixed --gpus 8 --strategy zero3
  footprint predict resnet50 --gpu a100-sxm-80gb --batch 64
  footprint calibrate
"""


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.hardware import render_fit
    from ..report.progress import progress

    w, view = r[Workload], r[View]
    with progress(f"fit {w.model}: tracing and ranking"):
        res = api.fit(w.model, **settings_of(r))
    show(render_fit, res)
    save_json(view.json, "fit", res.to_dict())
    if view.csv:
        from ..report.csv import FIT_COLUMNS, table_csv

        save_text(view.csv, table_csv(res.to_dict()["rows"], FIT_COLUMNS))
    return 0  # an answer, "nothing fits" included


COMMAND = Command(
    "fit", COMMANDS["fit"][1], run, takes={**api.VERBS["fit"], View: ("json", "csv", "debug")},
    helps={"json": "also write the ranking as JSON", "csv": "also write the ranking, one accelerator a row, as CSV",
           "gpu": "only these accelerators (repeatable)",
           "utilisation": "usable fraction of memory where the allocator's extras are not modelled; on NVIDIA GPUs the "
                          "verdict is the peak plus the CUDA process's extras against the whole memory, and this "
                          "fraction gives what to provision",
           "tp": "tensor-parallel ranks among --gpus (Megatron-style split of attention and MLP linears; default 1)"},
    examples=EXAMPLES)
