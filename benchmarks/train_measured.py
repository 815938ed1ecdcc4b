"""Single-GPU training steps predicted against our own GPU measurements (nothing fitted to them).

The measurements are benchmarks/gpu_measure.py's reports, sections ``train`` (image models and
BERT-base) and ``llm_train`` (causal LMs from shipped configs): by default
benchmarks/results/gpu-measure-h100.json, one H100 SXM 80GB (torch 2.11, transformers 5.17, SDPA
attention, foreach optimizers); ``--measured`` another (gpu-measure-h200.json: one H200, the
same stack, with Megatron-core's ``core_attn`` recompute as a user registers it with
transformers: SDPA wrapped in torch.utils.checkpoint). What each measured figure includes, from
``timed_train``:

* ``allocated_at_start``: what was allocated before the optimizer existed (the weights);
* ``states_bytes``: allocated after a second step minus that: gradients + optimizer state;
* ``peak_bytes_above_states``: ``max_memory_allocated`` during the second step minus what
  was allocated after the first (weights + gradients + optimizer state). The second step
  drops the gradients first (``zero_grad(set_to_none=True)``), so its peak is
  weights + optimizer state + the step's own tensors, and the figure is that peak minus
  weights, gradients and optimizer state;
* ``median_s``: the step's time (CUDA events, median of 10).

The prediction: ``trace_step`` of the same model, batch, precision, optimizer and
checkpointing with the CUDA target's attention choice (compute capability 9.0), replayed as a
second step (``steady``: the optimizer state exists before it); the same difference taken;
the step's time from the roofline on the database's row of the GPU the report names, in the
run's memory layout.

    PYTHONPATH=src python benchmarks/train_measured.py [--only llm|train] [--match TEXT] [--measured F]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_footprint.analysis.memory import replay
from torch_footprint.estimate.kernels.roofline import estimate_latency
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.hardware import list as all_rows
from torch_footprint.hardware.local import find_local_gpu
from torch_footprint.settings import Training, Workload

ROOT = Path(__file__).resolve().parent
MEASURED = ROOT / "results" / "gpu-measure-h100.json"
CONFIGS = ROOT / "configs"
PRECISION = {"amp-bf16": "bf16-mixed", "amp-fp16": "fp16-mixed", "fp32": "fp32", "bf16": "bf16"}
OPTIMIZER = {"sgd": "momentum-foreach", "adamw": "adamw-foreach"}  # gpu_measure.optimizer's, foreach both
GIB = 2**30


@dataclass
class Compared:
    label: str
    measured_peak: int  # bytes above weights + gradients + optimizer state
    predicted_peak: int
    measured_states: int  # gradients + optimizer state
    predicted_states: int
    measured_s: float
    predicted_s: float

    def errors(self) -> tuple[float, float, float]:
        return (self.predicted_peak / self.measured_peak - 1, self.predicted_states / self.measured_states - 1,
                self.predicted_s / self.measured_s - 1)


def workload_of(case: dict[str, Any]) -> tuple[Workload, Training, str]:
    """The footprint workload, step and memory layout that run ``case`` as gpu_measure ran it."""
    precision = PRECISION[case["precision"]]
    ckpt = case.get("checkpointing")
    training = Training(train=True, optimizer=OPTIMIZER[case["optimizer"]], checkpointing=ckpt is True,
                        recompute_modules=(ckpt,) if isinstance(ckpt, str) else ())
    name = case["model"]
    if case["input"].startswith("seq="):
        seq = int(case["input"].removeprefix("seq="))
        folder = "bert-base-uncased-mlm" if name.startswith("hf:google-bert") else name
        inputs = f"input_ids={case['batch']},{seq}:int64"
        return Workload(str(CONFIGS / folder), inputs, precision=precision), training, "nchw"
    return Workload(name, None, batch=case["batch"], precision=precision), training, case["layout"]


def label_of(case: dict[str, Any]) -> str:
    ckpt = case.get("checkpointing")
    ckpt = f" {ckpt}" if isinstance(ckpt, str) else " ckpt" if ckpt else ""
    layout = f" {case['layout']}" if case["layout"] != "-" else ""
    return f"{case['model'].removeprefix('hf:google-bert/')} b{case['batch']} {case['input']} {case['precision']}" \
           f"{layout}{ckpt}"


def compare(case: dict[str, Any], gpu: Any) -> Compared:
    w, t, layout = workload_of(case)
    trace = trace_step(w, t, cuda_sm=(9, 0))[0]
    steady = replay(trace, steady=True)
    states = steady.persistent
    grads, opt = states.get("gradients", 0), states.get("optimizer state", 0)
    weights = states.get("weights", 0) + states.get("buffers", 0)
    predicted_peak = steady.peak_bytes - weights - grads - opt
    # the measured peak sits above the inputs too (made before the first step): leave them in
    pred = estimate_latency(trace, gpu, layout=layout)
    return Compared(label_of(case), case["peak_bytes_above_states"], predicted_peak, case["states_bytes"],
                    grads + opt, case["median_s"], pred.time_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("llm", "train"), help="one section")
    ap.add_argument("--match", help="only the cases whose label contains this")
    ap.add_argument("--measured", type=Path, default=MEASURED, help="another gpu_measure.py report")
    args = ap.parse_args()
    doc = json.loads(args.measured.read_text())
    sections = doc["sections"]
    gpu = find_local_gpu(all_rows(), name=doc["environment"].get("name")) or get("h100-sxm")
    every = tuple(s for s in ("llm_train", "train") if s in sections)
    names = {"llm": ("llm_train",), "train": ("train",), None: every}[args.only]
    cases = [c for s in names for c in sections[s]]
    if args.match:
        cases = [c for c in cases if args.match in label_of(c)]
    print(f"measured on {doc['environment'].get('name')}, priced as {gpu.id}")
    print(f"{'case':52s} {'peak above states (GiB)':>26s} {'grads+optimizer (GiB)':>24s} {'step (ms)':>24s}")
    print(f"{'':52s} {'measured':>9s} {'predicted':>9s} {'err':>6s} {'measured':>8s} {'pred':>7s} {'err':>6s}"
          f" {'measured':>8s} {'pred':>7s} {'err':>6s}")
    rows = []
    for case in cases:
        r = compare(case, gpu)
        rows.append(r)
        ep, es, et = r.errors()
        print(f"{r.label:52s} {r.measured_peak / GIB:9.2f} {r.predicted_peak / GIB:9.2f} {100 * ep:+5.1f}%"
              f" {r.measured_states / GIB:8.2f} {r.predicted_states / GIB:7.2f} {100 * es:+5.1f}%"
              f" {1e3 * r.measured_s:8.1f} {1e3 * r.predicted_s:7.1f} {100 * et:+5.1f}%", flush=True)
    for i, what in enumerate(("peak above states", "grads + optimizer", "step time")):
        errs = [abs(r.errors()[i]) for r in rows]
        print(f"{what}: median |error| {100 * statistics.median(errs):.1f}%, worst {100 * max(errs):.1f}% "
              f"over {len(errs)} cases")


if __name__ == "__main__":
    main()
