"""Language models served: the serving trace (a prefill and decode steps with the model's own
cache, :mod:`.trace`), weight and cache storage schemes (:mod:`.quantization`) and their
pricing on every accelerator (:mod:`.pricing`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ...errors import FootprintError
from ...hardware import Accelerator
from ...settings import Parallel, Plan, Serving, Simulation, Target, Workload
from .fleet import FleetPlan
from .packed import AttentionShape
from .pricing import LlmResult, Priced, serve
from .quantization import activation_dtype, checkpoint_scheme, kv_scheme, weight_scheme
from .serving_sim import Asked, parse_rates
from .trace import ServingTrace, trace_serving

DEFAULT_BATCH = 1
DEFAULT_PROMPT = 1024
DEFAULT_OUTPUT = 256

__all__ = ["DEFAULT_BATCH", "DEFAULT_OUTPUT", "DEFAULT_PROMPT", "default_lengths", "plan_serving", "serve_model",
           "weight_scheme"]


def default_lengths(prompt: int | None, output: int | None, most: int | None) -> tuple[int, int, str | None]:
    """The prompt and output lengths to price: those given, and for those not given the defaults
    (1,024 + 256), fitted within the model's ``most`` positions where it has a maximum: both
    halved together while neither is given, else what the given one leaves. Returns (prompt,
    output, a note saying what was fitted, or None)."""
    p, o = prompt or DEFAULT_PROMPT, output or DEFAULT_OUTPUT
    if not most or p + o <= most or (prompt is not None and output is not None):
        return p, o, None
    if prompt is None and output is None:
        while p + o > most and o > 1:
            p, o = max(p // 2, 1), max(o // 2, 1)
    elif prompt is None:
        p = max(most - o, 1)
    else:
        o = max(most - p, 1)
    given = f"the default prompt {DEFAULT_PROMPT:,} + output {DEFAULT_OUTPUT:,}" if prompt is None and output is None \
        else f"the default {'prompt' if prompt is None else 'output'}"
    return p, o, (f"{given} would pass the model's maximum of {most:,} positions: priced at prompt {p:,} + output "
                  f"{o:,} (set --prompt and --output to choose)")


KNOBS = ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "block_size",
         "mem_fraction_static", "kv_cache_free_gpu_memory_fraction", "ctx_size", "ubatch_size", "num_scheduler_steps",
         "enable_chunked_prefill", "enable_mixed_chunk")


def engine_knobs(s: Serving) -> dict[str, float]:
    """The engine knobs given, checked against the engine's own (one it lacks is an error)."""
    from ...hardware.engines import profile, profiles, release

    given = {k: getattr(s, k) for k in KNOBS if getattr(s, k) is not None}
    if s.engine_version is not None:
        if s.engine is None:
            raise FootprintError("--engine-version goes with --engine NAME")
        if release(s.engine_version) is None:
            raise FootprintError(f"--engine-version must name a release such as 0.6.4, got '{s.engine_version}'")
    if not given:
        return {}
    if s.engine is None:
        owners = [p.name for p in profiles().values() if any(p.takes(k) for k in given)]
        raise FootprintError(f"--{next(iter(given)).replace('_', '-')} is an engine's knob: add --engine "
                             f"{' or --engine '.join(owners) or 'NAME'}")
    p = profile(s.engine)
    for k in given:
        if not p.takes(k):
            raise FootprintError(f"{p.title} has no --{k.replace('_', '-')} (its knobs: "
                                 f"{', '.join('--' + n.replace('_', '-') for n in p.knobs if 'small' not in n)})")
    return {k: float(v) for k, v in given.items() if k != "max_model_len"}


def asked(s: Serving, sim: Simulation, priced: Priced) -> Asked:
    """The simulation asked (the lengths are set again once fitted to the model)."""
    from .requests import distributions, read_trace

    if sim.lengths != "fixed" and sim.lengths not in distributions():
        raise FootprintError(f"no length distribution '{sim.lengths}' (shipped: fixed, {', '.join(distributions())})")
    if sim.request_trace:
        read_trace(sim.request_trace)  # a malformed file refused before the model is traced
    slo_ttft, slo_tpot = sim.slos()
    return Asked(priced.prompt, priced.output, s.concurrency, s.num_prompts,
                 parse_rates(sim.request_rate) if sim.request_rate else None, sim.lengths, sim.request_trace, sim.seed,
                 slo_ttft, slo_tpot, sim.prefix_hit_rate, sim.num_speculative_tokens, sim.acceptance_rate,
                 sim.pools() if sim.disaggregate else None)


