"""Memory: closed-form bytes per parameter, a real CPU measurement, and bad input."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.errors import FootprintError


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


P = 256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
TENSORS = 6  # three weights, three biases


@pytest.mark.parametrize(("optimizer", "state_per_param", "step_counter"),
                         [("sgd", 0, False), ("momentum", 4, False), ("adam", 8, True), ("adamw", 8, True),
                          ("rmsprop", 4, True), ("adagrad", 4, True)])
def test_fp32_bytes_per_parameter(optimizer: str, state_per_param: int, step_counter: bool) -> None:
    est = tfp.memory(MLP(), "32,256", train=True, optimizer=optimizer)
    got = est.peak.persistent
    assert got["weights"] == 4 * P
    assert got["gradients"] == 4 * P
    # torch.optim keeps a float32 step counter tensor per parameter tensor where it counts steps
    assert got["optimizer state"] == state_per_param * P + (4 * TENSORS if step_counter else 0)


def test_bf16_weights_adamw_bytes_per_parameter() -> None:
    # a Hugging Face model by name, so the tool may cast it: 2 + 2 + 4 bytes per parameter
    pytest.importorskip("transformers")
    from pathlib import Path

    cfg = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")
    est = tfp.memory(cfg, {"input_ids": "1,32:int64"}, train=True, optimizer="adamw", precision="bf16")
    p = tfp.profile(cfg, {"input_ids": "1,32:int64"}).params
    n = 2 + 2 * (2 + 2 + 2 + 2 + 2 + 2) + 2  # wte, wpe; per layer 2 norms x2, 4 linears x2; final norm x2
    got = est.peak.persistent
    assert (got["weights"], got["gradients"]) == (2 * p, 2 * p)
    assert got["optimizer state"] == 4 * p + 4 * n  # two bf16 moments, and a float32 step per tensor
    mixed = tfp.memory(cfg, {"input_ids": "1,32:int64"}, train=True, optimizer="adamw", precision="bf16-mixed")
    got = mixed.peak.persistent
    assert (got["weights"], got["gradients"], got["optimizer state"]) == (4 * p, 4 * p, 8 * p + 4 * n)
    assert mixed.settings["tensors"] == "fake"  # autocast needs a device's tensors


def test_inference_frees_activations_layer_by_layer() -> None:
    est = tfp.memory(MLP(), "64,256")
    # the widest point: a 64x512 output alive with its 64x512 input (the ReLU's), plus weights and input
    assert est.peak.above_baseline == 2 * 64 * 512 * 4
    assert est.peak.breakdown["activations"] == 0


def _measured_peak(model: nn.Module, x: torch.Tensor, train: bool) -> int:
    from torch_footprint.measure.measured import allocator_peak, one_step

    opt = torch.optim.SGD(model.parameters(), lr=0.01) if train else None
    model.train(train)
    gc.collect()
    return allocator_peak(lambda: one_step(model, (x,), {}, opt, train))


@pytest.mark.parametrize(("name", "train"), [("resnet18", False), ("resnet18", True), ("mobilenet_v2", False)])
def test_peak_matches_the_cpu_allocator(name: str, train: bool) -> None:
    # mobilenet_v2's depthwise convolutions reorder their input inside the kernel: charged as scratch
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.get_model(name)
    measured = _measured_peak(model, torch.randn(2, 3, 224, 224), train)
    est = tfp.memory(name, "2,3,224,224", train=train, optimizer="sgd" if train else None)
    assert est.peak.above_baseline == pytest.approx(measured, rel=0.05)


def test_max_batch_within_a_budget() -> None:
    budget = 16 * 2**20
    est = tfp.memory(MLP(), "1,256", train=True, optimizer="sgd", max_batch=budget, utilisation=1.0)
    fit = est.scaling
    assert fit is not None and fit.affine and fit.max_batch_checked
    b = fit.max_batch
    assert b > 1
    assert tfp.memory(MLP(), f"{b},256", train=True, optimizer="sgd").peak.peak_bytes <= budget
    assert tfp.memory(MLP(), f"{b + 1},256", train=True, optimizer="sgd").peak.peak_bytes > budget


def test_impossible_budget_says_so() -> None:
    with pytest.raises(FootprintError, match="its weights alone take"):
        tfp.memory(MLP(), "1,256", max_batch="100KiB")


def test_unknown_optimizer_lists_the_valid_ones() -> None:
    with pytest.raises(FootprintError, match="unknown optimizer 'adamx': use sgd, momentum, adam, adamw"):
        tfp.memory(MLP(), "1,256", train=True, optimizer="adamx")


def test_checkpointing_keeps_fewer_activations() -> None:
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128))
                                          for _ in range(6)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blocks(x)

    plain = tfp.memory(Stack(), "64,128", train=True, optimizer="sgd")
    ckpt = tfp.memory(Stack(), "64,128", train=True, optimizer="sgd", checkpointing=True)
    assert ckpt.peak.persistent == plain.peak.persistent
    # checkpointed: only the inputs of blocks 2..6 are kept (block 1's input is the model's input),
    # and for each block the CPU generator's state, to replay its random ops in the recomputation
    rng = torch.get_rng_state().nbytes  # 5056 bytes
    assert sum(ckpt.peak.activations_by_module.values()) == 5 * 64 * 128 * 4 + 6 * rng
    # plain: every block also keeps its two 64x512 hiddens (the linear's output for GELU, GELU's for the linear)
    assert sum(plain.peak.activations_by_module.values()) == 5 * 64 * 128 * 4 + 6 * 2 * 64 * 512 * 4


def test_gradients_kept_between_steps_exist_before_the_forward() -> None:
    first = tfp.memory(MLP(), "32,256", train=True, optimizer="sgd")
    kept = tfp.memory(MLP(), "32,256", train=True, optimizer="sgd", grads="zero")
    assert kept.peak.baseline_bytes == first.peak.baseline_bytes + 4 * P
    assert kept.peak.persistent["gradients"] == 4 * P  # accumulated in place, not allocated again


def test_memory_command(capsys: pytest.CaptureFixture[str]) -> None:
    from torch_footprint.cli import main

    assert main(["memory", "resnet18", "--batch", "4", "--train", "--optimizer", "momentum"]) == 0
    out = capsys.readouterr().out
    assert "optimizer state" in out and "provision (total / 0.8)" in out and "44.6 MiB" in out
    assert main(["memory", "resnet18", "--optimizer", "sgdd", "--train"]) == 2
    assert "unknown optimizer" in capsys.readouterr().err
    assert main(["memory", "resnet18", "--max-batch", "10MiB"]) == 2
    assert "weights alone take" in capsys.readouterr().err
    assert main(["memory", "resnet18", "--max-batch", "lots"]) == 2
    assert "cannot read the memory size" in capsys.readouterr().err
    assert main(["memory", "resnet18", "--device", "cuda", "--overhead", "cuda_context=300MiB"]) == 0
    out = capsys.readouterr().out
    assert "+ cuda context" in out and "300 MiB" in out and "+ cublas workspace" in out
    assert main(["memory", "resnet18", "--overhead", "300MiB"]) == 2
    assert "NAME=SIZE" in capsys.readouterr().err


def test_timeline_has_a_point_per_operator_and_peaks_at_the_peak() -> None:
    est = tfp.memory(MLP(), "64,256", train=True, optimizer="sgd")
    tl = est.peak.timeline
    assert len(tl) > 10 and [i for i, _ in tl] == list(range(len(tl)))  # one point after every operator
    # by hand: weights and the input before any operator; then the weight's transpose (a view),
    # the first layer's output (64 x 512 float32), ReLU's output, and the next transpose, by
    # which the first layer's output is gone (ReLU's backward needs only its own output)
    base, act = 4 * P + 4 * 64 * 256, 4 * 64 * 512
    assert [live for _, live in tl[:4]] == [base, base + act, base + 2 * act, base + act]


def test_adafactor_keeps_factored_statistics() -> None:
    # torch.optim.Adafactor: a row and a column vector per matrix, a full vector per bias,
    # and a float32 step per tensor
    m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    est = tfp.memory(m, "8,256", train=True, optimizer="adafactor")
    expected = 4 * (512 + 256) + 4 * 512 + 4 * (10 + 512) + 4 * 10 + 4 * 4
    assert est.peak.persistent["optimizer state"] == expected


def test_cuda_overheads_are_stated_apart_and_configurable() -> None:
    cpu = tfp.memory(MLP(), "8,256")
    cuda = tfp.memory(MLP(), "8,256", device="cuda", overhead={"cuda_context": "300MiB"})
    assert cpu.overheads == {} and cpu.total == cpu.peak.peak_bytes
    assert cuda.peak.peak_bytes == cpu.peak.peak_bytes  # the tensors do not change
    assert cuda.overheads["cuda_context"] == 300 * 2**20
    assert cuda.overheads["cublas_workspace"] == 8 * 4096 * 2**10  # CUBLAS_WORKSPACE_CONFIG=:4096:8
    assert cuda.total == cuda.peak.peak_bytes + sum(cuda.overheads.values())
    assert cuda.provision == -(-cuda.total * 10 // 8)  # total / 0.8, rounded up
    gone = tfp.memory(MLP(), "8,256", device="cuda", overhead={"cuda_context": 0})
    assert "cuda_context" not in gone.overheads


LLAMA_TINY = str(Path(__file__).parents[1] / "configs" / "llama-gqa-tiny")


def test_checkpointing_with_autocast_frees_all_but_the_model_states_before_the_optimizer() -> None:
    # A leak once found: with checkpointing and autocast, grad hooks hung on a checkpoint's
    # recomputation kept its graph (its saved tensors, the blocks' inputs) alive into the optimizer.
    pytest.importorskip("transformers")
    from torch_footprint.analysis.memory import replay
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.settings import Training, Workload

    trace, _ = trace_step(Workload(LLAMA_TINY, {"input_ids": "2,32:int64"}, precision="bf16-mixed"),
                          Training(train=True, optimizer="adamw", checkpointing=True))
    timeline = replay(trace, keep_timeline=True).timeline
    first_opt = next(i for i, e in enumerate(trace.events) if e.phase == "optimizer")
    p = sum(t.numel for t in trace.params)
    # closed form: fp32 weights and their gradients, the rotary inverse frequencies (two buffers
    # of head_dim / 2 floats) and the 2 x 32 int64 token ids; nothing else survives the backward
    assert timeline[first_opt - 1][1] == 4 * p + 4 * p + 2 * 4 * 16 // 2 + 8 * 2 * 32


def test_checkpointing_with_autocast_matches_the_cpu_allocator() -> None:
    transformers = pytest.importorskip("transformers")
    from torch_footprint.measure.measured import allocator_peak, one_step
    from torch_footprint.trace.setups import enable_checkpointing
    from torch_footprint.trace.setups import optimizer as make_optimizer

    est = tfp.memory(LLAMA_TINY, {"input_ids": "2,32:int64"}, train=True, optimizer="adamw",
                     precision="bf16-mixed", checkpointing=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(LLAMA_TINY),
                                                          dtype=torch.float32).train()
    enable_checkpointing(model)
    opt = make_optimizer("adamw")(list(model.parameters()))
    ids = torch.zeros(2, 32, dtype=torch.int64)
    gc.collect()
    measured = allocator_peak(lambda: one_step(model, (), {"input_ids": ids}, opt, True, torch.bfloat16))
    assert est.peak.above_baseline == measured


def _allocator_steps(optimizer: str) -> tuple[int, int]:
    """The CPU allocator's peak above the start for the MLP's first training step and for its
    second (optimizer state from the first alive, gradients dropped by zero_grad before it)."""
    from torch_footprint.measure.measured import allocator_peak, one_step
    from torch_footprint.trace.setups import optimizer as make_optimizer

    torch.manual_seed(0)
    model, x = MLP(), torch.randn(32, 256)
    opt = make_optimizer(optimizer)(list(model.parameters()))
    gc.collect()
    first = allocator_peak(lambda: one_step(model, (x,), {}, opt, True))
    opt.zero_grad(set_to_none=True)
    gc.collect()
    return first, allocator_peak(lambda: one_step(model, (x,), {}, opt, True))


@pytest.mark.parametrize("optimizer", ["momentum", "adamw", "adagrad", "momentum-foreach", "adamw-foreach",
                                       "adamw-fused"])
def test_first_and_steady_steps_match_the_cpu_allocator(optimizer: str) -> None:
    est = tfp.memory(MLP(), "32,256", train=True, optimizer=optimizer)
    first, steady = _allocator_steps(optimizer)
    assert est.steady is not None
    # to the byte where the step's temporaries are all seen; foreach and fused Adam also make
    # a 0-dim tensor of their own for the step count (12 bytes the trace does not see)
    slack = 12 if optimizer in ("adamw-foreach", "adamw-fused") else 0
    assert first - slack <= est.peak.above_baseline <= first
    assert steady - slack <= est.steady.above_baseline <= steady
    # the steady step holds the optimizer state before it: that is in its baseline
    assert est.steady.baseline_bytes == est.peak.baseline_bytes + est.peak.persistent["optimizer state"] \
        or optimizer == "adagrad"  # whose state its constructor makes: alive before either step
    assert est.total == max(est.peak.peak_bytes, est.steady.peak_bytes)
    assert est.to_dict()["steady_peak"]["peak_bytes"] == est.steady.peak_bytes


def test_fit_provisions_the_larger_of_the_first_and_steady_steps() -> None:
    from torch_footprint.estimate.layouts.sharding import rank_peak, step_peak
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.settings import Training, Workload

    trace, _ = trace_step(Workload(MLP(), "4096,256"), Training(train=True, optimizer="adam"))
    first, steady = rank_peak(trace), rank_peak(trace, steady=True)
    # at this batch the peak is in the backward, where the steady step also holds Adam's two
    # moments (8 bytes per parameter) and a 4-byte step count per tensor
    assert first.phase == steady.phase == "backward"
    assert steady.peak_bytes == first.peak_bytes + 8 * P + 4 * TENSORS
    assert step_peak(trace).peak_bytes == steady.peak_bytes
    assert step_peak(trace, "zero1", 4).peak_bytes == rank_peak(trace, "zero1", 4, steady=True).peak_bytes


class _TransposedHead(nn.Module):
    """A linear layer fed a non-contiguous 3-D input (a batch-first LSTM's output, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.transpose(0, 1))


def test_linear_on_a_non_contiguous_input_adds_its_bias_in_place() -> None:
    # ATen's linear: matmul copies the 8x4x16 input contiguous (2048 B), mm writes the 32x32
    # output (4096 B), then output.add_(bias) in place: 6144 B at the peak, worked by hand
    model = _TransposedHead().eval()
    est = tfp.memory(model, "4,8,16")
    measured = _measured_peak(model, torch.randn(4, 8, 16), train=False)
    assert measured == 8 * 4 * 16 * 4 + 8 * 4 * 32 * 4
    assert est.peak.above_baseline == measured


def _llama_tiny(transformers: Any) -> torch.nn.Module:
    """The tiny grouped-query Llama, fp32, without its cache, from seed 0."""
    cfg = transformers.AutoConfig.from_pretrained(LLAMA_TINY)
    cfg.use_cache = False
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def test_a_transformers_module_object_skips_the_mask_a_real_run_skips() -> None:
    # positions 0..T-1 are never packed sequences: a real run builds no mask tensor
    transformers = pytest.importorskip("transformers")
    from torch_footprint.measure.measured import allocator_peak, one_step

    model = _llama_tiny(transformers).eval()
    est = tfp.memory(model, {"input_ids": "2,32:int64"})
    ids = torch.zeros(2, 32, dtype=torch.int64)
    gc.collect()
    measured = allocator_peak(lambda: one_step(model, (), {"input_ids": ids}, None, False))
    assert est.peak.above_baseline == measured


def test_cublas_workspace_follows_torchs_sizes() -> None:
    from torch_footprint.estimate.memory import cublas_workspace_bytes

    # CublasHandlePool.cpp: ":4096:8" on sm90, ":4096:2:16:8" elsewhere, else CUBLAS_WORKSPACE_CONFIG
    assert cublas_workspace_bytes((9, 0)) == 32 * 2**20
    assert cublas_workspace_bytes((8, 0)) == 2 * 4096 * 1024 + 8 * 16 * 1024
    assert cublas_workspace_bytes((9, 0), ":16:8") == 128 * 1024
    assert cublas_workspace_bytes((8, 6), "garbage") == 8320 * 1024


def test_grouped_query_attention_training_step_matches_the_cpu_allocator() -> None:
    # 4 query heads over 2 key/value heads: the CPU's flash kernel reads the shared heads in
    # place, forward and backward (no repeated copies of keys and values)
    transformers = pytest.importorskip("transformers")
    from torch_footprint.measure.measured import allocator_peak, one_step
    from torch_footprint.trace.setups import optimizer as make_optimizer

    model = _llama_tiny(transformers).train()
    est = tfp.memory(model, {"input_ids": "2,32:int64"}, train=True, optimizer="adamw")
    opt = make_optimizer("adamw")(list(model.parameters()))
    ids = torch.zeros(2, 32, dtype=torch.int64)
    gc.collect()
    measured = allocator_peak(lambda: one_step(model, (), {"input_ids": ids}, opt, True))
    assert est.peak.above_baseline == measured


def test_a_cuda_training_step_holds_a_second_cublas_workspace_for_the_backward_thread() -> None:
    # cuBLAS handles are per thread and workspaces per (handle, stream) in torch's
    # CublasHandlePool.cpp; autograd runs a CUDA backward on its own thread, so a training
    # step holds two: 2 x 4096 KiB x 8 = 64 MiB on an H100 (measured there: llama-tiny AdamW
    # 66.51 MiB = 2.05 traced + 64.00 + 0.46, benchmarks/results/memory-cuda-h100.txt)
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    train = tfp.memory(net, "8,16", train=True, optimizer="sgd", device="cuda")
    infer = tfp.memory(net, "8,16", device="cuda")
    assert train.overheads["cublas_workspace"] == 32 * 2**20
    assert train.overheads["cublas_workspace (backward thread)"] == 32 * 2**20
    assert "cublas_workspace (backward thread)" not in infer.overheads


class _PatchEmbed(nn.Module):
    """A ViT's patch embedding: a 16 x 16 stride-16 convolution, its output flattened and
    transposed to tokens (so its gradient arrives strided), then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 64, 16, 16)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.proj(x).flatten(2).transpose(1, 2))


def test_a_patch_convolutions_backward_holds_onednns_gemm_scratchpad() -> None:
    """On an AVX2 CPU oneDNN's jit kernel refuses a 16-wide kernel, and the weight gradient
    goes to its gemm kernel. At batch 4, 224 x 224 (196 positions, fewer than 256 per thread),
    by hand: a contiguous copy of the gradient 4 x 64 x 196 x 4 = 200,704 B; per thread the
    reduction buffer 4 x (64 x 3 x 16 x 16 x 4) = 786,432 B and the im2col buffer
    3 x 256 x 196 x 4 = 602,112 B; each of the two bookings padded by 128 B. Then the step's
    peak against the allocator's records."""
    from torch_footprint.trace.kernels import _conv_backward_scratch

    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        pytest.skip("oneDNN's kernel choice here is AVX2's; other CPUs take other kernels")
    threads = torch.get_num_threads()
    x = torch.empty(4, 3, 224, 224, device="meta")
    grad = torch.empty(4, 196, 64, device="meta").transpose(1, 2).unflatten(2, (14, 14))
    w = torch.empty(64, 3, 16, 16, device="meta")
    scratch = _conv_backward_scratch((grad, x, w, [64], [16, 16], [0, 0], [1, 1], False, [0, 0], 1,
                                      [False, True, True]))
    assert scratch == 200_704 + threads * 786_432 + 128 + threads * 602_112 + 128
    torch.manual_seed(0)
    model = _PatchEmbed().train()
    est = tfp.memory(model, "4,3,224,224", train=True, optimizer="sgd")
    assert est.peak.above_baseline == _measured_peak(model, torch.randn(4, 3, 224, 224), train=True)


def _conv_backward_high(conv: nn.Conv2d, x: torch.Tensor) -> tuple[int, tuple[Any, ...]]:
    """(the allocator's high point inside one real convolution backward, its aten args)."""
    from torch_footprint.measure.measured import peak_of_allocations

    y = conv(x)
    g = torch.randn_like(y)
    wrt = [t for t in (x, conv.weight, conv.bias) if t is not None and t.requires_grad]
    seen: list[tuple[Any, ...]] = []

    class Args(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten.convolution_backward.default:
                seen.append(args)
            return func(*args, **(kwargs or {}))

    with Args():
        torch.autograd.grad(y, wrt, g, retain_graph=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.autograd.grad(y, wrt, g)
    highs: list[int] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.name == "aten::convolution_backward":
            highs.append(peak_of_allocations(node.children))
        else:
            stack.extend(node.children)
    assert len(highs) == len(seen) == 1
    return highs[0], seen[0]


@pytest.mark.parametrize(("c", "k", "size", "kernel", "stride", "padding", "batch", "bias", "input_grad"), [
    (3, 64, 224, 7, 2, 3, 4, False, False), (64, 64, 56, 3, 1, 1, 4, False, True),
    (64, 128, 56, 3, 2, 1, 4, False, True), (64, 128, 56, 1, 2, 0, 4, False, True),
    (128, 128, 28, 3, 1, 1, 4, False, True), (128, 256, 28, 3, 2, 1, 4, False, True),
    (256, 256, 14, 3, 1, 1, 4, False, True), (512, 512, 7, 3, 1, 1, 4, False, True),
    (20, 36, 17, 3, 1, 1, 4, False, True), (16, 32, 32, 5, 1, 2, 2, True, True), (16, 32, 32, 3, 1, 0, 2, True, True),
    (24, 40, 20, 3, 2, 1, 3, True, True), (10, 12, 9, 3, 1, 1, 1, False, True),
])
def test_a_convolution_backward_holds_what_its_kernel_allocates(c: int, k: int, size: int, kernel: int, stride: int,
                                                                 padding: int, batch: int, bias: bool,
                                                                 input_grad: bool) -> None:
    """ResNet's convolutions, others with biases, channels not a multiple of 8 and 5 x 5
    kernels on oneDNN's jit_avx2 kernels, and a small single image on ATen's own kernel:
    inside each real backward the allocator's high point is the op's outputs plus what the
    trace charges as scratch (blocked copies and dense conversions; the im2col buffer), to
    the byte."""
    from torch_footprint.trace.kernels import _conv_backward_scratch

    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        pytest.skip("oneDNN's kernel choice here is AVX2's; other CPUs take other kernels")
    torch.manual_seed(0)
    conv = nn.Conv2d(c, k, kernel, stride, padding, bias=bias)
    high, args = _conv_backward_high(conv, torch.randn(batch, c, size, size, requires_grad=input_grad))
    x, w, mask = args[1], args[2], args[10]
    outputs = (x.numel() * 4 if mask[0] else 0) + w.numel() * 4 + (k * 4 if mask[2] else 0)
    assert outputs + _conv_backward_scratch(args) == high


def test_a_resnet18_training_step_matches_the_cpu_allocator_to_the_byte() -> None:
    torchvision = pytest.importorskip("torchvision")
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        pytest.skip("oneDNN's kernel choice here is AVX2's; other CPUs take other kernels")
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    measured = _measured_peak(model, torch.randn(2, 3, 224, 224), True)
    assert tfp.memory("resnet18", "2,3,224,224", train=True, optimizer="sgd").peak.above_baseline == measured
