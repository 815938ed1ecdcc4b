"""Continuous batching as serving engines schedule it (vLLM's V1 scheduler, SGLang's), one
iteration at a time, for a stream of requests (:class:`Sent`: when each is sent, its prompt
and output tokens) sent either by a fixed number of clients (closed loop: each sends its next
request when the last one ends, the stream's times ignored) or at the stream's own times
(open loop: a Poisson rate, a trace's timestamps):

* every iteration has a token budget (max_num_batched_tokens): each running request in its
  decode takes one token of it, and what is left goes to prefilling waiting requests in
  chunks, first come first served (chunked prefill);
* a request is admitted while fewer than max_num_seqs run and the cache has free blocks for
  its prompt; its cache grows a block at a time as it decodes, and where no block is free
  the newest running request is preempted (its blocks freed, its work redone later, as
  vLLM's recompute preemption does);
* an iteration takes the time of a decode step of its decoding requests at their mean
  context plus its prefill tokens at the prefill's time per token: both priced from the
  traced steps (:mod:`.pricing`), a decode step at the batches and contexts it meets
  interpolated between a few priced points (:class:`StepCost`), so ten thousand requests
  simulate in seconds.

:class:`Tricks` adds what engines do beside: prefix caching (a fraction of each prompt found
in the cache: not prefilled, its blocks shared), speculative decoding (more than one token per
decode step, a draft's time on top) and a disaggregated decode pool's requests (arriving with
their cache and first token).
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KV_POINTS = 120  # the cache's use over time: at most this many (time, fraction) points


@dataclass
class StepCost:
    """An iteration's time: ``decode(b, L)`` priced exactly at batches 1 and ``ref_batch`` (and,
    above it, at the doublings of ``ref_batch`` around the batch) for a few context lengths and
    interpolated between them (a decode step's time is affine in the batch while its matrix
    products are bound by the weights' bytes: the weights once, each sequence's work and cache on
    top; past the batch where they turn bound by the matrix rate it grows faster, so a larger
    batch is priced from points around it, not extrapolated from the smaller ones), plus
    ``prefill_per_token`` seconds per prefilled token (``whole_step``: an iteration of prompt
    chunks alone at least a batch-1 decode step's time)."""

    decode: Callable[[int, int], float]
    prefill_per_token: float
    contexts: list[int]
    ref_batch: int
    # an iteration of prompt chunks alone still runs the whole step once (every operator launched, the
    # weights read): its first token at a batch-1 decode step's time, the rest at prefill_per_token
    whole_step: bool = False
    _memo: dict[tuple[int, int], float] = field(default_factory=dict)

    def _at(self, b: int, ctx: int) -> float:
        if (b, ctx) not in self._memo:
            self._memo[b, ctx] = self.decode(b, ctx)
        return self._memo[b, ctx]

    def decode_s(self, batch: int, context: float) -> float:
        if batch <= 0:
            return 0.0
        i = min(max(bisect.bisect_left(self.contexts, context), 1), len(self.contexts) - 1)
        lo, hi = self.contexts[i - 1], self.contexts[i]
        w = 0.0 if hi == lo else min(max((context - lo) / (hi - lo), 0.0), 1.0)

        lo_b, hi_b = 1, max(self.ref_batch, 2)
        while hi_b < batch:
            lo_b, hi_b = hi_b, 2 * hi_b

        def at(ctx: int) -> float:
            one, ref = self._at(lo_b, ctx), self._at(hi_b, ctx)
            return one + (ref - one) * (batch - lo_b) / (hi_b - lo_b)

        return at(lo) * (1 - w) + at(hi) * w

    def time_s(self, decoding: int, mean_context: float, prefill_tokens: int) -> float:
        if self.whole_step and not decoding and prefill_tokens:
            return self.decode_s(1, self.contexts[0]) + (prefill_tokens - 1) * self.prefill_per_token
        return self.decode_s(decoding, mean_context) + prefill_tokens * self.prefill_per_token


@dataclass(frozen=True)
class Sent:
    """One request of a stream: when it is sent (seconds from the start; a closed loop ignores
    it), its prompt tokens and the tokens it generates."""

    at: float
    prompt: int
    output: int


@dataclass(frozen=True)
class Tricks:
    """What an engine does beside plain continuous batching (each priced in the iteration):

    * ``prefix_hit``: the fraction of each prompt's tokens found in the cache (prefix
      caching): not prefilled, and their blocks shared with the requests that wrote them,
      so not charged again (the last prompt token is always computed, as vLLM does);
    * ``tokens_per_step``: tokens each decode step emits per request (speculative decoding's
      expected accepted tokens plus the target's own), and ``draft_s(batch, context)`` the
      time a step adds (the draft's steps and the target's verification of its tokens);
    * ``arrive_prefilled``: requests come with their prompt's cache and first token (a
      disaggregated decode pool): their blocks are taken at admission, nothing prefilled;
    * ``host``: what the engine adds to each iteration, from what it schedules: its requests,
      those admitted in it, its query tokens, the keys they read, and the query-key pairs of
      each request against its own keys (the traced step's attention); ``admission_lag``: a
      closed loop's next request joins that many steps later while others run (the client
      sends it only once the engine's next step is under way);
    * ``scheduler_steps``: decode steps run between two scheduling points (vLLM's multi-step
      scheduling, its V0 engine's ``--num-scheduler-steps``): once a step admits nothing, the
      next ``scheduler_steps - 1`` only decode, and a request that arrives meanwhile waits for
      the window to end (vllm/engine/llm_engine.py: the cached schedule is run again while
      ``_has_remaining_steps``; a prompt is one step, ``Scheduler._get_num_lookahead_slots``);
    * ``mixed``: prompt chunks run beside the decodes in one step (vLLM's chunked prefill,
      TensorRT-LLM's in-flight batching); otherwise the prompts that fit go first, and a step
      that prefills decodes nothing (vLLM's V0 scheduler without chunked prefill, SGLang
      without ``--enable-mixed-chunk``)."""

    prefix_hit: float = 0.0
    tokens_per_step: float = 1.0
    draft_s: Callable[[int, float], float] | None = None
    lookahead: int = 0  # cache slots a speculative step writes beyond the request's tokens
    arrive_prefilled: bool = False
    # the engine's own time per iteration beside the traced step (:class:`.serving_sim.EngineHost`):
    # host(scheduled requests, admitted requests, query tokens, keys read, own query-key pairs)
    host: Callable[[int, int, int, int, int], float] | None = None
    # closed loop: the steps a client's next request misses while the engine is busy (0: it joins the
    # step after its predecessor's last)
    admission_lag: int = 0
    scheduler_steps: int = 1
    mixed: bool = True


@dataclass(eq=False)  # each request is itself: two with the same progress are not the same request
class _Request:
    index: int
    arrival: float
    prompt: int
    output: int
    skip: int = 0  # prompt tokens found in the cache (prefix caching): neither prefilled nor charged
    prefilled: int = 0
    generated: float = 0.0
    first_token: float | None = None
    last: float = 0.0
    blocks: int = 0
    tick: int = 0  # the last iteration it decoded in
    after: int = -1  # admitted only in a later iteration than this while others run (admission_lag)


@dataclass
class Outcome:
    """What a run gives: per request (index in the stream, sent, first token, end), the time
    it took, and what the engine did."""

    done: list[tuple[int, float, float, float]]
    duration: float
    preempted: int = 0
    iterations: int = 0
    kv_peak: int = 0
    kv_blocks: int = 0
    kv_over_time: list[tuple[float, int]] = field(default_factory=list)
    gaps: dict[float, int] = field(default_factory=dict)  # inter-token gap -> how many
    prefill_s: float = 0.0  # the iterations' time spent prefilling (their prefill tokens' share)
    decode_s: float = 0.0  # and decoding (the rest)


def run(cost: StepCost, stream: list[Sent], *, concurrency: int | None, kv_blocks: int, block: int,
        max_num_seqs: int, budget: int, tricks: Tricks = Tricks()) -> Outcome:
    """Serve ``stream`` (closed loop from ``concurrency`` clients, else open loop at its
    times) on a cache of ``kv_blocks`` blocks of ``block`` tokens."""
    n = len(stream)
    now = 0.0
    waiting: deque[_Request] = deque()
    pending: deque[int] = deque()  # open loop: stream indices not yet sent, by time
    sent = 0
    running: list[_Request] = []
    free = kv_blocks
    out = Outcome([], 0.0, kv_blocks=kv_blocks)
    gaps = out.gaps
    tps = tricks.tokens_per_step
    ahead = tps + tricks.lookahead  # the cache a decode step writes beyond the request's tokens
    window = 0  # decode-only steps left before the next scheduling point (multi-step scheduling)

    def make(i: int, at: float) -> _Request:
        s = stream[i]
        r = _Request(i, at, s.prompt, s.output)
        r.skip = min(int(tricks.prefix_hit * s.prompt), s.prompt - 1)
        if tricks.arrive_prefilled:
            r.skip = 0
            r.prefilled, r.generated, r.first_token, r.last = s.prompt, 1.0, at, at
        else:
            r.prefilled = r.skip
        return r

    if concurrency is None:
        pending.extend(sorted(range(n), key=lambda i: stream[i].at))
    else:
        for i in range(min(concurrency, n)):
            waiting.append(make(i, 0.0))
        sent = len(waiting)

    def need(r: _Request, tokens: float) -> int:
        return -(-(int(tokens) - r.skip) // block) - r.blocks

    def preempt(victim: _Request) -> None:
        nonlocal free
        free += victim.blocks
        victim.blocks = 0
        if not tricks.arrive_prefilled:
            victim.prefilled, victim.generated, victim.first_token = victim.skip, 0.0, None
        waiting.appendleft(victim)
        out.preempted += 1

    def decodes(it: int) -> list[_Request]:
        """The requests that decode in step ``it``: each takes a token and perhaps a block; the
        newest are preempted where none is free."""
        nonlocal free
        decoding = [r for r in running if r.generated and r.prefilled == r.prompt]
        gone: set[_Request] | None = None  # preempted in this pass (requests are hashed as themselves)
        for r in decoding:
            if gone is not None and r in gone:  # preempted by an older request in this pass
                continue
            extra = -(-(int(r.prompt + r.generated + ahead) - r.skip) // block) - r.blocks
            if extra > 0:
                while extra > free and running and running[-1] is not r:
                    victim = running.pop()
                    preempt(victim)
                    gone = gone or set()
                    gone.add(victim)
                if extra > free:  # nothing left to preempt: this one waits
                    gone = gone or set()
                    gone.add(r)
                    continue
                free -= extra
                r.blocks += extra
            r.tick = it
        return [r for r in decoding if r not in gone] if gone else decoding

    def prefills(it: int, tokens: int, chunks: list[tuple[int, int]]) -> tuple[int, int]:
        """Chunked prefill in step ``it`` within ``tokens``: running requests still in their
        prompt, then new ones while they fit; (tokens prefilled, requests admitted)."""
        nonlocal free
        prefilled = admitted = 0
        for r in running:
            if r.prefilled >= r.prompt or tokens <= 0:
                continue
            take = min(r.prompt - r.prefilled, tokens)
            extra = need(r, r.prefilled + take)
            if extra > free:
                continue
            free -= max(extra, 0)
            r.blocks += max(extra, 0)
            r.prefilled += take
            tokens -= take
            prefilled += take
            chunks.append((take, r.prefilled))
        while waiting and (tokens > 0 or tricks.arrive_prefilled) and len(running) < max_num_seqs:
            r = waiting[0]
            if r.after >= it and running:  # its client has not sent it yet: the engine is busy
                break
            take = min(r.prompt - r.prefilled, tokens)
            extra = need(r, r.prefilled + take)
            if extra > free:
                break
            waiting.popleft()
            free -= max(extra, 0)
            r.blocks += max(extra, 0)
            r.prefilled += take
            tokens -= take
            prefilled += take
            admitted += 1
            running.append(r)
            if take:
                chunks.append((take, r.prefilled))
        return prefilled, admitted

    while len(out.done) < n:
        while pending and stream[pending[0]].at <= now:
            i = pending.popleft()
            waiting.append(make(i, stream[i].at))
        if not running and not waiting:
            if not pending:
                break
            now = stream[pending[0]].at
            continue
        out.iterations += 1
        it = out.iterations
        chunks: list[tuple[int, int]] = []  # (query tokens, keys read) of each prompt chunk in this step
        decoding: list[_Request] = []
        prefill_tokens = admitted = 0
        if tricks.mixed or window:  # the decodes first, prompt chunks beside them in what the budget leaves
            decoding = decodes(it)
            if not decoding:  # the window's batch has finished: the engine schedules again
                window = 0
            if not window:  # inside a window nothing is prefilled or admitted
                prefill_tokens, admitted = prefills(it, budget - len(decoding), chunks)
        else:  # prompts first, and a step that prefills decodes nothing
            prefill_tokens, admitted = prefills(it, budget, chunks)
            if not prefill_tokens:
                decoding = decodes(it)
        if not decoding and not prefill_tokens:
            out.iterations -= 1
            if admitted:
                continue
            if pending:  # the cache is full of requests that cannot move: wait for the next arrival
                now = max(now, stream[pending[0]].at)
                continue
            break  # nothing can move (the cache cannot hold one more token of any request)
        mean_ctx = sum([r.prompt + r.generated for r in decoding]) / len(decoding) if decoding else 0.0
        dt = cost.time_s(len(decoding), mean_ctx, prefill_tokens)
        if decoding and tricks.draft_s is not None:
            dt += tricks.draft_s(len(decoding), mean_ctx)
        if tricks.host is not None and not window:  # at a scheduling point (a multi-step window runs on without)
            keys = [int(r.prompt + r.generated) for r in decoding]
            reads = sum(keys) + sum(k for _, k in chunks)
            own = sum(keys) + sum(q * k for q, k in chunks)
            dt += tricks.host(len(decoding) + len(chunks), admitted, len(decoding) + prefill_tokens, reads, own)
        if window:
            window -= 1
        elif decoding and not prefill_tokens and not admitted:
            window = tricks.scheduler_steps - 1
        before = now
        now += dt
        out.prefill_s += prefill_tokens * cost.prefill_per_token
        out.decode_s += dt - prefill_tokens * cost.prefill_per_token
        used = kv_blocks - free
        out.kv_peak = max(out.kv_peak, used)
        out.kv_over_time.append((now, used))
        finished = []
        step = 0  # tokens whose gap is this iteration's (their last token came at the end of the one before)
        for r in running:
            if r.prefilled != r.prompt:
                continue
            if r.generated == 0:  # the prompt's last chunk: its first token
                r.generated, r.first_token, r.last = 1.0, now, now
            elif r.tick == it:
                r.generated += tps
                if r.last == before:
                    step += 1
                else:
                    gap = now - r.last
                    gaps[gap] = gaps.get(gap, 0) + 1
                r.last = now
            else:
                continue
            if r.generated >= r.output:
                finished.append(r)
        if step:
            gaps[dt] = gaps.get(dt, 0) + step
        if finished:
            running = [r for r in running if r.generated < r.output or r.prefilled != r.prompt]
        for r in finished:
            free += r.blocks
            out.done.append((r.index, r.arrival, r.first_token if r.first_token is not None else now, now))
            if concurrency is not None and sent < n:
                nxt = make(sent, now)
                nxt.after = it + tricks.admission_lag
                waiting.append(nxt)
                sent += 1
    out.duration = now
    return out


def simulate(cost: StepCost, *, prompt: int = 0, output: int = 0, concurrency: int | None = None,
             requests: int = 0, kv_blocks: int, block: int, max_num_seqs: int, budget: int,
             stream: list[Sent] | None = None, tricks: Tricks = Tricks(), slo_ttft: float | None = None,
             slo_tpot: float | None = None) -> dict[str, Any]:
    """Serve ``requests`` requests of ``prompt`` + ``output`` tokens from ``concurrency``
    clients (or ``stream``: closed loop with ``concurrency``, else open loop at its times) on
    a cache of ``kv_blocks`` blocks of ``block`` tokens; the figures an engine's benchmark
    prints (``vllm bench serve``): throughput, TTFT, TPOT, inter-token and end-to-end latency
    percentiles, goodput under the SLOs, preemptions, and the cache's use."""
    if stream is None:
        stream = [Sent(0.0, prompt, output)] * requests
    o = run(cost, stream, concurrency=concurrency, kv_blocks=kv_blocks, block=block, max_num_seqs=max_num_seqs,
            budget=budget, tricks=tricks)
    return summary(o, stream, concurrency, slo_ttft, slo_tpot)


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs``: the element at rank floor(q x n) of the sorted list."""
    s = sorted(xs)
    return s[min(int(q * len(s)), len(s) - 1)] if s else 0.0


def _weighted_pct(counts: dict[float, int], q: float) -> float:
    total = sum(counts.values())
    rank = min(int(q * total), total - 1)
    seen = 0
    for gap in sorted(counts):
        seen += counts[gap]
        if seen > rank:
            return gap
    return 0.0


def _spread(xs: list[float]) -> dict[str, float]:
    return {"p50": pct(xs, 0.5), "p90": pct(xs, 0.9), "p99": pct(xs, 0.99),
            "mean": statistics.fmean(xs) if xs else 0.0}


def summary(o: Outcome, stream: list[Sent], concurrency: int | None, slo_ttft: float | None = None,
            slo_tpot: float | None = None) -> dict[str, Any]:
    """The figures of a run: tokens/s in and out, latency percentiles, goodput (requests per
    second meeting both SLOs given), the cache's use at its peak and over time."""
    end = o.duration
    ttft = [first - at for _, at, first, _ in o.done]
    tpot = [(t - first) / max(stream[i].output - 1, 1) for i, _, first, t in o.done]
    e2e = [t - at for _, at, _, t in o.done]
    tokens_in = sum(stream[i].prompt for i, *_ in o.done)
    tokens_out = sum(stream[i].output for i, *_ in o.done)
    out: dict[str, Any] = {"requests": len(o.done), "concurrency": concurrency, "duration_s": end,
                           "output_tokens_per_s": tokens_out / end if end else 0.0,
                           "input_tokens_per_s": tokens_in / end if end else 0.0,
                           "requests_per_s": len(o.done) / end if end else 0.0,
                           "preemptions": o.preempted, "iterations": o.iterations,
                           "kv_peak_fraction": o.kv_peak / o.kv_blocks if o.kv_blocks else 0.0}
    for name, xs in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e)):
        out[name] = _spread(xs)
    total = sum(o.gaps.values())
    out["itl_s"] = {"p50": _weighted_pct(o.gaps, 0.5), "p90": _weighted_pct(o.gaps, 0.9),
                    "p99": _weighted_pct(o.gaps, 0.99),
                    "mean": sum(g * c for g, c in o.gaps.items()) / total if total else 0.0}
    if slo_ttft is not None or slo_tpot is not None:
        met = sum(1 for a, b in zip(ttft, tpot, strict=True)
                  if (slo_ttft is None or a <= slo_ttft) and (slo_tpot is None or b <= slo_tpot))
        out["slo"] = {"ttft_s": slo_ttft, "tpot_s": slo_tpot, "met": met,
                      "fraction": met / len(o.done) if o.done else 0.0}
        out["goodput_requests_per_s"] = met / end if end else 0.0
    out["kv_over_time"] = _thin(o.kv_over_time, end, o.kv_blocks)
    return out


def _thin(points: list[tuple[float, int]], end: float, blocks: int) -> list[list[float]]:
    """(time, fraction of the cache in use) at most :data:`KV_POINTS` times: the highest use
    within each equal slice of the run."""
    if not points or not blocks or end <= 0:
        return []
    slices: dict[int, float] = {}
    for t, used in points:
        k = min(int(t / end * KV_POINTS), KV_POINTS - 1)
        slices[k] = max(slices.get(k, 0.0), used / blocks)
    return [[round((k + 1) * end / KV_POINTS, 6), round(f, 6)] for k, f in sorted(slices.items())]
