"""Which layout to train with on N GPUs of a type: every layout the model and N allow, priced
from cached traces (:mod:`.price`), those that fit ranked by predicted tokens/s per GPU.

The search covers data x tensor x pipeline parallelism, expert parallelism for a mixture of
experts (folded over the tensor-parallel ranks too, as Megatron-core and torchtitan allow with
each expert whole), context parallelism from sequences of ``CP_FROM`` tokens (the long-context recipes of
torchtitan and Megatron-LM use it there; below, tensor parallelism and sharding cover a
sequence's activations at less communication), virtual stages and the pipeline schedule,
the micro-batch and with it the micro-batches a step (the global batch is the run's), the
activation checkpointing mode and the data-parallel sharding (DDP, ZeRO-1, ZeRO-2, FSDP, HSDP
within a node). Tensor-parallel groups stay inside a node. One trace serves every layout with
the same trace key (:func:`.workload.trace_key`), so a search traces a handful of times and
prices hundreds or thousands of layouts.

Micro-batch sizes are searched smallest first: a larger micro-batch holds at least as many
activation bytes per rank in every layout (the same stages in flight, each larger, and larger
transients), so a size is traced for a tensor-parallel split only if some layout fit at the
size before it. Checkpointing modes are searched lightest first: for the same layout, checkpointing more
never makes the step faster and never needs more memory, so a heavier mode is traced and
priced only for the layouts that did not fit under a lighter one and whose time under it
(a bound on their time under the heavier mode) could still place them among the best.

A layout whose model states alone exceed the accelerator's memory is not priced: at the end of
every step's backward each of its parameters' weight, gradient and optimizer state (the rank's
shard of each; with FSDP in a pipeline its stage gathered and its gradients whole too) is alive
at once, and the fullest pipeline rank holds at least the mean of the ranks' shares, so that sum
over the pipeline degree is a lower bound on what the layout needs (:func:`states_bound`). It is
exact (a bound, not an estimate) and independent of the micro-batch and the checkpointing, so such a layout counts as
evaluated under every checkpointing mode, and a trace key whose every layout is ruled out so is not traced.
Expert-parallel layouts are always priced (the experts other ranks hold leave the states as a bound cannot follow)."""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import collector
from ..errors import FootprintError
from ..hardware import Accelerator, find, load
from ..hardware.networks import Network, network_for
from ..hardware.prices import Price, hourly_price
from ..settings import Parallel, Plan, Target, Training, Workload
from ..sources import prepare
from .kernels.sdpa import sm_of
from .launch import launch
from .layouts.pipeline import check_layout, repeated_blocks
from .layouts.sharding import experts_away, master_scale, model_states, pipeline_gathered
from .layouts.tensor_parallel import check_tp
from .price import LayoutPrice, TracedStep, price_layout
from .workload import at_batch, fp8_rows, layout_training, trace_key, trace_step

AC_ORDER = ("none", "selective", "full")  # lightest first: each recomputes more than the one before
SHARDINGS = ("ddp", "zero1", "zero2", "fsdp")
MAX_VPP = 8  # virtual stages per rank tried at most
CP_FROM = 32768  # tokens per sequence from which context parallelism is searched


