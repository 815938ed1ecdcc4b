"""Memory per rank when training is spread over N data-parallel ranks.

Multi-GPU memory per rank (N ranks, data parallel, batch per rank unchanged). With W the
parameters, G their gradients and O the optimizer state of the whole model, the model
states each rank holds are those of ZeRO (Rajbhandari et al. 2020, figure 1) as torch
implements the stages (what ``bench --nproc`` runs and measures):

    ddp     W + G + O  (+ G again: DDP copies gradients into its buckets unless
                        gradient_as_bucket_view=True)
    zero1   W + G + O/N  (+ G: torch's ZeroRedundancyOptimizer runs under DDP, buckets and all)
    zero2   (W + G + O)/N at rest; FSDP2 with reshard_after_forward=False keeps every
            unit's parameters gathered from the forward to the end of the backward: + W then
            (the paper's ZeRO-2 keeps W whole throughout; FSDP2 shards it between steps)
    zero3   (W + G + O)/N at rest; in the forward and backward + the parameters of two
    fsdp    wrapped units (the one running and the one prefetched) + the root module's own
            (embeddings, head: FSDP2 keeps the root gathered from forward to backward)

Low-precision copies of the weights (autocast's cached casts in mixed precision) are
sharded like the weights under ZeRO-3/FSDP, which gathers each unit in that precision.

The per-rank peak replays the trace with every parameter, gradient and optimizer-state
storage scaled by its factor, and the optimizer step's temporaries with the optimizer
state's (a rank steps over its shard only), so activations and the forward's and
backward's temporaries stay where they were. Under FSDP2 (zero2, zero3, fsdp) the replay
also follows, unit by unit, what happens between the operators (:func:`fsdp_moments`):
the all-gathers and their buffers, each unit's parameters gathered while it runs, its
gradients whole until its reduce-scatter, and the reduce-scatter's buffers. The table
above (:func:`model_states`, what ``fit`` shows) keeps the coarser figure of
:func:`gather_bytes`. Communication time is :mod:`.comm`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from ...analysis.memory import MemoryPeak, Moment, replay
from ...errors import FootprintError
from ...settings.training import FSDP_STRATEGIES
from ...trace import Trace
from ...trace.records import ModuleInfo
from ..kernels.roofline import master_scale
from .memo import once

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
_FACTORS = {  # (weights, gradients, optimizer state) held by one of N ranks, as powers of 1/N
    "ddp": (0, 0, 0), "zero1": (0, 0, 1), "zero2": (1, 1, 1), "zero3": (1, 1, 1), "fsdp": (1, 1, 1),
}


def shard_factors(strategy: str, n: int) -> dict[str, float]:
    """Fraction of weights, gradients and optimizer state one rank holds."""
    if strategy not in _FACTORS:
        raise FootprintError(f"unknown strategy '{strategy}': use {', '.join(STRATEGIES)}")
    if n < 1:
        raise FootprintError(f"--gpus must be at least 1, got {n}")
    w, g, o = _FACTORS[strategy]
    return {"weights": n ** -w, "gradients": n ** -g, "optimizer state": n ** -o}


def wrap_units(trace: Trace) -> dict[str, int]:
    """Parameter bytes of the units FSDP would wrap (:func:`fsdp_units`; once per trace: not to be changed)."""
    return once(trace, "fsdp units", lambda: fsdp_units(trace.modules))


def root_bytes(trace: Trace) -> int:
    """Parameter bytes of the root module's own, outside every wrapped unit."""
    return max(0, sum(p.nbytes for p in trace.params) - sum(wrap_units(trace).values()))


def gather_bytes(trace: Trace, strategy: str = "zero3") -> int:
    """What FSDP2 holds gathered while the forward and backward run: the two largest wrapped
    units and the root's own parameters (zero3, fsdp), or all of them (zero2)."""
    if strategy == "zero2":
        return sum(p.nbytes for p in trace.params)
    return sum(sorted(wrap_units(trace).values(), reverse=True)[:2]) + root_bytes(trace)


