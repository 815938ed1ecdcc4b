"""The Python API: the same verbs as the command line, returning plain result objects."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .analysis import ModuleRow, OperatorRow, Totals, by_module, by_operator, totals, unknown_ops
from .errors import FootprintError
from .sources.inputs import InputSpec, parse_dtype, parse_shape
from .sources.models import Built, resolve
from .trace import Trace, trace_model
from .trace.tracer import dtype_name

InputsLike = Any  # None | Tensor | InputSpec | str | sequence of those | mapping name -> those


@dataclass
class Profile:
    """What ``footprint profile`` reports: parameters, FLOPs and MACs, by module and operator."""

    trace: Trace
    notes: list[str] = field(default_factory=list)

    # ----------------------------------------------------------------- parameters
    @property
    def params(self) -> int:
        return sum(p.numel for p in self.trace.params)

    @property
    def trainable_params(self) -> int:
        return sum(p.numel for p in self.trace.params if p.trainable)

    @property
    def param_bytes(self) -> int:
        return sum(p.nbytes for p in self.trace.params)

    @property
    def buffer_bytes(self) -> int:
        return sum(b.nbytes for b in self.trace.buffers)

    @property
    def params_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.trace.params:
            out[p.dtype] = out.get(p.dtype, 0) + p.numel
        return out

    # ----------------------------------------------------------------- compute
    @property
    def forward(self) -> Totals:
        return totals(self.trace, ("forward",))

    @property
    def backward(self) -> Totals:
        return totals(self.trace, ("backward",))

    @property
    def flops(self) -> int:
        """Forward FLOPs (matrix + vector)."""
        return self.forward.flops

    @property
    def macs(self) -> int:
        """Forward MACs of the matrix ops (the figure comparable to thop, fvcore, torchvision)."""
        return self.forward.macs

    @property
    def matrix_flops(self) -> int:
        return self.forward.matrix_flops

    @property
    def vector_flops(self) -> int:
        return self.forward.vector_flops

    @property
    def backward_flops(self) -> int | None:
        """Backward FLOPs, or None when the trace has no backward pass."""
        return self.backward.flops if self.trace.settings.get("backward") else None

    @property
    def unknown_ops(self) -> dict[str, int]:
        return unknown_ops(self.trace)

    def by_module(self, depth: int | None = None, phases: Sequence[str] | None = ("forward",)) -> list[ModuleRow]:
        return by_module(self.trace, depth, phases)

    def by_operator(self, phases: Sequence[str] | None = ("forward",)) -> list[OperatorRow]:
        return by_operator(self.trace, phases)

    def to_dict(self, depth: int | None = None, include_trace: bool = False) -> dict[str, Any]:
        fwd = self.forward
        d: dict[str, Any] = {
            "model": self.trace.model,
            "inputs": self.trace.inputs,
            "settings": self.trace.settings,
            "notes": self.notes,
            "conventions": {"mac": "1 MAC = 2 FLOPs", "macs": "matrix ops only (matmul, convolution, attention)",
                            "flops": "matrix + vector FLOPs"},
            "params": self.params,
            "trainable_params": self.trainable_params,
            "param_bytes": self.param_bytes,
            "buffer_bytes": self.buffer_bytes,
            "params_by_dtype": self.params_by_dtype,
            "forward": fwd.to_dict(),
            "unknown_ops": self.unknown_ops,
            "by_module": [r.to_dict() for r in self.by_module(depth)],
            "by_operator": [r.to_dict() for r in self.by_operator()],
        }
        if self.trace.settings.get("backward"):
            d["backward"] = self.backward.to_dict()
        if include_trace:
            d["trace"] = self.trace.to_dict()
        return d


    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        """A profile saved with ``to_dict(include_trace=True)`` (``footprint profile --json``)."""
        if "trace" not in d:
            raise FootprintError("this JSON file holds no trace; save it with footprint profile --json")
        try:
            return cls(Trace.from_dict(d["trace"]), list(d.get("notes", [])))
        except (KeyError, TypeError, ValueError) as e:
            raise FootprintError(f"malformed trace in JSON file: {e}") from e


# --------------------------------------------------------------------------- inputs

def _spec_of(x: Any, name: str | None = None) -> Any:
    if isinstance(x, InputSpec):
        return InputSpec(x.shape, x.dtype, name or x.name)
    if isinstance(x, str):
        return parse_shape(x, name=name)
    if isinstance(x, torch.Tensor):
        return InputSpec(tuple(x.shape), x.dtype, name)
    if isinstance(x, (tuple, list)) and x and all(isinstance(v, int) for v in x):
        return InputSpec(tuple(x), torch.float32, name)
    return x  # a non-tensor argument, passed as it is


def normalize_inputs(inputs: InputsLike) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword inputs, tensors replaced by :class:`InputSpec` (values are not used)."""
    if inputs is None:
        return [], {}
    if isinstance(inputs, Mapping):
        return [], {k: _spec_of(v, k) for k, v in inputs.items()}
    if isinstance(inputs, (torch.Tensor, InputSpec, str)):
        inputs = [inputs]
    if isinstance(inputs, (tuple, list)) and inputs and all(isinstance(v, int) for v in inputs):
        inputs = [inputs]
    pos: list[Any] = []
    kw: dict[str, Any] = {}
    for x in inputs:
        s = _spec_of(x)
        if isinstance(s, InputSpec) and s.name:
            kw[s.name] = s
        else:
            pos.append(s)
    return pos, kw


