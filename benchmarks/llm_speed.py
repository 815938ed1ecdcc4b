"""Speed of `footprint llm`: Llama-3.1-70B over the whole accelerator database, as a whole
process, against a plain process that builds the same model on the meta device and runs
torch's FlopCounterMode over one forward of the same prompt length (1,024 tokens, the
command's default). Both measured in this run, alternating: wall time and peak RSS.

    python benchmarks/llm_speed.py [--repeat 3]

Target: footprint within 2x the reference's wall time and 1.25x its peak RSS.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _process import compare

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "src" / "torch_footprint" / "sources" / "configs" / "meta-llama--Llama-3.1-70B.json"

REFERENCE = f"""
import json, torch, transformers
from torch.utils.flop_counter import FlopCounterMode
import transformers.masking_utils as mu
# meta tensors cannot answer transformers' packed-sequence check; positions 0..T-1 are not packed
mu.find_packed_sequence_indices = lambda position_ids: None
config = transformers.AutoConfig.for_model(**json.load(open({str(CONFIG)!r})))
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
ids = torch.empty(1, 1024, dtype=torch.long, device="meta")
with FlopCounterMode(display=False) as counter, torch.no_grad():
    model(input_ids=ids, use_cache=False)
print("reference FLOPs", counter.get_total_flops())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    footprint = [sys.executable, "-m", "torch_footprint", "llm", "hf:meta-llama/Llama-3.1-70B"]
    reference = [sys.executable, "-c", REFERENCE]
    compare({"footprint llm": footprint, "FlopCounterMode (meta)": reference}, "FlopCounterMode (meta)", args.repeat)
    print("\ntargets: footprint llm time ratio <= 2.00x, RSS ratio <= 1.25x")


if __name__ == "__main__":
    main()
