"""Where CPU time goes, per kind of operator: torch.profiler against the prediction.

For each model and batch: the prediction after a calibration (``tfp.predict`` on "cpu"),
grouped by the kind of operator the CPU model prices (estimate/kernels/cpu.py), next to
torch.profiler's time of the model's top-level aten operators (their own time and their
children's) grouped the same way, on one thread. What the profiler does not see (Python
module calls between operators) is reported as "outside operators" beside the model's
wall time; the profiler's own cost per operator inflates the measured side a little.

    python benchmarks/cpu_op_profile.py --models resnet18,mobilenet_v2 [--batches 1,4] [--json PATH]
"""

from __future__ import annotations

import argparse
import difflib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("KINETO_LOG_LEVEL", "5")
os.environ.setdefault("TORCH_FOOTPRINT_HOME", tempfile.mkdtemp(prefix="footprint-cpu-profile-"))

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch_footprint as tfp  # noqa: E402

_HOME = os.environ["TORCH_FOOTPRINT_HOME"]
import validate_cpu  # noqa: E402  (it points TORCH_FOOTPRINT_HOME at a scratch folder of its own)

os.environ["TORCH_FOOTPRINT_HOME"] = _HOME
from torch_footprint.estimate.kernels.cpu import op_kind  # noqa: E402
from torch_footprint.estimate.kernels.roofline import estimate_latency  # noqa: E402


def measured_kind(name: str, shapes: list[Any]) -> str:
    """The kind of a profiled top-level operator; a convolution whose weight is (C, 1, k, k)
    on an input of C channels is depthwise."""
    kind = op_kind(name)
    if kind == "convolution" and len(shapes) > 1 and len(shapes[1]) == 4 and shapes[1][1] == 1 \
            and len(shapes[0]) == 4 and shapes[0][1] == shapes[1][0] and shapes[0][1] > 1:
        return "depthwise"
    return kind


class OpClock:
    """Thread CPU time of every aten operator the model dispatches, in order (a dispatch mode:
    the same operators, at the same level, as the tool's trace)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        clock = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                t = time.thread_time()
                out = func(*args, **(kwargs or {}))
                clock.ops.append((str(func), time.thread_time() - t))
                return out

        self.ops: list[tuple[str, float]] = []
        self.mode = Mode


def profile_model(name: str, batch: int, reps: int) -> dict[str, Any]:
    model = validate_cpu.build(name).eval()
    size = getattr(model, "default_cfg", {}).get("input_size", (3, 224, 224))
    x = torch.randn(batch, *size)
    runs: list[list[tuple[str, float]]] = []
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        walls = []
        for _ in range(reps):
            t = time.thread_time()
            model(x)
            walls.append(time.thread_time() - t)
            clock = OpClock()
            with clock.mode():
                model(x)
            runs.append(clock.ops)
    names = [n for n, _ in runs[0]]
    per_op = [statistics.median(run[i][1] for run in runs) for i in range(len(names))]
    profile_ = tfp.profile(name, f"{batch},{','.join(map(str, size))}")
    pred = estimate_latency(profile_.trace, tfp.hardware.get("cpu"))
    events = profile_.trace.events
    # the dispatched operators are at times the composites the trace decomposes (conv2d and
    # convolution, linear and addmm): the two lists are aligned by kind of operator, and the
    # operators matched are compared one to one
    traced = [op_kind(e.op) for e in events]
    dispatched = [op_kind(n) for n in names]
    rows = []
    matcher = difflib.SequenceMatcher(a=traced, b=dispatched, autojunk=False)
    for block in matcher.get_matching_blocks():
        for j in range(block.size):
            o, m = pred.ops[block.a + j], per_op[block.b + j]
            e = events[o.index]
            if o.kind == "view" or not (e.flops or e.bytes_read + e.bytes_written):
                continue
            k = op_kind(e.op, e.problem)
            extra = pred.ceilings.extra_overhead.get(k, 0.0)
            rows.append({"op": e.op, "kind": k, "problem": list(e.problem or []), "flops": e.flops,
                         "bytes": e.bytes_read + e.bytes_written, "out_shapes": [list(s) for s in e.out_shapes],
                         "measured_s": m, "device_s": o.device_s, "compute_s": o.compute_s, "memory_s": o.memory_s,
                         "extra_s": extra, "overhead_s": o.overhead_s})
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in rows:
        b = by_kind[r["kind"]]
        b[0] += r["measured_s"]
        b[1] += r["device_s"] + r["extra_s"]
        b[2] += r["overhead_s"]
        b[3] += 1
    return {"model": name, "batch": batch, "wall_s": statistics.median(walls), "predicted_s": pred.time_s,
            "ops_measured_s": sum(per_op), "matched_s": sum(r["measured_s"] for r in rows), "traced_ops": len(traced),
            "dispatched_ops": len(names), "ops": rows, "by_kind": dict(by_kind),
            "generic_overhead_s": pred.ceilings.overhead}


def show(r: dict[str, Any]) -> None:
    print(f"\n{r['model']} batch {r['batch']}: measured {r['wall_s'] * 1e3:.1f} ms, operators alone "
          f"{r['ops_measured_s'] * 1e3:.1f} ms; predicted {r['predicted_s'] * 1e3:.1f} ms "
          f"({r['dispatched_ops']} operators dispatched, {r['traced_ops']} traced, {len(r['ops'])} matched: "
          f"{r['matched_s'] * 1e3:.1f} ms)")
    print(f"  {'kind':12s} {'measured':>10s} {'pred kernel':>11s} {'pred ovh':>9s} {'ops':>5s}  measured/kernel")
    for k, (m, d, o, n) in sorted(r["by_kind"].items(), key=lambda kv: -kv[1][0]):
        print(f"  {k:12s} {m * 1e3:8.2f}ms {d * 1e3:9.2f}ms {o * 1e3:7.2f}ms {int(n):5d}  {m / d if d else 0:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--batches", default="1")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-calibrate", action="store_true", help="use the calibration of TORCH_FOOTPRINT_HOME")
    ap.add_argument("--json")
    args = ap.parse_args()
    validate_cpu.use_thread_cpu_time()
    if not args.no_calibrate:
        tfp.calibrate("cpu", force=True, quick=True)
    rows = []
    for name in args.models.split(","):
        for b in map(int, args.batches.split(",")):
            rows.append(profile_model(name, b, args.reps))
            show(rows[-1])
    if args.json:
        from torch_footprint.files import write_json

        write_json(Path(args.json), {"rows": rows, "torch": torch.__version__})


if __name__ == "__main__":
    main()
