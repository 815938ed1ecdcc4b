"""``bench``: a workload measured on this machine, with the predictions beside it, on one
process (:mod:`.runner`) or on N ranks under torchrun (:mod:`.distributed`)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..errors import FootprintError
from ..settings import Measurement, Parallel, Target, Training, Workload

Progress = Callable[[str, float | None], None]


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """torch's CPU thread count set to ``n`` for the block (None: unchanged)."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def bench(w: Workload, t: Training, target: Target, m: Measurement, progress: Progress | None = None) -> Any:
    """Latency and throughput of ``w`` on the target's device (default: cuda when present),
    the predictions beside. Returns a :class:`~torch_footprint.measure.runner.BenchResult`."""
    from ..dtypes import parse_dtype
    from ..estimate.alongside import Alongside
    from ..hardware.catalog import local_accelerator
    from ..hardware.local import available_ram
    from ..quantities import parse_bytes
    from ..sources import prepare
    from ..sources.building import real_weights
    from ..trace import setups
    from .runner import parse_batches, pick_device, run_bench

    if t.checkpointing:
        raise FootprintError("bench times the model as it is: --checkpointing belongs to memory, predict and fit")
    dev = pick_device(target.device)
    batches = parse_batches(m.batches) if m.batches is not None else None
    t = dataclasses.replace(t, optimizer=t.step_optimizer) if t.train else t
    opt = setups.optimizer(t.optimizer) if t.train else None
    mixed = w.precision is not None and w.precision.endswith("-mixed")
    dtype = None if mixed else w.precision
    amp = parse_dtype(w.precision.removesuffix("-mixed")) if mixed and w.precision else None
    with threads(m.threads), real_weights():
        work = prepare(w.model, w.inputs, dtype=dtype, weights=w.weights, trust_remote_code=w.trust_remote_code)
    model = work.model
    if model is w.model:  # the caller's module: time a copy (moved, put in train mode, stepped), not it
        model = copy.deepcopy(model)
    model = model.to(dev)
    acc = local_accelerator(dev)
    source = w if isinstance(w.model, str) else dataclasses.replace(w, model=model)
    side = Alongside(source, t, lambda b: work.at_batch(b).specs, acc)
    budget = parse_bytes(m.max_memory) if m.max_memory else None
    if budget is None and not dev.startswith("cuda"):
        ram = available_ram()
        budget = int(ram * 0.8) if ram else None
    settings = {"dtype": dtype, "autocast": w.precision.removesuffix("-mixed") if mixed and w.precision else None,
                "channels_last": w.channels_last, "compile": w.compile, "optimizer": t.optimizer if t.train else None,
                "inference_mode": m.inference_mode, "cudnn_benchmark": m.cudnn_benchmark}
    notes = [n for n in work.built.notes if not n.startswith("default input")]
    with threads(m.threads):
        res = run_bench(model, lambda b: work.make_inputs(b)(dev), name=work.built.name, device=dev,
                        batches=batches or [work.own_batch], default_batch=work.own_batch, predicted_peak=side.peak,
                        flops_of=side.flops, autocast=amp, channels_last=w.channels_last, compile=w.compile,
                        train=t.train, optimizer=opt, inference_mode=m.inference_mode,
                        cudnn_benchmark=m.cudnn_benchmark, profile=m.profile, budget=budget, min_reps=m.min_reps,
                        min_seconds=m.min_time, settings=settings, notes=notes, progress=progress,
                        sample_interval=m.sample_interval or None)
    res.add_predictions(side.latency, acc)
    return res


