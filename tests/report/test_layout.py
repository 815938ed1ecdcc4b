"""Every table reads whole at 80 columns and up: no figure is cut, nothing is dropped."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.measure.calibrate import CalibrationResult
from torch_footprint.report.hardware import render_calibration, render_fit, render_gpus, render_prediction
from torch_footprint.report.layout import Column, fit_tables, table_width
from torch_footprint.report.llm import render_llm
from torch_footprint.report.terminal import render_bench, render_memory, render_profile

WIDTHS = (80, 100, 160)
WIDE = 1000  # the reference: every table in one piece
FOLDING = {"module", "note", "op", "operator", "accelerator", "id", "category", "ceiling", ""}  # names, not figures


def render(fn: Callable[[int], str], width: int) -> str:
    return fn(width)


def table_cells(text: str) -> list[tuple[str, str]]:
    """(column header, cell) for every cell of every table in ``text``."""
    out: list[tuple[str, str]] = []
    headers: list[str] = []
    in_header = False
    for line in text.splitlines():
        if line.startswith("┃"):  # a header may take several lines: join them per column
            parts = [h.strip() for h in line.strip("┃").split("┃")]
            headers = [f"{a} {b}".strip() for a, b in zip(headers, parts)] if in_header else parts
            in_header = True
            continue
        in_header = False
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            out += [(h, c) for h, c in zip(headers, cells) if c]
    return out


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


CALIBRATION = {  # the shape `footprint calibrate` returns, figures of this 2-core VM (README)
    "device": "cpu:AMD EPYC:2t", "name": "AMD EPYC", "threads": 2, "torch": "2.14.1", "when": "2026-11-22",
    "matmul_tflops": {"fp32": 0.0914, "fp16": 0.000898, "bf16": 0.000855}, "conv_tflops": {"fp32": 0.119},
    "copy_gbs": 23.9, "cache_copy_gbs": 64.6, "op_overhead_us": 15.85, "seconds": 9.1,
    "conv_fp32_by_batch_k": {"1": [[9.0, 0.012], [64.0, 0.0606], [4608.0, 0.0462]],
                             "16": [[9.0, 0.00263], [64.0, 0.0237], [4608.0, 0.117]]},
    "matmul_fp32_by_k": [[64.0, 0.106], [3072.0, 0.140]],
}


def _renderers() -> dict[str, Callable[[int], str]]:
    prof = tfp.profile("resnet18", train=True)
    vit = tfp.profile("vit_b_16")
    mem = tfp.memory("resnet18", "8,3,224,224", train=True, optimizer="adamw")
    bench = tfp.bench(Small(), "2,3,32,32", device="cpu", batches="1,2", min_reps=3, min_time=0.01)
    for p in bench.points:  # the prediction columns, as after a calibration
        p.predicted_s, p.peak_flops = 0.012345, 1.5e11
    fit = tfp.fit("resnet18", batch=8, latency="10ms", gpu=["h100-sxm", "t4", "cpu", "jetson-agx-orin-64gb"])
    pred = tfp.predict("resnet50", "a100-sxm-80gb", batch=8)
    rows = tfp.gpus()
    tiny = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")
    lm = tfp.llm(tiny, prompt=16, output=16, gpu=["h100-sxm", "l4", "jetson-agx-orin-64gb", "rtx-4060-ti-16gb"])
    lm_one = tfp.llm(tiny, prompt=16, output=16, gpu="a100-sxm-80gb", engine="vllm", gpus=2)
    return {
        "profile by module": lambda w: render_profile(prof, depth=3, width=w),
        "profile by operator": lambda w: render_profile(prof, by="operator", width=w),
        "vit by operator": lambda w: render_profile(vit, by="operator", width=w),
        "memory": lambda w: render_memory(mem, width=w),
        "bench": lambda w: render_bench(bench, width=w),
        "fit": lambda w: render_fit(fit, width=w),
        "predict": lambda w: render_prediction(pred, depth=2, width=w),
        "gpus": lambda w: render_gpus(rows, sources=True, width=w),
        "calibration": lambda w: render_calibration(CalibrationResult(CALIBRATION, "/tmp/calibration.json"), width=w),
        "llm": lambda w: render_llm(lm, width=w),
        "llm, one accelerator": lambda w: render_llm(lm_one, width=w),
    }


@pytest.fixture(scope="module")
def renderers() -> dict[str, Callable[[int], str]]:
    return _renderers()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_figure_appears_whole_at_every_width(renderers: dict[str, Callable[[int], str]],
                                                   width: int) -> None:
    for name, fn in renderers.items():
        wide = render(fn, WIDE)
        narrow = render(fn, width)
        assert "…" not in narrow, name
        long = [line for line in narrow.splitlines() if len(line) > width and "://" not in line]
        assert not long, (name, long[:1])  # a source URL is printed whole, one line each, on purpose
        shown = set(table_cells(narrow))
        figures = [(h, c) for h, c in table_cells(wide) if h not in FOLDING and re.search(r"\d", c)]
        assert figures, name
        missing = [f for f in figures if f not in shown]
        assert not missing, (name, width, missing[:5])


def test_urls_are_printed_whole(renderers: dict[str, Callable[[int], str]]) -> None:
    text = render(renderers["gpus"], 80)
    h100 = tfp.hardware.get("h100-sxm")
    assert f"h100-sxm: {h100.source}" in text.splitlines()


def test_columns_that_do_not_fit_continue_in_a_second_table() -> None:
    # hand-worked: key 10 wide, four figure columns 20 wide each; 80 columns hold the key and two of them
    # (10 + 20 + 20 + 3 x 3 - 1 = 58; a third makes 81)
    cols = [Column("name", "left", wrap=True), *(Column(f"c{i}", priority=p) for i, p in enumerate((3, 0, 1, 2)))]
    rows = [["k" * 10, *("9" * 20 for _ in range(4))]]
    tables = fit_tables(cols, rows, 80)
    assert [[c.header for c in t.columns] for t in tables] == [["name", "c1", "c2"], ["name", "c0", "c3"]]
    assert table_width([10, 20, 20]) == 58 and table_width([10, 20, 20, 20]) == 81
    # a long name folds (down to 20 columns) before a figure moves out
    rows = [["k" * 30, *("9" * 18 for _ in range(4))]]
    [only] = fit_tables(cols, rows, table_width([20, 18, 18, 18, 18]))
    assert [c.width for c in only.columns] == [20, 18, 18, 18, 18]
