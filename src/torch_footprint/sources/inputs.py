"""Input specs: ``1,3,224,224`` or ``1,128:int64`` -> example tensors on any device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import FootprintError

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32, "f32": torch.float32,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16, "f16": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp64": torch.float64, "float64": torch.float64, "double": torch.float64,
    "int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
FLOAT_DTYPES = ("fp32", "fp16", "bf16", "fp64")


def parse_dtype(text: str) -> torch.dtype:
    """A dtype from its usual names (fp32, float32, bf16, int64, ...)."""
    key = text.strip().lower().removeprefix("torch.")
    if key not in DTYPES:
        raise FootprintError(f"unknown dtype '{text}'; valid dtypes: {', '.join(sorted(DTYPES))}")
    return DTYPES[key]


@dataclass(frozen=True)
class InputSpec:
    """One input tensor: its shape, dtype and, for keyword inputs, its name."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    name: str | None = None

    def make(self, device: str | torch.device) -> torch.Tensor:
        """An example tensor: empty on meta; elsewhere zeros (integers) or a normal sample, so a
        real run never indexes out of range nor reads uninitialised memory."""
        if torch.device(device).type == "meta":
            return torch.empty(self.shape, dtype=self.dtype, device=device)
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype, device=device)
        return torch.zeros(self.shape, dtype=self.dtype, device=device)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": str(self.dtype).removeprefix("torch.")}
        if self.name:
            d["name"] = self.name
        return d

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        prefix = f"{self.name}=" if self.name else ""
        return f"{prefix}{dims}:{str(self.dtype).removeprefix('torch.')}"


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


def split_specs(specs: list[InputSpec]) -> tuple[list[InputSpec], dict[str, InputSpec]]:
    positional = [s for s in specs if s.name is None]
    keyword = {s.name: s for s in specs if s.name is not None}
    return positional, keyword
