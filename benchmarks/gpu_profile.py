"""Where a model's time goes on this GPU: device kernels by name under torch.profiler.

For each case (an image model at a batch, precision and memory layout; inference as
benchmarks/gpu_measure.py runs it, or a training step with SGD momentum), a warm-up, then
three steps under torch.profiler: every CUDA kernel's time per step, summed by kernel name,
the 30 longest printed and all written to JSON, beside the step's wall time.

    PYTHONPATH=src python benchmarks/gpu_profile.py [--out FILE.json]
    python benchmarks/gpu_profile.py --device cpu --smoke      # the code paths, tiny sizes
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_measure import AMP, build_image, free  # noqa: E402

CASES = [("convnext_tiny", 256, "amp-fp16", "nchw", False), ("convnext_tiny", 256, "amp-fp16", "nhwc", False),
         ("swin_t", 256, "amp-fp16", "nchw", False), ("vit_b_16", 256, "amp-fp16", "nchw", False),
         ("resnet50", 256, "amp-fp16", "nchw", False), ("efficientnet_b0", 256, "amp-fp16", "nchw", False),
         ("convnext_tiny", 128, "amp-bf16", "nhwc", True), ("swin_t", 128, "amp-bf16", "nchw", True)]


def run(case: tuple[str, int, str, str, bool], dev: str, smoke: bool) -> dict[str, Any]:
    name, batch, precision, layout, train = case
    batch, size = (2, 64) if smoke else (batch, 224)
    model = build_image(name).to(dev).train(train)
    x = torch.randn(batch, 3, size, size, device=dev)
    if layout == "nhwc":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True) if train else None
    dtype = AMP[precision]
    kind = dev.split(":")[0]

    def step() -> None:
        if opt is None:
            with torch.no_grad(), torch.autocast(kind, dtype or torch.float32, enabled=dtype is not None):
                model(x)
            return
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    cuda = dev.startswith("cuda")
    for _ in range(4):
        step()
    if cuda:
        torch.cuda.synchronize()
    steps = 3
    t = time.perf_counter()
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / steps
    kernels: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if cuda and ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if not cuda and ev.cpu_parent is not None:
            continue
        k = kernels[ev.name]
        k[0] += (ev.device_time if cuda else ev.cpu_time) / 1e3 / steps  # ms per step
        k[1] += 1 / steps
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])
    out = {"model": name, "batch": batch, "precision": precision, "layout": layout, "train": train,
           "wall_ms_profiled": wall * 1e3, "kernel_ms": sum(v[0] for v in kernels.values()),
           "kernels": [{"name": k, "ms": v[0], "calls": v[1]} for k, v in top]}
    print(f"\n{name} b={batch} {precision} {layout} {'train' if train else 'infer'}: wall {wall * 1e3:.2f} ms/step "
          f"(profiled), kernels {out['kernel_ms']:.2f} ms/step", flush=True)
    for k, v in top[:30]:
        print(f"  {v[0]:8.3f} ms x{v[1]:5.0f}  {k[:150]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu-profile.json"))
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    results = []
    for case in CASES[:2] if args.smoke else CASES:
        try:
            results.append(run(case, args.device, args.smoke))
        except Exception as e:  # one case's failure must not lose the others
            results.append({"case": list(case), "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"{case}: {type(e).__name__}: {e}", flush=True)
        free(args.device)
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(json.dumps({"torch": torch.__version__, "cases": results}, indent=1))
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
