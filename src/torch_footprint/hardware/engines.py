"""Serving engines as data: how each sizes its KV cache, read from its own sources (one TOML
per engine in ``engines/``, every rule with the source file it comes from), and the knobs it
takes under the flag names ``footprint llm`` gives them, with the engine's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import FootprintError

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FOLDER = Path(__file__).with_name("engines")
BUDGETS = ("total_fraction", "static_fraction", "free_fraction", "context")


@dataclass(frozen=True)
class EngineProfile:
    """One engine's cache sizing.

    ``budget`` says what the cache gets: ``total_fraction`` (vLLM) the fraction of the total
    less the weights, a profile run's activations and the memory outside PyTorch;
    ``static_fraction`` (SGLang) the fraction of the total less what is in use once the
    weights are loaded; ``free_fraction`` (TensorRT-LLM) the fraction of what is still free
    after the weights and a profile run; ``context`` (llama.cpp) a fixed number of cells."""

    name: str
    title: str
    source: str
    budget: str
    knobs: dict[str, float] = field(default_factory=dict)  # defaults, by the flag's field name
    fraction_knob: str = ""
    profile_tokens_knob: str = ""
    block_knob: str = ""
    non_torch_gib: float = 0.0  # memory outside PyTorch per rank, tensor parallelism 1
    non_torch_tp_gib: float = 0.0  # the same where ranks talk (NCCL and all-reduce buffers)
    cuda_graph_gib: float = 0.0  # CUDA graphs' memory counted inside the budget
    fraction_by_tp: dict[int, float] = field(default_factory=dict)  # a default fraction by tensor parallelism
    # speed: the achieved fractions of the datasheet's bandwidth and dense matrix rate, and the
    # host's time per traced operator that the device's kernels do not hide ([speed] in the TOML)
    speed: dict[str, float] = field(default_factory=dict)
    # what admitting a request reserves: "prompt" (its prompt's blocks; preempted when the cache
    # runs out) or "whole" (every block it can reach, prompt + output: it is never preempted)
    admission: str = "prompt"

    def efficiency(self) -> dict[str, float]:
        """The achieved fractions of the datasheet's rates (memory, matrix, vector) this engine
        reaches where it states them."""
        return {k: self.speed[k] for k in ("memory", "matrix", "vector") if k in self.speed}

    def overhead_s(self) -> float | None:
        """Host time per traced operator that the device does not hide (None: not stated)."""
        us = self.speed.get("overhead_us")
        return None if us is None else us * 1e-6

    def knob(self, name: str, given: float | None, tp: int = 1, total_bytes: int | None = None) -> float:
        """A knob's value: the one given, else the engine's default (for the fraction, by
        tensor parallelism where the engine says so; vLLM's token budget by device size)."""
        if given is not None:
            return given
        if name == self.fraction_knob and self.fraction_by_tp:
            at = max((k for k in self.fraction_by_tp if k <= tp), default=min(self.fraction_by_tp))
            return self.fraction_by_tp[at]
        small = self.knobs.get("small_device_gib")
        if name == "max_num_batched_tokens" and small and total_bytes is not None and total_bytes < small * 2**30:
            return self.knobs["max_num_batched_tokens_small"]
        return self.knobs[name]

    def takes(self, name: str) -> bool:
        """Whether the engine has this knob (max_model_len: every engine with a token budget)."""
        return name in self.knobs or (name == "max_model_len" and self.budget != "context")


def _profile(path: Path) -> EngineProfile:
    raw: dict[str, Any] = tomllib.loads(path.read_text())
    if raw.get("budget") not in BUDGETS:
        raise FootprintError(f"{path.name}: budget must be one of {', '.join(BUDGETS)}, got {raw.get('budget')!r}")
    if raw.get("admission", "prompt") not in ("prompt", "whole"):
        raise FootprintError(f"{path.name}: admission must be prompt or whole, got {raw['admission']!r}")
    by_tp = {int(k): float(v) for k, v in raw.pop("fraction_by_tp", {}).items()}
    knobs = {k: float(v) for k, v in raw.pop("knobs", {}).items()}
    speed = {k: float(v) for k, v in raw.pop("speed", {}).items()}
    return EngineProfile(**raw, knobs=knobs, fraction_by_tp=by_tp, speed=speed)


@cache
def profiles() -> dict[str, EngineProfile]:
    """Every shipped engine profile, by name."""
    out = {}
    for path in sorted(FOLDER.glob("*.toml")):
        p = _profile(path)
        out[p.name] = p
    return out


def profile(name: str) -> EngineProfile:
    """The engine called ``name``; a clear error naming the others if there is none."""
    found = profiles().get(name)
    if found is None:
        raise FootprintError(f"unknown engine '{name}': use {', '.join(profiles())}")
    return found
