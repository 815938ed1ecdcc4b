"""The training records: the step (:class:`Training`) and how it is spread over GPUs
(:class:`Parallel`). Names follow torchtitan's and Megatron-LM's where they have one, so a
layout can be pasted: ``--pp`` (pipeline_parallel_degree, --pipeline-model-parallel-size),
``--vpp`` (virtual stages per rank), ``--cp``, ``--ep``, ``--dp-shard`` and ``--dp-replicate``
(HSDP), FSDP2's mixed-precision policy (``--fsdp-param-dtype``, ``--fsdp-reduce-dtype``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import FootprintError
from .fields import Record, opt

Optimizer = Literal["sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop", "adafactor", "sgd-foreach",
                    "sgd-fused", "momentum-foreach", "momentum-fused", "adam-foreach", "adam-fused",
                    "adamw-foreach", "adamw-fused"]
Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp", "tp"]
Grads = Literal["none", "zero"]
Checkpointing = Literal["none", "full", "selective"]
Granularity = Literal["full", "selective"]
PipelineSchedule = Literal["1f1b", "interleaved-1f1b", "gpipe"]
FsdpDtype = Literal["fp32", "bf16", "fp16"]
Fp8Recipe = Literal["none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed", "mxfp8"]
Framework = Literal["torch", "megatron"]
Fp8Engine = Literal["torchao", "transformer-engine"]
Loss = Literal["fp32", "logits", "fused"]
MoeDispatcher = Literal["alltoall", "deepep"]
FP8_ENGINE_ALIASES = {"te": "transformer-engine", "transformer_engine": "transformer-engine"}

# torchtitan's schedule names (pipeline_parallel_schedule) and torch's dtype names, as typed
SCHEDULE_ALIASES = {"interleaved1f1b": "interleaved-1f1b", "interleaved": "interleaved-1f1b",
                    "schedule1f1b": "1f1b", "schedulegpipe": "gpipe", "scheduleinterleaved1f1b": "interleaved-1f1b"}
# the stacks built on each runtime, as people name them
FRAMEWORK_ALIASES = {"torchtitan": "torch", "pytorch": "torch", "fsdp2": "torch", "megatron-lm": "megatron",
                     "megatron-core": "megatron", "mcore": "megatron", "nemo": "megatron",
                     "megatron-bridge": "megatron"}
# Megatron-core's recompute_modules priced (trace/recompute.py): output-discarding ones, then whole modules
DISCARDING = ("layernorm", "moe_act", "mla_up_proj")
RECOMPUTE_MODULES = (*DISCARDING, "mlp", "moe", "shared_experts", "core_attn")
DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
FSDP_STRATEGIES = ("zero2", "zero3", "fsdp")


@dataclass(frozen=True)
class Training(Record):
    """A training step: forward, backward and the optimizer's step, set up as asked."""

    train: bool = opt(False, deprecated={"--backward": None})
    """a training step: forward, backward and optimizer step (train mode)"""
    optimizer: Optimizer | None = opt(metavar="NAME", what="optimizer")
    """sgd, momentum, adam, adamw, adagrad, rmsprop, adafactor; the first four also as NAME-foreach and
    NAME-fused (with --train; default: no optimizer step, but bench and predict time sgd's)"""
    checkpointing: bool = opt(False)
    """activation checkpointing (with --train)"""
    ac: Checkpointing | None = opt(metavar="none|full|selective", what="activation checkpointing mode",
                                   aliases_of_values={"op": "selective", "selective-op": "selective"})
    """activation checkpointing as torchtitan names it: none; full (every repeated block recomputed in the
    backward, the same as --checkpointing); selective (torchtitan's per-operator policy: each block keeps
    its attention's output and every other matmul's, and recomputes the rest)"""
    selective_ac_option: str = opt("op", metavar="op|N")
    """with --ac selective, torchtitan's selective_ac_option: op (the per-operator policy) or N (every N-th
    repeated block recomputed whole, the N-th, 2N-th and so on, the others kept as they run)"""
    recompute_granularity: Granularity | None = opt(metavar="full|selective")
    """Megatron-core's --recompute-granularity: full (each block recomputed whole, as --ac full) or selective
    (--recompute-modules, by default Megatron's: core_attn)"""
    recompute_modules: tuple[str, ...] = opt((), metavar="NAME")
    """Megatron-core's selective recompute (--recompute-granularity selective --recompute-modules): layernorm
    (each block's norms), moe_act (the experts' activation) and mla_up_proj (multi-latent attention's query, key
    and value), whose outputs are dropped once read and remade in the backward; mlp (a dense MLP), moe (a
    mixture-of-experts layer), shared_experts and core_attn (the attention between its projections: Megatron's
    default), each checkpointed whole. Repeated or comma-separated (with --train)"""
    grads: Grads = opt("none", metavar="none|zero")
    """none: gradients appear in the backward (first step, zero_grad(set_to_none=True)); zero: kept between
    steps, so they exist before the forward"""

    loss: Loss = opt("fp32", metavar="fp32|logits|fused")
    """how a language model's cross-entropy loss runs: fp32 (on the logits cast to fp32 first, as
    transformers' and torchtitan's losses do; with --framework megatron, Megatron-core's, which makes that
    fp32 copy the softmax and then the gradient in place), logits (in the logits' own dtype, as NeMo AutoModel's with
    fp32_upcast false) or fused (one kernel that keeps the logits and writes their gradient: flash-attn's
    cross entropy, as llm-foundry and TinyLlama train)"""

    fused_kernels: bool = opt(False)
    """a Hugging Face language model's RMSNorms, SwiGLU MLPs and experts' gates as fused kernels that keep
    their inputs for the backward and recompute the rest (Transformer Engine's, Liger's or compiled ones, as
    NeMo AutoModel's "TE" kernels run them; always with --framework megatron), where the model's own code
    keeps fp32 copies and every intermediate product"""

    STEP_OPTIMIZER: ClassVar[str] = "sgd"  # the optimizer of a step that is timed, unless one is named

    @property
    def selective(self) -> bool:
        """Selective per-operator checkpointing rather than whole blocks recomputed."""
        return self.ac == "selective" and self.selective_ac_option == "op"

    @property
    def ac_every(self) -> int:
        """Every how many repeated blocks one is checkpointed (1: each of them)."""
        return int(self.selective_ac_option) if self.ac == "selective" and self.selective_ac_option != "op" else 1

    def _check_granularity(self) -> None:
        """Megatron's --recompute-granularity as the modes it is: full as --ac full, selective as its
        --recompute-modules (core_attn unless named)."""
        granularity = self.recompute_granularity
        if granularity is None:
            return
        if self.ac not in (None, granularity) or (granularity == "selective" and self.checkpointing):
            raise FootprintError(f"--recompute-granularity {granularity} is Megatron-core's checkpointing; it does not "
                                 "combine with --ac or --checkpointing: give one of them")
        if granularity == "full":
            if self.recompute_modules:
                raise FootprintError("--recompute-modules chooses what selective recompute recomputes: "
                                     "--recompute-granularity full recomputes each block whole")
            object.__setattr__(self, "ac", "full")
        elif not self.recompute_modules:
            object.__setattr__(self, "recompute_modules", ("core_attn",))

    @property
    def step_optimizer(self) -> str:
        """The optimizer a timed training step runs (``bench``, ``predict``): the one named, else sgd."""
        return self.optimizer or self.STEP_OPTIMIZER

    def check(self) -> None:
        option = self.selective_ac_option
        if option != "op" and not (option.isdigit() and int(option) >= 1):
            raise FootprintError(f"--selective-ac-option takes op or a whole number of blocks N >= 1, got '{option}'")
        if option != "op" and self.ac != "selective":
            raise FootprintError(f"--selective-ac-option {option} chooses how --ac selective checkpoints: add --ac "
                                 "selective")
        if self.ac == "none" and self.checkpointing:
            raise FootprintError("--ac none contradicts --checkpointing: give one of them")
        self._check_granularity()
        if self.ac in ("full", "selective"):
            object.__setattr__(self, "checkpointing", True)
        if self.recompute_modules:
            object.__setattr__(self, "recompute_modules", recompute_names(self.recompute_modules))
            if not self.train:
                raise FootprintError("--recompute-modules only changes training memory: add --train")
            if self.checkpointing:
                raise FootprintError("--recompute-modules is Megatron-core's selective recompute; it does not "
                                     "combine with --ac or --checkpointing (whole blocks are recomputed already)")
        if self.optimizer is not None and not self.train:
            raise FootprintError("--optimizer needs --train (an optimizer only runs in a training step)")
        if self.fused_kernels and not self.train:
            raise FootprintError("--fused-kernels only changes what a training step keeps: add --train")
        if self.checkpointing and not self.train:
            flag = f"--ac {self.ac}" if self.ac in ("full", "selective") else "--checkpointing"
            raise FootprintError(f"{flag} only changes training memory: add --train")


