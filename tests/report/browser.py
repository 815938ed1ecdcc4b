"""Helpers to open the HTML reports in a real browser: Debian's chromium driven by Playwright
(the Python package only: it downloads no browser here). Used by test_browser.py and by
docs/screenshots.py, which takes the pictures in docs/."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TINY_GPT2 = ROOT / "tests" / "configs" / "gpt2-tiny"

# every text of every chart: inside its chart, and over no other text of it
OVERLAPS_JS = """
() => {
  const out = [];
  for (const svg of document.querySelectorAll('svg.plot')) {
    const box = svg.getBoundingClientRect();
    if (box.width === 0) continue;
    const texts = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()])
      .filter(([s, r]) => r.width > 0 && s.trim());
    for (const [s, r] of texts) {
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        out.push(`cut: '${s}' in ${svg.getAttribute('aria-label')}`);
    }
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
      const a = texts[i][1], b = texts[j][1];
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 1 && h > 2) out.push(`overlap: '${texts[i][0]}' / '${texts[j][0]}' in ${svg.getAttribute('aria-label')}`);
    }
  }
  return out;
}
"""


def chromium() -> str | None:
    """Debian's chromium (or CHROMIUM), or None."""
    for c in (os.environ.get("CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
              shutil.which("chromium-browser")):
        if c and os.path.exists(c):
            return c
    return None


def pages() -> dict[str, Any]:
    """The report pages the suite opens: name -> the result dict each page draws."""
    import torch_footprint as tfp
    from torch_footprint.report.html import page_of
    from torch_footprint.results.record import envelope

    out: dict[str, Any] = {}
    cnn = tfp.make_report("resnet18", train=True, optimizer="adamw", gpu="a100-sxm-80gb")
    out["cnn-training"] = envelope("report", cnn.to_dict())
    small = tfp.make_report(str(TINY_GPT2), {"input_ids": "2,64:int64"}, train=True, optimizer="adamw",
                            precision="bf16-mixed", gpu="l4", fit=True)
    out["fit"] = envelope("report", small.to_dict())
    big = tfp.make_report("hf:meta-llama/Llama-3.1-70B", {"input_ids": "1,128:int64"}, precision="bf16",
                          gpu="h200-sxm", fit=True)
    out["fit-70b"] = envelope("report", big.to_dict())
    out["llm-one"] = page_of(tfp.llm("hf:meta-llama/Llama-3.1-8B", gpu="l4"))
    out["llm-all"] = page_of(tfp.llm("hf:meta-llama/Llama-3.1-8B"))
    job = [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(0.6)"]
    out["watch"] = tfp.watch(job, interval=0.1)
    return out


def html_of(result: Any) -> str:
    from torch_footprint.report.html import render_html
    from torch_footprint.report.watch import render_watch_html

    if getattr(result, "kind", None) == "watch" or hasattr(result, "samples"):
        return render_watch_html(result.to_dict())
    return render_html(result)


def open_page(browser: Any, path: Path, width: int) -> tuple[Any, list[str], list[str]]:
    """The page at ``width`` px, with its console errors and the requests it made beyond itself."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    url = path.resolve().as_uri()
    page.goto(url)
    page.wait_for_load_state("load")
    return page, errors, [u for u in requests if u != url]
