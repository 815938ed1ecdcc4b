"""The Python API: the command line's verbs, each a few lines over the stages.

Every verb takes the model (and, where it runs one, its inputs) positionally, then the
setting records of :mod:`torch_footprint.settings` by name or their fields as keyword
shortcuts: ``fit("resnet50", training=Training(train=True), gpus=8)``. :data:`VERBS` says
which records (and fields) each verb reads; the command line derives its flags from the same
table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import FootprintError
from .settings import (
    Calibration,
    Measurement,
    Memory,
    Parallel,
    Plan,
    Record,
    Sections,
    Serving,
    Simulation,
    Target,
    Training,
    Watch,
    Workload,
    signature_of,
    verb_records,
)

if TYPE_CHECKING:
    from .analysis import Profile
    from .estimate.kernels.prediction import Prediction
    from .estimate.llm.fleet import FleetPlan
    from .estimate.llm.result import LlmResult
    from .estimate.memory import MemoryEstimate
    from .estimate.plan import PlanResult
    from .estimate.recommend import FitResult
    from .hardware import Accelerator
    from .measure.calibrate import CalibrationResult
    from .measure.distributed import RanksBench
    from .measure.runner import BenchResult
    from .measure.watch import Sample, WatchResult
    from .results.budget import CheckResult
    from .results.diff import Diff
    from .results.overview import Overview

__all__ = ["VERBS", "bench", "calibrate", "check", "diff", "fit", "gpus", "llm", "memory", "plan", "predict",
           "profile", "report", "watch"]

ModelLike = Any  # a name ("resnet50", "timm:...", "hf:...", a config folder, "file.py:factory") or an nn.Module
InputsLike = Any  # a tensor, a shape spec ("1,3,224,224", "1,128:int64"), a sequence of those, a mapping by keyword
ALL = None
WORK = ("model", "inputs", "batch", "precision", "weights", "attention", "trust_remote_code", "reuse")
ESTIMATE = ("gpu", "hardware", "tf32", "efficiency")
HOW = ("compile", "cuda_graphs")  # how the model runs: eager, compiled, replayed as a CUDA graph

# verb -> the records it reads: record -> its fields (ALL: every one)
VERBS: dict[str, dict[type[Record], Sequence[str] | None]] = {
    "profile": {Workload: (*WORK, "tensors"), Training: ("train", "optimizer", "checkpointing")},
    "memory": {Workload: WORK, Training: ALL, Target: ("device", "utilisation"), Memory: ALL},
    "bench": {Workload: ("model", "inputs", "precision", "weights", "channels_last", "compile", "trust_remote_code"),
              Training: ("train", "optimizer"),
              Parallel: ("strategy", "gpus", "pp", "vpp", "pp_schedule", "grad_accum"), Target: ("device",),
              Measurement: ALL},
    "predict": {Workload: (*WORK, "channels_last", *HOW), Training: ALL, Parallel: ALL, Target: ESTIMATE},
    "fit": {Workload: (*WORK, *HOW), Training: ALL, Parallel: ALL, Target: (*ESTIMATE, "utilisation", "latency")},
    "report": {Workload: WORK, Training: ALL, Target: ("gpu", "hardware", "utilisation"), Sections: ALL},
    "llm": {Workload: ("model", "batch", "attention", "trust_remote_code", "reuse"), Serving: ALL,
            Parallel: ("gpus", "tp"), Target: ("gpu", "hardware", "device", "efficiency", "price"), Simulation: ALL},
    "plan": {Workload: ("model", "precision", "weights", "attention", "trust_remote_code", "reuse"),
             Training: ("train", "optimizer", "ac", "fused_kernels"),
             Parallel: ("gpus", "tp", "sequence_parallel", "vocab_parallel", "async_tp", "framework",
                        "fsdp_param_dtype", "fsdp_reduce_dtype", "grad_reduce_dtype", "fp8", "network",
                        "network_gbps", "nics_per_node", "gpus_per_node"),
             Target: ("gpu", "hardware", "utilisation", "tf32", "efficiency", "price"), Plan: ALL,
             Serving: ("prompt", "output", "kv", "engine", "max_model_len", "engine_version",
                       "gpu_memory_utilization", "max_num_batched_tokens", "block_size", "num_prompts"),
             Simulation: ("request_rate", "lengths", "request_trace", "seed", "slo_ttft", "slo_tpot",
                          "prefix_hit_rate")},
    "calibrate": {Target: ("device",), Measurement: ("nproc", "threads"), Calibration: ALL},
    "watch": {Watch: ALL, Workload: ("inputs", "batch", "precision", "weights", "trust_remote_code"), Training: ALL,
              Target: ("device", "utilisation")},
}


def _records(verb: str, settings: Mapping[str, Any], model: Any = None, inputs: Any = None) -> tuple[Any, ...]:
    """The verb's records (:data:`VERBS`), the model and inputs given positionally winning over a
    Workload's; under IPython, results draw themselves."""
    from .report.notebook import notebook_views

    given = dict(settings)
    if model is not None:
        given["model"] = model
    if inputs is not None:
        given["inputs"] = inputs
    notebook_views()
    return verb_records(verb, VERBS[verb], given)


