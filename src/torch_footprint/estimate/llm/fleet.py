"""Which accelerator, engine, tensor-parallel degree, knobs and number of replicas serve a
request rate within latency targets at the lowest price: ``footprint plan --serve``.

Every candidate replica (accelerator x engine x tensor-parallel degree) is priced from one
trace of the model (:func:`.pricing.serve`) and simulated (:mod:`.serving_sim`) at the rate
its share of the traffic would be: R/n requests per second for n replicas behind a balancer
that spreads requests evenly (each replica its own Poisson stream of R/n). A replica meets
the targets when at least the asked fraction of its requests (the SLO attainment of
DistServe, Zhong et al., OSDI 2024; 90% by default) has both its time to first token and its
time per output token within them. Attainment falls as a replica's rate grows (more requests
in flight make each step longer and the queue deeper), so the fewest replicas is found by
halving the rate (n = 1, 2, 4, ...) until the targets are met, then by bisection between the
last n that missed and the first that met. A replica count whose fleet would cost more than
the candidates already kept is not simulated: it cannot enter the list.

Candidates are ranked by the fleet's price per hour (n x tp GPUs at the GPU's hourly price,
given or from the shipped table), then by its GPUs. For the best few, smaller caps on the
requests in flight (``max_num_seqs``) are tried: a smaller batch shortens each decode step
(time per output token) at the cost of queueing (time to first token), which can need fewer
replicas when time per output token is the binding target."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...errors import FootprintError
from ...hardware import Accelerator, find, load
from ...hardware.engines import profile
from ...hardware.prices import Price, hourly_price, parse_prices, table
from .pricing import Priced, serve
from .serving_sim import Asked
from .trace import ServingTrace

ENGINES = ("vllm", "sglang", "trtllm")  # searched when none is named: the data-centre serving engines
TPS = (1, 2, 4, 8)  # tensor-parallel degrees searched (inside one node)
HALVINGS = 11  # n = 1 .. 1024 replicas tried by doubling
SEQ_CAPS = (128, 64, 32, 16)  # smaller max_num_seqs tried for the best candidates
KEEP = 5  # fleets kept in full: a candidate that cannot beat the fifth is cut short
REQUESTS = 400  # requests simulated per point unless --num-prompts says otherwise

Progress = Callable[[str, "float | None"], None]


@dataclass
class Replica:
    """One candidate: the accelerator, engine, tensor-parallel degree and knobs of a replica."""

    acc: Accelerator
    engine: str
    tp: int
    price: Price | None
    knobs: dict[str, float] = field(default_factory=dict)

    def label(self) -> str:
        knobs = "".join(f", {k} {v:g}" for k, v in self.knobs.items())
        return f"{self.acc.id} x {self.tp}, {self.engine}{knobs}"


@dataclass
class FleetRow:
    """A fleet that meets the targets: ``replicas`` copies of ``replica``, and its figures at
    the rate each replica then serves."""

    replica: Replica
    replicas: int
    point: dict[str, Any]  # the simulation's figures at R / replicas

    @property
    def gpus(self) -> int:
        return self.replicas * self.replica.tp

    @property
    def usd_per_hour(self) -> float | None:
        p = self.replica.price
        return None if p is None else self.gpus * p.usd_per_hour

    def to_dict(self, model: str, rate: float) -> dict[str, Any]:
        r = self.replica
        # the fleet's output: the requests it is sent times the tokens a request gets (not the run's tokens over
        # its duration, which counts the last requests' drain)
        done = self.point["requests_per_s"]
        out_tps = rate * self.point["output_tokens_per_s"] / done if done else 0.0
        usd = self.usd_per_hour
        return {"accelerator": r.acc.id, "engine": r.engine, "tp": r.tp, "knobs": dict(r.knobs),
                "replicas": self.replicas, "gpus": self.gpus, "rate_per_replica": rate / self.replicas,
                "usd_per_hour": usd, "price": None if r.price is None else dataclasses.asdict(r.price),
                "usd_per_m_output_tokens": usd / (out_tps * 3600) * 1e6 if usd is not None and out_tps else None,
                "output_tokens_per_s": out_tps, "attainment": attainment(self.point),
                "ttft_s": self.point["ttft_s"], "tpot_s": self.point["tpot_s"], "e2e_s": self.point["e2e_s"],
                "kv_peak_fraction": self.point["kv_peak_fraction"], "preemptions": self.point["preemptions"],
                "launch": launch(model, r)}


@dataclass
class FleetPlan:
    """The fleets that meet the targets, cheapest first, and the candidates that cannot."""

    kind: ClassVar[str] = "plan-serve"  # the envelope's kind of its saved file

    model: str
    request_rate: float
    slo_ttft: float | None
    slo_tpot: float | None
    attainment: float
    prompt: int
    output: int
    lengths: str
    rows: list[FleetRow] = field(default_factory=list)
    missed: list[tuple[str, str]] = field(default_factory=list)  # (candidate, why)
    closest: str | None = None  # where nothing meets the targets: the nearest miss
    candidates: int = 0
    pruned: int = 0  # candidates cut short: no fleet of them could beat the ones kept
    simulations: int = 0
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "request_rate": self.request_rate,
                "slo_ttft_s": self.slo_ttft, "slo_tpot_s": self.slo_tpot, "attainment": self.attainment,
                "prompt": self.prompt, "output": self.output, "lengths": self.lengths,
                "candidates": self.candidates, "pruned": self.pruned, "simulations": self.simulations,
                "interrupted": self.interrupted,
                "rows": [r.to_dict(self.model, self.request_rate) for r in self.rows],
                "missed": [{"candidate": c, "why": w} for c, w in self.missed], "closest": self.closest,
                "notes": self.notes,
                "settings": {"model": self.model, "request_rate": self.request_rate, "slo_ttft_s": self.slo_ttft,
                             "slo_tpot_s": self.slo_tpot, "attainment": self.attainment, "prompt": self.prompt,
                             "output": self.output, "lengths": self.lengths}}


def attainment(point: dict[str, Any]) -> float:
    """The fraction of a run's requests that met both targets (a target is always given)."""
    return float(point["slo"]["fraction"])


