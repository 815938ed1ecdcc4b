"""Is pricing as fast as it was? `predict` and `fit` on a 70B training step, this tree against
another commit's, alternating in one process.

The other commit's ``src/torch_footprint`` is exported (``git archive``) and imported as
``torch_footprint_ref`` (benchmarks/profile_time_ab.py does the same for profiling). Both
versions trace and price the same step: Llama-3.1-70B (the shipped config), 2,048 tokens,
forward, backward and an AdamW step, on the meta device. Timed, ``--rounds`` times each,
alternating which version goes first:

* ``predict`` on an H100 SXM, the whole call (trace and price);
* ``fit`` over every accelerator of the database, the whole call;
* the pricing alone: one step's trace (traced once by this tree) priced on every accelerator
  with a datasheet row, by each version's ``estimate_latency``.

Times are this process's CPU time (one torch thread), which other processes on a shared
machine disturb far less than the wall clock. Per case the fastest round counts; the ratio is
this tree's over the reference's.

    python benchmarks/pricing_speed_ab.py [--ref 75ef52f] [--rounds 3]

Target: this tree's `predict` and `fit` no slower than the reference's (ratio <= 1.0, within
the machine's drift).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
MODEL = "hf:meta-llama/Llama-3.1-70B"
STEP: dict[str, Any] = {"train": True, "optimizer": "adamw"}


def export_ref(ref: str, into: Path) -> str:
    """``src/torch_footprint`` at ``ref``, as the package ``torch_footprint_ref`` under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src/torch_footprint"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "src" / "torch_footprint").rename(into / "torch_footprint_ref")
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


def seconds(fn: Callable[[], object]) -> float:
    """CPU seconds this process spends in ``fn`` (one thread: other processes on a shared
    machine slow the wall clock, much less this)."""
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="75ef52f", help="the commit to compare with (default: before the kernel model)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="footprint-ab-"))
    ref = export_ref(args.ref, tmp)
    sys.path.insert(0, str(tmp))
    import torch
    import torch_footprint_ref as old
    from torch_footprint_ref.estimate.kernels.roofline import estimate_latency as old_price

    import torch_footprint as new
    from torch_footprint.estimate.kernels.roofline import estimate_latency as new_price
    from torch_footprint.hardware.catalog import load

    torch.set_num_threads(1)
    inputs = "1,2048:int64"
    trace = new.profile(MODEL, inputs, **STEP).trace
    rows = [a for a in load() if a.bandwidth_gbs is not None and a.kind != "cpu"]
    cases: dict[str, dict[str, Callable[[], object]]] = {
        "predict h100-sxm (trace and price)": {
            "ref": lambda: old.predict(MODEL, "h100-sxm", inputs, **STEP),
            "new": lambda: new.predict(MODEL, "h100-sxm", inputs, **STEP)},
        "fit, every accelerator (trace and price)": {
            "ref": lambda: old.fit(MODEL, inputs, **STEP),
            "new": lambda: new.fit(MODEL, inputs, **STEP)},
        f"pricing alone, {len(rows)} accelerators": {
            "ref": lambda: [old_price(trace, a) for a in rows],
            "new": lambda: [new_price(trace, a) for a in rows]},
    }
    print(f"this tree against {ref}; {MODEL} {inputs}, forward + backward + AdamW; {len(trace.events)} operators; "
          f"{args.rounds} rounds alternating, one torch thread")
    best: dict[str, dict[str, float]] = {name: {} for name in cases}
    for r in range(args.rounds):
        for name, fns in cases.items():
            order = ("ref", "new") if r % 2 == 0 else ("new", "ref")
            for label in order:
                t = seconds(fns[label])
                best[name][label] = min(best[name].get(label, t), t)
                print(f"round {r + 1} {name:42s} {label}: {t:7.2f} s", flush=True)
    print()
    for name, b in best.items():
        print(f"{name:42s} reference {b['ref']:7.2f} s, this tree {b['new']:7.2f} s: ratio {b['new'] / b['ref']:.3f}")
    print("target: ratio <= 1.0 for predict and fit")


if __name__ == "__main__":
    main()
