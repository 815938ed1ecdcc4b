"""A language model traced as an engine serves it: a prefill of P tokens, then decode steps with the model's own
cache object: the one it builds and returns when a prefill asks for a cache and gives none, as ``generate`` lets
it (transformers' ``DynamicCache`` built from the config, or a cache class of the model's own). A model that
returns no cache (an encoder's language-model head) is declined: it has no decode step to price. A forward that
reads a tensor's value on the way (a padding mask of ones it built itself, a router) is traced on real CPU
tensors with random weights, where the parameters fit the tracer's real-run limit.

What the cache holds comes from its storages (each whole: a windowed layer's slice keeps its step's
concatenation alive), layer by layer and outside the layers, after each of two decode steps: the bytes a token
adds to a layer (the slope), what a layer keeps whatever the length (a state-space layer's state), and the most
tokens a layer keeps (a sliding-window layer's window, from the layer's own ``get_max_cache_shape()``). A config
whose fields contradict each other gets what the model builds from it.

The two decode steps run at cache lengths P and P + 1 with the same operators; every operator's FLOPs and bytes
are affine in the cache length, so the two traces give each operator's exact line, evaluated at any length by
:meth:`ServingTrace.decode_at`. Two conventions of serving engines (vLLM, TensorRT-LLM, llama.cpp) replace
transformers' eager code there, and are stated in the notes:

* the cache is written in place (a preallocated or paged cache): transformers' growing concatenations and
  grouped-query copies (``repeat_kv``) are counted for the new token only;
* attention reads each cached byte once per step (grouped-query kernels read a key/value head once for all its
  query heads).

Multi-head latent attention (DeepSeek-V2/V3): engines cache the compressed latent (the output of
``kv_a_proj_with_mqa``: ``kv_lora_rank + qk_rope_head_dim`` values per token and layer), not the per-head keys
and values transformers keeps; the latent is what is counted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import torch
from torch import nn

from ...dtypes import name_of
from ...errors import FootprintError
from ...sources import prepare
from ...trace import trace_model
from ...trace.records import OpEvent, Trace
from ...trace.setups import use_attention
from ...trace.step import StepOptions
from ...trace.tracer import REAL_FALLBACK_LIMIT, meta_specific
from ..kernels.sdpa import ATTENTION_KERNELS
from ..layouts.pipeline import EXPERT_COUNT_KEYS
from ..workload import fused_attention_step
from .cache import CacheLayer, Latent, cache_layers, latents, storage_bytes
from .experts import group_experts
from .quantization import unquantized_dtype

CACHE_KWARGS = ("cache", "past_key_values", "cache_params")  # transformers models' cache argument (5.x: cache)
EXPERT_TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts", "moe_top_k")
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts model's routing: experts per layer and experts per token."""

    count: int
    top_k: int
    params: frozenset[int]  # indices into Trace.params of the routed experts' parameters

    def touched(self, tokens: int) -> float:
        """Expected distinct experts that ``tokens`` tokens reach in one layer, under uniform
        routing (each token picks ``top_k`` distinct experts, independently of the others)."""
        if tokens <= 0:
            return 0.0
        return self.count * (1.0 - (1.0 - self.top_k / self.count) ** tokens)

    def fractions(self, tokens: int) -> dict[int, float]:
        """Per routed expert parameter, the fraction of it a step of ``tokens`` tokens reads."""
        return dict.fromkeys(self.params, self.touched(tokens) / self.count)


