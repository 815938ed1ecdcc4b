"""The Python API: the same verbs as the command line, returning plain result objects."""

from __future__ import annotations

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