def _cast(x: Any, dtype: torch.dtype | None) -> Any:
    if dtype is not None and isinstance(x, InputSpec) and x.dtype.is_floating_point:
        return InputSpec(x.shape, dtype, x.name)
    return x


def prepare(model: nn.Module | str, inputs: InputsLike = None, *, dtype: str | torch.dtype | None = None,
            weights: str | None = None, trust_remote_code: bool = False) -> tuple[Built, list[Any], dict[str, Any]]:
    """Resolve the model and its inputs (meta device, no weights)."""
    pos, kw = normalize_inputs(inputs)
    if isinstance(model, str):
        built = resolve(model, weights=weights, trust_remote_code=trust_remote_code)
    elif isinstance(model, nn.Module):
        built = Built(model, type(model).__name__, "module")
    else:
        raise FootprintError(f"expected a model name or an nn.Module, got {type(model).__name__}")
    if not pos and not kw:
        if not built.default_inputs:
            raise FootprintError(
                f"no default input is known for '{built.name}': give one, e.g. --input 1,3,224,224 "
                "(or --input-ids 1,128 for a language model)"
            )
        pos, kw = normalize_inputs(built.default_inputs)
        built.notes.append("default input " + ", ".join(str(s) for s in built.default_inputs))
    # torchvision's vision transformers are built for one image size: follow the input's
    if built.rebuild is not None and pos and isinstance(pos[0], InputSpec) and len(pos[0].shape) == 4:
        h, w = pos[0].shape[2], pos[0].shape[3]
        default = built.default_inputs[0].shape if built.default_inputs else None
        if default is None or (h, w) != tuple(default[2:]):
            if h != w:
                raise FootprintError(f"'{built.name}' needs square images, got {h}x{w}")
            built.model = built.rebuild({"image_size": h})
            built.notes.append(f"built for {h}x{h} images, the input's size")
    for k, v in built.call_kwargs.items():
        kw.setdefault(k, v)
    dt = parse_dtype(dtype) if isinstance(dtype, str) else dtype
    if dt is not None:
        if not dt.is_floating_point:
            raise FootprintError(f"--dtype must be a floating-point type, got {dtype}")
        built.model = built.model.to(dt)
    return built, [_cast(x, dt) for x in pos], {k: _cast(v, dt) for k, v in kw.items()}


