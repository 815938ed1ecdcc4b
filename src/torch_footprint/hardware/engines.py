"""Serving engines as data: how each sizes its KV cache, read from its own sources (one TOML
per engine in ``engines/``, every rule with the source file it comes from), and the knobs it
takes under the flag names ``footprint llm`` gives them, with the engine's defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FootprintError

if TYPE_CHECKING:
    from .db import Accelerator

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
    # the profile run's tokens: "budget" (the token budget knob) or "longest" (vLLM V0 without chunked
    # prefill: max(max_model_len, 2048); chunked_tokens from max_model_len chunked_above on)
    profile_tokens: str = "budget"
    chunked_above: int = 0
    chunked_tokens: int = 0
    # the knob that runs prompt chunks beside the decodes in one step (vLLM's enable_chunked_prefill,
    # SGLang's enable_mixed_chunk); off, a step that prefills decodes nothing ("" : always mixed)
    mixed_knob: str = ""
    sampler_bytes_per_logit: float = 0.0  # the profile's sampler run: bytes per logit of max_num_seqs x vocabulary
    # the rotary embedding's cos/sin table (max positions x rotary dims, the model's dtype) is
    # built with the model and counted in its weights, on every rank
    rope_table: bool = False
    # the profile run is eager and adds the residual and normalises in place (one fused kernel
    # writing its inputs): one hidden-size tensor a token fewer than the traced forward keeps
    inplace_add_norm: bool = False
    small_device_names: tuple[str, ...] = ()  # devices given the small defaults whatever their memory
    context_held: bool = False  # the CUDA context and cuBLAS workspace are held back too (measured as total - free)
    version: str = ""  # the release whose rule this is ("" the newest)
    eras: tuple[dict[str, Any], ...] = ()  # earlier rules: {"until": "X.Y.Z", fields overridden...}
    # speed: the achieved fractions of the datasheet's bandwidth and dense matrix rate, and the
    # host's time per traced operator that the device's kernels do not hide ([speed] in the TOML)
    speed: dict[str, float] = field(default_factory=dict)
    # what admitting a request reserves: "prompt" (its prompt's blocks; preempted when the cache
    # runs out) or "whole" (every block it can reach, prompt + output: it is never preempted)
    admission: str = "prompt"
    # the element-wise operators between matrix operators run as fused kernels (norm with residual
    # add, rotary embedding, gated activation): their intermediate results stay on chip
    fused_elementwise: bool = False
    vendors: tuple[str, ...] = ()  # the GPU vendors it runs on (empty: any device)
    # how a step's attention runs: "per_request" (each request's queries against its own keys, as
    # the traced step prices it) or "packed" (every scheduled query against every key the step
    # reads, under a block-diagonal mask: transformers' continuous batching with sdpa or eager)
    attention: str = "per_request"
    # the engine's own host time ([host] in the TOML), in the calibrated CPU's operator dispatches:
    # per step (step_ops), per scheduled request (sequence_ops), per admitted request (request_ops); for
    # a GPU engine, its Python between CUDA graphs in microseconds (step_us, sequence_us, request_us)
    host: dict[str, float] = field(default_factory=dict)
    # a bf16 checkpoint on a GPU without bf16 units (NVIDIA before Ampere) is loaded in this dtype
    # ("" : the engine keeps bf16), or in fp32 for the model types fp16 is unstable for
    bf16_fallback: str = ""
    fp16_unsafe: tuple[str, ...] = ()

    def runs_on(self, vendor: str) -> bool:
        """Whether the engine runs on this vendor's devices."""
        return not self.vendors or vendor in self.vendors

    def efficiency(self) -> dict[str, float]:
        """The achieved fractions of the datasheet's rates (memory, matrix, vector) this engine
        reaches where it states them."""
        return {k: self.speed[k] for k in ("memory", "matrix", "vector") if k in self.speed}

    def loads_in(self, dtype: str, model_type: str, acc: Accelerator) -> str | None:
        """The dtype the engine loads a ``dtype`` checkpoint in on accelerator ``acc`` where that is
        not the checkpoint's own (None: as it is): a bf16 checkpoint on a GPU without bf16 units in
        ``bf16_fallback``, or in fp32 for the model types fp16 is unstable for."""
        if not self.bf16_fallback or dtype != "bfloat16" or acc.kind != "gpu" or acc.peak("bf16"):
            return None
        if model_type in self.fp16_unsafe:
            return "fp32"
        return self.bf16_fallback if acc.peak(self.bf16_fallback) else None

    def python_s(self, scheduled: int, admitted: int = 0) -> float:
        """A GPU engine's own Python in one scheduling step (its [host] ``step_us``, ``sequence_us`` per
        scheduled request, ``request_us`` per admitted one), which the GPU waits for; 0 where not stated."""
        h = self.host
        return (h.get("step_us", 0.0) + h.get("sequence_us", 0.0) * scheduled
                + h.get("request_us", 0.0) * admitted) * 1e-6

    def python_rule(self) -> str:
        """The Python per step in words ("1.2 ms + 100 us a request"); "" where not stated."""
        h = self.host
        if not self.python_s(1, 1):
            return ""
        terms = [f"{h.get('step_us', 0.0) / 1e3:g} ms"]
        terms += [f"{h[k]:g} us {what}" for k, what in (("sequence_us", "a request"), ("request_us", "an admitted one"))
                  if h.get(k)]
        return " + ".join(terms)

    def overhead_s(self) -> float | None:
        """Host time per traced operator that the device does not hide (None: not stated)."""
        us = self.speed.get("overhead_us")
        return None if us is None else us * 1e-6

    def knob(self, name: str, given: float | None, tp: int = 1, total_bytes: int | None = None,
             device: str = "") -> float:
        """A knob's value: the one given, else the engine's default (for the fraction, by
        tensor parallelism where the engine says so; vLLM's token budget and requests in flight
        by device: ``NAME_small`` under ``small_device_gib`` or on ``small_device_names``)."""
        if given is not None:
            return given
        if name == self.fraction_knob and self.fraction_by_tp:
            at = max((k for k in self.fraction_by_tp if k <= tp), default=min(self.fraction_by_tp))
            return self.fraction_by_tp[at]
        if f"{name}_small" in self.knobs and self.small(total_bytes, device):
            return self.knobs[f"{name}_small"]
        return self.knobs[name]

    def small(self, total_bytes: int | None, device: str = "") -> bool:
        """Whether a device gets the engine's small defaults."""
        limit = self.knobs.get("small_device_gib")
        if limit and total_bytes is not None and total_bytes < limit * 2**30:
            return True
        return any(n in device.lower() for n in self.small_device_names)

    def defaults(self) -> list[str]:
        """The knobs' names (not their small-device variants)."""
        return [n for n in self.knobs if not n.endswith("_small") and n != "small_device_gib"]

    def at(self, version: str | None) -> EngineProfile:
        """The rule of the release ``version`` (its first x.y[.z]: "~0.6.4 (V0)" is 0.6.4): the
        first era whose ``until`` is at or above it, else the newest; None: the newest."""
        got = release(version)
        if got is None:
            return self
        for era in self.eras:
            if got <= release(era["until"]):  # type: ignore[operator]
                fields = {k: v for k, v in era.items() if k not in ("until", "source", "non_torch_from", "knobs")}
                if "knobs" in era:
                    fields["knobs"] = {**self.knobs, **{k: float(v) for k, v in era["knobs"].items()}}
                return replace(self, **fields, version=str(version), eras=())
        return replace(self, version=str(version), eras=())

    def takes(self, name: str) -> bool:
        """Whether the engine has this knob (max_model_len: every engine with a token budget)."""
        return name in self.knobs or (name == "max_model_len" and self.budget != "context")


