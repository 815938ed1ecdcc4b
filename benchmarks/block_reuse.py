"""A repeated block traced once: how much sooner, and is the trace the same.

``speed`` (the default): Llama-3-70B as whole processes, alternating: ``footprint profile``
forward and backward at 2048 tokens with block reuse (the default) and with ``--no-reuse``,
the same for a forward alone, and a plain Python process running torch's FlopCounterMode on
meta over the forward and backward (it traces every layer). Wall time and peak RSS, medians
and ratios. Then the trace stage alone, in this process, with and without reuse, on 8B, 70B
and 405B Llama shapes (CPU time, alternating).

``exact``: every shipped Hugging Face config, the benchmarks' and the tests' config folders and
a set of torchvision models, each traced in one process with and without reuse (forward, eval
mode); the two traces compared record by record. Prints each model's calls recorded and
replayed, both trace times, and the count of models whose traces are identical.

    python benchmarks/block_reuse.py [speed|exact] [--repeat 3] [--tokens 2048]

Replay covers inference on meta tensors; a training step (forward and backward) traces
every call, so its reuse and --no-reuse rows measure the same work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

from _process import compare

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "configs" / "llama3-70b"
SHIPPED = ROOT / "src" / "torch_footprint" / "sources" / "configs"
VISION = ("resnet50", "resnet18", "vit_b_16", "convnext_tiny", "swin_t", "mobilenet_v2", "densenet121",
          "efficientnet_b0", "regnet_y_400mf", "vgg16", "inception_v3", "maxvit_t")

REFERENCE = """
import sys, torch, transformers
from torch.utils.flop_counter import FlopCounterMode
import transformers.masking_utils as mu
# meta tensors cannot answer transformers' packed-sequence check; positions 0..T-1 are not packed
mu.find_packed_sequence_indices = lambda position_ids: None
config = transformers.AutoConfig.from_pretrained(sys.argv[1])
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
ids = torch.empty(1, int(sys.argv[2]), dtype=torch.long, device="meta")
with FlopCounterMode(display=False) as counter:
    logits = model(input_ids=ids, use_cache=False).logits
    logits.sum().backward()
print("reference FLOPs", counter.get_total_flops())
"""


def speed(repeat: int, tokens: int) -> None:
    profile = [sys.executable, "-m", "torch_footprint", "profile", str(CONFIG), "--input-ids", f"1,{tokens}",
               "--depth", "1"]
    commands = {
        "fwd+bwd reuse": [*profile, "--train"],
        "fwd+bwd --no-reuse": [*profile, "--train", "--no-reuse"],
        "fwd reuse": profile,
        "fwd --no-reuse": [*profile, "--no-reuse"],
        "FlopCounterMode fwd+bwd": [sys.executable, "-c", REFERENCE, str(CONFIG), str(tokens)],
    }
    print(f"Llama-3-70B shape ({CONFIG.relative_to(ROOT)}), 1x{tokens} tokens, whole processes, alternating\n")
    compare(commands, "FlopCounterMode fwd+bwd", repeat)
    print(f"\nthe trace stage alone (trace_model, a forward at 1x{tokens}), CPU seconds of this process, "
          f"alternating, median of {max(repeat, 5)}")
    rows = []
    for name in ("meta-llama--Meta-Llama-3-8B", "meta-llama--Llama-2-70b-hf", "meta-llama--Llama-3.1-405B"):
        rows.append((name, *_trace_times(ROOT / "benchmarks" / "configs" / name, tokens, max(repeat, 5))))
    print(f"{'model':32s} {'reuse':>8s} {'--no-reuse':>10s} {'ratio':>6s}")
    for name, fast, full in rows:
        print(f"{name:32s} {fast:7.2f}s {full:9.2f}s {fast / full:6.2f}")
    print(f"reuse: Llama-3.1-405B / Meta-Llama-3-8B trace time {rows[2][1] / rows[0][1]:.2f}x "
          f"(--no-reuse {rows[2][2] / rows[0][2]:.2f}x)")


def _trace_times(config: Path, tokens: int, repeat: int) -> tuple[float, float]:
    """Median CPU seconds of one forward trace with reuse and with --no-reuse, alternating."""
    from torch_footprint.sources import prepare
    from torch_footprint.trace import trace_model

    work = prepare(str(config), f"1,{tokens}:int64")
    work.model.eval()
    times: dict[bool, list[float]] = {True: [], False: []}
    with work.built.trace_context():
        for _ in range(repeat):
            for reuse in (True, False):
                t = time.process_time()
                trace_model(work.model, work.make_inputs(), reuse=reuse)
                times[reuse].append(time.process_time() - t)
    return statistics.median(times[True]), statistics.median(times[False])


def _models() -> list[tuple[str, str | None]]:
    """(model, input) pairs: token ids for the language models, the default input for the others."""
    out: list[tuple[str, str | None]] = []
    for f in sorted(SHIPPED.glob("*.json")):
        out.append(("hf:" + f.stem.replace("--", "/"), "1,128:int64"))
    for folder in (ROOT / "benchmarks" / "configs", ROOT / "tests" / "configs"):
        for d in sorted(p for p in folder.iterdir() if (p / "config.json").exists()):
            out.append((str(d), "1,128:int64"))
    out += [(name, None) for name in VISION]
    return out


def exact() -> None:
    from torch_footprint.sources import prepare
    from torch_footprint.trace import reuse, trace_model

    same = tried = 0
    print(f"{'model':52s} {'events':>7s} {'recorded':>8s} {'replayed':>8s} {'full s':>7s} {'reuse s':>7s}  identical")
    for name, inputs in _models():
        label = name if len(name) <= 52 else "..." + name[-49:]
        try:
            work = prepare(name, inputs)
            work.model.eval()
            with work.built.trace_context():
                t0 = time.perf_counter()
                full = trace_model(work.model, work.make_inputs(), reuse=False)
                t1 = time.perf_counter()
                fast = trace_model(work.model, work.make_inputs(), reuse=True)
                t2 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - a model this machine cannot build: listed, not counted
            print(f"{label:52s} skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
            if "--debug" in sys.argv:
                traceback.print_exc()
            continue
        tried += 1
        ok = fast.to_dict() == full.to_dict()
        same += ok
        print(f"{label:52s} {len(full.events):7d} {reuse.LAST.recorded:8d} {reuse.LAST.replayed:8d} "
              f"{t1 - t0:7.2f} {t2 - t1:7.2f}  {'yes' if ok else 'NO'}", flush=True)
    print(f"\n{same} of {tried} models: reused and full traces identical (every event, free, module and tag)")
    if same != tried:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", choices=("speed", "exact"), default="speed")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--debug", action="store_true", help="print the traceback of a model that is skipped")
    args = ap.parse_args()
    if args.mode == "exact":
        exact()
    else:
        speed(args.repeat, args.tokens)


if __name__ == "__main__":
    main()