def expert_modules(trace: Trace) -> set[str]:
    """Module paths of the experts' parameters (a module named ``experts`` or inside one)."""
    return {p.module for p in trace.params if ".experts" in f".{p.module}" or p.module.endswith("experts")}


def experts_away(trace: Trace) -> float:
    """The share of the model's parameter bytes held on other expert-parallel ranks: the experts'
    share times (ep-1)/ep."""
    ep = int(trace.settings.get("ep", 1))
    if ep <= 1:
        return 0.0
    experts = expert_modules(trace)
    total = sum(p.nbytes for p in trace.params) or 1
    share = sum(p.nbytes for p in trace.params if p.module in experts) / total
    return share * (1 - 1 / ep)


def expert_grads_away(trace: Trace) -> dict[int, float]:
    """{gradient storage: the share a rank computes} for the experts' gradients under expert
    parallelism: the trace runs every expert, a rank only its own (1/ep of them, their tokens
    from every rank); empty without expert parallelism or where the gradients cannot be matched
    to the parameters. Worked out once per trace (not to be changed)."""
    return once(trace, "experts' gradients away", lambda: _expert_grads_away(trace))


def _expert_grads_away(trace: Trace) -> dict[int, float]:
    ep = int(trace.settings.get("ep", 1))
    grads = trace.tags.get("gradients", [])
    trainable = [p for p in trace.params if p.trainable]
    if ep <= 1 or len(grads) != len(trainable):
        return {}
    experts = expert_modules(trace)
    pre = {uid for uid, *_ in trace.preexisting}  # kept from the step before: shards already
    return {uid: 1 / ep for p, uid in zip(trainable, grads, strict=True) if p.module in experts and uid not in pre}


def pipeline_gathered(trace: Trace, strategy: str) -> int:
    """What FSDP2 in a pipeline keeps beyond its shards through the step, whole model: every
    parameter gathered and its gradient unsharded. torchtitan does not reshard after the forward
    there, and torch.distributed.pipelining's stages hold off resharding after the backward and
    the gradients' reduce-scatter until the last micro-batch (the gradients counted at the traced
    dtype's width). Under expert parallelism a rank gathers only its own experts: the share of the
    experts the other expert-parallel ranks hold (:func:`experts_away`) is left out. 0 for
    the other strategies."""
    if strategy not in FSDP_STRATEGIES:
        return 0
    whole = sum(p.nbytes for p in trace.params) + sum(p.nbytes for p in trace.params if p.trainable)
    return math.ceil(whole * (1 - experts_away(trace)))


@dataclass
class ModelStates:
    """What one rank keeps between steps (bytes)."""

    weights: int
    gradients: int
    optimizer: int
    buffers: int
    extra: int  # DDP's bucket copy of the gradients, or FSDP's gathered parameters
    extra_what: str = ""

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.buffers + self.extra


KINDS = ("weights", "gradients", "optimizer state")
POLICY_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # MixedPrecisionPolicy's dtypes as --fsdp-*-dtype names them


def megatron_scales(low_bytes: int, moments: int, grad_bytes: int = 4) -> dict[str, float]:
    """Megatron-core's mixed precision against a trace of the model in its low dtype (``low_bytes``
    a number, the optimizer holding ``moments`` tensors of it per parameter). Megatron casts the model
    to bf16 or fp16 (``Float16Module``), accumulates each gradient in fp32 (``main_grad``, in the
    contiguous gradient buffer that the data-parallel reduction reads in place) and keeps an fp32 master
    copy beside the optimizer's fp32 moments, which its distributed optimizer shards over the
    data-parallel ranks: with Adam, 2 + 4 + 12 = 18 bytes a parameter, 6 + 12/DP distributed (Megatron-core's
    distributed optimizer documentation). So the weights stay as traced, the gradients are 4/low wider
    and the optimizer state (1 + moments) x 4 / (moments x low); an optimizer with no state (plain SGD)
    keeps the master copy with the weights (then not sharded). ``grad_bytes``: the gradient buffer's
    width, 2 where grad_reduce_in_fp32 is off."""
    grads = grad_bytes / low_bytes
    if moments == 0:
        return {"weights": 1 + 4 / low_bytes, "gradients": grads, "optimizer state": 1.0}
    return {"weights": 1.0, "gradients": grads, "optimizer state": (1 + moments) * 4 / (moments * low_bytes)}


