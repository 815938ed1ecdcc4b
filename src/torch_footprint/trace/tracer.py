"""Run a model once under a TorchDispatchMode over fake tensors and record every aten op.

The model's parameters and buffers are swapped for fake tensors on the target device
(``cpu`` by default), so the kernels chosen are the ones that device would run (the CPU
flash-attention kernel, nn.MultiheadAttention's fused path) while nothing is allocated.
Where fake tensors cannot answer (data-dependent control flow) and the model is small,
the trace falls back to real tensors and says so in ``Trace.notes``.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..errors import FootprintError
from .fastmeta import fast_meta
from .formulas import formula_for
from .kernels import CpuKernels, causal_fraction
from .records import MemFree, ModuleInfo, OpEvent, TensorInfo, Trace

REAL_FALLBACK_LIMIT = 2 * 1024**3  # bytes of parameters up to which a real-tensor run is allowed


def _tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors in nested tuples, lists and dicts (a fast path for op arguments)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        out: list[torch.Tensor] = []
        for x in obj:
            if isinstance(x, torch.Tensor):
                out.append(x)
            elif isinstance(x, (tuple, list, dict)):
                out.extend(_tensors(x))
        return out
    if isinstance(obj, dict):
        return _tensors(list(obj.values()))
    leaves, _ = tree_flatten(obj)  # model outputs such as HF ModelOutput
    return [x for x in leaves if isinstance(x, torch.Tensor)]


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches for ``t``: its elements, or fewer where strides repeat (expand)."""
    n = t.numel()
    if n == 0:
        return 0
    if 0 in t.stride():
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
        n = min(n, span)
    return n * t.element_size()


