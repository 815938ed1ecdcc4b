"""`footprint llm`'s serving figures that once disagreed with themselves or with the machine: a
quantized cache read at its own bytes, throughput at the largest batch with its prefill, the
fit verdict on the figure printed, memory as CUDA reports it, default lengths within a
model's positions. Expected values are closed forms worked from the tiny configs (GPT-2:
2 layers, 4 heads of 32, fp32, 256 positions) or published device figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from torch_footprint.cli import main  # noqa: E402
from torch_footprint.errors import FootprintError  # noqa: E402
from torch_footprint.estimate.llm import default_lengths  # noqa: E402
from torch_footprint.estimate.llm.pricing import Priced, serve  # noqa: E402
from torch_footprint.estimate.llm.trace import trace_serving  # noqa: E402
from torch_footprint.hardware.catalog import get  # noqa: E402
from torch_footprint.hardware.db import load_file  # noqa: E402

TINY = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")
PER_TOKEN = 2 * 2 * 128 * 4  # 2 layers x (key + value) x 4 heads x 32 x fp32 bytes


@pytest.fixture(scope="module")
def tiny() -> object:
    return trace_serving(TINY, batch=1, prompt=8)


def test_a_quantized_cache_is_read_at_its_bytes(tiny) -> None:
    assert tiny.kv_bytes_per_token == PER_TOKEN
    full = sum(e.bytes_read for e in tiny.decode_at(200).events)
    half = sum(e.bytes_read for e in tiny.decode_at(200, kv_ratio=0.5).events)
    # attention reads 200 cached tokens; half the bytes each: 0.5 x 2,048 x 200 fewer (and half the
    # new token's 2,048 bytes written and read by the in-place update)
    assert full - half == pytest.approx(0.5 * PER_TOKEN * 200, rel=0.01)
    # priced: an fp8 cache (1 byte of fp32's 4) makes each decode step faster, not only smaller
    h100 = [get("h100-sxm")]
    fp32 = serve(tiny, Priced(batch=256, prompt=128, output=64), h100, max_context=256).rows[0]
    fp8 = serve(tiny, Priced(batch=256, prompt=128, output=64, kv_bytes=1, kv_name="fp8"), h100,
                max_context=256).rows[0]
    assert fp8.kv_bytes * 4 == fp32.kv_bytes
    assert fp8.tpot_s < fp32.tpot_s


def test_throughput_at_the_largest_batch_includes_its_prefill(tiny) -> None:
    h100 = [get("h100-sxm")]
    first = serve(tiny, Priced(batch=1, prompt=128, output=32), h100, max_context=256).rows[0]
    mb = first.max_batch
    at = serve(tiny, Priced(batch=mb, prompt=128, output=32), h100, max_context=256).rows[0]
    # mb requests served whole: one prefill of mb x 128 tokens, then 32 decode steps at batch mb
    whole = at.ttft_s + 32 * at.tpot_s
    assert first.max_batch_tokens_per_s == pytest.approx(mb * 32 / whole, rel=1e-9)
    assert first.max_batch_tokens_per_s < mb / at.tpot_s  # below the decode-only rate
    assert first.tokens_by_batch[-1] == (mb, pytest.approx(first.max_batch_tokens_per_s))


def test_the_fit_verdict_tests_the_figure_it_prints(tiny, tmp_path: Path) -> None:
    h100 = [get("h100-sxm")]
    mb = serve(tiny, Priced(batch=1, prompt=128, output=32), h100, max_context=256).rows[0].max_batch
    at = serve(tiny, Priced(batch=mb, prompt=128, output=32), h100, max_context=256).rows[0]
    over = serve(tiny, Priced(batch=mb + 1, prompt=128, output=32), h100, max_context=256).rows[0]
    assert at.fits and at.total_bytes <= at.capacity
    assert not over.fits and over.total_bytes > over.capacity
    # the peak is the larger of the two moments, not all four parts added
    assert at.total_bytes < at.weights_bytes + at.kv_bytes + at.activation_bytes + at.overhead_bytes
    out = tmp_path / "llm.json"
    assert main(["llm", TINY, "--prompt", "128", "--output", "32", "--batch", str(mb), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["accelerators"]
    assert rows and all(r["fits"] == (r["total_bytes"] <= r["memory_bytes"]) for r in rows)


def test_memory_is_what_cuda_reports(tiny) -> None:
    # torch.cuda.get_device_properties on an RTX 3090: total_memory=24268MB (MiB), below 24 GiB
    # and on an RTX 4090 "GPU 0 has a total capacity of 23.64 GiB" (https://github.com/ali-vilab/VGen/issues/104)
    row = serve(tiny, Priced(batch=1, prompt=8, output=8), [get("rtx-3090"), get("l4"), get("rtx-4090")],
                max_context=256).rows
    assert row[0].capacity == 24268 * 2**20
    assert row[1].capacity == 24 * 2**30  # no CUDA figure in the database: the memory as sold
    assert row[2].capacity == 24207 * 2**20


def test_a_cuda_figure_needs_its_source(tmp_path: Path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text('[[accelerator]]\nid = "x"\nname = "X"\nvendor = "v"\nkind = "gpu"\nmemory_gb = 8\n'
                    'bandwidth_gbs = 100\ntflops = { fp32 = 1 }\nsource = "https://example.com"\n'
                    "cuda_memory_mib = 7900\n")
    with pytest.raises(FootprintError, match="go together"):
        load_file(path)


@pytest.mark.parametrize("prompt, output, most, expected", [
    (None, None, 1024, (512, 128)),  # GPT-2: 1,024 + 256 halved once
    (None, None, 256, (128, 32)),
    (None, None, 4096, (1024, 256)),  # within the maximum: the defaults
    (None, None, None, (1024, 256)),  # no maximum known
    (900, None, 1024, (900, 124)),  # the output is what the given prompt leaves
    (None, 1000, 1024, (24, 1000)),
    (2000, 100, 1024, (2000, 100)),  # both given: left to the context check (an error)
])
def test_default_lengths_fit_the_model(prompt: int | None, output: int | None, most: int | None,
                                       expected: tuple[int, int]) -> None:
    assert default_lengths(prompt, output, most)[:2] == expected


def test_the_defaults_run_on_a_model_with_few_positions(capsys: pytest.CaptureFixture[str]) -> None:
    from torch_footprint import api

    res = api.llm(TINY, measure=True, gpu="h100-sxm")
    assert (res.serving.prompt, res.serving.output) == (128, 32)
    assert res.measured is not None and res.measured["output"] == 32
    assert any("maximum of 256 positions" in n for n in res.notes)
