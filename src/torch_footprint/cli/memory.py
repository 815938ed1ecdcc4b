"""``footprint memory``: peak memory of inference or a training step, by category."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..settings import Workload
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_json, show

EXAMPLES = """examples:
  footprint memory resnet50 --batch 64
  footprint memory resnet50 --batch 64 --train --optimizer adamw
  footprint memory hf:gpt2 --input-ids 8,1024 --train --precision bf16-mixed --checkpointing
  footprint memory vit_b_16 --train --max-batch 24GiB
"""


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.progress import progress
    from ..report.terminal import render_memory

    w = r[Workload]
    with progress(f"memory {w.model}: tracing"):
        est = api.memory(w.model, **settings_of(r))
    show(render_memory, est)
    save_json(r[View].json, "memory", est.to_dict())
    return 0


COMMAND = Command(
    "memory", COMMANDS["memory"][1], run, takes={**api.VERBS["memory"], View: ("json", "debug")},
    helps={"json": "also write the estimate as JSON",
           "device": "whose fixed overheads to add: cpu, or cuda (context, cuBLAS workspace, allocator rounding)"},
    examples=EXAMPLES)
