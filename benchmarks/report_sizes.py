"""Report sizes and generation times: resnet50, vit_b_16, GPT-2 and a Llama-3.1-70B training step.

For each workload: the time to trace and analyse it (``tfp.make_report``: the trace, the
profile, memory, its timeline and the roofline on the accelerator), the time to render the
HTML from the result dict (``report.html.render_html``), the HTML and JSON sizes, and the
marks drawn (timeline points kept of all operators, roofline points). Targets:
the 70B step's report under 3 MB, resnet50's under 1 MB.

    python benchmarks/report_sizes.py     # writes benchmarks/results/report_sizes.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

CASES = [
    ("resnet50 training (AdamW, fp32, batch 1) on A100", "resnet50", None,
     dict(train=True, optimizer="adamw", gpu="a100-sxm-80gb")),
    ("vit_b_16 training (AdamW, fp32, batch 1) on A100", "vit_b_16", None,
     dict(train=True, optimizer="adamw", gpu="a100-sxm-80gb")),
    ("GPT-2 training (8 x 1024, AdamW, bf16-mixed) on A100", "hf:gpt2", {"input_ids": "8,1024:int64"},
     dict(train=True, optimizer="adamw", precision="bf16-mixed", gpu="a100-sxm-80gb")),
    ("Llama-3.1-70B training (1 x 2048, AdamW, bf16-mixed) on H100", str(ROOT / "tests" / "configs" / "llama3-70b"),
     {"input_ids": "1,2048:int64"}, dict(train=True, optimizer="adamw", precision="bf16-mixed", gpu="h100-sxm")),
]


def main() -> None:
    import torch_footprint as tfp
    from torch_footprint.files import write_json
    from torch_footprint.report.html import render_html
    from torch_footprint.results.record import envelope

    rows = []
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| workload | operators | trace + analysis | render | HTML | JSON | timeline points | roofline points |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, model, inputs, kw in CASES:
        t0 = time.perf_counter()
        rep = tfp.make_report(model, inputs, **kw)
        t1 = time.perf_counter()
        doc = envelope("report", rep.to_dict())
        html = render_html(doc)
        t2 = time.perf_counter()
        js = json.dumps(doc, indent=1)
        tl = doc["memory"]["timeline"]
        row = {"workload": label, "operators": tl["events"], "build_s": t1 - t0, "render_s": t2 - t1,
               "html_bytes": len(html.encode()), "json_bytes": len(js.encode()), "timeline_points": len(tl["index"]),
               "roofline_points": len(doc["predict"]["roofline"])}
        rows.append(row)
        print(f"| {label} | {row['operators']:,} | {row['build_s']:.1f} s | {row['render_s']:.2f} s | "
              f"{row['html_bytes'] / 2**20:.2f} MiB | {row['json_bytes'] / 2**20:.2f} MiB | "
              f"{row['timeline_points']:,} | {row['roofline_points']} |", flush=True)
    out = ROOT / "benchmarks" / "results" / "report_sizes.json"
    write_json(out, {"rows": rows, "load_average_after": os.getloadavg()[0], "cpus": os.cpu_count()})
    print(f"wrote {out.relative_to(ROOT)}; load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
