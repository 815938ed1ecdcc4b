"""Predicted peak memory against the CPU allocator's own records, one step each.

For each case (an architecture and a set-up: inference, or a training step with an
optimizer, a precision, activation checkpointing, as a first step or a steady-state one),
the prediction is footprint's traced peak above the memory alive before the step
(weights, buffers, inputs; in a steady-state step also the optimizer state); the
measurement runs the same step for real on the CPU under torch.profiler with
profile_memory=True and takes the peak of the cumulative sum of its "[memory]" events
(allocations and frees, in time order) above the start. A steady-state step is measured
after one step has run (its optimizer state allocated) and ``zero_grad(set_to_none=True)``.

    python benchmarks/memory_cpu.py [--cases resnet18/sgd,gpt2-4l/adamw/steady] [--list]

Target (issue 15): every case within 3%; the worst |error| and the signed median printed.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate import training
from torch_footprint.measure.measured import allocator_peak, one_step

ROOT = Path(__file__).resolve().parent.parent
LLAMA_TINY = ROOT / "tests" / "configs" / "llama-gqa-tiny"


def tv(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        return torchvision.models.get_model(name, weights=None)

    return build


def gpt2_4l() -> nn.Module:
    """The issue's decoder: 4 layers, 512 wide, 8 heads, an 8192-token vocabulary."""
    import transformers

    cfg = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192, n_positions=512,
                                  bos_token_id=0, eos_token_id=0, use_cache=False)
    return transformers.GPT2LMHeadModel(cfg)


def llama_tiny() -> nn.Module:
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(str(LLAMA_TINY))
    cfg.use_cache = False
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def bert_small() -> nn.Module:
    import transformers

    cfg = transformers.BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                  intermediate_size=1024, vocab_size=8192, max_position_embeddings=256)
    return transformers.BertForMaskedLM(cfg)


def moe_small() -> nn.Module:
    import transformers

    cfg = transformers.Qwen3MoeConfig(hidden_size=128, intermediate_size=256, moe_intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=32, num_experts=8, num_experts_per_tok=2, vocab_size=1024,
                                      max_position_embeddings=256, use_cache=False)
    return transformers.Qwen3MoeForCausalLM(cfg)


