"""What torch.compile (TorchInductor) changes in the kernels an eager trace records.

* **Fused chains** (:func:`fused_chains`): Inductor generates one kernel for a run of
  elementwise, normalisation and reduction operators between two library calls (cuBLAS and
  cuDNN matmuls and convolutions stay library calls unless max-autotune picks a Triton
  template): "TorchInductor ... fuses pointwise, reduction and scatter operations" into
  generated Triton kernels (the PyTorch 2 paper, Ansel et al., ASPLOS 2024, section 5). A
  chain reads its inputs once at entry and writes its result once at exit: its first
  operator's reads, each later operator's reads beyond what the one before it wrote (a
  second operand, a residual), and its last operator's writes. One kernel, so one launch
  and one least time.
* **Channels-last convolutions**: Inductor's layout optimisation puts the activations of a
  model with convolutions in channels-last (``torch._inductor.config.layout_optimization``,
  on by default except on ROCm), so no NCHW<->NHWC transposes run around its tensor-core
  convolutions (:func:`compiled_layout`).

* **The host's time per kernel** (:func:`host_s`): eager PyTorch spends its Python, dispatcher
  and launch time on every operator (``roofline.HOST_OP_S``, measured); Inductor's generated
  wrapper calls each fused kernel's launcher directly, so what remains per kernel is the CUDA
  launch itself, about 4-6 us ("every time the CPU submits a kernel to the GPU, it goes
  through a series of driver and runtime calls. This process takes about 4-6 us":
  https://susun-blog.com/blog/pegainfer-3-cuda-graph, measured against cudaStreamSynchronize);
  views cost nothing (folded into the kernels' indexing). Replayed as a CUDA graph
  (torch.compile's ``mode="reduce-overhead"``, or captured by hand) the host launches the
  graph once, not its kernels ("a graph ... launched as a single operation", NVIDIA's
  "Getting Started with CUDA Graphs", https://developer.nvidia.com/blog/cuda-graphs/).

Checked against the compiled and eager rows of ``benchmarks/published/models.toml`` (timm's
inference tables, batch 1024, AMP fp16, on an RTX 4090 and an RTX 5090: the same models both
ways; ``benchmarks/validate_models.py`` prices the compiled rows through this pass): the 14
compiled rows, priced as eager, were a median 48% too slow (ResNet-50 on the RTX 4090: 8,039
images/s published, 4,116 predicted); through this pass 18%, with kernel constants fitted
without the GPU under test (that row: 6,722; 7,196 with the shipped constants), about as close
as timm's eager rows at the same batch (16%).
A training step's saved activations are taken as Inductor's partitioner leaves them: cheap
pointwise results recomputed in the backward rather than written, so the forward's chains
fuse as they would in inference.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ...hardware.db import Accelerator
from ...trace.records import OpEvent, TensorInfo

MODES = ("eager", "compiled", "cuda-graphs")
CUDA_LAUNCH_S = 5e-6  # the host's time to launch one kernel, or one graph (module docstring)
FUSIBLE_KINDS = ("vector",)  # elementwise, normalisation, reductions, pooling (trace/formulas.py)
PASS_THROUGH_KINDS = ("view",)  # no kernel: a chain runs on through a reshape or a transpose
INDEXING_OPS = ("aten.cat.default", "aten.slice_backward.default")  # a fused RoPE's own indexing


def fused_chains(events: Sequence[OpEvent], casts: bool = False,
                 indexing: bool = False) -> tuple[dict[int, int], set[int]]:
    """The chains Inductor fuses: the bytes each chain's first operator moves for the whole
    chain (event index -> bytes), and the indices of the operators folded into it (no kernel
    of their own). ``casts``: dtype casts (``_to_copy``) join a chain too; ``indexing``:
    concatenations and slice copies too."""
    heads: dict[int, int] = {}
    folded: set[int] = set()
    chain: list[int] = []

    def close() -> None:
        if len(chain) > 1:
            first, last = events[chain[0]], events[chain[-1]]
            nbytes = first.bytes_read + last.bytes_written
            for before, after in zip(chain, chain[1:], strict=False):
                nbytes += max(0, events[after].bytes_read - events[before].bytes_written)
            heads[chain[0]] = nbytes
            folded.update(chain[1:])
        chain.clear()

    for i, e in enumerate(events):
        empty = e.kind == "data" and not (e.bytes_read or e.bytes_written)  # an allocation: no kernel
        if e.kind in PASS_THROUGH_KINDS or empty:
            continue
        joins = (e.kind in FUSIBLE_KINDS or (casts and e.op.startswith("aten._to_copy"))
                 or (indexing and e.op in INDEXING_OPS))
        if joins and (not chain or events[chain[-1]].phase == e.phase):
            chain.append(i)
            continue
        close()
        if joins:
            chain.append(i)
    close()
    return heads, folded


def module_chains(events: Sequence[OpEvent], modules: Collection[str],
                  rotary: Collection[str] = ()) -> tuple[dict[int, int], set[int]]:
    """:func:`fused_chains` within each call of ``modules`` (its forward's operators, and its
    backward's, as the trace attributes them): the kernels a fused module runs as one pass, as
    Megatron-core's and Transformer Engine's RMSNorm and SwiGLU do (estimate/layouts/fused.py),
    where every other operator keeps its own kernel. Inside such a module the dtype casts (an
    RMSNorm's fp32 upcast and its cast back) are the kernel's own loads and stores, so they join
    the chain too; gathers, scatters and other copies (an experts module's token permutation)
    keep their kernels, but in the ``rotary`` modules (a fused RoPE kernel) the rotation's
    concatenation and its backward's slice copies are the kernel's own indexing."""
    heads: dict[int, int] = {}
    folded: set[int] = set()
    i, n = 0, len(events)
    while i < n:
        e = events[i]
        if e.module not in modules:
            i += 1
            continue
        j = i + 1
        while j < n and events[j].module == e.module and events[j].phase == e.phase:
            j += 1
        h, f = fused_chains(events[i:j], casts=True, indexing=e.module in rotary)
        heads.update({i + k: v for k, v in h.items()})
        folded.update(i + k for k in f)
        i = j
    return heads, folded


def accumulated_gradients(events: Sequence[OpEvent], params: Sequence[TensorInfo]) -> set[int]:
    """The backward's in-place adds into a parameter's gradient (autograd accumulating a new
    gradient into ``.grad``: an ``add_`` attributed to the module that owns a parameter of its
    shape), which Megatron-core's gradient_accumulation_fusion folds into the weight-gradient
    GEMM's epilogue (estimate/layouts/fused.py)."""
    shapes: dict[str, set[tuple[int, ...]]] = {}
    for p in params:
        shapes.setdefault(p.module, set()).add(tuple(p.shape))
    return {i for i, e in enumerate(events)
            if e.phase == "backward" and e.op == "aten.add_.Tensor" and e.out_shapes
            and tuple(e.out_shapes[0]) in shapes.get(e.module, ())}


def input_gradient_sums(events: Sequence[OpEvent], params: Sequence[TensorInfo],
                        linears: Collection[str]) -> set[int]:
    """The backward's adds that sum the gradients of an input the ``linears`` share (an add
    attributed to one of them, as wide as its input features), which one merged GEMM's data
    gradient gives summed (estimate/layouts/fused.py)."""
    width = {p.module: p.shape[-1] for p in params if p.module in linears and len(p.shape) == 2}
    return {i for i, e in enumerate(events)
            if e.phase == "backward" and e.op == "aten.add.Tensor" and e.module in width and e.out_shapes
            and e.out_shapes[0] and e.out_shapes[0][-1] == width[e.module]}


def compiled_layout(acc: Accelerator, layout: str) -> str:
    """The activations' layout a compiled model's convolutions run in: channels-last on an
    NVIDIA GPU (Inductor's layout optimisation), as given elsewhere."""
    return "nhwc" if acc.vendor == "nvidia" and acc.kind == "gpu" else layout


def host_s(mode: str, eager_s: float, launches: bool, first: bool) -> float:
    """The host's time for one operator on a GPU in ``mode``: eager's (``eager_s``, the
    dispatcher's included); compiled, a kernel's launch where it ``launches`` one (a view or
    an operator folded into a chain launches none); under a CUDA graph, the graph's one
    launch, charged to its ``first`` kernel."""
    if mode == "eager":
        return eager_s
    if mode == "compiled":
        return CUDA_LAUNCH_S if launches else 0.0
    return CUDA_LAUNCH_S if first and launches else 0.0