@dataclass
class PlanRow:
    """One layout that fits, with what makes it fast or slow."""

    price: LayoutPrice
    micro_batch: int
    ac: str
    seq: int
    global_batch: int
    blocks: int  # the model's repeated blocks (what the pipeline splits)
    ac_option: str = "op"  # with ac selective: torchtitan's selective_ac_option (op, or every N-th block)

    @property
    def layout(self) -> Parallel:
        return self.price.layout

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.global_batch * self.seq / self.price.time_s / self.layout.gpus

    def parts(self) -> dict[str, float]:
        """Why it is as fast as it is: the bubble's and exposed communication's shares of the step,
        and the memory left per rank."""
        step, total = self.price.step, self.price.time_s
        bubble, exposed = (step.compute_s.get("pipeline bubble", 0.0), step.exposed_s) if step else (0.0, 0.0)
        return {"step_s": total, "bubble_s": bubble, "exposed_comm_s": exposed,
                "bubble_share": bubble / total if total else 0.0, "exposed_share": exposed / total if total else 0.0,
                "headroom_bytes": float(self.price.capacity - self.price.need)}

    def to_dict(self) -> dict[str, Any]:
        p = self.layout
        return {"dp": p.data, "tp": p.tensor, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "ep": p.ep,
                "schedule": p.schedule if p.pp > 1 else None, "strategy": p.sharding,
                "dp_shard": p.shard_group if p.sharding in ("zero2", "zero3", "fsdp") else None,
                "micro_batch": self.micro_batch, "grad_accum": p.grad_accum, "ac": self.ac,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "need_bytes": self.price.need,
                "capacity_bytes": self.price.capacity, **self.parts(), "launch": launch(self)}


@dataclass
class PlanResult:
    """The layouts that fit, best first, and how the search went."""

    kind = "plan"
    model: str
    accelerator: str
    gpus: int
    seq: int
    global_batch: int
    rows: list[PlanRow]
    evaluated: int = 0  # layouts priced, and ruled out by their model states alone (bounded)
    bounded: int = 0  # of those, ruled out by states_bound without pricing (one per checkpointing mode)
    considered: int = 0  # layouts the model and GPU count allow (priced or left out as dominated)
    traces: int = 0
    trace_s: float = 0.0
    search_s: float = 0.0
    interrupted: bool = False
    closest: str = ""  # when nothing fits: what would
    price: Price | None = None
    tokens: float | None = None
    notes: list[str] = field(default_factory=list)
    cache: TraceCache | None = field(default=None, repr=False)  # the traces it priced (price other layouts)
    ruled_out: list[tuple[int, Parallel]] = field(default_factory=list, repr=False)  # (states_bound, layout)

    def cost(self, row: PlanRow) -> dict[str, float] | None:
        """GPU-hours and dollars for a run of ``tokens`` (None without a price or a length)."""
        if self.tokens is None:
            return None
        hours = self.tokens / (row.tokens_per_s_per_gpu * self.gpus) / 3600 * self.gpus
        return {"gpu_hours": hours, **({"usd": hours * self.price.usd_per_hour} if self.price else {})}

    def to_dict(self) -> dict[str, Any]:
        rows = [{**r.to_dict(), **({"run": self.cost(r)} if self.tokens else {})} for r in self.rows]
        return {"model": self.model, "accelerator": self.accelerator, "gpus": self.gpus, "seq": self.seq,
                "global_batch": self.global_batch, "layouts_evaluated": self.evaluated,
                "layouts_priced": self.evaluated - self.bounded, "layouts_ruled_out_by_states": self.bounded,
                "layouts_considered": self.considered, "traces": self.traces, "trace_s": self.trace_s,
                "search_s": self.search_s, "interrupted": self.interrupted, "nothing_fits": not self.rows,
                "closest": self.closest, "tokens": self.tokens,
                "price": dataclasses.asdict(self.price) if self.price else None, "rows": rows, "notes": self.notes,
                "settings": {"model": self.model, "gpu": self.accelerator, "gpus": self.gpus, "seq": self.seq,
                             "global_batch": self.global_batch}}


def searched_training(t: Training, ac: str, p: Parallel) -> Training:
    """The step at checkpointing mode ``ac`` as ``p``'s framework runs it: under Megatron-core, whose
    selective granularity has no per-operator policy, ``selective`` is its default selective recompute
    (``--recompute-granularity selective``: the core attention, ``core_attn``)."""
    if ac == "selective" and p.framework == "megatron" and t.selective_ac_option == "op" and not t.recompute_modules:
        return dataclasses.replace(t, ac="none", checkpointing=False, recompute_modules=("core_attn",))
    return dataclasses.replace(t, ac=ac, checkpointing=False)


