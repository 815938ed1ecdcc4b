"""The torchvision zoo through footprint and its peers, in one run.

For every classification model in torchvision (80), at its default weights' input size:
parameters and MACs against the published ``num_params`` and ``_ops``, and the time each
tool takes. Tools: footprint (meta device), torch's FlopCounterMode on the meta device,
thop, fvcore, ptflops and torchinfo (the ``bench`` extra; they need real tensors, so the
model is built for real and run once on the CPU).

    python benchmarks/peers.py [--models resnet50,vit_b_16] [--skip-real] [--cpu-time]
    python benchmarks/peers.py --processes [--repeat 3]

Time is the counting step alone (the model already built: on meta for footprint and
FlopCounterMode, on CPU for the others), summed over the models each tool finished; the
table also gives the ratio to footprint's time over the same models. Agreement: params
equal, and MACs equal to 3 decimals in GMACs. Before each timed call a full collection of
Python's cyclic collector, untimed, so that no tool pays for the garbage another left.

``--processes``: the meta-device tools as a user's loop would run them, each over the whole
zoo in a process of its own (build each model, count it, drop it), alternating, ``--repeat``
rounds; the CPU time of each loop less that of a loop that only builds the models. Every
collection the tool's objects cause falls inside its own process.

Targets: footprint no slower than FlopCounterMode on meta; at least 3x faster
than thop, fvcore and ptflops.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import io
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torchvision
from torch import nn

import torch_footprint as tfp
from torch_footprint.sources.building import real_weights
from torch_footprint.sources.models import build_torchvision, torchvision_weights


@dataclass
class Tally:
    seconds: dict[str, float] = field(default_factory=dict)
    params_ok: int = 0
    macs_ok: int = 0
    crashed: list[str] = field(default_factory=list)


def build_real(name: str) -> nn.Module:
    """The model as footprint's source builds it, with its constructor's random weights."""
    with real_weights():
        return build_torchvision(name).model.eval()


def build_meta(name: str) -> nn.Module:
    """The model as footprint's source builds it, on the meta device."""
    return build_torchvision(name).model.eval()


def run_footprint(model: nn.Module, size: int) -> tuple[int, int]:
    p = tfp.profile(model, f"1,3,{size},{size}")
    return p.params, p.macs