def _prepared(w: Workload, s: Serving, p: Parallel, target: Target, sim: Simulation,
              progress: Callable[[str], None] | None) -> tuple[ServingTrace, Priced, list[str]]:
    """The model traced for serving and what is priced, its lengths fitted to the model's maximum;
    the notes on what was fitted."""
    tp = p.tp or p.gpus
    if p.gpus % tp:
        raise FootprintError(f"--gpus must be a multiple of --tp (both at least 1), got gpus {p.gpus}, tp {tp}")
    scheme = weight_scheme(s.quant) if s.quant else None
    knobs = engine_knobs(s)
    prompt, output, _ = default_lengths(s.prompt, s.output, None)
    priced = Priced(batch=w.batch or DEFAULT_BATCH, prompt=prompt, output=output, weights=scheme,
                    weights_given=scheme is not None,
                    kv_bytes=kv_scheme(s.kv) if s.kv else None, kv_name=s.kv, gpus=p.gpus, tp=tp, engine=s.engine,
                    chunk=s.chunk, knobs=knobs, max_model_len=s.max_model_len, engine_version=s.engine_version,
                    simulate=(s.concurrency, s.num_prompts or 10 * s.concurrency) if s.simulate else None,
                    prices=target.price)
    check_context(priced, None, s.allow_longer)
    fitted: list[str] = []

    def fit_lengths(most: int | None) -> int:
        """The lengths within the model's maximum (defaults fitted; given ones checked)."""
        if not s.allow_longer:
            priced.prompt, priced.output, note = default_lengths(s.prompt, s.output, most)
            fitted.extend([note] if note else [])
        check_context(priced, most, s.allow_longer)
        if s.max_model_len and most and s.max_model_len > most and not s.allow_longer:
            raise FootprintError(f"--max-model-len {s.max_model_len:,} is greater than the model's maximum of "
                                 f"{most:,} positions (max_position_embeddings): {s.engine or 'the engine'} refuses "
                                 "it; lower it, or pass --allow-longer")
        return priced.prompt

    if s.simulate or sim.asked:
        priced.sim = asked(s, sim, priced)
    dtype = activation_dtype(scheme)
    st = trace_serving(w.model, batch=1, prompt=prompt, dtype=dtype, trust_remote_code=w.trust_remote_code,
                       on_step=progress, check_context=fit_lengths, reuse=w.reuse, attention=w.attention)
    if scheme is None:
        priced.weights = checkpoint_scheme(st.config)
    if priced.sim is not None:
        priced.sim.prompt, priced.sim.output = priced.prompt, priced.output
        priced.sim.most = s.max_model_len or st.max_context
        priced.sim.attention = attention_shape(st)
        if sim.speculative_model:  # the draft: its weights and cache per token, as traced
            d = trace_serving(sim.speculative_model, batch=1, prompt=min(priced.prompt, 128), dtype=dtype,
                              trust_remote_code=w.trust_remote_code, on_step=progress, reuse=w.reuse)
            priced.sim.draft = (sum(p.nbytes for p in d.prefill.params) + sum(b.nbytes for b in d.prefill.buffers),
                                float(d.kv_bytes_per_token), d.name)
    return st, priced, fitted


def serve_model(w: Workload, s: Serving, p: Parallel = Parallel(), target: Target = Target(),
                progress: Callable[[str], None] | None = None, sim: Simulation | None = None) -> LlmResult:
    """What ``w``'s causal language model needs to serve ``s`` on ``p.gpus`` per replica
    (``p.tp``-way tensor parallel, default all of them) on the target's accelerators (every one
    with a bandwidth figure when none is named; with ``s.measure`` this machine's device too)."""
    from ...hardware.catalog import load, local_accelerator
    from ...hardware.db import find

    st, priced, fitted = _prepared(w, s, p, target, sim or Simulation(), progress)
    rows = load(target.hardware)
    wanted: list[Accelerator] = []
    if s.measure:
        local = local_accelerator(target.device or "cpu")
        wanted = [local] if local is not None else []
    if target.gpu:
        wanted += [find(rows, g) for g in target.gpu]
    elif not s.measure:
        wanted = [a for a in rows if a.bandwidth_gbs is not None or a.calibrated]
    wider = _loaded_in_fp32(st, priced, wanted, s)
    res = serve(st, priced, [a for a in wanted if id(a) not in wider],
                max_context=None if s.allow_longer else st.max_context, efficiency=target.efficiencies)
    res.notes[:0] = fitted
    if wider:
        _price_in_fp32(res, wanted, wider, priced, w, s, target, progress)
    for row in res.rows:
        if row.vllm is not None and row.vllm.error:
            if len(res.rows) == 1:  # the one accelerator asked for: the engine would not start
                raise FootprintError(f"on {row.accelerator.id}, {row.vllm.error}")
            row.notes.append(row.vllm.error)
    if s.measure and not wanted:
        res.notes.append(f"no prediction for {target.device or 'cpu'}: run `footprint calibrate` first to measure "
                         "its rates")
    return res


def _loaded_in_fp32(st: ServingTrace, priced: Priced, wanted: list[Accelerator], s: Serving) -> dict[int, str]:
    """The accelerators (by id) the engine loads the checkpoint on in fp32, with the engine's name: a
    bf16 checkpoint of a model type fp16 is unstable for, on a GPU without bf16 units
    (EngineProfile.loads_in). A dtype given with --quant is the engine's --dtype: as given."""
    from ...hardware.engines import profile

    if not s.engine or priced.weights_given:
        return {}
    speed, kind = profile(s.engine), getattr(st.config, "model_type", "")
    return {id(a): speed.title for a in wanted if speed.loads_in(st.dtype, kind, a) == "fp32"}