@dataclass
class ServingTrace:
    """A prefill and two decode steps of a causal language model, with its cache's layout."""

    name: str
    batch: int
    prompt: int
    dtype: str
    prefill: Trace
    decode: tuple[Trace, Trace]  # at cache lengths prompt and prompt + 1
    layers: list[CacheLayer]
    op_layer: list[int | None]  # the cache layer each decode operator belongs to
    experts: Experts | None
    latents: dict[int, Latent]
    roles: dict[int, str]  # parameter index -> "embedding" or "head" (the input and output embeddings)
    max_context: int | None
    hidden_size: int | None
    notes: list[str] = field(default_factory=list)
    config: Any = None  # the model's config (transformers), as built

    @property
    def params(self) -> int:
        return sum(p.numel for p in self.prefill.params)

    def kv_bytes(self, tokens: int, batch: int = 1) -> int:
        """Cache bytes of ``batch`` sequences of ``tokens`` tokens each."""
        return batch * sum(layer.bytes_at(tokens) for layer in self.layers)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one more token adds to one sequence's cache (layers below their cap)."""
        return sum(layer.per_token for layer in self.layers)

    def decode_at(self, cache_len: int, engine: bool = True, kv_ratio: float = 1.0) -> Trace:
        """The decode step at the traced batch over ``cache_len`` cached tokens, every operator
        on its line between the two traced steps (capped layers stop at their cap). ``engine``:
        with the serving engines' conventions (module docstring); without, as transformers'
        eager code runs it (what ``--measure`` times). ``kv_ratio``: the cache stored at this
        fraction of the traced bytes (an fp8 cache of a bf16 model: 0.5), so attention reads
        and the new token's write move that many bytes (engines only)."""
        a, b = self.decode
        if not engine:
            return replace(a, events=[_on_line(ea, eb, cache_len - self.prompt)
                                      for ea, eb in zip(a.events, b.events, strict=True)])
        events: list[OpEvent] = []
        for i, (ea, eb) in enumerate(zip(a.events, b.events, strict=True)):
            layer = self.op_layer[i]
            cap = self.layers[layer].cap if layer is not None else None
            grows = ea.bytes_read + ea.bytes_written != eb.bytes_read + eb.bytes_written or ea.flops != eb.flops
            if not grows:
                events.append(ea)
                continue
            length = cache_len if cap is None else min(cache_len, cap)
            steps = length - self.prompt
            if ea.kind in ("data", "view"):  # the cache written in place: the new token only
                events.append(_new_token_only(ea, eb, kv_ratio))
                continue
            dflops, dmacs = eb.flops - ea.flops, eb.macs - ea.macs
            if layer in self.latents and ea.kind == "matrix":  # absorbed latent attention (module docstring)
                dmacs = self.batch * self.latents[layer].macs_per_token // self._share(layer)
                dflops = 2 * dmacs
            flops = ea.flops - self.prompt * (eb.flops - ea.flops) + length * dflops
            macs = ea.macs - self.prompt * (eb.macs - ea.macs) + length * dmacs
            events.append(replace(ea, flops=max(flops, 0), macs=max(macs, 0),
                                  bytes_read=self._read_at(layer, length, ea, eb, kv_ratio),
                                  bytes_written=ea.bytes_written + steps * (eb.bytes_written - ea.bytes_written)))
        return replace(a, events=events)

    def _read_at(self, layer: int | None, length: int, ea: OpEvent, eb: OpEvent, kv_ratio: float = 1.0) -> int:
        """An attention operator's reads at ``length`` cached tokens: what it reads besides the
        cache (from the trace) plus the layer's cache once, in its storage (see the module
        docstring)."""
        if layer is None:
            return ea.bytes_read + (length - self.prompt) * (eb.bytes_read - ea.bytes_read)
        share = self._share(layer)
        slope = eb.bytes_read - ea.bytes_read
        other = ea.bytes_read - slope * self.prompt  # the traced read at zero cache length
        return max(other, 0) + int(self.batch * self.layers[layer].bytes_at(length) * kv_ratio) // share

    @cached_property
    def _growing_matrix_ops(self) -> dict[int, int]:
        """Per cache layer, the matrix operators whose reads grow with the cache (attention)."""
        out: dict[int, int] = {}
        a, b = self.decode
        for layer, ea, eb in zip(self.op_layer, a.events, b.events, strict=True):
            if layer is not None and ea.kind == "matrix" and ea.bytes_read != eb.bytes_read:
                out[layer] = out.get(layer, 0) + 1
        return out

    def _share(self, layer: int) -> int:
        """How many operators share one layer's cache read (and its latent attention's work)."""
        return max(self._growing_matrix_ops.get(layer, 1), 1)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.name, "batch": self.batch, "prompt": self.prompt, "dtype": self.dtype,
                "kv_bytes_per_token": self.kv_bytes_per_token, "layers": [la.to_dict() for la in self.layers],
                "experts": None if self.experts is None else {"count": self.experts.count,
                                                              "top_k": self.experts.top_k},
                "max_context": self.max_context, "notes": self.notes}


