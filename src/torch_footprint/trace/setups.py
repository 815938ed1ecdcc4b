"""Training set-ups: optimizers, precision, activation checkpointing.

Closed-form bytes per parameter for the parts that do not depend on activations (P =
number of trainable parameters); the trace reproduces these exactly, and tests check it:

| set-up | weights | gradients | optimizer state |
| --- | --- | --- | --- |
| fp32, SGD | 4 | 4 | 0 |
| fp32, SGD with momentum | 4 | 4 | 4 |
| fp32, Adam / AdamW | 4 | 4 | 8 (two moments) |
| bf16 or fp16 weights, Adam / AdamW | 2 | 2 | 4 (moments in the weights' dtype) |
| bf16-mixed / fp16-mixed (fp32 master weights, autocast), Adam / AdamW | 4 | 4 | 8 |

Adagrad and RMSprop keep one tensor per parameter (4 bytes in fp32); Adafactor keeps
factored row and column statistics (about 4 x (rows + columns) bytes per matrix).
Adam, AdamW, Adagrad, RMSprop and Adafactor also keep a float32 ``step`` tensor for each
parameter tensor (4 bytes per tensor, not per parameter).
Mixed precision also keeps low-precision copies of the weights made by autocast in the
forward; the trace counts them among the activations (autograd saves them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError

PRECISIONS = ("fp32", "fp16", "bf16", "fp64", "fp16-mixed", "bf16-mixed")


def _make(cls: Any, label: str, **kw: Any) -> Callable[[list[nn.Parameter]], torch.optim.Optimizer]:
    def factory(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return cls(params, **kw)

    factory.label = label  # type: ignore[attr-defined]
    factory.cls, factory.kwargs = cls, kw  # type: ignore[attr-defined]  # for ZeroRedundancyOptimizer
    return factory


def optimizers() -> dict[str, Callable[[list[nn.Parameter]], torch.optim.Optimizer]]:
    """torch.optim's own classes (so the state they keep is exactly theirs), by name."""
    opt = torch.optim
    table = {
        "sgd": _make(opt.SGD, "sgd", lr=0.01),
        "momentum": _make(opt.SGD, "momentum", lr=0.01, momentum=0.9),
        "adam": _make(opt.Adam, "adam", lr=1e-3, foreach=False),
        "adamw": _make(opt.AdamW, "adamw", lr=1e-3, foreach=False),
        "adagrad": _make(opt.Adagrad, "adagrad", lr=0.01, foreach=False),
        "rmsprop": _make(opt.RMSprop, "rmsprop", lr=0.01, foreach=False),
    }
    if hasattr(opt, "Adafactor"):
        table["adafactor"] = _make(opt.Adafactor, "adafactor", lr=0.01, foreach=False)
    # the multi-tensor (foreach) and fused implementations: the same state, other temporaries
    for name in ("sgd", "momentum", "adam", "adamw"):
        cls, kw = {"sgd": (opt.SGD, {"lr": 0.01}), "momentum": (opt.SGD, {"lr": 0.01, "momentum": 0.9}),
                   "adam": (opt.Adam, {"lr": 1e-3}), "adamw": (opt.AdamW, {"lr": 1e-3})}[name]
        table[f"{name}-foreach"] = _make(cls, f"{name}-foreach", foreach=True, **kw)
        table[f"{name}-fused"] = _make(cls, f"{name}-fused", fused=True, **kw)
    return table


def optimizer(name: str | None, cuda: bool = False) -> Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None:
    """The optimizer ``name`` as torch.optim builds it. ``cuda``: the step runs on CUDA GPUs, where
    torch.optim's default for a class given no ``foreach``/``fused`` is its multi-tensor (foreach)
    implementation (optimizer.py, _default_to_fused_or_foreach: every parameter on a device with
    foreach kernels); on the CPU it is the loop over parameters. The other temporaries are kept
    then (AdamW's square roots of every second moment at once), and each update is a few
    launches for all the parameters rather than a few per parameter."""
    if name is None:
        return None
    table = optimizers()
    key = name.strip().lower()
    if key not in table:
        raise FootprintError(f"unknown optimizer '{name}'; valid optimizers: {', '.join(table)}")
    if cuda and f"{key}-foreach" in table:
        return table[f"{key}-foreach"]
    return table[key]