def bench_ranks(w: Workload, t: Training, p: Parallel, target: Target, m: Measurement) -> Any:
    """Training steps on ``m.nproc`` ranks started by torchrun (gloo on CPU, NCCL on CUDA),
    wrapped by torch's own DDP, ZeroRedundancyOptimizer, fully_shard or, with ``p.tp``, the
    tensor-parallel plan: each rank's measured peak, step time and communication time beside
    one rank's prediction. The model is given by name (each rank builds it). Returns a
    :class:`~torch_footprint.measure.distributed.RanksBench`."""
    from ..estimate.layouts.ranks import predict_rank, rank_device
    from ..estimate.layouts.schedule import predict_pipeline
    from ..estimate.workload import first_batch, precision_of, trace_step
    from ..hardware.catalog import local_accelerator
    from . import contention
    from .distributed import RanksBench, check_nproc, launch, usable_cores
    from .runner import pick_device

    nproc = m.nproc or 1
    if not t.train:
        raise FootprintError("--nproc runs training steps: add --train")
    if not isinstance(w.model, str):
        raise FootprintError("bench --nproc builds the model in every rank: give it by name, not as a module")
    batch = m.batches
    if isinstance(batch, str) and not batch.isdigit() or isinstance(batch, tuple) and len(batch) != 1:
        raise FootprintError("with --nproc, --batch is one batch size per rank")
    batch = int(batch[0] if isinstance(batch, tuple) else batch) if batch is not None else w.batch
    strategy = p.strategy  # tp: one tensor-parallel group of every rank
    tp = nproc if strategy == "tp" else 1
    pipeline = p.pp > 1 or p.grad_accum > 1
    if pipeline:
        check_pipeline(p, nproc)
        strategy = "pp"
    dev = pick_device(target.device)
    check_nproc(nproc, dev)
    optimizer = t.step_optimizer
    # a pipeline's micro-batches accumulate their gradients: they exist before each forward (as fit prices it)
    t = dataclasses.replace(t, optimizer=optimizer, **({"grads": "zero"} if pipeline else {}))
    trace, notes = trace_step(dataclasses.replace(w, batch=batch), t,
                              dataclasses.replace(p, gpus=nproc) if pipeline else Parallel(gpus=tp, tp=tp))
    acc = local_accelerator(dev)
    n_threads = max(1, usable_cores() // nproc)
    share, where = 1.0, ""
    if not dev.startswith("cuda") and acc is not None and acc.calibrated:  # the ranks share this CPU's cores
        acc, share, where = rank_device(acc, nproc, n_threads)
    if pipeline:  # the ranks cut --batch * --grad-accum into micro-batches of --batch
        batch = first_batch(trace, batch)
        pred = predict_pipeline(trace, p.pp, p.vpp, p.grad_accum, p.schedule, acc, share)
    else:
        pred = predict_rank(trace, strategy, 1 if tp > 1 else nproc, tp, acc, share)
    if acc is None:
        pred.notes.append("run `footprint calibrate --nproc N` to see the predicted step time beside this")
    elif where and pred.step is not None:
        pred.step.notes.append(where)
    run = {"model": w.model, "inputs": portable(w.inputs), "batch": batch, "optimizer": optimizer,
           "precision": precision_of(w), "strategy": strategy, "device": "cuda" if dev.startswith("cuda") else "cpu",
           "warmup": m.warmup, "steps": m.steps, "pp": p.pp, "vpp": p.vpp, "schedule": p.schedule,
           "microbatches": p.grad_accum}
    before = contention.sample(children=True)
    ranks = launch(run, nproc, timeout=m.timeout, threads=n_threads, nnodes=m.nnodes or 1)
    busy = None if dev.startswith("cuda") else contention.between(before, contention.sample(children=True),
                                                                  nproc * n_threads)
    settings = {"optimizer": optimizer, "precision": precision_of(w), "batch_per_rank": batch, "threads": n_threads,
                "steps": m.steps, "warmup": m.warmup}
    if m.nnodes:
        settings["nnodes"] = m.nnodes
    if pipeline:
        settings.update(pp=p.pp, vpp=p.vpp, schedule=p.schedule, microbatches=p.grad_accum)
    notes = [n for n in notes if not n.startswith("default input")]
    if busy is not None and busy.describe():
        notes.append(busy.describe().replace("this process got", "the ranks got"))
    return RanksBench(model=trace.model, strategy=strategy, nproc=nproc, device=dev, settings=settings, ranks=ranks,
                      predicted=pred, notes=notes, contention=busy)


def check_pipeline(p: Parallel, nproc: int) -> None:
    """One line for a pipeline ``bench`` cannot run: every rank is one pipeline rank (no data or
    tensor parallelism beside it), and the micro-batches fill the pipeline."""
    if p.pp != nproc or p.gpus != nproc:
        raise FootprintError(f"bench --pp runs one pipeline rank per process: --pp {p.pp} and --gpus {p.gpus} must "
                             f"equal --nproc {nproc}")
    if p.strategy != "ddp" or p.tp not in (None, 1):
        raise FootprintError("bench --pp runs pipeline ranks only: drop --strategy and --tp")
    if p.pp == 1:
        raise FootprintError(f"--grad-accum {p.grad_accum} with --nproc: bench runs it as a pipeline; add --pp")


def portable(inputs: Any) -> Any:
    """Inputs as text the ranks parse again: a list of shapes, or a dict of them by keyword."""
    from ..dtypes import name_of
    from ..sources.inputs import InputSpec, normalize_inputs

    pos, kw = normalize_inputs(inputs)
    if pos and kw:
        raise FootprintError("bench --nproc takes positional or keyword inputs, not both")

    def text(x: Any) -> Any:
        if isinstance(x, InputSpec):
            return ",".join(map(str, x.shape)) + ":" + name_of(x.dtype)
        return x

    return {k: text(v) for k, v in kw.items()} if kw else ([text(x) for x in pos] or None)