class ModuleStack:
    """Which module is running: forward hooks in the forward, grad hooks in the backward.

    Forward: a pre-hook pushes the module's path and a post-hook pops it, so every op is
    attributed to the innermost module that is running. Backward: when the gradients of a
    module's outputs are ready its backward begins (push), and when the gradients of its
    inputs are ready it ends (pop); a push first drops entries that are not its ancestors,
    so a module whose inputs need no gradient does not linger. The hooks are global (one
    registration, however many modules) and ignore modules that are not the model's.
    """

    def __init__(self, model: nn.Module) -> None:
        self.paths: dict[int, str] = {}
        self.types: dict[str, str] = {}
        for path, mod in model.named_modules():
            if id(mod) not in self.paths:
                self.paths[id(mod)] = path
                self.types[path] = type(mod).__name__
        self.forward: list[str] = []
        self.backward: list[str] = []
        self.track_backward = False
        self.in_backward = False  # forward hooks firing now are a checkpoint's recomputation
        self.calls: dict[str, int] = {}
        self.out_shapes: dict[str, list[list[int]]] = {}
        self._handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
            torch.nn.modules.module.register_module_forward_hook(self._post, with_kwargs=True),
        ]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def current(self, phase: str) -> str:
        stack = self.backward if phase == "backward" else self.forward
        return stack[-1] if stack else ""

    def _pre(self, mod: nn.Module, args: Any) -> None:
        path = self.paths.get(id(mod))
        if path is None:
            return
        self.forward.append(path)
        if not self.in_backward:
            self.calls[path] = self.calls.get(path, 0) + 1

    def _post(self, mod: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        path = self.paths.get(id(mod))
        if path is None:
            return
        if self.forward and self.forward[-1] == path:
            self.forward.pop()
        outs = _tensors(output)
        if path not in self.out_shapes:
            self.out_shapes[path] = [list(t.shape) for t in outs]
        # (not during a checkpoint's recomputation: that graph is never run backward, and hooks
        # on it would keep its saved tensors alive)
        if self.track_backward and torch.is_grad_enabled() and not self.in_backward:
            ins = [t for t in _tensors((args, kwargs)) if t.requires_grad]
            if ins:
                torch.autograd.graph.register_multi_grad_hook(ins, self._bw_exit(path))
            # an output that is one of the inputs (an identity, dropout with p=0) has no backward here
            in_ids = {id(t) for t in ins}
            grads = [t for t in outs if t.requires_grad and id(t) not in in_ids]
            if grads:
                torch.autograd.graph.register_multi_grad_hook(grads, self._bw_enter(path))

    def _bw_enter(self, path: str) -> Callable[[Any], None]:
        prefix = path + "." if path else ""

        def hook(_grads: Any) -> None:
            st = self.backward
            # modules that are neither ancestors nor descendants of this one are done
            st[:] = [p for p in st if p == "" or path.startswith(p + ".") or p.startswith(prefix) or p == path]
            if path in st:
                return
            # nested modules sharing one output tensor enter inner-first: keep the innermost on top
            for i, p in enumerate(st):
                if p != path and p.startswith(prefix) and (path != "" or p != ""):
                    st.insert(i, path)
                    return
            st.append(path)

        return hook

    def _bw_exit(self, path: str) -> Callable[[Any], None]:
        def hook(_grads: Any) -> None:
            if path in self.backward:
                del self.backward[self.backward.index(path):]

        return hook


class Recorder(TorchDispatchMode):
    """Records one :class:`OpEvent` per aten op, and storage allocations and frees."""

    def __init__(self, stack: ModuleStack, device: str = "cpu") -> None:
        super().__init__()
        self.stack = stack
        self.device = device
        self.phase = "forward"
        self.events: list[OpEvent] = []
        self.frees: list[MemFree] = []
        self.live: dict[int, tuple[int, int]] = {}  # storage address -> (uid, nbytes)
        self._uid = 0
        self._finalizers: list[weakref.finalize] = []
        self._names: dict[Any, str] = {}
        # parameter storages, and the storages made by casting one (autocast's cached
        # low-precision weights): sharded training keeps these per unit, not per model
        self.param_uids: set[int] = set()
        self.param_casts: list[int] = []

    def watch(self, t: torch.Tensor) -> tuple[int, int] | None:
        """Start tracking ``t``'s storage; return (uid, nbytes) if it was not tracked yet.

        Each storage gets a uid of its own (storage addresses are reused after a free)."""
        st = t.untyped_storage()
        key = st._cdata
        if key in self.live:
            return None
        nbytes = st.nbytes()
        self._uid += 1
        self.live[key] = (self._uid, nbytes)
        self._finalizers.append(weakref.finalize(st, self._freed, key))
        return self._uid, nbytes

    def uid_of(self, t: torch.Tensor) -> int | None:
        entry = self.live.get(t.untyped_storage()._cdata)
        return entry[0] if entry else None

    def _freed(self, key: int) -> None:
        uid, nbytes = self.live.pop(key, (0, 0))
        if uid:
            self.frees.append(MemFree(after=len(self.events) - 1, storage=uid, nbytes=nbytes))

    def detach_finalizers(self) -> None:
        for f in self._finalizers:
            f.detach()
        self._finalizers.clear()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        fast = fast_meta(func, args)
        out = fast(*args, **kwargs) if fast is not None else func(*args, **kwargs)
        if func.namespace == "prim":
            return out
        cost = formula_for(func)(func, args, kwargs, out)
        if cost.macs and func._overloadpacket is torch.ops.aten.bmm:
            scope = causal_fraction()
            if scope is not None:  # a causal attention's matmul on the math path: visible pairs only
                macs = cost.macs * scope[0] // scope[1]
                cost = cost._replace(flops=cost.flops - 2 * (cost.macs - macs), macs=macs)
        scratch = _kernel_scratch(func, args) if cost.macs and self.device == "cpu" else 0
        outs = _tensors(out)
        if cost.kind == "view":
            read = written = 0
        else:
            ins = _tensors(args)
            if kwargs:
                ins += _tensors(kwargs)
            read = 0
            seen: set[int] = set()
            for t in ins:
                if id(t) not in seen:
                    seen.add(id(t))
                    read += _span_bytes(t)
            written = sum(_span_bytes(t) for t in outs)
        allocs = []
        for t in outs:
            new = self.watch(t)
            if new is not None:
                allocs.append(list(new))
        if (allocs and self.param_uids and func._overloadpacket is _TO_COPY
                and isinstance(args[0], torch.Tensor) and self.uid_of(args[0]) in self.param_uids):
            self.param_casts.extend(uid for uid, _ in allocs)
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = f"{func.namespace}.{func._overloadpacket.__name__.split('.')[-1]}." \
                                       f"{func._overloadname}"
        self.events.append(OpEvent(
            op=name,
            module=self.stack.current(self.phase),
            phase=self.phase,
            flops=cost.flops,
            macs=cost.macs,
            kind=cost.kind,
            bytes_read=read,
            bytes_written=written,
            out_shapes=[list(t.shape) for t in outs],
            out_dtypes=[dtype_name(t.dtype) for t in outs],
            allocs=allocs,
            scratch=scratch,
        ))
        return out


_TO_COPY = torch.ops.aten._to_copy
_MATMULS = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.baddbmm}


