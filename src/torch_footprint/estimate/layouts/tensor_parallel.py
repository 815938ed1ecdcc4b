"""Tensor parallelism's plan for a model: which linears split by output columns and which
by input rows, shared by the prediction (which traces one rank's share of the model) and
the measurement (which hands the same plan to torch's DTensor ``parallelize_module``).

Megatron-LM (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism", section 3): in every transformer layer the attention's
query, key and value projections and the MLP's first linears (up, gate) are split by
their output features ("column parallel"): each of T ranks computes H/T heads and I/T
intermediate features from the whole input. The attention's output projection and the
MLP's last linear are split by their input features ("row parallel"): each rank's partial
sums are added by an all-reduce, so the layer's output is whole on every rank. Everything
outside these linears (norms, residuals, embeddings, the head) is replicated; with
sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models", section 4.2.2) the norms and residuals hold 1/T of the
sequence each, and an all-gather and a reduce-scatter replace each all-reduce.

The plan is found by the linears' names, in the model's repeated blocks: the names of
Llama, Mistral, Qwen, Gemma and most Hugging Face decoders (q/k/v/o_proj, gate/up/down_proj),
the fused projections of Phi-3, GPT-NeoX, Falcon, Persimmon, CodeGen, MPT and StarCoder
(qkv_proj, query_key_value, Wqkv, c_attn; gate_up_proj, dense_h_to_4h/dense_4h_to_h, c_fc,
fc_in/fc_out, ModernBERT's Wi), and BERT-style encoders (query/key/value, intermediate.dense, fc1/fc2). A
fused projection is split by output columns as Megatron-LM's ``linear_qkv`` and
``linear_fc1`` are (each rank holds its heads' queries, keys and values, its share of gate
and up). An output projection whose name says nothing (``out_proj``, ``dense``, ``c_proj``,
``o``, ``Wo``) is row parallel beside a column-parallel sibling, or, named ``dense`` in an
``output`` module, beside one in its parent (BERT's ``attention.output.dense`` and
``output.dense``). GPT-2's ``Conv1D`` modules (c_attn, c_fc, c_proj: weights stored transposed)
split as linears do in the prediction; DTensor's plans, which the measurement hands the plan
to, split only ``nn.Linear``.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import FootprintError
from ...trace.records import Trace
from .memo import once

COLWISE = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "query", "key", "value", "fc1",
                     "w1", "w3", "wq", "wk", "wv", "qkv_proj", "query_key_value", "Wqkv", "c_attn",
                     "gate_up_proj", "dense_h_to_4h", "c_fc", "fc_in", "q_b_proj", "kv_b_proj",
                     "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b",
                     "output_gate", "Wi"})
ROWWISE = frozenset({"o_proj", "down_proj", "fc2", "w2", "wo", "dense_4h_to_h", "fc_out"})
BESIDE = frozenset({"out_proj", "dense", "c_proj", "o", "Wo"})  # row parallel beside a column-parallel sibling
# an attention's first projection; the last three: gated delta nets' (Qwen3-Next, Qwen3.5), a Mamba-2 mixer's
ATTENTION = frozenset({"q_proj", "query", "wq", "qkv_proj", "query_key_value", "Wqkv", "c_attn", "q_b_proj",
                       "in_proj_qkvz", "in_proj_qkv", "in_proj"})
MAMBA2 = frozenset({"in_proj", "conv1d", "norm", "out_proj"})  # a Mamba-2 mixer's modules (Mamba-1 adds x_proj)
MAMBA2_WIDTHS = ("intermediate_size", "n_groups", "conv_dim")  # a Mamba-2 mixer's, by its heads and groups
# an attention module's own head counts, divided on one rank (the attention reshapes by them)
HEAD_COUNTS = ("num_heads", "num_key_value_heads", "num_kv_heads", "num_attention_heads", "n_heads", "n_head",
               "kv_heads", "all_head_size", "num_k_heads", "num_v_heads", "split_size")  # the last: GPT-2's q/k/v
DELTA_NET_WIDTHS = ("key_dim", "value_dim", "conv_dim")  # a gated delta net's, by its heads


def plan_of(modules: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{module path: "colwise" | "rowwise"}`` for the ``Linear`` modules inside a repeated
    container (``ModuleList``/``Sequential``), from (path, type name) pairs (see the module
    docstring); empty when none is recognised."""
    mods = list(modules)
    blocks = [path + "." for path, kind in mods if kind in ("ModuleList", "Sequential") and path]
    plan: dict[str, str] = {}
    linears = [path for path, kind in mods  # nn.Linear and its subclasses by name (Falcon's FalconLinear)
               if (kind.endswith("Linear") or kind == "Conv1D") and any(path.startswith(b) for b in blocks)]
    children: dict[str, set[str]] = {}
    for path, _ in mods:
        parent, _, leaf = path.rpartition(".")
        children.setdefault(parent, set()).add(leaf)
    for path in linears:
        parent, _, leaf = path.rpartition(".")
        if leaf in COLWISE or (leaf == "dense" and parent.endswith(".intermediate")):  # BERT's MLP input
            plan[path] = "colwise"
        elif leaf == "in_proj" and children[parent] >= MAMBA2 and "x_proj" not in children[parent]:
            plan[path] = "colwise"  # a Mamba-2 mixer's, split by its heads and groups (Megatron-core's)
        elif leaf in ROWWISE:
            plan[path] = "rowwise"
    split = {path.rpartition(".")[0] for path, style in plan.items() if style == "colwise"}
    for path in linears:  # an output projection beside a split one: OPT's out_proj, GPT-NeoX's dense
        parent, _, leaf = path.rpartition(".")
        if path in plan or leaf not in BESIDE:
            continue
        outer = parent.rpartition(".")[0]
        if parent in split or (leaf == "dense" and parent.endswith(".output")
                               and any(p == outer or p.startswith(outer + ".") for p in split)):
            plan[path] = "rowwise"
    return plan


