"""Input specs: ``1,3,224,224`` or ``1,128:int64`` -> example tensors on any device."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..dtypes import name_of, parse_dtype
from ..errors import FootprintError

__all__ = ["InputSpec", "normalize_inputs", "parse_dtype", "parse_input_ids", "parse_shape"]

InputsLike = Any  # None | Tensor | InputSpec | str | sequence of those | mapping name -> those


@dataclass(frozen=True)
class InputSpec:
    """One input tensor: its shape, dtype and, for keyword inputs, its name; ``value`` is the
    caller's own tensor where one was given (its values are what a real run reads)."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    name: str | None = None
    value: torch.Tensor | None = field(default=None, compare=False, repr=False)

    def make(self, device: str | torch.device, label: str | None = None, fill: int | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """An example tensor on ``device``. The caller's tensor, as given: on meta its shape,
        dtype and strides; elsewhere a copy of its values (its rows repeated where the batch
        was changed). Otherwise one made as a real call's would be (see :meth:`made`):
        ``label`` names a positional input, ``fill`` is a length input's value."""
        given = self.given
        if torch.device(device).type == "meta":
            stride = given.stride() if given is not None and tuple(given.shape) == self.shape else None
            if stride is None:
                return torch.empty(self.shape, dtype=self.dtype, device=device)
            return torch.empty_strided(self.shape, stride, dtype=self.dtype, device=device)
        if given is not None:
            v = given.detach()
            if tuple(v.shape) != self.shape:  # another batch: the caller's rows, repeated
                v = v[torch.arange(self.shape[0], device=v.device) % max(v.shape[0], 1)]
            out = v.to(device=device, dtype=self.dtype, copy=True)
            if given.requires_grad and out.is_floating_point():
                out.requires_grad_(True)
            return out
        kind = self.made(label, fill)[0]
        if kind == "random":
            if self.dtype in _RANDN_DTYPES:
                return torch.randn(self.shape, dtype=self.dtype, generator=generator).to(device)
            return torch.randn(self.shape, generator=generator).to(device=device, dtype=self.dtype)
        if kind == "ones":
            return torch.ones(self.shape, dtype=self.dtype, device=device)
        if kind == "fill":
            return torch.full(self.shape, fill or 0, dtype=self.dtype, device=device)
        return torch.zeros(self.shape, dtype=self.dtype, device=device)

    @property
    def given(self) -> torch.Tensor | None:
        """The caller's tensor, where it has values (not a meta tensor)."""
        v = self.value
        return v if v is not None and v.device.type != "meta" else None

    def made(self, label: str | None = None, fill: int | None = None) -> tuple[str, str]:
        """How a real run's tensor is made when the caller gave none, as a real call's would
        be: ``(kind, description)``. Floating point: a normal sample. A mask keeps every
        position: an integer mask (``attention_mask``) and a boolean one named as Hugging Face
        and diffusers name theirs (``encoder_attention_mask``: True keeps) all ones; PyTorch's
        boolean masks (``key_padding_mask``, ``attn_mask``, ``src_mask``: True masks out) all
        False. A length (``lengths``, ``seq_lens``) at its maximum, ``fill``. Other integers
        (token ids, indices): zeros, which never index out of range."""
        name = self.name or label or ""
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return "random", "a normal sample"
        if self.dtype == torch.bool:
            if name.endswith("mask") and not _masks_out(name):
                return "ones", "all True (every position kept)"
            if name.endswith("mask"):
                return "zeros", "all False (nothing masked out)"
            return "zeros", "all False"
        if name.endswith("mask"):
            return "ones", "all ones (every position kept)"
        if fill is not None and is_length(name):
            return "fill", f"{fill} (the full length)"
        return "zeros", "zeros"

    @property
    def is_integer_mask(self) -> bool:
        """An integer keyword input named as a mask (``attention_mask``, ``input_features_mask``):
        1 marks a present position."""
        return bool(self.name) and self.name.endswith("mask") and self.dtype != torch.bool

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": name_of(self.dtype)}
        if self.name:
            d["name"] = self.name
        return d

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        prefix = f"{self.name}=" if self.name else ""
        return f"{prefix}{dims}:{name_of(self.dtype)}"


_RANDN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
# PyTorch's boolean masks, where True marks a position left out (nn.MultiheadAttention,
# nn.Transformer): all False keeps every position
_TORCH_MASKS = ("mask", "attn_mask", "src_mask", "tgt_mask", "memory_mask")
_LENGTH = re.compile(r"(^|_)(lengths?|lens?)$")


def _masks_out(name: str) -> bool:
    return name in _TORCH_MASKS or name.endswith("padding_mask")


def is_length(name: str) -> bool:
    """An input named as sequence lengths (``lengths``, ``input_lengths``, ``seq_lens``)."""
    return bool(_LENGTH.search(name))


def parse_shape(text: str, default_dtype: torch.dtype = torch.float32, name: str | None = None) -> InputSpec:
    """Parse ``1,3,224,224``, ``1x3x224x224`` or ``1,128:int64`` (optionally ``name=...``)."""
    raw = text.strip()
    if "=" in raw and name is None:
        name, _, raw = raw.partition("=")
        name = name.strip()
        if not name.isidentifier():
            raise FootprintError(f"malformed input '{text}': '{name}' is not a valid keyword name")
    dims_text, _, dtype_text = raw.partition(":")
    dtype = parse_dtype(dtype_text) if dtype_text else default_dtype
    parts = [p.strip() for p in dims_text.replace("x", ",").split(",")]
    if not dims_text.strip() or any(p == "" for p in parts):
        raise FootprintError(
            f"malformed input shape '{text}': expected comma-separated sizes such as 1,3,224,224 "
            "or 1,128:int64"
        )
    dims = []
    for p in parts:
        try:
            v = int(p)
        except ValueError:
            raise FootprintError(
                f"malformed input shape '{text}': '{p}' is not a whole number "
                "(expected e.g. 1,3,224,224 or 1,128:int64)"
            ) from None
        if v < 0:
            raise FootprintError(f"malformed input shape '{text}': sizes cannot be negative ('{p}')")
        dims.append(v)
    return InputSpec(tuple(dims), dtype, name)


def parse_input_ids(text: str) -> InputSpec:
    """``B,T`` -> an int64 ``input_ids`` keyword input."""
    spec = parse_shape(text, torch.int64, name="input_ids")
    if len(spec.shape) != 2:
        raise FootprintError(f"--input-ids takes BATCH,TOKENS (two sizes), got '{text}'")
    return InputSpec(spec.shape, torch.int64, "input_ids")


# --------------------------------------------------------------------------- inputs as the API takes them

def _spec_of(x: Any, name: str | None = None) -> Any:
    if isinstance(x, InputSpec):
        return InputSpec(x.shape, x.dtype, name or x.name, x.value)
    if isinstance(x, str):
        return parse_shape(x, name=name)
    if isinstance(x, torch.Tensor):  # the caller's tensor: its values are kept for a real run
        return InputSpec(tuple(x.shape), x.dtype, name, x)
    if isinstance(x, (tuple, list)) and x and all(isinstance(v, int) for v in x):
        return InputSpec(tuple(x), torch.float32, name)
    return x  # a non-tensor argument, passed as it is


def normalize_inputs(inputs: InputsLike) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword inputs, tensors replaced by :class:`InputSpec` (each holding the
    caller's tensor, whose values a real run reads)."""
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


def cast_floating(x: Any, dtype: torch.dtype | None) -> Any:
    """A floating input spec in ``dtype`` (anything else unchanged)."""
    if dtype is not None and isinstance(x, InputSpec) and x.dtype.is_floating_point:
        return InputSpec(x.shape, dtype, x.name, x.value)
    return x


def with_batch(pos: list[Any], kw: dict[str, Any], batch: int | None) -> tuple[list[Any], dict[str, Any]]:
    """Set the first dimension of every tensor input to ``batch``."""
    if batch is None:
        return pos, kw
    if batch < 1:
        raise FootprintError(f"batch must be at least 1, got {batch}")

    def rebatch(x: Any) -> Any:
        if isinstance(x, InputSpec) and x.shape:
            return InputSpec((batch, *x.shape[1:]), x.dtype, x.name, x.value)
        return x

    return [rebatch(x) for x in pos], {k: rebatch(v) for k, v in kw.items()}


class Materializer:
    """``make(device) -> (args, kwargs)``: the example inputs built on ``device``
    (``images_as_list``: the first input as a list of images, as detection models take it).

    The caller's tensors are used as given (see :meth:`InputSpec.make`), also inside lists,
    tuples and dicts; on a real device each is a copy, so a model that writes into its
    input leaves the caller's tensor alone. ``names`` are the forward's names of the
    positional inputs (the rules for made tensors go by name). :meth:`describe` says which
    tensors of a real run are the caller's and what was made for the others."""

    def __init__(self, pos: list[Any], kw: dict[str, Any], images_as_list: bool = False,
                 names: list[str] | None = None) -> None:
        self.pos = pos
        self.kw = kw
        self.images_as_list = images_as_list
        self.names = names or []
        self.labels = {id(x): (self.names[i] if i < len(self.names) else f"input {i}")
                       for i, x in enumerate(pos)} | {id(v): k for k, v in kw.items()}
        self.fill = _full_length(pos, kw, self.labels)

    def __call__(self, device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        gen = torch.Generator().manual_seed(0)  # made values are the same on every call
        args = tuple(self._make(x, device, gen) for x in self.pos)
        if self.images_as_list and args and isinstance(args[0], torch.Tensor):
            first = args[0]
            images = list(first.unbind(0)) if first.dim() == 4 else [first]
            args = (images, *args[1:])
        kwargs = {k: self._make(v, device, gen) for k, v in self.kw.items()}
        return args, kwargs

    def _make(self, x: Any, device: str, gen: torch.Generator) -> Any:
        if isinstance(x, InputSpec):
            return x.make(device, self.labels.get(id(x)), self.fill.get(id(x)), gen)
        return _copy_tensors(x, device)

    def describe(self) -> str:
        """Where a real run's inputs come from: the caller's values, or what was made."""
        given: list[str] = []
        made: list[str] = []
        for x in [*self.pos, *self.kw.values()]:
            label = self.labels.get(id(x), "input")
            if isinstance(x, InputSpec):
                if x.given is not None:
                    given.append(label)
                else:
                    made.append(f"{label} {x.made(label, self.fill.get(id(x)))[1]}")
            elif _has_tensor(x):
                given.append(label)
        parts = []
        if given:
            parts.append("the caller's values for " + ", ".join(given))
        if made:
            parts.append("made: " + "; ".join(made))
        return ", ".join(parts) if parts else "none"


def materializer(pos: list[Any], kw: dict[str, Any], images_as_list: bool = False,
                 names: list[str] | None = None) -> Materializer:
    """``make(device) -> (args, kwargs)``: see :class:`Materializer`."""
    return Materializer(pos, kw, images_as_list, names)


def _full_length(pos: list[Any], kw: dict[str, Any], labels: dict[int, str]) -> dict[int, int]:
    """The value of each made length input (``lengths`` of shape (B,)): the sequence length
    of another input of that batch, dimension 1 of a batch-first one (or 0 of a
    sequence-first one)."""
    specs = [x for x in [*pos, *kw.values()] if isinstance(x, InputSpec)]
    out: dict[int, int] = {}
    for x in specs:
        if x.given is not None or x.dtype.is_floating_point or x.dtype == torch.bool or len(x.shape) != 1:
            continue
        if not is_length(x.name or labels.get(id(x), "")):
            continue
        for other in specs:
            if other is x or len(other.shape) < 2:
                continue
            if other.shape[0] == x.shape[0]:
                out[id(x)] = other.shape[1]
                break
            if other.shape[1] == x.shape[0]:
                out[id(x)] = other.shape[0]
                break
    return out


def _copy_tensors(x: Any, device: str) -> Any:
    """Tensors inside plain lists, tuples and dicts: on meta, meta tensors of their shape,
    dtype and strides; elsewhere copies of the caller's tensors."""
    if isinstance(x, torch.Tensor):
        if torch.device(device).type == "meta":
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)
        if x.device.type == "meta":  # no values to copy: zeros of its kind
            return torch.zeros(x.shape, dtype=x.dtype, device=device)
        out = x.detach().to(device, copy=True)
        return out.requires_grad_(True) if x.requires_grad and out.is_floating_point() else out
    if type(x) in (list, tuple):
        return type(x)(_copy_tensors(v, device) for v in x)
    if type(x) is dict:
        return {k: _copy_tensors(v, device) for k, v in x.items()}
    return x


def _has_tensor(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.device.type != "meta"
    if type(x) in (list, tuple):
        return any(_has_tensor(v) for v in x)
    if type(x) is dict:
        return any(_has_tensor(v) for v in x.values())
    return False


def spec_list(pos: list[Any], kw: dict[str, Any]) -> list[InputSpec]:
    """The tensor inputs among positional and keyword ones, in order."""
    return [x for x in [*pos, *kw.values()] if isinstance(x, InputSpec)]
