"""Every dtype name the tool reads or writes, in one table.

Three vocabularies meet here: the names a user types (``bf16``, ``float16``, ``half``), the
names a trace stores (torch's own, ``bfloat16``) and the rate keys of the accelerator
database (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``int8``, ``fp4``). This module imports
torch only when a ``torch.dtype`` is asked for, so the hardware database stays light.
"""

from __future__ import annotations

from typing import Any

from .errors import FootprintError

# what a user may type -> torch's name
_ALIASES: dict[str, str] = {
    "fp32": "float32", "float32": "float32", "float": "float32", "f32": "float32",
    "fp16": "float16", "float16": "float16", "half": "float16", "f16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp64": "float64", "float64": "float64", "double": "float64",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}

# the accelerator database's rate keys, and the one that prices work in each torch dtype
RATE_KEYS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")
_RATE_OF: dict[str, str] = {
    "float32": "fp32", "float64": "fp32", "float16": "fp16", "bfloat16": "bf16",
    "int8": "int8", "uint8": "int8", "int32": "int8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
}
# the torch dtype of each rate key (tf32 is float32 with TF32 matmuls)
_TORCH_OF_RATE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}

_NAMES: dict[Any, str] = {}


def parse_dtype(text: str) -> Any:
    """A ``torch.dtype`` from its usual names (fp32, float32, bf16, int64, torch.float16, ...)."""
    import torch

    key = text.strip().lower().removeprefix("torch.")
    if key not in _ALIASES:
        raise FootprintError(f"unknown dtype '{text}'; valid dtypes: {', '.join(sorted(_ALIASES))}")
    return getattr(torch, _ALIASES[key])


def name_of(dtype: Any) -> str:
    """torch's name of a dtype, as a trace stores it: ``float32``, ``bfloat16``."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def rate_key(dtype: Any) -> str | None:
    """The database rate key that prices work in ``dtype`` (a torch.dtype or its name)."""
    return _RATE_OF.get(dtype if isinstance(dtype, str) else name_of(dtype))


def torch_dtype_of_rate(key: str) -> Any:
    """The torch dtype that runs at rate ``key`` (``tf32`` -> float32)."""
    import torch

    return getattr(torch, _TORCH_OF_RATE[key])
