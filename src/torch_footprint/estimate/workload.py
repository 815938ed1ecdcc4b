"""A workload traced as it would run: an inference, or a training step with its optimizer,
precision and checkpointing. ``memory``, ``predict`` and ``fit`` all start here."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..dtypes import name_of
from ..errors import FootprintError
from ..parallel import apply_sequence_parallel, shrink_for_tp
from ..sources import Workload, prepare
from ..sources.inputs import InputsLike
from ..trace import StepOptions, Trace, trace_model
from . import training


@dataclass(frozen=True)
class StepSpec:
    """What is traced: a forward, or one training step set up as asked."""

    train: bool = False
    optimizer: str | None = None
    precision: str = "fp32"
    checkpointing: bool = False
    grads: str = "none"  # "none": gradients appear in the backward; "zero": kept between steps
    tp: int = 1  # tensor-parallel ranks: the trace is one rank's share of the model (parallel.py)
    sequence_parallel: bool = False  # with tp: norms and residuals hold 1/tp of the sequence

    def check(self) -> None:
        training.precision(self.precision)
        if self.sequence_parallel and self.tp <= 1:
            raise FootprintError("--sequence-parallel splits the sequence among tensor-parallel ranks: add --tp 2 "
                                 "or more")
        if self.optimizer is not None:
            if not self.train:
                raise FootprintError("--optimizer needs --train (an optimizer only runs in a training step)")
            training.optimizer(self.optimizer)
        if self.checkpointing and not self.train:
            raise FootprintError("--checkpointing only changes training memory: add --train")
        if self.grads not in ("none", "zero"):
            raise FootprintError(f"grads must be 'none' or 'zero', got '{self.grads}'")


def trace_step(model: nn.Module | str, inputs: InputsLike, spec: StepSpec, *, batch: int | None = None,
               weights: str | None = None, trust_remote_code: bool = False) -> tuple[Trace, list[str]]:
    """Trace ``spec`` on ``model`` at ``batch`` (the inputs' own when None); the trace and its notes."""
    spec.check()
    param_dtype, autocast = training.precision(spec.precision)
    opt = training.optimizer(spec.optimizer) if spec.train else None
    work = prepare(model, inputs, weights=weights, trust_remote_code=trust_remote_code).at_batch(batch)
    built = work.built
    notes = [n for n in built.notes if not (batch and n.startswith("default input"))]
    if batch:
        notes.append(f"batch {batch}: inputs " + ", ".join(str(x) for x in work.specs))
    m = built.model
    float_dtypes = {p.dtype for p in m.parameters() if p.is_floating_point()}
    if float_dtypes and float_dtypes != {param_dtype}:
        if built.source == "module":
            raise FootprintError(f"precision '{spec.precision}' needs {name_of(param_dtype)} weights: give the "
                                 "model by name, or cast your module to that dtype yourself")
        m = built.model = m.to(param_dtype)
        notes.append(f"weights cast to {name_of(param_dtype)} for precision {spec.precision}")
        work = work.cast(param_dtype)
    if spec.tp > 1:  # one rank's share, on a copy: a module the caller gave stays whole
        m = built.model = copy.deepcopy(m)
        plan = shrink_for_tp(m, spec.tp)
        notes.append(f"tensor parallel over {spec.tp} ranks: one rank's share of the attention and MLP linears")
        if spec.sequence_parallel:
            apply_sequence_parallel(m, spec.tp, plan)
            notes.append(f"sequence parallel: norms and residuals between the blocks hold 1/{spec.tp} of the "
                         "sequence; each split linear's input gathered, its output reduce-scattered")
    undo: Any = lambda: None  # noqa: E731
    if spec.checkpointing:
        what, undo = training.enable_checkpointing(m)
        notes.append("activation checkpointing: " + what)
    try:
        trace = _trace(work, train=spec.train, backward=spec.train,
                       step=StepOptions(opt, autocast, grads_kept=spec.grads == "zero"))
    finally:
        undo()
    return trace, notes + trace.notes


def _trace(work: Workload, *, train: bool, backward: bool, **options: Any) -> Trace:
    """Trace ``work``'s model in train or eval mode, inside its source's trace context; the
    model's mode is put back afterwards."""
    m = work.model
    was_training = m.training
    m.train(train)
    try:
        with work.built.trace_context():
            return trace_model(m, work.make_inputs(), name=work.built.name, backward=backward,
                               inputs_meta=work.inputs_meta(), **options)
    finally:
        m.train(was_training)


def first_batch(trace: Trace, batch: int | None) -> int:
    """The batch a trace ran at: the one asked for, else its first input's first dimension."""
    return batch or (int(trace.inputs[0]["shape"][0]) if trace.inputs and trace.inputs[0]["shape"] else 1)


def trace_forward(model: nn.Module | str, inputs: InputsLike = None, *, backward: bool = False,
                  dtype: str | Any = None, train: bool | None = None, device: str = "cpu",
                  weights: str | None = None, trust_remote_code: bool = False,
                  tensors: str = "auto") -> tuple[Trace, list[str]]:
    """A forward (and, with ``backward``, a backward) pass as ``footprint profile`` traces it:
    eval mode unless ``train`` (default: ``backward``), no optimizer; the trace and its notes."""
    if device != "cpu":
        raise FootprintError(f"profiling for device '{device}' is not supported yet: the trace follows the "
                             "CPU's kernels (device='cpu'); FLOP and MAC counts do not depend on it")
    work = prepare(model, inputs, dtype=dtype, weights=weights, trust_remote_code=trust_remote_code)
    trace = _trace(work, train=backward if train is None else train, backward=backward, device=device,
                   tensors=tensors)
    return trace, [*work.built.notes, *trace.notes]
