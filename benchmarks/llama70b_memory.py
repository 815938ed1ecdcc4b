"""Training memory of a Llama-3-70B-shaped model (AdamW, bf16-mixed, 1 x 2048 tokens).

footprint (``footprint memory ... --train --optimizer adamw --precision bf16-mixed``, as a
whole process) against torch's own MemTracker (torch.distributed._tools.mem_tracker) over
the same step under FakeTensorMode, as a whole process, in the same run: wall time, peak
RSS, and the peak each reports. The weights, gradients and optimizer-state parts are
checked against the closed-form bytes per parameter (4 + 4 + 8, plus a 4-byte step
counter per parameter tensor).

    python benchmarks/llama70b_memory.py [--skip-reference]

Targets: at least 14x faster than MemTracker; peak RSS under 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _process import timed_process

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "configs" / "llama3-70b"

REFERENCE = f"""
import json, sys, torch, transformers
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
config = transformers.AutoConfig.from_pretrained({str(CONFIG)!r})
with FakeTensorMode():
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ids = torch.zeros(1, 2048, dtype=torch.long)
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, use_cache=False).logits.sum()
        loss.backward()
        opt.step()
    snap = tracker.get_tracker_snapshot("peak")
print("REFERENCE", json.dumps({{str(k): {{str(c): int(b) for c, b in v.items()}} for k, v in snap.items()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-reference", action="store_true", help="only footprint (MemTracker takes minutes)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mem.json"
        cmd = [sys.executable, "-m", "torch_footprint", "memory", str(CONFIG), "--input-ids", "1,2048", "--train",
               "--optimizer", "adamw", "--precision", "bf16-mixed", "--json", str(out)]
        wall, rss, _ = timed_process(cmd)
        data = json.loads(out.read_text())
    peak = data["peak"]
    persistent = peak["persistent"]
    import torch_footprint as tfp

    prof = tfp.profile(str(CONFIG), {"input_ids": "1,8:int64"})
    p, tensors = prof.params, len(prof.trace.params)
    expected = {"weights": 4 * p, "gradients": 4 * p, "optimizer state": 8 * p + 4 * tensors}
    print(f"footprint   {wall:8.1f} s  {rss:7.0f} MiB RSS  peak {peak['peak_bytes'] / 2**30:8.1f} GiB "
          f"({peak['phase']}, {peak['module'] or '<root>'})")
    for k, v in expected.items():
        got = persistent[k]
        verdict = "equal" if got == v else "DIFFER"
        print(f"  {k:16s} {got / 2**30:9.2f} GiB  closed form {v / 2**30:9.2f} GiB  {verdict}")
    if not args.skip_reference:
        rwall, rrss, text = timed_process([sys.executable, "-c", REFERENCE])
        snap = json.loads(text.split("REFERENCE", 1)[1].splitlines()[0])
        totals = {dev: cats.get("Total", sum(cats.values())) for dev, cats in snap.items()}
        ref_peak = max(totals.values())
        print(f"MemTracker  {rwall:8.1f} s  {rrss:7.0f} MiB RSS  peak {ref_peak / 2**30:8.1f} GiB")
        print(f"\nspeed-up {rwall / wall:.1f}x (target >= 14x); footprint RSS {rss / 1024:.2f} GiB (target < 2 GiB); "
              f"peaks differ by {100 * (peak['peak_bytes'] - ref_peak) / ref_peak:+.1f}%")


if __name__ == "__main__":
    main()
