"""Every verb leaves the model as it found it (attributes of every kind, parameters, buffers,
hooks, training flags, class, the global random generators), and the caller's inputs are used
as given. The expected state is a copy of the model that was never profiled (tests/fixtures/model_state.py
compares the two trees attribute by attribute, and their outputs on one input)."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_state import never_profiled, outputs_differ, rng_state, state_differences
from torch import nn

import torch_footprint as tfp


def run_every_verb(model: nn.Module, inputs: object) -> None:
    tfp.profile(model, inputs)
    tfp.memory(model, inputs)
    tfp.predict(model, "h100-sxm", inputs)


def same_rng(a: tuple, b: tuple) -> bool:
    return torch.equal(a[0], b[0]) and a[1] == b[1]


def assert_left_as_found(model: nn.Module, inputs: object, call) -> None:
    ref = never_profiled(model)
    before = rng_state()
    run_every_verb(model, inputs)
    assert same_rng(before, rng_state()), "the global random generators moved"
    assert state_differences(model, ref) == []
    assert outputs_differ(model, ref, call) is None


# --------------------------------------------------------------------------- a YOLO-like head, vendored

class DetectLike(nn.Module):
    """What Ultralytics' Detect does on its first call (and again when the input size
    changes): anchors and strides made from the feature maps, kept as attributes with the
    input shape, a Python tuple; the next call reuses them if the shape is the same."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 6, 1)
        self.stride = torch.tensor([8.0])
        self.shape = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        shape = x.shape
        if self.shape != shape:
            h, w = x.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h, dtype=x.dtype, device=x.device) + 0.5,
                                    torch.arange(w, dtype=x.dtype, device=x.device) + 0.5, indexing="ij")
            self.anchors = torch.stack((sx, sy), -1).view(-1, 2).transpose(0, 1)
            self.strides = torch.full((1, h * w), float(self.stride[0]), dtype=x.dtype, device=x.device)
            self.shape = shape
        box = y.flatten(2)[:, :2] + self.anchors
        return torch.cat((box * self.strides, y.flatten(2)[:, 2:].sigmoid()), 1)


class YoloLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.head = DetectLike()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@pytest.mark.parametrize("warm", [False, True], ids=["never-run", "run-before"])
def test_a_yolo_like_head_runs_after_every_verb(warm: bool) -> None:
    torch.manual_seed(0)
    model = YoloLike().eval()
    x = torch.randn(1, 3, 32, 32)
    if warm:  # the cache exists: it holds a 16x16 grid, the trace runs at 64x64
        with torch.no_grad():
            model(torch.randn(1, 3, 32, 32))
    assert_left_as_found(model, "1,3,64,64", lambda m: m(x))


# --------------------------------------------------------------------------- generated modules

BEHAVIOURS = ("tensor_cache", "shape_cache", "counter", "list_cache", "dict_cache", "new_buffer", "new_child",
              "new_hook", "freeze", "train_flag", "draws_random", "value_branch")
VERB_BEHAVIOURS = BEHAVIOURS  # every verb puts each module's own training flag back


class Cacher(nn.Module):
    """A block that changes itself on its first call in the ways ``behaviours`` name."""

    def __init__(self, width: int, behaviours: frozenset[str]) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.b = behaviours
        self.calls = 0
        self.seen: list[object] = []
        self.memo: dict[str, object] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.b
        y = self.lin(x)
        if "tensor_cache" in b and not hasattr(self, "cached"):
            self.cached = torch.ones_like(y[:1]) * 0.5
        if "tensor_cache" in b:
            y = y + self.cached
        if "shape_cache" in b and getattr(self, "last_shape", None) != tuple(x.shape):
            self.last_shape = tuple(x.shape)
            self.scale = torch.full(x.shape[1:], 2.0, dtype=x.dtype, device=x.device)
        if "shape_cache" in b:
            y = y * self.scale
        if "counter" in b:
            self.calls += 1
        if "list_cache" in b:
            self.seen.append(tuple(x.shape))
        if "dict_cache" in b:
            self.memo.setdefault("first", x.shape[0])
        if "new_buffer" in b and "made" not in self._buffers:
            self.register_buffer("made", torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device))
        if "new_child" in b and not hasattr(self, "extra"):
            self.extra = nn.Identity()
        if "new_hook" in b and not self._forward_hooks:
            self.register_forward_hook(lambda m, i, o: None)
        if "freeze" in b:
            self.lin.weight.requires_grad_(False)
        if "train_flag" in b:
            self.lin.train(not self.lin.training)
        if "draws_random" in b:
            y = y + 0 * torch.rand(1, device=y.device, dtype=y.dtype)
            random.random()
        if "value_branch" in b and bool((y > 1e9).any()):  # reads values: the trace falls back to real tensors
            y = y * 2
        return y


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(st.frozensets(st.sampled_from(VERB_BEHAVIOURS), max_size=5), min_size=1, max_size=3),
       warm=st.booleans())
def test_generated_modules_that_cache_are_left_as_found(blocks: list[frozenset[str]], warm: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*(Cacher(8, b) for b in blocks)).eval()
    x = torch.randn(2, 8)
    if warm:
        with torch.no_grad():
            model(torch.randn(3, 8))
    assert_left_as_found(model, "4,8", lambda m: m(x))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(st.frozensets(st.sampled_from(BEHAVIOURS), max_size=5), min_size=1, max_size=3),
       tensors=st.sampled_from(["auto", "meta", "fake", "real"]))
