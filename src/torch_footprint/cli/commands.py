"""The commands table: each verb's module in this package and its one-line summary, in the
order ``footprint --help`` lists them."""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "profile": ("profile", "parameters, FLOPs and MACs by module and operator"),
    "memory": ("memory", "peak memory of inference or a training step, by category"),
    "bench": ("bench", "latency and throughput measured on this machine"),
    "gpus": ("gpus", "the accelerator database: memory, bandwidth, dense TFLOPS per dtype, TDP"),
    "fit": ("fit", "which accelerator runs this model: fits, largest batch, predicted speed"),
    "plan": ("plan", "which training layout to run on N GPUs: data, tensor and pipeline parallelism, "
                     "micro-batches, checkpointing and sharding searched, a launch configuration to paste; with "
                     "--serve, the cheapest serving fleet for a request rate under latency targets"),
    "predict": ("predict", "roofline latency of one model on one accelerator, by module and operator"),
    "watch": ("watch", "run or follow a real job: memory, utilisation and power beside the prediction"),
    "calibrate": ("calibrate", "measure this machine's matmul FLOP/s, copy bandwidth and call overhead"),
    "llm": ("llm", "what a language model needs to serve: KV cache, quantized weights, time to first token, "
                   "tokens/s, on every accelerator"),
    "show": ("show", "render a profile saved with --json, without running the model"),
    "report": ("report", "a self-contained HTML report with plots: memory timeline, roofline, modules, "
                         "accelerators"),
    "diff": ("diff", "what changed between two saved results, by metric and by module"),
    "check": ("check", "a model or saved result against a budget file; exit 1 when over budget"),
    "schema": ("schema", "print the JSON Schema of every file footprint writes"),
}

EXAMPLES = """examples:
  footprint profile resnet50
  footprint profile vit_b_16 --input 8,3,224,224 --train --depth 2
  footprint profile timm:convnext_tiny
  footprint profile hf:gpt2 --input-ids 1,1024
  footprint profile ./my_model.py:build --input 1,3,64,64 --input 1,10 --precision bf16
  footprint profile resnet50 --by operator --json out.json
  footprint show out.json --by operator
"""
