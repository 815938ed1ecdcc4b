"""Recurrent layers on a CPU, against the CPU allocator's own records: a float32 LSTM runs on
oneDNN, and the trace counts what oneDNN allocates inside its calls; GRU, plain RNN and LSTM
with projections run ATen's own CPU layers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.measure.measured import allocator_peak, one_step, peak_of_allocations
from torch_footprint.trace import onednn_rnn

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")

SHAPES = [(3, 17, 50, 100), (1, 10, 64, 32), (4, 33, 256, 256)]  # (batch, steps, input, hidden)


def test_workspace_worked_by_hand() -> None:
    """(B, T, D, H) = (8, 64, 128, 256) (batch, steps, input width, hidden), oneDNN's rules
    (rnn_utils): leading dimensions good_ld(1024) = 1040, good_ld(256) = 272; each buffer from the next 4 KiB page.
    gates 64*8*1040*4 = 2,129,920; h 64*8*272*4 = 557,056 (ends at 2,686,976, on a page);
    states 2*65*8*272*4 = 1,131,520 (ends 3,818,496, next page 3,821,568); c states
    2*65*8*256*4 = 1,064,960 (4,886,528); two diff states as the states (ending 6,018,048 ->
    6,021,120 and 7,152,640 -> 7,155,712); diff c states 1,064,960: 8,220,672."""
    assert onednn_rnn.workspace_bytes(8, 64, 128, 256) == 8_220_672


@pytest.mark.parametrize("shape", SHAPES)
def test_workspace_is_the_kernels_own(shape: tuple[int, int, int, int]) -> None:
    B, T, D, H = shape
    lstm = nn.LSTM(D, H)
    w = lstm._flat_weights
    h = torch.zeros(B, H)
    out = torch.ops.aten.mkldnn_rnn_layer(torch.randn(T, B, D), *w, h, h, False, [], 2, H, 1, True, False, False, True)
    assert out[3].numel() == onednn_rnn.workspace_bytes(B, T, D, H)


class _Calls(torch.utils._python_dispatch.TorchDispatchMode):
    """The args and outputs of each oneDNN LSTM call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func.__name__.startswith("mkldnn_rnn_layer"):
            self.calls.append((func.__name__.split(".")[0], args, out))
        return out


def _inside(prof: torch.profiler.profile) -> list[int]:
    """Per oneDNN LSTM call, in order: the high point of what it allocated inside itself."""
    peaks: list[int] = []

    def walk(node: object) -> None:
        for child in node.children:  # type: ignore[attr-defined]
            if child.name in ("aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"):
                peaks.append(peak_of_allocations(child.children))
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    return peaks


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("shape", SHAPES)
def test_scratch_inside_each_call_matches_the_allocator(shape: tuple[int, int, int, int], train: bool) -> None:
    """Inside each real call, the allocator's high point is its outputs plus the scratch the
    model counts (weights reordered, the summed bias, gradients in oneDNN's layout, the
    scratchpad), to the byte."""
    B, T, D, H = shape
    torch.manual_seed(0)
    lstm = nn.LSTM(D, H, batch_first=True).train(train)
    x = torch.randn(B, T, D)

    def run() -> None:
        if train:
            y = lstm(x)[0]
            y.backward(torch.ones_like(y))
        else:
            with torch.no_grad():
                lstm(x)

    with _Calls() as seen:
        run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    peaks = _inside(prof)
    assert len(peaks) == len(seen.calls) == (2 if train else 1)
    for (name, args, out), peak in zip(seen.calls, peaks):
        # the outputs as the trace holds them: one storage each, as the CPU kernel returns them
        outputs = sum(o.untyped_storage().nbytes() for o in out if isinstance(o, torch.Tensor))
        model = onednn_rnn.forward_scratch(args) if name == "mkldnn_rnn_layer" else onednn_rnn.backward_scratch(args)
        assert outputs + model == peak, name


