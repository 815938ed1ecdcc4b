"""What a language model needs to serve, on every accelerator: memory at a batch and context,
the largest batch and the longest context that fit, time to first token, time per output
token and tokens per second. Everything is read from one :class:`~.serving.ServingTrace`
(a prefill and two decode steps traced at batch 1) and priced with the roofline.

Scaling from the traced batch of 1: every FLOP of a prefill or a decode step belongs to one
sequence, and so does every byte except the weights an operator reads (the trace knows which
parameters each operator reads), so a step at batch B costs B x the per-sequence work plus
one read of the weights. Mixture-of-experts weights are read for the experts the step's
tokens reach: the expected number of distinct experts under uniform routing (a documented
assumption: real routers are not uniform, which lowers the count). The scaling lives in :mod:`.steps`.

Defaults that stand for serving engines, where ``--engine`` names none (an engine's profile,
hardware/engines/NAME.toml, states its own under [speed]; ``footprint calibrate``'s figures
replace both on the local device, where eager PyTorch is what runs):

* decode reads weights and cache at 70% of the datasheet bandwidth: gpt-fast measures
  1,397 GB/s of 2,039 (68.5%) for Llama-2-7B bf16 on an A100-80GB
  (https://github.com/pytorch-labs/gpt-fast), LMDeploy's 100 tokens/s for Llama-2-7B fp16 on
  an A100 is 66%, llama.cpp's Q8_0 on an RTX 4090 70%;
* prefill's matrix work at 60% of the dense peak: TensorRT-LLM's first-token latencies on an
  A100 give 60-67% (https://nvidia.github.io/TensorRT-LLM/performance/perf-overview.html);
* 0.5 us per traced operator on GPUs: engines replay a decode step as a CUDA graph of fused
  kernels (about one for every five traced operators, a few microseconds each).

Tensor parallelism (``tp``): each rank holds 1/tp of the weights and of the key/value heads
(a latent cache is replicated), does 1/tp of the work, and all-reduces the hidden states
twice per layer (after attention and after the MLP): a ring all-reduce moves
2 (tp - 1) / tp x the bytes over the link, plus 10 us per collective.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...analysis.memory import replay
from ...hardware.db import Accelerator
from ...hardware.engines import profile
from ...search import largest_true
from ...trace.records import Trace
from ..kernels.roofline import ceilings, estimate_latency
from ..layouts.comm import LINK_EFFICIENCY, Link, all_reduce_s, link_of, nccl_link
from ..memory import CUDA_OVERHEADS
from .engines import engine_cache
from .quantization import Scheme
from .result import EngineCache, LlmResult, LlmRow
from .serving_sim import Asked, Setup, simulate_serving
from .steps import Grouped, active_params, fused, weight_bytes
from .trace import ServingTrace

LLM_EFFICIENCY = {"matrix": 0.6, "vector": 0.5, "memory": 0.7}
ENGINE_OVERHEAD_S = {"gpu": 0.5e-6, "soc": 2e-6, "cpu": 5e-6}
PCIE4_GBS = 32.0  # PCIe 4.0 x16, one direction: the link assumed where the database has none


@dataclass
class Priced:
    """What is priced: the batch, prompt and output lengths, the storage schemes resolved, the
    set-up (made from the :class:`~torch_footprint.settings.Serving` record and the layout)."""

    batch: int = 1
    prompt: int = 1024
    output: int = 256
    weights: Scheme | None = None
    weights_given: bool = False  # the scheme given (--quant: an engine's --dtype), not read off the checkpoint
    kv_bytes: int | None = None  # bytes per cached element (None: the traced dtype's)
    kv_name: str | None = None
    gpus: int = 1
    tp: int = 1
    engine: str | None = None
    chunk: int | None = None  # chunked prefill: tokens per chunk
    knobs: dict[str, float] = field(default_factory=dict)  # the engine's knobs given (the rest: its defaults)
    max_model_len: int | None = None  # the engine's longest request (None: the model's maximum)
    engine_version: str | None = None  # the engine release whose sizing rule applies (None: the newest)
    simulate: tuple[int, int] | None = None  # continuous batching: (clients, requests)
    sim: Asked | None = None  # the simulation asked in full (requests, rates, features), beside ``simulate``
    prices: tuple[str, ...] = ()  # GPU-hour prices given (ID=USD/H)

    @property
    def context(self) -> int:
        return self.prompt + self.output


# ------------------------------------------------------------------------------ memory

@dataclass
class _Memory:
    """Per-rank bytes as functions of batch and context."""

    weights: int
    overhead: int
    act_per_token: int  # prefill transient per prompt token
    kv_elem_ratio: float
    st: ServingTrace
    tp: int
    chunk: int | None
    budget: int | None = None  # an engine's tokens per step (chunked prefill under it)

    def kv(self, tokens: int, batch: int = 1) -> int:
        total = 0
        for layer in self.st.layers:
            share = 1 if layer.kind == "latent" else self.tp
            total += layer.bytes_at(tokens) // share
        return int(batch * total * self.kv_elem_ratio)

    def activation(self, prompt: int, batch: int) -> int:
        """The prefill's transient bytes: every prompt token at once, or a chunk of each
        (``chunk``), or at most an engine's token budget per step (``budget``)."""
        tokens = batch * (prompt if self.chunk is None else min(prompt, self.chunk))
        if self.budget is not None:
            tokens = min(tokens, self.budget)
        return tokens * self.act_per_token

    def peak(self, batch: int, prompt: int, context: int) -> tuple[int, int]:
        """(KV at the end, prefill transient) such that weights + overhead + max(...) is the peak."""
        return self.kv(context, batch), self.activation(prompt, batch)

    def total(self, batch: int, prompt: int, context: int) -> int:
        kv_end = self.kv(context, batch)
        during_prefill = self.kv(prompt, batch) + self.activation(prompt, batch)
        return self.weights + self.overhead + max(kv_end, during_prefill)


