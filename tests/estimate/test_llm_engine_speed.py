"""Engines' speed figures (hardware/engines/NAME.toml [speed]) against published measurements.

llama.cpp at batch 1 before CUDA graphs: a token costs its bytes at the matrix-vector kernels'
bandwidth plus the host's launch time per operator (not hidden). The published figures are
XiongjieDai/GPU-Benchmarks-on-LLM-Inference's LLaMA 2 eval-speed table (llama.cpp of Dec 2023,
`./main -ngl 10000`, A100 80GB PCIe):
https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference/blob/00dd2bdeb2404263f22bd6c1cd46ce397e341db5/README.md
("| A100 80GB | 136.24 | 73.83 | 25.68 | OOM |": 7B q4_0, 7B f16, 70B q4_0 tokens/s). The two
llama.cpp figures are fitted on that table's 16 rows (A100 and H100 PCIe, five models); left out
by GPU they predict the other GPU's rows within 5.4% (median), so the tolerance here is 10%.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.quantization import weight_scheme  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402

PROMPT, OUTPUT = 400, 1024  # the README's ./main usage: a ~400-token prompt, -n 1024


@pytest.fixture(scope="module")
def llama2_7b() -> object:
    return trace_serving("hf:meta-llama/Llama-2-7b-hf", batch=1, prompt=PROMPT, dtype="float16")


@pytest.mark.parametrize(("scheme", "published"), [("q4_0", 136.24), ("fp16", 73.83)])
def test_llamacpp_batch1_decode_on_a100_pcie(llama2_7b, scheme: str, published: float) -> None:
    s = Priced(batch=1, prompt=PROMPT, output=OUTPUT, weights=weight_scheme(scheme), engine="llamacpp")
    row = serve(llama2_7b, s, [get("a100-pcie-80gb")], max_context=None).rows[0]
    assert 1 / row.tpot_s == pytest.approx(published, rel=0.10)

