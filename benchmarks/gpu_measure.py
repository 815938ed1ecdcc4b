"""Measurements on a GPU, for checking predictions made elsewhere: nothing here predicts.

Each case is timed with CUDA events after a warm-up (the median of the timed repetitions),
and every training case also records torch.cuda.max_memory_allocated over a step, reset
before it. Sections, in order:

* ``infer``: image models at batch 256 as timm's benchmark.py runs them (eval, no_grad,
  cudnn.benchmark): autocast fp16 in NCHW and channels-last, and fp32 (PyTorch's defaults:
  TF32 convolutions, fp32 matmuls);
* ``train``: image models and BERT-base, one step = forward, loss, backward, optimizer step
  (SGD momentum 0.9 or AdamW, foreach), under bf16 or fp16 autocast (fp16 with a GradScaler);
* ``llm_train``: causal language models from benchmarks/configs (random weights): fp32 master
  weights under bf16 autocast, AdamW, with and without activation checkpointing, and pure
  bf16 weights (``--llm-cases`` for others);
* ``attention``: scaled_dot_product_attention at 16k tokens per batch (the FlashAttention
  papers' set-up), head dim 64 and 128, causal or not, forward and forward+backward, with the
  flash back end forced and with PyTorch's own choice;
* ``gemm``: torch.matmul by shape and dtype (bf16, fp16, fp32 with and without TF32, fp8
  through torch._scaled_mm where the GPU has it), square and language-model shapes;
* ``memory``: elementwise add and copy by bytes moved, layer_norm, rms_norm and softmax rows;
* ``compile``: ResNet-50 inference under torch.compile (autocast fp16, channels-last).

    PYTHONPATH=src python benchmarks/gpu_measure.py [--out FILE.json] [--budget-s 330]
    python benchmarks/gpu_measure.py --smoke --device cpu     # the code paths, tiny sizes

JSON goes to --out, else $OUT/gpu-measure.json, rewritten whole after every section, so a run
stopped by its budget keeps what it measured. Sections are skipped once --budget-s is spent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
IMAGE_MODELS = ["resnet18", "resnet50", "resnet101", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
                "convnext_tiny", "regnet_y_1_6gf", "densenet121", "shufflenet_v2_x1_0", "vit_b_16", "swin_t",
                "timm:resnet50", "timm:convnext_tiny", "timm:efficientnet_b0", "timm:vit_base_patch16_224"]


class Timer:
    """Median time of fn on the device: CUDA events on a GPU, perf_counter elsewhere."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], Any], warmup: int = 3, reps: int = 20, max_s: float = 1.5) -> dict[str, Any]:
        for _ in range(warmup):
            fn()
        self.sync()
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < max_s):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
        return {"median_s": statistics.median(times), "min_s": min(times), "reps": len(times)}


def build_image(name: str) -> torch.nn.Module:
    if name.startswith("timm:"):
        import timm

        return timm.create_model(name.removeprefix("timm:"), pretrained=False)
    import torchvision

    return torchvision.models.get_model(name)