def launch(model: str, r: Replica) -> str:
    """The engine's own launch line for one replica."""
    name = model.removeprefix("hf:")
    seqs = r.knobs.get("max_num_seqs")
    if r.engine == "sglang":
        return f"python -m sglang.launch_server --model-path {name} --tp {r.tp}" + (
            f" --max-running-requests {seqs:g}" if seqs else "")
    if r.engine == "trtllm":
        return f"trtllm-serve {name} --tp_size {r.tp}" + (f" --max_batch_size {seqs:g}" if seqs else "")
    return f"vllm serve {name} --tensor-parallel-size {r.tp}" + (f" --max-num-seqs {seqs:g}" if seqs else "")


def _accelerators(gpus: tuple[str, ...], hardware: str | None, prices: tuple[str, ...]) -> list[Accelerator]:
    rows = load(hardware)
    if gpus:
        return [find(rows, g) for g in gpus]
    priced = set(table()) | set(parse_prices(prices))
    out = [a for a in rows if a.id in priced and a.kind == "gpu" and a.bandwidth_gbs]
    if not out:
        raise FootprintError("no accelerator has a price: give --gpu ID, or --price ID=USD_PER_HOUR")
    return out


def _tps(st: ServingTrace, most: int) -> list[int]:
    heads = getattr(st.config, "num_attention_heads", None) or 1
    return [t for t in TPS if t <= most and heads % t == 0]


