"""A remembered meta output is the output torch's own meta kernel gives: shape, stride, dtype, a
storage of its own (or the argument itself, in place); calls it cannot key, views and calls torch
rejects go to torch; and a traced zoo of models is the same with and without."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torch_footprint.sources import prepare
from torch_footprint.trace import metamemo, trace_model

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


x = meta(2, 16, 9, 9)
x_cl = x.to(memory_format=torch.channels_last)
CASES: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
    (aten.convolution.default, (x_cl, meta(8, 16, 3, 3), None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1), {}),
    (aten.convolution.default, (x, meta(16, 1, 3, 3), meta(16), [1, 1], [1, 1], [1, 1], False, [0, 0], 16), {}),
    (aten.mean.dim, (x_cl, [2, 3], True), {}),
    (aten.mean.dim, (x, [-1]), {"dtype": torch.float64}),
    (aten.max_pool2d_with_indices.default, (x_cl, [3, 3], [2, 2], [1, 1]), {}),
    (aten.roll.default, (x, [1, -2], [2, 3]), {}),
    (aten.linalg_vector_norm.default, (meta(4, 7).t(), 2.0, [0], True), {}),
    (aten.div.Tensor, (meta(3, 3, dtype=torch.int64), meta(3, 3, dtype=torch.int64)), {}),
    (aten.hardswish_.default, (meta(5, 4).t(),), {}),
]


def _same(a: Any, b: Any) -> None:
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    assert [(t.shape, t.stride(), t.dtype, t.untyped_storage().nbytes(), t.storage_offset()) for t in a] == [
        (t.shape, t.stride(), t.dtype, t.untyped_storage().nbytes(), t.storage_offset()) for t in b]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_remembered_output_is_torchs(case) -> None:
    func, args, kwargs = case
    metamemo._memo.clear()
    ref = func(*args, **kwargs)
    first = metamemo.remembered(func, args, kwargs)
    assert first is not None
    _same(first(*args, **kwargs), ref)  # torch's kernel ran, its output noted
    assert len(metamemo._memo) == 1
    again = metamemo.remembered(func, args, kwargs)(*args, **kwargs)  # made from the note
    _same(again, ref)
    outs = again if isinstance(again, tuple) else (again,)
    if func._schema.name.endswith("_"):
        assert again is args[0]
    else:
        stores = {t.untyped_storage()._cdata for t in outs}
        assert len(stores) == len(outs) and not stores & {t.untyped_storage()._cdata for t in args
                                                          if isinstance(t, torch.Tensor)}


def test_the_default_dtype_is_part_of_the_key() -> None:
    metamemo._memo.clear()
    a = meta(3, 3, dtype=torch.int64)
    f = aten.div.Tensor
    assert metamemo.remembered(f, (a, a), {})(a, a).dtype == torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert metamemo.remembered(f, (a, a), {})(a, a).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (aten.view.default, (meta(4, 6), [24])),  # a view: its output shares the input's storage
        (aten.transpose_.default, (meta(4, 6), 0, 1)),  # in place, but on the tensor's shape (not kept below)
        (aten.nonzero.default, (meta(4),)),  # a data-dependent shape
        (aten.convolution.default, (torch.empty(1, 2, 4, 4), torch.empty(2, 2, 1, 1), None, [1, 1], [0, 0],
                                    [1, 1], False, [0, 0], 1)),  # real tensors
        (aten.add.Tensor, (meta(3), object())),  # an argument with no key
    ],
)
def test_what_cannot_be_remembered_goes_to_torch(func, args) -> None:
    metamemo._memo.clear()
    fn = metamemo.remembered(func, args, {})
    if fn is not None:  # only the in-place reshaping op gets a kernel: it runs torch's and keeps nothing
        assert func is aten.transpose_.default
        out = fn(*args)
        assert out is args[0] and out.shape == (6, 4) and not metamemo._memo
    else:
        assert not metamemo._memo


def test_a_call_torch_rejects_raises_and_is_not_kept() -> None:
    metamemo._memo.clear()
    args = (meta(1, 3, 8, 8), meta(4, 5, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)  # 3 channels, not 5
    fn = metamemo.remembered(aten.convolution.default, args, {})
    with pytest.raises(RuntimeError):
        fn(*args)
    assert not metamemo._memo


@pytest.mark.parametrize("name", ["mobilenet_v3_large", "convnext_tiny", "maxvit_t", "densenet121"])
def test_traces_are_the_same_without(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    work = prepare(name)
    work.model.eval()
    metamemo._memo.clear()
    with work.built.trace_context():
        monkeypatch.setattr(metamemo, "ENABLED", False)
        plain = trace_model(work.model, work.make_inputs())
        monkeypatch.setattr(metamemo, "ENABLED", True)
        first = trace_model(work.model, work.make_inputs())
        second = trace_model(work.model, work.make_inputs())  # every slow call's key known
    assert first.to_dict() == plain.to_dict() == second.to_dict()