def _blas_ready(t: torch.Tensor) -> bool:
    """Whether a BLAS call can read this matrix operand in place (row- or column-major)."""
    if t.dim() < 2 or 0 in t.stride():
        return t.dim() < 2 or t.numel() == 0
    rows, cols = t.shape[-2], t.shape[-1]
    rs, cs = t.stride()[-2], t.stride()[-1]
    return (cs == 1 and rs >= max(cols, 1)) or (rs == 1 and cs >= max(rows, 1))


def _kernel_scratch(func: Any, args: Any) -> int:
    """Bytes a CPU kernel allocates for itself for the length of the call, seen in the CPU
    allocator's records: a matmul copies an operand it cannot hand to BLAS as it is (an
    expanded gradient, say); oneDNN's depthwise convolution reorders its input into a
    blocked layout."""
    packet = func._overloadpacket
    if packet is torch.ops.aten.convolution:
        x, w = args[0], args[1]
        groups = args[8] if len(args) > 8 else 1
        transposed = bool(args[6]) if len(args) > 6 else False
        if (isinstance(x, torch.Tensor) and x.dim() == 4 and not transposed and groups > 1
                and groups == x.shape[1] and w.shape[1] == 1):
            return x.numel() * x.element_size()
        return 0
    if packet not in _MATMULS:
        return 0
    operands = args[1:3] if func._overloadpacket in (torch.ops.aten.addmm, torch.ops.aten.baddbmm) else args[:2]
    return sum(t.numel() * t.element_size() for t in operands
               if isinstance(t, torch.Tensor) and not _blas_ready(t))


def _scalar_of(output: Any) -> torch.Tensor:
    """A scalar to call backward on: the sum of the first floating output that needs grad."""
    for t in _tensors(output):
        if t.is_floating_point() and t.requires_grad:
            return t.sum()
    raise FootprintError(
        "backward was asked for, but the model returned no floating-point tensor that requires "
        "a gradient (are all parameters frozen?)"
    )


def _fake_mode() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)  # constants a model keeps as plain attributes


def _swap_tensors(model: nn.Module, make: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
    """Replace every parameter and buffer with ``make(t)``, keeping shared ones shared.

    Returns a function that puts the original tensors back."""
    memo: dict[int, torch.Tensor] = {}
    saved: list[tuple[dict[str, Any], str, Any]] = []
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(make(p), requires_grad=p.requires_grad)
            saved.append((mod._parameters, name, p))
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = make(b)
            saved.append((mod._buffers, name, b))
            mod._buffers[name] = memo[id(b)]

    # tensors a module keeps as plain attributes (caches such as torchvision's anchors) may be
    # replaced during the run by tensors of the run's kind: put those back too
    for mod in model.modules():
        for name, value in list(vars(mod).items()):
            if name.startswith("_"):
                continue
            if isinstance(value, torch.Tensor) or (
                    isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)):
                saved.append((vars(mod), name, value))

    def restore() -> None:
        for table, name, original in saved:
            table[name] = original

    return restore


def _param_infos(model: nn.Module) -> tuple[list[TensorInfo], list[TensorInfo]]:
    params = [
        TensorInfo(name=n, module=n.rpartition(".")[0], shape=list(p.shape), dtype=dtype_name(p.dtype),
                   numel=p.numel(), nbytes=p.numel() * p.element_size(), trainable=p.requires_grad)
        for n, p in model.named_parameters()
    ]
    buffers = [
        TensorInfo(name=n, module=n.rpartition(".")[0], shape=list(b.shape), dtype=dtype_name(b.dtype),
                   numel=b.numel(), nbytes=b.numel() * b.element_size())
        for n, b in model.named_buffers()
    ]
    return params, buffers


def _module_infos(params: list[TensorInfo], stack: ModuleStack) -> list[ModuleInfo]:
    infos = {}
    for path, mtype in stack.types.items():
        infos[path] = ModuleInfo(path=path, type=mtype, depth=0 if path == "" else path.count(".") + 1,
                                 calls=stack.calls.get(path, 0), out_shapes=stack.out_shapes.get(path, []))
    for p in params:
        info = infos.get(p.module)
        if info is not None:
            info.params += p.numel
            info.param_bytes += p.nbytes
    return list(infos.values())