class TraceCache:
    """The traces of a planner's search, one per trace key, each made once."""

    def __init__(self, w: Workload, t: Training, store: dict[tuple[Any, ...], TracedStep] | None = None,
                 cuda_sm: tuple[int, int] | None = None) -> None:
        self.w, self.t, self.sm = w, t, cuda_sm  # the NVIDIA GPU's compute capability (its attention kernel)
        self.store = {} if store is None else store  # a store shared by searches of other GPUs or batches
        self.seconds = 0.0
        self.made: list[tuple[int, str, Parallel, float, float]] = []  # (micro-batch, ac, layout, wall s, CPU s)
        self.freeze = False  # move what lives once a trace is made out of the cyclic collector's passes

    def get(self, micro_batch: int, ac: str, p: Parallel) -> TracedStep:
        w = at_batch(self.w, micro_batch)
        t = layout_training(searched_training(self.t, ac, p), p)
        key = trace_key(w, t, p, self.sm)
        if key not in self.store:
            start, cpu = time.perf_counter(), time.process_time()
            trace, notes = trace_step(w, t, p, cuda_sm=self.sm)
            self.seconds += time.perf_counter() - start
            self.made.append((micro_batch, ac, p, time.perf_counter() - start, time.process_time() - cpu))
            self.store[key] = TracedStep(trace, notes, t)
            if self.freeze:
                gc.collect(1)  # the trace's young garbage, then what is left set aside (:func:`plan`)
                gc.freeze()
        return self.store[key]


STATES_SLACK = 2**20  # bytes: the replay rounds each tensor's shard down, the states' sum rounds up


