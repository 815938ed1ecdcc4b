"""A repeated block traced once: the trace that replays equal calls is the trace of every call.

Each case traces a model twice, every call in full (``reuse=False``) and replaying (the
default), and compares every record and every figure derived from them
(tests/fixtures/reuse_check.py). The number of calls replayed is worked out from the model's
own structure (its config's layer counts and layer patterns), not read from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from reuse_check import assert_same, traced_both
from torch import nn

import torch_footprint as tfp
from torch_footprint.sources import prepare

CONFIGS = Path(tfp.__file__).parent / "sources" / "configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _layers(name: str) -> int:
    c = _config(name)
    return c.get("num_hidden_layers") or c.get("n_layer")


def _hf(name: str, tokens: int = 64):
    work = prepare("hf:" + name.replace("--", "/"), f"1,{tokens}:int64")
    work.model.eval()
    return work


def _expect_one_block(name: str) -> tuple[int, int]:
    """Every layer the same: the first recorded, the others replayed."""
    return 1, _layers(name) - 1


def _expect_gemma2(name: str) -> tuple[int, int]:
    # layers alternate sliding-window and global attention (config "layer_types" or every second
    # one): two kinds, each recorded once
    return 2, _layers(name) - 2


def _expect_deepseek(name: str) -> tuple[int, int]:
    # the first `first_k_dense_replace` layers have a dense MLP, the rest a mixture of experts:
    # two structures, each recorded once; a dense layer alone of its kind is not recorded at all
    c = _config(name)
    dense, n = c["first_k_dense_replace"], c["num_hidden_layers"]
    assert 0 < dense < n - 1
    return (dense > 1) + 1, (dense - 1) + (n - dense - 1)


CASES = {
    "meta-llama--Llama-3.1-8B": _expect_one_block,
    "meta-llama--Llama-2-7b-hf": _expect_one_block,
    "mistralai--Mistral-7B-v0.1": _expect_one_block,
    "mistralai--Mixtral-8x7B-v0.1": _expect_one_block,
    "Qwen--Qwen2-7B": _expect_one_block,
    "gpt2": _expect_one_block,
    "bert-base-uncased": _expect_one_block,
    "tiiuae--falcon-7b": _expect_one_block,
    "google--gemma-2-9b": _expect_gemma2,
    # 5 sliding-window layers, then a global one: two kinds
    "google--gemma-3-1b-pt": _expect_gemma2,
    "deepseek-ai--DeepSeek-V2-Lite": _expect_deepseek,
    "deepseek-ai--DeepSeek-V3": _expect_deepseek,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shipped_transformers_replay_and_match(name: str) -> None:
    work = _hf(name)
    with work.built.trace_context():
        fast, full, stats = traced_both(work.model, work.make_inputs())
    assert_same(fast, full)
    assert (stats.recorded, stats.replayed) == CASES[name](name)


def test_torchvision_blocks_replay_where_equal() -> None:
    # resnet50's stages have 3, 4, 6 and 3 bottlenecks (of other widths from stage to stage); the
    # first of each has a downsample branch, the second is recorded and the rest replay it.
    # vit_b_16's 12 encoder blocks are equal: 11 replayed
    for name, replayed in (("resnet50", (3 - 2) + (4 - 2) + (6 - 2) + (3 - 2)), ("vit_b_16", 11)):
        work = prepare(name)
        work.model.eval()
        fast, full, stats = traced_both(work.model, work.make_inputs())
        assert_same(fast, full)
        assert stats.replayed == replayed, name


# --------------------------------------------------------------------------- blocks alike, but not equal

class Block(nn.Module):
    def __init__(self, idx: int, branch: bool = False) -> None:
        super().__init__()
        self.layer_idx = idx
        self.branch = branch
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.branch and self.layer_idx % 2 == 1:  # an extra matmul on odd layers
            x = x @ self.fc.weight
        return x + self.fc(self.norm(x))


class Stack(nn.Module):
    def __init__(self, n: int = 6, **kw: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(i, **kw) for i in range(n))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _inputs(device: str):
    return (torch.empty(4, 8, device=device),), {}


def _run(model: nn.Module):
    fast, full, stats = traced_both(model.to("meta").eval(), _inputs)
    assert_same(fast, full)
    return fast, stats


def test_layer_idx_kept_but_unread_replays() -> None:
    _, stats = _run(Stack())
    assert (stats.recorded, stats.replayed) == (1, 5)


def test_layer_idx_branch_is_told_apart() -> None:
    trace, stats = _run(Stack(branch=True))
    # layer_idx is read: each recording differs from the last, up to three, then calls run in full
    assert stats.replayed == 0
    extra = [e for e in trace.events if e.module.startswith("layers.") and e.module.count(".") == 1
             and e.op == "aten.mm.default"]
    assert [e.module for e in extra] == ["layers.1", "layers.3", "layers.5"]


def test_hook_on_one_instance_runs_that_instance() -> None:
    model = Stack()
    model.layers[3].register_forward_hook(lambda m, i, o: o * 2)
    trace, stats = _run(model)
    assert stats.replayed == 4  # layers 1, 2, 4, 5; layer 3 has a hook, layer 0 was recorded
    assert any(e.op == "aten.mul.Tensor" and e.module == "" for e in trace.events)


class Cast(Stack):
    """Each layer gets its input in its own weights' dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x.to(layer.fc.weight.dtype))
        return self.head(x.float())


