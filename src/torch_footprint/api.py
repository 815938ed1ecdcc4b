"""The Python API: the same verbs as the command line, each a few lines over the stages.

``profile`` traces (trace/) and reads the trace (analysis/); ``memory``, ``predict`` and
``fit`` trace a workload and estimate from it (estimate/); ``bench`` measures (measure/)
with the estimates beside; ``gpus`` and ``calibrate`` read and write the hardware rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
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
           weights: str | None = None, trust_remote_code: bool = False, step: str = "first") -> Any:
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
    ``step``: "first" (the optimizer allocates its state in its step) or "steady" (a later
    step: the state exists before the forward).
    """
    from .estimate.memory import estimate_memory
    from .estimate.workload import StepSpec

    spec = StepSpec(train, optimizer, precision, checkpointing, grads, step)
    return estimate_memory(model, inputs, spec, batch=batch, device=device, budget=budget, utilisation=utilisation,
                           scaling=scaling, overheads=overheads, weights=weights,
                           trust_remote_code=trust_remote_code)


def bench(model: nn.Module | str, inputs: InputsLike = None, *, device: str | None = None,
          batch_sizes: Sequence[int | str] | str | None = None, dtype: str | None = None,
          autocast: str | None = None, channels_last: bool = False, compile: bool = False, train: bool = False,
          optimizer: str = "sgd", inference_mode: bool = True, cudnn_benchmark: bool = False,
          profile: bool = False, max_memory: int | str | None = None, min_reps: int = 30,
          min_seconds: float = 2.0, weights: str | None = None, trust_remote_code: bool = False,
          progress: Callable[[str, float | None], None] | None = None, threads: int | None = None) -> Any:
    """Measure latency and throughput of ``model`` on ``device`` (default: cuda if present).

    A model given by name is built with random weights (its constructor's initialisation).
    ``batch_sizes`` ("1,8,auto" or a list; None: the inputs' own) may hold "auto": the
    largest batch that runs, found by doubling and bisection, recovering from
    out-of-memory; on CPU a batch whose predicted peak is over ``max_memory`` (default 80%
    of the available RAM) counts as out of memory without running. ``profile`` adds
    torch.profiler's operator table. ``threads`` sets torch's CPU threads for the run (each
    timing says whether other processes competed for the CPUs, and which thread count would
    have had a CPU each). Returns a :class:`~torch_footprint.measure.runner.BenchResult`.
    """
    with _threads(threads):
        return _bench(model, inputs, device=device, batch_sizes=batch_sizes, dtype=dtype, autocast=autocast,
                      channels_last=channels_last, compile=compile, train=train, optimizer=optimizer,
                      inference_mode=inference_mode, cudnn_benchmark=cudnn_benchmark, profile=profile,
                      max_memory=max_memory, min_reps=min_reps, min_seconds=min_seconds, weights=weights,
                      trust_remote_code=trust_remote_code, progress=progress)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """torch's CPU thread count set to ``n`` for the block (None: unchanged)."""
    if n is None:
        yield
        return
    if n < 1:
        raise FootprintError(f"--threads must be at least 1, got {n}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _bench(model: nn.Module | str, inputs: InputsLike, *, device: str | None, batch_sizes: Any, dtype: str | None,
           autocast: str | None, channels_last: bool, compile: bool, train: bool, optimizer: str,
           inference_mode: bool, cudnn_benchmark: bool, profile: bool, max_memory: int | str | None,
           min_reps: int, min_seconds: float, weights: str | None, trust_remote_code: bool,
           progress: Callable[[str, float | None], None] | None) -> Any:
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
        weights: str | None = None, trust_remote_code: bool = False) -> Any:
    """Rank every accelerator for this workload: fits in memory, largest batch, predicted
    latency at ``batch`` and throughput at the largest batch, and the pick.

    ``batch`` is per rank; with ``gpus`` > 1 the memory is per rank under ``strategy``
    ("ddp", "zero1", "zero2", "zero3", "fsdp"). ``latency`` ("10ms", or seconds) makes the
    pick the lowest-power accelerator that meets it. ``dtype`` (inference) or ``precision``
    (training: fp32, fp16, bf16, fp16-mixed, bf16-mixed) set the arithmetic. ``only``
    limits the ids considered; ``hardware`` adds a user database file. Returns a
    :class:`~torch_footprint.estimate.recommend.FitResult`.
    """
    from .estimate.recommend import arithmetic, recommend
    from .estimate.workload import StepSpec
    from .quantities import parse_seconds

    spec = StepSpec(train, optimizer, arithmetic(dtype, precision), checkpointing)
    return recommend(model, inputs, spec, batch=batch, gpus=gpus, strategy=strategy,
                     target_s=parse_seconds(latency) if latency is not None else None, utilisation=utilisation,
                     hardware=hardware, only=only, tf32=tf32, efficiency=efficiency, bucket_view=bucket_view,
                     weights=weights, trust_remote_code=trust_remote_code)


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
              on_step: Callable[[str], None] | None = None, force: bool = False,
              threads: int | None = None) -> tuple[dict[str, Any], Any]:
    """Measure this machine's ceilings; with ``save``, keep them for later predictions.

    A calibration that fails its own checks (a cache copy slower than DRAM, a ceiling far
    from this device's previous calibration, a busy machine) is not saved unless ``force``;
    its ``problems`` list says why. ``threads`` sets torch's CPU threads while measuring.
    Returns the measurements and the path they were saved to (None when not saved)."""
    from .hardware.local import device_key, read_calibrations, save_calibration
    from .measure.calibrate import calibrate as run
    from .measure.calibrate import check

    with _threads(threads):
        res = run(device, quick=quick, on_step=on_step)
        res["problems"] = check(res, read_calibrations().get(device_key(device)))
        keep = save and (force or not res["problems"])
        return res, save_calibration(device, res) if keep else None