@dataclass(frozen=True)
class Parallel(Record):
    """How a training step is spread over GPUs."""

    gpus: int = opt(1, metavar="N")
    """GPUs in all (memory is per rank)"""
    tp: int | None = opt(metavar="N")
    """tensor-parallel ranks among --gpus (Megatron-style split of attention and MLP linears; default 1, llm:
    --gpus)"""
    strategy: Strategy = opt("ddp", metavar="S", what="strategy")
    """how model states are split across the data-parallel ranks: ddp, zero1, zero2, zero3, fsdp; tp: every GPU
    in one tensor-parallel group (the same as --tp GPUS)"""
    sequence_parallel: bool = opt(False)
    """with --tp: norms and residuals hold 1/tp of the sequence (Megatron-LM's sequence parallelism)"""
    vocab_parallel: bool = opt(False)
    """with --tp: the input embedding and the output head split by vocabulary, the loss taken on each rank's share
    of the logits (Megatron-LM's VocabParallelEmbedding and vocab-parallel cross entropy; torchtitan's plan with
    loss_parallel)"""
    async_tp: bool = opt(False, aliases=("--enable-async-tensor-parallel", "--tp-comm-overlap"))
    """with --tp: the tensor-parallel collectives overlap the matmuls they feed (torchtitan's async TP, Megatron-LM's
    --tp-comm-overlap): exposed only where they outlast the compute of their phase; under PyTorch (not --framework
    megatron) the backward's reduce-scatter of an input gradient summed over several linears stays exposed"""
    pp: int = opt(1, metavar="N", aliases=("--pipeline-model-parallel-size",))
    """pipeline-parallel stages among --gpus, each a contiguous run of the model's repeated blocks (torchtitan's
    pipeline_parallel_degree)"""
    vpp: int = opt(1, metavar="N", aliases=("--virtual-pipeline-model-parallel-size",))
    """virtual stages per pipeline rank: each rank holds --vpp chunks of blocks (interleaved 1F1B)"""
    pp_schedule: PipelineSchedule | None = opt(metavar="NAME", aliases_of_values=SCHEDULE_ALIASES,
                                               what="pipeline schedule")
    """1f1b, interleaved-1f1b or gpipe (torchtitan's 1F1B, Interleaved1F1B, GPipe; default: 1f1b, or
    interleaved-1f1b with --vpp 2 or more)"""
    pp_first_stage_less_layers: int | None = opt(metavar="N",
                                                 aliases=("--pipeline-parallel-first-stage-less-layers",))
    """with --pp: split the blocks as torchtitan does (generate_llm_fqn_per_model_part), the embedding counted as N
    blocks on the first stage and the norm and head as --pp-last-stage-less-layers on the last, the rest spread
    evenly, earlier stages taking one more where they do not divide (torchtitan's default: 1 and 1; default here:
    an even split, which must divide the blocks)"""
    pp_last_stage_less_layers: int | None = opt(metavar="N", aliases=("--pipeline-parallel-last-stage-less-layers",))
    """with --pp: the norm and head counted as N blocks on the last stage (see --pp-first-stage-less-layers)"""
    grad_accum: int = opt(1, metavar="N", aliases=("--gradient-accumulation-steps",))
    """micro-batches of --batch per optimizer step on each data-parallel rank (with --pp, the pipeline's
    micro-batches)"""
    pp_microbatches: int | None = opt(metavar="N")
    """with --pp: micro-batches one run of the pipeline schedule takes, --grad-accum / N runs a step one after
    another, each with its warm-up and drain (torchtitan and NeMo AutoModel run the schedule once per local batch
    and repeat it to accumulate gradients; default: every micro-batch in one run, as Megatron-core does)"""
    cp: int = opt(1, metavar="N", aliases=("--context-parallel-size",))
    """context-parallel ranks among --gpus (the sequence split among them)"""
    ep: int = opt(1, metavar="N", aliases=("--expert-model-parallel-size",))
    """expert-parallel ranks: the experts of a mixture-of-experts layer split among them (taken from the
    data- and context-parallel ranks, as torchtitan does; more than those, from the tensor-parallel ranks too, as
    Megatron-core's MoE parallel folding does with expert tensor parallelism 1)"""
    moe_dispatcher: MoeDispatcher = opt("alltoall", metavar="NAME", what="MoE token dispatcher")
    """with --ep: how tokens reach their experts: alltoall (NCCL's all-to-all: a copy per expert chosen, Megatron-core's
    alltoall dispatcher, torch's all_to_all) or deepep (DeepEP's kernels, as NeMo AutoModel's and Megatron-core's
    flex dispatcher run them: a token crosses to another node once, whatever its experts there)"""
    overlap_moe_expert_parallel_comm: bool = opt(False, aliases=("--ep-overlap",))
    """with --ep and two or more micro-batches: each micro-batch's all-to-alls run beside another micro-batch's
    forward or backward (Megatron-core's overlap_moe_expert_parallel_comm, its merged 1F1B schedule): exposed only
    where they outlast the step's compute"""
    dp_shard: int | None = opt(metavar="N")
    """data-parallel ranks one FSDP group shards over (torchtitan's data_parallel_shard_degree; default: all)"""
    dp_replicate: int | None = opt(metavar="N")
    """FSDP groups that replicate each other (HSDP; torchtitan's data_parallel_replicate_degree; default 1)"""
    fsdp_param_dtype: FsdpDtype | None = opt(metavar="DTYPE", aliases_of_values=DTYPE_ALIASES,
                                             what="FSDP parameter dtype")
    """the dtype FSDP2 gathers parameters in (MixedPrecisionPolicy.param_dtype: fp32, bf16, fp16; default: the
    parameters' own)"""
    fsdp_reduce_dtype: FsdpDtype | None = opt(metavar="DTYPE", aliases_of_values=DTYPE_ALIASES,
                                              what="FSDP reduce dtype")
    """the dtype FSDP2 reduce-scatters gradients in (MixedPrecisionPolicy.reduce_dtype; default: --fsdp-param-dtype
    where given, as FSDP2 does, else the gradients' own)"""
    grad_reduce_dtype: FsdpDtype | None = opt(metavar="DTYPE", aliases_of_values=DTYPE_ALIASES,
                                              what="gradient reduce dtype")
    """with --framework megatron: the dtype of Megatron-core's gradient buffer, which accumulates the
    micro-batches' gradients and is reduced across the data-parallel ranks (grad_reduce_in_fp32: fp32, the default,
    as Megatron-LM runs bf16; bf16 where it is off, as Megatron-Bridge's performance recipes run)"""
    fp8: Fp8Recipe | None = opt(metavar="RECIPE", what="FP8 recipe")
    """FP8 training of the linear layers but the head (torchao float8 and MX, Transformer Engine): tensorwise or
    rowwise scales computed from each tensor (dynamic; rowwise_with_gw_hp: the weight gradient in bf16), delayed from
    an amax history, mxfp8 a scale per 32 values (Blackwell's block-scaled matmuls); the three matmuls of each at the
    fp8 rate, the casts as kernels of their own (with bf16 or fp16 arithmetic; none: off)"""
    fp8_engine: Fp8Engine | None = opt(metavar="NAME", aliases_of_values=FP8_ENGINE_ALIASES, what="FP8 library")
    """what runs --fp8: torchao (its float8 and MX training; the default under PyTorch) or transformer-engine (its
    Linear modules, as llm-foundry's fc_type te, Lightning's and Accelerate's TE back ends use them: each input and
    output gradient cast once with its transpose, the input kept in fp8 for the backward, the weight cast every
    micro-batch; always so under --framework megatron, which casts the weight once a step)"""
    framework: Framework = opt("torch", metavar="NAME", aliases_of_values=FRAMEWORK_ALIASES,
                               what="training framework")
    """what runs the layout, as it holds memory: torch (torch.distributed: FSDP2, DTensor, pipelining; torchtitan)
    or megatron (Megatron-core: Megatron-LM, NeMo, Megatron-Bridge); a pipeline's receive buffers differ"""
    network: str | None = opt(metavar="ID")
    """the network between nodes when --gpus spans several (ib-edr, ib-hdr, ib-ndr, eth-100g, eth-200g,
    eth-400g; hardware/networks.toml)"""
    network_gbps: float | None = opt(metavar="GBPS")
    """a network between nodes given by its speed: Gb/s per NIC port, one direction (with --network: replaces its
    port speed)"""
    nics_per_node: int | None = opt(metavar="N")
    """NIC ports per node for the network between nodes (default: --network's, or one per GPU)"""
    gpus_per_node: int = opt(8, metavar="N")
    """GPUs per node"""
    bucket_view: bool = opt(False)
    """DDP with gradient_as_bucket_view=True (no second copy of the gradients)"""

    def check(self) -> None:
        if self.gpus < 1:
            raise FootprintError(f"--gpus must be at least 1, got {self.gpus}")
        if self.gpus_per_node < 1:
            raise FootprintError(f"--gpus-per-node must be at least 1, got {self.gpus_per_node}")
        for name in ("pp", "vpp", "cp", "ep", "grad_accum", "dp_shard", "dp_replicate", "nics_per_node"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise FootprintError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.network_gbps is not None and not self.network_gbps > 0:
            raise FootprintError(f"--network-gbps must be more than 0, got {self.network_gbps}")
        if self.nics_per_node is not None and self.network is None and self.network_gbps is None:
            raise FootprintError("--nics-per-node describes a network between nodes: add --network or "
                                 "--network-gbps")
        if self.tp is not None and (self.tp < 1 or self.gpus % self.tp):
            raise FootprintError(f"--tp {self.tp} must divide --gpus {self.gpus}")
        if self.strategy == "tp" and self.tp not in (None, self.gpus):
            raise FootprintError(f"--strategy tp puts every GPU in one tensor-parallel group: --tp {self.tp} "
                                 f"contradicts it (--gpus {self.gpus})")
        if self.strategy == "tp" and self.pp * self.cp > 1:
            raise FootprintError(f"--strategy tp puts every GPU in one tensor-parallel group: --pp {self.pp} and "
                                 f"--cp {self.cp} leave no GPU for them; give --tp instead")
        self._check_pipeline()
        replica = self.tensor * self.pp * self.cp
        if self.gpus % replica:
            raise FootprintError(f"--tp {self.tensor} x --pp {self.pp} x --cp {self.cp} = {replica} GPUs per model "
                                 f"replica does not divide --gpus {self.gpus}")
        if self.ep_folded and (self.tensor * self.data * self.cp) % self.ep:
            raise FootprintError(f"--ep {self.ep} must divide the data- x context-parallel ranks, {self.data} x "
                                 f"{self.cp} = {self.data * self.cp} (--gpus / (--tp x --pp)), or, folded over the "
                                 f"tensor-parallel ranks too, {self.tensor} x {self.data * self.cp} = "
                                 f"{self.tensor * self.data * self.cp}")
        if self.moe_dispatcher != "alltoall" and self.ep <= 1:
            raise FootprintError("--moe-dispatcher sends tokens to the experts of other ranks: add --ep 2 or more")
        if self.overlap_moe_expert_parallel_comm and (self.ep <= 1 or self.grad_accum < 2):
            raise FootprintError("--overlap-moe-expert-parallel-comm hides one micro-batch's all-to-alls behind "
                                 "another's compute: add --ep 2 or more and --grad-accum 2 or more")
        self._check_fsdp()
        self._check_fp8()

    @property
    def stage_weights(self) -> tuple[int, int] | None:
        """torchtitan's split (:func:`~torch_footprint.estimate.layouts.pipeline.split_blocks`): the
        first and last stages' non-block weights, or None for an even split."""
        first, last = self.pp_first_stage_less_layers, self.pp_last_stage_less_layers
        return None if first is None and last is None else (1 if first is None else first, 1 if last is None else last)

    def _check_pipeline(self) -> None:
        for name in ("pp_first_stage_less_layers", "pp_last_stage_less_layers"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise FootprintError(f"--{name.replace('_', '-')} must be at least 0, got {value}")
            if value is not None and self.pp == 1:
                raise FootprintError(f"--{name.replace('_', '-')} splits a pipeline: add --pp 2 or more")
        per = self.pp_microbatches
        if per is not None and self.pp == 1:
            raise FootprintError(f"--pp-microbatches {per} runs a pipeline's schedule: add --pp 2 or more")
        if per is not None and (per < 1 or self.grad_accum % per):
            raise FootprintError(f"--pp-microbatches {per} must divide --grad-accum {self.grad_accum} (the "
                                 "micro-batches of a step), at least 1")
        if self.pp_schedule is not None and self.pp == 1:
            raise FootprintError(f"--pp-schedule {self.pp_schedule} schedules a pipeline: add --pp 2 or more")
        if self.vpp > 1 and self.pp == 1:
            raise FootprintError(f"--vpp {self.vpp} interleaves a pipeline: add --pp 2 or more")
        if self.vpp > 1 and self.pp_schedule in ("1f1b", "gpipe"):
            raise FootprintError(f"--pp-schedule {self.pp_schedule} runs one stage per rank: --vpp {self.vpp} needs "
                                 "interleaved-1f1b")

    @property
    def te_fp8(self) -> bool:
        """Whether Transformer Engine runs --fp8 (always under Megatron-core; --fp8-engine transformer-engine)."""
        te = self.framework == "megatron" or self.fp8_engine == "transformer-engine"
        return self.fp8 not in (None, "none") and te

    def _check_fp8(self) -> None:
        if self.fp8_engine is not None and self.fp8 in (None, "none"):
            raise FootprintError(f"--fp8-engine {self.fp8_engine} runs FP8 training: add --fp8 RECIPE")
        if self.framework == "megatron" and self.fp8_engine == "torchao":
            raise FootprintError("--fp8-engine torchao: Megatron-core's FP8 is Transformer Engine's")
        if self.te_fp8 and str(self.fp8).startswith("rowwise"):
            raise FootprintError(f"--fp8 {self.fp8} is torchao's; Transformer Engine's recipes priced here: "
                                 "tensorwise, delayed, mxfp8")

    def _check_fsdp(self) -> None:
        if self.grad_reduce_dtype is not None and self.framework != "megatron":
            raise FootprintError("--grad-reduce-dtype sets Megatron-core's gradient buffer: add --framework "
                                 "megatron (under FSDP, --fsdp-reduce-dtype)")
        for name in ("dp_shard", "dp_replicate", "fsdp_param_dtype", "fsdp_reduce_dtype"):
            if getattr(self, name) is not None and self.strategy not in FSDP_STRATEGIES:
                raise FootprintError(f"--{name.replace('_', '-')} sets up FSDP: add --strategy fsdp (it is "
                                     f"--strategy {self.strategy})")
        shard, rep = self.dp_shard, self.dp_replicate
        if shard is not None and rep is not None and shard * rep != self.data:
            raise FootprintError(f"--dp-shard {shard} x --dp-replicate {rep} must be the {self.data} data-parallel "
                                 "ranks (--gpus / (--tp x --pp x --cp))")
        for name, value in (("--dp-shard", shard), ("--dp-replicate", rep)):
            if value is not None and self.data % value:
                raise FootprintError(f"{name} {value} must divide the {self.data} data-parallel ranks (--gpus / "
                                     "(--tp x --pp x --cp))")

    @property
    def ep_folded(self) -> bool:
        """Whether the expert-parallel ranks are not drawn from the data- x context-parallel ones alone
        (they do not divide them) and so take tensor-parallel ranks too (Megatron-core's MoE parallel
        folding, Liu et al. 2025, "MoE Parallel Folding", arXiv:2504.14960): the experts' group is
        then adjacent ranks, and each expert whole on its rank (expert tensor parallelism 1)."""
        return (self.data * self.cp) % self.ep != 0

    @property
    def tensor(self) -> int:
        """The tensor-parallel degree of a training layout (1 unless --tp or --strategy tp)."""
        return self.gpus if self.strategy == "tp" else self.tp or 1

    @property
    def data(self) -> int:
        """Data-parallel ranks: --gpus / (--tp x --pp x --cp)."""
        return self.gpus // (self.tensor * self.pp * self.cp)

    @property
    def sharding(self) -> str:
        """How the data-parallel ranks hold the model states (tp: no data parallelism, ddp's)."""
        return "ddp" if self.strategy == "tp" else self.strategy

    @property
    def shard_group(self) -> int:
        """The data-parallel ranks one FSDP group shards the model states over (HSDP: --dp-shard)."""
        if self.dp_shard is not None:
            return self.dp_shard
        return self.data // self.dp_replicate if self.dp_replicate else self.data

    @property
    def state_shards(self) -> int:
        """The ranks one rank's model states are divided over: its FSDP group under FSDP or ZeRO-2/3,
        else every data-parallel rank; the context-parallel ranks hold the same weights, so they
        count with them."""
        return (self.shard_group if self.sharding in FSDP_STRATEGIES else self.data) * self.cp

    @property
    def per_schedule(self) -> int:
        """Micro-batches one run of the pipeline schedule takes (all of a step's unless --pp-microbatches)."""
        return self.pp_microbatches or self.grad_accum

    @property
    def schedule(self) -> str:
        """The pipeline schedule: the one named, else 1f1b (interleaved-1f1b with --vpp 2 or more)."""
        return self.pp_schedule or ("interleaved-1f1b" if self.vpp > 1 else "1f1b")


def recompute_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """--recompute-modules as given (repeated or comma-separated), checked, in Megatron's spelling."""
    out: list[str] = []
    for item in names:
        for name in (n.strip().lower().replace("-", "_") for n in item.split(",")):
            if not name:
                continue
            if name not in RECOMPUTE_MODULES:
                raise FootprintError(f"unknown --recompute-modules name '{name}'; valid: "
                                     f"{', '.join(RECOMPUTE_MODULES)}")
            if name not in out:
                out.append(name)
    return tuple(out)
