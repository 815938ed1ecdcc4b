"""``footprint llm``'s answer: the model's parameters and cache, and one row per accelerator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...hardware.db import Accelerator

if TYPE_CHECKING:
    from .pricing import Priced

@dataclass
class EngineCache:
    """How a serving engine sizes its KV cache on one accelerator (per rank): the bytes it
    gives the cache, in blocks (or pages) of ``block`` tokens, and what that holds."""

    capacity_bytes: int
    blocks: int
    tokens: int
    concurrency: float  # requests of the asked context it holds at once
    engine: str = "vllm"
    title: str = "vLLM"
    block: int = 16
    max_model_len: int | None = None
    knobs: dict[str, float] = field(default_factory=dict)  # the values the sizing used
    held_back: dict[str, int] = field(default_factory=dict)  # bytes the rule takes before the cache, by name
    error: str | None = None  # what the engine would say where the cache has no room

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


VllmCache = EngineCache  # the earlier name


@dataclass
class LlmRow:
    """One accelerator (per rank where tp > 1)."""

    accelerator: Accelerator
    weights_bytes: int
    kv_bytes: int
    activation_bytes: int
    overhead_bytes: int
    fits: bool
    max_batch: int
    max_context: int
    ttft_s: float
    tpot_s: float  # mean time per output token over the output
    tpot_first_s: float
    tpot_last_s: float
    max_batch_tokens_per_s: float  # output tokens/s of the largest batch: its prefill, then its decode
    mfu: float  # prefill: model FLOPs / (TTFT x peak)
    mbu: float  # decode: bytes read per step / (time per token x bandwidth)
    comm_s: float = 0.0  # tensor-parallel all-reduces in one decode step
    vllm: EngineCache | None = None  # the engine's cache sizing (any engine; the name is the first one's)
    notes: list[str] = field(default_factory=list)
    # the curves a report draws: (context, bytes needed at the batch), (batch, tokens/s in all)
    memory_by_context: list[tuple[int, int]] = field(default_factory=list)
    tokens_by_batch: list[tuple[int, float]] = field(default_factory=list)
    # the peak the verdict tests: weights + runtime + the larger of (the cache at the prompt + the
    # prefill's activations) and the cache at the end (None: all four parts added)
    needed_bytes: int | None = None
    simulation: dict[str, Any] | None = None  # continuous batching simulated (estimate/llm/simulate.py)

    @property
    def total_bytes(self) -> int:
        """The memory needed, the figure ``fits`` compares with the capacity."""
        if self.needed_bytes is not None:
            return self.needed_bytes
        return self.weights_bytes + self.kv_bytes + self.activation_bytes + self.overhead_bytes

    @property
    def capacity(self) -> int:
        return self.accelerator.usable_bytes

    def to_dict(self, batch: int, output: int) -> dict[str, Any]:
        e2e = self.ttft_s + output * self.tpot_s
        return {
            "accelerator": self.accelerator.id, "name": self.accelerator.name, "memory_bytes": self.capacity,
            "weights_bytes": self.weights_bytes, "kv_bytes": self.kv_bytes,
            "activation_bytes": self.activation_bytes, "overhead_bytes": self.overhead_bytes,
            "total_bytes": self.total_bytes, "fits": self.fits, "max_batch": self.max_batch,
            "max_context": self.max_context, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
            "tpot_first_s": self.tpot_first_s, "tpot_last_s": self.tpot_last_s,
            "tokens_per_s_per_request": 1 / self.tpot_s if self.tpot_s else None,
            "tokens_per_s": batch / self.tpot_s if self.tpot_s else None, "e2e_s": e2e,
            "max_batch_tokens_per_s": self.max_batch_tokens_per_s, "mfu": self.mfu, "mbu": self.mbu,
            "comm_s": self.comm_s, "vllm": self.vllm.to_dict() if self.vllm and self.vllm.engine == "vllm" else None,
            "engine_cache": self.vllm.to_dict() if self.vllm else None, "simulation": self.simulation,
            "notes": self.notes,
            "memory_by_context": [list(x) for x in self.memory_by_context],
            "tokens_by_batch": [list(x) for x in self.tokens_by_batch],
        }


@dataclass
class LlmResult:
    """``footprint llm``'s answer: the model's parameters and cache, and one row per accelerator."""

    kind = "llm"  # the envelope's kind of its saved file

    model: str
    serving: Priced
    params: int
    active_params: int
    expert_params: int
    experts: tuple[int, int] | None  # (experts per layer, experts per token)
    weights_bytes: int  # whole model, in the weight scheme
    weights_scheme: str
    kv_scheme: str
    kv_bytes_per_token: int  # one sequence, every layer, in the KV scheme
    layers: list[dict[str, Any]]
    prefill_flops: int  # at the asked batch and prompt
    decode_flops: int  # one step at the asked batch, cache at the prompt
    rows: list[LlmRow]
    notes: list[str] = field(default_factory=list)
    measured: dict[str, Any] | None = None

    def __repr__(self) -> str:  # the rows and layers would fill a screen: the headline figures
        return (f"LlmResult(model={self.model!r}, params={self.params}, weights_bytes={self.weights_bytes}, "
                f"kv_bytes_per_token={self.kv_bytes_per_token}, "
                f"rows=<{len(self.rows)} accelerators, {sum(1 for r in self.rows if r.fits)} fit>)")

    def row(self, accelerator_id: str) -> LlmRow:
        return next(r for r in self.rows if r.accelerator.id == accelerator_id)

    def to_dict(self) -> dict[str, Any]:
        s = self.serving
        return {
            "model": self.model, "batch": s.batch, "prompt": s.prompt, "output": s.output, "gpus": s.gpus,
            "tp": s.tp, "engine": s.engine, "chunk": s.chunk, "params": self.params,
            "active_params": self.active_params, "expert_params": self.expert_params,
            "experts": list(self.experts) if self.experts else None, "weights_scheme": self.weights_scheme,
            "weights_bytes": self.weights_bytes, "kv_scheme": self.kv_scheme,
            "kv_bytes_per_token": self.kv_bytes_per_token, "layers": self.layers,
            "prefill_flops": self.prefill_flops, "decode_flops": self.decode_flops,
            "accelerators": [r.to_dict(s.batch, s.output) for r in self.rows], "notes": self.notes,
            "measured": self.measured,
        }


# ------------------------------------------------------------------------------ the model's weights
