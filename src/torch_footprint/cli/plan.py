"""``footprint plan``: which training layout to run on N GPUs of a type."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..errors import ExitCode
from ..settings import Workload
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_json, show

EXAMPLES = """examples:
  footprint plan hf:meta-llama/Llama-3.1-8B --gpu h100-sxm --gpus 8 --seq 8192
  footprint plan hf:meta-llama/Llama-3.1-70B --gpu h100-sxm --gpus 64 --seq 8192 --global-batch 512 \\
      --network-gbps 400 --tokens 15e12 --top 3 --json plan.json
"""


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.plan import render_plan
    from ..report.progress import progress

    w, view = r[Workload], r[View]
    with progress(f"plan {w.model}") as update:
        res = api.plan(w.model, progress=update, **settings_of(r))
    show(render_plan, res, top=view.top)
    save_json(view.json, "plan", res.to_dict())
    # an answer, "nothing fits" included; after Ctrl-C the best found so far is shown and saved, and the exit
    # code says the search was cut short
    return ExitCode.INTERRUPTED if res.interrupted else ExitCode.ANSWER


COMMAND = Command(
    "plan", COMMANDS["plan"][1], run, takes={**api.VERBS["plan"], View: ("json", "top", "debug")},
    defaults={"top": 5, "train": True},
    helps={"json": "also write the layouts that fit, best first, as JSON", "top": "how many layouts to show",
           "gpu": "the accelerator to plan for (an id of `footprint gpus`)",
           "gpus": "GPUs in the job: every layout of them is searched",
           "ac": "search only this activation checkpointing mode (default: none, selective and full)",
           "optimizer": "the optimizer (default adamw)",
           "precision": "the arithmetic (default bf16-mixed)",
           "train": "a training step (always, for plan)"},
    required=("gpu",), examples=EXAMPLES)