def tp_plan(model: nn.Module) -> dict[str, str]:
    """The plan of a model (:func:`plan_of` over its modules)."""
    return plan_of((path, type(m).__name__) for path, m in model.named_modules())


def tp_plan_of_trace(trace: Trace) -> dict[str, str]:
    """The plan of a traced model (:func:`plan_of` over the trace's modules; once per trace: not to be changed)."""
    return once(trace, "tp plan", lambda: plan_of((m.path, m.type) for m in trace.modules))


def _heads(model: nn.Module) -> dict[str, int]:
    cfg: Any = getattr(model, "config", None)
    out: dict[str, int] = {}
    for key, label in (("num_attention_heads", "attention heads"), ("num_key_value_heads", "key/value heads"),
                       ("num_kv_heads", "key/value heads")):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            out.setdefault(label, v)
    if getattr(cfg, "multi_query", False) is True and not getattr(cfg, "new_decoder_architecture", False):
        out["key/value heads"] = 1  # one key/value head that every query head reads (Falcon-7B, StarCoder)
    return out


def is_conv1d(m: nn.Module) -> bool:
    """GPT-2's ``Conv1D``: a linear whose weight is stored transposed ([nx inputs, nf outputs])."""
    return type(m).__name__ == "Conv1D" and isinstance(getattr(m, "nf", None), int)


def _width(lin: nn.Module, path: str, tp: int, style: str) -> int:
    """The features a split divides: a column-parallel linear's outputs, a row-parallel one's inputs."""
    if is_conv1d(lin):
        return int(lin.nf if style == "colwise" else lin.nx)  # type: ignore[arg-type]
    if not isinstance(lin, nn.Linear):
        raise FootprintError(f"--tp {tp}: {path} is a {type(lin).__name__}, not an nn.Linear to split")
    return lin.out_features if style == "colwise" else lin.in_features


def _share(t: torch.Tensor, dim: int, tp: int) -> nn.Parameter:
    """One rank's 1/tp of ``t`` along ``dim``, as a parameter like it (empty: the trace reads shapes)."""
    shape = list(t.shape)
    shape[dim] //= tp
    return nn.Parameter(t.new_empty(shape), requires_grad=t.requires_grad)


