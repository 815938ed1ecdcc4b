"""A model and its inputs, ready to trace or to run: the job every verb starts with."""

from __future__ import annotations

import contextlib
import copy
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..dtypes import parse_dtype
from ..errors import FootprintError
from .building import Built
from .inputs import InputsLike, InputSpec, cast_floating, materializer, normalize_inputs, spec_list, with_batch
from .models import hf_meta_context, resolve
from .yolo import ultralytics_default_input


@dataclass
class Workload:
    """A built model (meta device unless weights were asked for) and its example inputs."""

    built: Built
    pos: list[Any]
    kw: dict[str, Any]

    @property
    def model(self) -> nn.Module:
        return self.built.model

    @property
    def specs(self) -> list[InputSpec]:
        return spec_list(self.pos, self.kw)

    def inputs_meta(self) -> list[dict[str, Any]]:
        return [x.to_dict() for x in self.specs]

    def make_inputs(self, batch: int | None = None) -> Any:
        """``make(device) -> (args, kwargs)``, at ``batch`` when given."""
        pos, kw = with_batch(self.pos, self.kw, batch)
        return materializer(pos, kw, self.built.images_as_list, positional_names(self.model))

    def at_batch(self, batch: int | None) -> Workload:
        """The same model with every input's first dimension set to ``batch``."""
        pos, kw = with_batch(self.pos, self.kw, batch)
        return Workload(self.built, pos, kw)

    def cast(self, dtype: torch.dtype) -> Workload:
        """Floating inputs in ``dtype`` (the model is cast by the caller)."""
        return Workload(self.built, [cast_floating(x, dtype) for x in self.pos],
                        {k: cast_floating(v, dtype) for k, v in self.kw.items()})

    @property
    def own_batch(self) -> int:
        """The first dimension of the first tensor input (1 when there is none)."""
        return next((x.shape[0] for x in self.specs if x.shape), 1)


def prepare(model: nn.Module | str, inputs: InputsLike = None, *, dtype: str | torch.dtype | None = None,
            weights: str | None = None, trust_remote_code: bool = False) -> Workload:
    """Resolve the model and its inputs (meta device, no weights)."""
    pos, kw = normalize_inputs(inputs)
    if isinstance(model, str):
        built = resolve(model, weights=weights, trust_remote_code=trust_remote_code)
    elif isinstance(model, nn.Module):
        # a transformers model passed as a module needs what one built from its name gets:
        # its packed-sequence check answered (else the trace builds a mask a real run skips)
        hf = type(model).__module__.startswith("transformers.")
        built = Built(model, type(model).__name__, "module", ultralytics_default_input(model),
                      trace_context=hf_meta_context if hf else contextlib.nullcontext)
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
    work = Workload(built, pos, kw)
    if dt is not None:
        if not dt.is_floating_point:
            raise FootprintError(f"--dtype must be a floating-point type, got {dtype}")
        # a module the caller gave is left as it is: a copy is cast
        built.model = cast_copy(built.model, dt) if built.source == "module" else built.model.to(dt)
        work = work.cast(dt)
    return work


def positional_names(model: nn.Module) -> list[str]:
    """The names of the model's positional forward arguments (``input``, ``lengths``)."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def cast_copy(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``model`` with its floating-point parameters and buffers in ``dtype`` (as
    ``model.to(dtype)`` would make them), sharing nothing with it."""
    memo: dict[int, Any] = {}
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) in memo:
            continue
        data = t.detach().to(dtype=dtype if t.is_floating_point() else t.dtype, copy=True)
        memo[id(t)] = nn.Parameter(data, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else data
    try:
        return copy.deepcopy(model, memo)
    except Exception as e:
        raise FootprintError(f"could not copy the module to cast it to {dtype} ({type(e).__name__}: {e}): cast it "
                             f"yourself (model.to({dtype})) and give no dtype") from e
