"""The memory replay's pass over a trace as array operations (:func:`.memory.replay`): the same
live bytes at every operator and moment, the same peak (the first of equal highs), the same
storages alive there and the same sizes, worked out with cumulative sums over the events
instead of a Python loop over them. A planner prices one trace under many shardings, each a
replay of tens of thousands of events; the loop stays for what this does not cover (a storage
id allocated twice, or resized before it exists)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..trace.records import Trace

NEVER = 2**62
_KEPT: dict[int, Any] = {}


@dataclass
class Swept:
    """What the loop leaves behind (the names of :func:`.memory.replay`'s variables)."""

    baseline: int
    peak: int
    peak_at: int
    peak_alive: set[int]
    peak_scratch: int
    peak_held: dict[str, int]
    peak_spike: int
    peak_tick: int
    size: dict[int, int]
    born: dict[int, int]
    resized: dict[int, tuple[int, int]]
    timeline: list[tuple[int, int]]
    highs: list[int]


def _static(trace: Trace) -> tuple[torch.Tensor, ...] | None:
    """The trace's allocations, frees and scratch as tensors, once per trace (None: a storage id
    allocated twice, or both before the run and in it)."""
    key = id(trace)
    if key not in _KEPT:
        weakref.finalize(trace, _KEPT.pop, key, None)
        a_ev, a_uid, a_nb = [], [], []
        for i, e in enumerate(trace.events):
            for uid, nbytes in e.allocs:
                a_ev.append(i)
                a_uid.append(uid)
                a_nb.append(nbytes)
        pre = [uid for uid, *_ in trace.preexisting]
        if len(set(a_uid)) != len(a_uid) or set(pre) & set(a_uid) or len(set(pre)) != len(pre):
            _KEPT[key] = None
        else:
            ids = [*a_uid, *pre, *(f.storage for f in trace.frees), 0]
            _KEPT[key] = (torch.tensor(a_ev, dtype=torch.long), torch.tensor(a_uid, dtype=torch.long),
                          torch.tensor(a_nb, dtype=torch.long),
                          torch.tensor([e.scratch for e in trace.events], dtype=torch.long),
                          torch.tensor([f.after for f in trace.frees], dtype=torch.long),
                          torch.tensor([f.storage for f in trace.frees], dtype=torch.long),
                          torch.tensor(max(ids) + 1))
    return _KEPT[key]  # type: ignore[no-any-return]


def sweep(trace: Trace, factor: Mapping[int, float], extra: int, before: set[int],
          moments: Sequence[Any], keep_timeline: bool) -> Swept | None:
    """:func:`.memory.replay`'s loop over ``trace`` (its arguments), or None where the loop must run."""
    static = _static(trace)
    if static is None:
        return None
    threads = torch.get_num_threads()  # tensors of tens of thousands: threads cost more than they give
    torch.set_num_threads(1)
    try:
        with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
            return _sweep(trace, static, factor, extra, before, moments, keep_timeline)
    finally:
        torch.set_num_threads(threads)


def _sweep(trace: Trace, static: tuple[torch.Tensor, ...], factor: Mapping[int, float], extra: int,
           before: set[int], moments: Sequence[Any], keep_timeline: bool) -> Swept | None:
    a_ev, a_uid, a_nb, scratch, f_after, f_uid, top = static
    n, u = len(trace.events), int(top)
    size: dict[int, int] = {}
    born: dict[int, int] = {}
    for uid, nbytes, *_ in trace.preexisting:
        size[uid] = int(nbytes * factor.get(uid, 1.0))
        born[uid] = -1
    if factor:
        f = torch.ones(u, dtype=torch.float64)
        keys = [k for k in factor if 0 <= k < u]
        f[torch.tensor(keys, dtype=torch.long)] = torch.tensor([factor[k] for k in keys], dtype=torch.float64)
        a_sz = (a_nb.to(torch.float64) * f[a_uid]).floor().to(torch.long)
    else:
        a_sz = a_nb
    pre_alloc = torch.isin(a_uid, torch.tensor(sorted(before), dtype=torch.long)) if before else None
    birth_ev = torch.full((u,), NEVER, dtype=torch.long)
    sz = torch.zeros(u, dtype=torch.long)
    if size:
        idx = torch.tensor(list(size), dtype=torch.long)
        birth_ev[idx] = -1
        sz[idx] = torch.tensor(list(size.values()), dtype=torch.long)
    sz[a_uid] = a_sz
    birth_ev[a_uid] = a_ev if pre_alloc is None else torch.where(pre_alloc, -1, a_ev)
    counted = a_sz if pre_alloc is None else torch.where(pre_alloc, 0, a_sz)  # what each event allocates
    live = sum(size.values()) + extra + (int(a_sz[pre_alloc].sum()) if pre_alloc is not None else 0)
    baseline = live
    # each storage's death: the first free at or after its birth that the loop reaches
    b = birth_ev[f_uid]
    ok = (b != NEVER) & (f_after >= b) & (f_after < n)
    death = torch.full((u,), NEVER, dtype=torch.long)
    death.scatter_reduce_(0, f_uid[ok], f_after[ok], reduce="amin")
    # moments (few): resizes change a live storage's size, and what its free gives back
    at: dict[int, list[Any]] = {}
    for m in moments:
        if 0 <= m.before <= n:
            at.setdefault(m.before, []).append(m)
    sz_death = sz.clone()
    cur: dict[int, int] = {}
    resized: dict[int, tuple[int, int]] = {}
    mom: list[tuple[int, Any, int]] = []  # (before, moment, its change to the live bytes)
    for i in sorted(at):
        for m in at[i]:
            delta = m.hold
            for uid, nbytes in m.resize.items():
                if uid not in cur:
                    if not 0 <= uid < u or int(birth_ev[uid]) == NEVER or int(birth_ev[uid]) >= i:
                        return None  # resized before it exists: the loop says what happens
                    cur[uid] = int(sz[uid])
                if int(birth_ev[uid]) < i <= int(death[uid]):
                    delta += nbytes - cur[uid]
                    sz_death[uid] = nbytes
                resized[uid] = (2 * i, cur[uid])
                cur[uid] = nbytes
            mom.append((i, m, delta))
    alloc = torch.zeros(n, dtype=torch.long).index_add_(0, a_ev, counted)
    dies = (death >= 0) & (death < n)
    freed = torch.zeros(n, dtype=torch.long).index_add_(0, death[dies], sz_death[dies])
    live -= int(sz_death[death == -1].sum())
    # the ticks in the loop's order: a step's moments, then its event
    before_count = torch.zeros(n + 2, dtype=torch.long)
    for i, _, _ in mom:
        before_count[i + 1] += 1
    shift = before_count.cumsum(0)  # moments before event i (those with before <= i)
    ev_pos = torch.arange(n) + shift[1:n + 1]
    t = n + len(mom)
    pre = torch.zeros(t, dtype=torch.long)
    post = torch.zeros(t, dtype=torch.long)
    extra_c = torch.zeros(t, dtype=torch.long)
    pre[ev_pos], post[ev_pos], extra_c[ev_pos] = alloc, -freed, scratch
    m_pos: list[int] = []
    seen: dict[int, int] = {}
    for i, m, delta in mom:
        p = i + int(shift[i]) + seen.get(i, 0)
        seen[i] = seen.get(i, 0) + 1
        m_pos.append(p)
        pre[p], extra_c[p] = delta, m.spike
    cpre, cpost = pre.cumsum(0), post.cumsum(0)
    after_pre = live + cpre + cpost - post
    cand = after_pre + extra_c
    best = int(torch.argmax(cand)) if t else 0
    peak, peak_at, pos = live, -1, -1
    peak_scratch = peak_spike = peak_tick = 0
    peak_held: dict[str, int] = {}
    if t and int(cand[best]) > live:
        peak, pos = int(cand[best]), best
        held: dict[str, int] = {}
        for (i, m, _), p in zip(mom, m_pos):
            if p > best:
                break
            held[m.what] = held.get(m.what, 0) + m.hold
            if p == best:
                peak_at, peak_spike, peak_tick = i - 1, m.spike, 2 * i
        if peak_tick == 0 and not (m_pos and best in m_pos):
            i = int(torch.searchsorted(ev_pos, best))
            peak_at, peak_scratch, peak_tick = i, int(scratch[i]), 2 * i + 1
        peak_held = held
    # alive at the peak: born at or before its tick, not freed before it
    bpos = torch.where(birth_ev == -1, -1, ev_pos[birth_ev.clamp(0, max(n - 1, 0))]) if n else birth_ev
    dpos = torch.where(death == -1, -2, torch.where(death == NEVER, NEVER, ev_pos[death.clamp(0, max(n - 1, 0))]))
    alive = (birth_ev != NEVER) & (bpos <= pos) & (dpos >= pos)
    highs: list[int] = []
    timeline: list[tuple[int, int]] = []
    if keep_timeline:
        highs = [live, *cand[ev_pos].tolist()]
        for (i, _, _), p in zip(mom, m_pos):
            highs[i] = max(highs[i], int(cand[p]))
        timeline = list(zip(range(n), (live + cpre + cpost)[ev_pos].tolist()))
    size.update(zip(a_uid.tolist(), a_sz.tolist()))
    born.update(zip(a_uid.tolist(), birth_ev[a_uid].tolist()))
    size.update(cur)
    return Swept(baseline, peak, peak_at, set(torch.nonzero(alive).flatten().tolist()), peak_scratch, peak_held,
                 peak_spike, peak_tick, size, born, resized, timeline, highs)
