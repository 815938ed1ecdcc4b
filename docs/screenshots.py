"""Take the report screenshots in docs/images/ (headless chromium through Playwright).

    python docs/screenshots.py            # every picture (the 70B page takes minutes)
    python docs/screenshots.py llm-one    # one of them

Each page is the HTML report of one command of the documentation; the picture is the top of
the page at 1,150 px wide, quantised to 256 colours to stay small.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "report"))
OUT = ROOT / "docs" / "images"

# name -> (the command it shows, how to make it, the height of the picture)
SHOTS = {
    "report-resnet50": "footprint report resnet50 --train --optimizer adamw --gpu a100-sxm-80gb",
    "report-llama-70b-fit": ("footprint report hf:meta-llama/Llama-3.1-70B --input-ids 1,2048 --precision bf16 "
                             "--gpu h200-sxm --fit"),
    "llm-one-gpu": "footprint llm hf:meta-llama/Llama-3.1-8B --gpu l4 --html llm.html",
    "llm-every-gpu": "footprint llm hf:meta-llama/Llama-3.1-8B --html llm.html",
}
HEIGHT = {"report-resnet50": 1400, "report-llama-70b-fit": 1500, "llm-one-gpu": 1180, "llm-every-gpu": 1300}


def result(name: str) -> object:
    import torch_footprint as tfp
    from torch_footprint.report.html import page_of
    from torch_footprint.results.record import envelope

    if name == "report-resnet50":
        return envelope("report", tfp.make_report("resnet50", train=True, optimizer="adamw",
                                                  gpu="a100-sxm-80gb").to_dict())
    if name == "report-llama-70b-fit":
        return envelope("report", tfp.make_report("hf:meta-llama/Llama-3.1-70B", {"input_ids": "1,2048:int64"},
                                                  precision="bf16", gpu="h200-sxm", fit=True).to_dict())
    if name == "llm-one-gpu":
        return page_of(tfp.llm("hf:meta-llama/Llama-3.1-8B", gpu="l4"))
    return page_of(tfp.llm("hf:meta-llama/Llama-3.1-8B"))


def main(names: list[str]) -> int:
    from browser import chromium, html_of, open_page
    from PIL import Image
    from playwright.sync_api import sync_playwright

    exe = chromium()
    if exe is None:
        print("no chromium here: apt-get install chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        for name in names or list(SHOTS):
            page_file = Path(tmp) / f"{name}.html"
            page_file.write_text(html_of(result(name)))
            page, errors, requests = open_page(browser, page_file, 1150)
            if errors or requests:
                print(f"{name}: console errors {errors}, requests {requests}", file=sys.stderr)
                return 1
            page.set_viewport_size({"width": 1150, "height": HEIGHT[name]})
            png = Path(tmp) / f"{name}.png"
            page.screenshot(path=str(png))
            page.close()
            OUT.mkdir(parents=True, exist_ok=True)
            Image.open(png).convert("RGB").quantize(256).save(OUT / f"{name}.png", optimize=True)
            print(f"{name}: {(OUT / f'{name}.png').stat().st_size / 1024:.0f} KiB  ({SHOTS[name]})")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
