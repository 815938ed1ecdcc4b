"""How a serving engine sizes its KV cache on one accelerator, by the engine's own rule
(:mod:`torch_footprint.hardware.engines`: one profile per engine, each rule with the source
file it comes from), per tensor-parallel rank:

* vLLM: total x gpu_memory_utilization - weights (with the rotary cos/sin table it builds) -
  the activation peak of a profile run of max_num_batched_tokens tokens (V0's eager run adds
  the residual and normalises in place: a hidden-size tensor a token fewer) - the memory
  outside PyTorch (more where tensor-parallel ranks
  talk over NVLink: the custom all-reduce's buffers, which vLLM leaves out between PCIe cards
  without peer access) - CUDA graphs counted in the budget; in blocks of block_size tokens;
* SGLang: total x mem_fraction_static - what is in use once the weights are loaded (the
  weights, the CUDA context, the memory outside PyTorch); a token pool of page_size pages;
* TensorRT-LLM: kv_cache_free_gpu_memory_fraction x what is still free after the weights, a
  profile run of max_num_tokens tokens and the CUDA context; in blocks of tokens_per_block;
* llama.cpp: ctx_size cells allocated whole, beside the weights and a compute buffer sized
  for one micro-batch of ubatch_size tokens.

The activation peak of a profile run is the traced prefill's transient bytes per token
times the run's tokens (every token of the run at once: engines run it unchunked)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...hardware.engines import EngineProfile
from .result import EngineCache

if TYPE_CHECKING:
    from .pricing import _Memory

GIB = 2**30


def _no_room(p: EngineProfile, tokens: int, max_model_len: int) -> str | None:
    """What the engine says when its cache holds nothing, or less than one longest request."""
    if p.name == "vllm":
        if tokens <= 0:
            return ("vLLM: no available memory for the cache blocks; increase --gpu-memory-utilization or lower "
                    "--max-num-batched-tokens")
        if tokens < max_model_len:
            return (f"vLLM: the model's max seq len ({max_model_len:,}) is larger than the maximum number of tokens "
                    f"the KV cache can store ({tokens:,}); increase --gpu-memory-utilization or decrease "
                    "--max-model-len")
    elif p.name == "sglang" and tokens <= 0:
        return "SGLang: not enough memory for the token pool; increase --mem-fraction-static"
    elif p.name == "trtllm" and tokens <= 0:
        return ("TensorRT-LLM: no memory left for the KV cache after the weights and activations; increase "
                "--kv-cache-free-gpu-memory-fraction or lower --max-num-batched-tokens")
    elif p.name == "llamacpp" and tokens <= 0:
        return "llama.cpp: failed to allocate the KV cache and compute buffers; lower --ctx-size or --ubatch-size"
    return None


def chunked_prefill(p: EngineProfile, max_model_len: int, given: float | None = None) -> bool:
    """Whether vLLM V0 prefills in chunks beside the decodes: as ``given``, else where
    arg_utils.py turns it on for long contexts (``chunked_above`` tokens and more)."""
    if given is not None:
        return bool(given)
    return bool(p.chunked_above and max_model_len >= p.chunked_above)


def longest_profile(p: EngineProfile, max_model_len: int, given: float | None = None) -> int:
    """vLLM V0's profile batch without a token budget given: max(max_model_len, 2048) tokens
    (vllm/config.py SchedulerConfig), or chunked prefill's budget where it is on."""
    if chunked_prefill(p, max_model_len, given):
        return p.chunked_tokens
    return max(max_model_len, 2048)


def sampler_run(p: EngineProfile, mem: _Memory, seqs: int) -> int:
    """The profile's sampler run (vLLM V1 gpu_model_runner.py _dummy_sampler_run: logits of
    max_num_seqs requests over the whole vocabulary, sampled with top-k and top-p): its bytes,
    ``sampler_bytes_per_logit`` per logit with 16-bit activations (the head's logits are in the
    model's dtype: two bytes more in float32); it runs after the forward pass, so the profile's
    peak is the larger of the two."""
    if not p.sampler_bytes_per_logit:
        return 0
    vocab = getattr(mem.st.config, "vocab_size", None) or getattr(
        getattr(mem.st.config, "text_config", None), "vocab_size", 0) or 0
    wide = 2 if mem.st.dtype == "float32" else 0
    return int((p.sampler_bytes_per_logit + wide) * seqs * vocab)


def _text(config: object) -> object:
    return getattr(config, "text_config", None) or config


