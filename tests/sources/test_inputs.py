"""Input specs."""

from __future__ import annotations

import pytest
import torch

from torch_footprint.errors import FootprintError
from torch_footprint.sources.inputs import parse_dtype, parse_input_ids, parse_shape


def test_shapes_and_dtypes() -> None:
    s = parse_shape("1,3,224,224")
    assert s.shape == (1, 3, 224, 224) and s.dtype == torch.float32 and s.name is None
    assert parse_shape("1x128:int64").dtype == torch.int64
    kw = parse_shape("mask=1,128:bool")
    assert kw.name == "mask" and kw.dtype == torch.bool
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype("torch.float16") is torch.float16


def test_input_ids() -> None:
    s = parse_input_ids("8,1024")
    assert s.shape == (8, 1024) and s.dtype == torch.int64 and s.name == "input_ids"
    with pytest.raises(FootprintError, match="two sizes"):
        parse_input_ids("8,1024,3")


@pytest.mark.parametrize("bad", ["", "1,,3", "a,b", "1,-3", "1,3:floaty", "9bad=1,2"])
def test_malformed(bad: str) -> None:
    with pytest.raises(FootprintError):
        parse_shape(bad)


def test_tensor_values_on_real_devices() -> None:
    assert torch.count_nonzero(parse_shape("4,4:int64").make("cpu")) == 0
    assert parse_shape("4,4").make("meta").device.type == "meta"
