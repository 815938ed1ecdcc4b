"""The Python API: the same verbs as the command line, each a few lines over the stages.

``profile`` traces (trace/) and reads the trace (analysis/); ``memory``, ``predict`` and
``fit`` trace a workload and estimate from it (estimate/); ``bench`` measures (measure/)
with the estimates beside; ``gpus`` and ``calibrate`` read and write the hardware rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .analysis import Profile
from .errors import FootprintError
from .sources.inputs import InputsLike

__all__ = ["Profile", "bench", "calibrate", "fit", "gpus", "memory", "predict", "profile"]


def profile(model: nn.Module | str, inputs: InputsLike = None, *, backward: bool = False,
            dtype: str | torch.dtype | None = None, train: bool | None = None, device: str = "cpu",
            weights: str | None = None, trust_remote_code: bool = False, tensors: str = "auto") -> Profile:
    """Parameters, FLOPs and MACs of one forward (and, with ``backward``, one backward) pass.

    ``model`` is an ``nn.Module`` (its weights are left untouched) or a name such as
    ``"resnet50"``, ``"timm:convnext_tiny"``, ``"hf:gpt2"`` or ``"file.py:factory"``.
    ``inputs`` is a tensor, a shape spec (``"1,3,224,224"``, ``"1,128:int64"``), a sequence
    of those, or a mapping of keyword inputs; None uses the model's default input.
    The model runs in eval mode unless ``train`` (default: ``backward``) is set.
    ``tensors`` ("auto", "meta", "fake", "real") picks what the trace runs on; "auto" tries
    meta, then fake, then (for small models whose forward reads tensor values) real.
    """
    from .estimate.workload import trace_forward

    trace, notes = trace_forward(model, inputs, backward=backward, dtype=dtype, train=train, device=device,
                                 weights=weights, trust_remote_code=trust_remote_code, tensors=tensors)
    return Profile(trace, notes)


def memory(model: nn.Module | str, inputs: InputsLike = None, *, batch: int | None = None, train: bool = False,
           optimizer: str | None = None, precision: str = "fp32", checkpointing: bool = False,
           device: str = "cpu", budget: int | str | None = None, utilisation: float = 0.8,
           grads: str = "none", scaling: bool = False, overheads: Mapping[str, int | str] | None = None,
           weights: str | None = None, trust_remote_code: bool = False) -> Any:
    """Peak memory of one inference (or, with ``train``, one training step), from the trace.

    Returns a :class:`~torch_footprint.estimate.memory.MemoryEstimate`: the peak, where it
    happens, a breakdown by category, the timeline of live bytes after every operator
    (``est.peak.timeline``), fixed overheads for ``device`` ("cpu" or "cuda"),
    what to provision at ``utilisation``, and with ``budget`` (bytes or "24GiB") the
    largest batch that fits it. ``grads``: "none" (a first step, or zero_grad(set_to_none=True):
    gradients appear in the backward) or "zero" (gradients kept between steps and zeroed:
    they exist before the forward). ``scaling`` fits peak = a + b x batch from traces at
    the batch, 2x and 3x it (a budget implies it). ``overheads`` replaces or adds fixed
    costs by name (bytes or "300MiB"; e.g. {"cuda_context": "300MiB"}; 0 removes one).
    """
    from .estimate.memory import estimate_memory
    from .estimate.workload import StepSpec

    spec = StepSpec(train, optimizer, precision, checkpointing, grads)
    return estimate_memory(model, inputs, spec, batch=batch, device=device, budget=budget, utilisation=utilisation,
                           scaling=scaling, overheads=overheads, weights=weights,
                           trust_remote_code=trust_remote_code)


def bench(model: nn.Module | str, inputs: InputsLike = None, *, device: str | None = None,
          batch_sizes: Sequence[int | str] | str | None = None, dtype: str | None = None,
          autocast: str | None = None, channels_last: bool = False, compile: bool = False, train: bool = False,
          optimizer: str = "sgd", inference_mode: bool = True, cudnn_benchmark: bool = False,
          profile: bool = False, max_memory: int | str | None = None, min_reps: int = 30,
          min_seconds: float = 2.0, weights: str | None = None, trust_remote_code: bool = False,
          progress: Callable[[str, float | None], None] | None = None) -> Any:
    """Measure latency and throughput of ``model`` on ``device`` (default: cuda if present).

    A model given by name is built with random weights (its constructor's initialisation).
    ``batch_sizes`` ("1,8,auto" or a list; None: the inputs' own) may hold "auto": the
    largest batch that runs, found by doubling and bisection, recovering from
    out-of-memory; on CPU a batch whose predicted peak is over ``max_memory`` (default 80%
    of the available RAM) counts as out of memory without running. ``profile`` adds
    torch.profiler's operator table. Returns a :class:`~torch_footprint.measure.runner.BenchResult`.
    """
    from .dtypes import parse_dtype
    from .estimate import training
    from .estimate.alongside import Alongside
    from .hardware.catalog import local_accelerator
    from .hardware.local import available_ram
    from .measure.runner import parse_batches, pick_device, run_bench
    from .quantities import parse_bytes
    from .sources import prepare
    from .sources.models import real_weights

    dev = pick_device(device)
    batches = parse_batches(batch_sizes) if batch_sizes is not None else None
    opt = training.optimizer(optimizer) if train else None
    amp = parse_dtype(autocast) if autocast else None
    with real_weights():
        work = prepare(model, inputs, dtype=dtype, weights=weights, trust_remote_code=trust_remote_code)
    m = work.model.to(dev)
    acc = local_accelerator(dev)
    side = Alongside(model if isinstance(model, str) else m, lambda b: work.at_batch(b).specs, train=train,
                     optimizer=optimizer, dtype=dtype, autocast=amp, accelerator=acc, weights=weights,
                     trust_remote_code=trust_remote_code)
    budget = parse_bytes(max_memory) if max_memory else None
    if budget is None and not dev.startswith("cuda"):
        ram = available_ram()
        budget = int(ram * 0.8) if ram else None
    settings = {"dtype": dtype, "autocast": autocast, "channels_last": channels_last, "compile": compile,
                "optimizer": optimizer if train else None, "inference_mode": inference_mode,
                "cudnn_benchmark": cudnn_benchmark}
    notes = [n for n in work.built.notes if not n.startswith("default input")]
    res = run_bench(m, lambda b: work.make_inputs(b)(dev), name=work.built.name, device=dev,
                    batches=batches or [work.own_batch], default_batch=work.own_batch, predicted_peak=side.peak,
                    flops_of=side.flops, autocast=amp, channels_last=channels_last, compile=compile, train=train,
                    optimizer=opt, inference_mode=inference_mode, cudnn_benchmark=cudnn_benchmark,
                    profile=profile, budget=budget, min_reps=min_reps, min_seconds=min_seconds,
                    settings=settings, notes=notes, progress=progress)
    res.add_predictions(side.latency, acc)
    return res


def predict(model: Profile | nn.Module | str, gpu: Any, inputs: InputsLike = None, *, dtype: str | None = None,
            precision: str | None = None, batch: int | None = None, train: bool = False,
            optimizer: str | None = None, checkpointing: bool = False, tf32: bool | None = None,
            efficiency: Mapping[str, float] | None = None, hardware: str | None = None,
            weights: str | None = None, trust_remote_code: bool = False) -> Any:
    """Roofline latency of one forward (``train``: one training step with SGD) on accelerator ``gpu``.

    ``model`` is a :class:`Profile` (its trace is used as it is) or a model as for
    :func:`profile`. ``gpu`` is an id or name from ``footprint gpus`` or an
    :class:`~torch_footprint.hardware.Accelerator`. With a model, ``dtype`` (inference) or
    ``precision`` (training) casts weights and inputs before tracing; with a Profile
    ``dtype`` only sets the rate of the matrix work (bytes stay as traced). Returns a
    :class:`~torch_footprint.estimate.roofline.Prediction`.
    """
    from .estimate.recommend import arithmetic
    from .estimate.roofline import estimate_latency
    from .estimate.workload import StepSpec, trace_step
    from .hardware import Accelerator, get

    if optimizer or checkpointing:
        raise FootprintError("predict times one training step with SGD: --optimizer and --checkpointing "
                             "belong to `footprint fit` and `footprint memory`")
    prec = arithmetic(dtype, precision)
    acc = gpu if isinstance(gpu, Accelerator) else get(str(gpu), hardware)
    if isinstance(model, Profile):
        if batch is not None or inputs is not None:
            raise FootprintError("a Profile was traced already: its batch and inputs cannot change")
        return estimate_latency(model.trace, acc, tf32=tf32, efficiency=efficiency, compute_dtype=dtype or precision)
    spec = StepSpec(train=train, optimizer="sgd" if train else None, precision=prec)
    trace, _ = trace_step(model, inputs, spec, batch=batch, weights=weights, trust_remote_code=trust_remote_code)
    return estimate_latency(trace, acc, tf32=tf32, efficiency=efficiency)


def fit(model: nn.Module | str, inputs: InputsLike = None, *, batch: int | None = None, train: bool = False,
        optimizer: str | None = None, precision: str | None = None, dtype: str | None = None,
        checkpointing: bool = False, gpus: int = 1, strategy: str = "ddp", latency: float | str | None = None,
        utilisation: float = 0.8, hardware: str | None = None, only: Sequence[str] | None = None,
        tf32: bool | None = None, efficiency: Mapping[str, float] | None = None, bucket_view: bool = False,
        weights: str | None = None, trust_remote_code: bool = False, tp: int = 1) -> Any:
    """Rank every accelerator for this workload: fits in memory, largest batch, predicted
    latency at ``batch`` and throughput at the largest batch, and the pick.

    ``batch`` is per rank; with ``gpus`` > 1 the memory is per rank under ``strategy``
    ("ddp", "zero1", "zero2", "zero3", "fsdp"), and ``tp`` of the ``gpus`` split each layer
    (tensor parallelism); training over several ranks is timed with its communication.
    ``latency`` ("10ms", or seconds) makes the pick the lowest-power accelerator that meets it.
    ``dtype`` (inference) or ``precision`` (training: fp32, fp16, bf16, fp16-mixed, bf16-mixed)
    set the arithmetic. ``only`` limits the ids considered; ``hardware`` adds a user database file. Returns a
    :class:`~torch_footprint.estimate.recommend.FitResult`.
    """
    from .estimate.recommend import arithmetic, recommend
    from .estimate.workload import StepSpec
    from .quantities import parse_seconds

    spec = StepSpec(train, optimizer, arithmetic(dtype, precision), checkpointing)
    return recommend(model, inputs, spec, batch=batch, gpus=gpus, strategy=strategy,
                     target_s=parse_seconds(latency) if latency is not None else None, utilisation=utilisation,
                     hardware=hardware, only=only, tf32=tf32, efficiency=efficiency, bucket_view=bucket_view,
                     weights=weights, trust_remote_code=trust_remote_code, tp=tp)


def gpus(hardware: str | None = None, vendor: str | None = None) -> list[Any]:
    """The accelerator rows: the database, this machine's, and ``hardware``'s; only ``vendor``'s if given."""
    from .hardware.catalog import load

    rows = load(hardware)
    if vendor:
        rows = [a for a in rows if a.vendor == vendor.lower()]
        if not rows:
            raise FootprintError(f"no accelerator of vendor '{vendor}': vendors are nvidia, amd, apple, local")
    return rows


def calibrate(device: str = "cpu", *, quick: bool = False, save: bool = True,
              on_step: Callable[[str], None] | None = None, nproc: int | None = None) -> tuple[dict[str, Any], Any]:
    """Measure this machine's ceilings; with ``save``, keep them for later predictions.
    ``nproc`` also times all-reduces across that many ranks under torchrun (the link that
    ``bench --nproc`` and ``fit`` on this device use). Returns the measurements and the
    path they were saved to (None when not saved)."""
    from .hardware.local import save_calibration
    from .measure.calibrate import calibrate as run

    if nproc is not None:
        from .measure.distributed import check_nproc

        check_nproc(nproc, device)
    res = run(device, quick=quick, on_step=on_step)
    if nproc is not None:
        from .measure.distributed import measure_link

        if on_step:
            on_step(f"all-reduce across {nproc} ranks")
        res["link"] = measure_link(nproc, device, quick=quick)
    return res, save_calibration(device, res) if save else None


def bench_ranks(model: str, inputs: InputsLike = None, *, nproc: int, strategy: str = "ddp",
                batch: int | None = None, optimizer: str = "sgd", precision: str = "fp32", device: str = "cpu",
                steps: int = 5, warmup: int = 2, timeout: float = 600.0) -> Any:
    """Training steps on ``nproc`` ranks started by torchrun (gloo on CPU, NCCL on CUDA),
    wrapped by torch's own DDP, ZeroRedundancyOptimizer, fully_shard or tensor-parallel
    plan (``strategy``: ddp, zero1, zero2, zero3, fsdp, tp): each rank's measured peak,
    step time and communication time beside one rank's prediction. ``model`` is given by
    name (each rank builds it). Returns a :class:`~torch_footprint.measure.distributed.RanksBench`."""
    from .estimate.ranks import check_strategy, predict_rank
    from .estimate.workload import StepSpec, trace_step
    from .hardware.catalog import local_accelerator
    from .measure.distributed import RanksBench, check_nproc, launch, usable_cores
    from .measure.runner import pick_device

    check_strategy(strategy)
    if not isinstance(model, str):
        raise FootprintError("bench --nproc builds the model in every rank: give it by name, not as a module")
    dev = pick_device(device)
    check_nproc(nproc, dev)
    if steps < 1 or warmup < 0:
        raise FootprintError("--steps must be at least 1 and --warmup not negative")
    tp = nproc if strategy == "tp" else 1
    spec = StepSpec(train=True, optimizer=optimizer, precision=precision, tp=tp)
    trace, notes = trace_step(model, inputs, spec, batch=batch)
    acc = local_accelerator(dev)
    threads = max(1, usable_cores() // nproc)
    share = 1.0
    if not dev.startswith("cuda") and acc is not None and acc.calibrated:  # the ranks share this CPU's cores
        share = threads / max(1, int(acc.calibrated.get("threads") or threads))
    pred = predict_rank(trace, strategy, 1 if strategy == "tp" else nproc, tp, acc, share)
    if acc is None:
        pred.notes.append("run `footprint calibrate --nproc N` to see the predicted step time beside this")
    run = {"model": model, "inputs": _portable(inputs),
           "batch": batch, "optimizer": optimizer, "precision": precision, "strategy": strategy,
           "device": "cuda" if dev.startswith("cuda") else "cpu", "warmup": warmup, "steps": steps}
    ranks = launch(run, nproc, timeout=timeout, threads=threads)
    settings = {"optimizer": optimizer, "precision": precision, "batch_per_rank": batch, "threads": threads,
                "steps": steps, "warmup": warmup}
    return RanksBench(model=trace.model, strategy=strategy, nproc=nproc, device=dev, settings=settings, ranks=ranks,
                      predicted=pred, notes=[n for n in notes if not n.startswith("default input")])


def _portable(inputs: InputsLike) -> Any:
    """Inputs as text the ranks parse again: a list of shapes, or a dict of them by keyword."""
    from .dtypes import name_of
    from .sources.inputs import InputSpec, normalize_inputs

    pos, kw = normalize_inputs(inputs)
    if pos and kw:
        raise FootprintError("bench --nproc takes positional or keyword inputs, not both")

    def text(x: Any) -> Any:
        if isinstance(x, InputSpec):
            return ",".join(map(str, x.shape)) + ":" + name_of(x.dtype)
        return x

    return {k: text(v) for k, v in kw.items()} if kw else ([text(x) for x in pos] or None)