class _Search:
    """The simulations of one candidate: attainment at n replicas, memoized."""

    def __init__(self, st: ServingTrace, base: Priced, asked: Asked, rate: float, r: Replica,
                 efficiency: dict[str, float] | None) -> None:
        self.st, self.base, self.asked, self.rate, self.r, self.eff = st, base, asked, rate, r, efficiency
        self.points: dict[int, dict[str, Any]] = {}
        self.runs = 0

    def at(self, ns: list[int]) -> str | None:
        """Simulate the replica at R/n for every n not yet simulated; the engine's complaint, if any."""
        ns = [n for n in ns if n not in self.points]
        if not ns:
            return None
        priced = dataclasses.replace(self.base, gpus=self.r.tp, tp=self.r.tp, engine=self.r.engine,
                                     knobs={**self.base.knobs, **self.r.knobs},
                                     sim=dataclasses.replace(self.asked, rates=[self.rate / n for n in ns]))
        try:
            res = serve(self.st, priced, [self.r.acc], max_context=self.asked.most, efficiency=self.eff)
        except FootprintError as e:
            return str(e)
        row = res.rows[0]
        if row.vllm is not None and row.vllm.error:
            return row.vllm.error
        if row.simulation is None:
            return "the engine leaves no room for the cache"
        self.runs += len(ns)
        for n, point in zip(ns, row.simulation.get("sweep") or [row.simulation], strict=True):
            self.points[n] = point
        return None

    def met(self, n: int, target: float) -> bool:
        return attainment(self.points[n]) >= target


def fewest(search: _Search, target: float, most: int | None) -> tuple[int | None, str | None]:
    """The fewest replicas (at most ``most``) whose requests meet the targets, or why none."""
    ns = [2**k for k in range(HALVINGS)]
    if most is not None:
        ns = sorted({n for n in ns if n < most} | {most})
    error = search.at(ns)
    if error:
        return None, error
    hi = next((n for n in ns if search.met(n, target)), None)
    if hi is None:
        return None, None
    lo = max([n for n in ns if n < hi], default=0)
    while hi - lo > 1:  # attainment falls with each replica's rate: the first n that meets is the fewest
        mid = (lo + hi) // 2
        error = search.at([mid])
        if error:
            return None, error
        lo, hi = (lo, mid) if search.met(mid, target) else (mid, hi)
    return hi, None


def plan_fleet(st: ServingTrace, base: Priced, asked: Asked, *, rate: float, gpus: tuple[str, ...],
               hardware: str | None, engines: tuple[str, ...], tp: int | None, gpus_per_node: int,
               most_gpus: int | None, target: float, prices: tuple[str, ...],
               efficiency: dict[str, float] | None, progress: Progress | None = None) -> FleetPlan:
    """Search the fleets (module docstring); Ctrl-C keeps what was found."""
    say = progress or (lambda message, fraction=None: None)
    plan = FleetPlan(st.name, rate, asked.slo_ttft, asked.slo_tpot, target, asked.prompt, asked.output,
                     asked.trace or asked.lengths)
    reps = [Replica(a, e, t, hourly_price(a.id, prices)) for a in _accelerators(gpus, hardware, prices)
            for e in engines if profile(e).runs_on(a.vendor) for t in ((tp,) if tp else _tps(st, gpus_per_node))]
    if not reps:
        raise FootprintError(f"{' and '.join(engines)} run(s) on none of the accelerators asked")
    # likeliest cheapest first, so that the bound on the fleets kept cuts the rest short: decoding reads the
    # weights and cache every step, so a replica's requests per second go roughly with its bandwidth
    reps.sort(key=lambda r: (r.price.usd_per_hour / (r.acc.bandwidth_gbs or 1.0) if r.price else float("inf"),
                             -r.tp))
    plan.candidates = len(reps)
    misses: list[tuple[float, str]] = []  # (how far, what) where the targets are missed even at the lightest load
    try:
        for i, r in enumerate(reps):
            say(f"plan --serve: {r.label()} ({len(plan.rows)} fleets meet the targets)", i / max(len(reps), 1))
            _candidate(st, base, asked, rate, r, target, most_gpus, efficiency, plan, misses)
        plan.rows.sort(key=_rank)
        for row in list(plan.rows[:3]):  # the best few: a smaller cap on requests in flight
            say(f"plan --serve: {row.replica.label()}, max_num_seqs", None)
            if row.replicas > 1 and profile(row.replica.engine).takes("max_num_seqs"):  # else: nothing to save
                for cap in SEQ_CAPS:
                    _candidate(st, base, asked, rate, dataclasses.replace(row.replica, knobs={"max_num_seqs": cap}),
                               target, most_gpus, efficiency, plan, misses, better_than=row)
    except KeyboardInterrupt:
        plan.interrupted = True
    plan.rows.sort(key=_rank)
    if not plan.rows and misses:
        far, what = min(misses)
        plan.closest = f"nothing meets the targets; the closest: {what}"
    if any(r.replica.price is None for r in plan.rows):
        plan.notes.append("fleets without a price are ranked after those with one, by GPUs (give --price ID=USD/H)")
    return plan


