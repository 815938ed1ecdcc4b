"""The serving simulation against a real continuous-batching run on this CPU: transformers'
own continuous batching (ContinuousBatchingManager: paged cache, chunked prefill under a
token budget) serving a small Llama built here from a config (random weights, nothing
downloaded), at three concurrencies, each a closed loop (a client sends its next request
when its last one ends); beside it, ``footprint llm --simulate`` of the same model, lengths,
clients, token budget and cache page, priced for this CPU from ``footprint calibrate``'s
figures. Printed: output tokens/s, TTFT p50 and TPOT p50, measured and simulated, and the
same model's plain decode step (transformers' forward, no continuous batching) at each batch.

    footprint calibrate --threads 1        # the CPU's rates, once, at the thread count used here
    python benchmarks/serving_sim_real.py [--concurrency 1,4,16] [--requests-per-client 3]

One torch thread: on a machine shared with other work a single thread is disturbed least.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
          "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 4096, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
          "tie_word_embeddings": False}
PAGE, BUDGET = 16, 256


def real(folder: Path, clients: int, n: int, prompt: int, output: int) -> dict[str, float]:
    """A closed loop of ``clients`` over ``n`` requests through transformers' manager."""
    from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder) if (folder / "model.safetensors").exists() else \
        AutoModelForCausalLM.from_config(__import__("transformers").AutoConfig.from_pretrained(folder))
    model.eval()
    gen = GenerationConfig(max_new_tokens=output, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=PAGE, num_blocks=4096, max_batch_tokens=BUDGET,
                                  max_requests_per_batch=max(clients, 1))
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    rng = torch.Generator().manual_seed(1)

    def send() -> None:
        ids = torch.randint(1, CONFIG["vocab_size"] - 1, (prompt,), generator=rng).tolist()
        manager.add_request(ids, max_new_tokens=output, record_timestamps=True)

    warm = 2  # two requests first, untimed (the first calls allocate)
    for _ in range(warm):
        send()
    for _ in range(warm):
        manager.get_result(timeout=600)
    t0 = time.perf_counter()
    for _ in range(min(clients, n)):
        send()
    sent, done = min(clients, n), []
    while len(done) < n:
        r = manager.get_result(timeout=600)
        if r is None:
            raise RuntimeError("transformers' manager returned nothing in 600 s")
        done.append(r)
        if sent < n:
            send()
            sent += 1
    wall = time.perf_counter() - t0
    manager.stop(block=True)
    ttft = [r.timestamps[0] - r.created_time for r in done]
    tpot = [(r.timestamps[-1] - r.timestamps[0]) / (len(r.timestamps) - 1) for r in done]
    return {"tokens_per_s": sum(len(r.generated_tokens) for r in done) / wall,
            "ttft": statistics.median(ttft), "tpot": statistics.median(tpot)}


def eager_step(folder: Path, batch: int, prompt: int, steps: int = 16) -> float:
    """The same model's decode step in plain transformers (its DynamicCache, no continuous
    batching) at ``batch`` after a ``prompt``-token prefill: the median of ``steps`` steps."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).eval()
    ids = torch.randint(1, CONFIG["vocab_size"] - 1, (batch, prompt))
    times = []
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        for _ in range(steps):
            nxt = out.logits[:, -1:].argmax(-1)
            t = time.perf_counter()
            out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def simulated(folder: Path, clients: int, n: int, prompt: int, output: int) -> dict[str, float]:
    from torch_footprint import api

    res = api.llm(str(folder), gpu=("cpu",), engine="vllm", simulate=True, concurrency=clients, num_prompts=n,
                  prompt=prompt, output=output, max_num_batched_tokens=BUDGET, block_size=PAGE,
                  max_num_seqs=max(clients, 1))
    m = res.rows[0].simulation or {}
    return {"tokens_per_s": m["output_tokens_per_s"], "ttft": m["ttft_s"]["p50"], "tpot": m["tpot_s"]["p50"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests-per-client", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--output", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "config.json").write_text(json.dumps(CONFIG))
        print(f"Llama {CONFIG['hidden_size']}x{CONFIG['num_hidden_layers']} layers (random weights, fp32), prompt "
              f"{args.prompt} + output {args.output}, token budget {BUDGET}, page {PAGE}, 1 thread")
        print(f"{'clients':>7} {'requests':>8} | {'tok/s real':>10} {'sim':>8} {'err':>6} | {'TTFT real':>9} "
              f"{'sim':>8} {'err':>6} | {'TPOT real':>9} {'sim':>8} {'err':>6}")
        for c in (int(x) for x in args.concurrency.split(",")):
            n = c * args.requests_per_client
            got = real(folder, c, n, args.prompt, args.output)
            sim = simulated(folder, c, n, args.prompt, args.output)
            cells = []
            for key, scale, fmt in (("tokens_per_s", 1, "{:>10.1f} {:>8.1f}"), ("ttft", 1e3, "{:>7.1f}ms {:>6.1f}ms"),
                                    ("tpot", 1e3, "{:>7.1f}ms {:>6.1f}ms")):
                err = 100 * (sim[key] - got[key]) / got[key]
                cells.append(fmt.format(got[key] * scale, sim[key] * scale) + f" {err:>+5.0f}%")
            print(f"{c:>7} {n:>8} | " + " | ".join(cells), flush=True)
        eager = {c: eager_step(folder, c, args.prompt) for c in (int(x) for x in args.concurrency.split(","))}
        print("for reference, plain transformers' decode step (no continuous batching) at those batches: "
              + ", ".join(f"batch {b} {1e3 * t:.1f} ms" for b, t in eager.items()))


if __name__ == "__main__":
    main()