def precision(name: str) -> tuple[torch.dtype, torch.dtype | None]:
    """(parameter dtype, autocast dtype or None)."""
    key = name.strip().lower()
    table = {"fp32": (torch.float32, None), "fp16": (torch.float16, None), "bf16": (torch.bfloat16, None),
             "fp64": (torch.float64, None),
             "fp16-mixed": (torch.float32, torch.float16), "bf16-mixed": (torch.float32, torch.bfloat16)}
    if key not in table:
        raise FootprintError(f"unknown precision '{name}'; valid: {', '.join(PRECISIONS)}")
    return table[key]


@functools.cache
def _sac_ops() -> tuple[frozenset[Any], Any]:
    """What torchtitan's per-operator selective checkpointing keeps (models/llama3/infra/
    parallelize.py, _save_list: matmuls and the attention kernels) and its matmul, every second
    of which a block recomputes."""
    aten = torch.ops.aten
    keep = frozenset({aten.mm.default, aten._scaled_dot_product_flash_attention.default,
                      aten._scaled_dot_product_efficient_attention.default,
                      aten._scaled_dot_product_cudnn_attention.default,
                      aten._scaled_dot_product_flash_attention_for_cpu.default})
    return keep, aten.mm.default


def selective_context() -> Any:
    """The ``context_fn`` of torchtitan's per-operator selective checkpointing for one block's
    checkpoint: the outputs of its attention and of its odd-numbered matmuls are kept, the rest
    recomputed in the backward (torch.utils.checkpoint.create_selective_checkpoint_contexts)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    keep, matmul = _sac_ops()
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == matmul:
            counts[mode] += 1
        save = func in keep and not (func == matmul and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def longest_run(model: nn.Module, kinds: tuple[type[nn.Module], ...] = (nn.ModuleList, nn.Sequential)
                ) -> tuple[str, list[nn.Module]] | None:
    """The model's longest run of repeated blocks: a container of ``kinds`` holding two or more
    modules of one class (the first of the longest), its path and its blocks; None when it has none."""
    best: tuple[str, list[nn.Module]] | None = None
    for path, mod in model.named_modules():
        if isinstance(mod, kinds) and len(mod) > 1:
            kids = list(mod)
            if len({type(k) for k in kids}) == 1 and (best is None or len(kids) > len(best[1])):
                best = (path, kids)
    return best


def enable_checkpointing(model: nn.Module, selective: bool = False, every: int = 1) -> tuple[str, Callable[[], None]]:
    """Activation checkpointing through torch.utils.checkpoint: what was wrapped, and a
    function that undoes it. ``selective``: torchtitan's per-operator policy
    (:func:`selective_context`) inside each checkpointed block. ``every``: one block in that
    many checkpointed, the ``every``-th, 2 x ``every``-th and so on in the model's order
    (torchtitan's ``selective_ac_option = N``, whose wrapper counts the blocks from 1).

    Hugging Face models use their own switch (then turned off on the layers left out); other
    models get each block of their longest run of repeated blocks (a ModuleList or Sequential)
    wrapped."""
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if selective:
        kwargs["context_fn"] = selective_context
    how = "selective, per operator, " if selective else ""
    if hasattr(model, "gradient_checkpointing_enable") and getattr(model, "supports_gradient_checkpointing", False):
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5 renamed the switch
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            what, undo = f"{how}the model's own activation checkpointing", model.activation_checkpointing_disable
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            what, undo = f"{how}the model's own gradient checkpointing", model.gradient_checkpointing_disable
        if every > 1:
            what = _every_nth_layer(model, every, undo)
        return what, undo
    best = longest_run(model)
    if best is None:
        raise FootprintError("--checkpointing: found no run of repeated blocks to checkpoint in this model")
    chosen = best[1][every - 1::every]
    for block in chosen:
        block.forward = functools.partial(_checkpointed, block.forward, selective)  # type: ignore[method-assign]

    def undo_wrap() -> None:
        for block in chosen:
            vars(block).pop("forward", None)

    where = f"each of the {len(best[1])} blocks" if every == 1 else \
        f"every {_ordinal(every)} of the {len(best[1])} blocks ({len(chosen)})"
    return f"{how}{where} of '{best[0] or '<root>'}'", undo_wrap


class Patches:
    """Attributes set on modules for a trace, each put back as it was (or removed) by :meth:`undo`."""

    def __init__(self) -> None:
        self.saved: list[tuple[nn.Module, str, Any]] = []

    def put(self, mod: nn.Module, attr: str, value: Any) -> None:
        self.saved.append((mod, attr, vars(mod).get(attr)))
        setattr(mod, attr, value)

    def undo(self) -> None:
        for mod, attr, before in reversed(self.saved):
            if before is None:
                vars(mod).pop(attr, None)
            else:
                setattr(mod, attr, before)
        self.saved.clear()


def own_forward(mod: nn.Module) -> Callable[..., Any]:
    """The module's forward as a function of its inputs that is the same object for every
    instance of a class (a partial over the module), so that equal blocks stay equal."""
    own = vars(mod).get("forward")
    return own if own is not None else functools.partial(type(mod).forward, mod)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _every_nth_layer(model: nn.Module, every: int, undo: Callable[[], None]) -> str:
    """A Hugging Face model's switch kept on every ``every``-th of its layers (their own
    ``gradient_checkpointing`` attribute, the one each layer reads) and turned off on the rest."""
    from transformers.modeling_utils import PreTrainedModel

    def switched(m: nn.Module) -> bool:  # a layer's own switch (the backbone model holds one too)
        d = m.__dict__
        return not isinstance(m, PreTrainedModel) and d.get("gradient_checkpointing") is True and callable(
            d.get("_gradient_checkpointing_func"))

    layers = [m for m in model.modules() if switched(m)]
    try:  # transformers 5: the layers that checkpoint themselves, not a container that also holds a switch
        from transformers.modeling_layers import GradientCheckpointingLayer

        layers = [m for m in layers if isinstance(m, GradientCheckpointingLayer)] or layers
    except ImportError:
        pass
    if len(layers) < 2:
        undo()
        raise FootprintError(f"--selective-ac-option {every}: this model's checkpointing is one switch for all its "
                             "layers, not one per layer")
    for i, layer in enumerate(layers, 1):
        if i % every:
            layer.gradient_checkpointing = False
    return f"the model's own checkpointing on every {_ordinal(every)} of its {len(layers)} layers " \
           f"({len(layers) // every})"


def _checkpointed(forward: Callable[..., Any], selective: bool, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import checkpoint

    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    context = {"context_fn": selective_context} if selective else {}
    return checkpoint(forward, *args, use_reentrant=False, **context, **kwargs)


FUSED_ATTENTION = "footprint_fused"  # the name the fused kernel is registered under in transformers
# the tile a fused kernel skips by under a sliding window: FlexAttention's default block (128 queries x
# 128 keys, torch/nn/attention/flex_attention.py _DEFAULT_SPARSE_BLOCK_SIZE), which its block mask
# leaves out wholly outside the band; FlashAttention's window_size skips key tiles alike
WINDOW_BLOCK = 128


def fuses_attention(kind: str | None) -> bool:
    """Whether ``--attention kind`` runs every attention layer as one fused kernel (``fused`` or a
    kernel named), rather than transformers' own path or the model's choice."""
    return kind is not None and kind not in ("eager", "sdpa")


def use_attention(model: nn.Module, kind: str | None) -> tuple[str | None, Callable[[], None]]:
    """Run a Hugging Face model's attention as ``kind`` says (transformers' ``attn_implementation``):
    what was done (None: nothing asked) and a function that puts the model's own back.

    ``eager`` and ``sdpa`` are transformers' own, where the model supports them. ``fused`` (and a
    fused kernel named: ``flash1``, ``flash2``, ``flash3``, ``cudnn``, which the estimate prices) runs
    every attention layer through ``scaled_dot_product_attention`` (transformers' SDPA path,
    its masks included), whatever the model's code declares: one fused kernel, as training
    frameworks run attention (FlashAttention, FlexAttention, cuDNN, Transformer Engine) where the
    model's eager code would write the scores out. Attention sinks (gpt-oss) add one column to
    each softmax; the fused path prices the softmax without it. A sliding-window layer (the
    ``sliding_window`` transformers hands the attention) runs as a fused kernel runs it: each
    block of :data:`WINDOW_BLOCK` queries against the key blocks its window reaches, not every
    key under a mask (:func:`_banded`)."""
    if kind is None:
        return None, lambda: None
    setter = getattr(model, "set_attn_implementation", None)
    config = getattr(model, "config", None)
    if setter is None or config is None:
        raise FootprintError(f"--attention {kind} sets a Hugging Face model's attention implementation: this model "
                             "is not one (its attention runs as its code says)")
    before = config._attn_implementation
    fused = fuses_attention(kind)
    name = FUSED_ATTENTION if fused else kind
    if fused:
        _register_fused()
    try:
        setter(name)
    except (ValueError, ImportError) as e:
        raise FootprintError(f"--attention {kind}: {str(e).splitlines()[0]} (--attention fused runs any "
                             "model's attention as one fused kernel)") from None
    if config._attn_implementation != name:
        raise FootprintError(f"--attention {kind}: {type(model).__name__} does not let its attention be chosen "
                             "(transformers' AttentionInterface)")
    what = (f"attention as one fused kernel ({'as PyTorch picks' if kind == 'fused' else kind}), not the model's "
            f"{before}" if fused else f"attention through transformers' {kind} path (the model's default: {before})")
    return what, lambda: setter(before)


@functools.cache
def _register_fused() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def fused(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        kwargs.pop("s_aux", None)  # sinks: one extra logit per row, not a kernel of their own
        window = kwargs.get("sliding_window")
        if isinstance(window, int) and window > 0 and banded(query, key, attention_mask, window):
            return _banded(sdpa_attention_forward, module, query, key, value, attention_mask, window, **kwargs)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(FUSED_ATTENTION, fused)
    AttentionMaskInterface.register(FUSED_ATTENTION, sdpa_mask)


def banded(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, window: int) -> bool:
    """Whether a call runs as its sliding ``window``'s band (:func:`_banded`): queries and keys the
    same sequence (a prompt or a training step; a decode step's cache already holds only the window),
    more keys than the band's (:func:`band_keys`), and a mask of one row per query to slice."""
    q, k = query.shape[-2], key.shape[-2]
    return (q == k and k > band_keys(window) and mask is not None and mask.dim() == 4
            and mask.shape[-2] == q and mask.shape[-1] == k)


def band_keys(window: int) -> int:
    """The keys each block of queries runs over under a sliding ``window`` (a key reaches back
    window - 1 positions): the key blocks from the one holding its first query's earliest key to
    its own, whole blocks, as a block-sparse kernel computes them."""
    return (-(-(window - 1) // WINDOW_BLOCK) + 1) * WINDOW_BLOCK


def _banded(attend: Callable[..., tuple[torch.Tensor, Any]], module: nn.Module, query: torch.Tensor,
            key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, window: int,
            **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Sliding-window attention as a block-sparse kernel runs it, in one call: every query against
    :func:`band_keys` keys (the blocks its window reaches), the same matrix work, the same keys per
    block of queries and one kernel, where the masked call would run every query against every
    key. The values are not the model's (the trace has none); the shapes, work and what the
    backward keeps are the kernel's."""
    n = band_keys(window)
    return attend(module, query, key[..., :n, :], value[..., :n, :], mask[..., :n], **kwargs)