def state_scales(trace: Trace) -> dict[str, float]:
    """How much wider one rank's parameters, gradients and optimizer state are than the traced ones,
    by kind: Megatron-core's (:func:`megatron_scales`, recorded in the trace's settings), else
    :func:`master_scale` for each."""
    given = trace.settings.get("megatron_scales")
    if given:
        return {k: float(given[k]) for k in KINDS}
    m = master_scale(trace)
    return dict.fromkeys(KINDS, m)


def gradient_buffer(trace: Trace, bucket_view: bool) -> bool:
    """Whether the data-parallel reduction reads the gradients in place, with no bucket copy:
    ``gradient_as_bucket_view=True``, or Megatron-core's gradient buffer."""
    return bucket_view or bool(trace.settings.get("megatron_scales"))


def model_states(persistent: dict[str, int], strategy: str, n: int, gather_bytes: int = 0,
                 bucket_view: bool = False, state_scale: float | dict[str, float] = 1.0) -> ModelStates:
    """The per-rank model states of the module docstring's table, from whole-model totals
    (``state_scale``: :func:`state_scales` or :func:`master_scale` of the trace they come from)."""
    scales = state_scale if isinstance(state_scale, dict) else dict.fromkeys(KINDS, state_scale)
    f = {k: v * scales[k] for k, v in shard_factors(strategy, n).items()}
    w, g, o = persistent.get("weights", 0), persistent.get("gradients", 0), persistent.get("optimizer state", 0)
    extra, what = 0, ""
    if strategy in ("ddp", "zero1") and n > 1 and not bucket_view and g:
        extra, what = g, "DDP gradient buckets"
    elif strategy in ("zero2", "zero3", "fsdp") and n > 1:
        extra, what = gather_bytes, "parameters gathered in the forward and backward"
    return ModelStates(weights=math.ceil(w * f["weights"]), gradients=math.ceil(g * f["gradients"]),
                       optimizer=math.ceil(o * f["optimizer state"]), buffers=persistent.get("buffers", 0),
                       extra=extra, extra_what=what)


def rank_peak(trace: Trace, strategy: str = "ddp", n: int = 1, bucket_view: bool = False,
              steady: bool = False) -> MemoryPeak:
    """Peak memory of one rank: the trace replayed with sharded storages (module docstring);
    ``steady``: the steady-state step (optimizer state allocated before it; see :func:`replay`).
    The result keeps ``highs`` (live bytes at every op) for :func:`~.recommend.largest_fitting_batch`."""
    scales = state_scales(trace)
    bucket_view = gradient_buffer(trace, bucket_view)
    fsdp = strategy in FSDP_STRATEGIES  # FSDP2 gathers into storage of its own on one rank too
    if n == 1 and set(scales.values()) == {1.0} and not fsdp:
        return replay(trace, keep_timeline=True, steady=steady)
    f = {k: v * scales[k] for k, v in shard_factors(strategy, n).items()}
    scale: dict[int, float] = {}
    for uid, _, kind in trace.preexisting:
        if kind == "weights":
            scale[uid] = f["weights"]
        elif kind == "gradients":
            scale[uid] = f["gradients"]
    for uid in trace.tags.get("gradients", []):
        scale[uid] = f["gradients"]
    for uid in trace.tags.get("optimizer", []):
        scale[uid] = f["optimizer state"]
    for uid in trace.tags.get("parameter casts", []):  # low-precision copies of weights follow the weights
        scale[uid] = f["weights"]
    # each rank steps the optimizer over the state it holds: the step's temporaries (Adam's
    # denominator, a foreach step's per-tensor lists) are shards of the whole model's too
    for uid in once(trace, "optimizer step's storages",
                    lambda: [u for e in trace.events if e.phase == "optimizer" for u, _ in e.allocs]):
        scale.setdefault(uid, f["optimizer state"])
    extra = 0
    training = bool(trace.settings.get("backward"))
    if strategy in ("ddp", "zero1") and training and not bucket_view:
        extra = sum(p.nbytes for p in trace.params if p.trainable)
    moments = (once(trace, ("fsdp moments", strategy, n), lambda: fsdp_moments(trace, strategy, n))
               if fsdp else [])
    for m in moments:  # a gradient is whole until its unit's reduce-scatter resizes it
        for uid in m.resize:
            scale.pop(uid, None)
    if moments:  # the rank's own experts' gradients only, until then
        scale.update(expert_grads_away(trace))
    return replay(trace, keep_timeline=True, scale={k: v for k, v in scale.items() if v != 1.0}, extra=extra,
                  steady=steady, moments=moments)


