"""Which module is running while the trace records, and what each module was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .records import ModuleInfo, TensorInfo
from .reuse_through import spec_of
from .step import recomputing, tensors_in


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
        self.recurrent: set[str] = set()  # nn.RNN, nn.LSTM, nn.GRU and their subclasses
        for path, mod in model.named_modules():
            if id(mod) not in self.paths:
                self.paths[id(mod)] = path
                self.types[path] = type(mod).__name__
                if isinstance(mod, nn.RNNBase):
                    self.recurrent.add(path)
        self.forward: list[str] = []
        self.backward: list[str] = []
        self.track_backward = False
        self.calls: dict[str, int] = {}
        self.out_shapes: dict[str, list[list[int]]] = {}
        # while a repeated block is recorded (trace/reuse.py): each module call that ends, with its output shapes
        self.log: list[tuple[str, list[list[int]]]] | None = None
        self.through: list[tuple[str, Any]] | None = None  # and each call that returned its input as it was
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
        # a checkpoint's recomputation runs in the backward (its ops belong to the backward's
        # module) and may stop early, before the post-hooks that would pop what it pushed
        if path is None or recomputing():
            return
        self.forward.append(path)
        self.calls[path] = self.calls.get(path, 0) + 1

    def _post(self, mod: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        path = self.paths.get(id(mod))
        if path is None or recomputing():
            return
        if self.forward and self.forward[-1] == path:
            self.forward.pop()
        outs = tensors_in(output)
        if path not in self.out_shapes:
            self.out_shapes[path] = [list(t.shape) for t in outs]
        if self.log is not None:
            self.log.append((path, [list(t.shape) for t in outs]))
        if self.through is not None and (spec := spec_of(args, kwargs, output)) is not None:
            self.through.append((path, spec))
        if self.track_backward and torch.is_grad_enabled():
            ins = [t for t in tensors_in((args, kwargs)) if t.requires_grad]
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


def module_infos(params: list[TensorInfo], stack: ModuleStack) -> list[ModuleInfo]:
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
