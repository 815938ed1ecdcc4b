"""A workload traced as it would run: an inference, or a training step with its optimizer,
precision and checkpointing, on one rank of a tensor-parallel layout. ``memory``,
``predict``, ``fit`` and ``report`` all start here."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ..dtypes import name_of
from ..errors import FootprintError
from ..settings import Parallel, Training, Workload
from ..sources import Workload as Prepared
from ..sources import prepare
from ..trace import ModelState, StepOptions, Trace, setups, trace_model
from .layouts.pipeline import check_layout
from .layouts.tensor_parallel import apply_sequence_parallel, shrink_for_tp

DEFAULT_PRECISION = "fp32"


def precision_of(w: Workload) -> str:
    """The arithmetic a traced step runs in (fp32 unless the workload says)."""
    return w.precision or DEFAULT_PRECISION


def trace_step(w: Workload, t: Training = Training(), p: Parallel = Parallel()) -> tuple[Trace, list[str]]:
    """Trace the step ``t`` of ``w`` at ``w.batch`` (the inputs' own when None), on one rank of
    ``p``'s tensor parallelism; the trace and its notes."""
    if p.sequence_parallel and p.tensor <= 1:
        raise FootprintError("--sequence-parallel splits the sequence among tensor-parallel ranks: add --tp 2 "
                             "or more")
    prec = precision_of(w)
    param_dtype, autocast = setups.precision(prec)
    opt = setups.optimizer(t.optimizer) if t.train else None
    work = prepare(w.model, w.inputs, weights=w.weights, trust_remote_code=w.trust_remote_code).at_batch(w.batch)
    built = work.built
    notes = [n for n in built.notes if not (w.batch and n.startswith("default input"))]
    if w.batch:
        notes.append(f"batch {w.batch}: inputs " + ", ".join(str(x) for x in work.specs))
    m = built.model
    float_dtypes = {q.dtype for q in m.parameters() if q.is_floating_point()}
    if float_dtypes and float_dtypes != {param_dtype}:
        if built.source == "module":
            raise FootprintError(f"precision '{prec}' needs {name_of(param_dtype)} weights: give the "
                                 "model by name, or cast your module to that dtype yourself")
        m = built.model = m.to(param_dtype)
        notes.append(f"weights cast to {name_of(param_dtype)} for precision {prec}")
        work = work.cast(param_dtype)
    check_layout(m, p)
    if p.tensor > 1:  # one rank's share, on a copy: a module the caller gave stays whole
        m = built.model = copy.deepcopy(m)
        plan = shrink_for_tp(m, p.tensor)
        notes.append(f"tensor parallel over {p.tensor} ranks: one rank's share of the attention and MLP linears")
        if p.sequence_parallel:
            apply_sequence_parallel(m, p.tensor, plan)
            notes.append(f"sequence parallel: norms and residuals between the blocks hold 1/{p.tensor} of the "
                         "sequence; each split linear's input gathered, its output reduce-scattered")
    undo: Any = lambda: None  # noqa: E731
    if t.checkpointing:
        what, undo = setups.enable_checkpointing(m, selective=t.selective)
        notes.append("activation checkpointing: " + what)
    try:
        trace = _trace(work, train=t.train, backward=t.train, reuse=w.reuse,
                       step=StepOptions(opt, autocast, grads_kept=t.grads == "zero"))
    finally:
        undo()
    return trace, notes + trace.notes


def layout_training(t: Training, p: Parallel) -> Training:
    """The step as layout ``p`` runs it: with several micro-batches a step (gradient accumulation
    or a pipeline) the gradients accumulate, so they exist before each micro-batch's forward."""
    return dataclasses.replace(t, grads="zero") if p.grad_accum > 1 or p.pp > 1 else t


def trace_key(w: Workload, t: Training, p: Parallel) -> tuple[Any, ...]:
    """What the trace of ``t`` under layout ``p`` depends on (what :func:`trace_step` reads of
    them): layouts with equal keys are priced from one trace. The data-parallel sharding, the
    pipeline split and schedule, the micro-batches a step and the network do not change it."""
    return (repr(w), layout_training(t, p), p.tensor, p.sequence_parallel, p.cp, p.ep)


def at_batch(w: Workload, batch: int | None) -> Workload:
    """The same workload at another batch size."""
    return dataclasses.replace(w, batch=batch)


def _trace(work: Prepared, *, train: bool, backward: bool, **options: Any) -> Trace:
    """Trace ``work``'s model in train or eval mode, inside its source's trace context; the
    model is put back as it was afterwards (``train()`` may do more than set flags: timm's
    empties a cache, and every module's own flag comes back, not the root's)."""
    m = work.model
    state = ModelState(m)
    m.train(train)
    try:
        with work.built.trace_context():
            return trace_model(m, work.make_inputs(), name=work.built.name, backward=backward,
                               inputs_meta=work.inputs_meta(), **options)
    finally:
        state.restore()


def first_batch(trace: Trace, batch: int | None) -> int:
    """The batch a trace ran at: the one asked for, else its first input's first dimension."""
    return batch or (int(trace.inputs[0]["shape"][0]) if trace.inputs and trace.inputs[0]["shape"] else 1)


def trace_forward(w: Workload, t: Training = Training(), device: str = "cpu") -> tuple[Trace, list[str]]:
    """A forward (and, for a training step, a backward) pass as ``footprint profile`` traces it:
    eval mode unless training, no optimizer, the model as built unless a precision is given;
    the trace and its notes."""
    if device != "cpu":
        raise FootprintError(f"profiling for device '{device}' is not supported yet: the trace follows the "
                             "CPU's kernels (device='cpu'); FLOP and MAC counts do not depend on it")
    if w.precision and w.precision.endswith("-mixed"):
        raise FootprintError(f"profile counts one dtype: give --precision {w.precision.removesuffix('-mixed')} "
                             f"instead of {w.precision} (autocast is priced by memory, predict and fit)")
    work = prepare(w.model, w.inputs, dtype=w.precision, weights=w.weights, trust_remote_code=w.trust_remote_code)
    work = work.at_batch(w.batch) if w.batch else work
    trace = _trace(work, train=t.train, backward=t.train, device=device, tensors=w.tensors, reuse=w.reuse)
    return trace, [*work.built.notes, *trace.notes]
