"""Input specs: ``1,3,224,224`` or ``1,128:int64`` -> example tensors on any device."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..dtypes import name_of, parse_dtype
from ..errors import FootprintError

__all__ = ["InputSpec", "normalize_inputs", "parse_dtype", "parse_input_ids", "parse_shape"]

InputsLike = Any  # None | Tensor | InputSpec | str | sequence of those | mapping name -> those


@dataclass(frozen=True)
class InputSpec:
    """One input tensor: its shape, dtype and, for keyword inputs, its name."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    name: str | None = None

    def make(self, device: str | torch.device) -> torch.Tensor:
        """An example tensor: empty on meta; elsewhere a normal sample (floating point), ones
        (an integer mask) or zeros (other integers), so a real run never indexes out of range
        nor reads uninitialised memory."""
        if torch.device(device).type == "meta":
            return torch.empty(self.shape, dtype=self.dtype, device=device)
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype, device=device)
        if self.is_integer_mask:  # an attention or feature mask: every position present
            return torch.ones(self.shape, dtype=self.dtype, device=device)
        return torch.zeros(self.shape, dtype=self.dtype, device=device)

    @property
    def is_integer_mask(self) -> bool:
        """An integer keyword input named as a mask (``attention_mask``, ``input_features_mask``):
        1 marks a present position. Boolean masks stay False (PyTorch's ``key_padding_mask``:
        True marks padding)."""
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


def cast_floating(x: Any, dtype: torch.dtype | None) -> Any:
    """A floating input spec in ``dtype`` (anything else unchanged)."""
    if dtype is not None and isinstance(x, InputSpec) and x.dtype.is_floating_point:
        return InputSpec(x.shape, dtype, x.name)
    return x


def with_batch(pos: list[Any], kw: dict[str, Any], batch: int | None) -> tuple[list[Any], dict[str, Any]]:
    """Set the first dimension of every tensor input to ``batch``."""
    if batch is None:
        return pos, kw
    if batch < 1:
        raise FootprintError(f"batch must be at least 1, got {batch}")

    def rebatch(x: Any) -> Any:
        if isinstance(x, InputSpec) and x.shape:
            return InputSpec((batch, *x.shape[1:]), x.dtype, x.name)
        return x

    return [rebatch(x) for x in pos], {k: rebatch(v) for k, v in kw.items()}


def materializer(pos: list[Any], kw: dict[str, Any],
                 images_as_list: bool = False) -> Callable[[str], tuple[tuple[Any, ...], dict[str, Any]]]:
    """``make(device) -> (args, kwargs)``: the example inputs built on ``device``
    (``images_as_list``: the first input as a list of images, as detection models take it)."""

    def make(device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = tuple(x.make(device) if isinstance(x, InputSpec) else x for x in pos)
        if images_as_list and args and isinstance(args[0], torch.Tensor):
            first = args[0]
            images = list(first.unbind(0)) if first.dim() == 4 else [first]
            args = (images, *args[1:])
        kwargs = {k: (v.make(device) if isinstance(v, InputSpec) else v) for k, v in kw.items()}
        return args, kwargs

    return make


def spec_list(pos: list[Any], kw: dict[str, Any]) -> list[InputSpec]:
    """The tensor inputs among positional and keyword ones, in order."""
    return [x for x in [*pos, *kw.values()] if isinstance(x, InputSpec)]