def rope_table(mem: _Memory) -> int:
    """Bytes of the rotary embedding's cos/sin table an engine builds with the model (vLLM's
    model_executor/layers/rotary_embedding.py ``_compute_cos_sin_cache``: one row of cos and
    sin halves, ``rotary_dim`` values, per position up to max_position_embeddings, in the
    model's dtype; a buffer on every rank, reported with the weights)."""
    cfg = _text(mem.st.config)
    positions = getattr(cfg, "max_position_embeddings", None)
    heads = getattr(cfg, "num_attention_heads", None)
    hidden = getattr(cfg, "hidden_size", None)
    dims = getattr(cfg, "qk_rope_head_dim", None) or getattr(cfg, "head_dim", None) or (
        hidden // heads if hidden and heads else None)
    if not positions or not dims or getattr(cfg, "rope_theta", getattr(cfg, "rope_parameters", None)) is None:
        return 0
    if not getattr(cfg, "qk_rope_head_dim", None):
        dims = int(dims * (getattr(cfg, "partial_rotary_factor", None) or 1.0))
    elem = 4 if mem.st.dtype == "float32" else 2
    return int(positions) * int(dims) * elem


def engine_cache(p: EngineProfile, given: dict[str, float], mem: _Memory, total: int, tp: int,
                 max_model_len: int, context: int, nvlink: bool = True, device: str = "") -> EngineCache:
    """``p``'s cache on an accelerator of ``total`` bytes (as CUDA reports it), per rank, with
    the knobs ``given`` (the rest at the engine's defaults); ``nvlink``: the ranks talk over
    NVLink (vllm/distributed/device_communicators/custom_all_reduce.py)."""
    knobs = {name: p.knob(name, given.get(name), tp, total, device) for name in p.defaults()}
    block = int(knobs.get(p.block_knob, 1)) if p.block_knob else 1
    per_block = max(mem.kv(block) - mem.kv(0), 1)
    non_torch = int((p.non_torch_tp_gib if tp > 1 and nvlink else p.non_torch_gib) * GIB)
    held: dict[str, int] = {"weights": mem.weights + (rope_table(mem) if p.rope_table else 0)}
    if p.chunked_above and p.mixed_knob:  # vLLM V0: chunked prefill on by default for long contexts only
        knobs[p.mixed_knob] = float(chunked_prefill(p, max_model_len, given.get(p.mixed_knob)))
    if p.profile_tokens_knob:
        if p.profile_tokens == "longest" and p.profile_tokens_knob not in given:
            knobs[p.profile_tokens_knob] = longest_profile(p, max_model_len, knobs.get(p.mixed_knob))
        per_token = mem.act_per_token
        if p.inplace_add_norm and mem.st.hidden_size and hasattr(_text(mem.st.config), "rms_norm_eps"):
            # RMSNorm models: the engine's norm with the residual add is one kernel writing over its inputs
            per_token = max(per_token - mem.st.hidden_size * (4 if mem.st.dtype == "float32" else 2), 0)
        held["activations"] = max(per_token * int(knobs[p.profile_tokens_knob]),
                                  sampler_run(p, mem, int(knobs.get("max_num_seqs", 0))))
    if p.context_held:
        held["CUDA context"] = mem.overhead
    if non_torch:
        held["outside PyTorch"] = non_torch
    if p.cuda_graph_gib:
        held["CUDA graphs"] = int(p.cuda_graph_gib * GIB)
    if p.budget == "total_fraction":
        capacity = int(total * knobs[p.fraction_knob]) - sum(held.values())
    elif p.budget == "static_fraction":
        held["CUDA context"] = mem.overhead
        capacity = int(total * knobs[p.fraction_knob]) - sum(held.values())
    elif p.budget == "free_fraction":
        held["CUDA context"] = mem.overhead
        capacity = int((total - sum(held.values())) * knobs[p.fraction_knob])
    else:  # context: the cells asked for, if they fit beside the rest
        held["CUDA context"] = mem.overhead
        cells = int(knobs["ctx_size"])
        capacity = mem.kv(cells) if mem.kv(cells) <= total - sum(held.values()) else 0
        max_model_len = cells
    blocks = max(capacity // per_block, 0)
    tokens = blocks * block
    return EngineCache(max(capacity, 0), blocks, tokens, tokens / context if context else 0.0, engine=p.name,
                       title=p.title, block=block, max_model_len=max_model_len, knobs=knobs, held_back=held,
                       error=_no_room(p, tokens, max_model_len))
