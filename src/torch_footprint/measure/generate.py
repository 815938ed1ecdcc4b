"""A language model run for real with its cache: a prefill timed as the time to first token,
then decode steps timed one by one (greedy, each token fed back), with the bench timer."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError
from ..settings import Serving, Workload
from . import contention
from .measured import allocator_peak
from .sampling import RunSampling
from .timer import CpuClock, CudaClock, measure, summarize


def measure_generation(model: nn.Module, *, batch: int, prompt: int, output: int, device: str = "cpu",
                       runs: int = 3, cache_kwarg: str = "past_key_values",
                       prefill_kwargs: dict[str, Any] | None = None,
                       sample_interval: float | None = 0.1) -> dict[str, Any]:
    """Prefill and decode ``model`` (random weights, on ``device``) with its own cache.

    ``prefill_kwargs`` go to the prefill's call only (``logits_to_keep=1``: the last position's
    logits, all a next token needs, as generate() and engines compute).

    Returns the time to first token (a prefill of ``batch`` x ``prompt`` tokens, the bench
    timer's statistics), the time per output token over ``runs`` generations of ``output``
    tokens (every decode step one sample: median and p90), tokens per second and, on CPU,
    the allocator's peak over one generation plus the weights. With ``sample_interval``, the
    timed generations are sampled (:class:`~torch_footprint.measure.sampling.RunSampling`):
    "sampling" holds how busy the device was, memory, power and the energy per generated
    token (each generation's prefill included)."""
    config = model.config
    vocab = int(getattr(config.get_text_config(decoder=True), "vocab_size", 0) or 0)
    if vocab < 1:
        raise FootprintError("the model's config has no vocab_size: cannot make token ids to run it")
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, prompt), generator=gen).to(device)
    cuda = device.startswith("cuda")
    clock = CudaClock() if cuda else CpuClock()
    model.eval()

    def prefill() -> tuple[Any, torch.Tensor]:
        # no cache given: the model builds its own (its cache class, where it has one), as generate() lets it
        out = model(input_ids=ids, use_cache=True, **(prefill_kwargs or {}))
        cache = getattr(out, cache_kwarg, None)
        if cache is None:
            raise FootprintError(f"'{type(model).__name__}' returned no cache from a prefill with use_cache=True")
        return cache, out.logits[:, -1:].argmax(-1)

    def generate(samples: list[float] | None = None) -> None:
        cache, token = prefill()
        for _ in range(output):
            t = clock.start()
            out = model(input_ids=token, use_cache=True, **{cache_kwarg: cache})
            token = out.logits[:, -1:].argmax(-1)
            if samples is not None:
                samples.append(clock.stop(t))

    with torch.inference_mode():
        ttft = measure(prefill, clock, min_reps=5, min_seconds=1.0, warmup=2)
        generate()  # warm-up
        steps: list[float] = []
        watched = RunSampling(device, sample_interval) if sample_interval else None
        before = contention.sample()
        with watched or contextlib.nullcontext():
            for _ in range(runs):
                generate(steps)
        tpot = summarize(steps)
        sampled = None
        if watched is not None:
            sampled = watched.summary(runs * output * batch, item="token")
            if not cuda:  # how busy: this process's CPU time over threads x wall time, as bench reads it
                threads = torch.get_num_threads()
                busy = contention.between(before, contention.sample(), threads)
                sampled["device_busy"] = busy.obtained
                sampled["device_busy_source"] = (f"CPU time of this process over {threads} "
                                                 f"thread{'' if threads == 1 else 's'} x wall time")
        peak = None
        if not cuda:
            weights = sum(p.numel() * p.element_size() for p in model.parameters())
            peak = weights + allocator_peak(generate)
    return {"device": device, "batch": batch, "prompt": prompt, "output": output, "runs": runs,
            "ttft_s": ttft.median, "ttft_p90_s": ttft.p90, "ttft_spread": ttft.spread,
            "tpot_s": tpot.median, "tpot_p90_s": tpot.p90, "tpot_spread": tpot.spread,
            "tokens_per_s_per_request": 1 / tpot.median if tpot.median else None,
            "tokens_per_s": batch / tpot.median if tpot.median else None, "peak_bytes": peak,
            "sampling": sampled}


def measure_model(w: Workload, s: Serving, device: str, progress: Callable[[str], None] | None = None) -> dict:
    """Time ``w``'s language model for real on ``device`` (random weights): its prefill and
    decode as ``s`` asks, in the activations' dtype its weight scheme implies."""
    from ..estimate.llm import DEFAULT_BATCH, DEFAULT_OUTPUT, DEFAULT_PROMPT
    from ..estimate.llm.quantization import activation_dtype, weight_scheme
    from ..estimate.llm.trace import cache_argument, last_logits_only
    from ..sources import prepare
    from ..sources.building import real_weights

    scheme = weight_scheme(s.quant) if s.quant else None
    dtype = activation_dtype(scheme)
    prompt, output = s.prompt or DEFAULT_PROMPT, s.output or DEFAULT_OUTPUT
    if progress:
        progress(f"running the model on {device}: prefill and {output} decode steps")
    with real_weights():
        work = prepare(w.model, "1,1:int64", dtype=dtype, trust_remote_code=w.trust_remote_code)
    m = work.model.to(device)
    return measure_generation(m, batch=w.batch or DEFAULT_BATCH, prompt=prompt, output=output, device=device,
                              cache_kwarg=cache_argument(m), prefill_kwargs=last_logits_only(m))