def kv_per_rank(st: ServingTrace, tokens: int, tp: int = 1, kv_bytes: int | None = None) -> int:
    """The cache bytes of one sequence of ``tokens`` tokens on one of ``tp`` tensor-parallel
    ranks (heads split; a latent cache whole on every rank), stored at ``kv_bytes`` per element."""
    elem = 4 if st.dtype == "float32" else 2
    return _Memory(0, 0, 0, (kv_bytes / elem) if kv_bytes else 1.0, st, tp, None).kv(tokens)


def _activation_per_token(st: ServingTrace) -> int:
    """The prefill's transient bytes per prompt token: the traced peak above the weights,
    buffers and inputs, less the cache it built (which stays)."""
    peak = replay(st.prefill)
    cache = st.kv_bytes(st.prompt, st.batch)
    return max(peak.peak_bytes - peak.baseline_bytes - cache, 0) // (st.batch * st.prompt)


# ------------------------------------------------------------------------------ the answer

def serve(st: ServingTrace, serving: Priced, accelerators: list[Accelerator], *, max_context: int | None,
          efficiency: dict[str, float] | None = None) -> LlmResult:
    """Price ``st`` for ``serving`` on each accelerator (see the module docstring)."""
    s = serving
    tp = s.tp
    traced = [p.nbytes for p in st.prefill.params]
    priced = weight_bytes(st, s.weights)
    buffers = sum(b.nbytes for b in st.prefill.buffers)
    total_weights = sum(priced) + buffers
    elem = 4 if st.dtype == "float32" else 2
    kv_ratio = (s.kv_bytes / elem) if s.kv_bytes else 1.0
    act = _activation_per_token(st)
    active, routed = active_params(st)
    notes = list(st.notes)
    # the engine's achieved rates and own time per step (hardware/engines/NAME.toml), at the release asked
    speed = profile(s.engine).at(s.engine_version) if s.engine else None

    def reached(tokens: int) -> dict[int, float]:
        """The share of each expert's weights a step of ``tokens`` tokens reads (none: dense)."""
        return {} if st.experts is None else st.experts.fractions(tokens)

    if st.experts is not None:
        e = st.experts
        notes.append(f"mixture of experts: {e.top_k} of {e.count} experts per token; a decode step at batch "
                     f"{s.batch} reads {e.touched(s.batch):.2f} experts per layer on average (uniform routing "
                     "assumed), the prefill "
                     f"{e.touched(s.batch * s.prompt):.2f}")
    per_rank_weights = total_weights // tp
    hidden = st.hidden_size or 0
    n_layers = len(st.layers)
    limit = max_context
    rows: list[LlmRow] = []
    prefill_flops = sum(e.flops for e in st.prefill.events) * s.batch
    mid = s.prompt + max(s.output - 1, 0) // 2
    lengths = sorted({s.prompt, mid, s.context - 1})
    # a named engine runs its element-wise operators as fused kernels (steps.fused), on datasheet rows
    fuse = speed is not None and speed.fused_elementwise and not any(a.calibrated for a in accelerators)
    prefill = fused(st.prefill) if fuse else st.prefill
    pre_g = Grouped.at(prefill, s.batch, traced, priced, reached(s.batch * s.prompt), tp)
    # datasheet rows are priced as engines serve; a calibrated (local) device as eager PyTorch runs
    # an engine reads a quantized cache at its own bytes; eager PyTorch (a calibrated device) as traced

    def decode_trace(length: int, engine: bool) -> Trace:
        t = st.decode_at(length, engine, kv_ratio if engine else 1.0)
        return fused(t) if engine and speed is not None and speed.fused_elementwise else t

    traces_at = {engine: {L: decode_trace(L, engine) for L in lengths}
                 for engine in {not a.calibrated for a in accelerators}}
    dec_gs = {engine: {L: Grouped.at(t, s.batch, traced, priced, reached(s.batch), tp)
                       for L, t in ts.items()} for engine, ts in traces_at.items()}
    at_batch: dict[tuple[bool, int], Grouped] = {}
    by_ctx: dict[tuple[bool, int], Trace] = {}
    prefill_at: dict[int, Grouped] = {s.batch: pre_g}

    def decode_at_batch(b: int, engine: bool) -> Grouped:
        if (engine, b) not in at_batch:
            at_batch[engine, b] = Grouped.at(traces_at[engine][mid], b, traced, priced, reached(b), tp)
        return at_batch[engine, b]

    def prefill_at_batch(b: int) -> Grouped:
        if b not in prefill_at:
            prefill_at[b] = Grouped.at(prefill, b, traced, priced, reached(b * s.prompt), tp)
        return prefill_at[b]

    for acc in accelerators:
        row_notes: list[str] = []
        overhead = sum(CUDA_OVERHEADS.values()) if acc.kind == "gpu" else 0
        mem = _Memory(per_rank_weights, overhead, act, kv_ratio, st, tp, s.chunk, _budget(s, acc.usable_bytes, acc.id))
        kv_end, act_now = mem.peak(s.batch, s.prompt, s.context)
        total = mem.total(s.batch, s.prompt, s.context)
        cap = acc.usable_bytes  # what CUDA reports, where known (hardware/db.py)
        fits = total <= cap

        def fits_batch(b: int, mem: _Memory = mem, cap: int = cap) -> bool:
            return mem.total(b, s.prompt, s.context) <= cap

        def fits_context(c: int, mem: _Memory = mem, cap: int = cap) -> bool:
            return mem.total(s.batch, c, c) <= cap

        max_batch = largest_true(fits_batch, limit=1 << 20)
        max_ctx = largest_true(fits_context, limit=limit or (1 << 24))
        vllm = _engine(mem, cap, s, st.max_context, "NVLink" in acc.link, acc.id) \
            if s.engine or s.simulate or s.sim else None
        if vllm is not None and s.engine:  # the engine admits what its cache blocks and max_num_seqs allow
            held = vllm.blocks // -(-s.context // vllm.block)
            seqs = vllm.knobs.get("max_num_seqs")
            max_batch = min(max_batch, held, int(seqs) if seqs else held)
        compute = None
        if s.weights is not None and s.weights.compute:
            fallback = s.weights.fallback
            if acc.peak(s.weights.compute) is not None:
                compute = s.weights.compute
            elif fallback and acc.peak(fallback) is not None:
                compute = fallback
                row_notes.append(f"no {s.weights.compute} rate listed: matrix work at the {fallback} rate")
            else:
                row_notes.append(f"no {s.weights.compute} units: matrix work at the "
                                 f"{'bf16' if acc.peak('bf16') else 'fp16' if acc.peak('fp16') else 'fp32'} rate")
        elif speed is not None and not s.weights_given and (
                loads := speed.loads_in(st.dtype, getattr(st.config, "model_type", ""), acc)):
            if loads == "fp32":  # llm's own rows are traced again in fp32 (serve_model); a fleet's say so
                row_notes.append(f"no bf16 units: {speed.title} loads {st.config.model_type} in fp32 here (fp16 "
                                 "is unstable for it), twice the weights and cache shown")
            else:
                compute = loads
                row_notes.append(f"no bf16 units: {speed.title} loads the bf16 checkpoint in {compute} (the same "
                                 f"bytes), matrix work at the {compute} rate")
        on_gpu = speed is not None and acc.kind == "gpu"
        eff = dict(LLM_EFFICIENCY, **(speed.efficiency() if speed and on_gpu else {}), **(efficiency or {}))
        stated = speed.overhead_s() if speed and on_gpu else None
        overhead_s = None if acc.calibrated else stated if stated is not None else ENGINE_OVERHEAD_S[acc.kind]

        def time_of(g: Grouped, acc: Accelerator = acc, compute: str | None = compute,
                    overhead_s: float | None = overhead_s) -> float:
            return g.time_s(estimate_latency(g.trace, acc, efficiency=eff, overhead_s=overhead_s,
                                             compute_dtype=compute))

        link = link_of(acc)
        if tp > 1 and link is None:
            link = nccl_link(PCIE4_GBS * 1e9 * LINK_EFFICIENCY, "PCIe 4.0 x16", "PCIe 4.0 x16, assumed")
            row_notes.append(f"no interconnect figure: PCIe 4.0 x16 ({PCIE4_GBS:g} GB/s) assumed")

        def tp_comm(tokens: int, link: Link | None = link) -> float:
            """Two all-reduces per layer of ``tokens`` tokens' hidden states (Megatron-LM)."""
            return 0.0 if link is None else 2 * n_layers * all_reduce_s(tokens * hidden * elem, tp, link)

        steps = int((vllm.knobs if vllm is not None else {}).get("num_scheduler_steps", 1) or 1)

        def python(b: int, prefill: bool = False, on_gpu: bool = on_gpu, steps: int = steps) -> float:
            """The engine's own Python in a step of ``b`` requests (a prefill admits them), which its GPU
            waits for: once every ``steps`` decode steps under multi-step scheduling."""
            if not on_gpu or speed is None:
                return 0.0
            return speed.python_s(b, b) if prefill else speed.python_s(b) / steps

        if python(1) and speed is not None:
            row_notes.append(f"{speed.title} {speed.version}'s own Python per step, which the GPU waits for: "
                             f"{speed.python_rule()}" + (f", once every {steps} decode steps" if steps > 1 else ""))
        comm_prefill = tp_comm(s.batch * s.prompt)
        comm_decode = tp_comm(s.batch)
        ttft = time_of(pre_g) + comm_prefill + python(s.batch, prefill=True)
        engine = not acc.calibrated
        dec_g = dec_gs[engine]
        tpot = {L: time_of(g) + comm_decode + python(s.batch) for L, g in dec_g.items()}
        tpot_mean = tpot[mid]
        mb = max(max_batch, 1)

        def output_rate(b: int, engine: bool = engine, time_of: Any = time_of, tp_comm: Any = tp_comm,
                        python: Any = python) -> float:
            """Output tokens per second of ``b`` requests served whole: their prefill, then
            ``output`` decode steps (each at the mean step's time)."""
            whole = (time_of(prefill_at_batch(b)) + tp_comm(b * s.prompt) + python(b, prefill=True)
                     + s.output * (time_of(decode_at_batch(b, engine)) + tp_comm(b) + python(b)))
            return b * s.output / whole if whole else 0.0
        key = compute or _rate(st.dtype)
        # against the highest rate the prefill was priced at, where that is above the datasheet's
        # (a calibrated CPU's bf16 rate over its theoretical fp32 peak): never above 100%
        rates = ceilings(acc, eff, overhead_s)
        peak = max(acc.peak(key) or acc.peak("fp32") or 0.0, rates.highest(key), rates.vector)
        mfu = prefill_flops / tp / ttft / peak if ttft and peak else 0.0
        bandwidth = max(acc.bandwidth or 0.0, rates.highest_bandwidth())
        mbu = dec_g[mid].bytes_read / tpot_mean / bandwidth if tpot_mean and bandwidth else 0.0
        simulated = None
        if (s.simulate or s.sim) and vllm is not None:
            def decode_s(b: int, ctx: int, engine: bool = engine, time_of: Any = time_of,
                         tp_comm: Any = tp_comm) -> float:
                if (engine, ctx) not in by_ctx:
                    by_ctx[engine, ctx] = traces_at[engine].get(ctx) or decode_trace(ctx, engine)
                return time_of(Grouped.at(by_ctx[engine, ctx], b, traced, priced, reached(b), tp)) + tp_comm(b)

            # a prompt token's cost in an iteration: its own work, the weights being read once per
            # iteration by the whole step (the marginal cost between one prompt and a budget of them)
            budget = int(vllm.knobs.get("max_num_batched_tokens", vllm.knobs.get("ubatch_size", 2048)))
            k = max(2, budget // s.prompt)
            one = time_of(prefill_at_batch(1)) + tp_comm(s.prompt)
            per_token = (time_of(prefill_at_batch(k)) + tp_comm(k * s.prompt) - one) / ((k - 1) * s.prompt)
            link_bps = link.bandwidth if link else PCIE4_GBS * 1e9 * LINK_EFFICIENCY
            setup = Setup(decode_s, per_token, vllm, n_layers, per_rank_weights, mem.kv(1024) / 1024, link_bps,
                          s.gpus, acc, s.prices, admission=speed.admission if speed is not None else "prompt",
                          engine_version=s.engine_version)
            simulated = simulate_serving(setup, s.sim or Asked(s.prompt, s.output, *s.simulate))  # type: ignore[misc]
        contexts = _doubling(256, limit or (1 << 20))
        by_context = [(c, mem.total(s.batch, min(s.prompt, c), c)) for c in contexts]
        batches = _doubling(1, max_batch) if max_batch else []
        by_batch = [(b, output_rate(b)) for b in batches]
        rows.append(LlmRow(acc, per_rank_weights, kv_end, act_now, overhead, fits, max_batch if fits_batch(1) else 0,
                           max_ctx, ttft, tpot_mean, tpot[s.prompt], tpot[s.context - 1],
                           output_rate(mb) if max_batch else 0.0, mfu, mbu, comm_decode, vllm, row_notes,
                           by_context, by_batch, needed_bytes=total, simulation=simulated))
    if s.weights is not None:
        notes.append(f"weights in {s.weights.label}: {total_weights / 2**30:.2f} GiB ({s.weights.source})")
    return LlmResult(
        model=st.name, serving=s, params=st.params, active_params=active, expert_params=routed,
        experts=(st.experts.count, st.experts.top_k) if st.experts else None, weights_bytes=total_weights,
        weights_scheme=s.weights.name if s.weights else st.dtype, kv_scheme=s.kv_name or st.dtype,
        kv_bytes_per_token=int(st.kv_bytes_per_token * kv_ratio),
        layers=[la.to_dict() for la in st.layers], prefill_flops=prefill_flops,
        decode_flops=sum(e.flops for e in st.decode_at(s.prompt).events) * s.batch, rows=rows, notes=notes)


def _doubling(first: int, last: int) -> list[int]:
    """first, 2 x first, 4 x first ... below ``last``, and ``last``."""
    out = []
    n = first
    while n < last:
        out.append(n)
        n *= 2
    return [*out, last] if last >= first else out


def _rate(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, "fp32")


def _budget(s: Priced, total: int, device: str = "") -> int | None:
    """The engine's tokens per step (its chunked prefill's budget) on a device of ``total``
    bytes: the knob given, else the engine's default; None without an engine."""
    if not s.engine:
        return None
    p = profile(s.engine).at(s.engine_version)
    return int(p.knob(p.profile_tokens_knob, s.knobs.get(p.profile_tokens_knob), s.tp, total, device)) \
        if p.profile_tokens_knob else None


def _engine(mem: _Memory, cap: int, s: Priced, model_max: int | None, nvlink: bool, device: str) -> EngineCache:
    """The engine's cache sizing on this accelerator (:mod:`.engines`)."""
    return engine_cache(profile(s.engine or "vllm").at(s.engine_version), s.knobs, mem, cap, s.tp,
                        s.max_model_len or model_max or s.context, s.context, nvlink, device)


__all__ = ["EngineCache", "LlmResult", "LlmRow", "Priced", "active_params", "kv_per_rank", "serve", "weight_bytes"]
