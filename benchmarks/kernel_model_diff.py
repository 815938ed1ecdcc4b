"""The per-kernel model against the flat roofline it replaced, on every GPU of the database.

For each GPU row priced from its datasheet, three workloads predicted both ways: the flat
roofline (the datasheet peaks times 0.7 for matrix work, 0.5 vector, 0.85 memory, 10 us
added per operator) and the per-kernel model (estimate/kernels: power-limited clocks,
waves of tiles, FlashAttention's share, bandwidth by memory kind, the host's dispatch
overlapped with the device). Printed: both times, and what moved.

    python benchmarks/kernel_model_diff.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch_footprint as tfp  # noqa: E402

FLAT = ("matrix=0.7", "vector=0.5", "memory=0.85")
WORKLOADS = [
    ("resnet50 inference, 64 images, fp16 autocast", "resnet50", "64,3,224,224", {"precision": "fp16-mixed"}),
    ("resnet50 training, 256 images, fp16 autocast, SGD", "resnet50", "256,3,224,224",
     {"precision": "fp16-mixed", "train": True, "optimizer": "momentum-foreach"}),
    ("GPT-2 training, 8 x 1024 tokens, bf16 autocast, AdamW", "hf:gpt2", {"input_ids": "8,1024:int64"},
     {"precision": "bf16-mixed", "train": True, "optimizer": "adamw-fused"}),
]


def main() -> None:
    profiles = [(label, tfp.profile(model, inputs, **kw)) for label, model, inputs, kw in WORKLOADS]
    for label, prof in profiles:
        print(f"\n{label}")
        print(f"  {'GPU':22s} {'flat':>10s} {'per-kernel':>11s} {'moved':>7s}")
        for acc in tfp.gpus():
            if acc.kind != "gpu" or acc.bandwidth is None:
                continue
            old = tfp.predict(prof, acc, efficiency=FLAT).time_s
            new = tfp.predict(prof, acc).time_s
            print(f"  {acc.id:22s} {old * 1e3:8.2f} ms {new * 1e3:9.2f} ms {100 * (new / old - 1):+6.1f}%")


if __name__ == "__main__":
    main()
