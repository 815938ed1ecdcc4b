"""The dispatch mode that records one event per aten operator, and storage allocations and frees."""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..dtypes import name_of
from .cuda_ops import NAMESPACE as CUDA_OPS
from .fastmeta import fast_meta
from .formulas import formula_for, is_cast
from .kernels import kernel_scratch, wrapped_scalars
from .metamemo import remembered
from .modules import ModuleStack
from .records import MemFree, OpEvent
from .step import tensors_in

# lookups: the first argument is a table the op gathers rows (or elements) of, as many as it writes
SELECTS = frozenset({"embedding", "index_select", "gather", "take"})
_ADD, _ADD_, _UNSAFE_VIEW = torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor, torch.ops.aten._unsafe_view.default
MATMULS = frozenset({"mm", "addmm"})


def _right_transposed(func: Any, args: Any) -> bool:
    """Whether a 2-d matmul's right operand is column-major (``nn.Linear``'s ``weight.t()``)."""
    name = func._overloadpacket.__name__
    if name not in MATMULS:
        return False
    b = args[2] if name == "addmm" else args[1]
    return isinstance(b, torch.Tensor) and b.dim() == 2 and b.stride(0) == 1 and b.shape[1] > 1


# copies through TensorIterator's copy kernel: a dtype conversion of a dense tensor is vectorized there
# (copy_kernel_cuda's float/half/bfloat16 paths), a copy out of a transposed or broadcast view is not
_COPIES = frozenset({"copy_", "_to_copy", "clone"})


@functools.cache
def _loop_kind(func: Any) -> str:
    """"copy", "pointwise" or "" (an operator that runs no elementwise loop), once per operator."""
    if func._overloadpacket.__name__ in _COPIES:
        return "copy"
    return "pointwise" if torch.Tag.pointwise in func.tags else ""


