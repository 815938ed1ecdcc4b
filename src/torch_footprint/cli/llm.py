"""``footprint llm``: what a language model needs to serve, on every accelerator."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..settings import Workload
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_html, save_json, show

EXAMPLES = """examples:
  footprint llm hf:meta-llama/Llama-3.1-8B
  footprint llm hf:meta-llama/Llama-3.1-8B --gpu h100-sxm --batch 8 --prompt 2048 --output 512
  footprint llm hf:meta-llama/Llama-3.1-70B --gpu a100-sxm-80gb --gpus 4 --tp 4 --quant int4-g128 --kv fp8
  footprint llm hf:mistralai/Mixtral-8x7B-v0.1 --gpu l40s --quant fp8
  footprint llm hf:deepseek-ai/DeepSeek-V3 --gpu h200-sxm --gpus 8 --max-context
  footprint llm hf:gpt2 --prompt 512 --output 64 --measure
"""


def _own(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-context", action="store_true", help="lead with the longest context at the batch (sort by it)")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from rich.console import Console

    from ..report.llm import render_llm

    w, view = r[Workload], r[View]
    with Console(stderr=True).status("footprint llm") as status:
        res = api.llm(w.model, progress=lambda m: status.update(f"footprint llm: {m}"), **settings_of(r))
    show(render_llm, res, max_context=args.max_context)
    doc = save_json(view.json, "llm", res.to_dict())
    save_html(view.html, {**doc, "llm": doc})
    return 0


COMMAND = Command(
    "llm", COMMANDS["llm"][1], run, takes={**api.VERBS["llm"], View: ("json", "html", "debug")},
    helps={"model": "a causal language model: hf:ID (configs shipped for Llama, Mistral, Mixtral, Qwen2, Gemma, "
                    "gpt-oss, DeepSeek, Mamba...), a local folder with config.json",
           "batch": "concurrent requests (default 1)", "gpus": "devices per model replica",
           "gpu": "only these accelerators (repeatable; default: all); one gives the full breakdown",
           "device": "where --measure runs (default cpu)", "json": "also write the answer as JSON",
           "html": "also write a self-contained HTML report (memory against context, tokens/s against batch)"},
    extra=_own, examples=EXAMPLES)