def test_block_in_another_dtype_is_told_apart() -> None:
    model = Cast()
    for i in (2, 3, 4):
        model.layers[i].double()
    trace, stats = _run(model)
    # layer 0 recorded, 1 and 5 replay it; layer 2 recorded (float64), 3 and 4 replay it
    assert (stats.recorded, stats.replayed) == (2, 4)
    assert {e.out_dtypes[0] for e in trace.events if e.module == "layers.3.fc"} == {"float64"}


def test_block_with_other_requires_grad_is_told_apart() -> None:
    model = Stack()
    model.layers[2].requires_grad_(False)
    _, stats = _run(model)
    assert (stats.recorded, stats.replayed) == (2, 4)


class Caching(nn.Module):
    """Keeps its last output in an attribute: a replay could not, so none happens."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.last: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = self.fc(x)
        return x + self.last


class Appending(nn.Module):
    """Puts a tensor it made into a list it shares: a storage that outlives the call."""

    def __init__(self, kept: list) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.kept = kept

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        self.kept.append(y * 2)
        return y


class Views(nn.Module):
    """Returns its input itself and a view of it, beside a new tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor):
        return x, x[1:], self.fc(x)


class Seq(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            out = layer(x)
            x = out[2] + out[1].sum() if isinstance(out, tuple) else out
        return x


def test_block_that_writes_an_attribute_is_not_replayed() -> None:
    _, stats = _run(Seq([Caching() for _ in range(4)]))
    assert stats.replayed == 0


def test_storage_kept_outside_the_block_is_not_replayed() -> None:
    kept: list = []
    _, stats = _run(Seq([Appending(kept) for _ in range(4)]))
    assert stats.replayed == 0


def test_outputs_that_are_inputs_or_their_views_replay() -> None:
    _, stats = _run(Seq([Views() for _ in range(5)]))
    assert (stats.recorded, stats.replayed) == (1, 4)


def test_training_step_replays_the_middle_layers() -> None:
    model = Stack().to("meta")
    model.train()
    fast, full, stats = traced_both(model, _inputs, backward=True)
    assert_same(fast, full)
    # layer 0's input needs no gradient (the model's input): a call of its own; layer 1 is recorded,
    # layers 2 to 4 replay it, and layer 5, the last of its kind, runs in full to record the
    # backward the replays play back (blocks' backwards run last layer first)
    assert (stats.recorded, stats.replayed, stats.retraced) == (2, 3, False)


def test_no_reuse_setting_reaches_the_trace() -> None:
    a = tfp.profile(Stack().to("meta"), "4,8")
    b = tfp.profile(Stack().to("meta"), "4,8", reuse=False)
    assert a.trace.to_dict() == b.trace.to_dict()


def test_forward_of_its_own_on_one_submodule_is_told_apart() -> None:
    model = Stack()
    fc = model.layers[2].fc
    plain = fc.forward
    fc.forward = lambda x: plain(x) * 3  # as a library's hook replaces one module's forward
    trace, stats = _run(model)
    assert (stats.recorded, stats.replayed) == (2, 4)
    assert any(e.op == "aten.mul.Tensor" and e.module == "layers.2.fc" for e in trace.events)


# --------------------------------------------------------------------------- training steps

@pytest.mark.parametrize("setup", ["adamw", "checkpointing", "selective", "bf16-mixed", "bf16-mixed+checkpointing",
                                   "bf16-mixed+selective"])
def test_training_steps_are_the_same_with_reuse_on(setup: str) -> None:
    from torch_footprint.trace import StepOptions, setups

    work = prepare(str(Path(__file__).parents[1] / "configs" / "llama-gqa-tiny"), "1,16:int64")
    model = work.model
    model.train()
    undo = lambda: None  # noqa: E731
    autocast = None
    if "checkpointing" in setup or "selective" in setup:
        _, undo = setups.enable_checkpointing(model, selective="selective" in setup)
    if "bf16-mixed" in setup:
        _, autocast = setups.precision("bf16-mixed")
    step = StepOptions(setups.optimizer("adamw"), autocast)
    try:
        with work.built.trace_context():
            fast, full, stats = traced_both(model, work.make_inputs(), backward=True, step=step)
    finally:
        undo()
    assert_same(fast, full)
    # 3 layers: the first recorded, the second replayed, the third (the last) traced in full for the
    # backward; a checkpointed layer (the model's own switch) is replayed whole, its recomputation
    # with its backward, and a mixed-precision step's fake tensors as the meta ones
    assert (stats.recorded, stats.replayed, stats.retraced) == (1, 1, False)


class Outside(nn.Module):
    """Calls a module the model holds elsewhere (not one of its own submodules)."""

    def __init__(self, shared: list) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.shared = shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared[0](self.fc(x))


class WithShared(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        shared = [inner]  # one list for every layer: the same attribute value in each
        self.layers = nn.ModuleList(Outside(shared) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("inner", [nn.Identity, nn.ReLU])
def test_block_calling_a_module_outside_itself_is_not_replayed(inner: type) -> None:
    _, stats = _run(WithShared(inner()))
    assert stats.replayed == 0


# --------------------------------------------------------------------------- hybrids, from small configs

def _tiny(kind: str):
    import transformers

    if kind == "jamba":
        # 8 layers: attention at 2 and 6 (period 4, offset 2), the others Mamba; a mixture of experts
        # on odd layers (period 2, offset 1). Kinds: Mamba+MLP (0, 4), Mamba+MoE (1, 3, 5, 7),
        # attention+MLP (2, 6): three recorded, five replayed
        cfg = transformers.JambaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
            num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
            expert_layer_offset=1, attn_layer_period=4, attn_layer_offset=2, mamba_d_state=8, mamba_d_conv=4,
            mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False, use_cache=False)
        expect = (3, 5)
    else:
        # 8 layers, full attention every 4th (3 and 7), linear attention in the others: two kinds
        cfg = transformers.Qwen3NextConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2,
            linear_key_head_dim=16, linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32, full_attention_interval=4,
            use_cache=False)
        expect = (2, 6)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model, expect


@pytest.mark.parametrize("kind", ["jamba", "qwen3_next"])
def test_hybrids_replay_each_kind_of_layer(kind: str) -> None:
    model, expect = _tiny(kind)
    work = prepare(model, "1,8:int64")
    work.model.eval()
    with work.built.trace_context():
        fast, full, stats = traced_both(work.model, work.make_inputs())
    assert_same(fast, full)
    assert (stats.recorded, stats.replayed) == expect


# --------------------------------------------------------------------------- training steps: alike but not equal

def _train(model: nn.Module, grads_kept: bool = False):
    from torch_footprint.trace import StepOptions, setups

    model = model.to("meta").train()
    fast, full, stats = traced_both(model, _inputs, backward=True,
                                    step=StepOptions(setups.optimizer("adamw"), grads_kept=grads_kept))
    assert_same(fast, full)
    return stats


class Sharing(nn.Module):
    """Every layer calls one Linear of the model's: its gradient accumulates across the layers."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.Linear(8, 8)
        self.layers = nn.ModuleList(nn.Sequential(shared, nn.ReLU()) for _ in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Skip(nn.Module):
    """Every layer also reads the first layer's output: its gradient sums every layer's part."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.layers = nn.ModuleList(Pair() for _ in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = x = self.first(x)
        for layer in self.layers:
            x = layer(x, h0)
        return x


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * h0


class Double(torch.autograd.Function):
    """A custom autograd function: its context may hold anything."""

    @staticmethod
    def forward(ctx, x):  # noqa: ANN001, ANN205
        ctx.x = x
        return x * 2

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        return g * 2


class Custom(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Double.apply(self.fc(x))


def test_training_layer_idx_branch_is_told_apart() -> None:
    stats = _train(Stack(branch=True))
    assert stats.replayed == 0  # layer_idx is read and differs in every layer


def test_training_frozen_layer_is_told_apart() -> None:
    model = Stack()
    model.layers[3].requires_grad_(False)
    stats = _train(model)
    assert not stats.retraced


def test_training_grads_kept_accumulate_as_in_full() -> None:
    stats = _train(Stack(), grads_kept=True)
    assert (stats.replayed, stats.retraced) == (3, False)


def test_training_shared_parameter_is_traced_again_in_full() -> None:
    # the shared Linear's gradient is stolen by the last layer's backward and accumulated by the
    # others': the replays cannot be proven equal, and the step is traced again without them
    stats = _train(Sharing())
    assert stats.retraced


def test_training_input_shared_by_every_layer_is_traced_again_in_full() -> None:
    stats = _train(Skip())
    assert stats.retraced


def test_training_custom_autograd_function_is_not_replayed() -> None:
    stats = _train(_custom_stack())
    assert stats.replayed == 0


def _custom_stack() -> nn.Module:
    model = Stack()
    model.layers = nn.ModuleList(Custom(i) for i in range(6))
    return model


def test_training_checkpointed_blocks_trace_in_full() -> None:
    from torch_footprint.trace import setups

    model = Stack()
    _, undo = setups.enable_checkpointing(model)  # each layer wrapped in torch's checkpoint
    try:
        stats = _train(model)
    finally:
        undo()
    assert stats.replayed == 0


class Inner(Block):
    """Checkpoints its own Linear inside its forward, as a model's code may."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return x + checkpoint(self.fc, self.norm(x), use_reentrant=False)


def test_training_checkpoint_inside_a_block_is_not_replayed() -> None:
    model = Stack()
    model.layers = nn.ModuleList(Inner(i) for i in range(6))
    stats = _train(model)
    assert stats.replayed == 0


class Unit(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(x))


class Residual(nn.Module):
    """A block of sub-blocks, with a residual add around them or not (as EfficientNet's last block
    of a stage has one and the next stage's first has none)."""

    def __init__(self, res: bool) -> None:
        super().__init__()
        self.res = res
        self.block = nn.Sequential(Unit(), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return y + x if self.res else y


def test_training_sub_blocks_in_other_contexts_are_not_replayed() -> None:
    # each Unit is alone in its own Sequential: the units of other blocks are alike, but where the
    # block adds its input back, the input's gradient is summed inside the unit's backward
    model = Stack()
    model.layers = nn.ModuleList([Residual(True), Residual(True), Residual(True), Residual(False), Residual(True)])
    _train(model)  # the same trace as without reuse (replayed, or traced again in full)


# --------------------------------------------------------------------------- checkpointed and mixed-precision steps

def _six_layers(tmp_path: Path, **changes: object):
    """llama-gqa-tiny with six layers (and ``changes`` to its config), built on meta, train mode."""
    config = json.loads((Path(__file__).parents[1] / "configs" / "llama-gqa-tiny" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 6, **changes}))
    work = prepare(str(tmp_path), "1,16:int64")
    work.model.train()
    return work


def _step_both(work, ac: str | None, mixed: bool, before=None):
    from torch_footprint.trace import StepOptions, setups

    undo = lambda: None  # noqa: E731
    if ac is not None:
        _, undo = setups.enable_checkpointing(work.model, selective=ac == "selective")
    if before is not None:
        before(work.model)
    step = StepOptions(setups.optimizer("adamw"), setups.precision("bf16-mixed" if mixed else "fp32")[1])
    try:
        with work.built.trace_context():
            fast, full, stats = traced_both(work.model, work.make_inputs(), backward=True, step=step)
    finally:
        undo()
    assert_same(fast, full)
    return stats


@pytest.mark.parametrize("ac", ["full", "selective"])
def test_one_layer_not_checkpointed_is_told_apart(tmp_path: Path, ac: str) -> None:
    # the fourth layer's own switch off (as checkpointing every other layer leaves some): it looks
    # like the others (the same class, parameters and inputs) but saves its activations; it is
    # recorded apart, and the first layer's replays are the second, third and fifth (the sixth, the
    # last of the first layer's kind, is traced in full for the backward)
    def off(model) -> None:
        model.model.layers[3].gradient_checkpointing = False

    stats = _step_both(_six_layers(tmp_path), ac, mixed=True, before=off)
    assert (stats.recorded, stats.replayed, stats.retraced) == (2, 3, False)


def test_mixed_precision_frozen_layer_is_told_apart(tmp_path: Path) -> None:
    # a frozen layer's weights need no gradient: autocast does not cache their casts and the
    # backward makes no weight gradients; a kind of its own, it is recorded (and replayed by
    # none); layers 1, 2 and 4 replay layer 0, layer 5 is the last of its kind
    def freeze(model) -> None:
        model.model.layers[3].requires_grad_(False)

    for ac in (None, "full"):
        (tmp_path / str(ac)).mkdir()
        stats = _step_both(_six_layers(tmp_path / str(ac)), ac, mixed=True, before=freeze)
        assert (stats.recorded, stats.replayed, stats.retraced) == (2, 3, False)


def test_mixed_precision_attention_window_is_told_apart(tmp_path: Path) -> None:
    # Mistral-style sliding window on every layer but the config's layer types: alternating sliding and
    # full attention (as Gemma-2's), checkpointed, in bf16-mixed: two kinds of layers, each recorded
    # once, its last traced in full: 6 - 2 - 2 replayed
    work = _six_layers(tmp_path, model_type="qwen2", architectures=["Qwen2ForCausalLM"], sliding_window=8,
                       use_sliding_window=True, max_window_layers=0,
                       layer_types=["sliding_attention", "full_attention"] * 3)
    stats = _step_both(work, "full", mixed=True)
    assert (stats.recorded, stats.replayed, stats.retraced) == (2, 2, False)


def test_mixed_precision_inference_replays() -> None:
    # a forward under autocast on fake tensors, no gradients: 3 layers, the first recorded, the
    # other two replayed
    from torch_footprint.trace import StepOptions, setups

    work = prepare(str(Path(__file__).parents[1] / "configs" / "llama-gqa-tiny"), "1,16:int64")
    work.model.eval()
    step = StepOptions(autocast=setups.precision("bf16-mixed")[1])
    with work.built.trace_context():
        fast, full, stats = traced_both(work.model, work.make_inputs(), step=step)
    assert_same(fast, full)
    assert (stats.recorded, stats.replayed, stats.retraced) == (1, 2, False)
