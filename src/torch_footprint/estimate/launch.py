"""The launch configuration of a layout ``plan`` found: torchtitan's job config and Megatron-LM's
flags, each option under the framework's own name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plan import PlanRow

TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved-1f1b": "Interleaved1F1B"}
# --fp8 as torchtitan's model converters take it (float8: torchao's float8 training, tensorwise unless a recipe is
# named; mx: torchao's MX) and as Megatron-LM's --fp8-format and --fp8-recipe do (Transformer Engine's formats:
# HYBRID, e4m3 forward and e5m2 backward, but MXFP8's e4m3 throughout, as Megatron-Bridge's mixed-precision
# presets set them); None where the framework has no such recipe (torchtitan no delayed scaling, Megatron no rowwise)
TORCHTITAN_FP8 = {"tensorwise": ("float8", None), "rowwise": ("float8", "rowwise"),
                  "rowwise_with_gw_hp": ("float8", "rowwise_with_gw_hp"), "mxfp8": ("mx", "mxfp8")}
MEGATRON_FP8 = {"tensorwise": "hybrid", "delayed": "hybrid", "mxfp8": "e4m3"}


def launch(row: PlanRow) -> dict[str, Any]:
    """The layout in torchtitan's job config (TOML sections; None for ZeRO-1, which torchtitan
    does not have, and for delayed FP8 scaling) and Megatron-LM's flags (None for row-wise FP8)."""
    p = row.layout
    fsdp = p.sharding in ("zero2", "zero3", "fsdp")
    shard = p.shard_group if fsdp else 1
    par: dict[str, Any] = {"data_parallel_replicate_degree": p.data // shard if fsdp else p.data,
                           "data_parallel_shard_degree": shard, "tensor_parallel_degree": p.tensor,
                           "pipeline_parallel_degree": p.pp, "context_parallel_degree": p.cp}
    if p.ep > 1:  # each expert whole on its rank, as priced (and as a folded expert group needs)
        par["expert_parallel_degree"] = p.ep
        par["expert_tensor_parallel_degree"] = 1
    if p.sharding == "zero2":
        par["fsdp_reshard_after_forward"] = "never"
    if p.pp > 1:
        par["pipeline_parallel_schedule"] = TORCHTITAN_SCHEDULES[p.schedule]
        par["pipeline_parallel_microbatch_size"] = row.micro_batch
    local = row.micro_batch * (p.grad_accum if p.pp > 1 else 1)  # torchtitan splits a pipeline's local batch
    titan = {"parallelism": par,
             "training": {"local_batch_size": local, "global_batch_size": row.global_batch, "seq_len": row.seq},
             "activation_checkpoint": {"mode": row.ac, **({"selective_ac_option": row.ac_option}
                                                          if row.ac == "selective" else {})}}
    mega = [f"--tensor-model-parallel-size {p.tensor}", f"--pipeline-model-parallel-size {p.pp}",
            f"--micro-batch-size {row.micro_batch}", f"--global-batch-size {row.global_batch}",
            f"--seq-length {row.seq}"]
    if p.vpp > 1:
        mega.append(f"--num-layers-per-virtual-pipeline-stage {row.blocks // (p.pp * p.vpp)}")
    if p.cp > 1:
        mega.append(f"--context-parallel-size {p.cp}")
    if p.ep > 1:
        mega += [f"--expert-model-parallel-size {p.ep}", "--expert-tensor-parallel-size 1"]
    if p.sharding in ("zero1", "zero2"):
        mega.append("--use-distributed-optimizer")
    if fsdp and p.sharding != "zero2":
        mega.append("--use-torch-fsdp2")
    every = int(row.ac_option) if row.ac == "selective" and row.ac_option != "op" else 0
    if row.ac == "full" or every:  # one block in N: Megatron's block method over as many blocks of each stage
        mega += ["--recompute-granularity full", f"--recompute-method {'block' if every else 'uniform'}",
                 f"--recompute-num-layers {row.blocks // (p.pp * every) if every else 1}"]
    elif row.ac == "selective":  # Megatron-core's default selective recompute, as a Megatron plan prices it
        mega += ["--recompute-granularity selective", "--recompute-modules core_attn"]
    if p.tensor > 1 and p.sequence_parallel:
        mega.append("--sequence-parallel")
    if p.tensor > 1 and p.async_tp:  # torchtitan's async TP (its micro-pipelining needs torch.compile)
        par["enable_async_tensor_parallel"] = True
        mega.append("--tp-comm-overlap")
    fp8 = p.fp8 if p.fp8 not in (None, "none") else None
    if fp8 in TORCHTITAN_FP8:
        converter, recipe = TORCHTITAN_FP8[fp8]
        titan["model"] = {"converters": [converter]}
        if recipe:
            titan[converter] = {"recipe_name": recipe}
    if fp8 in MEGATRON_FP8:
        mega += [f"--fp8-format {MEGATRON_FP8[fp8]}", f"--fp8-recipe {fp8}"]
    usable = p.sharding != "zero1" and (fp8 is None or fp8 in TORCHTITAN_FP8 and p.fp8_engine != "transformer-engine")
    return {"torchtitan": titan if usable else None,
            "megatron": mega if fp8 is None or fp8 in MEGATRON_FP8 else None}
