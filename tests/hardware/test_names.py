"""Accelerators named as people write them: the row picked when one fits, every candidate named
when several do (the ids below are the database's rows, read off its datasheet names)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import torch_footprint as tfp
from torch_footprint.errors import FootprintError


@pytest.mark.parametrize(("written", "row"), [
    ("H100 SXM", "h100-sxm"), ("h100 sxm5", "h100-sxm"), ("4090", "rtx-4090"), ("RTX 4090", "rtx-4090"),
    ("rtx4090", "rtx-4090"), ("GeForce RTX 3090 Ti", "rtx-3090-ti"), ("3090", "rtx-3090"), ("mi300x", "mi300x"),
    ("MI300X", "mi300x"), ("mi300", "mi300x"), ("A100 80GB SXM", "a100-sxm-80gb"),
    ("a100 pcie 40 gb", "a100-pcie-40gb"),
    ("nvidia a10", "a10"), ("M2 Max", "apple-m2-max"), ("L40S", "l40s"),
    # the L40 is its own card (half the L40S's tensor rate), not a short name for the L40S
    ("L40", "l40"), ("NVIDIA L40", "l40"),
])
def test_one_row_fits(written: str, row: str) -> None:
    assert tfp.hardware.get(written).id == row


@pytest.mark.parametrize(("written", "rows"), [
    ("A100", {"a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "a100-pcie-40gb"}),
    ("a100", {"a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "a100-pcie-40gb"}),
    ("a100 80gb", {"a100-sxm-80gb", "a100-pcie-80gb"}),
    ("h100", {"h100-sxm", "h100-pcie", "h100-nvl"}),
    ("rtx 6000", {"quadro-rtx-6000", "rtx-6000-ada"}),
])
def test_several_rows_are_named(written: str, rows: set[str]) -> None:
    with pytest.raises(FootprintError) as e:
        tfp.hardware.get(written)
    msg = str(e.value)
    assert "\n" not in msg and f"could be {len(rows)} accelerators" in msg
    assert set(msg.split(": ", 1)[1].split(";")[0].split(", ")) == rows


def test_ambiguous_name_on_the_command_line_is_bad_input() -> None:
    r = subprocess.run([sys.executable, "-m", "torch_footprint", "fit", "resnet18", "--gpu", "A100"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "a100-sxm-80gb" in lines[0] and "a100-pcie-40gb" in lines[0]
