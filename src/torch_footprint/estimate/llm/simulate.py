"""Continuous batching as serving engines schedule it (vLLM's V1 scheduler, SGLang's), one
iteration at a time, for requests of fixed lengths sent by a fixed number of clients (each
sends its next request when the last one ends):

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
  interpolated between a few priced points (:class:`StepCost`), so thousands of requests
  simulate in well under a second.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepCost:
    """An iteration's time: ``decode(b, L)`` priced exactly at batches 1 and ``ref_batch`` for
    a few context lengths and interpolated between them (a decode step's time is affine in
    the batch at a context: the weights once, each sequence's work and cache on top), plus
    ``prefill_per_token`` seconds per prefilled token."""

    decode: Callable[[int, int], float]
    prefill_per_token: float
    contexts: list[int]
    ref_batch: int
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

        def at(ctx: int) -> float:
            one, ref = self._at(1, ctx), self._at(self.ref_batch, ctx)
            return one + (ref - one) * (batch - 1) / max(self.ref_batch - 1, 1)

        return at(lo) * (1 - w) + at(hi) * w

    def time_s(self, decoding: int, mean_context: float, prefill_tokens: int) -> float:
        return self.decode_s(decoding, mean_context) + prefill_tokens * self.prefill_per_token


@dataclass(eq=False)  # each request is itself: two with the same progress are not the same request
class _Request:
    arrival: float
    prefilled: int = 0
    generated: int = 0
    first_token: float | None = None
    blocks: int = 0


def simulate(cost: StepCost, *, prompt: int, output: int, concurrency: int, requests: int, kv_blocks: int,
             block: int, max_num_seqs: int, budget: int) -> dict[str, Any]:
    """Serve ``requests`` requests of ``prompt`` + ``output`` tokens from ``concurrency``
    clients on a cache of ``kv_blocks`` blocks of ``block`` tokens; the figures an engine's
    benchmark prints (``vllm bench serve``): throughput, TTFT, TPOT and end-to-end latency
    percentiles, preemptions, and the cache's use."""
    now = 0.0
    waiting: deque[_Request] = deque(_Request(0.0) for _ in range(min(concurrency, requests)))
    sent = len(waiting)
    running: list[_Request] = []
    free = kv_blocks
    done: list[tuple[_Request, float]] = []
    preempted = iterations = 0
    kv_peak = 0

    def need(r: _Request, tokens: int) -> int:
        return -(-tokens // block) - r.blocks

    while len(done) < requests:
        tokens = budget
        decoding = [r for r in running if r.prefilled == prompt]
        # each decoding request takes a token and perhaps a block; preempt the newest where none is free
        active = set(decoding)  # requests are hashed as themselves (eq=False)
        for r in list(decoding):
            if r not in active:  # preempted by an older request in this pass
                continue
            extra = need(r, prompt + r.generated + 1)
            while extra > free and running and running[-1] is not r:
                victim = running.pop()
                free += victim.blocks
                victim.blocks = victim.prefilled = victim.generated = 0
                victim.first_token = None
                waiting.appendleft(victim)
                preempted += 1
                if victim in active:
                    active.discard(victim)
            if extra > free:  # nothing left to preempt: this one waits
                active.discard(r)
                continue
            free -= max(extra, 0)
            r.blocks += max(extra, 0)
        decoding = [r for r in decoding if r in active]
        tokens -= len(decoding)
        prefill_tokens = 0
        # chunked prefill: running requests still in their prompt, then new ones while they fit
        for r in [r for r in running if r.prefilled < prompt]:
            take = min(prompt - r.prefilled, tokens)
            extra = need(r, r.prefilled + take)
            if take <= 0 or extra > free:
                continue
            free -= max(extra, 0)
            r.blocks += max(extra, 0)
            r.prefilled += take
            tokens -= take
            prefill_tokens += take
        while waiting and tokens > 0 and len(running) < max_num_seqs:
            r = waiting[0]
            take = min(prompt - r.prefilled, tokens)
            extra = need(r, r.prefilled + take)
            if extra > free:
                break
            waiting.popleft()
            free -= max(extra, 0)
            r.blocks += max(extra, 0)
            r.prefilled += take
            tokens -= take
            prefill_tokens += take
            running.append(r)
        if not decoding and not prefill_tokens:
            break  # nothing can move (the cache cannot hold one more token of any request)
        mean_ctx = statistics.fmean(prompt + r.generated for r in decoding) if decoding else 0.0
        now += cost.time_s(len(decoding), mean_ctx, prefill_tokens)
        iterations += 1
        kv_peak = max(kv_peak, kv_blocks - free)
        finished = []
        for r in running:
            if r.prefilled == prompt and (r in active or r.generated == 0):
                r.generated += 1
                if r.first_token is None:
                    r.first_token = now
                if r.generated >= output:
                    finished.append(r)
        for r in finished:
            running.remove(r)
            free += r.blocks
            done.append((r, now))
            if sent < requests:
                waiting.append(_Request(now))
                sent += 1
    return _summary(done, now, prompt, output, concurrency, preempted, iterations, kv_peak, kv_blocks)


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(int(q * len(s)), len(s) - 1)] if s else 0.0


def _summary(done: list[tuple[_Request, float]], end: float, prompt: int, output: int, concurrency: int,
             preempted: int, iterations: int, kv_peak: int, kv_blocks: int) -> dict[str, Any]:
    ttft = [(r.first_token or end) - r.arrival for r, _ in done]
    tpot = [(t - (r.first_token or t)) / max(output - 1, 1) for r, t in done]
    e2e = [t - r.arrival for r, t in done]
    out: dict[str, Any] = {"requests": len(done), "concurrency": concurrency, "duration_s": end,
                           "output_tokens_per_s": len(done) * output / end if end else 0.0,
                           "input_tokens_per_s": len(done) * prompt / end if end else 0.0,
                           "preemptions": preempted, "iterations": iterations,
                           "kv_peak_fraction": kv_peak / kv_blocks if kv_blocks else 0.0}
    for name, xs in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e)):
        out[name] = {"p50": _pct(xs, 0.5), "p90": _pct(xs, 0.9), "p99": _pct(xs, 0.99),
                     "mean": statistics.fmean(xs) if xs else 0.0}
    return out
