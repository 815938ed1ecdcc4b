"""A repeated block traced once: how much sooner, and is the trace the same.

``speed`` (the default): Llama-3-70B as whole processes, alternating: ``footprint profile``
forward and backward at 2048 tokens with block reuse (the default) and with ``--no-reuse``,
the same for a forward alone, and a plain Python process running torch's FlopCounterMode on
meta over the forward and backward (it traces every layer). Wall time and peak RSS, medians
and ratios. Then the trace stage alone, in this process, with and without reuse, on 8B, 70B
and 405B Llama shapes (CPU time, alternating).

``exact``: every shipped Hugging Face config, the benchmarks' and the tests' config folders and
a set of torchvision models, each traced in one process with and without reuse (forward, eval
mode; with ``--train``, a training step: forward, backward and AdamW, train mode, with ``--ac full``
or ``--ac selective`` each repeated block checkpointed and with ``--precision bf16-mixed`` under
autocast on fake tensors); the two traces compared record by record. Prints each model's calls
recorded and replayed, both trace times, and the count of models whose traces are identical.
``--only WORD``: the models whose name holds one of the words (comma-separated). ``exact --llm``:
the serving trace of ``footprint llm`` (a prefill and two decode steps with the model's own
cache), with and without reuse, for every language model config.

``process``: the whole-process targets, each process against its floor, alternating, by CPU
seconds (user + system: on a shared machine far steadier than wall time): the
Llama-3-70B training step's profile against torch's FlopCounterMode on meta (which traces every
layer), Llama-3.1-405B's against Llama-3.1-8B's, ``footprint llm`` on DeepSeek-V3 (every
accelerator) against a process that only imports torch and transformers, and ``footprint profile
resnet50`` (and with ``--no-reuse``) against one that only imports torch and torchvision. Beside
them, what any tracer of DeepSeek-V3 must do before its first operator, against the same floor:
import transformers' modeling module for it, and (as a user's script would) build the model on
meta. Medians, their ratios and the ratio of each round.

    python benchmarks/block_reuse.py [speed|exact|process] [--train] [--ac none|full|selective] [--llm]
        [--precision fp32|bf16-mixed] [--only WORDS] [--repeat 3] [--tokens 2048]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from _process import compare, timed_process_cpu

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


PAIRS = (  # (what, command, floor, target ratio)
    ("Llama-3-70B fwd+bwd, 1x2048, CLI", "FlopCounterMode fwd+bwd on meta", 0.5),
    ("Llama-3.1-405B fwd+bwd, 1x2048, CLI", "Llama-3.1-8B fwd+bwd, 1x2048, CLI", 1.2),
    ("footprint llm DeepSeek-V3", "import torch, transformers", 1.5),
    ("footprint profile resnet50", "import torch, torchvision", 1.05),
    ("footprint profile resnet50 --no-reuse", "import torch, torchvision", None),
    ("import DeepSeek-V3's modeling module", "import torch, transformers", None),
    ("DeepSeek-V3 built on meta, nothing more", "import torch, transformers", None),
)

BUILD = """
import json, sys, torch, transformers
config = transformers.AutoConfig.for_model(**json.load(open(sys.argv[1])))
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
"""


def process(repeat: int, tokens: int) -> None:
    """Whole processes, alternating, each against its floor: the ratios the targets name, by the
    processes' CPU seconds (user + system; their wall seconds are printed too)."""
    py = sys.executable
    cli = [py, "-m", "torch_footprint"]
    train = ["--input-ids", f"1,{tokens}", "--depth", "1", "--train"]
    bench = ROOT / "benchmarks" / "configs"
    commands = {
        PAIRS[0][0]: [*cli, "profile", str(CONFIG), *train],
        PAIRS[0][1]: [py, "-c", REFERENCE, str(CONFIG), str(tokens)],
        PAIRS[1][0]: [*cli, "profile", str(bench / "meta-llama--Llama-3.1-405B"), *train],
        PAIRS[1][1]: [*cli, "profile", "hf:meta-llama/Llama-3.1-8B", *train],
        PAIRS[2][0]: [*cli, "llm", "hf:deepseek-ai/DeepSeek-V3"],
        PAIRS[2][1]: [py, "-c", "import torch, transformers"],
        PAIRS[3][0]: [*cli, "profile", "resnet50"],
        PAIRS[3][1]: [py, "-c", "import torch, torchvision"],
        PAIRS[4][0]: [*cli, "profile", "resnet50", "--no-reuse"],
        PAIRS[5][0]: [py, "-c", "import torch, transformers.models.deepseek_v3.modeling_deepseek_v3"],
        PAIRS[6][0]: [py, "-c", BUILD, str(SHIPPED / "deepseek-ai--DeepSeek-V3.json")],
    }
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(repeat):
        for name, cmd in commands.items():
            wall, cpu, rss, _ = timed_process_cpu(cmd)
            cpus[name].append(cpu)
            print(f"run {i + 1} {name:40s} {cpu:7.2f} s CPU {wall:7.2f} s wall {rss:7.0f} MiB", flush=True)
    print(f"\n{'process':40s} {'against':36s} {'median':>8s} {'floor':>8s} {'ratio':>6s} {'target':>7s} "
          "per-round ratios (CPU seconds)")
    for name, floor, target in PAIRS:
        a, b = statistics.median(cpus[name]), statistics.median(cpus[floor])
        rounds = " ".join(f"{x / y:.2f}" for x, y in zip(cpus[name], cpus[floor]))
        goal = f"{target:6.2f}x" if target else "      -"
        print(f"{name:40s} {floor:36s} {a:7.2f}s {b:7.2f}s {a / b:6.2f} {goal}  {rounds}")


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