def check_tp(model: nn.Module, tp: int) -> dict[str, str]:
    """The plan for ``tp`` ranks, or a one-line error: no splittable linears, or a head
    count or a linear's width that ``tp`` does not divide."""
    if tp < 1:
        raise FootprintError(f"--tp must be at least 1, got {tp}")
    plan = tp_plan(model)
    if tp == 1:
        return plan
    if not plan:
        raise FootprintError(f"--tp {tp}: found no attention or MLP linears to split in "
                             f"{type(model).__name__} (tensor parallelism splits nn.Linear q/k/v/o_proj, "
                             "gate/up/down_proj, query/key/value, fc1/fc2 in repeated blocks)")
    for label, n in _heads(model).items():
        if n % tp:
            raise FootprintError(f"--tp {tp} does not divide the model's {n} {label}")
    mods = dict(model.named_modules())
    for path, style in plan.items():
        groups = mods[path.rpartition(".")[0]].__dict__.get("n_groups") if path.endswith(".in_proj") else None
        if type(groups) is int and groups % tp:
            raise FootprintError(f"--tp {tp} does not divide the {groups} groups of {path.rpartition('.')[0]}'s "
                                 "state-space mixer (Megatron-core splits its heads and groups together)")
        width = _width(mods[path], path, tp, style)
        if width % tp:
            raise FootprintError(f"--tp {tp} does not divide the {width} "
                                 f"{'output' if style == 'colwise' else 'input'} features of {path}")
    return plan