def peak_reset(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak(device: str, base: int) -> int | None:
    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def allocated(device: str) -> int:
    return torch.cuda.memory_allocated() if device.startswith("cuda") else 0


def free(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def infer(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    out = []
    batch, size = (2, 64) if smoke else (256, 224)
    models = IMAGE_MODELS[:2] if smoke else IMAGE_MODELS
    for name in models:
        try:
            out += infer_model(name, dev, timer, batch, size)
        except Exception as e:  # one model's failure keeps the others' measurements
            out.append({"model": name, "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"infer {name}: {type(e).__name__}: {e}", flush=True)
        free(dev)
    return out


def infer_model(name: str, dev: str, timer: Timer, batch: int, size: int) -> list[dict[str, Any]]:
    out = []
    model = build_image(name).to(dev).eval()
    for precision, layout in (("fp32", "nchw"), ("amp-fp16", "nchw"), ("amp-fp16", "nhwc")):
        x = torch.randn(batch, 3, size, size, device=dev)
        if layout == "nhwc":
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        amp = precision.startswith("amp")

        def step(model: torch.nn.Module = model, x: torch.Tensor = x, amp: bool = amp) -> None:
            with torch.no_grad(), torch.autocast(dev.split(":")[0], torch.float16, enabled=amp):
                model(x)

        t = timer(step, warmup=4, reps=25, max_s=1.0)
        out.append({"model": name, "task": "inference", "batch": batch, "input": f"3x{size}x{size}",
                    "precision": precision, "layout": layout, "samples_per_s": batch / t["median_s"], **t})
        print(f"infer {name:26s} {precision:8s} {layout} {out[-1]['samples_per_s']:9.0f} img/s", flush=True)
        del x, step
    return out


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: Any, y: torch.Tensor, dev: str,
               dtype: torch.dtype | None, scaler: Any, loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
               ) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.split(":")[0], dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(x) if not isinstance(x, dict) else model(**x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    return step


def optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    return torch.optim.AdamW(params, lr=1e-4, foreach=True)


AMP = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16, "fp32": None, "bf16": None}  # bf16: the weights' own


def timed_train(case: dict[str, Any], model: torch.nn.Module, x: Any, y: torch.Tensor, dev: str, timer: Timer,
                loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    dtype = AMP[case["precision"]]
    scaler = torch.amp.GradScaler(dev.split(":")[0]) if dtype is torch.float16 else None
    base = allocated(dev)
    case["allocated_at_start"] = base
    opt = optimizer(case["optimizer"], model.parameters())
    step = train_step(model, opt, x, y, dev, dtype, scaler, loss_fn)
    step()  # optimizer states exist from here
    peak_reset(dev)
    base_states = allocated(dev)
    step()
    case["peak_bytes_above_states"] = peak(dev, base_states)
    case["states_bytes"] = allocated(dev) - base if dev.startswith("cuda") else None
    case.update(timer(step, warmup=2, reps=10, max_s=3.0))
    case["samples_per_s"] = case["batch"] / case["median_s"]
    return case


def train(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    cases = [("resnet50", 256, "amp-bf16", "nchw", "sgd"), ("resnet50", 256, "amp-bf16", "nhwc", "sgd"),
             ("resnet50", 256, "amp-fp16", "nhwc", "sgd"), ("resnet50", 128, "fp32", "nchw", "sgd"),
             ("vit_b_16", 64, "amp-bf16", "nchw", "adamw"), ("convnext_tiny", 128, "amp-bf16", "nhwc", "adamw"),
             ("efficientnet_b0", 256, "amp-fp16", "nhwc", "sgd"), ("mobilenet_v2", 256, "amp-fp16", "nhwc", "sgd"),
             ("swin_t", 128, "amp-bf16", "nchw", "adamw"), ("resnet18", 256, "amp-bf16", "nhwc", "sgd")]
    out = []
    for name, batch, precision, layout, opt in cases[:2] if smoke else cases:
        batch, size = (2, 64) if smoke else (batch, 224)
        if smoke and name == "vit_b_16":
            continue
        model = build_image(name).to(dev).train()
        x = torch.randn(batch, 3, size, size, device=dev)
        if layout == "nhwc":
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device=dev)
        case = {"model": name, "task": "training", "batch": batch, "input": f"3x{size}x{size}",
                "precision": precision, "layout": layout, "optimizer": opt}
        out.append(timed_train(case, model, x, y, dev, timer, torch.nn.functional.cross_entropy))
        print(f"train {name:16s} b={batch:4d} {precision:8s} {layout} {case['samples_per_s']:8.0f} img/s "
              f"peak {(case['peak_bytes_above_states'] or 0) / 2**30:6.2f} GiB", flush=True)
        del model, x, y
        free(dev)
    out += bert(dev, timer, smoke)
    return out


def mlm_loss(out: Any, y: torch.Tensor) -> torch.Tensor:
    logits = out.logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def bert(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(num_hidden_layers=2) if smoke else BertConfig()  # BertConfig() is bert-base-uncased's shape
    out = []
    for batch, seq, precision in ((2, 16, "amp-fp16"),) if smoke else ((32, 128, "amp-fp16"), (32, 512, "amp-bf16")):
        model = BertForMaskedLM(cfg).to(dev).train()
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        case = {"model": "hf:google-bert/bert-base-uncased", "task": "training", "batch": batch,
                "input": f"seq={seq}", "precision": precision, "layout": "-", "optimizer": "adamw",
                "attn_implementation": getattr(model.config, "_attn_implementation", None)}
        out.append(timed_train(case, model, {"input_ids": ids}, ids, dev, timer, mlm_loss))
        print(f"train bert-base b={batch} seq={seq} {precision} {case['samples_per_s']:8.0f} seq/s", flush=True)
        del model
        free(dev)
    return out


def lm_loss(out: Any, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), y.flatten())


LLM_CASES: list[tuple[str, int, int, str, bool | str]] = [
    ("llama-1.1b", 4, 2048, "amp-bf16", False), ("llama-1.1b", 4, 2048, "amp-bf16", True),
    ("llama-1.1b", 4, 2048, "bf16", False), ("Qwen--Qwen2.5-0.5B", 8, 1024, "amp-bf16", False),
    ("Qwen--Qwen2.5-0.5B", 8, 1024, "amp-bf16", True)]


def llm_cases(text: str) -> list[tuple[str, int, int, str, bool | str]]:
    """``--llm-cases``: CONFIG:BATCH:SEQ:PRECISION:CHECKPOINTING,... (a folder of benchmarks/configs;
    amp-bf16 or bf16; 0, 1, or core_attn: each attention call checkpointed, Megatron-core's default
    selective recompute, as a user registers it with transformers)."""
    out: list[tuple[str, int, int, str, bool | str]] = []
    for item in text.split(","):
        name, batch, seq, precision, ckpt = item.split(":")
        out.append((name, int(batch), int(seq), precision, ckpt if ckpt == "core_attn" else ckpt == "1"))
    return out


def checkpointed_attention() -> str:
    """Register transformers' SDPA attention wrapped in torch.utils.checkpoint under a name of its own
    (what a user writes to recompute each attention call in the backward), and return that name."""
    from torch.utils.checkpoint import checkpoint
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def recomputed(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(sdpa_attention_forward, *args, use_reentrant=False, **kwargs)

    AttentionInterface.register("sdpa_recomputed", recomputed)
    return "sdpa_recomputed"


def llm_train(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    from transformers import AutoConfig, AutoModelForCausalLM

    out = []
    cases = LLM_CASES
    for cfg_name, batch, seq, precision, ckpt in cases[:2] if smoke else cases:
        cfg = AutoConfig.from_pretrained(ROOT / "benchmarks" / "configs" / cfg_name)
        if smoke:
            cfg.num_hidden_layers, batch, seq = 2, 1, 32
        cfg._attn_implementation = checkpointed_attention() if ckpt == "core_attn" else "sdpa"
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        model.train()
        if ckpt is True:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        case = {"model": cfg_name, "task": "training", "batch": batch, "input": f"seq={seq}",
                "precision": precision, "layout": "-",
                "optimizer": "adamw", "checkpointing": ckpt, "weights_dtype": str(dtype)}
        timed_train(case, model, {"input_ids": ids}, ids, dev, timer, lm_loss)
        case["tokens_per_s"] = batch * seq / case["median_s"]
        out.append(case)
        print(f"llm_train {cfg_name:20s} b={batch} seq={seq} {precision:8s} ckpt={ckpt!s:5s} "
              f"{case['tokens_per_s']:9.0f} tok/s peak {(case['peak_bytes_above_states'] or 0) / 2**30:6.2f} GiB "
              f"states {(case['states_bytes'] or 0) / 2**30:6.2f} GiB", flush=True)
        del model, ids
        free(dev)
    return out


def attention(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    tokens, hidden = (256, 128) if smoke else (16384, 2048)
    cases = [(tokens // seq, hidden // head_dim, head_dim, seq, causal) for head_dim in (64, 128)
             for seq in ((64, 128) if smoke else (512, 1024, 2048, 4096, 8192, 16384)) for causal in (False, True)]
    return attention_cases(dev, timer, cases)


def attention_long(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    """One sequence of 32k to 128k tokens, Llama-3-8B's 32 heads of 128 (as long-context training runs it)."""
    seqs = (256, 512) if smoke else (32768, 65536, 131072)
    return attention_cases(dev, timer, [(1, 4 if smoke else 32, 32 if smoke else 128, seq, True) for seq in seqs]
                           + [(1, 4 if smoke else 32, 32 if smoke else 128, seqs[0], False)])


def attention_cases(dev: str, timer: Timer, cases: list[tuple[int, int, int, int, bool]]) -> list[dict[str, Any]]:
    """SDPA forward and forward+backward for each (batch, heads, head_dim, seq, causal), the flash
    back end forced and PyTorch's own choice."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    dtype = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    out = []
    for b, h, head_dim, seq, causal in cases:
        q, k, v = (torch.randn(b, h, seq, head_dim, device=dev, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        g = torch.randn(b, h, seq, head_dim, device=dev, dtype=dtype)
        for backend in ("flash", "default"):
            def fwd(q: torch.Tensor = q, k: torch.Tensor = k, v: torch.Tensor = v, c: bool = causal) -> Any:
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)

            def fwd_bwd(g: torch.Tensor = g, fwd: Callable[[], Any] = fwd, qkv: tuple = (q, k, v)) -> None:
                for t in qkv:  # new gradients each time: no accumulation kernels in the timing
                    t.grad = None
                fwd().backward(g)

            def ctx(backend: str = backend) -> Any:  # a fresh context manager for each use
                forced = backend == "flash" and dev.startswith("cuda")
                return sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if forced else contextlib.nullcontext()

            try:
                with ctx(), torch.no_grad():
                    tf = timer(fwd, warmup=2, reps=10, max_s=0.5)
                with ctx():
                    tb = timer(fwd_bwd, warmup=2, reps=10, max_s=0.5)
            except RuntimeError as e:
                out.append({"head_dim": head_dim, "seq": seq, "causal": causal, "backend": backend,
                            "error": str(e)[:200]})
                continue
            flops = 4 * b * h * seq * seq * head_dim / (2 if causal else 1)
            out.append({"batch": b, "heads": h, "head_dim": head_dim, "seq": seq, "causal": causal,
                        "backend": backend, "dtype": str(dtype), "fwd_s": tf["median_s"],
                        "fwd_bwd_s": tb["median_s"], "fwd_tflops": flops / tf["median_s"] / 1e12,
                        "bwd_tflops": 2.5 * flops / (tb["median_s"] - tf["median_s"]) / 1e12})
            print(f"attention d={head_dim} s={seq:5d} causal={causal!s:5s} {backend:7s} fwd "
                  f"{out[-1]['fwd_tflops']:6.1f} TFLOP/s bwd {out[-1]['bwd_tflops']:6.1f}", flush=True)
        del q, k, v, g
        free(dev)
    return out


def gemm(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    shapes = [(n, n, n) for n in ((64, 128) if smoke else (256, 512, 1024, 2048, 4096, 8192, 16384))]
    if not smoke:
        shapes += [(m, n, k) for m in (1, 8, 32, 128, 512, 2048, 8192)
                   for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (128256, 4096))]
    out = []
    cuda = dev.startswith("cuda")
    dtypes = [("bf16", torch.bfloat16, None), ("fp16", torch.float16, None), ("fp32", torch.float32, False),
              ("tf32", torch.float32, True)] if cuda else [("fp32", torch.float32, False)]
    for label, dtype, tf32 in dtypes:
        for m, n, k in shapes:
            if label != "bf16" and (m != n or m != k):
                continue  # the other dtypes on the square shapes only
            a = torch.randn(m, k, device=dev, dtype=dtype)
            b = torch.randn(k, n, device=dev, dtype=dtype)
            if tf32 is not None and cuda:
                torch.backends.cuda.matmul.allow_tf32 = tf32
            t = timer(lambda a=a, b=b: torch.matmul(a, b), warmup=3, reps=20, max_s=0.3)
            torch.backends.cuda.matmul.allow_tf32 = False
            out.append({"op": "matmul", "dtype": label, "m": m, "n": n, "k": k, **t,
                        "tflops": 2 * m * n * k / t["median_s"] / 1e12})
            del a, b
    if cuda and hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability() >= (8, 9):
        for m, n, k in [s for s in shapes if s[0] >= 16]:
            try:
                a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
                one = torch.ones((), device=dev)
                t = timer(lambda a=a, b=b: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16),
                          warmup=3, reps=20, max_s=0.3)
                out.append({"op": "scaled_mm", "dtype": "fp8_e4m3", "m": m, "n": n, "k": k, **t,
                            "tflops": 2 * m * n * k / t["median_s"] / 1e12})
            except (RuntimeError, TypeError) as e:
                out.append({"op": "scaled_mm", "m": m, "n": n, "k": k, "error": str(e)[:200]})
                break
    for r in out:
        if "tflops" in r:
            print(f"gemm {r['dtype']:8s} {r['m']:6d}x{r['n']:6d}x{r['k']:6d} {r['tflops']:7.1f} TFLOP/s", flush=True)
    return out


def memory_ops(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    F = torch.nn.functional
    out = []
    sizes = [2**p for p in ((12, 14) if smoke else range(14, 29, 2))]  # elements of each operand
    for dtype in (torch.float32, torch.bfloat16):
        for n in sizes:
            a, b = torch.randn(n, device=dev).to(dtype), torch.randn(n, device=dev).to(dtype)
            c = torch.empty_like(a)
            for op, fn, moved in (("add", lambda a=a, b=b, c=c: torch.add(a, b, out=c), 3),
                                  ("copy", lambda a=a, c=c: c.copy_(a), 2)):
                t = timer(fn, warmup=3, reps=30, max_s=0.2)
                nbytes = moved * n * a.element_size()
                out.append({"op": op, "dtype": str(dtype), "elements": n, "bytes": nbytes, **t,
                            "gbs": nbytes / t["median_s"] / 1e9})
            del a, b, c
    for rows, width in ((64, 256),) if smoke else ((2048, 4096), (16384, 4096), (8192, 8192), (65536, 1024)):
        x = torch.randn(rows, width, device=dev, dtype=torch.bfloat16 if dev.startswith("cuda") else torch.float32)
        w = torch.ones(width, device=dev, dtype=x.dtype)
        for op, fn in (("layer_norm", lambda x=x, w=w: F.layer_norm(x, (x.shape[-1],), w, w)),
                       ("rms_norm", lambda x=x, w=w: F.rms_norm(x, (x.shape[-1],), w)),
                       ("softmax", lambda x=x: torch.softmax(x, -1))):
            t = timer(fn, warmup=3, reps=30, max_s=0.2)
            nbytes = 2 * x.numel() * x.element_size()
            out.append({"op": op, "dtype": str(x.dtype), "rows": rows, "width": width, "bytes": nbytes, **t,
                        "gbs": nbytes / t["median_s"] / 1e9})
    for r in out:
        print(f"memory {r['op']:10s} {r['dtype']:15s} {r['bytes']:>11d} B {r['gbs']:8.1f} GB/s", flush=True)
    return out


def compiled(dev: str, timer: Timer, smoke: bool) -> list[dict[str, Any]]:
    out = []
    batch, size = (2, 64) if smoke else (256, 224)
    for mode in ("eager", "compile"):
        model = build_image("resnet50").to(dev).eval().to(memory_format=torch.channels_last)
        x = torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last)
        fn = torch.compile(model) if mode == "compile" else model
        t0 = time.perf_counter()

        def step(fn: Any = fn, x: torch.Tensor = x) -> None:
            with torch.no_grad(), torch.autocast(dev.split(":")[0], torch.float16):
                fn(x)

        step()
        first = time.perf_counter() - t0
        t = timer(step, warmup=3, reps=30)
        out.append({"model": "resnet50", "task": "inference", "batch": batch, "input": f"3x{size}x{size}",
                    "precision": "amp-fp16", "layout": "nhwc", "framework": f"pytorch-{mode}", "first_call_s": first,
                    "samples_per_s": batch / t["median_s"], **t})
        print(f"compile resnet50 {mode:7s} {out[-1]['samples_per_s']:9.0f} img/s (first call {first:.1f} s)",
              flush=True)
        del model, x, fn
        free(dev)
    return out


SECTIONS: dict[str, Callable[[str, Timer, bool], list[dict[str, Any]]]] = {
    "train": train, "infer": infer, "attention": attention, "gemm": gemm, "llm_train": llm_train,
    "memory": memory_ops, "compile": compiled, "attention_long": attention_long}


def environment(dev: str) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "device": dev, "cudnn": torch.backends.cudnn.version()}
    if dev.startswith("cuda"):
        p = torch.cuda.get_device_properties(dev)
        env.update({"name": p.name, "sms": p.multi_processor_count, "memory_bytes": p.total_memory,
                    "capability": f"{p.major}.{p.minor}", "l2_bytes": getattr(p, "L2_cache_size", None)})
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def write(report: dict[str, Any], path: str) -> None:
    """The whole report or nothing: a temporary file beside it, then renamed."""
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(path)


def run_section(report: dict[str, Any], name: str, section: Callable[[str, Timer, bool], list[dict[str, Any]]],
                args: argparse.Namespace, timer: Timer, timed: bool = False) -> None:
    """One section into ``report["sections"]`` (a section that breaks records its error and must not
    lose the others' measurements; ``timed``: its seconds into ``report["seconds"]``), the report
    written whole."""
    t = time.perf_counter()
    try:
        report["sections"][name] = section(args.device, timer, args.smoke)
    except Exception as e:
        report["sections"][name] = [{"error": f"{type(e).__name__}: {e}"[:500]}]
        print(f"{name}: {type(e).__name__}: {e}", flush=True)
        free(args.device)
    seconds = time.perf_counter() - t
    if timed:
        report.setdefault("seconds", {})[name] = seconds
    write(report, args.out)
    print(f"[{name}: {seconds:.1f} s]", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--budget-s", type=float, default=330.0, help="skip the sections left once this is spent")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, to try the code paths on any device")
    ap.add_argument("--models", help="the image models of the infer section, comma-separated (default: its list)")
    ap.add_argument("--llm-cases", help="the llm_train section's cases (llm_cases; default: LLM_CASES)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu-measure.json"))
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device: give --device cpu --smoke to try the code paths")
    torch.backends.cudnn.benchmark = True
    if args.models:
        IMAGE_MODELS[:] = args.models.split(",")
    if args.llm_cases:
        LLM_CASES[:] = llm_cases(args.llm_cases)
    start = time.perf_counter()
    report: dict[str, Any] = {"environment": environment(args.device), "sections": {}, "skipped": []}
    timer = Timer(args.device)
    for name in args.sections.split(","):
        if time.perf_counter() - start > args.budget_s:
            report["skipped"].append(name)
            continue
        run_section(report, name, SECTIONS[name], args, timer, timed=True)
    write(report, args.out)
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