def _unit_of(module: str, units: list[str]) -> str:
    """The wrapped unit that owns ``module`` ("" for the root: outside every unit)."""
    return next((u for u in units if module == u or module.startswith(u + ".")), "")


def fsdp_moments(trace: Trace, strategy: str, n: int) -> list[Moment]:
    """What FSDP2 (``fully_shard`` on every unit of :func:`wrap_units`, then on the root)
    holds outside the traced operators, per unit u with W_u parameter and G_u gradient
    bytes, as torch 2.x implements it (torch/distributed/fsdp/_fully_shard/):

    * all-gather (``foreach_all_gather``, _fsdp_collectives.py): one flat output of W_u,
      then ``foreach_all_gather_copy_out`` allocates the unsharded parameters (W_u) before
      the output is freed (gloo's ``_allgather_base`` also stages the output through a
      second flat tensor of W_u): W_u gathered, W_u more for a moment.
    * when: each unit before its first forward operator; the root before the first. With
      ``reshard_after_forward=True`` (zero3, fsdp) each unit is freed after its last forward
      operator and gathered again in the backward, when the one before it in the backward
      order starts (FSDP2 prefetches one unit ahead: ``FSDP::backward_prefetch``),
      and freed after its last backward operator (``post_backward_reshard``). zero2
      (``reshard_after_forward=False``) keeps each from its forward to its post-backward,
      and so does the root under every strategy: fully_shard's default for the root
      (``reshard_after_forward=None``: "False for root modules", _fsdp_state.py's lazy init)
      and torchtitan's for the output head (``reshard_after_forward_policy`` "default" keeps
      ``[norm, output]`` gathered), so the loss runs beside the gathered head. The first
      unit of the backward is prefetched when the root's pre-backward hook fires, on the
      gradient of the root's outputs: after the loss's backward.
    * reduce-scatter (``foreach_reduce``), after u's last backward operator (the root's in
      the final callback, after the backward): autograd made u's gradients whole (G_u),
      and "only after the copy-in finishes can we free the gradients" into the reduce-
      scatter input (G_u); the output (G_u/N) becomes the sharded gradient. The input is
      kept (``reduce_scatter_states``, one buffer: ``reduce_scatter_max_input_buffers``)
      until the next unit's reduce-scatter waits on it, the last until the root's final
      callback (``_root_post_backward_final_callback``) clears them. Gloo's ``_reduce_scatter_base``
      reduces a clone of the input (G_u for a moment), NCCL in place.

    Gradients that exist before the step (kept from the step before) are shards throughout
    and are left out. Empty when the trace's gradients cannot be matched to its trainable
    parameters or the trace has no backward."""
    found = once(trace, "fsdp units' spans", lambda: _unit_spans(trace))
    if found is None:
        return []
    w_of, grads_of, span = found
    away = expert_grads_away(trace)  # the experts other expert-parallel ranks hold: not gathered, not reduced here
    ep = int(trace.settings.get("ep", 1))
    if ep > 1:
        experts, units = expert_modules(trace), sorted(wrap_units(trace), key=len, reverse=True)
        w_of = dict(w_of)
        for p in trace.params:
            if p.module in experts:
                w_of[_unit_of(p.module, units)] -= math.floor(p.nbytes * (1 - 1 / ep))
    out: list[Moment] = []

    def gathered(u: str, first: int, last: int) -> None:
        out.append(Moment(first, "gathered parameters", hold=w_of[u], spike=w_of[u]))
        out.append(Moment(last + 1, "gathered parameters", hold=-w_of[u]))

    backward = sorted((u for u in w_of if (u, "backward") in span), key=lambda u: span[u, "backward"][0])
    for u in w_of:
        fwd, bwd = span.get((u, "forward")), span.get((u, "backward"))
        if fwd is None:
            continue
        if strategy == "zero2" or not u:  # the root: kept from its forward to its backward's end
            gathered(u, fwd[0], bwd[1] if bwd else fwd[1])
            continue
        gathered(u, fwd[0], fwd[1])
        if bwd:
            k = backward.index(u)
            gathered(u, span[backward[k - 1], "backward"][0] if k else bwd[0], bwd[1])
    gloo = trace.settings.get("device", "cpu") == "cpu"
    # under a mixed-precision policy the input is cast to reduce_dtype and the shard kept in the
    # sharded parameter's dtype (master_scale)
    master, wider = master_scale(trace), float(trace.settings.get("fsdp_reduce_scale", 1.0))
    kept = 0
    for u in sorted(grads_of, key=lambda u: span.get((u, "backward"), [0, len(trace.events)])[1]):
        g = math.ceil(sum(b * away.get(uid, 1.0) for uid, b in grads_of[u].items()) * wider)
        if (u, "backward") not in span or not g:
            continue
        at = span[u, "backward"][1] + 1
        shard = {uid: math.ceil(b * master / n) for uid, b in grads_of[u].items()}
        out.append(Moment(at, "reduce-scatter input", hold=g - kept, resize=shard,
                          spike=g if gloo else g - sum(shard.values())))
        kept = g
    if kept:  # the final callback waits on the last one and clears them
        out.append(Moment(span["", "backward"][1] + 1, "reduce-scatter input", hold=-kept))
    return out


