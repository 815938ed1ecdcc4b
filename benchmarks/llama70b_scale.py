"""Scale: a Llama-3-70B-shaped model, forward + backward at 2048 tokens, as whole processes.

footprint (the command, as a user runs it) against a plain Python process that builds the
same model on the meta device and runs torch's FlopCounterMode over forward and backward.
Both are measured in this run, alternating, as whole processes: wall time and peak RSS.

    python benchmarks/llama70b_scale.py [--repeat 3]

Targets: footprint within 1.5x the reference's wall time and 1.25x its peak RSS.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _process import compare

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "configs" / "llama3-70b"

REFERENCE = f"""
import torch, transformers
from torch.utils.flop_counter import FlopCounterMode
import transformers.masking_utils as mu
# meta tensors cannot answer transformers' packed-sequence check; positions 0..T-1 are not packed
mu.find_packed_sequence_indices = lambda position_ids: None
config = transformers.AutoConfig.from_pretrained({str(CONFIG)!r})
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
ids = torch.empty(1, 2048, dtype=torch.long, device="meta")
with FlopCounterMode(display=False) as counter:
    logits = model(input_ids=ids, use_cache=False).logits
    logits.sum().backward()
print("reference FLOPs", counter.get_total_flops())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    footprint = [sys.executable, "-m", "torch_footprint", "profile", str(CONFIG), "--input-ids", "1,2048",
                 "--backward", "--depth", "1"]
    reference = [sys.executable, "-c", REFERENCE]
    compare({"footprint": footprint, "FlopCounterMode (meta)": reference}, "FlopCounterMode (meta)", args.repeat)
    print("\ntargets: footprint time ratio <= 1.50x, RSS ratio <= 1.25x")


if __name__ == "__main__":
    main()
