"""The published multi-GPU training measurements of ``benchmarks/published/training.toml``: which
of them ``fit`` can express as the runs were set up, and, for those it can, the predicted
tokens per second per GPU against the printed figure and whether the configuration the team
trained is declared to fit.

    python benchmarks/train_published_layouts.py [--limit N] [--budget SECONDS] [--source TAG]

A row is expressible when every part of its set-up has a setting the estimate prices: its
model (a config the tool has, or a "gpt-*" shape: MPT as GPT-2's blocks, SwiGLU models as a Llama
of the printed MLP width, the others as a Llama whose SwiGLU MLP has 2/3 of the printed width, the
same parameters and FLOPs as a two-matrix MLP, :func:`model_of`), tensor, pipeline (with virtual
stages) and data parallelism, FSDP (full, hybrid, grad-op), full, per-operator and layer-wise
activation checkpointing, gradient accumulation, FP8 (tensorwise, rowwise, delayed), context and
expert parallelism, torch.compile (priced as TorchInductor runs it: ``--compile``), fms-fsdp's
checkpointing of a fraction of the blocks (the fraction from the MFU and HFU the source prints,
:func:`blocks_every`). Not yet: MXFP8 or an unstated FP8 recipe, selective checkpointing the row
does not describe. Not priced at all: GPUs run power-limited at a limit the source does not print.
``lenient`` also counts the rows whose only missing part is that selective checkpointing, predicted
without it.

Each prediction traces one micro-batch on one rank (bf16 autocast, AdamW; under FSDP the
framework's mixed-precision policy, :func:`fsdp_policy`) and prices the step as ``fit`` does
(:func:`~torch_footprint.estimate.recommend.recommend` with its building blocks, at one batch
size): memory per rank (the largest pipeline rank) plus what the process holds beyond its
tensors (:mod:`torch_footprint.estimate.allocator`) against the GPU's memory, step time with
communication; tokens/s/GPU = global batch x sequence / step / GPUs. Where
the row names no network, a DGX's is assumed: InfiniBand HDR for A100, NDR for H100, H200, B200.
Rows printed as TFLOP/s (the sources' own FLOP formulas) are counted, not compared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from torch_footprint.estimate.kernels.sdpa import is_rocm
from torch_footprint.hardware import get

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
# the rows' spellings of torchtitan's per-operator selective checkpointing (priced as --ac selective);
# "selective" alone and fms-fsdp's fraction of blocks (not printed) are not
PER_OP = ("selective (per-op SAC)", "selective op")
# torchtitan's layer-wise selective checkpointing: its selective_ac_option, "2" by default
# (torchtitan/config_manager.py at 6a6f755, the commit of the rows: "2 = checkpoint every other layer")
PER_LAYER = {"selective layer": "2"}
NOT_PRICED = ("fp8 recipe not stated", "selective checkpointing")


def blocks_every(r: dict[str, Any]) -> int | None:
    """fms-fsdp's selective checkpointing of a fraction p of the blocks (fms_fsdp/policies/ac_handler.py:
    p = 1/2 checkpoints every other block), as every N-th block, N = 1/p: p is not printed, but the
    source prints each run's MFU beside its HFU, which also counts the recomputed forwards, 2 of the
    6 FLOPs a parameter and token: HFU / MFU = 1 + p / 3. None where the row does not give both."""
    m = re.search(r"MFU (\d+\.\d+), HFU (\d+\.\d+)", str(r.get("notes") or ""))
    if "fraction" not in str(r.get("activation_checkpointing") or "") or not m:
        return None
    p = 3 * (float(m[2]) / float(m[1]) - 1)
    return max(1, round(1 / p)) if p > 0 else None


def layer_option(r: dict[str, Any]) -> str | None:
    """torchtitan's selective_ac_option for a row that checkpoints every N-th block (N), else None."""
    ac = str(r.get("activation_checkpointing") or "")
    every = blocks_every(r)
    return PER_LAYER.get(ac) or (str(every) if every else None)
