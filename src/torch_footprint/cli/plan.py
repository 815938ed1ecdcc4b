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
  footprint plan hf:meta-llama/Llama-3.1-8B --serve --request-rate 20 --slo-ttft 500ms --slo-tpot 50ms
  footprint plan hf:meta-llama/Llama-3.1-70B --serve --gpu h100-sxm --gpu a100-sxm-80gb --engine vllm \\
      --request-rate 50 --lengths azure-conv --slo-ttft 1s --slo-tpot 80ms
"""


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..estimate.llm.fleet import FleetPlan
    from ..report.plan import render_fleet, render_plan
    from ..report.progress import progress

    w, view = r[Workload], r[View]
    with progress(f"plan {w.model}") as update:
        res = api.plan(w.model, progress=update, **settings_of(r))
    if isinstance(res, FleetPlan):
        show(render_fleet, res, top=view.top)
        save_json(view.json, "plan-serve", res.to_dict())
        return ExitCode.INTERRUPTED if res.interrupted else ExitCode.ANSWER
    show(render_plan, res, top=view.top)
    save_json(view.json, "plan", res.to_dict())
    # an answer, "nothing fits" included; after Ctrl-C the best found so far is shown and saved, and the exit
    # code says the search was cut short
    return ExitCode.INTERRUPTED if res.interrupted else ExitCode.ANSWER


COMMAND = Command(
    "plan", COMMANDS["plan"][1], run, takes={**api.VERBS["plan"], View: ("json", "top", "debug")},
    defaults={"top": 5, "train": True},
    helps={"json": "also write the layouts that fit, best first, as JSON", "top": "how many layouts to show",
           "gpu": "the accelerator to plan for (an id of `footprint gpus`; with --serve, repeat it to compare, "
                  "default every one with a price)",
           "gpus": "GPUs in the job: every layout of them is searched (with --serve: the fleet's GPUs at most)",
           "tp": "with --serve: only this tensor-parallel degree (default 1, 2, 4 and 8 where the heads divide)",
           "sequence_parallel": "every layout searched with TP > 1 runs sequence parallelism (torchtitan's and NeMo's "
                                "recipes do)",
           "vocab_parallel": "every layout searched with TP > 1 splits the embedding, head and logits by vocabulary",
           "async_tp": "every layout searched with TP > 1 overlaps its tensor-parallel collectives",
           "engine": "with --serve: only this engine (default vllm, sglang and trtllm)",
           "request_rate": "with --serve: requests per second to the whole fleet, sent as a Poisson process",
           "ac": "search only this activation checkpointing mode (default: none, selective and full)",
           "optimizer": "the optimizer (default adamw)",
           "precision": "the arithmetic (default bf16-mixed)",
           "train": "a training step (always, for plan)"},
    examples=EXAMPLES)