def _on_line(ea: OpEvent, eb: OpEvent, steps: int) -> OpEvent:
    """``ea`` moved ``steps`` tokens along the line through ``ea`` and ``eb`` (one token apart)."""
    if steps == 0 or (ea.flops == eb.flops and ea.bytes_read == eb.bytes_read
                      and ea.bytes_written == eb.bytes_written):
        return ea
    return replace(ea, flops=max(ea.flops + steps * (eb.flops - ea.flops), 0),
                   macs=max(ea.macs + steps * (eb.macs - ea.macs), 0),
                   bytes_read=max(ea.bytes_read + steps * (eb.bytes_read - ea.bytes_read), 0),
                   bytes_written=max(ea.bytes_written + steps * (eb.bytes_written - ea.bytes_written), 0))


def _new_token_only(ea: OpEvent, eb: OpEvent, kv_ratio: float = 1.0) -> OpEvent:
    """A cache update at the cost of writing the new token (in the cache's storage): what the
    second step wrote beyond the first."""
    grew = max(eb.bytes_written - ea.bytes_written, 0)
    new = int((grew if grew else min(ea.bytes_written, eb.bytes_written)) * kv_ratio)
    return replace(ea, bytes_read=new, bytes_written=new)


def _config_int(config: Any, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = getattr(config, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def text_config(model: nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        return config.get_text_config(decoder=True)
    return config


def output_embeddings(model: nn.Module) -> nn.Module | None:
    """The model's output head: ``get_output_embeddings()``, or where that answers None (a
    multimodal wrapper whose head sits in its language model) a linear module named ``lm_head``."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None:
        head = next((mod for name, mod in model.named_modules()
                     if name.split(".")[-1] == "lm_head" and isinstance(mod, nn.Linear)), None)
    return head


def cache_argument(model: nn.Module) -> str:
    """The name under which ``model``'s forward takes its cache; a clear error if it takes none."""
    params = inspect.signature(model.forward).parameters
    kw = next((k for k in CACHE_KWARGS if k in params), None)
    config = getattr(model, "config", None)
    if (kw is None or config is None or getattr(config, "is_encoder_decoder", False)
            or output_embeddings(model) is None):
        raise FootprintError(f"'{type(model).__name__}' is not a causal language model with a cache (a Hugging "
                             "Face *ForCausalLM): `footprint llm` serves decoder language models")
    return kw


def last_logits_only(model: nn.Module) -> dict[str, int]:
    """The keyword that makes ``model`` compute the last position's logits only, as transformers'
    generate() and serving engines do in a prefill; empty where its forward has none."""
    params = inspect.signature(model.forward).parameters
    return next(({k: 1} for k in ("logits_to_keep", "num_logits_to_keep") if k in params), {})


def _experts(trace: Trace, config: Any) -> Experts | None:
    params = frozenset(i for i, p in enumerate(trace.params) if "experts" in p.name.split("."))
    if not params:
        return None
    ffn = getattr(config, "ffn_config", None)  # DBRX keeps its experts' settings in a sub-config
    count = _config_int(config, EXPERT_COUNT_KEYS) or _config_int(ffn, EXPERT_COUNT_KEYS)
    top_k = _config_int(config, EXPERT_TOPK_KEYS) or _config_int(ffn, EXPERT_TOPK_KEYS)
    if count is None or top_k is None:
        return None
    return Experts(count, min(top_k, count), params)


def _layer_paths(model: nn.Module) -> list[tuple[str, int]]:
    """Module paths that belong to one cache layer (modules with an integer ``layer_idx``),
    longest first."""
    out = [(p, m.layer_idx) for p, m in model.named_modules()
           if isinstance(getattr(m, "layer_idx", None), int) and p]
    return sorted(out, key=lambda x: -len(x[0]))


def _op_layers(trace: Trace, paths: list[tuple[str, int]], layers: int) -> list[int | None]:
    """The cache layer of each operator (None outside the ``layers`` layers of the cache: a
    cache class of the model's own may number only its attention layers)."""
    memo: dict[str, int | None] = {}
    out: list[int | None] = []
    for e in trace.events:
        if e.module not in memo:
            idx = next((idx for p, idx in paths if e.module == p or e.module.startswith(p + ".")), None)
            memo[e.module] = idx if idx is not None and idx < layers else None
        out.append(memo[e.module])
    return out


def _check_windows(m: nn.Module, kw: str, layers: list[CacheLayer], batch: int, real: bool) -> list[str]:
    """Run the model past its longest window (a prefill of window + 1 tokens, one decode step,
    without tracing) and keep a window only where the layer then holds what the window says:
    a layer may keep its whole prompt and window only the tokens it generates (reference
    sliding-window attention), which the two traced steps cannot tell apart. A layer whose
    window does not hold is counted without it (an upper bound). Returns notes."""
    caps = [la.cap for la in layers if la.cap]
    if not caps:
        return []
    if real:  # the model's values mattered on the way: no meta run to check with
        return ["the sliding windows are taken as the cache layers state them (not checked past the window: "
                "the model was traced on real tensors)"]
    length = max(caps) + 1
    device = next((p.device for p in m.parameters()), torch.device("meta"))
    try:
        ids = torch.zeros(batch, length, dtype=torch.long, device=device)
        out = m(input_ids=ids, use_cache=True, **last_logits_only(m))
        cache = getattr(out, kw, None)
        m(input_ids=torch.zeros(batch, 1, dtype=torch.long, device=device), use_cache=True, **{kw: cache})
        held = [storage_bytes(layer) for layer in cache.layers]
    except Exception as e:  # noqa: BLE001 - any failure leaves the windows as the layers state them
        return [f"the sliding windows are taken as the cache layers state them (a run past the window failed: "
                f"{type(e).__name__})"]
    notes = []
    for i, la in enumerate(layers):
        if la.cap and i < len(held) and held[i] != batch * la.bytes_at(length + 1):
            layers[i] = replace(la, cap=None)
            notes.append(f"layer {i} ({la.kind}) says it keeps at most {la.cap} tokens but held "
                         f"{held[i] // batch:,} bytes per sequence after {length + 1} (a window would hold "
                         f"{la.bytes_at(length + 1):,}): counted without the window, an upper bound")
    return notes[:1] + ([f"... and {len(notes) - 1} more such layers"] if len(notes) > 1 else [])


class NoCache(FootprintError):
    """The model returned no cache from a prefill that asked for one."""


def _trace_steps(m: nn.Module, kw: str, name: str, batch: int, prompt: int, meta: list[dict[str, Any]],
                 tensors: str, step: Callable[[str], None], reuse: bool = True, options: StepOptions | None = None
                 ) -> tuple[Trace, tuple[Trace, Trace], Any, tuple[list[int], list[int]]]:
    """The prefill (no cache given: the model builds its own, as ``generate`` lets it, and
    returns it) and two decode steps with that cache; the cache's bytes after each decode step."""
    cache: Any = None
    returned: list[Any] = []

    def capture(_mod: nn.Module, _args: Any, out: Any) -> None:
        returned.append(out)

    def make(tokens: int) -> Callable[[str], tuple[tuple[Any, ...], dict[str, Any]]]:
        def inputs(device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
            ids = torch.zeros(batch, tokens, dtype=torch.long, device=device)
            if cache is None:
                return (), {"input_ids": ids, "use_cache": True, **last_logits_only(m)}
            return (), {"input_ids": ids, "use_cache": True, kw: cache}
        return inputs

    def sizes() -> list[int]:
        """Bytes of each cache layer, then of what the cache holds outside them."""
        per = [storage_bytes(layer) for layer in cache.layers]
        return [*per, max(storage_bytes(cache) - sum(per), 0)]

    one = [{**meta[0], "shape": [batch, 1]}]
    hook = m.register_forward_hook(capture)
    try:
        step(f"tracing the prefill ({batch} x {prompt} tokens)")
        pre = trace_model(m, make(prompt), name=name, inputs_meta=meta, tensors=tensors, reuse=reuse, step=options)
        out = returned[-1] if returned else None
        cache = next((getattr(out, k) for k in CACHE_KWARGS if getattr(out, k, None) is not None), None)
        if cache is None or not hasattr(cache, "layers"):
            raise NoCache(f"'{type(m).__name__}' returned no cache from a prefill with use_cache=True: its decode "
                          "would recompute the whole sequence. `footprint llm` serves decoder language models that "
                          "return their cache (an encoder's language-model head does not; RecurrentGemma keeps its "
                          "state in its own modules)")
        step("tracing two decode steps")
        d1 = trace_model(m, make(1), name=name, inputs_meta=one, tensors=tensors, reuse=reuse, step=options)
        s1 = sizes()
        d2 = trace_model(m, make(1), name=name, inputs_meta=one, tensors=tensors, reuse=reuse, step=options)
        s2 = sizes()
    finally:
        hook.remove()
    return pre, (d1, d2), cache, (s1, s2)


def trace_serving(model: nn.Module | str, *, batch: int, prompt: int, dtype: str | None = None,
                  trust_remote_code: bool = False, on_step: Callable[[str], None] | None = None,
                  check_context: Callable[[int | None], int | None] | None = None, reuse: bool = True,
                  attention: str | None = None) -> ServingTrace:
    """Trace a prefill of ``batch`` x ``prompt`` tokens and two decode steps with the model's cache, built
    in ``dtype`` (default the config's, or a quantized checkpoint's 16-bit one). ``check_context(max_context)``
    runs once the model is built, before any trace (a prompt beyond learned position embeddings fails inside
    the model otherwise); where it returns a number, that is the prompt traced (a default length fitted to the
    model's maximum). ``reuse``: repeated layers replay a traced one's operators and cache writes where
    provably equal. ``attention`` (``--attention``): the model's attention run as transformers'
    ``attn_implementation`` says, or every layer as one fused kernel (a kernel named is priced as that
    kernel: FlashAttention-2 or -3, cuDNN's), as engines run it."""
    if batch < 1 or prompt < 1:
        raise FootprintError(f"batch and prompt must be at least 1, got batch {batch}, prompt {prompt}")
    step = on_step or (lambda _msg: None)
    step("building the model")
    work = prepare(model, "1,1:int64", dtype=dtype, trust_remote_code=trust_remote_code)
    if dtype is None and isinstance(model, str) and (sixteen := unquantized_dtype(work.model.config)):
        work = prepare(model, "1,1:int64", dtype=sixteen, trust_remote_code=trust_remote_code)
    m = work.model
    kw = cache_argument(m)
    config = m.config
    tcfg = text_config(m)
    if check_context is not None:
        fitted = check_context(_config_int(tcfg, CONTEXT_KEYS))
        prompt = fitted if fitted is not None else prompt
    meta = [{"name": "input_ids", "shape": [batch, prompt], "dtype": "int64"}]
    was_training = m.training
    m.eval()
    grouped = group_experts(m)
    (chosen, unattend), options = use_attention(m, attention), fused_attention_step(attention)
    try:
        with work.built.trace_context(), torch.no_grad():
            try:
                pre, (d1, d2), cache, after = _trace_steps(m, kw, work.built.name, batch, prompt, meta, "meta", step,
                                                           reuse, options)
                how = None
            except FootprintError as e:
                params = sum(p.numel() * p.element_size() for p in m.parameters())
                if not (isinstance(e.__cause__, BaseException) and meta_specific(e.__cause__)) \
                        or params > REAL_FALLBACK_LIMIT:
                    raise
                # the forward reads tensor values (a padding mask it built of ones, a router): run it
                how = f"{type(e.__cause__).__name__}: {str(e.__cause__).strip().splitlines()[0][:120]}"
                pre, (d1, d2), cache, after = _trace_steps(m, kw, work.built.name, batch, prompt, meta, "real", step,
                                                           reuse, options)
    except NoCache:
        raise
    except FootprintError as e:
        raise FootprintError(f"tracing {work.built.name} as a language model failed: {e}") from e
    finally:
        unattend()
        m.train(was_training)
        for module in grouped:
            del module.forward
    if attention in ATTENTION_KERNELS:  # read by kernels.matrix: the fused kernel named
        for t in (pre, d1, d2):
            t.settings["attention_kernel"] = attention
    if [e.op for e in d1.events] != [e.op for e in d2.events]:
        raise FootprintError(f"{work.built.name}: two decode steps ran different operators; the cache "
                             "line cannot be drawn (a model whose decode path changes with the length)")
    elem = next((torch.empty((), dtype=p.dtype).element_size() for p in m.parameters() if p.is_floating_point()), 2)
    latent = latents(m)
    layers = cache_layers(cache, after, batch, prompt, latent, elem)
    with work.built.trace_context(), torch.no_grad():
        window_notes = _check_windows(m, kw, layers, batch, real=how is not None)
    notes = [n for n in work.built.notes if not n.startswith("default input")] + ([chosen] if chosen else [])
    if how is not None:
        notes.append(f"traced on real CPU tensors with random weights: on meta tensors the forward read a "
                     f"tensor's value ({how})")
    if dtype is not None:
        notes = [n for n in notes if "the checkpoint's dtype" not in n]
        notes.append(f"activations (and whatever a weight scheme leaves unquantized) in {dtype}")
    if latent:
        first = next(iter(latent.values()))
        notes.append(f"multi-head latent attention: the compressed latent is cached ({first.width} values per "
                     f"token and layer) and attention reads it with the projections absorbed ({first.macs_per_token:,} "
                     "MACs per cached token and layer), as serving engines run it; transformers' eager code "
                     "decompresses the cache at every step instead")
    capped = sorted({la.cap for la in layers if la.cap})
    if capped:
        n = sum(1 for la in layers if la.cap)
        notes.append(f"{n} of {len(layers)} layers keep at most {', '.join(map(str, capped))} tokens "
                     "(a sliding window: the cache layer's own maximum length)")
    notes += window_notes
    states = [la for la in layers if la.per_token == 0 and la.fixed]
    if states:
        notes.append(f"{len(states)} layers keep a state of fixed size ({states[0].fixed:,} bytes per sequence)")
    dt = next((p.dtype for p in m.parameters() if p.is_floating_point()), torch.float32)
    index = {id(p): i for i, (_, p) in enumerate(m.named_parameters())}
    roles: dict[int, str] = {}
    for role, mod in (("embedding", m.get_input_embeddings()), ("head", output_embeddings(m))):
        w = getattr(mod, "weight", None)
        if w is not None and id(w) in index:
            roles[index[id(w)]] = role
    return ServingTrace(
        name=work.built.name, batch=batch, prompt=prompt, dtype=name_of(dt), prefill=pre, decode=(d1, d2),
        layers=layers, op_layer=_op_layers(d1, _layer_paths(m), len(cache.layers)), experts=_experts(pre, tcfg),
        latents=latent, roles=roles, max_context=_config_int(tcfg, CONTEXT_KEYS),
        hidden_size=_config_int(tcfg, ("hidden_size", "n_embd", "d_model")), notes=notes, config=config)
