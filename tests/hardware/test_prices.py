"""The shipped table of public on-demand GPU prices: every row well formed, and a few rows
checked against the figure their page prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torch_footprint.hardware import prices
from torch_footprint.hardware.db import builtin

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROWS = tomllib.loads(Path(prices.__file__).with_name("prices.toml").read_text())["price"]
KNOWN_IDS = {a.id for a in builtin()}


def test_table_has_many_gpus_and_providers() -> None:
    assert len(ROWS) >= 20
    assert len({r["gpu"] for r in ROWS}) >= 10
    assert len({r["provider"] for r in ROWS}) >= 4


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['provider']}-{r['gpu']}")
def test_every_row_is_well_formed(row: dict) -> None:
    assert row["gpu"] in KNOWN_IDS, f"unknown accelerator id {row['gpu']}"
    assert row["source"].startswith("https://")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"])
    assert isinstance(row["usd_per_hour"], (int, float)) and row["usd_per_hour"] > 0
    assert row["provider"] and row["notes"]


def test_one_row_per_provider_and_gpu() -> None:
    keys = [(r["provider"], r["gpu"]) for r in ROWS]
    assert len(keys) == len(set(keys))


def _row(provider: str, gpu: str) -> dict:
    (row,) = [r for r in ROWS if r["provider"] == provider and r["gpu"] == gpu]
    return row


def test_rows_give_what_their_pages_print() -> None:
    # https://raw.githubusercontent.com/api-evangelist/lambda-labs/refs/heads/main/plans/lambda-labs-plans-pricing.yml
    # "8x NVIDIA H100 SXM  price_text: $3.99  unit: per GPU per hour"
    assert _row("Lambda", "h100-sxm")["usd_per_hour"] == 3.99
    # same file: "1x NVIDIA H100 PCIe  price_text: $3.29"
    assert _row("Lambda", "h100-pcie")["usd_per_hour"] == 3.29
    # https://raw.githubusercontent.com/datareceipts/data-receipts/main/109-gpu-pricing/hyperscalers.json
    # p5.48xlarge: "usd_per_hour": 55.04, "gpu_count": 8, "usd_per_gpu_hour": 6.88
    assert _row("AWS", "h100-sxm")["usd_per_hour"] == pytest.approx(55.04 / 8)
    # https://raw.githubusercontent.com/tgarg01/silybench-data/main/derived/csv/gpu_prices.csv
    # runpod,A100-PCIe-80GB,on-demand,1.59,1,"A100 PCIe, Secure Cloud"
    assert _row("RunPod", "a100-pcie-80gb")["usd_per_hour"] == 1.59
    # https://techbytes.app/posts/serverless-gpu-pricing-matrix-modal-replicate-lambda-2026/
    # Modal "T4 $0.5904/hr, L4 $0.7992/hr"
    assert _row("Modal", "l4")["usd_per_hour"] == 0.7992
    # https://raw.githubusercontent.com/api-evangelist/nexgen-cloud/refs/heads/main/plans/nexgen-cloud-plans-pricing.yml
    # On-Demand: "resource: NVIDIA H200 SXM  vram_gb: 141 ... price_per_hour: 3.99"
    assert _row("Hyperstack", "h200-sxm")["usd_per_hour"] == 3.99
    # https://huggingface.co/datasets/tokenwatt/gpu-cloud-prices
    # "gpu": "AMD MI300X", "gpus": 1, "price_hr": 2.59, "market": "on-demand", "provider": "DigitalOcean"
    assert _row("DigitalOcean", "mi300x")["usd_per_hour"] == 2.59


def test_lowest_row_of_a_gpu_is_used() -> None:
    # h100-sxm rows: Lambda 3.99, RunPod Secure 3.49, Nebius 3.85, AWS 6.88, Hyperstack 3.20
    p = prices.hourly_price("h100-sxm")
    assert p is not None and p.usd_per_hour == 3.20 and p.provider == "Hyperstack"
    # a10g has one row, AWS g5.xlarge's
    a10g = prices.hourly_price("a10g")
    assert a10g is not None and a10g.provider == "AWS"
    # a price given on the command line wins over the table
    given = prices.hourly_price("h100-sxm", ["h100-sxm=2.0"])
    assert given is not None and given.usd_per_hour == 2.0 and given.source == "given"
