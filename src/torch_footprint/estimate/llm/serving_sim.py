"""The serving simulation of one accelerator, set up from what :mod:`.pricing` priced: the
requests (:mod:`.requests`), one run per request rate asked (a sweep), and the engine's
features priced in the iteration model (:mod:`.simulate`):

* speculative decoding: each step emits (1 - a^(K+1)) / (1 - a) tokens on average for K
  proposed tokens accepted with probability a each (Leviathan et al., "Fast Inference from
  Transformers via Speculative Decoding", ICML 2023, eq. 1); the step adds the draft's K
  decode steps and the target's verification of K more tokens per request (each at the
  prefill's time per token: the weights are read once for the step either way). A draft
  head (EAGLE, MTP) is one decoder layer of the model: 1/layers of a decode step, of the
  weights, and one layer more of cache; a draft model (``speculative_model``) its own
  weights and cache (as traced), each of its steps the model's decode step scaled by the
  bytes the two read (decode is bound by them);
* disaggregated prefill and decode (P:D instances): the prefill pool's runs give each
  request its first token; its cache then crosses the GPUs' link (each rank its share, at
  the link's bandwidth) and the decode pool serves the rest, its requests arriving with
  their cache;
* an engine's own time per iteration (its profile's ``attention = "packed"`` and [host]:
  :class:`EngineHost`): Python scheduling per step, per scheduled and per admitted request, in
  the calibrated CPU's operator dispatches; and a packed attention (every query of the step
  against every key it reads, under a block-diagonal mask: :mod:`.packed`) priced for each key
  the step reads and the query-key pairs beyond each request's own, which the traced step
  already prices;
* cost and energy: the GPU-hours of the run (every instance's GPUs, for its duration) at
  the price of one GPU-hour (``--price`` or the shipped table), split between input and
  output tokens by the iterations' prefill and decode time; joules per token at the board
  power (TDP) for the busy time: an estimate, GPUs serving rarely draw their full board
  power all the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import FootprintError
from ...hardware.db import Accelerator
from ...hardware.engines import EngineProfile, profile
from ...hardware.prices import hourly_price
from ..kernels.roofline import host_operator_s
from .packed import AttentionShape, packed_prices
from .requests import parse_rates, stream, timed
from .result import EngineCache
from .simulate import Outcome, Sent, StepCost, Tricks, run, summary


@dataclass
class Setup:
    """What pricing hands over for one accelerator: a decode step's time at any (batch,
    context), the prefill's time per token, the engine's cache, and per-rank sizes."""

    decode_s: Callable[[int, int], float]
    prefill_per_token: float
    cache: EngineCache
    layers: int
    weights_per_rank: int
    kv_per_token_rank: float  # cache bytes per token on one rank
    link_bytes_per_s: float | None  # the GPUs' link, one direction (disaggregation moves the cache over it)
    gpus: int  # per instance
    acc: Accelerator
    prices: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    # what admitting a request reserves: "prompt" (its prompt's blocks; preempted when the cache
    # runs out) or "whole" (prompt and output: never preempted, TensorRT-LLM's GUARANTEED_NO_EVICT)
    admission: str = "prompt"
    engine_version: str | None = None  # the engine release whose rules apply (None: the newest)


@dataclass
class Asked:
    """What the user asked of the simulation (the Serving and Simulation records, resolved)."""

    prompt: int
    output: int
    concurrency: int
    num_prompts: int | None
    rates: list[float] | None = None
    lengths: str = "fixed"
    trace: str | None = None
    seed: int = 0
    slo_ttft: float | None = None
    slo_tpot: float | None = None
    prefix_hit: float = 0.0
    spec_k: int | None = None
    acceptance: float = 0.7
    pools: tuple[int, int] | None = None
    most: int | None = None  # the engine's longest request (max_model_len)
    draft: tuple[int, float, str] | None = None  # a draft model: (weight bytes, cache bytes per token, name)
    attention: AttentionShape | None = None  # the model's attention, for an engine that packs it


@dataclass(frozen=True)
class EngineHost:
    """An engine's time per iteration beside the traced step, from its profile's [host] rules
    (hardware/engines/NAME.toml): ``step_ops`` + ``sequence_ops`` per scheduled request +
    ``request_ops`` per admitted one, in operator dispatches of ``op_s`` seconds each (the
    calibrated time per PyTorch call; eager PyTorch's host time per operator where the device
    was not calibrated); and, with packed attention, ``key_s`` for each key the step reads and
    ``pair_s`` for each of (query tokens x keys read - each request's own pairs), priced from the
    operators the packed attention runs (:func:`.packed.packed_prices`)."""

    step_ops: float
    sequence_ops: float
    request_ops: float
    op_s: float
    pair_s: float  # seconds per query-key pair beyond each request's own (0: attention per request)
    key_s: float = 0.0  # seconds per key read (the packed attention's repeat of it to every query head)
    # a GPU engine's Python between its CUDA graphs (EngineProfile.python_s), charged at each scheduling
    # point only (multi-step scheduling runs the rest of a window without it)
    python: EngineProfile | None = None

    @classmethod
    def of(cls, p: EngineProfile, acc: Accelerator, attention: AttentionShape | None) -> EngineHost | None:
        """``p``'s host rules on ``acc`` (its calibration's operator time on a CPU where
        ``footprint calibrate`` measured it), and its packed attention's prices there; None where
        the profile states neither."""
        h = p.host
        if not h and p.attention != "packed":
            return None
        op_s = host_operator_s(acc)
        key_s, pair_s = packed_prices(attention, acc) if p.attention == "packed" and attention else (0.0, 0.0)
        python = p if acc.kind == "gpu" and p.python_s(1, 1) else None
        return cls(h.get("step_ops", 0.0), h.get("sequence_ops", 0.0), h.get("request_ops", 0.0), op_s, pair_s,
                   key_s, python)

    def __call__(self, scheduled: int, admitted: int, queries: int, keys: int, own: int) -> float:
        ops = self.step_ops + self.sequence_ops * scheduled + self.request_ops * admitted
        python = self.python.python_s(scheduled, admitted) if self.python is not None else 0.0
        return ops * self.op_s + python + self.key_s * keys + self.pair_s * max(queries * keys - own, 0)

    def describe(self) -> str:
        """The rule in words, for the simulation's notes."""
        if self.python is not None:
            return f"{self.python.python_rule()} at each scheduling point (its Python, which the GPU waits for)"
        return (f"{self.step_ops:g} + {self.sequence_ops:g} per scheduled request + {self.request_ops:g} per "
                f"admitted one, x {self.op_s * 1e6:.1f} us per operator")


