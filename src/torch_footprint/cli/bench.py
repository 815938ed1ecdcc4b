"""``footprint bench``: latency and throughput measured on this machine (one process, or N
ranks under torchrun with --nproc)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import api
from ..errors import ExitCode, Interrupted
from ..settings import Measurement, Parallel, Workload
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_json, show

EXAMPLES = """examples:
  footprint bench resnet50
  footprint bench resnet50 --batch 1,8,32,auto
  footprint bench vit_b_16 --device cuda --precision bf16 --channels-last --compile
  footprint bench resnet50 --train --optimizer sgd
  footprint bench resnet50 --profile
  footprint bench resnet18 --train --nproc 2 --strategy fsdp
  footprint bench llama.json --train --gpus 2 --pp 2 --grad-accum 4 --pp-schedule 1f1b
"""


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from rich.console import Console

    from ..report.progress import progress
    from ..report.terminal import render_bench

    w, m, p = r[Workload], r[Measurement], r[Parallel]
    if m.nproc is not None or p.pp > 1:
        from ..report.hardware import render_ranks

        how = f"pipeline {p.schedule}" if p.pp > 1 else args.strategy
        with Console(stderr=True).status(f"{m.nproc or p.gpus} ranks under torchrun: {how}"):
            res = api.bench(w.model, **settings_of(r))
        show(render_ranks, res)
        save_json(r[View].json, "bench", res.to_dict())
        return ExitCode.ANSWER
    interrupted = None
    with progress(f"bench {w.model}: preparing") as update:
        try:
            res = api.bench(w.model, progress=update, **settings_of(r))
        except Interrupted as e:
            partial: Any = e.partial
            if partial is None or not partial.points:
                raise
            res, interrupted = partial, e
    show(render_bench, res)
    save_json(r[View].json, "bench", res.to_dict())
    if interrupted is not None:  # Ctrl-C: what was finished is above (and in --json); exit as interrupted
        print("footprint: interrupted: kept the finished batch sizes; not measured: "
              + ", ".join(map(str, res.unfinished)), file=sys.stderr)
        return ExitCode.INTERRUPTED
    return ExitCode.ANSWER


COMMAND = Command(
    "bench", COMMANDS["bench"][1], run, takes={**api.VERBS["bench"], View: ("json", "debug")},
    helps={"json": "also write the measurements as JSON",
           "device": "cpu, cuda or cuda:N (default: cuda when present)",
           "strategy": "with --nproc: ddp, zero1, zero2, zero3, fsdp, or tp (one tensor-parallel group of every "
                       "rank); for pipeline ranks give --pp (and --gpus, --grad-accum, --pp-schedule, --vpp) "
                       "instead",
           "gpus": "with --pp: the ranks under torchrun, one pipeline rank each (the same as --nproc)",
           "grad_accum": "with --pp: the pipeline's micro-batches of --batch per step",
           "precision": "cast weights and floating inputs (fp32, fp16, bf16), or run under torch.autocast "
                        "(fp16-mixed, bf16-mixed) (default: as the model is built)"},
    examples=EXAMPLES)