def exact(train: bool = False, ac: str = "none", precision: str = "fp32", only: str | None = None) -> None:
    from torch_footprint.sources import prepare
    from torch_footprint.trace import StepOptions, reuse, setups, trace_model

    same = tried = 0
    _, autocast = setups.precision(precision)
    step = StepOptions(setups.optimizer("adamw"), autocast) if train else StepOptions(autocast=autocast)
    print(f"training steps (forward, backward, AdamW; train mode; --ac {ac}; {precision})" if train
          else f"inference (forward, eval mode; {precision})")
    print(f"{'model':52s} {'events':>7s} {'recorded':>8s} {'replayed':>8s} {'full s':>7s} {'reuse s':>7s}  identical")
    words = only.split(",") if only else None
    for name, inputs in _models():
        if words and not any(w in name for w in words):
            continue
        label = name if len(name) <= 52 else "..." + name[-49:]
        undo: Any = lambda: None  # noqa: E731
        try:
            work = prepare(name, inputs)
            work.model.train(train)
            if train and ac != "none":
                _, undo = setups.enable_checkpointing(work.model, selective=ac == "selective")
            with work.built.trace_context():
                t0 = time.perf_counter()
                full = trace_model(work.model, work.make_inputs(), reuse=False, backward=train, step=step)
                t1 = time.perf_counter()
                fast = trace_model(work.model, work.make_inputs(), reuse=True, backward=train, step=step)
                t2 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - a model this machine cannot build: listed, not counted
            print(f"{label:52s} skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
            if "--debug" in sys.argv:
                traceback.print_exc()
            continue
        finally:
            undo()
        tried += 1
        ok = fast.to_dict() == full.to_dict()
        same += ok
        print(f"{label:52s} {len(full.events):7d} {reuse.LAST.recorded:8d} {reuse.LAST.replayed:8d} "
              f"{t1 - t0:7.2f} {t2 - t1:7.2f}  {'yes' if ok else 'NO'}"
              f"{' (re-traced without reuse)' if reuse.LAST.retraced else ''}", flush=True)
    print(f"\n{same} of {tried} models: reused and full traces identical (every event, free, module and tag)")
    if same != tried:
        raise SystemExit(1)


def exact_llm(only: str | None = None) -> None:
    """The serving trace (a prefill of 32 tokens, two decode steps with the model's own cache) with
    and without reuse, for every causal language model config: identical traces and cache layout."""
    from torch_footprint.estimate.llm.trace import trace_serving
    from torch_footprint.trace import reuse

    counts: list[tuple[int, int]] = []
    original = reuse.BlockReuse.remove

    def remove(self: Any) -> None:  # the end of each traced run: its counts
        counts.append((reuse.LAST.recorded, reuse.LAST.replayed))
        original(self)

    reuse.BlockReuse.remove = remove  # type: ignore[method-assign]
    same = tried = 0
    words = only.split(",") if only else None
    print("serving traces (prefill 1x32, two decode steps; the model's cache): calls recorded/replayed per trace")
    print(f"{'model':52s} {'events':>7s} {'prefill':>8s} {'decode':>8s} {'full s':>7s} {'reuse s':>7s}  identical")
    for name, inputs in _models():
        if inputs is None or (words and not any(w in name for w in words)):
            continue
        label = name if len(name) <= 52 else "..." + name[-49:]
        try:
            t0 = time.perf_counter()
            full = trace_serving(name, batch=1, prompt=32, reuse=False)
            t1 = time.perf_counter()
            counts.clear()
            fast = trace_serving(name, batch=1, prompt=32)
            t2 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - not a causal LM with a cache, or not buildable here
            print(f"{label:52s} skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
            continue
        tried += 1
        pairs = zip((fast.prefill, *fast.decode), (full.prefill, *full.decode))
        ok = (all(x.to_dict() == y.to_dict() for x, y in pairs)
              and fast.layers == full.layers and fast.op_layer == full.op_layer and fast.notes == full.notes)
        same += ok
        pre, dec = (counts + [(0, 0)] * 2)[:2]
        print(f"{label:52s} {len(full.prefill.events):7d} {pre[0]:3d}/{pre[1]:<4d} {dec[0]:3d}/{dec[1]:<4d} "
              f"{t1 - t0:7.2f} {t2 - t1:7.2f}  {'yes' if ok else 'NO'}", flush=True)
    reuse.BlockReuse.remove = original  # type: ignore[method-assign]
    print(f"\n{same} of {tried} models: serving traces with and without reuse identical (every event, free, "
          "module and tag of the prefill and both decode steps; the cache's layout)")
    if same != tried:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", choices=("speed", "exact", "process"), default="speed")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--train", action="store_true", help="exact: training steps instead of forwards")
    ap.add_argument("--ac", choices=("none", "full", "selective"), default="none",
                    help="exact --train: checkpoint each repeated block (the model's own switch where it has one)")
    ap.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32",
                    help="exact: fp32, or bf16-mixed (fp32 weights, the step under autocast, on fake tensors)")
    ap.add_argument("--llm", action="store_true",
                    help="exact: the serving trace (prefill and decode steps with the model's cache) instead")
    ap.add_argument("--only", help="exact: only the models whose name holds one of these comma-separated words")
    ap.add_argument("--debug", action="store_true", help="print the traceback of a model that is skipped")
    args = ap.parse_args()
    if args.mode == "exact" and args.llm:
        exact_llm(args.only)
    elif args.mode == "exact":
        exact(args.train, args.ac, args.precision, args.only)
    elif args.mode == "process":
        process(args.repeat, args.tokens)
    else:
        speed(args.repeat, args.tokens)


if __name__ == "__main__":
    main()
