"""Memory measured for real: the CPU allocator's own records, through torch.profiler."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ..trace.step import run_step


def one_step(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
             optimizer: torch.optim.Optimizer | None, train: bool, autocast: torch.dtype | None = None,
             device_type: str = "cpu") -> None:
    """One inference (no_grad) or one training step, the very step footprint traces
    (:func:`torch_footprint.trace.step.run_step`), under autocast to ``autocast`` if given."""
    run_step(model, args, kwargs, backward=train, optimizer=optimizer, autocast=autocast, device_type=device_type)


def cuda_peak(fn: Callable[[], Any]) -> int:
    """Run ``fn`` on the current CUDA device and return the caching allocator's peak of
    allocated bytes (``torch.cuda.max_memory_allocated``) above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def allocator_peak(fn: Callable[[], Any]) -> int:
    """Run ``fn`` under torch.profiler with profile_memory=True and return the peak of the
    cumulative sum of every allocation and free the CPU allocator reported ("[memory]" in
    the profiler's tables), in time order, above where it started."""

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # no "gpuGetDeviceCount failed" ERROR line without a GPU
    from .runner import kineto_quiet

    with kineto_quiet(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                profile_memory=True) as prof:
        fn()
    return peak_of_allocations(prof.profiler.kineto_results.experimental_event_tree())


def peak_of_allocations(nodes: Any) -> int:
    """The peak of the cumulative sum of the allocations and frees under these profiler event
    nodes (the nodes themselves and everything below them), in time order, above where it started."""
    from torch._C._profiler import _EventType

    records: list[tuple[int, int]] = []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            records.append((node.start_time_ns, node.typed[1].alloc_size))
        stack.extend(node.children)
    live = peak = 0
    for _, size in sorted(records):
        live += size
        peak = max(peak, live)
    return peak