class _LM(nn.Module):
    """A language model around one recurrent layer of ``cls`` (64 wide input, 512 tokens)."""

    def __init__(self, cls: type[nn.RNNBase], **rnn: object) -> None:
        super().__init__()
        self.batch_first = bool(rnn.get("batch_first"))
        self.embed = nn.Embedding(512, 64)
        self.rnn = cls(64, **rnn)  # type: ignore[arg-type]
        width = int(rnn.get("proj_size") or rnn["hidden_size"]) * (2 if rnn.get("bidirectional") else 1)  # type: ignore[call-overload]
        self.head = nn.Linear(width, 512)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(ids if self.batch_first else ids.t()))[0])


def _predicted_and_measured(cls: type[nn.RNNBase], rnn: dict[str, object], optimizer: str | None) -> tuple[int, int]:
    """footprint's step peak above the baseline, and the allocator's, for ``_LM`` on 4 x 20 tokens."""
    from torch_footprint.trace import setups as training

    torch.manual_seed(0)
    model = _LM(cls, **rnn).train(optimizer is not None)
    ids = torch.randint(0, 512, (4, 20))
    est = tfp.memory(model, {"ids": "4,20:int64"}, train=optimizer is not None, optimizer=optimizer)
    opt = training.optimizer(optimizer)(list(model.parameters())) if optimizer else None
    measured = allocator_peak(lambda: one_step(model, (), {"ids": ids}, opt, optimizer is not None))
    return est.peak.above_baseline, measured


@pytest.mark.parametrize("optimizer", [None, "sgd"], ids=["inference", "sgd"])
@pytest.mark.parametrize("lstm", [
    {"hidden_size": 96, "num_layers": 2, "batch_first": True, "bidirectional": True},
    {"hidden_size": 80, "num_layers": 3, "bias": False},
    {"hidden_size": 128, "num_layers": 2, "batch_first": True, "dropout": 0.3},
], ids=["bidirectional", "no-bias", "dropout"])
def test_lstm_step_matches_the_cpu_allocator(lstm: dict[str, object], optimizer: str | None) -> None:
    predicted, measured = _predicted_and_measured(nn.LSTM, lstm, optimizer)
    assert predicted == measured


def test_the_trace_takes_one_onednn_call_per_layer_and_direction() -> None:
    """A 2-layer bidirectional LSTM: four layer calls forward, four backward, and the MACs of
    T x B x 4H x (D + H) per call by hand (layer 2 reads both directions: D = 2H)."""
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.settings import Training, Workload

    T, B, D, H = 7, 3, 16, 24
    trace, _ = trace_step(Workload(nn.LSTM(D, H, num_layers=2, bidirectional=True), f"{T},{B},{D}", precision="fp32"),
                          Training(train=True, optimizer="sgd"))
    ops = [e.op for e in trace.events]
    assert ops.count("aten.mkldnn_rnn_layer.default") == 4
    assert ops.count("aten.mkldnn_rnn_layer_backward.default") == 4
    forward = sum(e.macs for e in trace.events if e.op == "aten.mkldnn_rnn_layer.default")
    assert forward == 2 * T * B * 4 * H * (D + H) + 2 * T * B * 4 * H * (2 * H + H)


@pytest.mark.parametrize("optimizer", [None, "sgd"], ids=["inference", "sgd"])
@pytest.mark.parametrize(("cls", "rnn"), [
    (nn.GRU, {"hidden_size": 96, "num_layers": 2, "batch_first": True}),
    (nn.GRU, {"hidden_size": 64, "bidirectional": True, "batch_first": True}),
    (nn.RNN, {"hidden_size": 96, "num_layers": 2, "batch_first": True}),
    (nn.LSTM, {"hidden_size": 64, "proj_size": 32, "batch_first": True}),
], ids=["gru", "gru-bidirectional", "rnn-tanh", "lstm-projections"])
def test_other_recurrent_layers_match_the_cpu_allocator(cls: type[nn.RNNBase], rnn: dict[str, object],
                                                        optimizer: str | None) -> None:
    """GRU, plain RNN and an LSTM with projections run ATen's own layers on a CPU, which project
    the whole sequence's input at once (FullLayer's CPU branch) and add each linear's bias in
    place: the step's peak to the byte."""
    predicted, measured = _predicted_and_measured(cls, rnn, optimizer)
    assert predicted == measured
