"""The fast meta outputs equal torch's own meta kernels: shapes, strides and dtypes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torch_footprint.trace.fastmeta import fast_meta

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


x4 = meta(2, 8, 5, 5)
x4_cl = x4.to(memory_format=torch.channels_last)
w8 = meta(8)
seq = meta(2, 3, 4, 16).transpose(1, 2)
CASES = [
    (aten.native_batch_norm.default, (x4, w8, w8, w8, w8, True, 0.1, 1e-5)),
    (aten.native_batch_norm.default, (x4_cl, w8, w8, w8, w8, False, 0.1, 1e-5)),
    (aten._native_batch_norm_legit_no_training.default, (x4_cl, w8, w8, w8, w8, 0.1, 1e-5)),
    (aten._native_batch_norm_legit_no_training.default,
     (meta(2, 8, 5, dtype=torch.bfloat16), meta(8, dtype=torch.bfloat16), None, w8, w8, 0.1, 1e-5)),
    (aten._native_batch_norm_legit.default, (x4, w8, w8, w8, w8, True, 0.1, 1e-5)),
    (aten.native_layer_norm.default, (seq, [16], meta(16), None, 1e-5)),
    (aten.native_layer_norm.default, (meta(2, 3, 16, dtype=torch.bfloat16), [3, 16], None, None, 1e-5)),
    (aten.addmm.default, (meta(6), meta(4, 5), meta(6, 5).t())),
    (aten.addmm.default, (meta(4, 6), meta(4, 5), meta(5, 6))),
    (aten.gelu.default, (meta(3, 4).t(),)),
    (aten.gelu.default, (x4_cl,)),
    (aten.add.Tensor, (x4, x4)),
    (aten.add.Tensor, (x4_cl, x4_cl)),
    (aten.mul.Tensor, (meta(4, 4, dtype=torch.bfloat16), 0.5)),
    (aten.sigmoid.default, (seq,)),
    (aten.silu_.default, (meta(3, 3),)),
    (aten.relu_.default, (x4_cl,)),
    (aten.add_.Tensor, (meta(3, 3), meta(3, 3))),
    (aten.pow.Tensor_Scalar, (meta(2, 5), 2)),
    (aten.rsqrt.default, (meta(2, 5, dtype=torch.float16),)),
    (aten.hardsigmoid.default, (meta(2, 5),)),
]


@pytest.mark.parametrize(("func", "args"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_fast_output_matches_torch(func, args) -> None:
    fast = fast_meta(func, args)
    assert fast is not None
    mine = fast(*args)
    ref = func(*args)
    mine = mine if isinstance(mine, tuple) else (mine,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert [(t.shape, t.stride(), t.dtype) for t in mine] == [(t.shape, t.stride(), t.dtype) for t in ref]
    if func._schema.name.endswith("_"):
        assert mine[0] is args[0]


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (aten.add.Tensor, (meta(4, 3).t(), meta(1, 4))),  # broadcasting a strided operand: torch decides
        (aten.add.Tensor, (meta(3, 3), meta(3, 3, dtype=torch.float16))),  # promotion
        (aten.add.Tensor, (meta(3, 3, dtype=torch.int64), 1)),  # integers
        (aten.eq.Tensor, (meta(3, 3), meta(3, 3))),  # bool result
        (aten.addmm.default, (meta(6), meta(4, 5), meta(4, 6))),  # bad shapes: let torch raise
        (aten.add_.Tensor, (meta(1, 3), meta(3, 3))),  # an in-place result that would grow: torch raises
        (aten.add.Tensor, (torch.empty(3, 3), torch.empty(3, 3))),  # not meta
    ],
)
def test_anything_else_goes_to_torch(func, args) -> None:
    assert fast_meta(func, args) is None


BROADCAST_CASES = [
    (aten.mul.Tensor, (meta(2, 5, 8), meta(2, 5, 1))),
    (aten.add.Tensor, (meta(4, 1), meta(1, 6))),
    (aten.mul.Tensor, (meta(8), meta(3, 8, dtype=torch.float32))),
    (aten.mul_.Tensor, (meta(2, 5, 8), meta(5, 1))),
    (aten._to_copy.default, (meta(4, 6).t(),), {"dtype": torch.bfloat16}),
    (aten._to_copy.default, (x4_cl,), {"dtype": torch.float16}),
    (aten.zeros_like.default, (x4_cl,), {"memory_format": torch.preserve_format}),
    (aten.mm.default, (meta(4, 5), meta(6, 5).t())),
]


@pytest.mark.parametrize("case", BROADCAST_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(BROADCAST_CASES)])
@pytest.mark.parametrize("fake", [False, True], ids=["meta", "fake"])
def test_fast_output_matches_torch_on_meta_and_fake_tensors(case, fake: bool) -> None:
    """Broadcasting, casts, zeros_like and mm on meta tensors, and every case on fake CPU
    tensors, against FakeTensorMode's own outputs: shapes, strides, dtypes, devices."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    func, args = case[0], case[1]
    kwargs = case[2] if len(case) > 2 else {}
    if not fake:
        fast = fast_meta(func, args, kwargs)
        assert fast is not None
        mine, ref = fast(*args, **kwargs), func(*args, **kwargs)
        assert (mine.shape, mine.stride(), mine.dtype) == (ref.shape, ref.stride(), ref.dtype)
        return
    with FakeTensorMode() as mode:
        fargs = tuple(torch.empty_strided(a.shape, a.stride(), dtype=a.dtype) if isinstance(a, torch.Tensor) else a
                      for a in args)
        fast = fast_meta(func, fargs, kwargs)
        assert fast is not None
        mine = fast(*fargs, **kwargs)
        ref = func(*fargs, **kwargs)
    assert isinstance(mine, FakeTensor) and mine.fake_mode is mode
    assert (mine.shape, mine.stride(), mine.dtype, mine.device) == (ref.shape, ref.stride(), ref.dtype, ref.device)
    if func._schema.name.endswith("_"):
        assert mine is fargs[0]