def _rank(row: FleetRow) -> tuple[float, int, float]:
    usd = row.usd_per_hour
    return (usd if usd is not None else float("inf"), row.gpus, row.point["tpot_s"]["p90"])


def _candidate(st: ServingTrace, base: Priced, asked: Asked, rate: float, r: Replica, target: float,
               most_gpus: int | None, efficiency: dict[str, float] | None, plan: FleetPlan,
               misses: list[tuple[float, str]], better_than: FleetRow | None = None) -> None:
    search = _Search(st, base, asked, rate, r, efficiency)
    most = None if most_gpus is None else most_gpus // r.tp
    if better_than is not None:  # a knob of the same replica wins only with fewer of them
        most = better_than.replicas - 1 if most is None else min(most, better_than.replicas - 1)
    if most is not None and most < 1:
        plan.missed.append((r.label(), f"a replica needs {r.tp} GPUs, more than --gpus {most_gpus}"))
        return
    capped = False
    kept = sorted(u for u in (x.usd_per_hour for x in plan.rows) if u is not None)
    if r.price is not None and len(kept) >= KEEP:  # more replicas than this cannot enter the list
        worth = int(kept[KEEP - 1] // (r.tp * r.price.usd_per_hour))
        if worth < 1:
            plan.pruned += 1
            return
        capped = most is None or worth < most
        most = worth if most is None else min(most, worth)
    n, error = fewest(search, target, most)
    plan.simulations += search.runs
    if error:
        plan.missed.append((r.label(), error))
        return
    if n is None and better_than is not None:
        return  # the knob saves nothing
    if n is None and capped:  # none meets within the replicas that could still enter the list
        plan.pruned += 1
        return
    if n is None:
        lightest = search.points[max(search.points)]
        got = attainment(lightest)
        why = _miss(lightest, got, asked)
        plan.missed.append((r.label(), why))
        misses.append((1 - got, f"{r.label()} x {max(search.points)}: {why}"))
        return
    row = FleetRow(r, n, search.points[n])
    if better_than is not None and _rank(row)[:2] >= _rank(better_than)[:2]:
        return  # a knob is kept only where it saves money or GPUs
    plan.rows.append(row)


def _miss(point: dict[str, Any], got: float, asked: Asked) -> str:
    parts = [f"{got:.0%} of requests meet the targets at the lightest load"]
    if asked.slo_ttft is not None:
        parts.append(f"TTFT p90 {point['ttft_s']['p90'] * 1e3:.0f} ms (target {asked.slo_ttft * 1e3:.0f} ms)")
    if asked.slo_tpot is not None:
        parts.append(f"TPOT p90 {point['tpot_s']['p90'] * 1e3:.1f} ms (target {asked.slo_tpot * 1e3:.1f} ms)")
    return ", ".join(parts)