NOT_PRICED_BEFORE = ("context parallelism", "expert parallelism")


def fp8_recipe(r: dict[str, Any]) -> str | None:
    """The row's FP8 recipe as --fp8 names it (None: not fp8, "" not stated)."""
    if r.get("precision") != "fp8":
        return None
    words = str(r.get("fp8") or "")
    for recipe in ("mxfp8", "tensorwise", "rowwise_with_gw_hp", "rowwise", "delayed"):
        if recipe in words:
            return recipe
    return ""


def features(r: dict[str, Any]) -> list[str]:
    """The parts of a row's set-up, as the estimate names them."""
    out = []
    if (r.get("tp") or 1) > 1:
        out.append("tensor parallelism")
    if (r.get("pp") or 1) > 1:
        out.append("pipeline parallelism")
    if (r.get("vpp") or 1) > 1:
        out.append("virtual pipeline stages")
    if (r.get("cp") or 1) > 1:
        out.append("context parallelism")
    if (r.get("ep") or 1) > 1:
        out.append("expert parallelism")
    recipe = fp8_recipe(r)
    if recipe is not None:
        out.append("fp8" if recipe else "fp8 recipe not stated")
    if r.get("fsdp") == "hybrid_shard":
        out.append("hsdp")
    ac = str(r.get("activation_checkpointing") or "none")
    if ac in PER_OP:
        out.append("per-operator selective checkpointing")
    elif layer_option(r):
        out.append("layer-wise selective checkpointing")
    elif ac.startswith("selective"):
        out.append("selective checkpointing")
    if r.get("compile"):
        out.append("torch.compile")
    if _accum(r) > 1:
        out.append("gradient accumulation")
    return out