def tokens_per_step(k: int, a: float) -> float:
    """Expected tokens a speculative step emits: (1 - a^(k+1)) / (1 - a) (k + 1 at a = 1)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def _contexts(sent: list[Sent], fixed: tuple[int, int] | None) -> list[int]:
    if fixed is not None:  # the three traced lengths of fixed requests: prompt, its middle, its end
        p, o = fixed
        return sorted({p, p + max(o - 1, 0) // 2, p + o - 1})
    longest = max(s.prompt + s.output for s in sent)
    out, c = [], 128
    while c < longest:
        out.append(c)
        c *= 2
    return [*out, longest]


def simulate_serving(setup: Setup, a: Asked) -> dict[str, Any]:
    """The simulation's figures on this accelerator: the first rate's (or the closed loop's)
    run, with the sweep over every rate asked, cost and energy."""
    cache = setup.cache
    seqs = int(cache.knobs.get("max_num_seqs", 256))
    if setup.admission == "whole":  # as many requests as the cache holds whole (at the asked lengths)
        seqs = min(seqs, max(cache.blocks // -(-(a.prompt + a.output) // cache.block), 1))
    budget = int(cache.knobs.get("max_num_batched_tokens", cache.knobs.get("ubatch_size", 2048)))
    rates: list[float | None] = list(a.rates) if a.rates else [None]
    open_loop = a.rates is not None or timed(a.trace)
    if a.pools and not open_loop:
        raise FootprintError("--disaggregate serves requests as they come: give --request-rate (or a "
                             "--request-trace with send times)")
    n = a.num_prompts or (0 if a.trace else 1000 if open_loop else 10 * a.concurrency)  # 0: all a trace's rows
    blocks, notes = cache.blocks, list(setup.notes)
    streams = [stream(n, prompt=a.prompt, output=a.output, lengths=a.lengths, trace=a.trace, rate=rate, seed=a.seed,
                      most=a.most) for rate in rates]
    fixed = (a.prompt, a.output) if a.lengths == "fixed" and a.trace is None else None
    # one step cost for every rate (the same lengths at other times): its priced points are shared
    cost = StepCost(setup.decode_s, setup.prefill_per_token, _contexts(streams[0], fixed), max(2, min(seqs, 64)))
    engine = profile(cache.engine).at(setup.engine_version) if cache.engine else None  # the release's rules
    mixed_knob = engine.mixed_knob if engine else ""
    tricks = Tricks(prefix_hit=a.prefix_hit, scheduler_steps=max(int(cache.knobs.get("num_scheduler_steps", 1)), 1),
                    mixed=not mixed_knob or bool(cache.knobs.get(mixed_knob, 1)))
    if not tricks.mixed:
        notes.append(f"{cache.title} prefills waiting prompts first, in steps of their own ({mixed_knob} off): the "
                     "decodes wait")
    if tricks.scheduler_steps > 1:
        notes.append(f"multi-step scheduling: {tricks.scheduler_steps} decode steps between scheduling points; a "
                     "request that arrives meanwhile waits for them")
    if a.spec_k:
        blocks, tricks = _speculation(setup, cost, a, blocks, notes)
    if blocks < 1:
        what = "the speculative draft's weights leave" if a.spec_k else "the weights leave"
        raise FootprintError(f"on {setup.acc.id}, {what} no room for the cache")
    host = EngineHost.of(engine, setup.acc, a.attention) if engine else None
    if host is not None and engine is not None:
        tricks = replace(tricks, host=host, admission_lag=int(engine.host.get("admission_lag", 0)))
        cost.whole_step = True  # its prefill-only steps run the whole forward (the step's fixed time too)
        notes.append(f"{cache.title}'s own time per step: {host.describe()}"
                     + (f"; its packed attention {host.key_s * 1e9:.3g} ns per key read and {host.pair_s * 1e9:.3g} ns "
                        "per query-key pair beyond each request's own" if host.key_s or host.pair_s else ""))
    runs = []
    for rate, sent in zip(rates, streams, strict=True):
        conc = None if open_loop else a.concurrency
        if a.pools:
            o = _disaggregated(setup, cost, sent, a.pools, blocks, seqs, budget, tricks)
        else:
            o = run(cost, sent, concurrency=conc, kv_blocks=blocks, block=cache.block, max_num_seqs=seqs,
                    budget=budget, tricks=tricks)
        m = summary(o, sent, conc, a.slo_ttft, a.slo_tpot)
        m["request_rate"] = rate
        m.update(_cost(setup, o, m, a.pools))
        runs.append(m)
    out = runs[0]
    out["lengths"] = a.trace or a.lengths
    if len(runs) > 1:
        keep = ("request_rate", "requests_per_s", "output_tokens_per_s", "input_tokens_per_s", "ttft_s", "tpot_s",
                "itl_s", "e2e_s", "goodput_requests_per_s", "usd_per_m_output_tokens", "slo", "kv_peak_fraction",
                "preemptions", "requests")
        out["sweep"] = [{k: r[k] for k in keep if k in r} for r in runs]
    if a.prefix_hit:
        notes.append(f"prefix caching: {a.prefix_hit:.0%} of each prompt found in the cache (not prefilled, its "
                     "blocks shared)")
    if a.pools:
        notes.append(f"disaggregated: {a.pools[0]} prefill and {a.pools[1]} decode instances of {setup.gpus} GPU(s), "
                     "the cache moved over the GPUs' link")
    out["notes"] = notes
    return out


def _speculation(setup: Setup, cost: StepCost, a: Asked, blocks: int, notes: list[str]) -> tuple[int, Tricks]:
    """The cache blocks left beside the draft, and the tricks its steps are priced by."""
    k = a.spec_k or 0
    tps = tokens_per_step(k, a.acceptance)
    cache = setup.cache
    block_bytes = cache.capacity_bytes / cache.blocks if cache.blocks else 0.0
    if a.draft is not None:  # a draft model: its own weights and cache, its steps at the bytes they read
        d_weights, d_kv, name = a.draft[0] / setup.gpus, a.draft[1] / setup.gpus, a.draft[2]
        extra_weights = d_weights
        cache_share = d_kv / setup.kv_per_token_rank if setup.kv_per_token_rank else 0.0

        def draft_step(b: int, ctx: float) -> float:
            # a decode step is bound by the bytes it reads: the draft's, at the rate the model's step reaches
            ratio = (d_weights + b * ctx * d_kv) / (setup.weights_per_rank + b * ctx * setup.kv_per_token_rank)
            return k * cost.decode_s(b, ctx) * ratio + k * b * setup.prefill_per_token
        what = f"the draft model {name}"
    else:  # a one-layer head (EAGLE, MTP): 1/layers of the model's step, weights and cache
        layers = max(setup.layers, 1)
        extra_weights = setup.weights_per_rank / layers
        cache_share = 1 / layers

        def draft_step(b: int, ctx: float) -> float:
            return k * cost.decode_s(b, ctx) / layers + k * b * setup.prefill_per_token
        what = "a one-layer draft head"
    left = int((blocks - (extra_weights / block_bytes if block_bytes else 0)) / (1 + cache_share))
    notes.append(f"speculative decoding: {k} tokens proposed by {what}, each accepted with probability "
                 f"{a.acceptance:g}: {tps:.2f} tokens per step (Leviathan et al. 2023); its weights and cache "
                 f"leave {max(left, 0):,} of {blocks:,} blocks")

    return left, Tricks(prefix_hit=a.prefix_hit, tokens_per_step=tps, draft_s=draft_step, lookahead=k)


def _split(sent: list[Sent], parts: int) -> list[list[int]]:
    """Round-robin: the i-th request to instance i mod parts (indices into ``sent``)."""
    return [list(range(k, len(sent), parts)) for k in range(parts)]


def _disaggregated(setup: Setup, cost: StepCost, sent: list[Sent], pools: tuple[int, int], blocks: int,
                   seqs: int, budget: int, tricks: Tricks) -> Outcome:
    """Prefill pool, the cache over the link, decode pool: one outcome over ``sent``."""
    p, d = pools
    block = setup.cache.block
    first: dict[int, float] = {}
    merged = Outcome([], 0.0, kv_blocks=blocks)
    for part in _split(sent, p):
        mine = [Sent(sent[i].at, sent[i].prompt, 1) for i in part]
        o = run(cost, mine, concurrency=None, kv_blocks=blocks, block=block, max_num_seqs=seqs, budget=budget,
                tricks=Tricks(prefix_hit=tricks.prefix_hit))
        for j, _, f, _ in o.done:
            first[part[j]] = f
        merged.preempted += o.preempted
        merged.iterations += o.iterations
        merged.prefill_s += o.prefill_s
    link = setup.link_bytes_per_s

    def moved(s: Sent) -> float:
        return s.prompt * setup.kv_per_token_rank / link if link else 0.0

    ends: dict[int, float] = {}
    ready = [i for i in range(len(sent)) if i in first and sent[i].output > 1]  # one token: done at prefill
    for k in range(d):
        part = [i for n, i in enumerate(ready) if n % d == k]
        mine = [Sent(first[i] + moved(sent[i]), sent[i].prompt, sent[i].output) for i in part]
        o = run(cost, mine, concurrency=None, kv_blocks=blocks, block=block, max_num_seqs=seqs, budget=budget,
                tricks=Tricks(tokens_per_step=tricks.tokens_per_step, draft_s=tricks.draft_s,
                              lookahead=tricks.lookahead, arrive_prefilled=True))
        for j, _, _, e in o.done:
            ends[part[j]] = e
        merged.preempted += o.preempted
        merged.iterations += o.iterations
        merged.decode_s += o.decode_s
        merged.kv_peak = max(merged.kv_peak, o.kv_peak)
        if k == 0:
            merged.kv_over_time = o.kv_over_time
        for g, c in o.gaps.items():
            merged.gaps[g] = merged.gaps.get(g, 0) + c
    for i, s in enumerate(sent):
        if i in first and (i in ends or s.output <= 1):
            merged.done.append((i, s.at, first[i], ends.get(i, first[i])))
    merged.duration = max((e for *_, e in merged.done), default=0.0)
    return merged


def _cost(setup: Setup, o: Outcome, m: dict[str, Any], pools: tuple[int, int] | None) -> dict[str, Any]:
    """Dollars per million tokens and joules per token (module docstring)."""
    gpus = setup.gpus * (sum(pools) if pools else 1)
    tokens_in = m["input_tokens_per_s"] * m["duration_s"]
    tokens_out = m["output_tokens_per_s"] * m["duration_s"]
    busy = o.prefill_s + o.decode_s
    out: dict[str, Any] = {"gpus": gpus, "busy_s": busy}
    tdp = setup.acc.tdp_w
    if tdp and busy:
        prefill_gpus = setup.gpus * (pools[0] if pools else 1)
        decode_gpus = setup.gpus * (pools[1] if pools else 1)
        out["joules_per_input_token"] = tdp * prefill_gpus * o.prefill_s / tokens_in if tokens_in else None
        out["joules_per_output_token"] = tdp * decode_gpus * o.decode_s / tokens_out if tokens_out else None
        out["energy_note"] = f"an estimate: each GPU at its board power ({tdp:g} W) while it computes"
    price = hourly_price(setup.acc.id, setup.prices)
    if price is not None and m["duration_s"]:
        usd_s = price.usd_per_hour / 3600
        whole = usd_s * gpus * m["duration_s"]
        if pools:
            pre, dec = usd_s * setup.gpus * pools[0] * m["duration_s"], usd_s * setup.gpus * pools[1] * m["duration_s"]
        else:
            share = o.prefill_s / busy if busy else 0.0
            pre, dec = whole * share, whole * (1 - share)
        out["usd_per_gpu_hour"] = price.usd_per_hour
        out["price_source"] = f"{price.source}{', ' + price.date if price.date else ''}"
        out["price_from"] = f"{price.provider or price.source}{', ' + price.date if price.date else ''}"
        out["usd_per_m_input_tokens"] = pre / tokens_in * 1e6 if tokens_in else None
        out["usd_per_m_output_tokens"] = dec / tokens_out * 1e6 if tokens_out else None
        out["usd_per_m_tokens"] = whole / (tokens_in + tokens_out) * 1e6 if tokens_in + tokens_out else None
    return out


__all__ = ["Asked", "EngineHost", "Setup", "parse_rates", "simulate_serving", "tokens_per_step"]
