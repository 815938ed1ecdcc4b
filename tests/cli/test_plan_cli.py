"""``footprint plan`` on bad input and when nothing fits, through the command line (tiny Llama:
tests/configs/llama-tiny, 4 heads with 2 key/value heads, 2 layers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli_errors import bad_input_line
from torch_footprint.cli import main

LLAMA = str(Path(__file__).resolve().parents[1] / "configs" / "llama-tiny")
BASE = ["plan", LLAMA, "--gpu", "h100-sxm", "--seq", "64", "--global-batch", "16"]


def test_a_gpu_count_no_layout_divides_says_the_nearest_that_do(capsys: pytest.CaptureFixture[str]) -> None:
    # 7 GPUs: tensor parallelism stays in a node of 8 (tp 1), 7 pipeline stages do not divide 2 layers, and 7
    # data-parallel ranks do not divide 16 sequences. 6 and 5 fail the same way (16 / 3, 16 / 5, 16 / 6);
    # 4 GPUs (4 ranks of 4 sequences) and 8 (8 of 2) work
    err = bad_input_line([*BASE, "--gpus", "7"], capsys)
    assert "no layout of 7 GPUs" in err and "nearest GPU counts that do are 4 and 8" in err


TINY_GPU = """
[[accelerator]]
id = "tiny-gpu"
name = "tiny-gpu"
vendor = "test"
kind = "gpu"
memory_gb = 0.001
bandwidth_gbs = 100
tdp_w = 5
tflops = { fp32 = 1.0, bf16 = 2.0 }
link_gbs = 10
link = "a test link"
source = "https://example.com/tiny-gpu"
"""


def test_nothing_fits_is_an_answer_with_what_would(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # a GPU of 1 MB: the tiny Llama's weights alone (about 0.3 M parameters) are more than that in every layout:
    # exit 0, the answer "nothing fits" and the smallest need per rank
    hw = tmp_path / "tiny.toml"
    hw.write_text(TINY_GPU)
    out = tmp_path / "plan.json"
    args = ["plan", LLAMA, "--hardware", str(hw), "--gpu", "tiny-gpu", "--seq", "64", "--global-batch", "16"]
    assert main([*args, "--gpus", "8", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nothing fits on 8 x tiny-gpu" in text and "the smallest need is" in text
    d = json.loads(out.read_text())
    assert d["nothing_fits"] and d["rows"] == [] and d["layouts_evaluated"] > 0
    need = float(d["closest"].split("smallest need is ")[1].split(" GiB")[0])
    assert need * 2**30 > 0.001e9


@pytest.mark.parametrize(("flags", "words"), [
    (["--gpus", "8", "--micro-batches", "0"], "--micro-batches takes sizes of at least 1"),
    (["--gpus", "8", "--seq", "0"], "--seq must be at least 1"),
    (["--gpus", "8", "--gpu", "a100-sxm-80gb"], "plan searches layouts of one accelerator"),
    (["--gpus", "8", "--tokens", "-5"], "--tokens must be more than 0"),
])
def test_bad_flags_are_one_line(flags: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert words in bad_input_line([*BASE, *flags], capsys)


def test_a_split_that_cannot_be_traced_is_left_out_and_said(tmp_path: Path) -> None:
    # sequence parallelism splits the 63-token sequence between 2 tensor-parallel ranks: it does not divide, so
    # the tp 2 layouts are left out with a note, and the tp 1 layouts (no sequence parallelism there) answer
    out = tmp_path / "plan.json"
    code = main(["plan", LLAMA, "--gpu", "h100-sxm", "--seq", "63", "--global-batch", "16", "--gpus", "8",
                 "--sequence-parallel", "--ac", "none", "--micro-batches", "1", "--json", str(out)])
    assert code == 0
    d = json.loads(out.read_text())
    assert d["rows"] and {r["tp"] for r in d["rows"]} == {1}
    assert any(n.startswith("tp 2, micro-batch 1, --ac none left out: --sequence-parallel") for n in d["notes"])
