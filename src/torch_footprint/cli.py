"""The ``footprint`` command: parse, call the Python API, render. Nothing else lives here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .errors import FootprintError

EXAMPLES = """examples:
  footprint profile resnet50
  footprint profile vit_b_16 --input 8,3,224,224 --backward --depth 2
  footprint profile timm:convnext_tiny
  footprint profile hf:gpt2 --input-ids 1,1024
  footprint profile ./my_model.py:build --input 1,3,64,64 --input 1,10 --dtype bf16
  footprint profile resnet50 --by operator --json out.json
  footprint show out.json --by operator
"""


MEMORY_EXAMPLES = """examples:
  footprint memory resnet50 --batch 64
  footprint memory resnet50 --batch 64 --train --optimizer adamw
  footprint memory hf:gpt2 --input-ids 8,1024 --train --precision bf16-mixed --checkpointing
  footprint memory vit_b_16 --train --max-batch 24GiB
"""


BENCH_EXAMPLES = """examples:
  footprint bench resnet50
  footprint bench resnet50 --batch 1,8,32,auto
  footprint bench vit_b_16 --device cuda --dtype bf16 --channels-last --compile
  footprint bench resnet50 --train --optimizer sgd
  footprint bench resnet50 --profile
"""


FIT_EXAMPLES = """examples:
  footprint gpus
  footprint fit resnet50 --batch 32
  footprint fit hf:meta-llama/Llama-3.1-8B --input-ids 1,4096 --train --optimizer adamw --precision bf16-mixed
  footprint fit vit_b_16 --latency 10ms --dtype fp16
  footprint fit hf:meta-llama/Llama-3.1-70B --input-ids 1,4096 --train --optimizer adamw \\
      --precision bf16-mixed --gpus 8 --strategy zero3
  footprint predict resnet50 --gpu a100-sxm-80gb --batch 64
  footprint calibrate
