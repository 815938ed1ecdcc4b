"""Single-GPU training throughput predicted against published measurements.

Each point: a published single-GPU PyTorch training throughput with its set-up (model,
batch, precision, memory layout, data); footprint traces the training step (forward,
loss, backward, optimizer) at that batch and precision and times it with the roofline on
the GPU's database row (datasheet ceilings, default efficiencies): images per second =
batch / step time.

    python benchmarks/train_published.py

Sources:
  [DLE] NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5, "Training performance results"
        (pytorch-21.03 NGC container, DALI data loading, 1 GPU; AMP runs channels-last),
        https://github.com/NVIDIA/DeepLearningExamples/blob/291f0d02e815b148fa5c2b81bf07aa3552142895/PyTorch/Classification/ConvNets/resnet50v1.5/README.md
  [SKB] sandeepkumar-skb/pytorch_experiments, torchvision_exp/README.md: torchvision
        ResNet50 training on a Tesla V100-SXM2 at batch 128, iteration time by layout and
        precision, https://github.com/sandeepkumar-skb/pytorch_experiments/blob/master/torchvision_exp/README.md

The batch sizes of the [DLE] runs are not printed beside the table; 256 is assumed for
AMP and TF32 (the launcher's DGXA100 and DGX1V AMP configurations) and for FP32 on V100.
footprint's roofline does not see the memory layout (NCHW or channels-last) nor the data
loader; what remains of the error is printed, not tuned away.
"""

from __future__ import annotations

import statistics
import time

from torch_footprint.estimate.roofline import estimate_latency
from torch_footprint.estimate.workload import StepSpec, trace_step
from torch_footprint.hardware import get

# (label, model, batch, precision, tf32, layout, gpu, published img/s, source)
POINTS = [
    ("ResNet-50 TF32, DALI", "resnet50", 256, "fp32", True, "NCHW", "a100-sxm-80gb", 938, "DLE"),
    ("ResNet-50 AMP, DALI", "resnet50", 256, "fp16-mixed", None, "NHWC", "a100-sxm-80gb", 2470, "DLE"),
    ("ResNet-50 FP32, DALI", "resnet50", 256, "fp32", None, "NCHW", "v100-sxm2-16gb", 367, "DLE"),
    ("ResNet-50 AMP, DALI", "resnet50", 256, "fp16-mixed", None, "NHWC", "v100-sxm2-16gb", 1200, "DLE"),
    ("ResNet-50 FP32, DALI", "resnet50", 256, "fp32", None, "NCHW", "v100-sxm2-32gb", 356, "DLE"),
    ("ResNet-50 AMP, DALI", "resnet50", 256, "fp16-mixed", None, "NHWC", "v100-sxm2-32gb", 1156, "DLE"),
    ("ResNet-50 FP32, synthetic", "resnet50", 128, "fp32", None, "NCHW", "v100-sxm2-16gb", 128 / 0.34237, "SKB"),
    ("ResNet-50 AMP, synthetic", "resnet50", 128, "fp16-mixed", None, "NCHW", "v100-sxm2-16gb", 128 / 0.15220, "SKB"),
    ("ResNet-50 AMP, synthetic", "resnet50", 128, "fp16-mixed", None, "NHWC", "v100-sxm2-16gb", 128 / 0.11093, "SKB"),
]


def main() -> None:
    print(f"{'point':26s} {'batch':>5s} {'layout':6s} {'GPU':15s} {'published':>9s} {'predicted':>9s} {'error':>7s}"
          "  source")
    traces: dict[tuple[str, int, str], object] = {}
    errs = []
    for label, model, batch, precision, tf32, layout, gpu, published, src in POINTS:
        t0 = time.perf_counter()
        key = (model, batch, precision)
        if key not in traces:  # SGD with momentum, as both sources train
            traces[key] = trace_step(model, None, StepSpec(train=True, optimizer="momentum", precision=precision),
                                     batch=batch)[0]
        pred = estimate_latency(traces[key], get(gpu), tf32=tf32)  # type: ignore[arg-type]
        rate = batch / pred.time_s
        err = (rate - published) / published
        errs.append(err)
        print(f"{label:26s} {batch:5d} {layout:6s} {gpu:15s} {published:9,.0f} {rate:9,.0f} {100 * err:+6.1f}%  "
              f"[{src}] ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"\nmedian |error| {100 * statistics.median(abs(e) for e in errs):.1f}%, "
          f"worst {100 * max(abs(e) for e in errs):.1f}% over {len(errs)} published points")


if __name__ == "__main__":
    main()
