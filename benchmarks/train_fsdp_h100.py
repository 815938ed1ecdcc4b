"""`footprint fit` against FSDP2 and autocast training steps measured on one H100 (nothing fitted to them).

The measurements are benchmarks/results/gpu-fsdp-step-h100.json, made by
benchmarks/gpu_fsdp_step.py (torch 2.11, transformers 5.17, one H100 SXM 80GB): Llama-3-8B
cut to 2 and 4 layers and Qwen3-30B-A3B cut to 1 and 2, random fp32 weights, FSDP2 with a
bf16/fp32 mixed-precision policy or plain bf16 autocast, AdamW (foreach), SDPA attention,
with or without transformers' activation checkpointing. Each case is priced here as a user
would ask: ``footprint fit CONFIG --gpu h100-sxm --gpus 1 --strategy fsdp|ddp --precision
bf16-mixed --train --optimizer adamw-foreach --input-ids B,S [--ac full] --json``, FSDP's
cases with ``--fsdp-param-dtype bf16 --fsdp-reduce-dtype fp32`` (the harness's policy), with the
config's layer count cut the same way. Compared:

* peak: the predicted peak of tensors per rank against ``max_memory_allocated`` over a
  steady step (optimizer state present, gradients set to None before it);
* states: weights, gradients and optimizer state against what was allocated after a step;
* step: the predicted latency against the step's median time (CUDA events);
* per block: the same three differenced between the two layer counts (the embedding,
  head and loss cancel), so the block's own figures are checked apart from the ends.

    python benchmarks/train_fsdp_h100.py [--measured FILE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from torch_footprint.cli import main as footprint

ROOT = Path(__file__).resolve().parent
MEASURED = ROOT / "results" / "gpu-fsdp-step-h100.json"
GIB = 2**30


def predict(case: dict[str, Any], tmp: Path) -> dict[str, float]:
    """``footprint fit`` on the case's config cut to its layer count: peak, states and step time."""
    cfg = json.loads((ROOT / "configs" / case["config"] / "config.json").read_text())
    cfg["num_hidden_layers"] = case["layers"]
    cfg["max_position_embeddings"] = max(case["seq"], cfg.get("max_position_embeddings", 0))
    folder = tmp / f"{case['config']}-{case['layers']}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    out = tmp / "fit.json"
    argv = [str(folder), "--gpu", "h100-sxm", "--gpus", "1", "--precision", "bf16-mixed", "--train",
            "--optimizer", case.get("optimizer", "adamw-foreach"),
            "--input-ids", f"{case['batch']},{case['seq']}", "--attention", "sdpa",
            "--strategy", "fsdp" if case["wrap"] == "fsdp" else "ddp", "--json", str(out)]
    if case["wrap"] == "fsdp":  # the harness's MixedPrecisionPolicy, as torchtitan sets it
        argv += ["--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"]
    if case["checkpointing"]:
        argv += ["--ac", "full"]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = footprint(["fit", *argv])
    if rc:
        raise SystemExit(f"footprint fit {' '.join(argv)} exited {rc}")
    fit = json.loads(out.read_text())
    states = fit["model_states_per_rank"]
    return {"peak": fit["peak_per_rank"]["peak_bytes"],
            "states": states["weights"] + states["gradients"] + states["optimizer"],
            "step_s": fit["rows"][0]["latency_s"]}


def label(case: dict[str, Any]) -> str:
    name = "llama3-8b" if "Llama" in case["config"] else "qwen3-30b-a3b"
    ac = " ac" if case["checkpointing"] else ""
    opt = case.get("optimizer", "adamw-foreach")
    return f"{name} L{case['layers']} b{case['batch']} s{case['seq']} {case['wrap']}{ac}" \
           + (f" {opt}" if opt != "adamw-foreach" else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", default=str(MEASURED))
    args = ap.parse_args()
    cases = [c for c in json.loads(Path(args.measured).read_text())["cases"] if "error" not in c]
    print(f"{'case':36s} {'peak (GiB)':>22s} {'states (GiB)':>22s} {'step (ms)':>24s}")
    print(f"{'':36s} {'meas':>7s} {'pred':>7s} {'err':>6s} {'meas':>7s} {'pred':>7s} {'err':>6s}"
          f" {'meas':>8s} {'pred':>7s} {'err':>6s}")
    errors: dict[str, list[float]] = {"peak": [], "states": [], "step": [], "block peak": [], "block step": []}
    rows: dict[tuple, tuple[dict, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            p = predict(case, Path(tmp))
            # allocated after a step: weights, gradients and optimizer state
            m = {"peak": case["max_allocated"], "states": case["allocated_steady"], "step_s": case["median_s"]}
            key = (case["config"], case["batch"], case["seq"], case["wrap"], case["checkpointing"],
                   case.get("optimizer", "adamw-foreach"), case["layers"])
            rows[key] = (m, p)
            e = {k: p[k] / m[k] - 1 for k in m}
            errors["peak"].append(abs(e["peak"]))
            errors["states"].append(abs(e["states"]))
            errors["step"].append(abs(e["step_s"]))
            print(f"{label(case):36s} {m['peak'] / GIB:7.2f} {p['peak'] / GIB:7.2f} {100 * e['peak']:+5.1f}%"
                  f" {m['states'] / GIB:7.2f} {p['states'] / GIB:7.2f} {100 * e['states']:+5.1f}%"
                  f" {1e3 * m['step_s']:8.1f} {1e3 * p['step_s']:7.1f} {100 * e['step_s']:+5.1f}%", flush=True)
    print("\nper block (the difference between the two layer counts, divided by the blocks between them):")
    for key, (m_hi, p_hi) in rows.items():
        lo = min((k for k in rows if k[:6] == key[:6] and k[6] < key[6]), default=None, key=lambda k: k[6])
        if lo is None:
            continue
        (m_lo, p_lo), n = rows[lo], key[6] - lo[6]
        dm = {k: (m_hi[k] - m_lo[k]) / n for k in m_hi}
        dp = {k: (p_hi[k] - p_lo[k]) / n for k in p_hi}
        ep, et = dp["peak"] / dm["peak"] - 1, dp["step_s"] / dm["step_s"] - 1
        errors["block peak"].append(abs(ep))
        errors["block step"].append(abs(et))
        what = f"{'llama3-8b' if 'Llama' in key[0] else 'qwen3-30b-a3b'} b{key[1]} s{key[2]} {key[3]}" \
               f"{' ac' if key[4] else ''}{' ' + key[5] if key[5] != 'adamw-foreach' else ''}"
        print(f"{what:36s} peak {dm['peak'] / GIB:6.2f} vs {dp['peak'] / GIB:6.2f} GiB ({100 * ep:+5.1f}%)"
              f"  step {1e3 * dm['step_s']:6.1f} vs {1e3 * dp['step_s']:6.1f} ms ({100 * et:+5.1f}%)")
    print()
    for what, errs in errors.items():
        if errs:
            print(f"{what}: median |error| {100 * statistics.median(errs):.1f}%, worst {100 * max(errs):.1f}% "
                  f"over {len(errs)}")


if __name__ == "__main__":
    main()
