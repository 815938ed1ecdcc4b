"""The fast meta outputs equal torch's own meta kernels: shapes, strides and dtypes."""

from __future__ import annotations

import pytest
import torch

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
        (aten.add.Tensor, (meta(3, 1), meta(1, 4))),  # broadcasting: torch decides
        (aten.add.Tensor, (meta(3, 3), meta(3, 3, dtype=torch.float16))),  # promotion
        (aten.add.Tensor, (meta(3, 3, dtype=torch.int64), 1)),  # integers
        (aten.eq.Tensor, (meta(3, 3), meta(3, 3))),  # bool result
        (aten.addmm.default, (meta(6), meta(4, 5), meta(4, 6))),  # bad shapes: let torch raise
        (aten.add_.Tensor, (meta(3, 3), meta(1, 3))),
        (aten.add.Tensor, (torch.empty(3, 3), torch.empty(3, 3))),  # not meta
    ],
)
def test_anything_else_goes_to_torch(func, args) -> None:
    assert fast_meta(func, args) is None
