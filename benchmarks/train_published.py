"""Single-GPU training throughput predicted against published measurements.

Each point: a published single-GPU PyTorch training throughput with its set-up (model,
batch, precision, memory layout, data); footprint traces the training step (forward,
loss, backward, optimizer) at that batch and precision and times it with the roofline on
the GPU's database row (datasheet ceilings, default efficiencies) in the point's memory
layout: samples per second = batch / step time.

    python benchmarks/train_published.py

Sources (each figure copied as printed):
  [DLE-RN50] NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5, "Training performance
        results" (pytorch-21.03 NGC container, DALI data loading, 1 GPU, SGD with momentum;
        AMP runs channels-last, TF32/FP32 runs NCHW; the table prints no batch size: 256 is
        assumed, the launcher's DGXA100 and DGX1V configurations),
        https://github.com/NVIDIA/DeepLearningExamples/blob/291f0d02e815b148fa5c2b81bf07aa3552142895/PyTorch/Classification/ConvNets/resnet50v1.5/README.md
  [SKB] sandeepkumar-skb/pytorch_experiments, torchvision_exp/README.md: torchvision
        ResNet50 training on a Tesla V100-SXM2 at batch 128, synthetic data, iteration time
        by layout and precision, https://github.com/sandeepkumar-skb/pytorch_experiments/blob/master/torchvision_exp/README.md
  [TIMM] huggingface/pytorch-image-models, results/benchmark-train-amp-{nchw,nhwc}-pt112-cu113-rtx3090.csv
        (timm benchmark.py: synthetic data, AMP fp16 autocast, SGD momentum 0.9, PyTorch 1.12,
        CUDA 11.3, RTX 3090; train_samples_per_sec at the printed train_batch_size),
        https://github.com/huggingface/pytorch-image-models/tree/aa4b5850c1543fa488abf260f18390eda46cf85d/results
  [DLE-BERT] NVIDIA DeepLearningExamples, PyTorch BERT, "Fine-tuning NVIDIA DGX A100 (8x A100
        80GB)" and "Fine-tuning NVIDIA DGX-1 With 32G" SQuAD tables, 1-GPU rows (pytorch:21.11
        NGC container; BERT-large, sequence 384, fused Adam; A100 batch 32 TF32 and FP16;
        V100 batch 8 FP32 and 16 FP16),
        https://github.com/NVIDIA/DeepLearningExamples/blob/729963dd47e7c8bd462ad10bfac7a7b0b604e6dd/PyTorch/LanguageModeling/BERT/README.md
  [GPT2] J. Schwartz, "Training GPT2 from 650 to 3 million tokens per second" (2025): GPT-2
        124M written in PyTorch after nanoGPT, 1 sequence of 1,024 tokens per step, AdamW,
        eager, explicit (not fused) attention; RTX 3090 and H100 fp32 (sections 4.2-4.3),
        H100 bf16 autocast (7.1.1) and TF32 alone (7.1.5's table); tokens per second,
        https://github.com/Jjschwartz/jjschwartz.github.io/blob/30c7a5586b8d7e1571f15f588bd7d837d406b17e/content/blog/2025-07-13-scaling-gpt2.md
        (the H100's 67 TFLOPS fp32 it quotes is the SXM part's).

Below the table, not counted: ResNet-50 steps measured on our own H100 SXM (torch 2.11,
cuDNN 9; benchmarks/results/train-kernels-h100-resnet50.txt: synthetic data, SGD with
momentum, foreach as torch's default on CUDA), whose kernel profile sourced the mechanisms
of estimate/gpu_kernels.py.

footprint does not see the data loader nor the fused kernels of NVIDIA's BERT (apex
LayerNorm, fused bias-GeLU); what remains of the error is printed, not tuned away.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from torch_footprint.estimate.kernels.roofline import estimate_latency
from torch_footprint.estimate.workload import trace_step
from torch_footprint.hardware import get
from torch_footprint.settings import Training, Workload
from torch_footprint.trace import Trace

CONFIGS = Path(__file__).parent / "configs"
BERT_LARGE = str(CONFIGS / "bert-large-uncased-squad")
GPT2 = str(CONFIGS / "gpt2-eager")  # explicit attention, as the published runs


@dataclass(frozen=True)
class Point:
    label: str
    model: str
    batch: int
    precision: str  # the workload's precision
    tf32: bool | None  # None: PyTorch's defaults (convolutions TF32, matmuls fp32)
    layout: str  # NCHW or NHWC (channels-last); sequence models: "-"
    gpu: str
    published: float  # samples (images, sequences) per second; tokens for GPT-2
    optimizer: str
    source: str
    seq: int = 0  # sequence length of a language model (0: the model's image input)
    per_token: bool = False  # published figure in tokens per second


RN50, VITB = "resnet50", "timm:vit_base_patch16_224"
POINTS = [
    Point("ResNet-50 TF32, DALI", RN50, 256, "fp32", True, "NCHW", "a100-sxm-80gb", 938, "momentum", "DLE-RN50"),
    Point("ResNet-50 AMP, DALI", RN50, 256, "fp16-mixed", None, "NHWC", "a100-sxm-80gb", 2470, "momentum", "DLE-RN50"),
    Point("ResNet-50 FP32, DALI", RN50, 256, "fp32", None, "NCHW", "v100-sxm2-16gb", 367, "momentum", "DLE-RN50"),
    Point("ResNet-50 AMP, DALI", RN50, 256, "fp16-mixed", None, "NHWC", "v100-sxm2-16gb", 1200, "momentum", "DLE-RN50"),
    Point("ResNet-50 FP32, DALI", RN50, 256, "fp32", None, "NCHW", "v100-sxm2-32gb", 356, "momentum", "DLE-RN50"),
    Point("ResNet-50 AMP, DALI", RN50, 256, "fp16-mixed", None, "NHWC", "v100-sxm2-32gb", 1156, "momentum", "DLE-RN50"),
    Point("ResNet-50 FP32, synthetic", RN50, 128, "fp32", None, "NCHW", "v100-sxm2-16gb", 128 / 0.34237, "momentum",
          "SKB"),
    Point("ResNet-50 AMP, synthetic", RN50, 128, "fp16-mixed", None, "NCHW", "v100-sxm2-16gb", 128 / 0.15220,
          "momentum", "SKB"),
    Point("ResNet-50 AMP, synthetic", RN50, 128, "fp16-mixed", None, "NHWC", "v100-sxm2-16gb", 128 / 0.11093,
          "momentum", "SKB"),
    Point("ResNet-50 AMP, synthetic", RN50, 512, "fp16-mixed", None, "NCHW", "rtx-3090", 826.06, "momentum", "TIMM"),
    Point("ResNet-50 AMP, synthetic", RN50, 512, "fp16-mixed", None, "NHWC", "rtx-3090", 1218.01, "momentum", "TIMM"),
    Point("ViT-B/16 AMP, synthetic", VITB, 192, "fp16-mixed", None, "NCHW", "rtx-3090", 390.86, "momentum", "TIMM"),
    Point("BERT-L SQuAD TF32", BERT_LARGE, 32, "fp32", True, "-", "a100-sxm-80gb", 61.5, "adamw-fused", "DLE-BERT",
          seq=384),
    Point("BERT-L SQuAD AMP", BERT_LARGE, 32, "fp16-mixed", None, "-", "a100-sxm-80gb", 110.5, "adamw-fused",
          "DLE-BERT", seq=384),
    Point("BERT-L SQuAD FP32", BERT_LARGE, 8, "fp32", None, "-", "v100-sxm2-32gb", 12, "adamw-fused", "DLE-BERT",
          seq=384),
    Point("BERT-L SQuAD AMP", BERT_LARGE, 16, "fp16-mixed", None, "-", "v100-sxm2-32gb", 52, "adamw-fused",
          "DLE-BERT", seq=384),
    Point("GPT-2 124M FP32", GPT2, 1, "fp32", False, "-", "rtx-3090", 11381, "adamw-foreach", "GPT2", seq=1024,
          per_token=True),
    Point("GPT-2 124M FP32", GPT2, 1, "fp32", False, "-", "h100-sxm", 27026, "adamw-foreach", "GPT2", seq=1024,
          per_token=True),
    Point("GPT-2 124M TF32", GPT2, 1, "fp32", True, "-", "h100-sxm", 46632, "adamw-foreach", "GPT2", seq=1024,
          per_token=True),
    Point("GPT-2 124M bf16 autocast", GPT2, 1, "bf16-mixed", False, "-", "h100-sxm", 42871, "adamw-foreach",
          "GPT2", seq=1024, per_token=True),
]

# measured here, not published: benchmarks/results/train-kernels-h100-resnet50.txt
OURS = [
    Point("ResNet-50 bf16 autocast", RN50, 256, "bf16-mixed", None, "NCHW", "h100-sxm", 256 / 0.1146,
          "momentum-foreach", "H100-ours"),
    Point("ResNet-50 bf16 autocast", RN50, 256, "bf16-mixed", None, "NHWC", "h100-sxm", 256 / 0.0640,
          "momentum-foreach", "H100-ours"),
    Point("ResNet-50 TF32", RN50, 128, "fp32", None, "NCHW", "h100-sxm", 128 / 0.0710, "momentum-foreach",
          "H100-ours"),
]


def predict(p: Point, traces: dict[tuple[str, int, int, str, str], Trace]) -> float:
    """Samples (tokens, for a per-token figure) per second predicted for ``p``."""
    key = (p.model, p.batch, p.seq, p.precision, p.optimizer)
    if key not in traces:
        inputs = f"input_ids={p.batch},{p.seq}:int64" if p.seq else None
        traces[key] = trace_step(Workload(p.model, inputs, batch=None if p.seq else p.batch, precision=p.precision),
                                 Training(train=True, optimizer=p.optimizer))[0]
    pred = estimate_latency(traces[key], get(p.gpu), tf32=p.tf32, layout="nhwc" if p.layout == "NHWC" else "nchw")
    return p.batch * (p.seq if p.per_token else 1) / pred.time_s


def row(p: Point, rate: float, seconds: float) -> str:
    err = (rate - p.published) / p.published
    return (f"{p.label:26s} {p.batch:5d} {p.layout:6s} {p.gpu:15s} {p.published:9,.0f} {rate:9,.0f} "
            f"{100 * err:+6.1f}%  [{p.source}] ({seconds:.0f} s)")


def main() -> None:
    print(f"{'point':26s} {'batch':>5s} {'layout':6s} {'GPU':15s} {'published':>9s} {'predicted':>9s} {'error':>7s}"
          "  source")
    traces: dict[tuple[str, int, int, str, str], Trace] = {}
    errs = []
    for p in POINTS:
        t0 = time.perf_counter()
        rate = predict(p, traces)
        errs.append((rate - p.published) / p.published)
        print(row(p, rate, time.perf_counter() - t0), flush=True)
    print(f"\nmedian |error| {100 * statistics.median(abs(e) for e in errs):.1f}%, "
          f"worst {100 * max(abs(e) for e in errs):.1f}% over {len(errs)} published points "
          f"({len({p.gpu.split('-')[0] for p in POINTS})} GPU types)")
    print("\nmeasured on our H100 (not published, not counted above):")
    for p in OURS:
        t0 = time.perf_counter()
        print(row(p, predict(p, traces), time.perf_counter() - t0), flush=True)


if __name__ == "__main__":
    main()