def _dp(r: dict[str, Any]) -> int:
    n = r.get("n_gpus") or 0
    return int(r.get("dp") or n // max(1, (r.get("tp") or 1) * (r.get("pp") or 1) * (r.get("cp") or 1)))


def _accum(r: dict[str, Any]) -> int:
    """Micro-batches a step (through the pipeline where there is one)."""
    dp, micro, glob = _dp(r), r.get("micro_batch"), r.get("global_batch")
    if (r.get("pp") or 1) > 1 and dp and micro and glob:
        # a pipeline runs global / (micro x data-parallel) micro-batches a step (Megatron-core's
        # num_microbatches); NeMo AutoModel's printed GA counts its outer loop, each of LBS / MBS
        # pipelined micro-batches
        return max(1, round(glob / (micro * dp)))
    if r.get("grad_accum"):
        return int(r["grad_accum"])
    if not micro and (r.get("pp") or 1) > 1 and "torchtitan" in str(r.get("framework") or "").lower():
        # torchtitan's pipeline_parallel_microbatches defaults to the pipeline degree
        # (build_pipeline_schedule, 2024): the local batch split into that many micro-batches
        return int(r["pp"])
    if not (dp and micro and glob):
        return 1
    return max(1, round(glob / (micro * dp)))


def expressible(r: dict[str, Any], before: bool, lenient: bool = False) -> str:
    """"" when the estimate can express the row, else what it lacks."""
    if not r.get("n_gpus"):
        return "GPU count not printed"
    if not r["model"].startswith("hf:") and not all(r.get(k) for k in ("layers", "hidden", "heads", "vocab")):
        return "model shape not printed"
    if r.get("gpu_power_limited") and not r.get("gpu_power_w"):  # the clocks it ran at unknown
        return "power limit not printed"
    lacking = [f for f in features(r) if f in NOT_PRICED]
    if lenient:
        lacking = [f for f in lacking if f not in ("selective checkpointing", "torch.compile")]
    if before:
        lacking += [f for f in features(r) if f in ("pipeline parallelism", "virtual pipeline stages", "hsdp",
                                                    "gradient accumulation", "fp8", *NOT_PRICED_BEFORE)]
        if {"per-operator selective checkpointing", "layer-wise selective checkpointing"} & set(features(r)) \
                and not lenient:
            lacking.append("selective checkpointing")
    return ", ".join(lacking)


def fsdp_policy(r: dict[str, Any]) -> tuple[str | None, str | None]:
    """The (param, reduce) dtypes of the row's FSDP mixed-precision policy, as its framework sets
    it where the row is silent: torchtitan's mixed_precision_param bfloat16 and mixed_precision_reduce
    float32 (its job config defaults); Composer's DEFAULT (param in the autocast dtype, reduce fp32) or
    PURE (both bf16, composer/distributed/mosaic_parallelism.py); fms-fsdp's bfSixteen (both bf16,
    fms_fsdp/policies/mixed_precision.py); OLMo-core's bf16 / fp32 (the rows' header); NeMo
    Automodel's FSDP2 bf16 / fp32. Lightning's FSDPPrecision keeps "bf16-mixed" parameters in fp32
    (autocast does the rest): (None, None)."""
    if not r.get("fsdp"):
        return None, None
    framework = str(r.get("framework") or "")
    if "composer" in framework:
        return ("bf16", "bf16") if "PURE" in str(r.get("quote") or "") else ("bf16", "fp32")
    if "fms-fsdp" in framework:
        return "bf16", "bf16"
    if any(f in framework for f in ("torchtitan", "olmo-core", "fsdp2")):
        return "bf16", "fp32"
    return None, None


def megatron_distributed_optimizer(r: dict[str, Any]) -> bool:
    """NeMo's and Megatron-Bridge's recipes run Megatron-core's distributed optimizer (NeMo's
    distributed_fused_adam, Bridge's use_distributed_optimizer=True): the optimizer state sharded
    over the data-parallel ranks (zero1) and the gradients all-reduced in place from one contiguous
    buffer (no second copy: bucket view)."""
    framework = str(r.get("framework") or "")
    return not r.get("fsdp") and ("nemo" in framework or "megatron-bridge" in framework)


def grad_reduce_of(r: dict[str, Any]) -> str | None:
    """Megatron-core's gradient buffer dtype (--grad-reduce-dtype): Megatron-Bridge's performance recipes
    turn grad_reduce_in_fp32 off for every model they run (scripts/performance: the YAML configs of
    v0.1.0rc4, set_*_common_configs from v0.2.0 to v0.4.2), so their gradients accumulate and reduce in
    bf16; elsewhere Megatron-core's default under bf16, fp32."""
    return "bf16" if "megatron-bridge" in str(r.get("framework") or "").lower() else None


def framework_of(r: dict[str, Any]) -> str:
    """The runtime the row's framework trains with, as --framework names it: Megatron-core under NeMo,
    Megatron-LM and Megatron-Bridge; torch.distributed elsewhere (NeMo AutoModel runs PyTorch's FSDP2)."""
    framework = str(r.get("framework") or "").lower()
    if "automodel" in framework or "deepspeed" in framework:
        return "torch"
    return "megatron" if "nemo" in framework or "megatron" in framework else "torch"


def loss_of_row(r: dict[str, Any]) -> str:
    """How the row's framework takes the loss (--loss): NeMo AutoModel's mixture-of-experts benchmark
    configs (the rows whose kernels column names DeepEP: examples/benchmark/configs/*_te_deepep.yaml)
    set MaskedCrossEntropy's fp32_upcast: false, so in the logits' own dtype; llm-foundry's MPT
    (ComposerMPTCausalLM's loss_fn defaults to fused_crossentropy, flash-attn's CrossEntropyLoss) and
    TinyLlama (pretrain/tinyllama.py: FusedCrossEntropyLoss) run a fused kernel; elsewhere fp32
    (MaskedCrossEntropy's default, torchtitan's and transformers' losses cast the logits first)."""
    framework = str(r.get("framework") or "").lower()
    if "automodel" in framework and "DeepEP" in str(r.get("quote") or ""):
        return "logits"
    return "fused" if "llm-foundry" in framework or "tinyllama" in r["model"] else "fp32"


def attention_of_row(r: dict[str, Any]) -> str:
    """The fused attention kernel the row's stack ran (--attention): every stack here runs one, where the
    Hugging Face code of some models (gpt-oss) writes out the scores. Transformer Engine's (cuDNN's fused
    attention) under Megatron-core and NeMo, and where NeMo AutoModel's backend sets attn: te (its Qwen3
    and gpt-oss-120b configs); FlashAttention-2's class elsewhere: torchtitan before PyTorch 2.9 (SDPA's
    flash back end; the releases since prefer cuDNN on Hopper), llm-foundry's and fms-fsdp's flash-attn
    and SDPA of 2023-2024, AutoModel's FlexAttention (attn: flex, the gpt-oss-20b config). On an AMD GPU
    SDPA's flash back end is AOTriton's kernels: the fused kernel as PyTorch picks it there (fused). A
    row's own ``attention`` wins: llm-foundry's runs of its Triton port of FlashAttention v1 (flash1)."""
    framework = str(r.get("framework") or "").lower()
    if r.get("attention"):  # the kernel the run's scripts name (llm-foundry's Triton FlashAttention v1)
        return str(r["attention"])
    megatron = framework_of(r) == "megatron"
    if is_rocm(get(r["gpu"])) and not megatron:
        return "fused"
    if megatron or ("automodel" in framework and "FlexAttn" not in str(r.get("quote") or "")):
        return "cudnn"
    return "flash2"


def fused_kernels_of(r: dict[str, Any]) -> bool:
    """Whether the row's stack runs fused norms and gated activations (--fused-kernels): NeMo AutoModel
    where its kernels column names TE (BackendConfig rms_norm: te, and its experts' activations compiled,
    nemo_automodel/components/moe/experts.py); a row whose source names them (its ``fused_kernels``);
    Megatron-core implies them on its own."""
    framework = str(r.get("framework") or "").lower()
    return bool(r.get("fused_kernels")) or ("automodel" in framework and "| TE" in str(r.get("quote") or ""))


def tensor_parallel_extras(r: dict[str, Any]) -> dict[str, bool]:
    """How the row's framework runs tensor parallelism beyond the attention and MLP linears: torchtitan's
    plan always shards the norms by sequence (SequenceParallel) and the embedding and head by vocabulary
    with loss_parallel (torchtitan/models/llama3/infra/parallelize.py); Megatron-core splits the
    vocabulary under any TP and NeMo's performance recipes set sequence_parallel = tp > 1
    (scripts/performance/helpers.py). A row's own sequence_parallel wins."""
    if (r.get("tp") or 1) <= 1:
        return {}
    framework = str(r.get("framework") or "").lower()
    if "torchtitan" not in framework and framework_of(r) != "megatron":
        return {}
    return {"sequence_parallel": bool(r.get("sequence_parallel", True)), "vocab_parallel": True,
            "async_tp": bool(r.get("async_tp"))}


def model_of(r: dict[str, Any], folder: Path) -> str:
    m = r["model"]
    if m.startswith("hf:"):
        local = CONFIGS / m[3:].replace("/", "--")
        return str(local) if local.exists() else m
    h, ffn = r["hidden"], r.get("ffn_hidden") or 4 * r["hidden"]
    gated = any(k in m for k in ("llama", "olmo"))  # SwiGLU models: ffn_hidden is the gated MLP's own width
    if m.startswith("gpt-mpt") and (r.get("tp") or 1) == 1:
        # MPT's blocks (llm-foundry's modeling_mpt.py): LayerNorm, a GELU MLP of ffn_hidden, nn.Linear without
        # biases, tied embeddings: OPT's, pre-norm, biases off (OPT's positions are learned, MPT's ALiBi)
        cfg: dict[str, Any] = {
            "architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": h,
            "num_hidden_layers": r["layers"], "num_attention_heads": r["heads"], "ffn_dim": ffn,
            "max_position_embeddings": r["seq"], "vocab_size": r["vocab"], "word_embed_proj_dim": h,
            "activation_function": "gelu", "enable_bias": False, "do_layer_norm_before": True, "dropout": 0.0,
            "attention_dropout": 0.0, "tie_word_embeddings": True}
    else:  # a Llama of the same shape; a GELU MLP of ffn_hidden as a SwiGLU of 2/3 the width (the same parameters)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
               "intermediate_size": ffn if gated else int(round(2 * ffn / 3)), "num_hidden_layers": r["layers"],
               "num_attention_heads": r["heads"], "num_key_value_heads": r.get("kv_heads") or r["heads"],
               "vocab_size": r["vocab"], "max_position_embeddings": max(4096, r["seq"]),
               "tie_word_embeddings": False}
    d = folder / m
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def network_of(r: dict[str, Any]) -> dict[str, Any]:
    """The row's network between nodes as ``Parallel`` takes it: a figure per node as that many Gb/s
    through one port (the node's total, shared by its GPUs); a figure per GPU as the InfiniBand
    generation of that port speed; none printed, the usual one of the GPU's generation."""
    text = str(r.get("network") or "")
    gbps = [float(x) for x in re.findall(r"(\d+)\s*G", text)]
    if gbps and "node" in text:
        return {"network_gbps": gbps[0], "nics_per_node": 1}
    if gbps:
        return {"network": "ib-ndr" if gbps[0] >= 400 else "ib-hdr" if gbps[0] >= 200 else "ib-edr"}
    return {"network": "ib-hdr" if r["gpu"].startswith("a100") else "ib-ndr"}


