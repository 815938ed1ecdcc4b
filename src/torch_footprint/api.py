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

__all__ = ["Profile", "bench", "calibrate", "check", "diff", "fit", "gpus", "llm", "memory", "predict", "profile",
           "report"]


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
    A training step with an optimizer is reported twice: the first step (the optimizer
    allocates its state in its step) and a later one (``steady``: the state exists before
    it); the total uses the larger.
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
            weights: str | None = None, trust_remote_code: bool = False, layout: str = "nchw") -> Any:
    """Roofline latency of one forward (``train``: one training step with SGD) on accelerator ``gpu``.

    ``model`` is a :class:`Profile` (its trace is used as it is) or a model as for
    :func:`profile`. ``gpu`` is an id or name from ``footprint gpus`` or an
    :class:`~torch_footprint.hardware.Accelerator`. With a model, ``dtype`` (inference) or
    ``precision`` (training) casts weights and inputs before tracing; with a Profile
    ``dtype`` only sets the rate of the matrix work (bytes stay as traced). ``layout``: "nchw"
    (PyTorch's default) or "nhwc" (``channels_last``), the memory layout of 4-d activations.
    Returns a :class:`~torch_footprint.estimate.roofline.Prediction`.
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
        return estimate_latency(model.trace, acc, tf32=tf32, efficiency=efficiency, compute_dtype=dtype or precision,
                                layout=layout)
    spec = StepSpec(train=train, optimizer="sgd" if train else None, precision=prec)
    trace, _ = trace_step(model, inputs, spec, batch=batch, weights=weights, trust_remote_code=trust_remote_code)
    return estimate_latency(trace, acc, tf32=tf32, efficiency=efficiency, layout=layout)


def fit(model: nn.Module | str, inputs: InputsLike = None, *, batch: int | None = None, train: bool = False,
        optimizer: str | None = None, precision: str | None = None, dtype: str | None = None,
        checkpointing: bool = False, gpus: int = 1, strategy: str = "ddp", latency: float | str | None = None,
        utilisation: float = 0.8, hardware: str | None = None, only: Sequence[str] | None = None,
        tf32: bool | None = None, efficiency: Mapping[str, float] | None = None, bucket_view: bool = False,
        weights: str | None = None, trust_remote_code: bool = False, tp: int = 1,
        sequence_parallel: bool = False, network: str | None = None, gpus_per_node: int = 8) -> Any:
    """Rank every accelerator for this workload: fits in memory, largest batch, predicted
    latency at ``batch`` and throughput at the largest batch, and the pick.

    ``batch`` is per rank; with ``gpus`` > 1 the memory is per rank under ``strategy``
    ("ddp", "zero1", "zero2", "zero3", "fsdp"), and ``tp`` of the ``gpus`` split each layer
    (tensor parallelism; ``sequence_parallel`` also splits the sequence of what lies between
    the split linears); training over several ranks is timed with its communication, over
    ``network`` (an id of hardware/networks.toml) between nodes of ``gpus_per_node``.
    ``latency`` ("10ms", or seconds) makes the pick the lowest-power accelerator that meets it.
    ``dtype`` (inference) or ``precision`` (training: fp32, fp16, bf16, fp16-mixed, bf16-mixed)
    set the arithmetic. ``only`` limits the ids considered; ``hardware`` adds a user database file. Returns a
    :class:`~torch_footprint.estimate.recommend.FitResult`.
    """
    from .estimate.recommend import arithmetic, recommend
    from .estimate.workload import StepSpec
    from .quantities import parse_seconds

    spec = StepSpec(train, optimizer, arithmetic(dtype, precision), checkpointing,
                    sequence_parallel=sequence_parallel)
    return recommend(model, inputs, spec, batch=batch, gpus=gpus, strategy=strategy,
                     target_s=parse_seconds(latency) if latency is not None else None, utilisation=utilisation,
                     hardware=hardware, only=only, tf32=tf32, efficiency=efficiency, bucket_view=bucket_view,
                     weights=weights, trust_remote_code=trust_remote_code, tp=tp, network=network,
                     gpus_per_node=gpus_per_node)


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
              on_step: Callable[[str], None] | None = None, nproc: int | None = None, force: bool = False,
              threads: int | None = None) -> tuple[dict[str, Any], Any]:
    """Measure this machine's ceilings; with ``save``, keep them for later predictions.

    A calibration that fails its own checks (a cache copy slower than DRAM, a ceiling far
    from this device's previous calibration, a busy machine) is not saved unless ``force``;
    its ``problems`` list says why. ``threads`` sets torch's CPU threads while measuring.
    ``nproc`` also times all-reduces across that many ranks under torchrun (the link that
    ``bench --nproc`` and ``fit`` on this device use). Returns the measurements and the
    path they were saved to (None when not saved)."""
    from .hardware.local import device_key, read_calibrations, save_calibration
    from .measure.calibrate import calibrate as run
    from .measure.calibrate import check

    if nproc is not None:
        from .measure.distributed import check_nproc

        check_nproc(nproc, device)
    with _threads(threads):
        res = run(device, quick=quick, on_step=on_step)
        if nproc is not None:
            from .measure.distributed import measure_link

            if on_step:
                on_step(f"all-reduce across {nproc} ranks")
            res["link"] = measure_link(nproc, device, quick=quick)
        res["problems"] = check(res, read_calibrations().get(device_key(device)))
        keep = save and (force or not res["problems"])
        return res, save_calibration(device, res) if keep else None


def llm(model: nn.Module | str, *, prompt: int = 1024, output: int = 256, batch: int = 1,
        weights: str | None = None, kv: str | None = None, gpu: str | Sequence[str] | None = None, gpus: int = 1,
        tp: int | None = None, engine: str | None = None, chunk: int | None = None, allow_longer: bool = False,
        hardware: str | None = None, efficiency: Mapping[str, float] | None = None, measure: bool = False,
        device: str = "cpu", trust_remote_code: bool = False,
        on_step: Callable[[str], None] | None = None) -> Any:
    """What a causal language model needs to serve ``batch`` requests of ``prompt`` tokens
    generating ``output`` tokens each: per accelerator, memory (weights, KV cache, prefill
    activations, runtime), whether it fits, the largest batch and longest context that fit,
    time to first token, time per output token and tokens per second.

    ``weights``: bf16, fp16, fp8, fp8-block128, int8, int4-g128 (GPTQ), int4-g128-awq, nf4,
    q4_0, q8_0, q4_k_m, q5_k_m, q6_k (default: as the checkpoint stores them). ``kv``: bf16,
    fp16, fp8, int8 (default: the activations' dtype). ``gpu``: one id or several (default:
    every accelerator). ``gpus`` devices per replica with ``tp``-way tensor parallelism
    (default tp = gpus). ``engine="vllm"`` adds vLLM's cache sizing. ``chunk``: chunked
    prefill of that many tokens. ``measure``: also run the model for real on ``device``
    (random weights) and time its prefill and decode. Returns an
    :class:`~torch_footprint.estimate.llm.LlmResult`.
    """
    from .estimate.llm import Serving, check_context, serve
    from .estimate.quantization import checkpoint_scheme, kv_scheme, weight_scheme
    from .estimate.serving import cache_argument, last_logits_only, trace_serving
    from .hardware.catalog import load, local_accelerator
    from .hardware.db import find

    tp = gpus if tp is None else tp
    if gpus < 1 or tp < 1 or gpus % tp:
        raise FootprintError(f"--gpus must be a multiple of --tp (both at least 1), got gpus {gpus}, tp {tp}")
    if engine not in (None, "vllm"):
        raise FootprintError(f"unknown engine '{engine}': the only engine convention is vllm")
    if chunk is not None and chunk < 1:
        raise FootprintError(f"--chunk must be at least 1 token, got {chunk}")
    scheme = weight_scheme(weights) if weights else None
    kv_elem = kv_scheme(kv) if kv else None
    serving = Serving(batch=batch, prompt=prompt, output=output, weights=scheme, kv_bytes=kv_elem, kv_name=kv,
                      gpus=gpus, tp=tp, engine=engine, chunk=chunk)
    check_context(serving, None, allow_longer)
    # the activations' dtype: a 16-bit scheme's own, a quantized one's 16-bit type, else as built
    dtype = None if scheme is None else scheme.name if scheme.name in ("bf16", "fp16") else scheme.sixteen
    st = trace_serving(model, batch=1, prompt=prompt, dtype=dtype, trust_remote_code=trust_remote_code,
                       on_step=on_step, check_context=lambda most: check_context(serving, most, allow_longer))
    if scheme is None:
        serving.weights = checkpoint_scheme(st.config)
    rows = load(hardware)
    if measure:
        local = local_accelerator(device)
        wanted = [local] if local is not None else []
        if gpu:
            wanted += [find(rows, g) for g in ([gpu] if isinstance(gpu, str) else gpu)]
    elif gpu:
        wanted = [find(rows, g) for g in ([gpu] if isinstance(gpu, str) else gpu)]
    else:
        wanted = [a for a in rows if a.bandwidth_gbs is not None or a.calibrated]
    res = serve(st, serving, wanted, max_context=None if allow_longer else st.max_context,
                efficiency=dict(efficiency) if efficiency else None)
    if measure:
        from .measure.generate import measure_generation
        from .sources import prepare
        from .sources.models import real_weights

        if on_step:
            on_step(f"running the model on {device}: prefill and {output} decode steps")
        with real_weights():
            work = prepare(model, "1,1:int64", dtype=dtype, trust_remote_code=trust_remote_code)
        m = work.model.to(device)
        res.measured = measure_generation(m, batch=batch, prompt=prompt, output=output, device=device,
                                          cache_kwarg=cache_argument(m), prefill_kwargs=last_logits_only(m))
        if not wanted:
            res.notes.append(f"no prediction for {device}: run `footprint calibrate` first to measure its rates")
    return res


def report(model: nn.Module | str, inputs: InputsLike = None, *, batch: int | None = None, train: bool = False,
           optimizer: str | None = None, precision: str | None = None, dtype: str | None = None,
           checkpointing: bool = False, gpu: Any = None, fit: bool = False, bench: bool = False,
           utilisation: float = 0.8, hardware: str | None = None, weights: str | None = None,
           trust_remote_code: bool = False) -> Any:
    """Everything about one workload, from one trace, for the HTML report: the profile, the
    memory estimate and its timeline by category, and on accelerator ``gpu`` (an id or an
    :class:`~torch_footprint.hardware.Accelerator`) the roofline prediction; with ``fit``
    every accelerator's answer, with ``bench`` a measurement on this machine (the model is
    built with random weights and run). Returns a :class:`~torch_footprint.bundle.Report`:
    ``to_dict()`` is what ``--json`` saves, and it renders itself in a notebook.
    """
    from .bundle import report_of
    from .estimate.memory import memory_of
    from .estimate.recommend import arithmetic, recommend
    from .estimate.workload import StepSpec, trace_step
    from .hardware import Accelerator, get

    spec = StepSpec(train, optimizer, arithmetic(dtype, precision), checkpointing)
    acc = gpu if isinstance(gpu, Accelerator) or gpu is None else get(str(gpu), hardware)
    trace, notes = trace_step(model, inputs, spec, batch=batch, weights=weights, trust_remote_code=trust_remote_code)
    device = "cuda" if acc is not None and acc.kind == "gpu" else "cpu"
    mem = memory_of(trace, spec, notes, device=device, utilisation=utilisation)
    fitted = recommend(model, inputs, spec, batch=batch, utilisation=utilisation, hardware=hardware,
                       weights=weights, trust_remote_code=trust_remote_code) if fit else None
    measured = globals()["bench"](model, inputs, batch_sizes=[batch] if batch else None, dtype=dtype, train=train,
                                  optimizer=optimizer or "sgd", weights=weights,
                                  trust_remote_code=trust_remote_code) if bench else None
    return report_of(Profile(trace, notes), mem, acc, fit=fitted, bench=measured)


def diff(before: str, after: str, *, force: bool = False, depth: int | None = 2) -> Any:
    """What changed from saved result ``before`` to ``after`` (file paths), by metric and by
    module down to ``depth``. Results of different models, inputs or settings are refused
    unless ``force``. Returns a :class:`~torch_footprint.analysis.diff.Diff`."""
    from .analysis.diff import diff as compare
    from .report.schema import load

    return compare(load(before), load(after), force=force, depth=depth, names=(f"'{before}'", f"'{after}'"))


def check(target: str, budget: str, *, trust_remote_code: bool = False) -> Any:
    """``target`` (a saved result, or a model run as the budget's [workload] says) against the
    caps of budget file ``budget``. Returns a :class:`~torch_footprint.analysis.budget.CheckResult`."""
    import os

    from .analysis.budget import CheckResult, parse_budget
    from .analysis.budget import check as against
    from .analysis.diff import what_differs
    from .analysis.metrics import metrics_of
    from .report.schema import envelope, load
    from .sources.inputs import parse_input_ids, parse_shape

    b = parse_budget(budget)
    base = load(b.baseline) if b.baseline else None
    baseline = metrics_of(base) if base else None

    def result(doc: dict[str, Any], metrics: dict[str, Any]) -> CheckResult:
        notes = []
        if base is not None and base["fingerprint"]["sha256"] != doc["fingerprint"]["sha256"]:
            differs = what_differs(base["fingerprint"], doc["fingerprint"])
            notes.append("the baseline is of a different workload (" + "; ".join(differs[:4]) + ")")
        return CheckResult(against(b, metrics, baseline), doc["fingerprint"], b.path, notes)

    if target.endswith(".json") or os.path.isfile(target):
        doc = load(target)
        return result(doc, metrics_of(doc))
    w = b.workload
    shapes = w.get("input", [])
    specs = [parse_shape(str(x)) for x in ([shapes] if isinstance(shapes, str) else shapes)]
    if w.get("input-ids"):
        specs.append(parse_input_ids(str(w["input-ids"])))
    accs = b.accelerators
    rep = report(target, specs or None, batch=w.get("batch"), train=bool(w.get("train")), optimizer=w.get("optimizer"),
                 precision=w.get("precision"), dtype=w.get("dtype"), checkpointing=bool(w.get("checkpointing")),
                 gpu=accs[0] if accs else None, utilisation=float(w.get("utilisation", 0.8)),
                 weights=w.get("weights"), trust_remote_code=trust_remote_code)
    doc = envelope("report", rep.to_dict())
    metrics = metrics_of(doc)
    for acc in accs:  # under the budget's own spelling of each accelerator (an id or a name)
        (latency,) = metrics_of({"kind": "predict", **predict(rep.profile, acc).to_dict()}).values()
        metrics[f"latency_ms on {acc}"] = latency
    return result(doc, metrics)


def bench_ranks(model: str, inputs: InputsLike = None, *, nproc: int, strategy: str = "ddp",
                batch: int | None = None, optimizer: str = "sgd", precision: str = "fp32", device: str = "cpu",
                steps: int = 5, warmup: int = 2, timeout: float = 600.0) -> Any:
    """Training steps on ``nproc`` ranks started by torchrun (gloo on CPU, NCCL on CUDA),
    wrapped by torch's own DDP, ZeroRedundancyOptimizer, fully_shard or tensor-parallel
    plan (``strategy``: ddp, zero1, zero2, zero3, fsdp, tp): each rank's measured peak,
    step time and communication time beside one rank's prediction. ``model`` is given by
    name (each rank builds it). Returns a :class:`~torch_footprint.measure.distributed.RanksBench`."""
    from .estimate.ranks import check_strategy, predict_rank, rank_device
    from .estimate.workload import StepSpec, trace_step
    from .hardware.catalog import local_accelerator
    from .measure import contention
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
    share, where = 1.0, ""
    if not dev.startswith("cuda") and acc is not None and acc.calibrated:  # the ranks share this CPU's cores
        acc, share, where = rank_device(acc, nproc, threads)
    pred = predict_rank(trace, strategy, 1 if strategy == "tp" else nproc, tp, acc, share)
    if acc is None:
        pred.notes.append("run `footprint calibrate --nproc N` to see the predicted step time beside this")
    elif where and pred.step is not None:
        pred.step.notes.append(where)
    run = {"model": model, "inputs": _portable(inputs),
           "batch": batch, "optimizer": optimizer, "precision": precision, "strategy": strategy,
           "device": "cuda" if dev.startswith("cuda") else "cpu", "warmup": warmup, "steps": steps}
    before = contention.sample(children=True)
    ranks = launch(run, nproc, timeout=timeout, threads=threads)
    busy = None if dev.startswith("cuda") else contention.between(before, contention.sample(children=True),
                                                                  nproc * threads)
    settings = {"optimizer": optimizer, "precision": precision, "batch_per_rank": batch, "threads": threads,
                "steps": steps, "warmup": warmup}
    notes = [n for n in notes if not n.startswith("default input")]
    if busy is not None and busy.describe():
        notes.append(busy.describe().replace("this process got", "the ranks got"))
    return RanksBench(model=trace.model, strategy=strategy, nproc=nproc, device=dev, settings=settings, ranks=ranks,
                      predicted=pred, notes=notes, contention=busy)


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
