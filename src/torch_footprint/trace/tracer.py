"""Run a model once under a TorchDispatchMode and record every aten op: the trace.

The model's parameters and buffers are swapped for meta tensors (or fake tensors on the
target device, ``cpu`` by default), so the kernels chosen are the ones that device would
run (the CPU flash-attention kernel, nn.MultiheadAttention's fused path) while nothing is
allocated. Where fake tensors cannot answer (data-dependent control flow) and the model
is small, the trace falls back to real tensors and says so in ``Trace.notes``.

The pieces: :mod:`.modules` (which module runs), :mod:`.recorder` (the dispatch mode),
:mod:`.formulas` (the cost of each operator), :mod:`.kernels` (what the device's kernels do
beyond the op), :mod:`.fastmeta` and :mod:`.metamemo` (outputs made without torch's slow meta
kernels), :mod:`.reuse` (a repeated block traced once), :mod:`.swap` (the model's tensors for
one run), :mod:`.step` (the step).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from .. import collector
from ..dtypes import name_of
from ..errors import FootprintError
from . import optimizer_memo
from .kernels import NESTED_NOTE, CpuKernels, dense_encoders
from .modules import ModuleStack, module_infos
from .recorder import Recorder
from .records import TensorInfo, Trace
from .reuse import LAST as reuse_stats
from .reuse import BlockReuse, reusable
from .reuse_train import ReplayMismatch
from .state import ModelState
from .step import StepHooks, StepOptions, run_step, tensors_in
from .swap import materialize, param_infos, swap_tensors

REAL_FALLBACK_LIMIT = 2 * 1024**3  # bytes of parameters up to which a real-tensor run is allowed

__all__ = ["REAL_FALLBACK_LIMIT", "StepOptions", "meta_specific", "trace_model"]


def trace_model(
    model: nn.Module,
    make_inputs: Callable[[str], tuple[tuple[Any, ...], dict[str, Any]]],
    *,
    name: str = "model",
    backward: bool = False,
    device: str = "cpu",
    inputs_meta: list[dict[str, Any]] | None = None,
    real_fallback_limit: int = REAL_FALLBACK_LIMIT,
    tensors: str = "auto",
    step: StepOptions | None = None,
    reuse: bool = True,
    train: bool | None = None,
) -> Trace:
    """Trace one forward (and optionally backward) pass of ``model``.

    ``model`` may live on the meta device (the usual case) or on a real device.
    ``make_inputs(device)`` returns ``(args, kwargs)`` built on the device it is given.

    Tensors: meta first (fastest; attention routed to the kernel ``device`` would run), or
    fake ones first for a model with recurrent layers on a CPU (their CPU path is chosen by
    device) and under autocast;
    after a failure on meta, fake tensors on ``device`` (the same error from both is the
    model's own); where the forward depends on tensor values, or fake tensors fail for a
    reason of their own, real tensors if the parameters fit ``real_fallback_limit`` (the
    model's own weights, or random ones for a meta model; the inputs ``make_inputs`` gives,
    which are the caller's as given). Each fallback is stated in ``Trace.notes``. ``tensors`` forces
    one kind ("meta", "fake" or "real") instead of that order ("auto"). The model's own
    tensors are swapped only for the run, and the model is left exactly as it was found
    (:class:`.state.ModelState`: every module's attributes, tables and class, and the random
    generators), after each attempt and at the end. ``reuse``: a repeated block's later
    calls that are provably equal to a traced one replay its events (:mod:`.reuse`; the
    trace is the same as without). ``train``: the modules' mode for the run (``model.train(train)``
    as each attempt starts, after the model's state is taken: it comes back in the mode it was in).
    """
    with collector.set_aside():  # the objects that existed before: out of the collector's walks
        state = ModelState(model)  # as found: each attempt puts it back (_run); nothing else runs the model
        dense: list[bool] = []

        def ready() -> None:
            """As each attempt starts: the mode asked for, then nn.TransformerEncoder's nested path
            (taken in eval mode) turned off."""
            if train is not None:
                model.train(train)
            dense.append(dense_encoders(model))

        common = dict(name=name, backward=backward, device=device, inputs_meta=inputs_meta or [], step=step,
                      state=state, ready=ready)
        try:
            try:
                trace = _traced(model, make_inputs, tensors, real_fallback_limit, reuse=reuse, **common)
            except ReplayMismatch:  # a training step's replay not proven equal: every call traced
                gc.collect()
                trace = _traced(model, make_inputs, tensors, real_fallback_limit, reuse=False, **common)
                reuse_stats.retraced = True
        finally:
            if not state.clean:
                state.restore()
        if any(dense):
            trace.notes.append(NESTED_NOTE)
        return trace


def _traced(model: nn.Module, make_inputs: Callable[[str], tuple[tuple[Any, ...], dict[str, Any]]], tensors: str,
            real_fallback_limit: int, **common: Any) -> Trace:
    """:func:`trace_model`'s order of tensor kinds."""
    device = common["device"]
    step = common["step"]
    params, buffers = param_infos(model)
    common.update(params=params, buffers=buffers)
    if tensors == "auto" and step is not None and step.autocast is not None:
        tensors = "fake"  # autocast acts on a device's tensors, not on meta ones
    # ATen's recurrent layers choose their CPU path by the tensors' device: oneDNN for an LSTM,
    # and the input projection of the whole sequence at once for the others (FullLayer's is_cpu
    # branch); meta tensors would take neither, so such a model starts with fake tensors
    fake_first = tensors == "auto" and device == "cpu" and any(isinstance(m, nn.RNNBase) for m in model.modules())
    if tensors != "auto":
        if tensors not in ("meta", "fake", "real"):
            raise FootprintError(f"unknown tensor kind '{tensors}': use auto, meta, fake or real")
        try:
            with _quiet_fake_logs():
                return _run(model, make_inputs, tensors=tensors, **common)
        except _ModelRaised as err:
            raise err.user_error() from err.original
    if fake_first:
        try:
            with _quiet_fake_logs():
                return _run(model, make_inputs, tensors="fake", **common)
        except _ModelRaised as err:
            second = err
        if not _is_data_dependent(second.original):
            gc.collect()
            try:  # fake tensors failed for a reason of their own: meta ones, cell by cell
                trace = _run(model, make_inputs, tensors="meta", **common)
            except _ModelRaised:
                raise second.user_error() from second.original
            trace.notes = [f"traced with meta tensors: fake tensors on {device} failed "
                           f"({type(second.original).__name__} in '{second.where}'); recurrent layers "
                           "follow the meta device's path, not the CPU's"]
            return trace
    else:
        try:
            return _run(model, make_inputs, tensors="meta", **common)
        except _ModelRaised as err:
            # a meta kernel may follow another device's rule and say nothing of meta (the grouped
            # matmul's did): fake tensors on the device settle whether the error is the model's
            first = err
        gc.collect()
        try:
            with _quiet_fake_logs():
                trace = _run(model, make_inputs, tensors="fake", **common)
            trace.notes = [f"traced with fake tensors on {device}: the meta device failed "
                           f"({type(first.original).__name__} in '{first.where}')"]
            return trace
        except _ModelRaised as err:
            second = err
        if not meta_specific(first.original) and _same_error(first, second):
            raise second.user_error() from second.original  # meta and fake tensors agree: the model's own
    total = sum(p.nbytes for p in params) + sum(b.nbytes for b in buffers)
    if total > real_fallback_limit:
        if not _is_data_dependent(second.original):
            # fake tensors failed for a reason of their own (a parameter swap they refuse, say):
            # too large to try real tensors, so the error stands
            raise second.user_error() from second.original
        raise FootprintError(
            f"the model's forward depends on tensor values ({type(second.original).__name__} in "
            f"'{second.where}'), which fake tensors cannot answer, and at {total / 2**30:.1f} GiB of "
            f"parameters it is too large to run for real (limit {real_fallback_limit / 2**30:.1f} GiB)"
        ) from second.original
    gc.collect()
    try:
        trace = _run(model, make_inputs, tensors="real", **common)
    except _ModelRaised as err:  # real tensors fail too: the model's own error, as PyTorch raises it
        raise err.user_error() from err.original
    why = ("the forward depends on tensor values, which fake tensors cannot answer"
           if _is_data_dependent(second.original) else "fake tensors failed")
    trace.notes = [f"ran on real {device} tensors: {why} ({type(second.original).__name__} in '{second.where}'); "
                   + "; ".join(trace.notes)]
    return trace


def real_inputs_note(make_inputs: Callable[..., Any], own_weights: bool) -> str:
    """What a run on real tensors read: the model's weights or random ones, and the inputs
    (the caller's values, or what was made, where ``make_inputs`` can say)."""
    describe = getattr(make_inputs, "describe", None)
    inputs = describe() if callable(describe) else "made from their shapes and dtypes"
    weights = ("the model's own weights" if own_weights
               else "random weights (normal, std 0.02; buffers and other tensors of the model zeros)")
    return f"{weights}; inputs: {inputs}"


class _ModelRaised(Exception):
    def __init__(self, original: BaseException, where: str, mtype: str, phase: str) -> None:
        super().__init__(str(original))
        self.original = original
        self.where = where or "<root>"
        self.mtype = mtype
        self.phase = phase

    def user_error(self) -> FootprintError:
        msg = str(self.original).strip().splitlines()
        first = msg[0] if msg else ""
        hint = ""
        if self.mtype == "Embedding" and "indices" in first:  # token ids given as a float shape
            hint = ". An embedding takes integer token ids: give them with --input-ids B,T (or --input B,T:int64)"
        return FootprintError(
            f"the model raised {type(self.original).__name__} during the {self.phase} pass, in module "
            f"'{self.where}' ({self.mtype}): {first}{hint}"
        )


def _fake_mode() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)  # constants a model keeps as plain attributes


def _is_data_dependent(exc: BaseException) -> bool:
    names = {"DataDependentOutputException", "DynamicOutputShapeException", "UnsupportedOperatorException",
             "GuardOnDataDependentSymNode", "UnsupportedFakeTensorException"}
    e: BaseException | None = exc
    while e is not None:
        if type(e).__name__ in names:
            return True
        e = e.__cause__ or e.__context__
    return False


def _same_error(a: _ModelRaised, b: _ModelRaised) -> bool:
    """Two runs raised the same error in the same place."""
    return (type(a.original) is type(b.original) and str(a.original) == str(b.original)
            and a.where == b.where and a.phase == b.phase)


def meta_specific(exc: BaseException) -> bool:
    """Whether an error raised on meta tensors may go away on fake ones (a device mix-up,
    a value read, an op without a meta kernel), rather than being the model's own error."""
    if isinstance(exc, NotImplementedError):
        return True
    text = str(exc).lower()
    return "meta" in text or "device" in text or _is_data_dependent(exc)


@contextlib.contextmanager
def _quiet_fake_logs() -> Iterator[None]:
    """FakeTensorMode logs a traceback for every op that fails; the error reaches the user anyway."""
    import logging

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


class _TraceHooks(StepHooks):
    """The trace's ears on the step: the recorder's phase, and the storages of the outputs,
    gradients and optimizer state."""

    def __init__(self, rec: Recorder, model: nn.Module) -> None:
        self.rec = rec
        self.model = model  # its parameters are the swapped ones while the step runs
        self.current = "inputs"  # where an error happened
        self.tags: dict[str, list[int]] = {"output": [], "gradients": [], "optimizer": []}
        self.autocast_exit: Callable[[], None] | None = None  # the forward's autocast exited (after_autocast)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.current = name
        old = self.rec.phase
        self.rec.phase = name
        yield
        if name == "forward" and self.autocast_exit is not None:  # (autocast, entered after, exited first)
            self.autocast_exit()
        self.rec.phase = old

    def after_autocast(self, blocks: BlockReuse | None) -> None:
        """At autocast's exit its cache drops the casts of the weights no graph saved: the
        replayed blocks' casts go too (:mod:`.reuse`)."""
        if blocks is not None:
            blocks.release_cached()

    def tag(self, kind: str, ts: list[torch.Tensor]) -> None:
        for t in ts:
            uid = self.rec.uid_of(t)
            if uid is not None and uid not in self.tags[kind]:
                self.tags[kind].append(uid)

    def forward_done(self, output: Any) -> None:
        self.tag("output", tensors_in(output))

    def backward_done(self) -> None:
        self.tag("gradients", [p.grad for p in self.model.parameters() if p.grad is not None])

    def optimizer_done(self, optimizer: torch.optim.Optimizer) -> None:
        self.tag("optimizer", [v for st in optimizer.state.values() for v in st.values()
                               if isinstance(v, torch.Tensor)])


def _run(model: nn.Module, make_inputs: Callable[[str], tuple[tuple[Any, ...], dict[str, Any]]], *, name: str,
         backward: bool, device: str, tensors: str, params: list[TensorInfo], buffers: list[TensorInfo],
         inputs_meta: list[dict[str, Any]], step: StepOptions | None = None,
         state: ModelState | None = None, reuse: bool = False, ready: Callable[[], None] | None = None) -> Trace:
    step = step or StepOptions()
    stack = ModuleStack(model)
    stack.track_backward = backward
    rec = Recorder(stack, device)
    hooks = _TraceHooks(rec, model)
    types = stack.types
    restore: Callable[[], None] = lambda: None  # noqa: E731
    own_weights = False
    pre: list[list[Any]] = []
    blocks: BlockReuse | None = None
    finish: Callable[[], None] | None = None  # keeps a recorded optimizer step (:mod:`.optimizer_memo`)
    run_device = "meta" if tensors == "meta" else device
    mode: Any = _fake_mode() if tensors == "fake" else contextlib.nullcontext()
    kernels: Any = (CpuKernels(reroute=tensors == "meta", host_tensor=rec.host_tensor, fuse=step.fuse_attention,
                               cuda=step.cuda)
                    if device == "cpu"
                    else contextlib.nullcontext())

    if state is not None:
        state.clean = False
    try:
        if ready is not None:
            ready()
        training = model.training  # the run's mode (the state put back below holds the one found)
        with mode, kernels:
            if tensors == "real":
                restore, own_weights = materialize(model, device)
            else:
                restore = swap_tensors(model, lambda t: torch.empty_strided(
                    t.shape, t.stride(), dtype=t.dtype, device=run_device))
            try:
                args, kwargs = make_inputs(run_device)
                kept: list[torch.Tensor] = []
                if backward and step.grads_kept:
                    for p in model.parameters():
                        if p.requires_grad:
                            p.grad = torch.zeros_like(p)
                            kept.append(p.grad)
                for kind, ts in (("weights", list(model.parameters())), ("buffers", list(model.buffers())),
                                 ("input", tensors_in((args, kwargs))), ("gradients", kept)):
                    for t in ts:
                        new = rec.watch(t)
                        if new is not None:
                            pre.append([new[0], new[1], kind])
                rec.param_uids = {uid for uid, _, kind in pre if kind == "weights"}
                rec.param_index = {p.untyped_storage()._cdata: i
                                   for i, (_, p) in enumerate(model.named_parameters())}
                opt = (step.optimizer([p for p in model.parameters() if p.requires_grad])
                       if backward and step.optimizer is not None else None)
                # state made by the optimizer's constructor (Adagrad's sums) exists before the step
                for st in opt.state.values() if opt is not None else ():
                    for t in st.values():
                        new = rec.watch(t) if isinstance(t, torch.Tensor) else None
                        if new is not None:
                            pre.append([new[0], new[1], "optimizer state"])
                finish = (optimizer_memo.install(opt, step.optimizer, model, rec, tensors, hooks.tags["optimizer"])
                          if reuse and opt is not None and tensors != "real" else None)
                blocks = (BlockReuse(model, stack, rec, kernels if isinstance(kernels, CpuKernels) else None,
                                     training=backward)
                          if reusable(stack, reuse=reuse, tensors=tensors, backward=backward, step=step) else None)
                if step.autocast is not None:
                    hooks.autocast_exit = functools.partial(hooks.after_autocast, blocks)
                with rec:
                    out = run_step(model, args, kwargs, backward=backward, optimizer=opt, autocast=step.autocast,
                                   device_type=device, grads_kept=step.grads_kept, loss=step.loss,
                                   hooks=hooks, cuda_autocast=step.cuda)
                    del out, opt
            except (FootprintError, ReplayMismatch):
                raise
            except Exception as exc:  # the model's own error: report where it happened
                phase = hooks.current
                where = stack.forward[-1] if phase == "forward" and stack.forward else stack.current(phase)
                raise _ModelRaised(exc, where, types.get(where, type(model).__name__), phase) from exc
            finally:
                if blocks is not None:
                    blocks.remove()
                stack.forward.clear()
                stack.backward.clear()
                for p in model.parameters():
                    p.grad = None
    finally:
        stack.remove()
        rec.detach_finalizers()
        modules = module_infos(params, stack)
        restore()
        if state is not None:  # the next attempt, and the caller, find the model as it was
            state.restore()
    if finish is not None:
        finish()
    settings = {"backward": backward, "device": device, "tensors": tensors, "training": training,
                "optimizer": getattr(step.optimizer, "label", None) if step.optimizer is not None else None,
                "autocast": name_of(step.autocast) if step.autocast is not None else None,
                "grads_kept": step.grads_kept, **({} if step.loss == "fp32" else {"loss": step.loss})}
    if isinstance(kernels, CpuKernels) and kernels.attention:
        settings["attention"] = kernels.attention
    tags = hooks.tags
    if rec.param_casts:
        tags["parameter casts"] = rec.param_casts
    notes = [real_inputs_note(make_inputs, own_weights)] if tensors == "real" else []
    # autocast's cache (cleared at the forward's end, and at the end of each checkpointed block's
    # recomputation) frees its casts in an order that follows their addresses: the frees after one
    # operator are listed by storage id
    frees = sorted(rec.frees, key=lambda f: (f.after, f.storage)) if step.autocast is not None else rec.frees
    return Trace(model=name, inputs=inputs_meta, events=rec.events, frees=frees, modules=modules,
                 params=params, buffers=buffers, preexisting=pre, settings=settings, tags=tags, notes=notes)