"""


def _model_args(p: argparse.ArgumentParser) -> None:
    """The model and its inputs, shared by profile, memory and bench."""
    p.add_argument("model", help="resnet50 | timm:NAME | hf:ID | CONFIG_FOLDER | FILE.py:FACTORY | "
                                 "package.module:FACTORY")
    p.add_argument("--input", "-i", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="an input shape such as 1,3,224,224 or 1,128:int64; repeat for several positional "
                        "inputs; NAME=SHAPE for a keyword input")
    p.add_argument("--input-ids", metavar="B,T", help="token ids for a language model (int64 input_ids)")
    p.add_argument("--weights", help="torchvision weights whose metadata sets the input (e.g. IMAGENET1K_V2)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow a Hugging Face config to run code from its repository (off by default)")


def _output_args(p: argparse.ArgumentParser, json_help: str) -> None:
    p.add_argument("--json", metavar="FILE", help=json_help)
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="footprint", description="What a PyTorch model costs and what hardware it needs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    prof = sub.add_parser("profile", help="parameters, FLOPs and MACs by module and operator",
                          epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(prof)
    prof.add_argument("--dtype", help="cast parameters and floating inputs: fp32, fp16, bf16, fp64")
    prof.add_argument("--backward", action="store_true", help="also trace a backward pass (train mode)")
    prof.add_argument("--train", action="store_true", help="run the forward in train mode (dropout, batch stats)")
    prof.add_argument("--depth", type=int, default=2, help="module tree depth to show (default 2)")
    prof.add_argument("--by", choices=("module", "operator"), default="module", help="table to show")
    _output_args(prof, "also write the profile, with its trace, as JSON")

    mem = sub.add_parser("memory", help="peak memory of inference or a training step, by category",
                         epilog=MEMORY_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(mem)
    mem.add_argument("--batch", type=int, help="set the first dimension of every input")
    mem.add_argument("--train", action="store_true", help="a training step: forward, backward and optimizer step")
    mem.add_argument("--optimizer", help="sgd, momentum, adam, adamw, adagrad, rmsprop, adafactor; "
                     "the first four also as NAME-foreach, NAME-fused (with --train)")
    mem.add_argument("--precision", default="fp32", help="fp32, fp16, bf16, fp16-mixed, bf16-mixed (default fp32)")
    mem.add_argument("--checkpointing", action="store_true", help="activation checkpointing (with --train)")
    mem.add_argument("--max-batch", metavar="BUDGET", help="largest batch whose provisioned memory fits, e.g. 24GiB")
    mem.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                     help="whose fixed overheads to add (cuda: context, cuBLAS workspace, allocator rounding)")
    mem.add_argument("--utilisation", type=float, default=0.8, help="usable fraction of memory (default 0.8)")
    mem.add_argument("--grads", choices=("none", "zero"), default="none",
                     help="none: gradients appear in the backward (first step, set_to_none); zero: kept between "
                          "steps, so they exist before the forward")
    mem.add_argument("--scaling", action="store_true", help="fit peak = a + b x batch from three traces")
    mem.add_argument("--overhead", action="append", default=[], metavar="NAME=SIZE",
                     help="set a fixed overhead, e.g. cuda_context=300MiB (0 removes it); repeatable")
    _output_args(mem, "also write the estimate as JSON")

    b = sub.add_parser("bench", help="latency and throughput measured on this machine",
                       epilog=BENCH_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(b)
    b.add_argument("--batch", default=None, help="batch sizes, e.g. 1,8,32,auto (auto: the largest that fits)")
    b.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when present)")
    b.add_argument("--dtype", help="cast weights and floating inputs: fp32, fp16, bf16")
    b.add_argument("--autocast", metavar="DTYPE", help="run under torch.autocast with this dtype")
    b.add_argument("--channels-last", action="store_true")
    b.add_argument("--compile", action="store_true", help="torch.compile the model first")
    b.add_argument("--cudnn-benchmark", action="store_true")
    b.add_argument("--no-inference-mode", action="store_true", help="torch.no_grad instead of inference_mode")
    b.add_argument("--train", action="store_true", help="time training steps (forward, backward, optimizer)")
    b.add_argument("--optimizer", default="sgd")
    b.add_argument("--profile", action="store_true", help="add torch.profiler's operator table")
    b.add_argument("--max-memory", metavar="BYTES", help="CPU budget for the batch search (default 80%% of free RAM)")
    b.add_argument("--min-reps", type=int, default=30)
    b.add_argument("--min-time", type=float, default=2.0, help="seconds of timed calls at least (default 2)")
    _output_args(b, "also write the measurements as JSON")

    gp = sub.add_parser("gpus", help="the accelerator database: memory, bandwidth, dense TFLOPS per dtype, TDP",
                        epilog=FIT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    gp.add_argument("--hardware", metavar="FILE", help="add (or replace) accelerators from a TOML or JSON file")
    gp.add_argument("--sources", action="store_true", help="show each row's datasheet URL")
    gp.add_argument("--vendor", help="only this vendor: nvidia, amd, apple, local")
    _output_args(gp, "also write the database as JSON")

    ft = sub.add_parser("fit", help="which accelerator runs this model: fits, largest batch, predicted speed",
                        epilog=FIT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(ft)
    _workload_args(ft)
    ft.add_argument("--latency", metavar="TIME", help="latency target, e.g. 10ms: pick the lowest-power accelerator "
                                                      "that meets it")
    ft.add_argument("--gpus", type=int, default=1, help="data-parallel ranks (memory is per rank)")
    ft.add_argument("--strategy", default="ddp", choices=("ddp", "zero1", "zero2", "zero3", "fsdp"),
                    help="how model states are split across --gpus ranks (default ddp)")
    ft.add_argument("--bucket-view", action="store_true",
                    help="DDP with gradient_as_bucket_view=True (no second copy of the gradients)")
    ft.add_argument("--gpu", action="append", default=[], metavar="ID", help="only these accelerators (repeatable)")
    ft.add_argument("--utilisation", type=float, default=0.8, help="usable fraction of memory (default 0.8)")
    _output_args(ft, "also write the ranking as JSON")

    pr = sub.add_parser("predict", help="roofline latency of one model on one accelerator, by module and operator",
                        epilog=FIT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(pr)
    _workload_args(pr)
    pr.add_argument("--gpu", required=True, metavar="ID", help="accelerator id or name (see `footprint gpus`)")
    pr.add_argument("--depth", type=int, default=1, help="module tree depth to show (default 1)")
    pr.add_argument("--top", type=int, default=10, help="how many of the slowest operators to list")
    _output_args(pr, "also write the prediction, with every operator, as JSON")

    cal = sub.add_parser("calibrate", help="measure this machine's matmul FLOP/s, copy bandwidth and call overhead")
    cal.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    cal.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    _output_args(cal, "also write the measurements to this JSON file")

    show = sub.add_parser("show", help="render a profile saved with --json, without running the model")
    show.add_argument("file")
    show.add_argument("--depth", type=int, default=2)
    show.add_argument("--by", choices=("module", "operator"), default="module")
    show.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, help="set the first dimension of every input (per rank)")
    p.add_argument("--dtype", help="inference arithmetic: fp32, fp16, bf16 (weights and inputs cast)")
    p.add_argument("--train", action="store_true", help="a training step: forward, backward and optimizer step")
    p.add_argument("--optimizer", help="sgd, momentum, adam, adamw, adagrad, rmsprop, adafactor; "
                     "the first four also as NAME-foreach, NAME-fused (with --train)")
    p.add_argument("--precision", help="training arithmetic: fp32, fp16, bf16, fp16-mixed, bf16-mixed")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing (with --train)")
    p.add_argument("--tf32", choices=("on", "off"), help="fp32 matmuls and convolutions as TF32 (default: "
                                                         "PyTorch's, convolutions only)")
    p.add_argument("--efficiency", action="append", default=[], metavar="KIND=F",
                   help="achievable fraction of a datasheet ceiling: matrix=0.7, vector=0.5, memory=0.85")
    p.add_argument("--hardware", metavar="FILE", help="add (or replace) accelerators from a TOML or JSON file")


def _efficiency(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise FootprintError(f"--efficiency takes KIND=FRACTION, e.g. matrix=0.6; got '{item}'")
    return out


def _tf32(value: str | None) -> bool | None:
    return None if value is None else value == "on"


def _gpus(args: argparse.Namespace) -> int:
    from . import api
    from .report.hardware import render_gpus

    rows = api.gpus(args.hardware, vendor=args.vendor)
    render_gpus(rows, sources=args.sources)
    _write(args, {"accelerators": [a.to_dict() for a in rows]})
    return 0


def _fit(args: argparse.Namespace) -> int:
    from . import api
    from .report.hardware import render_fit

    res = api.fit(args.model, _specs(args) or None, batch=args.batch, train=args.train, optimizer=args.optimizer,
                  precision=args.precision, dtype=args.dtype, checkpointing=args.checkpointing, gpus=args.gpus,
                  strategy=args.strategy, latency=args.latency, utilisation=args.utilisation,
                  hardware=args.hardware, only=args.gpu or None, tf32=_tf32(args.tf32),
                  efficiency=_efficiency(args.efficiency), bucket_view=args.bucket_view, weights=args.weights,
                  trust_remote_code=args.trust_remote_code)
    render_fit(res)
    _write(args, res.to_dict())
    return 0 if res.pick else 1  # nothing fits (or meets the target): a CI step fails


def _predict(args: argparse.Namespace) -> int:
    from . import api
    from .report.hardware import render_prediction

    if args.depth < 0 or args.top < 0:
        raise FootprintError("--depth and --top cannot be negative")
    pred = api.predict(args.model, args.gpu, _specs(args) or None, dtype=args.dtype, precision=args.precision,
                       batch=args.batch, train=args.train, optimizer=args.optimizer,
                       checkpointing=args.checkpointing, tf32=_tf32(args.tf32),
                       efficiency=_efficiency(args.efficiency), hardware=args.hardware, weights=args.weights,
                       trust_remote_code=args.trust_remote_code)
    render_prediction(pred, depth=args.depth, top=args.top)
    _write(args, pred.to_dict(ops=True))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from . import api
    from .report.hardware import render_calibration

    with Console(stderr=True).status("calibrating") as status:
        res, path = api.calibrate(args.device, quick=args.quick,
                                  on_step=lambda s: status.update(f"calibrating: {s}"))
    render_calibration(res, path)
    _write(args, res)
    return 0


def _write(args: argparse.Namespace, data: dict) -> None:
    """``--json FILE``: the result, written whole or not at all."""
    if args.json:
        from .files import write_json

        write_json(args.json, data)
        print(f"wrote {args.json}")


def _specs(args: argparse.Namespace) -> list:
    """The input specs given by --input (repeatable) and --input-ids."""
    from .sources.inputs import parse_input_ids, parse_shape

    specs = [parse_shape(s) for s in args.input]
    if args.input_ids:
        specs.append(parse_input_ids(args.input_ids))
    return specs


def _profile(args: argparse.Namespace) -> int:
    from . import api
    from .report.terminal import render_profile
    if args.depth < 0:
        raise FootprintError("--depth cannot be negative")
    specs = _specs(args)
    prof = api.profile(args.model, specs or None, backward=args.backward, dtype=args.dtype,
                       train=bool(args.train or args.backward), weights=args.weights,
                       trust_remote_code=args.trust_remote_code)
    render_profile(prof, by=args.by, depth=args.depth)
    _write(args, prof.to_dict(depth=None, include_trace=True))
    return 0


def _memory(args: argparse.Namespace) -> int:
    from . import api
    from .report.terminal import render_memory

    specs = _specs(args)
    overheads = {}
    for item in args.overhead:
        name, sep, size = item.partition("=")
        if not sep or not name.strip():
            raise FootprintError(f"--overhead takes NAME=SIZE, e.g. cuda_context=300MiB; got '{item}'")
        overheads[name.strip()] = size
    est = api.memory(args.model, specs or None, batch=args.batch, train=args.train, optimizer=args.optimizer,
                     precision=args.precision, checkpointing=args.checkpointing, device=args.device,
                     budget=args.max_batch, utilisation=args.utilisation, grads=args.grads,
                     scaling=args.scaling, overheads=overheads, weights=args.weights,
                     trust_remote_code=args.trust_remote_code)
    render_memory(est)
    _write(args, est.to_dict())
    return 0


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .api import bench
    from .report.terminal import render_bench

    if args.min_reps < 1 or args.min_time < 0:
        raise FootprintError("--min-reps must be at least 1 and --min-time not negative")
    specs = _specs(args)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("preparing", total=None)

        def progress(message: str, fraction: float | None) -> None:
            bar.update(task, description=message, total=None if fraction is None else 1.0,
                       completed=fraction or 0.0)

        res = bench(args.model, specs or None, device=args.device, batch_sizes=args.batch,
                    dtype=args.dtype, autocast=args.autocast, channels_last=args.channels_last,
                    compile=args.compile, train=args.train, optimizer=args.optimizer,
                    inference_mode=not args.no_inference_mode, cudnn_benchmark=args.cudnn_benchmark,
                    profile=args.profile, max_memory=args.max_memory, min_reps=args.min_reps,
                    min_seconds=args.min_time, weights=args.weights, trust_remote_code=args.trust_remote_code,
                    progress=progress)
    render_bench(res)
    _write(args, res.to_dict())
    return 0


def _show(args: argparse.Namespace) -> int:
    from .analysis import Profile
    from .files import read_json
    from .report.terminal import render_profile

    render_profile(Profile.from_dict(read_json(args.file)), by=args.by, depth=args.depth)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        from . import __version__

        print(f"torch-footprint {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    handlers = {"profile": _profile, "memory": _memory, "bench": _bench, "show": _show, "gpus": _gpus, "fit": _fit,
                "predict": _predict, "calibrate": _calibrate}
    debug = getattr(args, "debug", False) or os.environ.get("FOOTPRINT_DEBUG") == "1"
    try:
        return handlers[args.command](args)
    except FootprintError as e:
        if debug:
            raise
        print(f"footprint: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("footprint: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug of ours: say so plainly, without a traceback
        if debug:
            raise
        print(f"footprint: internal error: {type(e).__name__}: {e}\n"
              "This is a bug in torch-footprint; run again with --debug for the traceback and report it.",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