def _is_data_dependent(exc: BaseException) -> bool:
    names = {"DataDependentOutputException", "DynamicOutputShapeException", "UnsupportedOperatorException",
             "GuardOnDataDependentSymNode", "UnsupportedFakeTensorException"}
    e: BaseException | None = exc
    while e is not None:
        if type(e).__name__ in names:
            return True
        e = e.__cause__ or e.__context__
    return False


def _meta_specific(exc: BaseException) -> bool:
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


@contextlib.contextmanager
def _phase(rec: Recorder, phase: str) -> Iterator[None]:
    old = rec.phase
    rec.phase = phase
    try:
        yield
    finally:
        rec.phase = old


def _materialize(model: nn.Module, device: str) -> Callable[[], None]:
    """Give the model real storage with small random values (for the real fallback)."""
    gen = torch.Generator().manual_seed(0)

    def make(t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.shape, dtype=t.dtype, device=device)
        if out.is_floating_point():
            out.normal_(0.0, 0.02, generator=gen)
        else:
            out.zero_()
        return out

    restore = _swap_tensors(model, make)
    for mod in model.modules():
        if isinstance(mod, nn.modules.batchnorm._NormBase) and mod.running_var is not None:
            mod.running_var.fill_(1.0)
    return restore


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
) -> Trace:
    """Trace one forward (and optionally backward) pass of ``model``.

    ``model`` may live on the meta device (the usual case) or on a real device.
    ``make_inputs(device)`` returns ``(args, kwargs)`` built on the device it is given.

    Tensors: meta first (fastest; attention routed to the kernel ``device`` would run);
    where the model cannot run on meta (it mixes in tensors of another device, say),
    fake tensors on ``device``; where the forward depends on tensor values, real tensors
    with random values if the parameters fit ``real_fallback_limit``. Each fallback is
    stated in ``Trace.notes``. ``tensors`` forces one kind ("meta", "fake" or "real")
    instead of that order ("auto"). The model's own tensors are swapped only for the run
    and put back afterwards.
    """
    params, buffers = _param_infos(model)
    common = dict(name=name, backward=backward, device=device, params=params, buffers=buffers,
                  inputs_meta=inputs_meta or [], step=step)
    if tensors == "auto" and step is not None and step.autocast is not None:
        tensors = "fake"  # autocast acts on a device's tensors, not on meta ones
    if tensors != "auto":
        if tensors not in ("meta", "fake", "real"):
            raise FootprintError(f"unknown tensor kind '{tensors}': use auto, meta, fake or real")
        try:
            with _quiet_fake_logs():
                return _run(model, make_inputs, tensors=tensors, **common)
        except _ModelRaised as err:
            raise err.user_error() from err.original
    notes: list[str] = []
    try:
        trace = _run(model, make_inputs, tensors="meta", **common)
        trace.notes = notes
        return trace
    except _ModelRaised as err:
        if not _meta_specific(err.original):
            raise err.user_error() from err.original
        first = err
    gc.collect()
    try:
        with _quiet_fake_logs():
            trace = _run(model, make_inputs, tensors="fake", **common)
        trace.notes = [f"traced with fake tensors on {device}: the meta device failed "
                       f"({type(first.original).__name__} in '{first.where}')"]
        return trace
    except _ModelRaised as err:
        if not _is_data_dependent(err.original):
            raise err.user_error() from err.original
        second = err
    total = sum(p.nbytes for p in params) + sum(b.nbytes for b in buffers)
    if total > real_fallback_limit:
        raise FootprintError(
            f"the model's forward depends on tensor values ({type(second.original).__name__} in "
            f"'{second.where}'), which fake tensors cannot answer, and at {total / 2**30:.1f} GiB of "
            f"parameters it is too large to run for real (limit {real_fallback_limit / 2**30:.1f} GiB)"
        ) from second.original
    gc.collect()
    try:
        trace = _run(model, make_inputs, tensors="real", **common)
    except _ModelRaised as err:
        raise err.user_error() from err.original
    trace.notes = [
        f"ran on real {device} tensors with random values: the forward depends on tensor values "
        f"({type(second.original).__name__} in '{second.where}'), which fake tensors cannot answer"
    ]
    return trace


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
        return FootprintError(
            f"the model raised {type(self.original).__name__} during the {self.phase} pass, in module "
            f"'{self.where}' ({self.mtype}): {first}"
        )


@dataclass
class StepOptions:
    """What a training step adds to a forward and backward."""

    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None
    autocast: torch.dtype | None = None  # mixed precision: the forward under torch.autocast
    # gradients kept from the previous step (zero_grad(set_to_none=False)): they exist before
    # the forward and the backward accumulates into them
    grads_kept: bool = False


