"""Where an eager decode step's time goes: the host's dispatching against the device's kernels.

For each language model (random weights, its own cache), a prefill then decode steps; the
decode steps are timed (wall, synchronised) and profiled with torch.profiler: the operators
the host dispatched (aten calls at the top level, their host time), the kernels the device
ran and its busy time, beside footprint's traced count of operators and views for one step.
A step whose wall time is far above both the host's operator time and the device's busy
time is spent in Python between the operators (the model library's own code).

    python benchmarks/decode_profile.py [--device cuda] [--steps 20] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from torch_footprint.estimate.llm.trace import cache_argument, last_logits_only, trace_serving  # noqa: E402

LLAMA = str(ROOT / "benchmarks" / "configs" / "llama-1.1b")


def _build(name: str, dtype: torch.dtype, device: str) -> Any:
    import transformers

    auto = transformers.AutoConfig
    cfg = auto.for_model("gpt2") if name == "hf:gpt2" else auto.from_pretrained(name)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.to(device).eval(), cfg


def profile(name: str, dtype: torch.dtype, device: str, prompt: int, steps: int) -> dict[str, Any]:
    from transformers import DynamicCache

    model, cfg = _build(name, dtype, device)
    cache_kw = cache_argument(model)  # past_key_values before transformers 5.24, then cache
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device=device)
    walls: list[float] = []
    with torch.inference_mode():
        cache = DynamicCache(config=cfg)
        tok = model(input_ids=ids, **{cache_kw: cache}, use_cache=True, **last_logits_only(model)).logits[:, -1:]
        tok = tok.argmax(-1)
        for _ in range(steps):
            sync()
            t = time.perf_counter()
            tok = model(input_ids=tok, **{cache_kw: cache}, use_cache=True).logits[:, -1:].argmax(-1)
            sync()
            walls.append(time.perf_counter() - t)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device.startswith("cuda"):
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        n = 5
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(n):
                tok = model(input_ids=tok, **{cache_kw: cache}, use_cache=True).logits[:, -1:].argmax(-1)
            sync()
    events = prof.events()
    top = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::")
           and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    st = trace_serving(name, batch=1, prompt=prompt, dtype="bfloat16" if dtype == torch.bfloat16 else None)
    traced = st.decode[0].events
    views = sum(e.kind == "view" for e in traced)
    out = {
        "model": name, "dtype": str(dtype), "device": device, "prompt": prompt,
        "wall_ms": 1e3 * statistics.median(walls),
        "host_ops_per_step": len(top) / n,
        "host_op_ms_per_step": sum(e.cpu_time_total for e in top) / n / 1e3,
        "kernels_per_step": len(kernels) / n,
        "device_busy_ms_per_step": sum(e.device_time for e in kernels) / n / 1e3 if kernels else None,
        "traced_ops": len(traced) - views, "traced_views": views,
    }
    names: dict[str, int] = {}
    for e in top:
        names[e.name] = names.get(e.name, 0) + 1
    out["host_ops_by_name"] = {k: v / n for k, v in sorted(names.items(), key=lambda kv: -kv[1])[:15]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", help="write the figures as JSON")
    args = ap.parse_args()
    cases = [("hf:gpt2", torch.float32)]
    if args.device.startswith("cuda"):
        cases += [("hf:gpt2", torch.bfloat16), (LLAMA, torch.bfloat16)]
    rows = []
    print(f"{'model':12s} {'dtype':9s} {'wall ms':>8s} {'host ops':>8s} {'host ms':>8s} {'kernels':>8s} "
          f"{'device ms':>9s} {'traced':>7s} {'views':>6s}")
    for name, dtype in cases:
        r = profile(name, dtype, args.device, 128, args.steps)
        rows.append(r)
        dev = f"{r['device_busy_ms_per_step']:9.2f}" if r["device_busy_ms_per_step"] is not None else f"{'-':>9s}"
        print(f"{Path(name).name[:12]:12s} {str(dtype)[6:]:9s} {r['wall_ms']:8.2f} {r['host_ops_per_step']:8.0f} "
              f"{r['host_op_ms_per_step']:8.2f} {r['kernels_per_step']:8.0f} {dev} {r['traced_ops']:7d} "
              f"{r['traced_views']:6d}", flush=True)
        print("   host ops:", ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in r["host_ops_by_name"].items()))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