def states_bound(traced: TracedStep, p: Parallel) -> int | None:
    """A lower bound on the bytes one rank of ``p`` needs (module docstring): its shard of every
    parameter's weight, gradient and optimizer state, over the pipeline degree; None where no
    bound is given (expert parallelism, experts held elsewhere, or no training step)."""
    trace = traced.trace
    if p.ep > 1 or not traced.training.train or experts_away(trace):
        return None
    whole = model_states(traced.persistent(), p.sharding, p.state_shards, 0, p.bucket_view, master_scale(trace))
    kept = pipeline_gathered(trace, p.sharding) if p.pp > 1 else 0
    return max(0, (whole.weights + whole.gradients + whole.optimizer + kept) // p.pp - STATES_SLACK)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pipelines(pp: int, blocks: int, m: int) -> Iterator[tuple[int, str | None]]:
    """Virtual stages and schedule per pipeline degree (interleaving needs the micro-batches in
    multiples of the ranks, as Megatron-LM requires)."""
    if pp == 1:
        yield 1, None
        return
    yield 1, "1f1b"
    yield 1, "gpipe"
    if m % pp == 0:
        for v in range(2, MAX_VPP + 1):
            if blocks % (pp * v) == 0:
                yield v, "interleaved-1f1b"


def _shardings(dp: int, tp: int, per_node: int) -> Iterator[tuple[str, int | None]]:
    if dp == 1:
        yield "ddp", None
        return
    for s in SHARDINGS:
        yield s, None
    inside = per_node // tp  # HSDP: shard within a node, replicate across nodes
    if 1 < inside < dp and dp % inside == 0:
        yield "fsdp", inside


def layouts(model: Any, base: Parallel, global_batch: int, sizes: tuple[int, ...],
            long_context: bool = False) -> Iterator[tuple[Parallel, int]]:
    """Every layout of ``base.gpus`` the model takes, with its micro-batch size: the global batch
    split evenly into micro-batches on each data-parallel rank (context parallelism only for a
    ``long_context``)."""
    n, per_node = base.gpus, base.gpus_per_node
    _, blocks = repeated_blocks(model)
    checked: dict[tuple[int, int, int], bool] = {}  # check_layout's verdict: it reads the pp, vpp and ep
    for tp in _divisors(n):
        if tp > per_node or per_node % tp:
            continue  # tensor parallelism stays inside a node
        try:
            check_tp(model, tp)
        except FootprintError:
            continue
        for pp in _divisors(n // tp):
            for cp in _divisors(n // (tp * pp)) if long_context else [1]:
                dp = n // (tp * pp * cp)
                for ep in _divisors(tp * dp * cp):  # beyond dp x cp: folded over the tensor-parallel ranks
                    yield from _split(model, base, tp, pp, cp, ep, dp, blocks, global_batch, sizes, checked)


def _split(model: Any, base: Parallel, tp: int, pp: int, cp: int, ep: int, dp: int, blocks: int,
           global_batch: int, sizes: tuple[int, ...],
           checked: dict[tuple[int, int, int], bool]) -> Iterator[tuple[Parallel, int]]:
    for mb in sizes:
        if global_batch % (dp * mb):
            continue
        m = global_batch // (dp * mb)
        if pp > 1 and m < pp:
            continue  # fewer micro-batches than stages: most of the step idle
        for vpp, schedule in _pipelines(pp, blocks, m):
            for strategy, shard in _shardings(dp, tp, base.gpus_per_node):
                try:
                    p = dataclasses.replace(base, tp=tp, pp=pp, vpp=vpp, pp_schedule=schedule, cp=cp, ep=ep,
                                            sequence_parallel=base.sequence_parallel and tp > 1,
                                            vocab_parallel=base.vocab_parallel and tp > 1,
                                            async_tp=base.async_tp and tp > 1,
                                            grad_accum=m, strategy=strategy, dp_shard=shard,
                                            fsdp_param_dtype=base.fsdp_param_dtype if strategy == "fsdp" else None,
                                            fsdp_reduce_dtype=base.fsdp_reduce_dtype if strategy == "fsdp" else None)
                except FootprintError:
                    continue
                if (pp, vpp, ep) not in checked:
                    try:
                        check_layout(model, p)
                        checked[pp, vpp, ep] = True
                    except FootprintError:
                        checked[pp, vpp, ep] = False
                if checked[pp, vpp, ep]:
                    yield p, mb


Progress = Callable[[str, float | None], None]


def plan(w: Workload, t: Training, p: Parallel, target: Target, settings: Plan,
         progress: Progress | None = None, store: dict[tuple[Any, ...], TracedStep] | None = None) -> PlanResult:
    """Search the layouts of ``p.gpus`` accelerators ``target.gpu`` for the step ``t`` of ``w``
    (module docstring); Ctrl-C stops the search and keeps what was found. ``store``: traces
    kept from another search (keyed by :func:`.workload.trace_key`), used where they apply."""
    say = progress or (lambda message, fraction=None: None)
    if len(target.gpu) != 1:
        raise FootprintError("plan searches layouts of one accelerator: give --gpu ID once")
    acc = find(load(target.hardware), target.gpu[0])
    net = network_for(p.network, p.network_gbps, p.nics_per_node, p.gpus_per_node)
    w = dataclasses.replace(w, inputs={"input_ids": f"1,{settings.seq}:int64"}, precision=w.precision or "bf16-mixed")
    fp8_rows([acc], p, w, explicit=True)  # an FP8 recipe the accelerator cannot run is refused
    t = dataclasses.replace(t, train=True, optimizer=t.optimizer or "adamw")
    gb = settings.batch_for(p.gpus)
    acs = (t.ac,) if t.ac is not None else ("full",) if t.checkpointing else AC_ORDER
    say(f"plan: building {w.model}", None)
    model = prepare(w.model, w.inputs, weights=w.weights, trust_remote_code=w.trust_remote_code).built.model
    groups: dict[tuple[Any, ...], list[tuple[Parallel, int]]] = {}
    for layout, mb in layouts(model, p, gb, settings.sizes, long_context=settings.seq >= CP_FROM):
        groups.setdefault((layout.tensor, layout.sequence_parallel, layout.cp, layout.ep, mb), []).append(
            (layout, mb))
    result = PlanResult(str(w.model), acc.id, p.gpus, settings.seq, gb, [], tokens=settings.tokens,
                        price=hourly_price(acc.id, target.price))
    result.considered = sum(len(g) for g in groups.values()) * len(acs)
    if not groups:
        raise FootprintError(_no_layout(model, p, gb, settings))
    cache = TraceCache(w, t, store, sm_of(acc))
    # a search keeps every trace alive (tens of thousands of events each): each full pass of Python's
    # cyclic collector walked them all again, about a third of a 70B search; what lives once a trace is
    # made is set aside (gc.freeze) and given back at the end, unless the caller froze objects itself
    cache.freeze = collector.take()
    traced_before = len(cache.store)
    _, blocks = repeated_blocks(model)
    start = time.perf_counter()
    misses: list[tuple[int, LayoutPrice]] = []
    states: dict[tuple[Any, ...], TracedStep] = {}
    bounds = result.ruled_out  # layouts ruled out by their states: (the bound, the layout)
    fitted: dict[tuple[Any, ...], bool] = {}  # per split but the micro-batch: did the last micro-batch fit
    try:
        for i, (key, members) in enumerate(sorted(groups.items())):
            if fitted.get(key[:-1]) is False:  # nothing fit at a smaller micro-batch: nothing fits at this one
                known = states.get(_states_key(members[0][0]))  # (those its states rule out: evaluated)
                if known is not None:
                    _bounded([layout for layout, _ in members], known, acc, len(acs), result, bounds)
                continue
            before = len(result.rows)
            _search_group(members, acs, cache, acc, target, net, result, misses, settings.seq, gb, blocks, top=5,
                          say=lambda ac, mb=members[0][1], tp=members[0][0].tensor, i=i: say(
                              f"plan: tp {tp}, micro-batch {mb}, --ac {ac}: {result.evaluated} layouts priced, "
                              f"{len(result.rows)} fit", i / len(groups)), states=states, bounds=bounds)
            fitted[key[:-1]] = len(result.rows) > before
    except KeyboardInterrupt:
        result.interrupted = True
        result.notes.append("interrupted: the best layouts found so far")
    finally:
        collector.give_back(cache.freeze)
        cache.freeze = False  # a trace the caller asks of the cache later is theirs to keep
    result.search_s = time.perf_counter() - start
    result.traces, result.trace_s, result.cache = len(cache.store) - traced_before, cache.seconds, cache
    result.rows.sort(key=lambda r: -r.tokens_per_s_per_gpu)
    if not result.rows and (misses or bounds):
        result.closest = _closest(misses, acc) if misses else _closest_bound(bounds, acc)
    if result.price is None and settings.tokens:
        result.notes.append(f"no price for {acc.id}: give --price {acc.id}=USD_PER_HOUR for dollars")
    return result


def _states_key(p: Parallel) -> tuple[Any, ...]:
    """What a trace's model states depend on of a layout (not the micro-batch or checkpointing)."""
    return (p.tensor, p.sequence_parallel, p.cp, p.ep, p.fsdp_param_dtype if p.sharding in ("zero2", "fsdp") else None)


def _bounded(left: list[Parallel], traced: TracedStep, acc: Accelerator, modes: int, result: PlanResult,
             bounds: list[tuple[int, Parallel]]) -> list[Parallel]:
    """The layouts whose model states alone could fit (:func:`states_bound`); the others counted
    as evaluated under the ``modes`` checkpointing modes not tried yet, and kept in ``bounds``."""
    keep = []
    for layout in left:
        bound = states_bound(traced, layout)
        if bound is not None and bound > acc.memory_bytes:
            result.evaluated, result.bounded = result.evaluated + modes, result.bounded + modes
            bounds.append((bound, layout))
        else:
            keep.append(layout)
    return keep


def _search_group(members: list[tuple[Parallel, int]], acs: tuple[str, ...], cache: TraceCache, acc: Accelerator,
                  target: Target, net: Network | None, result: PlanResult, misses: list[tuple[int, LayoutPrice]],
                  seq: int, gb: int, blocks: int, top: int, say: Callable[[str], None],
                  states: dict[tuple[Any, ...], TracedStep], bounds: list[tuple[int, Parallel]]) -> None:
    """Price one trace key's layouts, lightest checkpointing first (module docstring); ``states``:
    a trace per split (:func:`_states_key`), whose model states bound the layouts of its other keys."""
    left = [layout for layout, _ in members]
    mb = members[0][1]
    known = states.get(_states_key(left[0]))  # a trace of this split at another micro-batch: the same states
    if known is not None:
        left = _bounded(left, known, acc, len(acs), result, bounds)
    for n, ac in enumerate(acs):
        if not left:
            return
        say(ac)
        try:
            traced = cache.get(mb, ac, left[0])
        except FootprintError as e:  # this split cannot be traced (the others may): say so, go on
            result.notes.append(f"tp {left[0].tensor}, micro-batch {mb}, --ac {ac} left out: {e}")
            return
        states.setdefault(_states_key(left[0]), traced)
        left = _bounded(left, traced, acc, len(acs) - n, result, bounds)
        still: list[Parallel] = []
        for layout in left:
            priced_ = price_layout(traced, acc, layout, target, net)
            result.evaluated += 1
            row = PlanRow(priced_, mb, ac, seq, gb, blocks, cache.t.selective_ac_option)
            if priced_.fits:
                result.rows.append(row)
                continue
            misses.append((mb, priced_))
            best = sorted((r.tokens_per_s_per_gpu for r in result.rows), reverse=True)
            if len(best) < top or row.tokens_per_s_per_gpu > best[top - 1]:
                still.append(layout)  # could still be among the best with more recomputation
        left = still


def _closest(misses: list[tuple[int, LayoutPrice]], acc: Accelerator) -> str:
    """What the layout nearest to fitting would need."""
    mb, near = min(misses, key=lambda x: x[1].need)
    p = near.layout
    return (f"nothing fits on {p.gpus} x {acc.id} ({acc.memory_bytes / 2**30:.0f} GiB): the smallest need is "
            f"{near.need / 2**30:.1f} GiB per rank (tp {p.tensor}, pp {p.pp}, dp {p.data} {p.sharding}, micro-batch "
            f"{mb}); it needs a GPU of {near.need / 2**30:.0f} GiB or more GPUs")


def _closest_bound(bounds: list[tuple[int, Parallel]], acc: Accelerator) -> str:
    """What the layout nearest to fitting would need, where every layout's model states alone exceed the memory."""
    need, p = min(bounds, key=lambda x: x[0])
    return (f"nothing fits on {p.gpus} x {acc.id} ({acc.memory_bytes / 2**30:.0f} GiB): the smallest model states "
            f"are {need / 2**30:.1f} GiB per rank (tp {p.tensor}, pp {p.pp}, dp {p.data} {p.sharding}), before any "
            f"activation; it needs a GPU of more than {need / 2**30:.0f} GiB or more GPUs")


def _no_layout(model: Any, p: Parallel, gb: int, settings: Plan) -> str:
    """Why no layout of ``p.gpus`` exists, and the nearest GPU counts that have one."""
    _, blocks = repeated_blocks(model)

    def some(n: int) -> bool:
        return next(layouts(model, dataclasses.replace(p, gpus=n), gb, settings.sizes), None) is not None

    below = next((n for n in range(p.gpus - 1, 0, -1) if some(n)), None)
    above = next((n for n in range(p.gpus + 1, 4 * p.gpus + 1) if some(n)), None)
    near = " and ".join(str(n) for n in (below, above) if n is not None) or "none"
    return (f"no layout of {p.gpus} GPUs splits this model ({blocks} blocks) and a global batch of {gb} sequences "
            f"(micro-batches of {settings.micro_batches}): the nearest GPU counts that do are {near}")
