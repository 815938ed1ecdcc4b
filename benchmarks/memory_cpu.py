"""Predicted peak memory against the CPU allocator's own records, one step each.

For each case (an architecture and a set-up: inference, or a training step with an
optimizer, a precision, activation checkpointing, as a first step or a steady-state one),
the prediction is footprint's traced peak above the memory alive before the step
(weights, buffers, inputs; in a steady-state step also the optimizer state); the
measurement runs the same step for real on the CPU under torch.profiler with
profile_memory=True and takes the peak of the cumulative sum of its "[memory]" events
(allocations and frees, in time order) above the start. A steady-state step is measured
after one step has run (its optimizer state allocated) and ``zero_grad(set_to_none=True)``.

    python benchmarks/memory_cpu.py [--cases resnet18/sgd,gpt2-4l/adamw/steady] [--list] [--out rows.json]
    python benchmarks/memory_cpu.py --device cuda --out benchmarks/results/memory-cuda.json

With ``--device cuda`` the same cases run on the GPU, measured as torch.cuda.max_memory_allocated
above memory_allocated before the step (peak stats reset, synchronised); the prediction is
footprint's for device="cuda" (the same trace) plus cuBLAS's workspace (cublas_workspace_bytes:
CUBLAS_WORKSPACE_CONFIG, else 32 MiB on sm90) in the steps that allocate it: each case starts with
the workspaces cleared, as a fresh process would, so a first step's first matmul allocates it and
a steady-state step finds it made by its warm-up step. cuDNN's convolution workspaces are not in
the trace (it follows the CPU's kernels) and show in the CNN rows' error. Predictions run in
``--workers`` processes on the CPU while the GPU measures.

Target: every case within 3%; the worst |error| and the signed median printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.estimate.memory import cublas_workspace_bytes
from torch_footprint.measure.measured import allocator_peak, cuda_peak, one_step
from torch_footprint.trace import setups as training

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


def _build(case: Case) -> tuple[nn.Module, Any, tuple[Any, ...], dict[str, Any]]:
    """The case's model (on the CPU, in its parameter dtype, train or eval), its input spec
    for footprint and its real inputs."""
    _, build, _, _ = MODELS[case.model]
    param_dtype, _ = training.precision(case.precision)
    torch.manual_seed(0)
    model = build().to(param_dtype).train(case.optimizer is not None)
    spec, args, kwargs = _inputs(case, param_dtype)
    return model, spec, args, kwargs


def predict(case: Case, device: str = "cpu") -> tuple[int, float, bool]:
    """(footprint's peak above the step's starting memory, seconds to predict, whether the
    step calls a matrix multiply: on CUDA the first one allocates cuBLAS's workspace)."""
    model, spec, _, _ = _build(case)
    t = time.perf_counter()
    est = tfp.memory(model, spec, train=case.optimizer is not None, optimizer=case.optimizer,
                     precision=case.precision, checkpointing=case.checkpointing, device=device)
    seconds = time.perf_counter() - t
    peak = est.steady if case.steady and est.steady is not None else est.peak
    # an nn.Linear runs on cuBLAS (convolutions and CUDA's LSTM run on cuDNN)
    return peak.above_baseline, seconds, any(isinstance(m, nn.Linear) for m in model.modules())


def measure(case: Case, device: str = "cpu") -> int:
    """The step's real peak above its starting memory: on the CPU the profiler's allocator
    records, on CUDA the caching allocator's max_memory_allocated."""
    model, _, args, kwargs = _build(case)
    train = case.optimizer is not None
    _, autocast = training.precision(case.precision)
    model = model.to(device)
    args = tuple(a.to(device) for a in args)
    kwargs = {k: v.to(device) for k, v in kwargs.items()}
    undo: Callable[[], None] = lambda: None  # noqa: E731
    if case.checkpointing:
        _, undo = training.enable_checkpointing(model)
    opt = training.optimizer(case.optimizer)([p for p in model.parameters() if p.requires_grad]) if train else None

    def step() -> None:
        one_step(model, args, kwargs, opt, train, autocast, device_type=device)

    if device == "cuda":
        # each case starts as a fresh process would: no cuBLAS workspace yet (a steady-state
        # step finds the one its first step allocated)
        torch._C._cuda_clearCublasWorkspaces()
    if case.steady:
        step()
        if opt is not None:
            opt.zero_grad(set_to_none=True)
    gc.collect()
    measured = cuda_peak(step) if device == "cuda" else allocator_peak(step)
    undo()
    return measured


def run_case(case: Case) -> tuple[int, int, float]:
    """(predicted, measured, seconds to predict) for one case on the CPU."""
    pred, seconds, _ = predict(case)
    return pred, measure(case), seconds


def cublas_in_step(case: Case, matmuls: bool, workspace: int) -> int:
    """cuBLAS workspace bytes a case's measured step allocates: none in a steady-state step (its
    warm-up step made them) or without a matmul; else one for the forward's thread and, in a
    training step, one more for autograd's backward thread (estimate.memory.overheads_for)."""
    if not matmuls or case.steady:
        return 0
    return workspace * (2 if case.optimizer is not None else 1)


def reprice(path: Path) -> list[dict[str, Any]]:
    """The rows of a saved ``--device cuda`` run (``--out``) with the workspaces counted as
    cublas_in_step counts them now: the measured peaks and the traced ones as they were."""
    saved = json.loads(path.read_text())
    if saved.get("device") != "cuda":
        raise SystemExit(f"{path}: not a --device cuda run")
    rows = []
    for r in saved["rows"]:
        case = next(c for c in CASES if c.name == r["case"])
        # a saved row holds one workspace where its step has a matmul and is not steady, else none
        ws = cublas_in_step(case, True, r["cublas_workspace"]) if r["cublas_workspace"] else 0
        rows.append({**r, "cublas_workspace": ws, "predicted": r["traced"] + ws,
                     "error": (r["traced"] + ws - r["measured"]) / r["measured"]})
    return rows


def _predict_job(name: str) -> tuple[str, int, float, bool]:
    case = next(c for c in CASES if c.name == name)
    torch.set_num_threads(1)
    return (name, *predict(case, "cuda"))


def cuda_rows(chosen: list[Case], workers: int) -> list[dict[str, Any]]:
    """Predictions in ``workers`` processes on the CPU while the GPU measures, one case at a time."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    cap = torch.cuda.get_device_capability()
    workspace = cublas_workspace_bytes(cap, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    rows = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_predict_job, c.name) for c in chosen]
        measured = {c.name: measure(c, "cuda") for c in chosen}
        for case, fut in zip(chosen, futures, strict=True):
            _, traced, seconds, matmuls = fut.result()
            blas = cublas_in_step(case, matmuls, workspace)
            rows.append({"case": case.name, "arch": MODELS[case.model][0], "traced": traced,
                         "cublas_workspace": blas, "predicted": traced + blas, "measured": measured[case.name],
                         "seconds_to_predict": seconds})
    return rows


def _table(rows: list[dict[str, Any]], device: str) -> str:
    lines = []
    cuda = device == "cuda"
    extra = f" {'cuBLAS ws':>10s}" if cuda else ""
    lines.append(f"{'case':44s} {'arch':8s} {'predicted':>11s}{extra} {'measured':>11s} {'error':>8s}")
    for r in rows:
        ws = f" {r['cublas_workspace'] / 2**20:6.2f} MiB" if cuda else ""
        lines.append(f"{r['case']:44s} {r['arch']:8s} {r['predicted'] / 2**20:7.2f} MiB{ws} "
                     f"{r['measured'] / 2**20:7.2f} MiB {100 * r['error']:+7.2f}%  "
                     f"({r['seconds_to_predict']:.1f} s to predict)")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    errors = [r["error"] for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    median = statistics.median(errors)
    return (f"{len(rows)} cases; within 3%: {sum(abs(e) <= 0.03 for e in errors)}/{len(rows)}; exact to the byte: "
            f"{sum(r['predicted'] == r['measured'] for r in rows)}/{len(rows)}; worst |error| "
            f"{100 * abs(worst['error']):.2f}% ({worst['case']}); signed median {100 * median:+.3f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", help="comma-separated case names (default: all; see --list)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: the profiler's allocator records (default); cuda: torch.cuda.max_memory_allocated")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                    help="processes that predict while the GPU measures (--device cuda)")
    ap.add_argument("--out", type=Path, help="also write the rows and the summary as JSON here")
    ap.add_argument("--reprice", type=Path, metavar="JSON",
                    help="re-count the cuBLAS workspaces of a saved --device cuda run (no GPU needed)")
    args = ap.parse_args()
    if args.reprice:
        rows = reprice(args.reprice)
        print(f"{args.reprice} re-priced: the measured and traced peaks as saved, the cuBLAS workspaces as "
              "cublas_in_step counts them now")
        print(_table(rows, "cuda"))
        print()
        print(summary(rows))
        return
    if args.list:
        for c in CASES:
            print(f"{c.name:44s} {MODELS[c.model][0]}")
        return
    chosen = CASES if not args.cases else [c for c in CASES if c.name in args.cases.split(",")]
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False (no GPU here, or a CPU-only torch)", file=sys.stderr)
        sys.exit(2)
    rows: list[dict[str, Any]] = []
    if args.device == "cuda":
        t = time.perf_counter()
        rows = cuda_rows(chosen, max(1, args.workers))
        for r in rows:
            r["error"] = (r["predicted"] - r["measured"]) / r["measured"]
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; predicted = footprint's traced peak "
              f"above the step's start (device='cuda') + cuBLAS's workspace where the step's first matmul "
              f"allocates it (CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG', 'unset')}); "
              f"cuDNN's convolution workspaces are not in the trace; {time.perf_counter() - t:.0f} s")
        print(_table(rows, "cuda"))
    else:
        print(_table([], "cpu"))
        for case in chosen:
            pred, meas, seconds = run_case(case)
            row = {"case": case.name, "arch": MODELS[case.model][0], "predicted": pred, "measured": meas,
                   "error": (pred - meas) / meas, "seconds_to_predict": seconds}
            rows.append(row)
            print(_table([row], "cpu").splitlines()[1], flush=True)
    print()
    print(summary(rows))
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "rows": rows, "summary": summary(rows)}, indent=1))


if __name__ == "__main__":
    main()