def _materializer(pos: list[Any], kw: dict[str, Any], images_as_list: bool = False) -> Any:
    def make(device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = tuple(x.make(device) if isinstance(x, InputSpec) else x for x in pos)
        if images_as_list and args and isinstance(args[0], torch.Tensor):
            first = args[0]
            images = list(first.unbind(0)) if first.dim() == 4 else [first]
            args = (images, *args[1:])
        kwargs = {k: (v.make(device) if isinstance(v, InputSpec) else v) for k, v in kw.items()}
        return args, kwargs

    return make


def _with_batch(specs: list[Any], kw: dict[str, Any], batch: int | None) -> tuple[list[Any], dict[str, Any]]:
    """Set the first dimension of every tensor input to ``batch``."""
    if batch is None:
        return specs, kw
    if batch < 1:
        raise FootprintError(f"batch must be at least 1, got {batch}")

    def rebatch(x: Any) -> Any:
        if isinstance(x, InputSpec) and x.shape:
            return InputSpec((batch, *x.shape[1:]), x.dtype, x.name)
        return x

    return [rebatch(x) for x in specs], {k: rebatch(v) for k, v in kw.items()}


def _trace_step(model: nn.Module | str, inputs: InputsLike, *, batch: int | None, train: bool,
                optimizer: str | None, precision: str, checkpointing: bool, device: str,
                weights: str | None, trust_remote_code: bool, grads: str = "none") -> tuple[Trace, list[str]]:
    from .estimate import training

    param_dtype, autocast = training.precision(precision)
    opt = training.optimizer(optimizer) if train else None
    if optimizer is not None and not train:
        raise FootprintError("--optimizer needs --train (an optimizer only runs in a training step)")
    built, pos, kw = prepare(model, inputs, weights=weights, trust_remote_code=trust_remote_code)
    pos, kw = _with_batch(pos, kw, batch)
    notes = [n for n in built.notes if not (batch and n.startswith("default input"))]
    if batch:
        notes.append(f"batch {batch}: inputs " + ", ".join(str(x) for x in [*pos, *kw.values()]
                                                           if isinstance(x, InputSpec)))
    m = built.model
    undo: Any = lambda: None  # noqa: E731
    float_dtypes = {p.dtype for p in m.parameters() if p.is_floating_point()}
    if float_dtypes and float_dtypes != {param_dtype}:
        if built.source == "module":
            raise FootprintError(f"precision '{precision}' needs {dtype_name(param_dtype)} weights: give the model "
                                 "by name, or cast your module to that dtype yourself")
        m = m.to(param_dtype)
        notes.append(f"weights cast to {dtype_name(param_dtype)} for precision {precision}")
        pos = [_cast(x, param_dtype) for x in pos]
        kw = {k: _cast(v, param_dtype) for k, v in kw.items()}
    if checkpointing:
        if not train:
            raise FootprintError("--checkpointing only changes training memory: add --train")
        what, undo = training.enable_checkpointing(m)
        notes.append("activation checkpointing: " + what)
    was_training = m.training
    m.train(train)
    meta = [x.to_dict() for x in [*pos, *kw.values()] if isinstance(x, InputSpec)]
    from .trace.tracer import StepOptions

    try:
        with built.trace_context():
            trace = trace_model(m, _materializer(pos, kw, built.images_as_list), name=built.name, backward=train,
                                device=device, inputs_meta=meta,
                                step=StepOptions(opt, autocast, grads_kept=grads == "zero"))
    finally:
        m.train(was_training)
        undo()
    return trace, notes + trace.notes


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
    from .analysis.memory import replay
    from .estimate.memory import ALLOCATOR_ROUNDING, MemoryEstimate, fit_batches, overheads_for, parse_bytes

    if device not in ("cpu", "cuda"):
        raise FootprintError(f"unknown device '{device}': use cpu or cuda")
    if not 0 < utilisation <= 1:
        raise FootprintError(f"utilisation must be in (0, 1], got {utilisation}")
    if grads not in ("none", "zero"):
        raise FootprintError(f"grads must be 'none' or 'zero', got '{grads}'")
    common = dict(train=train, optimizer=optimizer, precision=precision, checkpointing=checkpointing,
                  device="cpu", weights=weights, trust_remote_code=trust_remote_code, grads=grads)

    def at(b: int | None, timeline: bool = False) -> tuple[Any, Trace, list[str]]:
        tr, nt = _trace_step(model, inputs, batch=b, **common)
        return replay(tr, keep_timeline=timeline), tr, nt

    peak, trace, notes = at(batch, timeline=True)
    n_allocs = sum(len(e.allocs) for e in trace.events) + len(trace.preexisting)
    fixed = overheads_for(device, n_allocs, ALLOCATOR_ROUNDING[device])
    for name, value in (overheads or {}).items():
        fixed[name] = parse_bytes(value) if isinstance(value, str) else int(value)
    overheads = {k: v for k, v in fixed.items() if v}
    settings = dict(trace.settings, precision=precision, checkpointing=checkpointing, target=device,
                    inputs=trace.inputs, model=trace.model)
    est = MemoryEstimate(peak=peak, settings=settings, overheads=overheads, utilisation=utilisation, notes=notes)
    budget_b = None
    fixed_costs = sum(overheads.values())
    if budget is not None:
        budget_b = parse_bytes(budget) if isinstance(budget, str) else int(budget)
        if budget_b <= 0:
            raise FootprintError(f"a memory budget must be positive, got {budget}")
        est.budget = budget_b
        weights_b = peak.persistent.get("weights", 0) + peak.persistent.get("buffers", 0)
        if (weights_b + fixed_costs) / utilisation > budget_b:
            raise FootprintError(
                f"a budget of {budget_b / 2**30:.2f} GiB cannot hold this model: its weights alone take "
                f"{weights_b / 2**30:.2f} GiB (plus {fixed_costs / 2**30:.2f} GiB of fixed overheads, at "
                f"{utilisation:.0%} utilisation)"
            )
    if budget_b is not None or scaling:
        b1 = batch or (int(trace.inputs[0]["shape"][0]) if trace.inputs and trace.inputs[0]["shape"] else 1)
        traced = {b1: peak.peak_bytes, 2 * b1: at(2 * b1)[0].peak_bytes, 3 * b1: at(3 * b1)[0].peak_bytes}
        fit = fit_batches(list(traced), list(traced.values()))
        est.batch_fit = fit
        if not fit.affine:
            est.notes.append("peak memory is not affine in the batch size here (a third trace is off the line "
                             "by more than 1%)")
        if budget_b is not None:
            room = budget_b * utilisation - fixed_costs
            peaks = dict(traced)  # the fit's traces are not run again

            def fits(b: int) -> bool:
                if b not in peaks:
                    peaks[b] = at(b)[0].peak_bytes
                return peaks[b] <= room

            if not fits(1):
                need = peaks[1] + fixed_costs
                raise FootprintError(
                    f"not even batch 1 fits a budget of {budget_b / 2**30:.2f} GiB: it needs "
                    f"{need / 2**30:.2f} GiB, {need / utilisation / 2**30:.2f} GiB at {utilisation:.0%} utilisation"
                )
            # start from the fitted line's answer, then bracket and bisect with real traces
            guess = max(1, int((room - fit.fixed) // fit.per_sample)) if fit.per_sample > 0 else 2
            lo, hi = 1, None
            b = guess
            while hi is None:
                if b > 2**24:
                    raise FootprintError("the peak does not grow with the batch size: no largest batch to find")
                if fits(b):
                    lo, b = b, b * 2
                else:
                    hi = b
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid)
            guess = lo
            fit.max_batch, fit.max_batch_checked = guess, True
    return est


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
    if device != "cpu":
        raise FootprintError(f"profiling for device '{device}' is not supported yet: the trace follows the "
                             "CPU's kernels (device='cpu'); FLOP and MAC counts do not depend on it")
    built, pos, kw = prepare(model, inputs, dtype=dtype, weights=weights, trust_remote_code=trust_remote_code)
    m = built.model
    was_training = m.training
    m.train(backward if train is None else train)
    meta = [x.to_dict() for x in [*pos, *kw.values()] if isinstance(x, InputSpec)]
    try:
        with built.trace_context():
            trace = trace_model(m, _materializer(pos, kw, built.images_as_list), name=built.name,
                                backward=backward, device=device, inputs_meta=meta, tensors=tensors)
    finally:
        m.train(was_training)
    return Profile(trace, [*built.notes, *trace.notes])


_profile_verb = profile  # bench() has a `profile` flag of its own


def bench(model: nn.Module | str, inputs: InputsLike = None, *, device: str | None = None,
          batch_sizes: Sequence[int | str] | str | None = None, dtype: str | None = None,
          autocast: str | None = None, channels_last: bool = False, compile: bool = False, train: bool = False,
          optimizer: str = "sgd", inference_mode: bool = True, cudnn_benchmark: bool = False,
          profile: bool = False, max_memory: int | str | None = None, min_reps: int = 30,
          min_seconds: float = 2.0, weights: str | None = None, trust_remote_code: bool = False,
          progress: Any = None) -> Any:
    """Measure latency and throughput of ``model`` on ``device`` (default: cuda if present).

    A model given by name is built with random weights (its constructor's initialisation).
    ``batch_sizes`` ("1,8,auto" or a list; None: the inputs' own) may hold "auto": the
    largest batch that runs, found by doubling and bisection, recovering from
    out-of-memory; on CPU a batch whose predicted peak is over ``max_memory`` (default 80%
    of the available RAM) counts as out of memory without running. Returns a
    :class:`~torch_footprint.bench.runner.BenchResult`.
    """
    from .bench.runner import available_ram, parse_batches, pick_device, run_bench
    from .estimate.memory import parse_bytes
    from .estimate.training import optimizer as make_optimizer
    from .sources.inputs import parse_dtype
    from .sources.models import real_weights

    dev = pick_device(device)
    batches = parse_batches(batch_sizes) if batch_sizes is not None else None
    opt = make_optimizer(optimizer) if train else None
    amp = parse_dtype(autocast) if autocast else None
    with real_weights():
        built, pos, kw = prepare(model, inputs, dtype=dtype, weights=weights, trust_remote_code=trust_remote_code)
    m = built.model.to(dev)
    specs = [x for x in [*pos, *kw.values()] if isinstance(x, InputSpec)]
    own_batch = next((x.shape[0] for x in specs if x.shape), 1)

    def make_inputs(b: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        p2, k2 = _with_batch(pos, kw, b)
        return _materializer(p2, k2, built.images_as_list)(dev)

    def specs_at(b: int) -> list[Any]:
        p2, k2 = _with_batch(pos, kw, b)
        return [*p2, *k2.values()]

    source = model if isinstance(model, str) else m

    def predicted_peak(b: int) -> int:
        return memory(source, specs_at(b), train=train, optimizer=optimizer if train else None,
                      weights=weights, trust_remote_code=trust_remote_code).peak.peak_bytes

    acc = _local_accelerator(dev)
    predicted: dict[int, Any] = {}

    def flops_of(b: int) -> int | None:
        try:
            p = _profile_verb(source, specs_at(b), backward=train, dtype=dtype, weights=weights,
                              trust_remote_code=trust_remote_code)
        except FootprintError:
            return None
        if acc is not None:
            from .estimate.roofline import predict as roofline

            try:  # under autocast the matrix work runs in its dtype (the trace is in the weights' dtype)
                predicted[b] = roofline(p.trace, acc, compute_dtype={torch.float16: "fp16",
                                                                     torch.bfloat16: "bf16"}.get(amp))
            except FootprintError:
                pass
        return p.flops + (p.backward_flops or 0)

    budget = (parse_bytes(max_memory) if isinstance(max_memory, str) else max_memory) if max_memory else None
    if budget is None and not dev.startswith("cuda"):
        ram = available_ram()
        budget = int(ram * 0.8) if ram else None
    settings = {"dtype": dtype, "autocast": autocast, "channels_last": channels_last, "compile": compile,
                "optimizer": optimizer if train else None, "inference_mode": inference_mode,
                "cudnn_benchmark": cudnn_benchmark}
    notes = [n for n in built.notes if not n.startswith("default input")]
    res = run_bench(m, make_inputs, name=built.name, device=dev, batches=batches or [own_batch],
                     default_batch=own_batch, predicted_peak=predicted_peak, flops_of=flops_of, autocast=amp,
                     channels_last=channels_last, compile=compile, train=train, optimizer=opt,
                     inference_mode=inference_mode, cudnn_benchmark=cudnn_benchmark, profile=profile,
                    budget=budget, min_reps=min_reps, min_seconds=min_seconds, settings=settings, notes=notes,
                    progress=progress)
    for pt in res.points:
        pr = predicted.get(pt.batch)
        if pr is not None and acc is not None:
            pt.predicted_s = pr.time_s
            pt.peak_flops = acc.peak(pr.main_dtype) or acc.peak("fp32")
    if acc is not None:
        res.notes.append(f"predicted: roofline on '{acc.id}' ({'calibrated' if acc.calibrated else 'datasheet'} "
                         "ceilings); % of peak: achieved FLOP/s over its "
                         + ("theoretical peak (cores x clock x FMA width)" if acc.kind == "cpu" else "datasheet peak"))
    elif not dev.startswith("cuda"):
        res.notes.append("run `footprint calibrate` to see the roofline prediction and % of peak beside this")
    return res


def _local_accelerator(device: str) -> Any:
    """The database row of the device a benchmark runs on (the CPU only once calibrated)."""
    from .hardware.db import load
    from .hardware.local import find_local_gpu

    rows = load()
    if device.startswith("cuda"):
        return find_local_gpu(rows)
    cpu = next((a for a in rows if a.id == "cpu"), None)
    return cpu if cpu is not None and cpu.calibrated else None



def predict(model: Profile | nn.Module | str, gpu: Any, inputs: InputsLike = None, *, dtype: str | None = None,
            batch: int | None = None, train: bool = False, tf32: bool | None = None,
            efficiency: Mapping[str, float] | None = None, hardware: str | None = None,
            weights: str | None = None, trust_remote_code: bool = False) -> Any:
    """Roofline latency of one forward (``train``: one training step) on accelerator ``gpu``.

    ``model`` is a :class:`Profile` (its trace is used as it is) or a model as for
    :func:`profile`. ``gpu`` is an id or name from ``footprint gpus`` or an
    :class:`~torch_footprint.hardware.Accelerator`. With a model, ``dtype`` casts weights
    and inputs before tracing; with a Profile it only sets the rate of the matrix work
    (bytes stay as traced). Returns a :class:`~torch_footprint.estimate.roofline.Prediction`.
    """
    from .estimate.roofline import predict as roofline
    from .hardware.db import Accelerator, get

    acc = gpu if isinstance(gpu, Accelerator) else get(str(gpu), hardware)
    if isinstance(model, Profile):
        if batch is not None or inputs is not None:
            raise FootprintError("a Profile was traced already: its batch and inputs cannot change")
        return roofline(model.trace, acc, tf32=tf32, efficiency=efficiency, compute_dtype=dtype)
    trace, _ = _trace_step(model, inputs, batch=batch, train=train, optimizer="sgd" if train else None,
                           precision=dtype or "fp32", checkpointing=False, device="cpu", weights=weights,
                           trust_remote_code=trust_remote_code)
    return roofline(trace, acc, tf32=tf32, efficiency=efficiency)


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
    :class:`~torch_footprint.estimate.fit.FitResult`.
    """
    from .estimate import fit as ft
    from .estimate.roofline import predict as roofline
    from .hardware.db import find, load

    if strategy not in ft.STRATEGIES:
        raise FootprintError(f"unknown strategy '{strategy}': use {', '.join(ft.STRATEGIES)}")
    if gpus < 1:
        raise FootprintError(f"--gpus must be at least 1, got {gpus}")
    if not 0 < utilisation <= 1:
        raise FootprintError(f"utilisation must be in (0, 1], got {utilisation}")
    if batch is not None and batch < 1:
        raise FootprintError(f"batch must be at least 1, got {batch}")
    if dtype and precision:
        raise FootprintError("give --dtype (inference) or --precision (training), not both")
    prec = precision or dtype or "fp32"
    target = _seconds(latency) if latency is not None else None
    rows_db = load(hardware)
    if only:
        rows_db = [find(rows_db, x) for x in only]
    common = dict(train=train, optimizer=optimizer, precision=prec, checkpointing=checkpointing, device="cpu",
                  weights=weights, trust_remote_code=trust_remote_code)
    t1, notes = _trace_step(model, inputs, batch=batch, **common)
    b1 = batch or (int(t1.inputs[0]["shape"][0]) if t1.inputs and t1.inputs[0]["shape"] else 1)
    traces = {b1: t1, 2 * b1: _trace_step(model, inputs, batch=2 * b1, **common)[0],
              3 * b1: _trace_step(model, inputs, batch=3 * b1, **common)[0]}
    peaks = {b: ft.rank_peak(t, strategy, gpus, bucket_view) for b, t in traces.items()}
    n_allocs = sum(len(e.allocs) for e in t1.events) + len(t1.preexisting)
    states = None
    if train:  # whole-model totals: the single-rank replay has them; a sharded one scaled them
        from .analysis.memory import replay

        persistent = peaks[b1].persistent if gpus == 1 else replay(t1).persistent
        states = ft.model_states(persistent, strategy, gpus, ft.gather_bytes(t1), bucket_view)
    pair = ft.aligned_pair(traces)
    if pair is not None:
        p, q = pair
        r = next(b for b in traces if b not in pair)
        guess = ft.peak_at(p, q, peaks[p], peaks[q], r)
        if abs(guess - peaks[r].peak_bytes) > 0.01 * peaks[r].peak_bytes:
            notes.append(f"the peak at batch {r} is {peaks[r].peak_bytes / 2**30:.3g} GiB, {guess / 2**30:.3g} GiB "
                         f"from the traces at {p} and {q}: largest batches are approximate")
        how = (f"largest batch: live bytes at every operator, affine in the batch, from traces at {p} and {q} "
               f"(checked at {r}); throughput there: operator costs extrapolated from the same traces")
    else:
        notes.append("the traces at three batch sizes ran different operators: largest batch from a line through "
                     "their peaks, throughput from a line through the predicted times")
        how = ""
    out_rows: list[Any] = []
    cache: dict[int, Any] = {}

    def trace_at(b: int) -> Any:
        if b in traces:
            return traces[b]
        if pair is None:
            return None
        if b not in cache:
            cache[b] = ft.extrapolate(traces[pair[0]], traces[pair[1]], pair[0], pair[1], b)
        return cache[b]

    for acc in rows_db:
        fixed = sum(ft.fixed_overheads(acc, n_allocs).values())
        cap = acc.memory_bytes
        need = math.ceil((peaks[b1].peak_bytes + fixed) / utilisation)
        room = cap * utilisation - fixed
        if pair is not None:
            largest = ft.largest_batch(pair[0], pair[1], peaks[pair[0]], peaks[pair[1]], room)
        else:
            largest = ft.affine_largest(list(peaks), [x.peak_bytes for x in peaks.values()], room)
        if largest is not None:  # the traced peak at the batch asked overrules the extrapolation there
            largest = max(largest, b1) if need <= cap else min(largest, b1 - 1)
        if acc.bandwidth is None and not acc.calibrated:
            out_rows.append(ft.FitRow(acc, cap, need, need <= cap, largest, None, None, None,
                                      reason="no bandwidth figure: run `footprint calibrate` on it"))
            continue
        pred = roofline(traces[b1], acc, tf32=tf32, efficiency=efficiency)
        thr, thr_b = None, None
        if largest:
            tl = trace_at(largest)
            if tl is not None:
                t = roofline(tl, acc, tf32=tf32, efficiency=efficiency).time_s
            else:  # a line through the predicted times at the first two batch sizes
                t2 = roofline(traces[2 * b1], acc, tf32=tf32, efficiency=efficiency).time_s
                t = pred.time_s + (t2 - pred.time_s) * (largest - b1) / b1
            thr, thr_b = (largest * gpus / t if t > 0 else None), largest
        row = ft.FitRow(acc, cap, need, need <= cap, largest, pred, thr, thr_b)
        if target is not None:
            row.meets_target = row.fits and pred.time_s <= target
        out_rows.append(row)
    pick, why = ft.rank(out_rows, target)
    missing: dict[str, list[str]] = {}
    for r in out_rows:
        for d in r.prediction.missing_dtypes if r.prediction else []:
            missing.setdefault(d, []).append(r.accelerator.id)
    for d, ids in missing.items():
        notes.append(f"no published {d} rate for {', '.join(ids)}: their fp32 rate is used")
    if gpus > 1:
        notes.append(f"{gpus} ranks ({strategy}): memory per rank; throughput is {gpus} x one rank's "
                     "(communication not modelled)")
    if how:
        notes.append(how)
    settings = dict(t1.settings, precision=prec, checkpointing=checkpointing, utilisation=utilisation,
                    model=t1.model, inputs=t1.inputs)
    return ft.FitResult(rows=out_rows, pick=pick, why=why, batch=b1, gpus=gpus, strategy=strategy, settings=settings,
                     states=states, peak=peaks[b1], notes=notes, target_s=target)


def _seconds(value: float | str) -> float:
    """'10ms', '250us', '1.5s' or a number of seconds."""
    import re

    if isinstance(value, int | float):
        s = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(ms|us|µs|s)?\s*", value.lower())
        try:
            s = float(m[1]) * {"ms": 1e-3, "us": 1e-6, "µs": 1e-6}.get(m[2] or "s", 1.0) if m else None
        except ValueError:
            s = None
        if s is None:
            raise FootprintError(f"cannot read the latency '{value}': use e.g. 10ms, 250us or 0.5s")
    if not s > 0:
        raise FootprintError(f"cannot read the latency '{value}': use a positive time such as 10ms")
    return s
