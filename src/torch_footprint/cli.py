"""The ``footprint`` command: parse, call the Python API, render. Nothing else lives here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

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

LLM_EXAMPLES = """examples:
  footprint llm hf:meta-llama/Llama-3.1-8B
  footprint llm hf:meta-llama/Llama-3.1-8B --gpu h100-sxm --batch 8 --prompt 2048 --output 512
  footprint llm hf:meta-llama/Llama-3.1-70B --gpu a100-sxm-80gb --gpus 4 --tp 4 --weights int4-g128 --kv fp8
  footprint llm hf:mistralai/Mixtral-8x7B-v0.1 --gpu l40s --weights fp8
  footprint llm hf:deepseek-ai/DeepSeek-V3 --gpu h200-sxm --gpus 8 --max-context
  footprint llm hf:gpt2 --measure
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


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr and exit code 2 (like every other error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"footprint: error: {message} (see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="footprint", description="What a PyTorch model costs and what hardware it needs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    prof = sub.add_parser("profile", help="parameters, FLOPs and MACs by module and operator",
                          epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(prof)
    prof.add_argument("--dtype", help="cast parameters and floating inputs: fp32, fp16, bf16, fp64")
    prof.add_argument("--precision", dest="dtype", help=argparse.SUPPRESS, default=argparse.SUPPRESS)  # memory's name
    prof.add_argument("--backward", action="store_true", help="also trace a backward pass (train mode)")
    prof.add_argument("--train", action="store_true", help="run the forward in train mode (dropout, batch stats)")
    prof.add_argument("--depth", type=int, default=2, help="module tree depth to show (default 2)")
    prof.add_argument("--by", choices=("module", "operator"), default="module", help="table to show")
    _output_args(prof, "also write the profile, with its trace, as JSON")
    prof.add_argument("--csv", metavar="FILE", help="also write the table shown (--by module: every module) as CSV")

    mem = sub.add_parser("memory", help="peak memory of inference or a training step, by category",
                         epilog=MEMORY_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(mem)
    mem.add_argument("--batch", type=int, help="set the first dimension of every input")
    mem.add_argument("--train", action="store_true", help="a training step: forward, backward and optimizer step")
    mem.add_argument("--optimizer", help="sgd, momentum, adam, adamw, adagrad, rmsprop, adafactor; "
                     "the first four also as NAME-foreach, NAME-fused (with --train)")
    mem.add_argument("--precision", default="fp32", help="fp32, fp16, bf16, fp16-mixed, bf16-mixed (default fp32)")
    mem.add_argument("--dtype", dest="precision", help=argparse.SUPPRESS, default=argparse.SUPPRESS)  # profile's name
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
    b.add_argument("--nproc", type=int, help="training steps on N ranks started by torchrun (gloo on CPU, NCCL on "
                                              "CUDA): per-rank memory, step and communication time beside prediction")
    b.add_argument("--strategy", default="ddp", help="with --nproc: ddp, zero1, zero2, zero3, fsdp, tp")
    b.add_argument("--precision", default="fp32", help="with --nproc: fp32, fp16, bf16, fp16-mixed, bf16-mixed")
    b.add_argument("--steps", type=int, default=5, help="with --nproc: timed steps per rank (default 5)")
    b.add_argument("--timeout", type=float, default=600.0,
                   help="with --nproc: seconds the ranks may run once connected before they are stopped as hung "
                        "(default 600)")
    b.add_argument("--min-reps", type=int, default=30)
    b.add_argument("--min-time", type=float, default=2.0, help="seconds of timed calls at least (default 2)")
    b.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's, one per core)")
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
    ft.add_argument("--tp", type=int, default=1,
                    help="tensor-parallel ranks among --gpus (Megatron-style split of attention and MLP linears)")
    ft.add_argument("--network", metavar="ID",
                    help="the network between nodes when --gpus spans several (ib-edr, ib-hdr, ib-ndr, eth-100g, "
                         "eth-200g, eth-400g; hardware/networks.toml)")
    ft.add_argument("--gpus-per-node", type=int, default=8, metavar="N", help="GPUs per node (default 8)")
    ft.add_argument("--sequence-parallel", action="store_true",
                    help="with --tp: norms and residuals hold 1/tp of the sequence (Megatron-LM's sequence "
                         "parallelism)")
    ft.add_argument("--bucket-view", action="store_true",
                    help="DDP with gradient_as_bucket_view=True (no second copy of the gradients)")
    ft.add_argument("--gpu", action="append", default=[], metavar="ID", help="only these accelerators (repeatable)")
    ft.add_argument("--utilisation", type=float, default=0.8, help="usable fraction of memory (default 0.8)")
    _output_args(ft, "also write the ranking as JSON")
    ft.add_argument("--csv", metavar="FILE", help="also write the ranking, one accelerator a row, as CSV")

    pr = sub.add_parser("predict", help="roofline latency of one model on one accelerator, by module and operator",
                        epilog=FIT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(pr)
    _workload_args(pr)
    pr.add_argument("--gpu", required=True, metavar="ID", help="accelerator id or name (see `footprint gpus`)")
    pr.add_argument("--depth", type=int, default=1, help="module tree depth to show (default 1)")
    pr.add_argument("--top", type=int, default=10, help="how many of the slowest operators to list")
    pr.add_argument("--channels-last", action="store_true",
                    help="4-d activations in channels-last (NHWC) memory: no NCHW<->NHWC transposes around "
                         "tensor-core convolutions (default: NCHW, PyTorch's)")
    _output_args(pr, "also write the prediction, with every operator, as JSON")

    cal = sub.add_parser("calibrate", help="measure this machine's matmul FLOP/s, copy bandwidth and call overhead")
    cal.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    cal.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    cal.add_argument("--nproc", type=int, help="also time all-reduces across N ranks (torchrun): the link")
    cal.add_argument("--force", action="store_true", help="save even a calibration that fails its sanity checks")
    cal.add_argument("--threads", type=int, help="torch's CPU threads while measuring (default: torch's)")
    _output_args(cal, "also write the measurements to this JSON file")

    lm = sub.add_parser("llm", help="what a language model needs to serve: KV cache, quantized weights, "
                                    "time to first token, tokens/s, on every accelerator",
                        epilog=LLM_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    lm.add_argument("model", help="a causal language model: hf:ID (configs shipped for Llama, Mistral, Mixtral, "
                                  "Qwen2, Gemma, DeepSeek, Mamba...), a local folder with config.json")
    lm.add_argument("--gpu", action="append", default=[], metavar="ID",
                    help="only these accelerators (repeatable; default: all); one gives the full breakdown")
    lm.add_argument("--batch", type=int, default=1, help="concurrent requests (default 1)")
    lm.add_argument("--prompt", type=int, default=1024, help="prompt tokens per request (default 1024)")
    lm.add_argument("--output", type=int, default=256, help="generated tokens per request (default 256)")
    lm.add_argument("--weights", metavar="SCHEME", help="bf16, fp16, fp8, fp8-block128, int8, int4-g128 (GPTQ), "
                                                        "int4-g128-awq, nf4, q4_0, q8_0, q4_k_m, q5_k_m, q6_k "
                                                        "(default: as the checkpoint stores them)")
    lm.add_argument("--kv", metavar="DTYPE", help="KV cache: bf16, fp16, fp8, int8 (default: the activations')")
    lm.add_argument("--gpus", type=int, default=1, help="devices per model replica (default 1)")
    lm.add_argument("--tp", type=int, help="tensor-parallel ranks (default: --gpus)")
    lm.add_argument("--engine", choices=("vllm",), help="add the engine's cache sizing (vLLM: 90%% of memory, "
                                                         "16-token blocks)")
    lm.add_argument("--chunk", type=int, metavar="TOKENS", help="chunked prefill: tokens per chunk")
    lm.add_argument("--max-context", action="store_true",
                    help="lead with the longest context at the batch (sort by it)")
    lm.add_argument("--allow-longer", action="store_true", help="allow a context beyond the model's maximum")
    lm.add_argument("--measure", action="store_true",
                    help="also run the model on this machine (random weights): prefill and decode timed")
    lm.add_argument("--device", default="cpu", help="where --measure runs (default cpu)")
    lm.add_argument("--hardware", metavar="FILE", help="add (or replace) accelerators from a TOML or JSON file")
    lm.add_argument("--trust-remote-code", action="store_true", help="allow Hugging Face models' own code")
    lm.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (memory against "
                                                   "context, tokens/s against batch)")
    _output_args(lm, "also write the answer as JSON")

    show = sub.add_parser("show", help="render a profile saved with --json, without running the model")
    show.add_argument("file", help="a file written by `footprint ... --json FILE`")
    show.add_argument("--depth", type=int, help="module tree depth: of the table (default 2), of the HTML's bars "
                                                "(default: the shallowest with five modules)")
    show.add_argument("--by", choices=("module", "operator"), default="module", help="table to show")
    show.add_argument("--debug", action="store_true", help="show tracebacks")
    show.add_argument("--html", metavar="FILE", help="write the HTML report of a saved profile or report instead")
    _report_parsers(sub)
    return p


REPORT_EXAMPLES = """examples:
  footprint report resnet50 --train --optimizer adamw --gpu a100-sxm-80gb -o resnet50.html
  footprint report hf:gpt2 --input-ids 8,1024 --train --precision bf16-mixed -o gpt2.html
  footprint profile vit_b_16 --json vit.json && footprint show vit.json --html vit.html
  footprint diff before.json after.json
  footprint check resnet50 --budget budget.toml
  footprint profile resnet50 --csv modules.csv
  footprint schema > footprint-schema.json
"""


def _report_parsers(sub: Any) -> None:
    """``report``, ``diff``, ``check`` and ``schema``: results people look at and CI acts on."""
    rep = sub.add_parser("report", help="a self-contained HTML report with plots: memory timeline, roofline, "
                                        "modules, accelerators", epilog=REPORT_EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(rep)
    _workload_args(rep)
    rep.add_argument("--gpu", metavar="ID", help="the accelerator of the roofline and the memory capacity line")
    rep.add_argument("--fit", action="store_true", help="add every accelerator's answer (traces 2 more batches)")
    rep.add_argument("--bench", action="store_true", help="add a measurement on this machine (runs the model)")
    rep.add_argument("--utilisation", type=float, default=0.8, help="usable fraction of memory (default 0.8)")
    rep.add_argument("--depth", type=int, help="module depth of the bars (default: the shallowest with five modules)")
    rep.add_argument("-o", "--output", metavar="FILE.html", help="the HTML file to write")
    rep.add_argument("--chrome-trace", metavar="FILE.json", help="also write the predicted timeline on --gpu as a "
                                                                  "Chrome trace (Perfetto, chrome://tracing)")
    _output_args(rep, "also write the report's data as JSON (`footprint show FILE --html` re-renders it)")

    df = sub.add_parser("diff", help="what changed between two saved results, by metric and by module",
                        epilog=REPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    df.add_argument("before", help="a result saved with --json")
    df.add_argument("after", help="a result saved with --json")
    df.add_argument("--force", action="store_true", help="compare results of different models or settings")
    df.add_argument("--depth", type=int, default=2, help="module depth to compare (default 2)")
    _output_args(df, "also write the diff as JSON")

    ck = sub.add_parser("check", help="a model or saved result against a budget file; exit 1 when over budget",
                        epilog=REPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ck.add_argument("target", help="a result saved with --json, or a model run as the budget's [workload] says")
    ck.add_argument("--budget", required=True, metavar="FILE.toml", help="the caps (see README: budgets)")
    ck.add_argument("--trust-remote-code", action="store_true",
                    help="allow a Hugging Face config to run code from its repository (off by default)")
    _output_args(ck, "also write every cap's outcome as JSON (for bots)")

    sch = sub.add_parser("schema", help="print the JSON Schema of every file footprint writes")
    sch.add_argument("--debug", action="store_true", help="show tracebacks")


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
    from .report.progress import progress

    with progress(f"fit {args.model}: tracing and ranking"):
        res = api.fit(args.model, _specs(args) or None, batch=args.batch, train=args.train, optimizer=args.optimizer,
                      precision=args.precision, dtype=args.dtype, checkpointing=args.checkpointing, gpus=args.gpus,
                      strategy=args.strategy, latency=args.latency, utilisation=args.utilisation,
                      hardware=args.hardware, only=args.gpu or None, tf32=_tf32(args.tf32),
                      efficiency=_efficiency(args.efficiency), bucket_view=args.bucket_view, weights=args.weights,
                      trust_remote_code=args.trust_remote_code, tp=args.tp,
                      sequence_parallel=args.sequence_parallel, network=args.network,
                      gpus_per_node=args.gpus_per_node)
    render_fit(res)
    _write(args, res.to_dict())
    if args.csv:
        from .files import write_text
        from .report.csv import FIT_COLUMNS, table_csv

        write_text(args.csv, table_csv(res.to_dict()["rows"], FIT_COLUMNS))
        print(f"wrote {args.csv}")
    return 0 if res.pick else 1  # nothing fits (or meets the target): a CI step fails


def _predict(args: argparse.Namespace) -> int:
    from . import api
    from .report.hardware import render_prediction
    from .report.progress import progress

    if args.depth < 0 or args.top < 0:
        raise FootprintError("--depth and --top cannot be negative")
    with progress(f"predict {args.model}: tracing"):
        pred = api.predict(args.model, args.gpu, _specs(args) or None, dtype=args.dtype, precision=args.precision,
                           batch=args.batch, train=args.train, optimizer=args.optimizer,
                           checkpointing=args.checkpointing, tf32=_tf32(args.tf32),
                           efficiency=_efficiency(args.efficiency), hardware=args.hardware, weights=args.weights,
                           trust_remote_code=args.trust_remote_code,
                           layout="nhwc" if args.channels_last else "nchw")
    render_prediction(pred, depth=args.depth, top=args.top)
    _write(args, pred.to_dict(ops=True))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from . import api
    from .report.hardware import render_calibration
    from .report.progress import progress

    with progress("calibrating") as update:
        res, path = api.calibrate(args.device, quick=args.quick, force=args.force, threads=args.threads,
                                  nproc=args.nproc,
                                  on_step=lambda s: update(f"calibrating: {s}"))
    render_calibration(res, path)
    _write(args, res)
    if res["problems"] and path is None:
        print("footprint: calibration not saved: " + "; ".join(res["problems"]) + ". `footprint calibrate "
              "--force` saves it anyway", file=sys.stderr)
        return 1
    return 0


def _write(args: argparse.Namespace, data: dict) -> None:
    """``--json FILE``: the result, written whole or not at all."""
    if args.json:
        from .files import write_json
        from .report.schema import envelope

        write_json(args.json, envelope(args.command, data))
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
    from .report.progress import progress
    from .report.terminal import render_profile
    if args.depth < 0:
        raise FootprintError("--depth cannot be negative")
    specs = _specs(args)
    with progress(f"profile {args.model}: tracing"):
        prof = api.profile(args.model, specs or None, backward=args.backward, dtype=args.dtype,
                           train=bool(args.train or args.backward), weights=args.weights,
                           trust_remote_code=args.trust_remote_code)
    render_profile(prof, by=args.by, depth=args.depth)
    _write(args, prof.to_dict(depth=None, include_trace=True))
    if args.csv:
        _write_csv(args.csv, prof, args.by)
    return 0


def _write_csv(path: str, prof: Any, by: str) -> None:
    from .files import write_text
    from .report.csv import MODULE_COLUMNS, OPERATOR_COLUMNS, table_csv

    rows = prof.by_module(None) if by == "module" else prof.by_operator()
    write_text(path, table_csv([r.to_dict() for r in rows], MODULE_COLUMNS if by == "module" else OPERATOR_COLUMNS))
    print(f"wrote {path}")


def _memory(args: argparse.Namespace) -> int:
    from . import api
    from .report.progress import progress
    from .report.terminal import render_memory

    specs = _specs(args)
    overheads = {}
    for item in args.overhead:
        name, sep, size = item.partition("=")
        if not sep or not name.strip():
            raise FootprintError(f"--overhead takes NAME=SIZE, e.g. cuda_context=300MiB; got '{item}'")
        overheads[name.strip()] = size
    with progress(f"memory {args.model}: tracing"):
        est = api.memory(args.model, specs or None, batch=args.batch, train=args.train, optimizer=args.optimizer,
                         precision=args.precision, checkpointing=args.checkpointing, device=args.device,
                         budget=args.max_batch, utilisation=args.utilisation, grads=args.grads,
                         scaling=args.scaling, overheads=overheads, weights=args.weights,
                         trust_remote_code=args.trust_remote_code)
    render_memory(est)
    _write(args, est.to_dict())
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .api import bench
    from .report.terminal import render_bench

    if args.nproc is not None:
        return _bench_ranks(args)
    if args.min_reps < 1 or args.min_time < 0:
        raise FootprintError("--min-reps must be at least 1 and --min-time not negative")
    specs = _specs(args)
    from .errors import Interrupted
    from .report.progress import progress

    interrupted = None
    with progress(f"bench {args.model}: preparing") as update:
        try:
            res = bench(args.model, specs or None, device=args.device, batch_sizes=args.batch,
                        dtype=args.dtype, autocast=args.autocast, channels_last=args.channels_last,
                        compile=args.compile, train=args.train, optimizer=args.optimizer,
                        inference_mode=not args.no_inference_mode, cudnn_benchmark=args.cudnn_benchmark,
                        profile=args.profile, max_memory=args.max_memory, min_reps=args.min_reps,
                        min_seconds=args.min_time, weights=args.weights, trust_remote_code=args.trust_remote_code,
                        progress=update, threads=args.threads)
        except Interrupted as e:
            if e.partial is None or not e.partial.points:
                raise
            res, interrupted = e.partial, e
    render_bench(res)
    _write(args, res.to_dict())
    if interrupted is not None:  # Ctrl-C: what was finished is above (and in --json); exit as interrupted
        print("footprint: interrupted: kept the finished batch sizes; not measured: "
              + ", ".join(map(str, res.unfinished)), file=sys.stderr)
        return 130
    return 0


def _llm(args: argparse.Namespace) -> int:
    from rich.console import Console

    from . import api
    from .report.llm import render_llm

    with Console(stderr=True).status("footprint llm") as status:
        res = api.llm(args.model, prompt=args.prompt, output=args.output, batch=args.batch, weights=args.weights,
                      kv=args.kv, gpu=args.gpu or None, gpus=args.gpus, tp=args.tp, engine=args.engine,
                      chunk=args.chunk, allow_longer=args.allow_longer, hardware=args.hardware,
                      measure=args.measure, device=args.device, trust_remote_code=args.trust_remote_code,
                      on_step=lambda m: status.update(f"footprint llm: {m}"))
    if args.max_context:
        res.rows.sort(key=lambda r: -r.max_context)
    render_llm(res)
    _write(args, res.to_dict())
    if args.html:
        from .report.schema import envelope

        doc = envelope("llm", res.to_dict())
        _write_html(args.html, {**doc, "llm": doc})
    return 0


def _bench_ranks(args: argparse.Namespace) -> int:
    from rich.console import Console

    from . import api
    from .report.hardware import render_ranks

    if not args.train:
        raise FootprintError("--nproc runs training steps: add --train")
    if args.batch is not None and not args.batch.isdigit():
        raise FootprintError("with --nproc, --batch is one batch size per rank")
    with Console(stderr=True).status(f"{args.nproc} ranks under torchrun: {args.strategy}"):
        res = api.bench_ranks(args.model, _specs(args) or None, nproc=args.nproc, strategy=args.strategy,
                              batch=int(args.batch) if args.batch else None, optimizer=args.optimizer,
                              precision=args.precision, device=args.device or "cpu", steps=args.steps,
                              timeout=args.timeout)
    render_ranks(res)
    _write(args, res.to_dict())
    return 0


def _show(args: argparse.Namespace) -> int:
    from .analysis import Profile
    from .report.schema import load
    from .report.terminal import render_profile

    if args.depth is not None and args.depth < 0:
        raise FootprintError("--depth cannot be negative")
    html_kinds = ("profile", "report", "memory", "fit", "predict", "bench", "llm")
    doc = load(args.file, html_kinds)
    if not args.html and doc["kind"] != "profile":
        raise FootprintError(f"'{args.file}' holds a '{doc['kind']}' result: draw it with --html FILE.html "
                             "(the terminal view is a profile's)")
    if args.html:
        if doc["kind"] in ("memory", "fit", "predict", "bench", "llm"):  # the page of that one section
            doc = {**doc, doc["kind"]: doc}
        elif doc["kind"] == "profile":
            from .bundle import report_of
            from .estimate.memory import memory_of
            from .estimate.workload import StepSpec
            from .report.schema import envelope

            prof = Profile.from_dict(doc)
            doc = envelope("report", report_of(prof, memory_of(prof.trace, StepSpec(), prof.notes)).to_dict())
        _write_html(args.html, doc, args.depth)
        return 0
    render_profile(Profile.from_dict(doc), by=args.by, depth=2 if args.depth is None else args.depth)
    return 0


def _write_html(path: str, doc: dict[str, Any], depth: int | None = None) -> None:
    from .files import write_text
    from .report.html import render_html

    write_text(path, render_html(doc, depth=depth))
    print(f"wrote {path}")


def _report(args: argparse.Namespace) -> int:
    from . import api
    from .report.schema import envelope

    if args.depth is not None and args.depth < 0:
        raise FootprintError("--depth cannot be negative")
    if not (args.output or args.json or args.chrome_trace):
        raise FootprintError("say where the report goes: -o FILE.html (and/or --json FILE.json)")
    if args.chrome_trace and not args.gpu:
        raise FootprintError("--chrome-trace times the operators on an accelerator: add --gpu ID")
    rep = api.report(args.model, _specs(args) or None, batch=args.batch, train=args.train, optimizer=args.optimizer,
                     precision=args.precision, dtype=args.dtype, checkpointing=args.checkpointing, gpu=args.gpu,
                     fit=args.fit, bench=args.bench, utilisation=args.utilisation, hardware=args.hardware,
                     weights=args.weights, trust_remote_code=args.trust_remote_code)
    doc = envelope("report", rep.to_dict())  # one envelope: the HTML and the JSON carry the same time
    if args.output:
        _write_html(args.output, doc, args.depth)
    if args.json:
        from .files import write_json

        write_json(args.json, doc)
        print(f"wrote {args.json}")
    if args.chrome_trace:
        from .files import write_json
        from .report.chrome_trace import chrome_trace

        write_json(args.chrome_trace, chrome_trace(rep.prediction, rep.timeline))
        print(f"wrote {args.chrome_trace}")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from . import api
    from .report.terminal import make_console
    from .report.verdicts import render_diff

    if args.depth < 0:
        raise FootprintError("--depth cannot be negative")
    data = api.diff(args.before, args.after, force=args.force, depth=args.depth).to_dict()
    render_diff(data, make_console())
    _write(args, data)
    return 0


def _check(args: argparse.Namespace) -> int:
    from . import api
    from .report.terminal import make_console
    from .report.verdicts import render_check

    res = api.check(args.target, args.budget, trust_remote_code=args.trust_remote_code)
    data = res.to_dict()
    render_check(data["results"], res.passed, make_console(), res.notes)
    _write(args, data)
    return 0 if res.passed else 1


def _schema(args: argparse.Namespace) -> int:
    import json

    from .report.schema import schema

    print(json.dumps(schema(), indent=1))
    return 0


def _one_line_warnings() -> None:
    """Our warnings as one line on stderr ("footprint: warning: ..."), others as Python shows them."""
    import warnings

    from .errors import FootprintWarning

    shown = warnings.showwarning
    if getattr(shown, "footprint", False):
        return

    def show(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        if issubclass(category, FootprintWarning):
            print(f"footprint: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *args, **kwargs)  # type: ignore[arg-type]

    show.footprint = True  # type: ignore[attr-defined]
    warnings.showwarning = show


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
                "predict": _predict, "calibrate": _calibrate, "llm": _llm, "report": _report, "schema": _schema,
                "diff": _diff, "check": _check}
    debug = getattr(args, "debug", False) or os.environ.get("FOOTPRINT_DEBUG") == "1"
    _one_line_warnings()
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
