"""Whole-model GPU throughput predicted against published measurements (models.toml).

Every row of benchmarks/published/models.toml (a published throughput or latency of one
model on one GPU: inference or a training step, its batch, precision, layout and optimizer)
is traced once through the public API (``tfp.profile``: the forward, or the whole training
step) and priced on the row's GPU with ``tfp.predict``; printed: predicted against
published, the error, and the median, p90 and worst |error| overall, by GPU, by source and by
kind of workload. The kernel-time constants the prediction uses are fitted to kernel
measurements (``published/kernels.toml``), never to these rows; ``--leave-one-gpu-out``
refits them without the kernel rows of each row's GPU (``benchmarks/validate_kernels.py``).

    python benchmarks/validate_models.py [--rows N] [--leave-one-gpu-out] [--out FILE.json]

Rows measured under torch.compile are priced with ``compile`` (TorchInductor's fused
elementwise chains and channels-last convolutions: estimate/kernels/fusion.py) and counted
with the rest; they are also summarised apart. Rows whose published figure implies more FLOP/s
than the GPU's datasheet peak are impossible as stated (a misread table or a different
workload) and are listed apart, with that reason. Batch-1 latencies are the host's: an eager
model at batch 1 waits on the CPU that dispatches it (the sources name neither the CPU nor
what their latency includes), so they are reported apart from the device-bound rows, whose
figures make the headline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch_footprint as tfp  # noqa: E402
from torch_footprint.estimate.kernels import constants  # noqa: E402
from torch_footprint.estimate.kernels.sdpa import sm_of  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import fit_kernels  # noqa: E402

CONFIGS = ROOT / "benchmarks" / "configs"
# the model each row ran, as footprint builds it (the same architecture and head)
MODELS = {
    ("hf:bert-base-uncased", "seq=384"): str(CONFIGS / "bert-base-uncased-squad"),
    ("hf:bert-large-uncased", "seq=384"): str(CONFIGS / "bert-large-uncased-squad"),
    ("hf:bert-large-uncased", "seq=128"): str(CONFIGS / "bert-large-uncased-pretraining"),
    ("hf:bert-large-uncased", "seq=512"): str(CONFIGS / "bert-large-uncased-pretraining"),
}
GPUS = {"Quadro RTX 8000": "quadro-rtx-6000"}  # the same TU102 chip and clocks, 48 GB
PRECISIONS = {"amp-fp16": "fp16-mixed", "amp-bf16": "bf16-mixed", "fp32": "fp32", "tf32": "fp32", "fp16": "fp16",
              "bf16": "bf16"}
OPTIMIZERS = {"sgd-momentum": "momentum", "sgd": "momentum", "adamw": "adamw", "rmsprop": "rmsprop",
              "lamb": "adamw",  # LAMB keeps AdamW's two moments
              "adam (DLE BERT SQuAD fine-tuning)": "adamw"}


def source_of(url: str) -> str:
    if url.startswith("measured: "):
        return url
    for key in ("pytorch-image-models", "DeepLearningExamples", "deeplearning-benchmark"):
        if key in url:
            return {"pytorch-image-models": "timm", "DeepLearningExamples": "NVIDIA DLE",
                    "deeplearning-benchmark": "Lambda"}[key]
    return url.split("/")[2]


def workload(row: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """The model reference, its inputs and the step's settings for ``row``."""
    model = MODELS.get((row["model"], row["input"]), row["model"])
    if row["input"].startswith("seq="):
        inputs: Any = {"input_ids": f"{row['batch']},{row['input'][4:]}:int64"}
    else:
        inputs = f"{row['batch']},{row['input'].replace('x', ',')}"
    step: dict[str, Any] = {"precision": PRECISIONS[row["precision"]]}
    if row["task"] == "training":
        step.update(train=True, optimizer=OPTIMIZERS[row["optimizer"]])
    return model, inputs, step


def traced(model: str, inputs: Any, step: dict[str, Any], sm: tuple[int, int]) -> Any:
    """The row's step traced as it runs on an NVIDIA GPU of compute capability ``sm`` (its attention
    kernel; the modules' paths under CUDA's autocast), as ``predict`` traces a model it is given."""
    from torch_footprint.analysis import Profile
    from torch_footprint.api import _records
    from torch_footprint.estimate.workload import trace_step

    w, t = _records("profile", step, model, inputs)
    return Profile(trace_step(w, t, cuda_sm=sm)[0], [])


def predicted(row: dict[str, Any], prof: Any) -> float:
    """The row's figure as footprint predicts it: samples per second, or ms per batch."""
    gpu = GPUS.get(row["gpu"], row["gpu"])
    tf32 = True if row["precision"] == "tf32" else None
    pred = tfp.predict(prof, gpu, tf32=tf32, channels_last=row["layout"] == "nhwc",
                       compile=row["framework"] == "pytorch-compile")
    return row["batch"] / pred.time_s if row["metric"] == "samples_per_s" else pred.time_s * 1e3