def _run(model: nn.Module, make_inputs: Callable[[str], tuple[tuple[Any, ...], dict[str, Any]]], *, name: str,
         backward: bool, device: str, tensors: str, params: list[TensorInfo], buffers: list[TensorInfo],
         inputs_meta: list[dict[str, Any]], step: StepOptions | None = None) -> Trace:
    step = step or StepOptions()
    stack = ModuleStack(model)
    stack.track_backward = backward
    rec = Recorder(stack, device)
    types = stack.types
    restore: Callable[[], None] = lambda: None  # noqa: E731
    pre: list[list[Any]] = []
    tags: dict[str, list[int]] = {"output": [], "gradients": [], "optimizer": []}
    run_device = "meta" if tensors == "meta" else device
    mode: Any = _fake_mode() if tensors == "fake" else contextlib.nullcontext()
    kernels: Any = CpuKernels(reroute=tensors == "meta") if device == "cpu" else contextlib.nullcontext()

    def tag(kind: str, ts: list[torch.Tensor]) -> None:
        for t in ts:
            uid = rec.uid_of(t)
            if uid is not None and uid not in tags[kind]:
                tags[kind].append(uid)

    try:
        with mode, kernels:
            if tensors == "real":
                restore = _materialize(model, device)
            else:
                restore = _swap_tensors(model, lambda t: torch.empty_strided(
                    t.shape, t.stride(), dtype=t.dtype, device=run_device))
            phase = "inputs"
            try:
                args, kwargs = make_inputs(run_device)
                kept: list[torch.Tensor] = []
                if backward and step.grads_kept:
                    for p in model.parameters():
                        if p.requires_grad:
                            p.grad = torch.zeros_like(p)
                            kept.append(p.grad)
                for kind, ts in (("weights", list(model.parameters())), ("buffers", list(model.buffers())),
                                 ("input", _tensors((args, kwargs))), ("gradients", kept)):
                    for t in ts:
                        new = rec.watch(t)
                        if new is not None:
                            pre.append([new[0], new[1], kind])
                rec.param_uids = {uid for uid, _, kind in pre if kind == "weights"}
                grad_ctx = contextlib.nullcontext() if backward else torch.no_grad()
                amp = (torch.autocast(device_type=device, dtype=step.autocast) if step.autocast is not None
                       else contextlib.nullcontext())
                phase = "forward"
                with rec, grad_ctx:
                    with amp:
                        out = model(*args, **kwargs)
                    tag("output", _tensors(out))
                    if backward:
                        phase = "loss"
                        with _phase(rec, "loss"):
                            loss = _scalar_of(out)
                        phase = "backward"
                        stack.in_backward = True
                        with _phase(rec, "backward"):
                            loss.backward()
                        stack.in_backward = False
                        del loss, out  # a training loop lets the outputs go before the optimizer step
                        out = None
                        tag("gradients", [p.grad for p in model.parameters() if p.grad is not None])
                        if step.optimizer is not None:
                            phase = "optimizer"
                            opt = step.optimizer([p for p in model.parameters() if p.requires_grad])
                            with _phase(rec, "optimizer"):
                                opt.step()
                            tag("optimizer", [v for st in opt.state.values() for v in st.values()
                                              if isinstance(v, torch.Tensor)])
                            del opt
                    del out
            except FootprintError:
                raise
            except Exception as exc:  # the model's own error: report where it happened
                where = stack.forward[-1] if phase == "forward" and stack.forward else stack.current(phase)
                raise _ModelRaised(exc, where, types.get(where, type(model).__name__), phase) from exc
            finally:
                stack.forward.clear()
                stack.backward.clear()
                for p in model.parameters():
                    p.grad = None
    finally:
        stack.remove()
        rec.detach_finalizers()
        modules = _module_infos(params, stack)
        restore()
    settings = {"backward": backward, "device": device, "tensors": tensors, "training": model.training,
                "optimizer": _optimizer_name(step),
                "autocast": dtype_name(step.autocast) if step.autocast is not None else None,
                "grads_kept": step.grads_kept}
    if rec.param_casts:
        tags["parameter casts"] = rec.param_casts
    return Trace(model=name, inputs=inputs_meta, events=rec.events, frees=rec.frees, modules=modules,
                 params=params, buffers=buffers, preexisting=pre, settings=settings, tags=tags)


def _optimizer_name(step: StepOptions) -> str | None:
    return getattr(step.optimizer, "label", None) if step.optimizer is not None else None