def _verb(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a verb the signature help() and editors show: its own parameters, then its records and fields."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__signature__ = signature_of(VERBS[name], fn)  # type: ignore[attr-defined]
        return fn
    return wrap


@_verb("profile")
def profile(model: ModelLike, inputs: InputsLike = None, **settings: Any) -> Profile:
    """Parameters, FLOPs and MACs of one forward pass (with ``train``, forward and backward in
    train mode; with an ``optimizer``, checkpointing or a mixed ``precision``, the whole training
    step as memory and predict trace it: its trace is then priced as it is by
    ``predict(profile, gpu)``). ``model``'s weights are left untouched; ``inputs`` None uses its
    default input."""
    from .analysis import Profile
    from .estimate.workload import trace_forward, trace_step

    w, t = _records("profile", settings, model, inputs)
    step = t.optimizer or t.checkpointing or (w.precision or "").endswith("-mixed")
    trace, notes = trace_step(w, t) if step else trace_forward(w, t)
    return Profile(trace, notes)


@_verb("memory")
def memory(model: ModelLike, inputs: InputsLike = None, **settings: Any) -> MemoryEstimate:
    """Peak memory of one inference (or, with ``train``, one training step), from the trace: the
    peak, where it happens, a breakdown by category, the timeline, the device's fixed overheads,
    what to provision at ``utilisation``, and with ``max_batch`` (a budget such as "24GiB") the
    largest batch that fits. A step with an optimizer is reported twice, first and steady."""
    from .estimate.memory import estimate_memory

    w, t, target, mem = _records("memory", settings, model, inputs)
    return estimate_memory(w, t, target, mem)


@_verb("bench")
def bench(model: ModelLike, inputs: InputsLike = None, *, progress: Callable[[str, float | None], None] | None = None,
          **settings: Any) -> BenchResult | RanksBench:
    """Latency and throughput measured on this machine's ``device`` (default: cuda when present),
    the model built with random weights; batch sizes may hold "auto", the largest that runs. With
    ``nproc``, training steps on that many ranks under torchrun. ``progress(message, fraction)``
    hears what runs."""
    from .measure.bench import bench as measure
    from .measure.bench import bench_ranks

    w, t, p, target, m = _records("bench", settings, model, inputs)
    if m.nproc is None and p.pp > 1:  # a pipeline as fit takes it: --gpus N --pp N, one rank per GPU
        m = dataclasses.replace(m, nproc=p.gpus)
    if m.nproc is not None:
        return bench_ranks(w, t, p, target, m)  # type: ignore[no-any-return]
    return measure(w, t, target, m, progress)  # type: ignore[no-any-return]


@_verb("predict")
def predict(model: Profile | ModelLike, gpu: Accelerator | str, inputs: InputsLike = None,
            **settings: Any) -> Prediction:
    """Roofline latency of one forward (or training step) on accelerator ``gpu`` (an id, a name
    or an :class:`~torch_footprint.hardware.Accelerator`), by module and operator. ``model`` may
    be a :class:`Profile`, whose trace is priced as it is."""
    from .analysis import Profile
    from .estimate.kernels.roofline import estimate_latency
    from .estimate.workload import trace_step
    from .hardware import Accelerator, get

    w, t, p, target = _records("predict", settings, model, inputs)
    acc = gpu if isinstance(gpu, Accelerator) else get(str(gpu), target.hardware)
    layout = p != Parallel()
    if layout and not t.train:
        raise FootprintError("predict prices a parallel layout's training step: add --train (fit answers for "
                             "inference over several GPUs)")
    if isinstance(model, Profile):
        if layout:
            raise FootprintError("a Profile was traced already: give the model to predict a layout's step")
        if w.batch is not None or inputs is not None:
            raise FootprintError("a Profile was traced already: its batch and inputs cannot change")
        plain = None if w.precision is None or w.precision.endswith("-mixed") else w.precision
        return estimate_latency(model.trace, acc, tf32=target.tf32_flag, efficiency=target.efficiencies,
                                compute_dtype=plain, layout=w.layout, compiled=w.compile,
                                cuda_graphs=w.cuda_graphs)
    if not layout:
        from .estimate.kernels.sdpa import sm_of

        trace, _ = trace_step(w, dataclasses.replace(t, optimizer=t.step_optimizer) if t.train else t,
                              cuda_sm=sm_of(acc))
        return estimate_latency(trace, acc, tf32=target.tf32_flag, efficiency=target.efficiencies, layout=w.layout,
                                compiled=w.compile, cuda_graphs=w.cuda_graphs)
    from .estimate.recommend import layout_prediction

    return layout_prediction(w, dataclasses.replace(t, optimizer=t.step_optimizer), p, acc, target)


@_verb("fit")
def fit(model: ModelLike, inputs: InputsLike = None, **settings: Any) -> FitResult:
    """Rank every accelerator (or those of ``gpu``) for this workload: fits in memory, largest
    batch, predicted latency at ``batch`` per rank and throughput at the largest batch, and the
    pick: the fastest that fits or, with ``latency``, the lowest-power one that meets it."""
    from .estimate.recommend import recommend

    w, t, p, target = _records("fit", settings, model, inputs)
    return recommend(w, t, p, target)


@_verb("plan")
def plan(model: ModelLike, *, progress: Callable[[str, float | None], None] | None = None,
         **settings: Any) -> PlanResult | FleetPlan:
    """Search the training layouts of ``gpus`` accelerators ``gpu`` for ``model``: data, tensor
    and pipeline parallelism, virtual stages and schedule, micro-batch and gradient accumulation,
    activation checkpointing and ZeRO/FSDP sharding; keep those that fit, best predicted tokens/s
    per GPU first, with a launch configuration each. With ``serve``, the serving fleets instead:
    accelerator, engine, tensor-parallel degree, knobs and replicas that serve ``request_rate``
    within ``slo_ttft``/``slo_tpot``, cheapest first. ``progress(message, fraction)`` hears the
    search; Ctrl-C stops it with the best found so far."""
    from .estimate.plan import plan as search

    if "training" not in settings:
        settings = {"train": True, **settings}
    w, t, p, target, pl, s, sim = _records("plan", settings, model)
    if pl.serve:
        from .estimate.llm import plan_serving

        return plan_serving(w, s, p, target, sim, pl, progress)
    return search(w, t, p, target, pl, progress)


def gpus(hardware: str | None = None, vendor: str | None = None) -> list[Accelerator]:
    """The accelerator rows: the database, this machine's, and ``hardware``'s; only ``vendor``'s if given."""
    from .hardware.catalog import load

    rows = load(hardware)
    if vendor:
        rows = [a for a in rows if a.vendor == vendor.lower()]
        if not rows:
            raise FootprintError(f"no accelerator of vendor '{vendor}': vendors are nvidia, amd, apple, local")
    return rows


@_verb("calibrate")
def calibrate(device: str | None = None, *, save: bool = True, progress: Callable[[str], None] | None = None,
              **settings: Any) -> CalibrationResult:
    """Measure this machine's ceilings (matmul and convolution FLOP/s, copy bandwidth, call
    overhead; with ``nproc``, all-reduces across that many ranks); with ``save``, keep them for
    later predictions unless they fail their own checks (``force`` saves them anyway)."""
    from .measure.bench import threads
    from .measure.calibrate import calibrate_device

    progress = progress or settings.pop("on_step", None)
    target, m, c = _records("calibrate", {**settings, **({"device": device} if device else {})})
    with threads(m.threads):
        return calibrate_device(target.device or "cpu", quick=c.quick, force=c.force, save=save, nproc=m.nproc,
                                progress=progress)


@_verb("llm")
def llm(model: ModelLike, *, progress: Callable[[str], None] | None = None, **settings: Any) -> LlmResult:
    """What a causal language model needs to serve ``batch`` requests of ``prompt`` tokens that
    generate ``output`` tokens each, per accelerator: memory (weights, KV cache, prefill
    activations, runtime), whether it fits, the largest batch and the longest context that fit,
    time to first token, time per output token, tokens per second; with ``measure``, the same
    run timed on ``device``."""
    from .estimate.llm import serve_model

    progress = progress or settings.pop("on_step", None)
    w, s, p, target, sim = _records("llm", settings, model)
    res = serve_model(w, s, p, target, progress, sim)
    if s.measure:
        from .measure.generate import measure_model

        # the lengths priced (a default fitted to the model's maximum) are the ones run
        res.measured = measure_model(w, dataclasses.replace(s, prompt=res.serving.prompt, output=res.serving.output),
                                     target.device or "cpu", progress)
    return res


@_verb("report")
def report(model: Profile | ModelLike, inputs: InputsLike = None, **settings: Any) -> Overview:
    """Everything about one workload, from one trace, for the HTML report: the profile, the
    memory estimate and its timeline, the roofline prediction on ``gpu``; with ``fit`` every
    accelerator's answer, with ``bench`` a measurement on this machine. ``model`` may be a
    :class:`Profile` (a saved one: its trace is used as it is)."""
    from .analysis import Profile
    from .estimate.kernels.roofline import estimate_latency
    from .estimate.memory import memory_of
    from .estimate.recommend import recommend
    from .estimate.workload import precision_of, trace_step
    from .hardware import Accelerator, get
    from .results.overview import overview_of

    w, t, target, sections = _records("report", settings, model, inputs)
    if len(target.gpu) > 1:
        raise FootprintError("a report draws one accelerator: give --gpu once")
    gpu = target.gpu[0] if target.gpu else None
    acc = gpu if isinstance(gpu, Accelerator) or gpu is None else get(str(gpu), target.hardware)
    if isinstance(model, Profile):  # a saved profile's page: its trace, the memory it implies
        if sections.fit or sections.bench:
            raise FootprintError("a Profile was traced already: fit and bench need the model")
        trace, notes = model.trace, model.notes
    else:
        trace, notes = trace_step(w, t)
    device = "cuda" if acc is not None and acc.kind == "gpu" else "cpu"
    mem = memory_of(trace, precision_of(w), t.checkpointing, notes, device=device, utilisation=target.utilisation)
    pred = estimate_latency(trace, acc) if acc is not None else None
    fitted = recommend(w, t, Parallel(), Target(hardware=target.hardware, utilisation=target.utilisation)) \
        if sections.fit else None
    measured = bench(w.model, w.inputs, measurement=Measurement(batches=str(w.batch) if w.batch else None),
                     precision=w.precision, train=t.train, optimizer=t.optimizer, weights=w.weights,
                     trust_remote_code=w.trust_remote_code) if sections.bench else None
    return overview_of(Profile(trace, notes), mem, acc, prediction=pred, fit=fitted, bench=measured)


def diff(before: str, after: str, *, force: bool = False, depth: int | None = 2) -> Diff:
    """What changed from saved result ``before`` to ``after`` (file paths), by metric and by
    module down to ``depth``. Results of different models, inputs or settings are refused
    unless ``force``."""
    from .results.diff import diff as compare
    from .results.record import load

    return compare(load(before), load(after), force=force, depth=depth, names=(f"'{before}'", f"'{after}'"))


def check(target: str, budget: str, *, trust_remote_code: bool = False) -> CheckResult:
    """``target`` (a saved result, or a model run as the budget's [workload] says) against the
    caps of budget file ``budget``: each cap's outcome, and whether all passed."""
    from .results.budget import check_target

    return check_target(target, budget, trust_remote_code=trust_remote_code, report=report, predict=predict)


@_verb("watch")
def watch(command: Sequence[str] | None = None, *,
          on_sample: Callable[[Sample, WatchResult], None] | None = None, **settings: Any) -> WatchResult:
    """Run ``command`` (an argv list) or follow process ``pid`` until it ends, sampling its
    processes and the devices (memory, utilisation, clocks, power) every ``interval`` seconds;
    the exit status passed through, Ctrl-C stopping the job and keeping the timeline. With
    ``predict`` (a model, set up as :func:`memory` takes it), the predicted peak beside the
    observed one, the difference named. ``on_sample(sample, result)`` hears each sample."""
    from .measure.watch import watch as follow

    wt, w, t, target = _records("watch", settings)
    predicted = None
    if wt.predict:
        est = memory(wt.predict, workload=w, training=t, target=target)
        top = est.larger
        n = max((i for i, _ in top.timeline), default=0) + 1  # the step's operators, in order
        predicted = {"peak_bytes": top.peak_bytes, "overheads": dict(est.overheads),
                     "timeline": [[i / n, b] for i, b in top.timeline]}
    return follow(list(command) if command else None, wt.pid, wt.interval, predicted=predicted, on_sample=on_sample,
                  grace=wt.grace, timeout=wt.time_limit, torch_stats=wt.torch_stats, job_log=wt.job_log)