def shrink_for_tp(model: nn.Module, tp: int) -> dict[str, str]:
    """Make ``model`` (in place) one rank's share under ``tp``-way tensor parallelism: each
    column-parallel linear keeps out_features/tp outputs (and its bias's share), each
    row-parallel one in_features/tp inputs (its bias whole); an attention module's own head
    counts (``num_heads``, ``num_key_value_heads``) divided too, and a norm beside a split
    linear over its whole output (OLMo-2's ``q_norm`` and ``k_norm``) holds its share. Returns
    the plan."""
    plan = check_tp(model, tp)
    if tp == 1:
        return plan
    mods = dict(model.named_modules())
    widths: dict[str, set[int]] = {}  # each module holding a column-parallel linear: their whole outputs
    for path, style in plan.items():
        if style == "colwise":
            widths.setdefault(path.rpartition(".")[0], set()).add(_width(mods[path], path, tp, style))
    for parent, outs in widths.items():
        if "ssm_state_size" in mods[parent].__dict__:  # a Mamba-2 mixer's gated norm over its inner width
            outs.add(mods[parent].__dict__.get("intermediate_size", 0))
        # an attention's own per-head tensors: gpt-oss's sinks, a delta net's decay and step bias, a
        # lightning attention's decay rates
        own = mods[parent]
        heads = {n for n in (*(own.__dict__.get(k) for k in ("num_v_heads", "num_heads", "num_attention_heads")),
                             getattr(own.__dict__.get("config"), "num_attention_heads", None))
                 if type(n) is int and n % tp == 0}
        for name, prm in list(own.named_parameters(recurse=False)) if heads else ():
            if prm.dim() == 1 and prm.numel() in heads:
                setattr(own, name, _share(prm, 0, tp))
        for name, buf in list(own.named_buffers(recurse=False)) if heads else ():
            lead = next((d for d in range(buf.dim() - 1) if buf.shape[d] != 1), None)  # [heads, ...] or [1, heads, ...]
            if lead is not None and buf.shape[lead] in heads:
                setattr(own, name, buf.narrow(lead, 0, buf.shape[lead] // tp).clone())
        for name, child in mods[parent].named_children():
            weight = getattr(child, "weight", None)
            if isinstance(child, nn.Conv1d) and child.groups == child.in_channels == child.out_channels \
                    and child.groups % tp == 0:  # a depthwise convolution over split channels (a delta net's)
                for attr in ("weight", "bias"):
                    t = getattr(child, attr)
                    if t is not None:
                        setattr(child, attr, _share(t, 0, tp))
                child.in_channels = child.out_channels = child.groups = child.groups // tp
                continue
            if f"{parent}.{name}" in plan or not isinstance(weight, nn.Parameter) or weight.dim() != 1:
                continue
            if weight.numel() in outs and weight.numel() % tp == 0:
                for attr in ("weight", "bias"):
                    t = getattr(child, attr, None)
                    if isinstance(t, nn.Parameter) and t.shape == weight.shape:
                        setattr(child, attr, _share(t, 0, tp))
    for path, style in plan.items():
        lin = mods[path]
        w = lin.weight
        if is_conv1d(lin):  # GPT-2's: the weight stored [inputs, outputs], its widths nx and nf
            out, keep = (1, "nf") if style == "colwise" else (0, "nx")
            lin.weight = _share(w, out, tp)
            if style == "colwise":
                lin.bias = _share(lin.bias, 0, tp)
            setattr(lin, keep, getattr(lin, keep) // tp)
        elif style == "colwise":
            lin.weight = _share(w, 0, tp)
            if lin.bias is not None:
                lin.bias = _share(lin.bias, 0, tp)
            lin.out_features //= tp
        else:
            lin.weight = _share(w, 1, tp)
            lin.in_features //= tp
    per_rank_heads(model, plan, tp)
    return plan


def per_rank_heads(model: nn.Module, plan: dict[str, str], tp: int) -> None:
    """Give each attention module whose projections ``plan`` splits one rank's head counts (in
    place): its own (``num_heads``, OPT's and Falcon's; ``n_heads``, MPT's; ...) and those of its
    ``config``, a copy of the model's, where the attention reads them there (Phi-3 slices its
    fused projection by them), so that its forward takes one rank's columns."""
    mods = dict(model.named_modules())
    attention = {path.rpartition(".")[0] for path in plan if path.rpartition(".")[2] in ATTENTION}
    # and the modules holding the blocks, which build ALiBi's per-head biases by their head count
    # (Bloom's, MPT's, Falcon's): one rank's heads' biases, as Megatron-DeepSpeed builds them
    outer = {p for p in mods if not any(p == q or p.startswith(q + ".") for q in attention)
             and any(q.startswith(p + ".") or not p for q in attention)}
    shares: dict[int, Any] = {}
    for path in sorted(attention | outer):
        parent = mods[path]
        delta_net = path in attention and "num_v_heads" in parent.__dict__
        mamba2 = path in attention and "ssm_state_size" in parent.__dict__
        for name in HEAD_COUNTS + (DELTA_NET_WIDTHS if delta_net else ()) + (MAMBA2_WIDTHS if mamba2 else ()):
            n = parent.__dict__.get(name)
            if type(n) is int and n % tp == 0:
                setattr(parent, name, n // tp)
        cfg = parent.__dict__.get("config") if path in attention else None
        if cfg is not None and isinstance(getattr(cfg, "num_attention_heads", None), int):
            if id(cfg) not in shares:  # one copy for every module that shared the config: blocks stay alike
                share = shares[id(cfg)] = copy.copy(cfg)
                for name in ("num_attention_heads", "num_key_value_heads", "num_kv_heads"):
                    n = getattr(share, name, None)
                    if type(n) is int and n % tp == 0:
                        setattr(share, name, n // tp)
            parent.config = shares[id(cfg)]


def split_vocab(model: nn.Module, tp: int) -> None:
    """Make one rank's share (in place) hold 1/tp of the vocabulary, as Megatron-LM and torchtitan
    split it under tensor parallelism: the input embedding's rows (``VocabParallelEmbedding``; each
    rank's partial output is then all-reduced, or reduce-scattered under sequence parallelism: the
    same [batch, sequence, hidden] bytes) and the output head's (column parallel), whose logits
    stay split: the loss is taken on each rank's share (vocab-parallel cross entropy, torch's
    ``loss_parallel``). A head tied to the embedding keeps sharing its weight."""
    get_in, get_out = getattr(model, "get_input_embeddings", None), getattr(model, "get_output_embeddings", None)
    emb = get_in() if callable(get_in) else None
    head = get_out() if callable(get_out) else None
    if not isinstance(emb, nn.Embedding):
        raise FootprintError(f"--vocab-parallel: found no input embedding to split in {type(model).__name__}")
    vocab = emb.num_embeddings
    if vocab % tp:
        raise FootprintError(f"--vocab-parallel: --tp {tp} does not divide the vocabulary of {vocab}")
    tied = isinstance(head, nn.Linear) and head.weight is emb.weight
    w = emb.weight
    emb.weight = nn.Parameter(w.new_empty(vocab // tp, w.shape[1]), requires_grad=w.requires_grad)
    emb.num_embeddings = vocab // tp
    if isinstance(head, nn.Linear) and head.out_features == vocab:
        hw = head.weight
        head.weight = emb.weight if tied else nn.Parameter(hw.new_empty(vocab // tp, hw.shape[1]),
                                                           requires_grad=hw.requires_grad)
        if head.bias is not None:
            b = head.bias
            head.bias = nn.Parameter(b.new_empty(vocab // tp), requires_grad=b.requires_grad)
        head.out_features = vocab // tp


class _ShardSavingLinear(torch.autograd.Function):
    """A column-parallel linear under sequence parallelism (Korthikanti et al. 2022, section
    4.2.2; Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication``): it multiplies
    the all-gathered input but keeps only this rank's shard of it for the backward, which
    gathers the shard again for the weight's gradient. One rank's trace sees the gathers as
    concatenations: the same shapes and bytes."""

    footprint_saves_only_for_backward = True  # a replayed block may stand for it (trace.blockkeys.SAVES_ONLY)

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx: Any, full: torch.Tensor, shard: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None, tp: int, dim: int) -> torch.Tensor:
        ctx.save_for_backward(shard, weight)
        ctx.tp, ctx.dim, ctx.has_bias = tp, dim, bias is not None
        return F.linear(full, weight, bias)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        shard, weight = ctx.saved_tensors
        full = torch.cat([shard] * ctx.tp, dim=ctx.dim).to(grad.dtype)
        grad_w = grad.flatten(0, -2).t() @ full.flatten(0, -2)
        grad_b = grad.flatten(0, -2).sum(0) if ctx.has_bias else None
        return grad @ weight.to(grad.dtype), None, grad_w, grad_b, None, None


SEQUENCE_DIM = 1  # Hugging Face's hidden states are [batch, sequence, hidden]


def _tokens_dim(x: torch.Tensor) -> int:
    """Where a tensor's tokens run: the sequence of [batch, sequence, ...], or the rows of a
    [tokens, width] one (OPT's MLP takes its tokens flattened)."""
    return 0 if x.dim() == 2 else SEQUENCE_DIM


def _shard(x: torch.Tensor, tp: int) -> torch.Tensor:
    """This rank's 1/tp of the sequence, in a storage of its own (a reduce-scatter's output;
    at the embedding, Megatron-LM clones its scattered view so the whole can be freed)."""
    dim = _tokens_dim(x)
    if x.shape[dim] % tp:
        raise FootprintError(f"--sequence-parallel: the sequence length {x.shape[dim]} is not a "
                             f"multiple of --tp {tp}")
    return x.narrow(dim, 0, x.shape[dim] // tp).clone()


PER_TOKEN_INPUT = "per_layer_input"  # Gemma-3n's and Gemma-4's per-layer embeddings, [batch, sequence, width]


def _scatter_input(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], at: int,
                   tp: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A block's per-token input (given by position ``at`` or by name) cut to this rank's share of the sequence."""
    if len(args) > at and isinstance(args[at], torch.Tensor):
        return (*args[:at], _shard(args[at], tp), *args[at + 1:]), kwargs
    if isinstance(kwargs.get(PER_TOKEN_INPUT), torch.Tensor):
        return args, {**kwargs, PER_TOKEN_INPUT: _shard(kwargs[PER_TOKEN_INPUT], tp)}
    return args, kwargs


def apply_sequence_parallel(model: nn.Module, tp: int, plan: dict[str, str]) -> None:
    """Make one rank's share (after :func:`shrink_for_tp`) hold 1/tp of the sequence outside
    the split linears (module docstring): the first block's input scattered; the modules
    that hold column-parallel linears (attention, MLP) gather their input, of which those
    linears keep only the shard for the backward (:class:`_ShardSavingLinear`); each
    row-parallel linear reduce-scatters its output; the output head (replicated) gathers its
    input. The collectives move what the all-reduces did (an all-gather plus a
    reduce-scatter for each)."""
    if tp <= 1:
        return
    mods = dict(model.named_modules())
    # the outermost repeated container holding split linears: the model's blocks
    outer = min((p for p, m in mods.items() if p and isinstance(m, (nn.ModuleList, nn.Sequential))
                 and any(path.startswith(p + ".") for path in plan)), key=lambda p: p.count("."), default=None)
    if outer is None or f"{outer}.0" not in mods:
        raise FootprintError("--sequence-parallel: found no repeated blocks to split the sequence in")

    def scatter(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            return (_shard(args[0], tp), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": _shard(kwargs["hidden_states"], tp)}

    # the first block takes the sequence scattered (Megatron-LM scatters the embedding's output;
    # here the model's positions and masks are made from the whole sequence before the blocks)
    mods[f"{outer}.0"].register_forward_pre_hook(scatter, with_kwargs=True)
    for block in mods[outer]:  # a per-token input each block takes beside its hidden states: its tokens' share
        names = list(inspect.signature(block.forward).parameters)
        if PER_TOKEN_INPUT in names:
            block.register_forward_pre_hook(partial(_scatter_input, at=names.index(PER_TOKEN_INPUT), tp=tp),
                                            with_kwargs=True)

    def gathered(shard: torch.Tensor) -> torch.Tensor:
        full = torch.cat([shard] * tp, dim=_tokens_dim(shard))
        full._footprint_shard = shard  # type: ignore[attr-defined]  # what its linears keep; gone with it
        return full

    def gather(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            return (gathered(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": gathered(kwargs["hidden_states"])}

    def colwise(x: torch.Tensor, lin: nn.Module) -> torch.Tensor:
        weight = lin.weight.t() if is_conv1d(lin) else lin.weight
        shard = getattr(x, "_footprint_shard", None)
        dim = _tokens_dim(x)
        if shard is None:  # the input was made from the gathered one: keep a shard of its own, of its
            # sequence (MLA's latents are [batch, 1, sequence, rank]; a shared expert's tokens are flat)
            dims = [d for d in range(x.dim() - 1) if x.shape[d] > 1 and x.shape[d] % tp == 0]
            if not dims:
                return F.linear(x, weight, lin.bias)
            dim = SEQUENCE_DIM if SEQUENCE_DIM in dims else max(dims, key=lambda d: x.shape[d])
            shard = x.narrow(dim, 0, x.shape[dim] // tp).clone()
        return _ShardSavingLinear.apply(x, shard, weight, lin.bias, tp, dim)

    def unit(path: str) -> str:
        """The block's child holding ``path`` (its attention, its MLP): where the sequence is gathered,
        and scattered again unless the row-parallel linear is that child's own (a shared expert's is
        deeper, on the MoE block's tokens flattened)."""
        if not path.startswith(outer + "."):
            return path.rpartition(".")[0]
        return ".".join(path.split(".")[: outer.count(".") + 3])

    nested = {unit(p) for p, style in plan.items() if style == "rowwise" and unit(p) != p.rpartition(".")[0]}
    for u in nested:
        mods[u].register_forward_hook(lambda _m, _a, out: (_shard(out[0], tp), *out[1:])
                                      if isinstance(out, tuple) else _shard(out, tp))
    for path, style in plan.items():
        lin = mods[path]
        if style == "rowwise":
            if unit(path) not in nested:
                lin.register_forward_hook(lambda _m, _a, out: _shard(out, tp))
            continue
        gathers = mods[unit(path)]
        if not getattr(gathers, "_footprint_sp", False):
            gathers.register_forward_pre_hook(gather, with_kwargs=True)
            gathers._footprint_sp = True  # type: ignore[assignment]
        lin.forward = partial(colwise, lin=lin)  # type: ignore[method-assign]
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    if isinstance(head, nn.Module):
        head.register_forward_pre_hook(lambda _m, args: (torch.cat([args[0]] * tp, dim=SEQUENCE_DIM), *args[1:]))
