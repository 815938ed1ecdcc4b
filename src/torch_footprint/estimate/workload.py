"""A workload traced as it would run: an inference, or a training step with its optimizer,
precision and checkpointing, on one rank of a tensor-parallel layout. ``memory``,
``predict``, ``fit`` and ``report`` all start here."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch import nn

from ..dtypes import name_of
from ..errors import FootprintError
from ..hardware import Accelerator
from ..settings import Parallel, Training, Workload
from ..settings.training import FSDP_STRATEGIES
from ..sources import Workload as Prepared
from ..sources import prepare
from ..sources.inputs import InputSpec
from ..trace import StepOptions, Trace, setups, trace_model
from ..trace.recompute import enable_recompute
from .kernels.fp8 import FP8_HEADS, block_scaled
from .kernels.sdpa import ATTENTION_KERNELS, cuda_backend
from .layouts.cp_ep import moe_shape, split_sequence
from .layouts.fused import fuse_like_megatron, merged_linears, rope_modules, te_fp8_inputs
from .layouts.pipeline import check_layout
from .layouts.sharding import megatron_scales
from .layouts.tensor_parallel import apply_sequence_parallel, is_conv1d, shrink_for_tp, split_vocab, tp_plan

DEFAULT_PRECISION = "fp32"
DUPLICATED = frozenset({"q_a_proj", "kv_a_proj_with_mqa", "kv_a_proj"})  # MLA's down projections, by design


def precision_of(w: Workload) -> str:
    """The arithmetic a traced step runs in (fp32 unless the workload says)."""
    return w.precision or DEFAULT_PRECISION


def fp8_rows(rows: list[Accelerator], p: Parallel, w: Workload, explicit: bool) -> list[Accelerator]:
    """The accelerators FP8 training can run on (a published fp8 rate: fp8 units); one named
    without them, or arithmetic that is not bf16 or fp16, is refused."""
    if p.fp8 in (None, "none"):
        return rows
    if precision_of(w) not in ("bf16", "bf16-mixed", "fp16", "fp16-mixed"):
        raise FootprintError(f"--fp8 {p.fp8} casts bf16 or fp16 matmuls to fp8: add --precision bf16-mixed")
    lacking = [a for a in rows if not a.peak("fp8")]
    if explicit and lacking:
        raise FootprintError(f"--fp8 {p.fp8}: {lacking[0].id} has no fp8 units (no fp8 rate in its row)")
    unscaled = [a for a in rows if p.fp8 == "mxfp8" and not block_scaled(a)]
    if explicit and unscaled:
        raise FootprintError(f"--fp8 mxfp8: {unscaled[0].id} has no block-scaled (MX) matmul units; "
                             "NVIDIA's GPUs have them from Blackwell (compute capability 10.0)")
    kept = [a for a in rows if a.peak("fp8") and a not in unscaled]
    if not kept:
        raise FootprintError(f"--fp8 {p.fp8}: no accelerator considered has {'MX' if unscaled else 'fp8'} units")
    return kept


def trace_step(w: Workload, t: Training = Training(), p: Parallel = Parallel(), *,
               cuda_sm: tuple[int, int] | None = None) -> tuple[Trace, list[str]]:
    """Trace the step ``t`` of ``w`` at ``w.batch`` (the inputs' own when None), on one rank of
    ``p``'s tensor parallelism; the trace and its notes. ``cuda_sm``: the step runs on NVIDIA GPUs
    of that compute capability, whose attention kernel (sdp_utils' choice, :mod:`.kernels.sdpa`)
    the trace follows where the CPU's would differ (dropout in training: fused there), as it
    follows the modules' own choices under CUDA's autocast (StepOptions.cuda)."""
    if p.sequence_parallel and p.tensor <= 1:
        raise FootprintError("--sequence-parallel splits the sequence among tensor-parallel ranks: add --tp 2 "
                             "or more")
    if p.vocab_parallel and p.tensor <= 1:
        raise FootprintError("--vocab-parallel splits the vocabulary among tensor-parallel ranks: add --tp 2 or more")
    if p.async_tp and p.tensor <= 1:
        raise FootprintError("--async-tp overlaps the tensor-parallel collectives: add --tp 2 or more")
    prec = precision_of(w)
    param_dtype, autocast = setups.precision(prec)
    cuda = cuda_sm is not None
    opt = setups.optimizer(t.optimizer, cuda=cuda) if t.train else None
    work = prepare(w.model, w.inputs, weights=w.weights, trust_remote_code=w.trust_remote_code).at_batch(w.batch)
    built = work.built
    notes = [n for n in built.notes if not (w.batch and n.startswith("default input"))]
    if w.batch:
        notes.append(f"batch {w.batch}: inputs " + ", ".join(str(x) for x in work.specs))
    m = built.model
    float_dtypes = {q.dtype for q in m.parameters() if q.is_floating_point()}
    if float_dtypes and float_dtypes != {param_dtype}:
        if built.source == "module":
            raise FootprintError(f"precision '{prec}' needs {name_of(param_dtype)} weights: give the "
                                 "model by name, or cast your module to that dtype yourself")
        m = built.model = m.to(param_dtype)
        notes.append(f"weights cast to {name_of(param_dtype)} for precision {prec}")
        work = work.cast(param_dtype)
    megatron = megatron_dtype(p, autocast, param_dtype)
    if megatron is not None:  # Megatron-core runs the model in its low dtype, the fp32 copies in its optimizer
        m = built.model = m.to(megatron)
        work = work.cast(megatron)
        notes.append(f"Megatron-core's mixed precision: the model in {name_of(megatron)}, its gradients accumulated "
                     f"in {p.grad_reduce_dtype or 'fp32'}, an fp32 master copy and optimizer state (the distributed "
                     "optimizer's, sharded over the data-parallel ranks with --strategy zero1)")
    low = fsdp_compute_dtype(p, param_dtype)
    if low is not None:  # FSDP2 gathers each unit in its param_dtype: the forward and backward run in it
        m = built.model = m.to(low)
        work = work.cast(low)
        notes.append(f"FSDP's mixed-precision policy: parameters gathered and computed in {name_of(low)}; each "
                     f"rank's shard, gradients and optimizer state stay {name_of(param_dtype)}")
    check_layout(m, p)
    if p.cp > 1:  # one context-parallel rank's share of every sequence
        work = Prepared(work.built, [_seq_share(x, p.cp) for x in work.pos],
                        {k: _seq_share(v, p.cp) for k, v in work.kw.items()})
        notes.append(f"context parallel over {p.cp} ranks: each holds 1/{p.cp} of the sequence; attention passes "
                     "the key/value blocks round a ring")
    if p.tensor > 1:  # one rank's share, on a copy: a module the caller gave stays whole
        m = built.model = copy.deepcopy(m)
        whole = _left_whole(m, tp_plan(m))
        plan = shrink_for_tp(m, p.tensor)
        notes.append(f"tensor parallel over {p.tensor} ranks: one rank's share of the attention and MLP linears")
        if whole:
            notes.append("tensor parallel: left whole on every rank (no split known for them): " + "; ".join(whole))
        if p.vocab_parallel:
            split_vocab(m, p.tensor)
            notes.append(f"vocabulary parallel: the embedding, the head and the logits hold 1/{p.tensor} of the "
                         "vocabulary")
        if p.sequence_parallel:
            apply_sequence_parallel(m, p.tensor, plan)
            notes.append(f"sequence parallel: norms and residuals between the blocks hold 1/{p.tensor} of the "
                         "sequence; each split linear's input gathered, its output reduce-scattered")
    unfuse: Any = lambda: None  # noqa: E731
    fused_paths: list[str] = []
    rotary: list[str] = []
    if p.framework == "megatron" or t.fused_kernels:  # (a Training with fused_kernels is a training step)
        def patched() -> set[str]:
            return {name for name, mod in m.named_modules() if "forward" in vars(mod) or "_apply_gate" in vars(mod)}

        before = patched()
        fused, unfuse = fuse_like_megatron(m)
        fused_paths = sorted(patched() - before)  # the modules now running fused kernels
        whose = "Megatron-core's" if p.framework == "megatron" else "--fused-kernels:"
        if fused:
            notes.append(f"{whose} fused kernels: " + ", ".join(fused) + " keep their inputs for the backward")
        rotary = rope_modules(m) if p.framework == "megatron" else []
        if rotary:  # apply_rope_fusion: the attention's elementwise work one kernel a pass
            fused_paths = sorted({*fused_paths, *rotary})
            notes.append(f"Megatron-core's fused RoPE: {len(rotary)} attention modules' rotations one kernel each way")
    unfp8: Any = lambda: None  # noqa: E731
    if p.te_fp8 and t.train:
        kept, unfp8 = te_fp8_inputs(m, FP8_HEADS)
        notes.append(f"Transformer Engine's FP8: {kept} linears and expert groups keep their inputs in fp8 for the "
                     "backward")
    undo: Any = lambda: None  # noqa: E731
    if t.checkpointing:
        what, undo = setups.enable_checkpointing(m, selective=t.selective, every=t.ac_every)
        notes.append("activation checkpointing: " + what)
    unrecompute: Any = lambda: None  # noqa: E731
    if t.recompute_modules:
        what, unrecompute = enable_recompute(m, t.recompute_modules)
        notes.append(what)
    attention, unattend = setups.use_attention(m, w.attention)
    notes += [attention] if attention else []
    fuse = _always if setups.fuses_attention(w.attention) else _cuda_fuses(cuda_sm)
    # Megatron-core takes the loss on fp32 logits its own way (trace.step._MegatronCrossEntropy)
    loss = "megatron" if p.framework == "megatron" and t.loss == "fp32" else t.loss
    try:
        trace = _trace(work, train=t.train, backward=t.train, reuse=w.reuse,
                       step=StepOptions(opt, autocast, grads_kept=t.grads == "zero",
                                        fuse_attention=fuse, loss=loss, cuda=cuda))
    except FootprintError as e:
        if p.tensor > 1 and str(e).startswith("the model raised"):  # the split model, not the model, failed
            raise FootprintError(f"--tp {p.tensor}: one rank's share of {type(m).__name__} does not run, so its "
                                 f"attention or MLP is not one this tool knows how to split ({e})") from e
        raise
    finally:
        unattend()
        unrecompute()
        undo()
        unfp8()
        unfuse()
    if w.attention in ATTENTION_KERNELS:  # read by kernels.matrix: the fused kernel named, not PyTorch's choice
        trace.settings["attention_kernel"] = w.attention
    if p.stage_weights is not None:  # read by layouts.pipeline: torchtitan's split of the blocks
        trace.settings["stage_weights"] = list(p.stage_weights)
    if fused_paths:  # read by kernels.roofline: each module's elementwise chains priced as one kernel
        trace.settings["fused_modules"] = fused_paths
    if rotary:  # read by kernels.roofline: the rotation's indexing inside the fused kernel
        trace.settings["rope_modules"] = rotary
    if p.framework == "megatron" and t.train:  # read by kernels.roofline: gradient_accumulation_fusion
        # (which Megatron-FSDP turns off: its guide's required --no-gradient-accumulation-fusion) and by
        # kernels.fp8.fp8_casts: under --fp8, Transformer Engine's casts, its weights' cached a step
        # (Megatron-core passes is_first_microbatch)
        trace.settings.update(wgrad_accumulation_fused=p.sharding not in FSDP_STRATEGIES,
                              fp8_engine="transformer-engine", fp8_weight_cached=True, merged_linears=merged_linears(m))
    elif p.te_fp8:  # read by kernels.fp8.fp8_casts: Transformer Engine's linears under PyTorch
        trace.settings["fp8_engine"] = "transformer-engine"
    if p.tensor > 1 and (p.sequence_parallel or p.framework == "megatron"):  # read by layouts.comm
        trace.settings["tp_inputs"] = "per module"
    if p.tensor > 1 and p.framework != "megatron":  # read by kernels.fp8.fp8_casts (tensorwise)
        trace.settings["fp8_colwise_inputs"] = colwise_input_shares(plan, p.tensor if p.sequence_parallel else 1)
    if p.cp > 1 or p.ep > 1:  # read by layouts.cp_ep
        trace.settings.update(cp=p.cp, ep=p.ep, moe=moe_shape(m) if p.ep > 1 else None,
                              sequence_split=p.tensor if p.sequence_parallel and p.tensor > 1 else 1)
    if megatron is not None and t.train:  # the states Megatron keeps beside the traced ones (sharding.state_scales)
        grads = FSDP_DTYPES[p.grad_reduce_dtype or "fp32"].itemsize
        trace.settings["megatron_scales"] = megatron_scales(megatron.itemsize, optimizer_moments(t.optimizer), grads)
    if low is not None:  # the sharded states are the wider dtype's (roofline.master_scale)
        trace.settings["fsdp_compute_dtype"] = name_of(low)
        trace.settings["fsdp_state_scale"] = param_dtype.itemsize / low.itemsize
        reduce = p.fsdp_reduce_dtype or p.fsdp_param_dtype  # FSDP2 reduces in param_dtype unless told
        trace.settings["fsdp_reduce_scale"] = FSDP_DTYPES[str(reduce)].itemsize / low.itemsize
    return trace, notes + trace.notes


def colwise_input_shares(plan: dict[str, str], split: int) -> dict[str, int]:
    """For each column-parallel linear, the share of its input's FP8 cast it carries under torchao's
    float8 tensor-parallel styles, as torchtitan applies them with tensorwise scaling
    (PrepareFloat8ModuleInput before the attention and the MLP, Float8ColwiseParallel on their input
    linears): the module's input is cast once, on each rank's ``split`` of the sequence before the
    all-gather, which then carries fp8, and the query, key and value (or gate and up) linears read
    that one fp8 tensor; so each carries 1 / (``split`` x the linears sharing it) of a cast."""
    cols = [path for path, style in plan.items() if style == "colwise"]
    parents = [path.rpartition(".")[0] for path in cols]
    return {path: split * parents.count(parent) for path, parent in zip(cols, parents, strict=True)}


def layout_training(t: Training, p: Parallel) -> Training:
    """The step as layout ``p`` runs it: with several micro-batches a step (gradient accumulation
    or a pipeline) the gradients accumulate, so they exist before each micro-batch's forward."""
    return dataclasses.replace(t, grads="zero") if p.grad_accum > 1 or p.pp > 1 else t


def trace_key(w: Workload, t: Training, p: Parallel, cuda_sm: tuple[int, int] | None = None) -> tuple[Any, ...]:
    """What the trace of ``t`` under layout ``p`` depends on (what :func:`trace_step` reads of
    them): layouts with equal keys are priced from one trace. The pipeline split and schedule,
    the micro-batches a step and the network do not change it; the data-parallel sharding only
    through FSDP's compute dtype and, under Megatron-core, through Megatron-FSDP's own settings; FP8 through
    Transformer Engine's linears, which keep their inputs in fp8."""
    fsdp_dtype = p.fsdp_param_dtype if p.sharding in FSDP_STRATEGIES else None
    # Megatron-core's gradient buffer, and whether it is Megatron-FSDP's (no gradient accumulation fusion)
    megatron = ((p.grad_reduce_dtype or "fp32"), p.sharding in FSDP_STRATEGIES) if p.framework == "megatron" else None
    return (repr(w), layout_training(t, p), p.tensor, p.sequence_parallel, p.vocab_parallel, p.cp, p.ep, fsdp_dtype,
            megatron, p.te_fp8, cuda_sm)


def _cuda_fuses(sm: tuple[int, int] | None) -> Any:
    """Whether CUDA on ``sm`` runs an attention call fused (None: follow the CPU)."""
    if sm is None:
        return None
    return lambda call: cuda_backend(call, sm)[0] != "math"


def _always(call: dict[str, Any]) -> bool:
    """Every attention call fused (``--attention fused``: the framework's kernel, whatever the CPU's)."""
    return True


def fused_attention_step(kind: str | None) -> StepOptions | None:
    """The step options ``--attention kind`` asks for: every attention call traced as one fused
    kernel where ``kind`` is ``fused`` or a kernel named (None: the model's own choice)."""
    return StepOptions(fuse_attention=_always) if setups.fuses_attention(kind) else None


def _seq_share(x: Any, cp: int) -> Any:
    """An input's share on one context-parallel rank (its second dimension split)."""
    if isinstance(x, InputSpec) and x.value is None:
        return InputSpec(split_sequence(tuple(x.shape), cp), x.dtype, x.name, x.value)
    return x


FSDP_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def fsdp_compute_dtype(p: Parallel, param_dtype: torch.dtype) -> torch.dtype | None:
    """The dtype FSDP2's MixedPrecisionPolicy(param_dtype=...) makes the forward and backward run
    in, where it is narrower than the parameters' own (None: the parameters' own). FSDP2 casts
    each unit's gathered parameters to it (torch/distributed/fsdp/_fully_shard/_fsdp_param.py), so
    every activation follows; the sharded parameters, their gradients (cast to reduce_dtype
    for the reduce-scatter, then kept in the sharded parameter's dtype) and the optimizer
    state stay in the parameters' own dtype."""
    if p.sharding not in FSDP_STRATEGIES or p.fsdp_param_dtype is None:
        return None
    low = FSDP_DTYPES[p.fsdp_param_dtype]
    return low if low.itemsize < param_dtype.itemsize else None


def megatron_dtype(p: Parallel, autocast: torch.dtype | None, param_dtype: torch.dtype) -> torch.dtype | None:
    """The dtype Megatron-core runs the model in under mixed precision (``Float16Module``: the
    autocast dtype), where the layout is Megatron's own data parallelism: ddp, zero1 (its
    distributed optimizer), or fsdp (Megatron-FSDP, which shards the Float16Module's parameters and
    keeps their fp32 main copies in the distributed optimizer); None elsewhere, and under an FSDP2
    mixed-precision policy (``--fsdp-param-dtype``), which is PyTorch's FSDP, not Megatron's."""
    if p.framework != "megatron" or autocast is None:
        return None
    if p.sharding in FSDP_STRATEGIES and p.fsdp_param_dtype is not None:
        return None
    return autocast if autocast.itemsize < param_dtype.itemsize else None


def optimizer_moments(name: str | None) -> int:
    """Tensors per parameter the optimizer keeps: Adam's two moments, one for momentum, RMSprop and
    Adagrad, none for plain SGD (and Adafactor's factored ones, counted as none)."""
    base = (name or "sgd").split("-")[0]
    return 2 if base in ("adam", "adamw") else 1 if base in ("momentum", "rmsprop", "adagrad") else 0


def at_batch(w: Workload, batch: int | None) -> Workload:
    """The same workload at another batch size."""
    return dataclasses.replace(w, batch=batch)


def _trace(work: Prepared, *, train: bool, backward: bool, **options: Any) -> Trace:
    """Trace ``work``'s model in train or eval mode, inside its source's trace context; the
    model is put back as it was afterwards (``train()`` may do more than set flags: timm's
    empties a cache, and every module's own flag comes back, not the root's: the trace's own
    snapshot of the model, taken before the mode is set)."""
    with work.built.trace_context():
        return trace_model(work.model, work.make_inputs(), name=work.built.name, backward=backward,
                           inputs_meta=work.inputs_meta(), train=train, **options)


def first_batch(trace: Trace, batch: int | None) -> int:
    """The batch a trace ran at: the one asked for, else its first input's first dimension."""
    return batch or (int(trace.inputs[0]["shape"][0]) if trace.inputs and trace.inputs[0]["shape"] else 1)


def trace_forward(w: Workload, t: Training = Training(), device: str = "cpu") -> tuple[Trace, list[str]]:
    """A forward (and, for a training step, a backward) pass as ``footprint profile`` traces it:
    eval mode unless training, no optimizer, the model as built unless a precision is given;
    the trace and its notes."""
    if device != "cpu":
        raise FootprintError(f"profiling for device '{device}' is not supported yet: the trace follows the "
                             "CPU's kernels (device='cpu'); FLOP and MAC counts do not depend on it")
    if w.precision and w.precision.endswith("-mixed"):
        raise FootprintError(f"profile counts one dtype: give --precision {w.precision.removesuffix('-mixed')} "
                             f"instead of {w.precision} (autocast is priced by memory, predict and fit)")
    work = prepare(w.model, w.inputs, dtype=w.precision, weights=w.weights, trust_remote_code=w.trust_remote_code)
    work = work.at_batch(w.batch) if w.batch else work
    attention, unattend = setups.use_attention(work.model, w.attention)
    step = fused_attention_step(w.attention)
    try:
        trace = _trace(work, train=t.train, backward=t.train, device=device, tensors=w.tensors, reuse=w.reuse,
                       step=step)
    finally:
        unattend()
    return trace, [*work.built.notes, *([attention] if attention else []), *trace.notes]


def _left_whole(model: nn.Module, plan: dict[str, str], share: float = 0.05) -> list[str]:
    """The modules in the repeated blocks whose linears ``plan`` leaves whole on every rank, where
    they hold at least ``share`` of the blocks' linear weights (a state-space mixer's, an
    attention of a kind not split): "TYPE (leaf, leaf)" each, largest first."""
    mods = dict(model.named_modules())
    blocks = [p + "." for p, m in mods.items() if p and isinstance(m, (nn.ModuleList, nn.Sequential))]
    whole: dict[str, list[Any]] = {}
    total = 0
    for path, m in mods.items():
        if not (isinstance(m, nn.Linear) or is_conv1d(m)) or not any(path.startswith(b) for b in blocks):
            continue
        n = m.weight.numel()
        total += n
        parent, _, leaf = path.rpartition(".")
        if path not in plan and leaf not in DUPLICATED:
            entry = whole.setdefault(type(mods[parent]).__name__, [0, set()])
            entry[0] += n
            entry[1].add(leaf)
    big = sorted(((n, kind, leaves) for kind, (n, leaves) in whole.items() if total and n >= share * total),
                 reverse=True)
    return [f"{kind} ({', '.join(sorted(leaves))})" for _, kind, leaves in big]
