"""The HTML report in a real browser: headless Chromium driven by Playwright.

For each generated report: the page loads with zero console errors and zero network
requests beyond the file itself; each plot has the expected number of marks (one roofline
point per merged operator, one area per memory category, one tree row per module);
hovering a roofline point shows its tooltip; collapsing a module works; dark mode changes
the background. Takes a screenshot of the resnet50 report for the README.

    pip install playwright            # the Python package only: no browser download
    apt-get install chromium          # Debian's build
    python benchmarks/report_browser.py [--chromium /usr/bin/chromium] [--screenshot docs/report-resnet50.png]

Not part of the test suite: CI has no browser (the suite checks the HTML with html.parser).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

CASES = {
    "resnet50": dict(model="resnet50", train=True, optimizer="adamw", gpu="a100-sxm-80gb"),
    "gpt2-tiny": dict(model=str(ROOT / "tests" / "configs" / "gpt2-tiny"), inputs={"input_ids": "2,64:int64"},
                      train=True, optimizer="adamw", precision="bf16-mixed", gpu="l4", fit=True),
    "vit_b_16 inference": dict(model="vit_b_16", gpu="l4"),
}


def build(case: dict[str, Any], out: Path) -> dict[str, Any]:
    import torch_footprint as tfp
    from torch_footprint.report.html import render_html
    from torch_footprint.results.record import envelope

    args = dict(case)
    model, inputs = args.pop("model"), args.pop("inputs", None)
    doc = envelope("report", tfp.make_report(model, inputs, **args).to_dict())
    out.write_text(render_html(doc))
    return doc


def check_page(browser: Any, path: Path, doc: dict[str, Any], screenshot: Path | None) -> list[str]:
    """The failures on one page (empty: all good)."""
    fails: list[str] = []
    page = browser.new_page(viewport={"width": 1150, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    url = path.resolve().as_uri()
    page.goto(url)
    page.wait_for_load_state("load")
    others = [u for u in requests if u != url]
    if errors:
        fails.append(f"console errors: {errors}")
    if others:
        fails.append(f"network requests: {others}")
    embedded = json.loads(page.locator("#footprint-data").text_content() or "null")
    if embedded != json.loads(json.dumps(doc)):
        fails.append("the embedded data differs from the result")
    tl = doc["memory"]["timeline"]
    areas = page.locator("svg.timeline path").count()
    present = sum(1 for c in tl["categories"] if any(tl["series"][c]))
    if areas != present:
        fails.append(f"timeline: {areas} areas, expected {present}")
    if doc.get("predict"):
        points = page.locator("svg.roofline circle.pt").count()
        if points != len(doc["predict"]["roofline"]):
            fails.append(f"roofline: {points} points, expected {len(doc['predict']['roofline'])}")
        page.locator("svg.roofline circle.pt").last.hover()  # the last drawn lies on top
        tip = page.locator("#tip")
        text = tip.text_content() or ""
        if not tip.is_visible() or not text.startswith("aten."):
            fails.append(f"hovering a roofline point shows no tooltip (got {text!r})")
    rows = page.locator("details.m").count()
    if rows != len(doc["modules"]):
        fails.append(f"module tree: {rows} rows, expected {len(doc['modules'])}")
    root = page.locator("details.m").first
    child = page.locator("details.m details.m").first
    was = child.is_visible()
    root.locator("> summary").click()
    if not (was and not child.is_visible() and root.get_attribute("open") is None):
        fails.append("collapsing the root module did not hide its children")
    root.locator("> summary").click()
    if doc.get("fit"):
        bars = page.locator("svg.fit rect.bar").count()
        if bars < len(doc["fit"]["rows"]):
            fails.append(f"fit: {bars} bars for {len(doc['fit']['rows'])} accelerators")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    if light == dark:
        fails.append(f"dark mode keeps the background {light}")
    page.emulate_media(color_scheme="light")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1150, "height": 1320})
        page.mouse.move(0, 0)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(screenshot))
    page.close()
    return fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--screenshot", type=Path, help="where to save the resnet50 report's screenshot")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    failed = 0
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        for name, case in CASES.items():
            path = Path(tmp) / f"{name.split()[0]}.html"
            t0 = time.perf_counter()
            doc = build(case, path)
            fails = check_page(browser, path, doc, args.screenshot if name == "resnet50" else None)
            size = path.stat().st_size
            verdict = "ok" if not fails else "FAILED: " + "; ".join(fails)
            print(f"{name:20s} {size / 1024:8.0f} KiB  {time.perf_counter() - t0:6.1f} s  {verdict}")
            failed += bool(fails)
        browser.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