def measured_rows(paths: list[str]) -> list[dict[str, Any]]:
    """Rows in models.toml's form from benchmarks/gpu_measure.py's JSON: whole-model cases measured
    on one GPU (inference, training steps, compiled inference)."""
    rows = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        gpu = tfp.hardware.local.find_local_gpu(tfp.hardware.list(), name=doc["environment"]["name"])
        for section in ("infer", "train", "compile"):
            for case in doc["sections"].get(section, []):
                if "error" in case or case.get("model", "").startswith("hf:google-bert"):
                    model = "hf:bert-base-uncased" if "error" not in case else None
                else:
                    model = case["model"]
                if model is None:
                    continue
                rows.append({"model": model, "task": case["task"], "batch": case["batch"], "input": case["input"],
                             "precision": case["precision"], "layout": case["layout"] if case["layout"] != "-"
                             else "-", "framework": case.get("framework", "pytorch-eager"),
                             "optimizer": case.get("optimizer"), "gpu": gpu.id if gpu else doc["environment"]["name"],
                             "metric": "samples_per_s", "value": case["samples_per_s"],
                             "source": f"measured: {Path(path).name}"})
    return rows


def stats(errs: list[float]) -> str:
    a = sorted(abs(e) for e in errs)
    if not a:
        return "-"
    p90 = a[min(len(a) - 1, round(0.9 * (len(a) - 1)))]
    return (f"median {100 * statistics.median(a):.1f}%, p90 {100 * p90:.1f}%, worst {100 * a[-1]:.1f}%, "
            f"signed median {100 * statistics.median(errs):+.1f}% (n={len(a)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, help="only the first N rows (a quick look)")
    ap.add_argument("--out", help="write every row's prediction as JSON")
    ap.add_argument("--measured", action="append", default=[], metavar="JSON",
                    help="price benchmarks/gpu_measure.py's whole-model cases instead of models.toml")
    ap.add_argument("--leave-one-gpu-out", action="store_true",
                    help="price each GPU's rows with kernel constants fitted without that GPU's kernel rows")
    args = ap.parse_args()
    fits: dict[str, Any] = {}
    if args.leave_one_gpu_out:
        families = fit_kernels.all_rows()
    rows = measured_rows(args.measured) if args.measured else \
        tomllib.loads((ROOT / "benchmarks" / "published" / "models.toml").read_text())["row"]
    rows = rows[:args.rows]
    traces: dict[Any, Any] = {}
    out, by = [], defaultdict(list)
    t0 = time.perf_counter()
    print(f"{'model':34s} {'task':9s} {'batch':>5s} {'prec':9s} {'GPU':16s} {'published':>10s} {'predicted':>10s} "
          f"{'error':>7s}")
    for row in rows:
        model, inputs, step = workload(row)
        gpu_id = GPUS.get(row["gpu"], row["gpu"])
        sm = sm_of(tfp.hardware.get(gpu_id))
        key = (model, json.dumps(inputs), json.dumps(step, sort_keys=True), sm)
        if key not in traces:
            traces[key] = tfp.profile(model, inputs, **step) if sm is None else traced(model, inputs, step, sm)
        if args.leave_one_gpu_out and gpu_id not in fits:
            held = {f: [r for r in v if r.gpu.id != gpu_id] for f, v in families.items()}
            fits[gpu_id] = fit_kernels.fit(held, constants.KernelConstants())
        with constants.using(fits.get(gpu_id, constants.current())):
            value = predicted(row, traces[key])
        acc = tfp.hardware.get(gpu_id)
        rate_key = PRECISIONS[row["precision"]].removesuffix("-mixed")
        if rate_key == "fp32" and acc.peak("tf32"):  # PyTorch's default runs fp32 convolutions as TF32
            rate_key = "tf32"
        peak = acc.peak(rate_key)
        flops = traces[key].flops + (traces[key].backward_flops or 0)
        rate = flops / row["batch"] * row["value"] if row["metric"] == "samples_per_s" else \
            flops / (row["value"] * 1e-3)
        impossible = bool(peak) and rate > peak
        # the error of the predicted time: + too slow, - too fast
        err = (row["value"] / value - 1) if row["metric"] == "samples_per_s" else (value / row["value"] - 1)
        compiled = row["framework"] != "pytorch-eager"
        kind = f"{'image' if 'x' in row['input'] else 'language'} {row['task']}"
        out.append({**{k: row[k] for k in ("model", "task", "batch", "precision", "gpu", "metric", "value")},
                    "predicted": value, "error": err, "compiled": compiled, "source": source_of(row["source"]),
                    "impossible": impossible})
        if impossible:
            by["impossible as published (FLOP/s above the peak)"].append(err)
        elif row["batch"] == 1:
            by["batch 1: the host's time (reported apart)"].append(err)
        else:
            by["all"].append(err)
            by[f"GPU {row['gpu']}"].append(err)
            by[f"source {source_of(row['source'])}"].append(err)
            by[kind].append(err)
            if compiled:
                by["torch.compile rows (priced compiled)"].append(err)
        print(f"{row['model'][-34:]:34s} {row['task']:9s} {row['batch']:5d} {row['precision']:9s} "
              f"{row['gpu'][:16]:16s} {row['value']:10.4g} {value:10.4g} {100 * err:+6.1f}%"
              f"{'  (compiled)' if compiled else ''}"
              f"{'  (impossible: ' + f'{rate / 1e12:.0f} TFLOP/s)' if impossible else ''}",
              flush=True)
    print(f"\n{len(rows)} rows, {len(traces)} traces, {time.perf_counter() - t0:.0f} s")
    for name in sorted(by, key=lambda k: (k != "all", k)):
        print(f"{name:42s} {stats(by[name])}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
