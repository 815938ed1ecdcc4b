"""The HTML reports in a real browser: Debian's chromium driven by Playwright.

Each page (a CNN training step, a fit over every accelerator, a language model on one and on
every accelerator, a watched run) loads with no console error and no request beyond the
file itself, at 1,400 and 800 px wide no text of a chart is cut or lies over another, every
chart has its marks, and the verdict on top says in words whether the workload fits.
Skipped, with the reason, where no chromium or no Playwright is installed, but not in CI
(CI set), where .ci/run installs them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from browser import OVERLAPS_JS, chromium, html_of, open_page, pages

pytestmark = pytest.mark.slow


def _need(what: str, missing: bool) -> None:
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing in CI: .ci/run installs it")
        pytest.skip(f"{what} is not installed here (apt-get install chromium; pip install playwright)")


@pytest.fixture(scope="module")
def browser() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    _need("the playwright package", sync_playwright is None)
    exe = chromium()
    _need("chromium", exe is None)
    with sync_playwright() as pw:  # type: ignore[misc]
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    d = tmp_path_factory.mktemp("pages")
    out = {}
    for name, result in pages().items():
        path = d / f"{name}.html"
        path.write_text(html_of(result))
        out[name] = (path, result)
    return out


NAMES = ["cnn-training", "fit", "fit-70b", "llm-one", "llm-all", "watch"]


@pytest.mark.parametrize("width", [1400, 800])
@pytest.mark.parametrize("name", NAMES)
def test_page_loads_offline_and_no_label_is_cut_or_overlaps(browser: Any, written: dict[str, Any], name: str,
                                                            width: int) -> None:
    page, errors, requests = open_page(browser, written[name][0], width)
    try:
        assert errors == [] and requests == []
        assert page.locator("svg.plot").count() >= 1
        assert page.evaluate(OVERLAPS_JS) == []
    finally:
        page.close()


def _doc(written: dict[str, Any], name: str, page: Any) -> dict[str, Any]:
    return json.loads(page.locator("#footprint-data").text_content() or "null")


def test_every_chart_of_a_training_step_has_its_marks(browser: Any, written: dict[str, Any]) -> None:
    page, _, _ = open_page(browser, written["cnn-training"][0], 1400)
    doc = _doc(written, "cnn-training", page)
    tl = doc["memory"]["timeline"]
    assert page.locator("svg.timeline path").count() == sum(1 for c in tl["categories"] if any(tl["series"][c]))
    assert page.locator("svg.roofline circle.pt").count() == len(doc["predict"]["roofline"])
    assert page.locator("svg.breakdown rect.bar").count() == len(doc["memory"]["peak"]["breakdown"]) + len(
        doc["memory"]["overheads"])
    assert page.locator("details.m").count() == len(doc["modules"])
    page.locator("svg.roofline circle.pt").last.hover()
    assert page.locator("#tip").is_visible() and (page.locator("#tip").text_content() or "").startswith("aten.")
    verdict = page.locator(".verdict").inner_text()
    # resnet18's AdamW step at batch 1 is far under an 80 GiB A100
    assert verdict.startswith("Fits on NVIDIA A100 SXM4 80GB: it needs ") and "of its 80.0 GiB" in verdict
    page.close()


def test_a_fit_page_names_what_fits_and_gives_no_speed_to_what_does_not(browser: Any, written: dict[str, Any]) -> None:
    page, _, _ = open_page(browser, written["fit"][0], 1400)
    doc = _doc(written, "fit", page)
    rows = doc["fit"]["rows"]
    fitting = sum(1 for r in rows if r["fits"])
    assert f"{fitting} of {len(rows)} accelerators fit; the pick: " in page.locator(".verdict").inner_text()
    # one memory bar per accelerator, one latency bar per accelerator that fits
    assert page.locator("svg.fit rect.bar:not(.alt)").count() == len(rows) + sum(
        1 for r in rows if r["fits"] and r["latency_s"] is not None)
    assert page.locator("svg.fit text.nofit").count() == len(rows) - fitting
    page.close()


def test_a_70b_model_on_an_h200_fits_with_less_headroom_than_asked(browser: Any, written: dict[str, Any]) -> None:
    page, _, _ = open_page(browser, written["fit-70b"][0], 1400)
    verdict = page.locator(".verdict").inner_text()
    # 70.6 G parameters x 2 bytes = 131.5 GiB: under the H200's 141 GiB, over 80% of it (112.8 GiB)
    assert verdict.startswith("Fits on NVIDIA H200 SXM 141GB, with less headroom than asked: it needs 13")
    assert "at 80% utilisation it asks to provision 16" in verdict
    assert page.locator("svg.timeline line.cap").count() == 1  # the capacity line, inside the scale
    page.close()


def test_a_language_model_on_one_gpu_says_whether_it_fits(browser: Any, written: dict[str, Any]) -> None:
    page, _, _ = open_page(browser, written["llm-one"][0], 1400)
    verdict = page.locator(".verdict").inner_text()
    # Llama-3.1-8B in bf16: 8.03 G parameters, 15.0 GiB of weights, on a 24 GB L4
    assert verdict.startswith("Fits on NVIDIA L4: it needs 15.") and "of its 24.0 GiB" in verdict
    assert "tokens/s" in verdict and page.locator("svg.llm-batch path").count() == 1
    page.close()


def test_a_language_model_on_every_gpu_draws_only_those_that_fit(browser: Any, written: dict[str, Any]) -> None:
    page, _, _ = open_page(browser, written["llm-all"][0], 1400)
    doc = _doc(written, "llm-all", page)["llm"]
    rows = doc["accelerators"]
    misses = [r["accelerator"] for r in rows if not r["fits"]]
    assert misses, "an 8B model in bf16 does not fit an 8 GB card"
    verdict = page.locator(".verdict").inner_text()
    assert f"Fits on {len(rows) - len(misses)} of {len(rows)} accelerators" in verdict
    assert "Does not fit: " + ", ".join(misses[:3]) in verdict
    assert page.locator("td.no").count() == len(misses)
    drawn = [t.split(" ")[0] for t in page.locator("svg.llm-batch text.tl").all_text_contents() if "/s" in t]
    assert drawn and not set(drawn) & set(misses)
    page.close()


def test_a_watched_run_draws_its_timeline(browser: Any, written: dict[str, Any]) -> None:
    page, _, _ = open_page(browser, written["watch"][0], 1400)
    assert page.locator("svg.watch path").count() >= 1
    page.close()