def test_fake_views_share_the_inputs_storage() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(8, 16)
        for func, args in [(aten.t.default, (x,)), (aten.view.default, (x, [4, 32])),
                           (aten._unsafe_view.default, (x, [16, 8])), (aten.transpose.int, (x, 0, 1)),
                           (aten.slice.Tensor, (x, 1, 2, 10)), (aten.expand.default, (x[:, :1], [8, 5])),
                           (aten.unsqueeze.default, (x, 1)), (aten.permute.default, (x, [1, 0])),
                           (aten.select.int, (x, 0, 3)), (aten.squeeze.dim, (x[:1], 0))]:
            fast = fast_meta(func, args)
            assert fast is not None
            mine, ref = fast(*args), func(*args)
            assert (mine.shape, mine.stride(), mine.storage_offset(), mine.device) == (
                ref.shape, ref.stride(), ref.storage_offset(), ref.device), func
            assert mine.untyped_storage()._cdata == x.untyped_storage()._cdata == ref.untyped_storage()._cdata


def test_constants_fake_tensors_carry_go_to_torch() -> None:
    """An optimizer's step count is a fake tensor with a value FakeTensorMode keeps up to
    date (``step += 1``, then ``step.item()``): torch's path, or the value goes stale."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        step = torch.tensor(0.0)
        assert fast_meta(aten.add_.Tensor, (step, 1)) is None


def _record(trace) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    events = [(e.op, e.module, e.phase, [n for _, n in e.allocs], e.out_shapes, e.out_dtypes, e.flops,
               e.bytes_read, e.bytes_written, e.scratch) for e in trace.events]
    return events, [(f.after, f.nbytes) for f in trace.frees]


@pytest.mark.parametrize("which", ["llama-bf16-mixed", "lstm"])
def test_a_fake_trace_is_the_same_without_the_fast_path(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole traced training step on fake tensors (a Llama under autocast; an LSTM language
    model), with the fake fast path and without it: the same operators, outputs, bytes,
    allocations and frees, event by event."""
    from pathlib import Path

    import torch_footprint.trace.recorder as recorder
    from torch_footprint.estimate.workload import trace_step
    from torch_footprint.settings import Training, Workload
    from torch_footprint.trace import fastmeta

    if which == "lstm":
        model: Any = nn.Sequential(nn.Embedding(64, 16), nn.LSTM(16, 24, num_layers=2))
        inputs: Any = "12,3:int64"
        precision = "fp32"
    else:
        model = str(Path(__file__).parents[1] / "configs" / "llama-gqa-tiny")
        inputs = {"input_ids": "2,16:int64"}
        precision = "bf16-mixed"
    original = recorder.fast_meta
    taken = []

    def counted(func: Any, args: Any, kwargs: Any = None) -> Any:
        fn = original(func, args, kwargs)
        if fn is not None and func not in fastmeta.CPU_RULE and fastmeta._kind(args) != "meta":
            taken.append(func)
        return fn

    def meta_only(func: Any, args: Any, kwargs: Any = None) -> Any:
        if func not in fastmeta.CPU_RULE and fastmeta._kind(args) != "meta":
            return None
        return original(func, args, kwargs)

    monkeypatch.setattr(recorder, "fast_meta", counted)
    step = (Workload(model, inputs, precision=precision), Training(train=True, optimizer="adamw"))
    fast, _ = trace_step(*step)
    monkeypatch.setattr(recorder, "fast_meta", meta_only)
    slow, _ = trace_step(*step)
    assert len(taken) > 50  # the fast path ran
    assert _record(fast) == _record(slow)


def test_broadcasting_outputs_match_torch_for_any_shapes() -> None:
    """Contiguous operands of any shapes that broadcast: the same shape and strides as
    torch's own meta kernel (TensorIterator's layout), over generated shapes."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    dims = st.lists(st.integers(1, 5), min_size=1, max_size=4)

    @settings(max_examples=300, deadline=None)
    @given(dims, st.data())
    def check(base: list[int], data: st.DataObject) -> None:
        def operand() -> list[int]:
            k = data.draw(st.integers(1, len(base)))
            return [d if data.draw(st.booleans()) else 1 for d in base[len(base) - k:]]

        a, b = meta(*operand()), meta(*operand())
        for func in (aten.add.Tensor, aten.mul.Tensor, aten.maximum.default):
            fast = fast_meta(func, (a, b))
            assert fast is not None
            mine, ref = fast(a, b), func(a, b)
            assert (mine.shape, mine.stride()) == (ref.shape, ref.stride())

    check()