Spans = tuple[dict[str, int], dict[str, dict[int, int]], dict[tuple[str, str], list[int]]]


def _unit_spans(trace: Trace) -> Spans | None:
    """What :func:`fsdp_moments` reads of a trace whatever the strategy and shard count: each
    unit's parameter bytes, its gradients' storages made in the step (id: bytes), and its first
    and last event in the forward and the backward (the root's backward from the first module
    operator after the loss's); None where they cannot be matched."""
    grads = trace.tags.get("gradients", [])
    trainable = [p for p in trace.params if p.trainable]
    if len(grads) != len(trainable) or not trace.settings.get("backward"):
        return None
    deepest_first = sorted(wrap_units(trace), key=len, reverse=True)
    owner: dict[str, str] = {}

    def unit_of(module: str) -> str:  # each module's owner looked up once
        if module not in owner:
            owner[module] = _unit_of(module, deepest_first)
        return owner[module]

    pre = {uid for uid, *_ in trace.preexisting}
    allocated: dict[int, int] = {}
    for e in trace.events:
        for uid, nbytes in e.allocs:
            allocated.setdefault(uid, nbytes)
    w_of: dict[str, int] = {}
    for p in trace.params:
        u = unit_of(p.module)
        w_of[u] = w_of.get(u, 0) + p.nbytes
    grads_of: dict[str, dict[int, int]] = {}
    for p, uid in zip(trainable, grads, strict=True):
        if uid not in pre and uid in allocated:
            grads_of.setdefault(unit_of(p.module), {})[uid] = allocated[uid]
    span: dict[tuple[str, str], list[int]] = {}  # (unit, phase) -> [first event, last event]
    for i, e in enumerate(trace.events):
        if e.phase in ("forward", "backward"):
            for u in {unit_of(e.module), ""}:  # the root's forward and backward enclose every unit's
                span.setdefault((u, e.phase), [i, i])[1] = i
    if ("", "backward") in span:  # the root's pre-backward hook fires on its outputs' gradients: after
        # the loss's backward, which runs outside every module, and so does the prefetch it starts
        span["", "backward"][0] = next((i for i in range(span["", "backward"][0], span["", "backward"][1] + 1)
                                        if trace.events[i].phase == "backward" and trace.events[i].module),
                                       span["", "backward"][0])
    return w_of, grads_of, span


