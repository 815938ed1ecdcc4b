"""Tensor parallelism over every causal language model of the installed transformers: does one
rank's share trace, and is its attention and MLP work what a split says?

For each model type with a causal-LM class, a small config from the config class's defaults
(hidden 64, 4 heads of 16, 2 key/value heads, 2 layers, vocabulary 128) is traced as ``fit
--train`` traces it: whole, under ``--tp 2`` and under ``--tp 2 --sequence-parallel``. For
the split ones the forward multiply-accumulates inside the blocks' attention modules and MLPs
(paths naming ``attn``/``attention``/``mixer`` and ``mlp``/``feed_forward``) are compared with
the whole model's: half is what Megatron-LM's split does; whole means the part is replicated
on every rank (a mixture's experts under tensor parallelism alone, a state-space mixer); any
other ratio is a part split in part (multi-head latent attention duplicates its down
projections).

    python benchmarks/tp_coverage.py [--types a,b,c]

No peer prices tensor parallelism from the model itself: Megatron's, NVIDIA's and Calculon's
calculators take a transformer's shape, not its modules.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from collections import Counter

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 128, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0,
         "head_dim": 16}
PARTS = {"attention": ("attn", "attention", "mixer"), "mlp": ("mlp", "feed_forward")}


def _work(trace: object) -> dict[str, int]:
    out = dict.fromkeys(PARTS, 0)
    for e in trace.events:  # type: ignore[attr-defined]
        if e.phase != "forward":
            continue
        leaf = e.module.split(".")
        for part, words in PARTS.items():
            if any(any(w in piece for w in words) for piece in leaf):
                out[part] += e.macs
                break
    return out


def _share(whole: int, rank: int) -> str:
    if whole == 0:
        return "-"
    if 2 * rank == whole:
        return "half"
    return "whole" if rank == whole else f"{rank / whole:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="", help="only these model types (comma-separated)")
    args = ap.parse_args()
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from torch_footprint.errors import FootprintError
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.settings import Parallel, Training, Workload

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    only = {t for t in args.types.split(",") if t}
    tmp = tempfile.mkdtemp()
    train = Training(train=True, optimizer="adamw")
    tally: Counter[str] = Counter()
    print(f"transformers {transformers.__version__}; tiny configs, a training step at 2 x 16 tokens\n")
    print(f"{'model type':28s} {'--tp 2':10s} {'+ --sequence-parallel':22s} {'attention':>9s} {'mlp':>6s}  why not")
    for kind in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        if only and kind not in only:
            continue
        try:
            folder = os.path.join(tmp, kind)
            CONFIG_MAPPING[kind](**SMALL).save_pretrained(folder)
            work = Workload(folder, inputs={"input_ids": "2,16:int64"})
            whole = _work(trace_step(work, train)[0])
        except BaseException:  # noqa: BLE001 - a config the defaults cannot build, or a model that does not trace
            tally["not traced whole (config or model)"] += 1
            continue
        row, why, shares = [], "", ("", "")
        for parallel in (Parallel(gpus=2, tp=2), Parallel(gpus=2, tp=2, sequence_parallel=True)):
            try:
                rank = _work(trace_step(work, train, parallel)[0])
                row.append("ok")
                if not parallel.sequence_parallel:
                    shares = (_share(whole["attention"], rank["attention"]), _share(whole["mlp"], rank["mlp"]))
            except FootprintError as e:
                row.append("refused")
                text = " ".join(str(e).split())
                why = why or (text.split("(the model raised ", 1)[-1].rstrip(")")[:110])
            except Exception as e:  # noqa: BLE001 - what a user would see as a traceback
                row.append("CRASH")
                why = why or f"{type(e).__name__}: {e}"[:90]
        tally[f"--tp 2 {row[0]}"] += 1
        tally[f"--tp 2 --sequence-parallel {row[1]}"] += 1
        if row[0] == "ok":
            tally[f"attention {shares[0]}"] += 1
        print(f"{kind:28s} {row[0]:10s} {row[1]:22s} {shares[0]:>9s} {shares[1]:>6s}  {why}", flush=True)
    print()
    for key, n in sorted(tally.items()):
        print(f"{key:45s} {n:4d}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
