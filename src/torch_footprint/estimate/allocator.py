"""What a process holds on an NVIDIA GPU beyond the traced tensors' bytes, each part named with
where its size comes from. ``fit`` shows them apart; on an NVIDIA GPU its verdict is the traced
peak plus these against the whole memory (elsewhere, where they are not modelled, the peak and
overheads against ``--utilisation`` of it).

    cuda_context        the driver, kernels and runtime state the first CUDA call loads: 0.5 to
                        1 GiB by GPU, driver and libraries loaded (torch.cuda.mem_get_info before
                        and after torch.cuda.init() shows yours); 512 MiB taken here
    cublas_workspace    CublasHandlePool.cpp: CUBLAS_WORKSPACE_CONFIG's default, :4096:8 on sm90
                        (32 MiB) and :4096:2:16:8 elsewhere; a second one for autograd's device
                        thread in a training step (its own handle; measured on an H100)
    allocator_rounding  CUDACachingAllocator.cpp rounds each block up to 512 bytes
                        (kMinBlockSize): at most 511 bytes per allocation
    nccl_buffers        each NCCL communicator (one per process group the rank is in: data
                        parallel, tensor parallel, pipeline neighbours) keeps, per channel, its
                        receive buffers for the Simple protocol (NCCL_BUFFSIZE, 4 MiB by default,
                        NCCL's environment-variable reference) and about as much for LL128 and
                        LL: 2 x 4 MiB x 16 channels = 128 MiB per communicator, an estimate
                        (NCCL_BUFFSIZE and NCCL_MAX_NCHANNELS change it; NVLink SHARP adds more)

Not counted: memory reserved above what is allocated (blocks cached in segments that no request
of that size reuses: the caching allocator's large segments are rounded up to 2 MiB, kRoundLarge,
and a split segment can only serve smaller requests); ``PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:True`` removes most of it. A run within a few percent of the memory can fail
for it.
"""

from __future__ import annotations

from ..hardware.db import Accelerator
from .memory import ALLOCATOR_ROUNDING, overheads_for

NCCL_BUFFSIZE = 4 * 2**20  # NCCL's default NCCL_BUFFSIZE
NCCL_CHANNELS = 16  # channels a ring uses inside an NVLink node (NCCL_MAX_NCHANNELS caps it)
NCCL_PER_COMMUNICATOR = 2 * NCCL_BUFFSIZE * NCCL_CHANNELS

SOURCES = {
    "cuda_context": "the first CUDA call's driver, kernels and runtime state: 0.5-1 GiB by GPU and driver; 512 MiB "
                    "taken (torch.cuda.mem_get_info before and after torch.cuda.init() measures yours)",
    "cublas_workspace": "CublasHandlePool.cpp: CUBLAS_WORKSPACE_CONFIG default :4096:8 on sm90 (32 MiB), "
                        ":4096:2:16:8 elsewhere",
    "cublas_workspace (backward thread)": "autograd's device thread has its own cuBLAS handle and workspace "
                                          "(measured on an H100, benchmarks/results/memory-cuda-h100.txt)",
    "allocator_rounding (upper bound)": "CUDACachingAllocator.cpp rounds each block up to 512 B (kMinBlockSize)",
    "nccl_buffers (estimate)": "per NCCL communicator: receive buffers of NCCL_BUFFSIZE (4 MiB default) for the "
                               "Simple protocol and about as much for LL128/LL, x 16 channels",
}


def communicators(dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, replicas: int = 1) -> int:
    """NCCL communicators one rank of a layout is in: one per parallel dimension of more than one
    rank (data parallelism counted once, or twice under HSDP: its shard and replicate groups;
    a pipeline rank talks to its neighbours through one group)."""
    return sum(n > 1 for n in (dp // max(1, replicas), replicas, tp, pp, cp, ep))


def cuda_extras(acc: Accelerator, n_allocations: int, backward: bool = False, groups: int = 0) -> dict[str, int]:
    """The parts above for ``acc`` (empty where it is not a GPU), ``groups`` NCCL communicators."""
    if acc.kind != "gpu":
        return {}
    out = overheads_for("cuda", n_allocations, ALLOCATOR_ROUNDING["cuda"], backward)
    if groups and acc.vendor == "nvidia":
        out["nccl_buffers (estimate)"] = groups * NCCL_PER_COMMUNICATOR
    return out


def models_extras(acc: Accelerator) -> bool:
    """Whether the extras above are this accelerator's (an NVIDIA GPU: CUDA's caching allocator)."""
    return acc.kind == "gpu" and acc.vendor == "nvidia"
