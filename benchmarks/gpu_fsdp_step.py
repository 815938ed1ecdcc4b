"""Training steps as torchtitan-style code runs them on one GPU: measurements only, nothing predicted.

Each case builds a causal LM from a shipped config with its layer count cut (so that two
layer counts differ by whole blocks: per-block figures come out of the difference, free of
the embedding, head and loss), random weights in fp32, then either

* ``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) over a one-rank mesh, each decoder
  layer and then the root, with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``;
  with one rank the all-gathers and reduce-scatters copy, but FSDP2's buffers, casts and
  prefetch are all there; or
* ``amp``: plain module, fp32 weights under ``torch.autocast(bf16)``;

and AdamW (foreach, torch's CUDA default, or fused as torchtitan's default), activation
checkpointing as transformers applies it (``gradient_checkpointing_enable``, non-reentrant)
or none, SDPA attention, the loss as torchtitan's (cross entropy over the logits cast to
fp32). For each step it records the median time (CUDA events), ``max_memory_allocated``
and ``max_memory_reserved`` during a steady step (optimizer state present, gradients set to
None before it), and what was allocated before and after; for the cases without
checkpointing, every kernel's time over one step under torch.profiler. Out-of-memory is
recorded, not raised. The logits are released before the backward, as torchtitan's train step does (``del pred``).

    PYTHONPATH=src python benchmarks/gpu_fsdp_step.py [--out FILE.json] [--budget-s 200]
    python benchmarks/gpu_fsdp_step.py --device cpu --smoke      # the code paths, tiny sizes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_measure import ROOT, Timer, environment, free, write  # noqa: E402

LLAMA = "meta-llama--Meta-Llama-3-8B"
MOE = "Qwen--Qwen3-30B-A3B"
# (config, layers, batch, seq, wrap, checkpointing, optimizer)
CASES = [(LLAMA, layers, b, s, wrap, ac, opt) for b, s, wrap, ac, opt in
         ((1, 8192, "fsdp", False, "adamw-foreach"), (2, 8192, "fsdp", True, "adamw-foreach"),
          (1, 16384, "fsdp", True, "adamw-foreach"), (1, 8192, "amp", False, "adamw-foreach"),
          (1, 8192, "fsdp", False, "adamw-fused"))
         for layers in (2, 4)]
CASES += [(MOE, layers, 1, 4096, "fsdp", ac, "adamw-foreach") for ac in (False, True) for layers in (1, 2)]


def init_dist(dev: str) -> Any:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.startswith("cuda") else "gloo", rank=0, world_size=1)
    return init_device_mesh(dev.split(":")[0], (1,))


def build(cfg_name: str, layers: int, seq: int, dev: str, smoke: bool) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(ROOT / "benchmarks" / "configs" / cfg_name)
    cfg.num_hidden_layers = layers
    cfg.max_position_embeddings = max(seq, cfg.max_position_embeddings)
    if smoke:
        cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size = 64, 128, 256
        cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 4, 2, 16
        if hasattr(cfg, "moe_intermediate_size"):
            cfg.moe_intermediate_size, cfg.num_experts = 32, 8
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = False
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return model.train()


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def kernels(step: Any, cuda: bool) -> list[dict[str, Any]]:
    """Device time per kernel name over one step under torch.profiler (CPU ops' own time on a CPU)."""
    from collections import defaultdict

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if (ev.device_type != torch.autograd.DeviceType.CUDA) if cuda else ev.cpu_parent is not None:
            continue
        if getattr(ev, "is_user_annotation", False) or ev.name.startswith(("FSDP::", "Optimizer.")):
            continue  # a range around kernels (record_function), not a kernel
        k = totals[ev.name]
        k[0] += (ev.device_time if cuda else ev.cpu_time) / 1e3  # ms
        k[1] += 1
    return [{"name": n, "ms": v[0], "calls": v[1]} for n, v in sorted(totals.items(), key=lambda kv: -kv[1][0])]


def run_case(case: dict[str, Any], dev: str, timer: Timer, mesh: Any, smoke: bool,
             profile: bool = False) -> dict[str, Any]:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    cuda = dev.startswith("cuda")
    model = build(case["config"], case["layers"], case["seq"], dev, smoke)
    case["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
    case["params"] = sum(p.numel() for p in model.parameters())
    if case["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if case["wrap"] == "fsdp":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
    ids = torch.randint(0, model.config.vocab_size, (case["batch"], case["seq"]), device=dev)
    fused = case["optimizer"] == "adamw-fused"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=not fused, fused=fused)
    amp = case["wrap"] == "amp"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast(dev.split(":")[0], torch.bfloat16) if amp else contextlib.nullcontext()
        with ctx:
            logits = model(input_ids=ids).logits
        loss = lm_loss(logits, ids)
        del logits  # as torchtitan's train step does: the logits are not kept into the backward
        loss.backward()
        opt.step()

    case["allocated_before"] = torch.cuda.memory_allocated() if cuda else None
    step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        case["allocated_steady"] = torch.cuda.memory_allocated()
    step()
    if cuda:
        torch.cuda.synchronize()
        case["max_allocated"] = torch.cuda.max_memory_allocated()
        case["max_reserved"] = torch.cuda.max_memory_reserved()
        case["allocated_after"] = torch.cuda.memory_allocated()
    case.update(timer(step, warmup=1, reps=5, max_s=4.0))
    case["tokens_per_s"] = case["batch"] * case["seq"] / case["median_s"]
    if profile:  # after the timing: the profiler's hooks slow what runs after them in this process
        t = time.perf_counter()
        case["kernels"] = kernels(step, cuda)
        case["profiled_wall_s"] = time.perf_counter() - t
        case["kernel_s"] = sum(k["ms"] for k in case["kernels"]) / 1e3
    return case  # the model, optimizer and step go with this frame


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=200.0, help="start no case once this is spent")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, to try the code paths on any device")
    ap.add_argument("--profile", action="store_true",
                    help="each case without checkpointing: its kernels, after its timing")
    ap.add_argument("--only", help="the cases to run, by index into CASES (comma-separated)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu-fsdp-step.json"))
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device: give --device cpu --smoke to try the code paths")
    start = time.perf_counter()
    mesh = init_dist(args.device)
    timer = Timer(args.device)
    report: dict[str, Any] = {"environment": environment(args.device), "cases": [], "skipped": []}
    chosen = [CASES[int(i)] for i in args.only.split(",")] if args.only else CASES
    for cfg_name, layers, batch, seq, wrap, ac, opt in chosen:
        case: dict[str, Any] = {"config": cfg_name, "layers": layers, "batch": batch, "seq": seq, "wrap": wrap,
                                "checkpointing": ac, "optimizer": opt, "loss": "fp32"}
        if args.smoke:
            case["seq"] = 64
        if time.perf_counter() - start > args.budget_s:
            report["skipped"].append(case)
            continue
        t = time.perf_counter()
        try:
            run_case(case, args.device, timer, mesh, args.smoke, profile=not ac and args.profile)
        except torch.OutOfMemoryError as e:
            case["error"] = f"OutOfMemoryError: {e}"[:300]
        except Exception as e:  # one broken case must not lose the others
            case["error"] = f"{type(e).__name__}: {e}"[:500]
        free(args.device)
        case["seconds"] = time.perf_counter() - t
        report["cases"].append(case)
        write(report, args.out)
        gib = 2**30
        print(f"{cfg_name:28s} L={layers} b={batch} s={case['seq']:5d} {wrap:4s} ac={ac!s:5s} {opt:13s} "
              + (case["error"][:120] if "error" in case else
                 f"{case['tokens_per_s']:9.0f} tok/s  {case['median_s'] * 1e3:8.1f} ms  "
                 f"peak {(case.get('max_allocated') or 0) / gib:6.2f} GiB  "
                 f"reserved {(case.get('max_reserved') or 0) / gib:6.2f} GiB  "
                 f"steady {(case.get('allocated_steady') or 0) / gib:6.2f} GiB")
              + f"  ({case['seconds']:.0f} s)", flush=True)
    write(report, args.out)
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")
    import torch.distributed as dist

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