def release(version: str | None) -> tuple[int, ...] | None:
    """A version's first x.y[.z] as numbers; None where it has none."""
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(g or 0) for g in found.groups()) if found else None


def _profile(path: Path) -> EngineProfile:
    raw: dict[str, Any] = tomllib.loads(path.read_text())
    if raw.get("budget") not in BUDGETS:
        raise FootprintError(f"{path.name}: budget must be one of {', '.join(BUDGETS)}, got {raw.get('budget')!r}")
    if raw.get("admission", "prompt") not in ("prompt", "whole"):
        raise FootprintError(f"{path.name}: admission must be prompt or whole, got {raw['admission']!r}")
    by_tp = {int(k): float(v) for k, v in raw.pop("fraction_by_tp", {}).items()}
    knobs = {k: float(v) for k, v in raw.pop("knobs", {}).items()}
    eras = tuple(raw.pop("eras", ()))
    raw["small_device_names"] = tuple(raw.get("small_device_names", ()))
    raw["vendors"] = tuple(raw.get("vendors", ()))
    raw["fp16_unsafe"] = tuple(raw.get("fp16_unsafe", ()))
    for era in eras:
        if release(era.get("until")) is None:
            raise FootprintError(f"{path.name}: every era needs an 'until' version, got {era.get('until')!r}")
    if raw.get("attention", "per_request") not in ("per_request", "packed"):
        raise FootprintError(f"{path.name}: attention must be per_request or packed, got {raw['attention']!r}")
    speed = {k: float(v) for k, v in raw.pop("speed", {}).items()}
    host = {k: float(v) for k, v in raw.pop("host", {}).items()}
    return EngineProfile(**raw, knobs=knobs, fraction_by_tp=by_tp, eras=eras, speed=speed, host=host)


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