def _price_in_fp32(res: LlmResult, wanted: list[Accelerator], wider: dict[int, str], priced: Priced, w: Workload,
                   s: Serving, target: Target, progress: Callable[[str], None] | None) -> None:
    """The rows of ``wider``, priced from the model traced in fp32, put among ``res``'s in the order
    the accelerators were asked for."""
    st32 = trace_serving(w.model, batch=1, prompt=priced.prompt, dtype="float32", trust_remote_code=w.trust_remote_code,
                         on_step=progress, reuse=w.reuse, attention=w.attention)
    got = serve(st32, dataclasses.replace(priced, weights=weight_scheme("fp32")),
                [a for a in wanted if id(a) in wider], max_context=None if s.allow_longer else st32.max_context,
                efficiency=target.efficiencies)
    kind = getattr(st32.config, "model_type", "")
    for row in got.rows:
        row.notes.append(f"no bf16 units: {wider[id(row.accelerator)]} loads {kind} in fp32 here (fp16 is unstable "
                         "for it): priced in fp32")
    by_acc = {id(row.accelerator): row for row in [*res.rows, *got.rows]}
    res.rows = [by_acc[id(a)] for a in wanted]


def plan_serving(w: Workload, s: Serving, p: Parallel, target: Target, sim: Simulation, settings: Plan,
                 progress: Callable[[str, float | None], None] | None = None) -> FleetPlan:
    """The fleets that serve ``sim.request_rate`` within the latency targets, cheapest first
    (:mod:`.fleet`): one trace of the model, every candidate replica simulated at its share."""
    from .fleet import ENGINES, REQUESTS, plan_fleet
    from .requests import timed

    if not sim.request_rate:
        raise FootprintError("plan --serve sizes a fleet for a request rate: give --request-rate R (requests per "
                             "second to the whole fleet)")
    rates = parse_rates(sim.request_rate)
    if len(rates) != 1 or rates[0] == float("inf"):
        raise FootprintError(f"plan --serve takes one finite --request-rate (the fleet's traffic), got "
                             f"'{sim.request_rate}'")
    if sim.slo_ttft is None and sim.slo_tpot is None:
        raise FootprintError("plan --serve needs a latency target: --slo-ttft and/or --slo-tpot (e.g. --slo-ttft "
                             "500ms --slo-tpot 50ms)")
    if sim.request_trace and timed(sim.request_trace):
        raise FootprintError("plan --serve spreads --request-rate over the replicas: give a trace of lengths "
                             "without send times")
    say = progress or (lambda message, fraction=None: None)
    st, priced, fitted = _prepared(w, s, dataclasses.replace(p, gpus=1, tp=1), target, sim,
                                   lambda m: say(m, None))
    assert priced.sim is not None  # asked: a rate was given
    base = dataclasses.replace(priced.sim, num_prompts=s.num_prompts or REQUESTS)
    res = plan_fleet(st, priced, base, rate=rates[0], gpus=target.gpu, hardware=target.hardware,
                     engines=(s.engine,) if s.engine else ENGINES, tp=p.tp, gpus_per_node=p.gpus_per_node,
                     most_gpus=p.gpus if p.gpus > 1 else None, target=settings.attainment, prices=target.price,
                     efficiency=target.efficiencies, progress=progress)
    res.notes[:0] = fitted
    res.notes.append(f"each point simulates {base.num_prompts} requests (--num-prompts)")
    return res


def attention_shape(st: ServingTrace) -> AttentionShape | None:
    """The model's attention as an engine that packs it runs it: heads, key-value heads and head
    size from its (text) config, one layer per cached layer; None where the config does not say."""
    cfg = getattr(st.config, "text_config", None) or st.config
    heads = getattr(cfg, "num_attention_heads", None)
    if not heads or not st.layers:
        return None
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    dim = getattr(cfg, "head_dim", None) or getattr(cfg, "hidden_size", 0) // heads
    return AttentionShape(int(heads), int(kv), int(dim), len(st.layers), st.dtype) if dim and heads % kv == 0 \
        else None


def check_context(serving: Priced, max_context: int | None, allow_longer: bool) -> None:
    if serving.batch < 1 or serving.prompt < 1 or serving.output < 1:
        raise FootprintError(f"batch, prompt and output must be at least 1, got {serving.batch}, "
                             f"{serving.prompt}, {serving.output}")
    if max_context and serving.context > max_context and not allow_longer:
        raise FootprintError(f"a context of {serving.context:,} tokens (prompt {serving.prompt:,} + output "
                             f"{serving.output:,}) is beyond the model's maximum of {max_context:,}: shorten it, "
                             "or pass --allow-longer")