class LSTMLM(nn.Module):
    """A two-layer LSTM language model."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(2048, 128)
        self.lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, 2048)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(input_ids))[0])


# name -> (architecture, builder, input shape, keyword (token ids) or positional (images))
MODELS: dict[str, tuple[str, Callable[[], nn.Module], tuple[int, ...], bool]] = {
    "resnet18": ("CNN", tv("resnet18"), (4, 3, 224, 224), False),
    "mobilenet_v2": ("CNN", tv("mobilenet_v2"), (4, 3, 224, 224), False),
    "vit_b_16": ("ViT", tv("vit_b_16"), (2, 3, 224, 224), False),
    "gpt2-4l": ("decoder", gpt2_4l, (2, 256), True),
    "llama-tiny": ("decoder", llama_tiny, (2, 64), True),
    "bert-small": ("encoder", bert_small, (4, 128), True),
    "moe-small": ("MoE", moe_small, (2, 64), True),
    "lstm": ("LSTM", LSTMLM, (8, 64), True),
}


@dataclass(frozen=True)
class Case:
    model: str
    optimizer: str | None = None  # None: inference
    precision: str = "fp32"
    checkpointing: bool = False
    steady: bool = False

    @property
    def name(self) -> str:
        parts = [self.model, self.optimizer or "inference"]
        if self.precision != "fp32":
            parts.append(self.precision)
        if self.checkpointing:
            parts.append("ckpt")
        if self.steady:
            parts.append("steady")
        return "/".join(parts)


CASES = [
    Case("resnet18"), Case("resnet18", "sgd"), Case("resnet18", "momentum", steady=True),
    Case("resnet18", "adamw-foreach"),
    Case("mobilenet_v2"), Case("mobilenet_v2", "adam", steady=True),
    Case("vit_b_16"), Case("vit_b_16", "sgd"), Case("vit_b_16", "adamw"),
    Case("gpt2-4l"), Case("gpt2-4l", "adamw"), Case("gpt2-4l", "adamw", steady=True),
    Case("gpt2-4l", "adamw-fused", steady=True), Case("gpt2-4l", "adamw", checkpointing=True),
    Case("gpt2-4l", "adafactor"),
    Case("llama-tiny"), Case("llama-tiny", "adamw"), Case("llama-tiny", "adamw", steady=True),
    Case("llama-tiny", "adamw", "bf16"), Case("llama-tiny", "adamw", "bf16-mixed"),
    Case("llama-tiny", "adamw", "bf16-mixed", checkpointing=True),
    Case("llama-tiny", "adamw", "bf16-mixed", checkpointing=True, steady=True),
    Case("llama-tiny", "sgd", checkpointing=True), Case("llama-tiny", "adam-foreach"),
    Case("bert-small"), Case("bert-small", "adamw"), Case("bert-small", "adamw", steady=True),
    Case("bert-small", "momentum-foreach", checkpointing=True), Case("bert-small", "adamw", "bf16-mixed"),
    Case("moe-small"), Case("moe-small", "adamw"), Case("moe-small", "adamw", steady=True),
    Case("lstm"), Case("lstm", "sgd"), Case("lstm", "adam", steady=True), Case("lstm", "adamw", "bf16"),
]


def _inputs(case: Case, dtype: torch.dtype) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """(footprint's input spec, the real args, the real kwargs)."""
    _, _, shape, tokens = MODELS[case.model]
    if tokens:
        return {"input_ids": ",".join(map(str, shape)) + ":int64"}, (), {
            "input_ids": torch.randint(0, 64, shape, generator=torch.Generator().manual_seed(0))}
    spec = ",".join(map(str, shape)) + (":bfloat16" if dtype == torch.bfloat16 else "")
    return spec, (torch.randn(shape).to(dtype),), {}


def run_case(case: Case) -> tuple[int, int, float]:
    """(predicted, measured, seconds to predict) for one case."""
    _, build, _, _ = MODELS[case.model]
    train = case.optimizer is not None
    param_dtype, autocast = training.precision(case.precision)
    torch.manual_seed(0)
    model = build().to(param_dtype).train(train)
    spec, args, kwargs = _inputs(case, param_dtype)
    t = time.perf_counter()
    est = tfp.memory(model, spec, train=train, optimizer=case.optimizer, precision=case.precision,
                     checkpointing=case.checkpointing)
    seconds = time.perf_counter() - t
    peak = est.steady if case.steady and est.steady is not None else est.peak
    undo: Callable[[], None] = lambda: None  # noqa: E731
    if case.checkpointing:
        _, undo = training.enable_checkpointing(model)
    opt = training.optimizer(case.optimizer)([p for p in model.parameters() if p.requires_grad]) if train else None
    if case.steady:
        one_step(model, args, kwargs, opt, train, autocast)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
    gc.collect()
    measured = allocator_peak(lambda: one_step(model, args, kwargs, opt, train, autocast))
    undo()
    return peak.above_baseline, measured, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", help="comma-separated case names (default: all; see --list)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            print(f"{c.name:44s} {MODELS[c.model][0]}")
        return
    chosen = CASES if not args.cases else [c for c in CASES if c.name in args.cases.split(",")]
    rows = []
    print(f"{'case':44s} {'arch':8s} {'predicted':>11s} {'measured':>11s} {'error':>8s}")
    for case in chosen:
        pred, meas, seconds = run_case(case)
        err = (pred - meas) / meas
        rows.append((case, pred, meas, err))
        print(f"{case.name:44s} {MODELS[case.model][0]:8s} {pred / 2**20:7.2f} MiB {meas / 2**20:7.2f} MiB "
              f"{100 * err:+7.2f}%  ({seconds:.1f} s to predict)", flush=True)
    errors = [r[3] for r in rows]
    worst = max(rows, key=lambda r: abs(r[3]))
    print()
    print(f"{len(rows)} cases; within 3%: {sum(abs(e) <= 0.03 for e in errors)}/{len(rows)}; exact to the byte: "
          f"{sum(r[1] == r[2] for r in rows)}/{len(rows)}; worst |error| {100 * abs(worst[3]):.2f}% "
          f"({worst[0].name}); signed median {100 * statistics.median(errors):+.3f}%")


if __name__ == "__main__":
    main()
