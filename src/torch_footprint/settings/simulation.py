"""The serving simulation's record (:class:`Simulation`): what requests a simulated server is
sent (their lengths, their times), the latency objectives goodput counts against, and what the
engine does beside continuous batching (prefix caching, speculative decoding, disaggregated
prefill and decode). Names follow ``vllm bench serve`` and vLLM's own where they have one."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FootprintError
from ..quantities import parse_seconds
from .fields import Record, opt


@dataclass(frozen=True)
class Simulation(Record):
    """Requests, objectives and engine features of the serving simulation (``--simulate``)."""

    request_rate: str | None = opt(metavar="RATES")
    """requests per second, sent as a Poisson process (seeded): one rate, or several to sweep (1,2,4,8); inf sends
    them all at once (default: a closed loop of --concurrency clients)"""
    lengths: str = opt("fixed", metavar="NAME")
    """request lengths: fixed (--prompt + --output), or drawn from a shipped histogram of a real service:
    azure-conv (Azure's 2023 conversation trace, Splitwise; median 1,020 in, 129 out), mlperf-openorca (MLPerf
    Inference's Llama-2-70B samples; mean 222 in, 294 out), sharegpt (ShareGPT's first turns as vLLM's and
    SGLang's serving benchmarks draw them; median 103 in, 135 out)"""
    request_trace: str | None = opt(metavar="FILE")
    """requests from a JSONL or CSV file: input_tokens, output_tokens and, optionally, a send time in seconds
    (arrival or timestamp); without times, sent by --concurrency clients"""
    seed: int = opt(0, metavar="N")
    """the seed of the drawn lengths and send times (the same seed, the same requests)"""
    slo_ttft: float | str | None = opt(metavar="TIME")
    """goodput counts the requests whose time to first token is at most this, e.g. 500ms"""
    slo_tpot: float | str | None = opt(metavar="TIME")
    """goodput counts the requests whose time per output token is at most this, e.g. 50ms"""
    prefix_hit_rate: float = opt(0.0, metavar="F")
    """prefix caching: this fraction of each prompt's tokens is found in the cache (not prefilled, its blocks
    shared)"""
    num_speculative_tokens: int | None = opt(metavar="K")
    """speculative decoding: tokens proposed per step, by --speculative-model or else by a one-layer draft head of
    the model (as EAGLE and MTP heads are): its weights and cache counted, its steps priced"""
    acceptance_rate: float = opt(0.7, metavar="A")
    """speculative decoding: the chance each proposed token is accepted; a step emits (1 - A^(K+1)) / (1 - A)
    tokens on average (Leviathan et al. 2023)"""
    speculative_model: str | None = opt(metavar="MODEL")
    """speculative decoding with this draft model (hf:ID or a config folder): its weights and cache beside the
    model's, its steps priced at the bytes they read"""
    disaggregate: str | None = opt(metavar="P:D")
    """disaggregated prefill and decode: P prefill and D decode instances of --gpus each, the cache moved
    between them over the GPUs' link (needs --request-rate or a timed --request-trace)"""

    def check(self) -> None:
        if not 0 <= self.prefix_hit_rate < 1:
            raise FootprintError(f"--prefix-hit-rate must be in [0, 1), got {self.prefix_hit_rate}")
        if not 0 <= self.acceptance_rate < 1:
            raise FootprintError(f"--acceptance-rate must be in [0, 1), got {self.acceptance_rate}")
        if self.num_speculative_tokens is not None and not 1 <= self.num_speculative_tokens <= 64:
            raise FootprintError(f"--num-speculative-tokens must be 1 to 64, got {self.num_speculative_tokens}")
        if self.speculative_model and self.num_speculative_tokens is None:
            raise FootprintError("--speculative-model proposes --num-speculative-tokens tokens a step: give that too")
        for name in ("slo_ttft", "slo_tpot"):
            value = getattr(self, name)
            if value is not None:
                parse_seconds(value)
        if self.disaggregate is not None:
            self.pools()

    def pools(self) -> tuple[int, int]:
        """``--disaggregate P:D`` as (P, D)."""
        p, sep, d = str(self.disaggregate).partition(":")
        try:
            pools = int(p), int(d)
        except ValueError:
            sep = ""
        if not sep or min(pools) < 1:
            raise FootprintError(f"--disaggregate takes P:D, prefill and decode instances (at least 1 each), e.g. "
                                 f"1:3; got '{self.disaggregate}'")
        return pools

    def slos(self) -> tuple[float | None, float | None]:
        return (None if self.slo_ttft is None else parse_seconds(self.slo_ttft),
                None if self.slo_tpot is None else parse_seconds(self.slo_tpot))

    @property
    def asked(self) -> bool:
        """Whether anything here asks for a simulation."""
        return any(v is not None for v in (self.request_rate, self.request_trace, self.num_speculative_tokens,
                                           self.disaggregate, self.slo_ttft, self.slo_tpot)) \
            or self.lengths != "fixed" or self.prefix_hit_rate > 0