def predict(r: dict[str, Any], folder: Path, before: bool, compiled: bool | None = None) -> dict[str, Any]:
    from torch_footprint.errors import FootprintError
    from torch_footprint.estimate.allocator import communicators
    from torch_footprint.estimate.kernels.roofline import estimate_latency
    from torch_footprint.estimate.kernels.sdpa import sm_of
    from torch_footprint.estimate.layouts.comm import link_of, step_time
    from torch_footprint.estimate.layouts.ranks import phase_times
    from torch_footprint.estimate.layouts.sharding import (
        gather_bytes,
        gradient_buffer,
        model_states,
        pipeline_gathered,
        state_scales,
        step_peak,
    )
    from torch_footprint.estimate.memory import allocation_count
    from torch_footprint.estimate.price import fixed_overheads
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.hardware import get
    from torch_footprint.hardware.networks import network_for
    from torch_footprint.settings import Parallel, Training, Workload

    n, tp, pp, vpp = r["n_gpus"], r.get("tp") or 1, r.get("pp") or 1, r.get("vpp") or 1
    dp, m = _dp(r), _accum(r)
    micro = r.get("micro_batch") or max(1, (r.get("global_batch") or dp) // dp // (m if pp > 1 else 1))
    strategy = {"full_shard": "fsdp", "hybrid_shard": "fsdp", "shard_grad_op": "zero2"}.get(
        r.get("fsdp") or "", "zero1" if r.get("zero_stage") == 1 else "ddp")
    per_node = r.get("gpus_per_node") or 8
    extra: dict[str, Any] = {}
    if not before:
        extra = dict(pp=pp, vpp=vpp, grad_accum=m, fp8=fp8_recipe(r) or None, cp=r.get("cp") or 1,
                     ep=r.get("ep") or 1, framework=framework_of(r), **tensor_parallel_extras(r))
        if r.get("pp_microbatches") and pp > 1:  # the schedule run once per local batch
            extra["pp_microbatches"] = r["pp_microbatches"]
        if grad_reduce_of(r):
            extra["grad_reduce_dtype"] = grad_reduce_of(r)
        if r.get("moe_a2a_overlap") and (r.get("ep") or 1) > 1 and m > 1:
            extra["overlap_moe_expert_parallel_comm"] = True
        # the kernels column names DeepEP, or the run's config a hierarchical dispatcher (DeepEP, HybridEP)
        if ("DeepEP" in str(r.get("quote") or "") or r.get("moe_dispatcher")) and (r.get("ep") or 1) > 1:
            extra["moe_dispatcher"] = "deepep"
        if r.get("fp8_engine") and framework_of(r) != "megatron":  # Transformer Engine's linears under PyTorch
            extra["fp8_engine"] = r["fp8_engine"]
        if r.get("pp_last_stage_less_layers"):  # the run's own pipeline layout (Megatron-Bridge's DeepSeek-V3)
            extra["pp_last_stage_less_layers"] = r["pp_last_stage_less_layers"]
        if strategy == "ddp" and megatron_distributed_optimizer(r):
            strategy, extra["bucket_view"] = "zero1", True
        if strategy in ("fsdp", "zero2"):
            extra["fsdp_param_dtype"], extra["fsdp_reduce_dtype"] = fsdp_policy(r)
        if r.get("fsdp") == "hybrid_shard":
            extra["dp_shard"] = min(dp, r.get("hsdp_shard") or per_node)
    p = Parallel(gpus=n, tp=tp if tp > 1 else None, strategy=strategy, gpus_per_node=per_node,
                 **network_of(r), **extra)
    ac = str(r.get("activation_checkpointing") or "")
    kept = not before and (m > 1 or pp > 1)  # gradients accumulate over the micro-batches
    option = layer_option(r)
    mode = "full" if ac.startswith("full") else "selective" if (ac in PER_OP or option) and not before else None
    t = Training(train=True, optimizer="adamw", ac=mode, selective_ac_option=option if mode and option else "op",
                 recompute_modules=() if before else tuple(r.get("recompute_modules") or ()),
                 grads="zero" if kept else "none",
                 loss="fp32" if before else loss_of_row(r), fused_kernels=not before and fused_kernels_of(r))
    # the parameters in bf16 where the run holds them so (the optimizer state follows): the model in bf16
    precision = "bf16" if r.get("param_dtype") == "bf16" and not before else "bf16-mixed"
    w = Workload(model_of(r, folder), {"input_ids": f"{micro},{r['seq']}:int64"}, precision=precision,
                 attention=None if before else attention_of_row(r))
    acc = get(r["gpu"])
    if r.get("gpu_bandwidth_gbs"):  # the source's own figure for a part the accelerator id only approximates
        acc = dataclasses.replace(acc, bandwidth_gbs=float(r["gpu_bandwidth_gbs"]))
    if r.get("gpu_power_w"):  # a board run below its TDP, as a --hardware row's power_limit_w sets it
        acc = dataclasses.replace(acc, power_limit_w=float(r["gpu_power_w"]))
    try:
        trace, _ = trace_step(w, t, p, **({} if before else {"cuda_sm": sm_of(acc)}))  # CUDA's attention kernel
    except FootprintError as e:
        blocks = re.search(r"the model's (\d+) blocks", str(e))
        if before or not blocks:
            raise
        # blocks the stages do not divide evenly: torchtitan's split (its 2024 generate_split_points and
        # its 2025 generate_llm_fqn_per_model_part agree on Llama-3.1-405B's 126 layers over 8 stages:
        # 15, 16 x 6, 15); under Megatron-core, account_for_embedding_in_pipeline_split and
        # account_for_loss_in_pipeline_split (the embedding and the loss one layer each), which need
        # the layers and those two to divide evenly (a custom pipeline layout otherwise: not expressed);
        # NeMo AutoModel's generate_hf_model_fqn_per_model_part spreads the layers alone, the first
        # (layers mod stages) stages taking one more, the embedding and head not counted: torchtitan's
        # split with both weights 0
        megatron_even = (int(blocks[1]) + 2) % (pp * vpp) == 0
        framework = str(r.get("framework") or "").lower()
        weight = 0 if "automodel" in framework else 1
        if not ("torchtitan" in framework or weight == 0 or (framework_of(r) == "megatron" and megatron_even)):
            raise
        p = dataclasses.replace(p, pp_first_stage_less_layers=weight, pp_last_stage_less_layers=weight)
        trace, _ = trace_step(w, t, p, cuda_sm=sm_of(acc))
    # the context-parallel ranks hold the same weights: states shard over data x context ranks
    shard = p.data if before else (p.shard_group * p.cp if strategy == "fsdp" else p.data * p.cp)
    replicas = p.data * p.cp // shard
    peak = step_peak(trace, strategy, shard, p.bucket_view)
    if not before:
        from torch_footprint.estimate.layouts.cp_ep import layout_memory

        peak = layout_memory(trace, peak, strategy)
    # torch.compile as TorchInductor runs it (fused elementwise chains), where the row compiled
    compiled = bool(r.get("compile")) and not before if compiled is None else compiled
    pred = estimate_latency(trace, acc, **({} if before else {"fp8": p.fp8, "compiled": compiled,
                                                               "micro_batches": m}))
    net = network_for(p.network, p.network_gbps, p.nics_per_node, p.gpus_per_node)
    if before:
        link = link_of(acc, ranks=n, per_node=per_node, network=net)
        need_bytes = peak.peak_bytes
        step = step_time(trace, phase_times(pred), strategy, p.data, link, tp)
    else:
        from torch_footprint.analysis.memory import replay
        from torch_footprint.estimate.layouts.cp_ep import layout_states, without_experts
        from torch_footprint.estimate.layouts.schedule import layout_step, schedule_peak

        need_bytes = peak.peak_bytes
        if pp > 1:
            persistent = replay(trace).persistent
            whole = model_states(persistent, strategy, shard, gather_bytes(trace, strategy),
                                 gradient_buffer(trace, p.bucket_view), state_scales(trace))
            staged, figures = schedule_peak(trace, peak, whole.total, pp=pp, vpp=vpp, microbatches=p.per_schedule,
                                            schedule=p.schedule, framework=p.framework,
                                            kept=pipeline_gathered(trace, strategy))
            need_bytes = without_experts(staged, figures, whole.total,
                                         layout_states(trace, whole, strategy).total).peak_bytes
        step = layout_step(trace, acc, pred, p, net)  # as fit times it: collectives, schedule, CP, EP
        assert step is not None
    groups = 0 if before else communicators(p.data, tp, pp, p.cp, p.ep, replicas)
    extras = fixed_overheads(acc, allocation_count(trace), True, groups)
    # before: the seed's 80% of the memory; now, the allocator's extras modelled, all of it (as fit does)
    need = (need_bytes + sum(extras.values())) / (0.8 if before else 1.0)
    tokens = (r.get("global_batch") or micro * dp * m) * r["seq"]
    # the row's GPU memory where the source prints one its accelerator id's row does not have
    capacity = r["gpu_memory_gb"] * 2**30 if r.get("gpu_memory_gb") else acc.memory_bytes
    return {"tps": tokens / step.time_s / n, "fits": need <= capacity, "need_gib": need / 2**30}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--budget", type=float, default=0, help="stop starting rows after so many seconds")
    ap.add_argument("--source", default="", help="only rows whose source address contains this")
    ap.add_argument("--tp-only", action="store_true", help="only the rows with tensor parallelism (to price them "
                    "again after a change to it)")
    ap.add_argument("--count", action="store_true", help="only count the rows that can be expressed")
    ap.add_argument("--reverse", action="store_true", help="the rows in reverse order (a second process from the end)")
    ap.add_argument("--part", default="", help="I/K: only every K-th priced row from the I-th (0-based), so that K "
                    "processes share the rows")
    ap.add_argument("--before", action="store_true", help="as the estimate was before pipeline parallelism, "
                    "HSDP and gradient accumulation (for a run on an earlier commit)")
    args = ap.parse_args()
    rows = tomllib.loads((HERE / "published" / "training.toml").read_text())["row"]
    rows = [r for r in rows if args.source in r["source"] and (not args.tp_only or (r.get("tp") or 1) > 1)]
    strict = [r for r in rows if not expressible(r, args.before)]
    lenient = [r for r in rows if not expressible(r, args.before, lenient=True)]
    print(f"{len(rows)} rows; expressible: {len(strict)} as set up, {len(lenient)} leaving out selective "
          f"checkpointing of a fraction of the blocks ({'before' if args.before else 'now'})")
    lacking: dict[str, int] = {}
    for r in rows:
        for f in filter(None, expressible(r, args.before).split(", ")):
            lacking[f] = lacking.get(f, 0) + 1
    ranked = sorted(lacking.items(), key=lambda x: -x[1])
    print("not expressible because of: " + ", ".join(f"{k} {v}" for k, v in ranked))
    if args.count:
        return
    start, errs, strict_errs, no_fit, done = time.perf_counter(), [], [], 0, 0
    by_source: dict[str, list[float]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in lenient:  # one row of each source in turn, so that a --budget still sees every source
        groups.setdefault(r["source"].split("/")[2], []).append(r)
    order = [g[i] for i in range(max(map(len, groups.values()), default=0)) for g in groups.values() if i < len(g)]
    if args.part:
        i, k = (int(x) for x in args.part.split("/"))
        order = [r for r in order if r["metric"] == "tokens_per_s_per_gpu"][i::k]
    if args.reverse:
        order.reverse()
    with tempfile.TemporaryDirectory() as tmp:
        for r in order:
            if r["metric"] != "tokens_per_s_per_gpu":
                continue
            if (args.limit and done >= args.limit) or (args.budget and time.perf_counter() - start > args.budget):
                break
            t0 = time.perf_counter()
            try:
                out = predict(r, Path(tmp), args.before)
            except Exception as e:  # noqa: BLE001 - a row the estimate refuses is reported, not fatal
                print(f"  {r['model'][:34]:34s} refused: {str(e)[:100]}")
                continue
            done += 1
            err = (out["tps"] - r["value"]) / r["value"]
            errs.append(err)
            if r in strict:
                strict_errs.append(err)
            by_source.setdefault(r["source"].split("/")[2] + "/" + r["source"].split("/")[3], []).append(err)
            no_fit += not out["fits"]
            print(f"  {r['model'][:34]:34s} {r['n_gpus']:4d} {r['gpu']:14s} {r['value']:9,.0f} {out['tps']:9,.0f} "
                  f"{100 * err:+7.1f}%  {'fits' if out['fits'] else 'DOES NOT FIT'} ({out['need_gib']:.0f} GiB) "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if errs:
        a = sorted(abs(e) for e in errs)
        print(f"\n{len(errs)} rows predicted: median |error| {100 * statistics.median(a):.1f}%, p90 "
              f"{100 * a[int(0.9 * (len(a) - 1))]:.1f}%, {sum(e < 0 for e in errs)} too slow; "
              f"{no_fit} declared not to fit")
        if strict_errs:
            print(f"as set up ({len(strict_errs)}): median |error| "
                  f"{100 * statistics.median(abs(e) for e in strict_errs):.1f}%")
        for src, es in sorted(by_source.items()):
            print(f"  {src:40s} {len(es):3d} rows, median |error| {100 * statistics.median(abs(e) for e in es):.1f}%")
        print("leave-one-source-out: no constant of the estimate is fitted to these rows (the kernel constants are "
              "fitted by fit_kernels.py to published kernel measurements and power-limited epochs), so every "
              "figure above is already out of sample")


if __name__ == "__main__":
    main()