def run_flopcounter(model: nn.Module, size: int) -> tuple[int, int]:
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.empty(1, 3, size, size, device="meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    return sum(p.numel() for p in model.parameters()), counter.get_total_flops() // 2


def run_thop(model: nn.Module, size: int) -> tuple[int, int]:
    from thop import profile

    with torch.no_grad():
        macs, params = profile(model, inputs=(torch.randn(1, 3, size, size),), verbose=False)
    return int(params), int(macs)


def run_fvcore(model: nn.Module, size: int) -> tuple[int, int]:
    from fvcore.nn import FlopCountAnalysis, parameter_count

    with torch.no_grad():
        f = FlopCountAnalysis(model, torch.randn(1, 3, size, size))
        f.unsupported_ops_warnings(False)
        f.uncalled_modules_warnings(False)
        macs = f.total()  # fvcore counts one multiply-add as one "flop"
    return int(parameter_count(model)[""]), int(macs)


def run_ptflops(model: nn.Module, size: int) -> tuple[int, int]:
    from ptflops import get_model_complexity_info

    with torch.no_grad():
        macs, params = get_model_complexity_info(model, (3, size, size), as_strings=False,
                                                 print_per_layer_stat=False, verbose=False, backend="pytorch")
    return int(params), int(macs)


def run_torchinfo(model: nn.Module, size: int) -> tuple[int, int]:
    from torchinfo import summary

    s = summary(model, input_size=(1, 3, size, size), verbose=0)
    return int(s.total_params), int(s.total_mult_adds)


TOOLS: dict[str, tuple[Callable[[str], nn.Module], Callable[[nn.Module, int], tuple[int, int]]]] = {
    "footprint": (build_meta, run_footprint),
    "FlopCounterMode (meta)": (build_meta, run_flopcounter),
    "thop": (build_real, run_thop),
    "fvcore": (build_real, run_fvcore),
    "ptflops": (build_real, run_ptflops),
    "torchinfo": (build_real, run_torchinfo),
}


PEER_PACKAGES = {"thop": "thop", "fvcore": "fvcore", "ptflops": "ptflops", "torchinfo": "torchinfo"}


def _loop(tool: str) -> None:
    """One process's loop over the zoo: build each model on meta, count it with ``tool`` (or not,
    for "build"), drop it; prints the loop's CPU seconds (after one count, untimed, of ResNet-18:
    first-call imports and caches)."""
    names = torchvision.models.list_models(module=torchvision.models)
    count = dict(footprint=run_footprint, flopcounter=run_flopcounter).get(tool)
    if count is not None:
        count(build_meta("resnet18"), 224)  # first-call imports and caches, outside the loop's time
    start = time.process_time()
    for name in names:
        model = build_meta(name)
        if count is not None:
            count(model, torchvision_weights(name).transforms.keywords["crop_size"])
        del model
    print(time.process_time() - start)


def processes(repeat: int) -> None:
    """The meta-device tools' loops, each in a process of its own, alternating."""
    seconds: dict[str, list[float]] = {"build": [], "footprint": [], "flopcounter": []}
    for r in range(repeat):
        for tool in seconds:
            out = subprocess.run([sys.executable, __file__, "--loop", tool], capture_output=True, text=True,
                                 check=True)
            seconds[tool].append(float(out.stdout.split()[-1]))
        fp, fc = (seconds[t][-1] - seconds["build"][-1] for t in ("footprint", "flopcounter"))
        print(f"round {r + 1}: build {seconds['build'][-1]:.2f} s, footprint {fp:.2f} s, "
              f"FlopCounterMode {fc:.2f} s (beyond the build): {fp / fc:.2f}x", flush=True)
    med = {t: statistics.median(v) for t, v in seconds.items()}
    fp, fc = med["footprint"] - med["build"], med["flopcounter"] - med["build"]
    print(f"\nmedians over {repeat} rounds, CPU seconds of the whole zoo beyond building it: footprint {fp:.2f}, "
          f"FlopCounterMode on meta {fc:.2f}: footprint / FlopCounterMode {fp / fc:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated subset (default: all 80)")
    ap.add_argument("--processes", action="store_true", help="whole loops in processes of their own (see above)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of --processes")
    ap.add_argument("--loop", help=argparse.SUPPRESS)
    ap.add_argument("--skip-real", action="store_true", help="only the meta-device tools")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the counting by this process's CPU seconds, not wall (steadier on a shared machine)")
    args = ap.parse_args()
    if args.loop:
        warnings.filterwarnings("ignore")
        return _loop(args.loop)
    if args.processes:
        return processes(args.repeat)
    clock = time.process_time if args.cpu_time else time.perf_counter
    warnings.filterwarnings("ignore")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    names = args.models.split(",") if args.models else torchvision.models.list_models(module=torchvision.models)
    tools = {k: v for k, v in TOOLS.items() if not (args.skip_real and v[0] is build_real)}
    for tool in [t for t in tools if t in PEER_PACKAGES and importlib.util.find_spec(PEER_PACKAGES[t]) is None]:
        print(f"{tool}: not installed (pip install 'torch-footprint[bench]'), left out of this run")
        del tools[tool]
    tallies = {t: Tally() for t in tools}
    tfp.profile("resnet18")  # first-call imports and caches, for every tool alike
    for i, name in enumerate(names, 1):
        w = torchvision_weights(name)
        size = w.transforms.keywords["crop_size"]
        line = [f"[{i:2d}/{len(names)}] {name:20s}"]
        real_model: nn.Module | None = None
        for tool, (build, count) in tools.items():
            if build is build_real:
                if real_model is None:
                    real_model = build_real(name)
                model = build_real(name) if tool in ("thop",) else real_model  # thop adds buffers
            else:
                model = build(name)
            gc.collect()
            t = clock()
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    params, macs = count(model, size)
            except Exception as e:  # a peer that cannot handle this model
                tallies[tool].crashed.append(f"{name} ({type(e).__name__})")
                line.append(f"{tool}: crash")
                continue
            dt = clock() - t
            tally = tallies[tool]
            tally.seconds[name] = dt
            tally.params_ok += params == w.meta["num_params"]
            ok = round(macs / 1e9, 3) == w.meta["_ops"]
            tally.macs_ok += ok
            line.append(f"{tool.split()[0]} {dt:.2f}s{'' if ok else ' (MACs differ)'}")
        print("  ".join(line), flush=True)
        del real_model

    print()
    base = tallies["footprint"].seconds
    header = f"{'tool':24s} {'params =':>9s} {'MACs =':>8s} {'finished':>9s} {'time (s)':>9s} {'vs footprint':>13s}"
    print(header)
    print("-" * len(header))
    for tool, tally in tallies.items():
        common = [n for n in tally.seconds if n in base]
        own = sum(tally.seconds[n] for n in common)
        ref = sum(base[n] for n in common)
        ratio = own / ref if ref else float("nan")
        print(f"{tool:24s} {tally.params_ok:>5d}/{len(names):<3d} {tally.macs_ok:>4d}/{len(names):<3d} "
              f"{len(tally.seconds):>5d}/{len(names):<3d} {sum(tally.seconds.values()):9.1f} {ratio:12.2f}x")
    for tool, tally in tallies.items():
        if tally.crashed:
            print(f"{tool} crashed on: {', '.join(tally.crashed)}")
    print("\ntime: counting only, model already built; 'vs footprint': this tool's time over footprint's "
          "on the models both finished (>1: footprint is faster)")


if __name__ == "__main__":
    main()