def fsdp_copy_bytes(trace: Trace, strategy: str, n: int, param_dtype: str | None = None,
                    reduce_dtype: str | None = None, away: float = 0.0) -> int:
    """Device bytes FSDP2's own copy kernels move in one micro-batch's step, beside the
    collectives (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), per parameter of s
    bytes as stored, g as gathered (``param_dtype``) and r as reduced (``reduce_dtype``):

    * each all-gather: the copy-in casts the shard into the gathered dtype (s/n read, g/n
      written), the copy-out splits the output into the unsharded parameters (g read, g
      written); a unit that reshards after its forward gathers again in the backward, the
      root (kept, :func:`fsdp_moments`) and every unit under zero2 once;
    * each reduce-scatter: the copy-in (``chunk_cat``) casts the gradients into the reduce
      dtype (g read, r written).

    ``away``: the share of the model's parameters other expert-parallel ranks hold (experts,
    inside the wrapped blocks): neither gathered nor reduced here.

    On an H100 (one rank, Llama-3-8B's blocks under a bf16/fp32 policy) the copy and cast
    kernels came to 1.6 ms per block more than the same step under autocast, whose own
    weight casts (6 bytes a parameter) the trace holds: 2.0 ms, where these 26 bytes a
    parameter take 1.9 ms at the measured 3 TB/s."""
    numel = sum(p.numel for p in trace.params)
    if not numel:
        return 0
    per_elem = sum(p.nbytes for p in trace.params) / numel  # as traced
    s = per_elem * master_scale(trace)
    g = POLICY_BYTES[param_dtype] if param_dtype else s
    r = POLICY_BYTES[reduce_dtype] if reduce_dtype else g
    units = sum(wrap_units(trace).values()) / per_elem
    root = numel - units
    units -= away * numel
    gather = s / n + g / n + 2 * g
    twice = 1 if strategy == "zero2" else 2
    trainable = sum(p.numel for p in trace.params if p.trainable) - away * numel
    return round(units * twice * gather + root * gather + trainable * (g + r))


def step_peak(trace: Trace, strategy: str = "ddp", n: int = 1, bucket_view: bool = False) -> MemoryPeak:
    """The larger of one rank's first-step peak and its steady-state peak: what a run needs."""
    first = rank_peak(trace, strategy, n, bucket_view)
    if not trace.tags.get("optimizer"):
        return first
    steady = rank_peak(trace, strategy, n, bucket_view, steady=True)
    return steady if steady.peak_bytes > first.peak_bytes else first


def fsdp_units(modules: list[ModuleInfo]) -> dict[str, int]:
    """Parameter bytes of the units FSDP wraps (``fully_shard`` on each, then on the root):
    the items of the deepest repeated container (ModuleList/Sequential: a model's blocks),
    else the model's top-level children."""
    subtree: dict[str, int] = {}
    for m in modules:
        parts = m.path.split(".") if m.path else []
        for i in range(len(parts) + 1):
            key = ".".join(parts[:i])
            subtree[key] = subtree.get(key, 0) + m.param_bytes
    containers = [m for m in modules if m.type in ("ModuleList", "Sequential") and m.path]
    units: dict[str, int] = {}
    if containers:
        deepest = max(c.depth for c in containers)
        for c in containers:
            if c.depth == deepest or not units:
                pre = c.path + "."
                for m in modules:
                    if m.path.startswith(pre) and "." not in m.path[len(pre):]:
                        units[m.path] = subtree.get(m.path, 0)
    if not units:
        units = {m.path: subtree.get(m.path, 0) for m in modules if m.path and "." not in m.path}
    return units


def modules_of(model: nn.Module) -> list[ModuleInfo]:
    """A built model's modules as a trace lists them (path, type, depth, parameters owned directly)."""
    out, seen = [], set()
    for path, m in model.named_modules():
        own = [p for p in m.parameters(recurse=False) if id(p) not in seen]
        seen.update(id(p) for p in own)
        out.append(ModuleInfo(path=path, type=type(m).__name__, depth=0 if not path else path.count(".") + 1,
                              params=sum(p.numel() for p in own),
                              param_bytes=sum(p.numel() * p.element_size() for p in own)))
    return out