def test_trace_model_leaves_generated_modules_as_found(blocks: list[frozenset[str]], tensors: str) -> None:
    from torch_footprint.trace import trace_model

    torch.manual_seed(0)
    model = nn.Sequential(*(Cacher(8, b) for b in blocks))
    with torch.no_grad():
        model(torch.randn(3, 8))  # mixed training flags where a block flips its child's
    ref = never_profiled(model)
    before = rng_state()
    try:
        trace_model(model, lambda device: ((torch.randn(4, 8, device=device),), {}), tensors=tensors,
                    backward=True)
    except tfp.FootprintError:  # a forced kind may not run it (values read; a real cached tensor on meta)
        assert tensors in ("meta", "fake")
    assert same_rng(before, rng_state())
    assert state_differences(model, ref) == []


def test_parameters_buffers_and_grads_come_back_as_they_were() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    model[0].weight.grad = torch.ones_like(model[0].weight)
    model[2].bias.requires_grad_(False)
    model[1].train()  # mixed flags: the batch norm trains, the root does not
    model.training = False
    model[1].register_forward_pre_hook(lambda m, i: None)
    weights = {n: (p, p.clone()) for n, p in model.named_parameters()}
    ref = never_profiled(model)
    ref[0].weight.grad = torch.ones_like(ref[0].weight)  # deepcopy leaves a parameter's grad behind
    tfp.profile(model, "4,8", backward=True, train=True)
    tfp.memory(model, "4,8", train=True, optimizer="adamw")
    for n, p in model.named_parameters():
        assert p is weights[n][0] and torch.equal(p, weights[n][1])
    assert torch.equal(model[0].weight.grad, torch.ones(8, 8))
    assert state_differences(model, ref) == []  # the batch norm's own flag too, not the root's


# --------------------------------------------------------------------------- the caller's inputs

class KeepsByMask(nn.Module):
    """Drops the tokens its boolean mask marks False (as Lumina2 and Mochi keep text tokens):
    the work depends on the mask's values, so the trace runs real tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor, encoder_attention_mask: torch.Tensor) -> torch.Tensor:
        return self.proj(x[encoder_attention_mask])


def test_a_callers_boolean_mask_is_used_as_given() -> None:
    x = torch.randn(1, 10, 16)
    mask = torch.tensor([[True] * 6 + [False] * 4])
    p = tfp.profile(KeepsByMask(), {"x": x, "encoder_attention_mask": mask})
    assert p.macs == 6 * 16 * 32  # six tokens kept, each a 16 x 32 product
    assert any("the caller's values for x, encoder_attention_mask" in n for n in p.notes)


def test_a_made_mask_keeps_every_token_and_says_so() -> None:
    p = tfp.profile(KeepsByMask(), {"x": "1,10,16", "encoder_attention_mask": "1,10:bool"})
    assert p.macs == 10 * 16 * 32
    assert any("encoder_attention_mask all True (every position kept)" in n for n in p.notes)


class PadsByPyTorchMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor, src_key_padding_mask: torch.Tensor) -> torch.Tensor:
        return self.proj(x[~src_key_padding_mask])  # PyTorch's convention: True marks padding


def test_a_made_pytorch_padding_mask_pads_nothing() -> None:
    p = tfp.profile(PadsByPyTorchMask(), {"x": "1,10,16", "src_key_padding_mask": "1,10:bool"})
    assert p.macs == 10 * 16 * 32
    assert any("src_key_padding_mask all False (nothing masked out)" in n for n in p.notes)


class ReadsLengths(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.proj(x[:, : int(lengths.max())])


def test_made_lengths_are_the_full_length_also_for_positional_inputs() -> None:
    p = tfp.profile(ReadsLengths(), ["2,12,16", "2:int64"])
    assert p.macs == 2 * 12 * 16 * 8
    assert any("lengths 12 (the full length)" in n for n in p.notes)
    given = tfp.profile(ReadsLengths(), [torch.randn(2, 12, 16), torch.tensor([5, 3])])
    assert given.macs == 2 * 5 * 16 * 8


class WritesItsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x > 100).any()):
            return x
        x.mul_(2)  # in place, on the tensor it was given
        return self.proj(x)


def test_the_callers_tensor_is_not_written_into() -> None:
    x = torch.ones(2, 4)
    p = tfp.profile(WritesItsInput(), [x])
    assert torch.equal(x, torch.ones(2, 4))
    assert p.notes and "ran on real cpu tensors" in p.notes[0]


def test_a_callers_tensor_at_another_batch_repeats_its_rows() -> None:
    mask = torch.tensor([[True] * 6 + [False] * 4, [True] * 2 + [False] * 8])
    est = tfp.memory(KeepsByMask(), {"x": torch.randn(2, 10, 16), "encoder_attention_mask": mask}, batch=4)
    assert est.total > 0


def test_profile_with_a_dtype_leaves_the_module_in_its_own() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    ref = never_profiled(model)
    p = tfp.profile(model, "2,8", dtype="bf16")
    assert p.trace.params[0].dtype == "bfloat16"
    assert all(t.dtype == torch.float32 for t in model.state_dict().values())
    assert state_differences(model, ref) == []


def test_a_forward_that_draws_random_numbers_leaves_the_generators_as_they_were() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    before = rng_state()
    tfp.profile(model, "4,8", tensors="real", train=True)
    tfp.memory(model, "4,8", train=True)
    assert same_rng(before, rng_state())