def elementwise_loop(func: Any, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> str:
    """Which loop PyTorch's CUDA elementwise kernels run for this call (ATen's CUDALoops.cuh,
    ``gpu_kernel_impl``): a contiguous iteration without casts is vectorized (``vectorized_elementwise_kernel``,
    ""); one whose operands need casting to the output's dtype loads them one by one
    (``unrolled_elementwise_kernel``, "cast"); an iteration that is not contiguous (an operand
    transposed, sliced or broadcast against the output) runs the legacy loop that computes every
    element's offset in each operand (``elementwise_kernel<128, 4>``, "strided"), casting too where it
    must ("strided cast"). Zero-dimensional operands are passed as scalars. Only pointwise operators
    and copies run these loops; a copy's dtype conversion of a dense tensor is vectorized."""
    kind = _loop_kind(func)
    if not kind or not outs:
        return ""
    out = outs[0]
    if out.numel() <= 1:
        return ""
    shape, stride = out.shape, out.stride()
    strided = not (out.is_contiguous() or (out.dim() == 4 and out.is_contiguous(memory_format=torch.channels_last)))
    cast = False
    for t in ins:
        if t.dim() == 0:
            continue
        if t.shape != shape or t.stride() != stride:
            strided = True
        if t.dtype != out.dtype:
            cast = True
    cast = cast and kind != "copy"
    return " ".join(name for name, on in (("strided", strided), ("cast", cast)) if on)


def mutated(func: Any, args: Any, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an operator writes in place: its schema's arguments marked ``Tensor(a!)``
    (``_foreach_mul_``'s ``self``: the whole list)."""
    out: list[torch.Tensor] = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(a.name)
            out += tensors_in(value)
    return out


def span_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches for ``t``: its elements, or fewer where strides repeat (expand)."""
    n = t.numel()
    if n == 0:
        return 0
    if 0 in t.stride():
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
        n = min(n, span)
    return n * t.element_size()


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
        # a weak reference per tracked storage, its callback noting the free (lighter than
        # weakref.finalize, whose registry costs a few microseconds a storage)
        self._finalizers: list[weakref.ref[Any]] = []
        self._detached = False
        self._names: dict[Any, str] = {}
        # parameter storages, and the storages made by casting one (autocast's cached
        # low-precision weights): sharded training keeps these per unit, not per model
        self.param_uids: set[int] = set()
        self.param_casts: list[int] = []
        self.param_index: dict[int, int] = {}  # parameter storage -> index in Trace.params
        self._folded: Any = None  # the last op's output where it was matmul's fold (_unsafe_view)

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
        self._finalizers.append(weakref.ref(st, functools.partial(self._gone, key)))
        return self._uid, nbytes

    def adopt(self, t: torch.Tensor, uid: int) -> None:
        """Track ``t``'s storage under a storage id given out already (a replayed block's output)."""
        st = t.untyped_storage()
        key = st._cdata
        self.live[key] = (uid, st.nbytes())
        self._finalizers.append(weakref.ref(st, functools.partial(self._gone, key)))

    def uid_of(self, t: torch.Tensor) -> int | None:
        entry = self.live.get(t.untyped_storage()._cdata)
        return entry[0] if entry else None

    def _freed(self, key: int) -> None:
        uid, nbytes = self.live.pop(key, (0, 0))
        if uid:
            self.frees.append(MemFree(after=len(self.events) - 1, storage=uid, nbytes=nbytes))

    def _gone(self, key: int, _ref: Any) -> None:
        if not self._detached:
            self._freed(key)

    def detach_finalizers(self) -> None:
        """Stop noting frees (a weak reference dropped calls nothing; the flag covers one still held)."""
        self._detached = True
        self._finalizers.clear()

    def host_tensor(self, name: str, t: torch.Tensor) -> None:
        """A tensor made outside the dispatcher (no aten op to record) that the allocator
        holds all the same: one event of its own, allocating its storage."""
        new = self.watch(t)
        if new is None:
            return
        self.events.append(OpEvent(op=name, module=self.stack.current(self.phase), phase=self.phase, flops=0,
                                   macs=0, kind="data", bytes_read=0, bytes_written=span_bytes(t),
                                   out_shapes=[list(t.shape)], out_dtypes=[name_of(t.dtype)], allocs=[list(new)]))

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No ``torch._disable_dynamo`` wrapper around :meth:`__torch_dispatch__` (TorchDispatchMode
        adds one by default, for torch.compile's sake): a trace never compiles, and the wrapper
        costs two Python frames per operator (about 1 s over a 70B training step's 72,000 calls)."""
        return False

    def _linear_bias_in_place(self, args: Any) -> bool:
        """ATen's ``linear`` called from C++ (a recurrent layer's cells: CellParams::linear_ih)
        on an input it cannot flatten runs matmul, then ``output.add_(bias)`` in place; under a
        dispatch mode it takes its composite-compliant branch, ``at::add(output, bias)``, a
        second output as large as the first. Inside a recurrent layer's forward on a CPU, a
        1-d add right onto matmul's folded output is that add, and is made in place as the
        real kernel makes it. (Python callers of ``F.linear`` get the same through
        :class:`~torch_footprint.trace.kernels.CpuKernels`.)"""
        return (self.device == "cpu" and self.phase == "forward" and self._folded is not None
                and len(args) == 2 and args[0] is self._folded and isinstance(args[1], torch.Tensor)
                and args[1].dim() == 1 and self.stack.current(self.phase) in self.stack.recurrent)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func.namespace == "prim":  # prim.device, prim.layout, ...: fake tensors ask these all the time
            return func(*args, **kwargs)
        if func is _ADD and self._linear_bias_in_place(args):  # an add, a one-line check per op
            func = _ADD_
        self._folded = None
        fast = fast_meta(func, args, kwargs) or remembered(func, args, kwargs)
        out = fast(*args, **kwargs) if fast is not None else func(*args, **kwargs)
        if func is _UNSAFE_VIEW:
            self._folded = out
        cost = formula_for(func)(func, args, kwargs, out)
        scratch = kernel_scratch(func, args, self.device) if cost.macs else 0
        scratch += wrapped_scalars(func, args, self.device)
        outs = tensors_in(out)
        weights: list[int] = []
        if cost.kind == "view":
            read = written = 0
        else:
            ins = tensors_in(args)
            if kwargs:
                ins += tensors_in(kwargs)
            read = 0
            seen: set[int] = set()
            table = ins[0] if func._overloadpacket.__name__ in SELECTS and ins else None
            if table is not None:  # a lookup reads the rows it gathers, not the whole table
                seen.add(id(table))
                read += sum(span_bytes(t) for t in outs)
            for t in ins:
                if id(t) not in seen:
                    seen.add(id(t))
                    read += span_bytes(t)
                    if self.param_index:
                        w = self.param_index.get(t.untyped_storage()._cdata)
                        if w is not None and w not in weights:
                            weights.append(w)
            written = sum(span_bytes(t) for t in outs)
            if not outs and func._schema.is_mutable:  # an in-place foreach op returns nothing: it wrote its lists
                written = sum(span_bytes(t) for t in mutated(func, args, kwargs))
        allocs = []
        for t in outs:
            new = self.watch(t)
            if new is not None:
                allocs.append(list(new))
        if (allocs and self.param_uids and is_cast(func)
                and isinstance(args[0], torch.Tensor) and self.uid_of(args[0]) in self.param_uids):
            self.param_casts.extend(uid for uid, _ in allocs)
        name = self._names.get(func)
        if name is None:
            # this tool's stand-ins for a CUDA kernel (trace.cuda_ops) are named as the kernel
            namespace = "aten" if func.namespace == CUDA_OPS else func.namespace
            name = self._names[func] = f"{namespace}.{func._overloadpacket.__name__.split('.')[-1]}." \
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
            out_dtypes=[name_of(t.dtype) for t in outs],
            allocs=allocs,
            scratch=scratch,
            weights=weights,
            transposed=cost.kind == "matrix" and _right_transposed(func, args),
            problem=list(cost.problem),
            loop=elementwise_loop(func, ins, outs) if cost.kind not in ("view", "matrix") else "",
        ))
        return out
