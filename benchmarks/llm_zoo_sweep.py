"""Sweep every causal language model of transformers through `footprint llm`, against real runs.

For every model type in transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, built on the CPU
with random weights from the config class's defaults shrunk as ``model_zoo_sweep.py`` shrinks
them (2 layers, hidden 64, 4 heads, 4 experts; where the real run fails, widths kept, then 12
layers of the small widths, for hybrids whose first attention layer comes late; a sliding
window, where the config has one, cut to 8 tokens so that the longer runs below pass it):

* the real model, run as generate() runs it (the cache it builds itself when given none):
  a prefill of P = 16 tokens and two decode steps, and a separate prefill of L = 40 tokens and
  one decode step, attention run as matmuls (``eager``: FlopCounterMode has no formula for
  the CPU's fused attention kernel). The bytes its cache holds (every tensor the cache object
  reaches, each storage once) after the decode steps, at P + 1, P + 2 and L + 1 tokens;
  FlopCounterMode's FLOPs of the decode steps at cache lengths P and L. (Right after a
  prefill longer than a sliding window, transformers' windowed layer still holds the whole
  prompt's keys and values, as a slice of them, until the next step replaces them: recorded,
  not compared; the prefill's own activation peak holds those tensors anyway.)
* ``trace_serving`` (what ``footprint llm`` builds on, meta tensors, batch 1, P tokens): the
  cache bytes it predicts at the same four lengths, the decode step's MACs at cache lengths
  P and L as transformers runs it (``decode_at(length, engine=False)``), parameters;
* ``torch_footprint.llm`` end to end on one accelerator (h100-sxm), and every weight scheme
  with an fp8 cache priced on the same trace.

Checks, per model whose real prefill and decode run:
* cache bytes equal the real cache's at the three lengths (sliding windows, fixed-size states
  and models with no growing cache included). Multi-head latent attention layers are the
  exception by design: footprint counts the latent engines cache, (kv_lora_rank +
  qk_rope_head_dim) values per token and layer (worked from the config here), where
  transformers keeps the decompressed keys and values;
* the decode line: FlopCounterMode's FLOPs from cache length P to L grow by 2x what
  footprint's MACs grow by (the slope, which is what two traced steps extrapolate); not
  comparable where the model keeps its fused attention kernel whatever it is asked;
* parameters equal ``sum(p.numel())``;
* ``tfp.llm`` returns a result, and so does every weight scheme; or it declines with a
  FootprintError (one clear line).

    python benchmarks/llm_zoo_sweep.py [--mapping causal-lm|image-text-to-text] [--models a,b] [--limit N]
        [--timeout S] [--workers N] [--out DIR]

``--mapping image-text-to-text``: the vision-language models (``AutoModelForImageTextToText``)
that are not also causal language models, served text only, as a text prompt to a
multimodal checkpoint is. Writes ``benchmarks/results/llm_zoo_sweep.{md,json}`` (or
``llm_zoo_sweep_image_text.{md,json}``), whole or not at all.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_zoo_sweep import (  # noqa: E402 - the benchmarks folder is not a package
    ROOT,
    Record,
    _uses_mrope,
    error_text,
    error_where,
    footprint_ready,
    footprint_source,
    normalise,
    shrink_config,
    sweep,
    write_whole,
)

PROMPT, LONG, WINDOW, DEEP = 16, 40, 8, 12
WINDOW_KEYS = ("sliding_window", "attention_window_size", "window_size")
GPU = "h100-sxm"


MAPPINGS = {"causal-lm": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", ""),
            "image-text-to-text": ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "AutoModelForImageTextToText",
                                   "_image_text")}


def build(model_type: str, level: str, mapping: str = "causal-lm") -> tuple[Any, list[str]]:
    """The ``mapping`` model of ``model_type`` (a causal language model, or an image-text-to-text
    model served text only) from its shrunk default config (float32, CPU)."""
    import transformers
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = AutoConfig.for_model(model_type)
    if level == "deep":  # small widths, up to DEEP layers: a hybrid's first attention layer may come late
        changed = shrink_config(cfg, "small", mrope=_uses_mrope(cfg), layers=DEEP)
    else:
        changed = shrink_config(cfg, level, mrope=_uses_mrope(cfg))
    for c in [cfg, *(getattr(cfg, k) for k in ("text_config", "decoder") if hasattr(cfg, k))]:
        for k in WINDOW_KEYS:
            v = getattr(c, k, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > WINDOW:
                setattr(c, k, WINDOW)
                changed.append(f"{k}={WINDOW}")
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = True
    model = getattr(transformers, MAPPINGS[mapping][1]).from_config(cfg).float().eval()
    return model, changed


def cache_bytes(obj: Any) -> int:
    """Bytes of every tensor ``obj`` (a cache) reaches through attributes, lists, tuples and
    dicts, each storage once; 0-d tensors (counters) left out."""
    import torch

    seen_obj: set[int] = set()
    seen_storage: set[tuple[int, int]] = set()
    total = 0

    def walk(o: Any, depth: int) -> None:
        nonlocal total
        if depth > 6 or id(o) in seen_obj:
            return
        seen_obj.add(id(o))
        if isinstance(o, torch.Tensor):
            if o.dim() > 0 and o.numel():
                key = (o.untyped_storage().data_ptr(), o.untyped_storage().nbytes())
                if key not in seen_storage:
                    seen_storage.add(key)
                    total += o.untyped_storage().nbytes()
            return
        if isinstance(o, (list, tuple)):
            for v in o:
                walk(v, depth + 1)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v, depth + 1)
        elif hasattr(o, "__dict__") and not isinstance(o, (type, torch.nn.Module)) \
                and type(o).__module__.startswith("transformers"):
            for v in vars(o).values():
                walk(v, depth + 1)

    walk(obj, 0)
    return total


def _cache_of(out: Any) -> Any:
    return next((getattr(out, k) for k in ("cache", "past_key_values", "cache_params")
                 if getattr(out, k, None) is not None), None)


def real_run(model: Any, vocab: int) -> dict[str, Any]:
    """The real model, as generate() runs it: cache bytes after P, P + 1, P + 2 and L tokens and
    FlopCounterMode's FLOPs of the decode steps at cache lengths P and L."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params = inspect.signature(model.forward).parameters
    kw = next((k for k in ("cache", "past_key_values", "cache_params") if k in params), None)
    if kw is None:
        raise RuntimeError("forward takes no cache")
    gen = torch.Generator().manual_seed(0)
    out: dict[str, Any] = {}

    def prefill(n: int) -> tuple[Any, Any]:
        ids = torch.randint(0, vocab, (1, n), generator=gen)
        o = model(input_ids=ids, use_cache=True)
        cache = _cache_of(o)
        if cache is None:
            raise RuntimeError("the prefill returned no cache")
        return cache, o.logits[:, -1:].argmax(-1)

    def decode(cache: Any, token: Any, count: bool) -> tuple[Any, int | None]:
        if count:
            with FlopCounterMode(display=False) as fc:
                o = model(input_ids=token, use_cache=True, **{kw: cache})
            flops = int(fc.get_total_flops())
        else:
            o, flops = model(input_ids=token, use_cache=True, **{kw: cache}), None
        return o.logits[:, -1:].argmax(-1), flops

    was = model.config._attn_implementation
    try:  # attention as matmuls, which FlopCounterMode counts (it has no formula for the CPU's fused kernel)
        model.set_attn_implementation("eager")
    except Exception:
        pass
    out["attention"] = model.config._attn_implementation  # a model may keep its fused kernel (falcon)
    try:
        with torch.no_grad():
            cache, tok = prefill(PROMPT)
            out["cache_class"] = type(cache).__name__
            out["kv_after_prefill"] = {str(PROMPT): cache_bytes(cache)}
            tok, out["fc_decode_p"] = decode(cache, tok, True)
            out["kv"] = {str(PROMPT + 1): cache_bytes(cache)}
            tok, _ = decode(cache, tok, False)
            out["kv"][str(PROMPT + 2)] = cache_bytes(cache)
            cache, tok = prefill(LONG)
            out["kv_after_prefill"][str(LONG)] = cache_bytes(cache)
            tok, out["fc_decode_l"] = decode(cache, tok, True)
            out["kv"][str(LONG + 1)] = cache_bytes(cache)
    finally:
        if out["attention"] != was:
            model.set_attn_implementation(was)
    return out


def latent_per_token(model: Any) -> int | None:
    """Multi-head latent attention: (kv_lora_rank + qk_rope_head_dim) x 4 bytes per token and
    latent layer, from the config (None for other models)."""
    cfg = model.config.get_text_config(decoder=True)
    rank, rope = getattr(cfg, "kv_lora_rank", None), getattr(cfg, "qk_rope_head_dim", None)
    if not (isinstance(rank, int) and isinstance(rope, int) and rank > 0):
        return None
    layers = sum(1 for m in model.modules() if hasattr(m, "kv_a_proj_with_mqa")
                 and isinstance(getattr(m, "layer_idx", None), int))
    return layers * (rank + rope) * 4 if layers else None


def run_llm(lib: str, name: str, send: Callable[[Record], None]) -> Record:
    """One model type: build, run for real, trace with footprint, compare (module docstring)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rec: Record = {"lib": lib, "name": name, "built": False, "real_ok": False, "stage": "build"}
    send(rec)
    model = None
    for level in ("small", "layers", "deep"):
        t = time.perf_counter()
        try:
            model, changed = build(name, level, lib)
        except Exception as e:
            rec.setdefault("build_errors", []).append(f"{level}: {error_text(e)[:200]}")
            continue
        rec.update(built=True, config=level, changed=changed[:30], build_s=round(time.perf_counter() - t, 2),
                   cls=type(model).__name__, params_model=sum(p.numel() for p in model.parameters()),
                   encoder_decoder=bool(getattr(model.config, "is_encoder_decoder", False)))
        cfg = model.config.get_text_config(decoder=True)
        vocab = int(getattr(cfg, "vocab_size", 0) or 0)
        rec["stage"] = "real"
        send(rec)
        try:
            rec["real"] = real_run(model, vocab)
            rec["real_ok"] = True
            rec.pop("real_error", None)
            break
        except Exception as e:
            rec.update(real_ok=False, real_error=error_text(e)[:300], real_where=error_where(e))
    if not rec["built"]:
        rec["stage"] = "done"
        return rec

    from torch_footprint.errors import FootprintError

    rec["stage"] = "trace"
    send(rec)
    t = time.perf_counter()
    try:
        from torch_footprint.estimate.llm.trace import trace_serving

        st = trace_serving(model, batch=1, prompt=PROMPT)
        lengths = (PROMPT, PROMPT + 1, PROMPT + 2, LONG, LONG + 1)
        rec.update(fp_ok=True, fp_params=int(st.params),
                   fp_kv={str(n): int(st.kv_bytes(n)) for n in lengths},
                   fp_layers=[f"{la.kind}:{la.per_token}/{la.fixed}/{la.cap}" for la in st.layers],
                   fp_macs_p=sum(e.macs for e in st.decode_at(PROMPT, engine=False).events),
                   fp_macs_l=sum(e.macs for e in st.decode_at(LONG, engine=False).events),
                   fp_latent_per_token=sum(la.per_token for la in st.layers if la.kind == "latent") or None,
                   fp_notes=[" ".join(str(n).split())[:160] for n in st.notes][:4])
    except Exception as e:
        rec.update(fp_ok=False, fp_error=error_text(e)[:300], fp_where=error_where(e),
                   fp_declined=isinstance(e, FootprintError))
    rec["fp_s"] = round(time.perf_counter() - t, 2)
    rec["latent_expected"] = latent_per_token(model)

    rec["stage"] = "llm"
    send(rec)
    try:
        import torch_footprint as tfp

        res = tfp.llm(model, prompt=PROMPT, output=8, batch=1, gpu=GPU)
        row = res.rows[0]
        rec.update(llm_ok=True, llm_fits=bool(getattr(row, "fits", True)))
    except Exception as e:
        rec.update(llm_ok=False, llm_error=error_text(e)[:300], llm_where=error_where(e),
                   llm_declined=isinstance(e, FootprintError))
    if rec.get("fp_ok") and rec.get("llm_ok"):  # every weight scheme and an fp8 cache, on the same trace
        from torch_footprint.estimate.llm.pricing import Priced, serve
        from torch_footprint.estimate.llm.quantization import SCHEMES, kv_scheme, weight_scheme
        from torch_footprint.hardware.catalog import get

        failed = {}
        for name in SCHEMES:
            try:
                serve(st, Priced(batch=1, prompt=PROMPT, output=8, weights=weight_scheme(name),
                                 kv_bytes=kv_scheme("fp8"), kv_name="fp8"), [get(GPU)], max_context=None)
            except Exception as e:
                failed[name] = error_text(e)[:160]
        rec.update(schemes_ok=not failed, schemes_failed=failed)
    rec["stage"] = "done"
    return rec


# =========================================================================== verdicts

def verdicts(rec: Record) -> dict[str, bool | None]:
    """Per check: True (agrees), False (disagrees), None (not comparable)."""
    out: dict[str, bool | None] = {"kv": None, "slope": None, "params": None, "llm": None}
    if not rec.get("fp_ok"):
        if rec.get("real_ok") and not (rec.get("encoder_decoder") and rec.get("fp_declined")):
            out["llm"] = False  # an encoder-decoder model declined is not a failure: llm serves decoders
        return out
    out["params"] = rec["fp_params"] == rec.get("params_model")
    out["llm"] = bool(rec.get("llm_ok")) and rec.get("schemes_ok", True)
    if not rec.get("real_ok"):
        return out
    real = rec["real"]
    if rec.get("latent_expected"):
        out["kv"] = rec.get("fp_latent_per_token") == rec["latent_expected"]
    else:
        out["kv"] = all(rec["fp_kv"][k] == real["kv"][k] for k in real["kv"])
    if real.get("attention") != "eager":  # FlopCounterMode cannot see the CPU's fused attention
        return out
    fc_slope = real["fc_decode_l"] - real["fc_decode_p"]
    fp_slope = 2 * (rec["fp_macs_l"] - rec["fp_macs_p"])
    out["slope"] = abs(fc_slope - fp_slope) <= 0.005 * max(abs(fc_slope), abs(fp_slope), 1)
    return out


def line(rec: Record) -> str:
    v = verdicts(rec)

    def mark(x: bool | None) -> str:
        return "ok " if x else ("-- " if x is None else "ERR")

    s = (f"{rec['name'][:28]:28s} build {mark(rec.get('built'))} real {mark(rec.get('real_ok'))} "
         f"trace {mark(rec.get('fp_ok'))} kv {mark(v['kv'])} slope {mark(v['slope'])} params {mark(v['params'])} "
         f"llm {mark(v['llm'])}")
    if v["kv"] is False:
        s += f" | kv real {rec['real']['kv']} fp { {k: rec['fp_kv'][k] for k in rec['real']['kv']} }"
    if v["slope"] is False:
        r = rec["real"]
        s += (f" | FC decode {r['fc_decode_p']}->{r['fc_decode_l']} fp 2xMACs "
              f"{2 * rec['fp_macs_p']}->{2 * rec['fp_macs_l']}")
    err = (rec.get("fp_error") or rec.get("llm_error") or rec.get("real_error")
           or "; ".join(f"{k}: {v}" for k, v in (rec.get("schemes_failed") or {}).items())
           or "; ".join(rec.get("build_errors", [])))
    if err and not (v["kv"] is False or v["slope"] is False):
        s += f" | {err[:120]}"
    return s


def summarise(records: list[Record]) -> dict[str, Any]:
    real = [r for r in records if r.get("real_ok")]
    vs = {r["name"]: verdicts(r) for r in records}

    def count(check: str, among: list[Record]) -> dict[str, int]:
        c = Counter(vs[r["name"]][check] for r in among)
        return {"agree": c[True], "disagree": c[False], "not_comparable": c[None]}

    seq2seq = [r["name"] for r in real if not r.get("fp_ok") and r.get("fp_declined") and r.get("encoder_decoder")]
    declined = [r["name"] for r in real if not r.get("fp_ok") and r.get("fp_declined") and r["name"] not in seq2seq]
    crashed = [r["name"] for r in real if not r.get("fp_ok") and not r.get("fp_declined")]
    fp_where_real_fails = [r["name"] for r in records if r.get("built") and not r.get("real_ok") and r.get("fp_ok")]
    return {
        "models": len(records), "built": sum(bool(r.get("built")) for r in records), "real_runs": len(real),
        "traced_of_real": sum(bool(r.get("fp_ok")) for r in real),
        "kv": count("kv", real), "slope": count("slope", real), "params": count("params", real),
        "llm": count("llm", real),
        "latent_models": [r["name"] for r in real if r.get("latent_expected")],
        "declined_of_real": declined, "crashed_of_real": crashed, "encoder_decoder_declined": seq2seq,
        "traced_where_real_fails": fp_where_real_fails,
        "kv_disagree": [r["name"] for r in real if vs[r["name"]]["kv"] is False],
        "slope_disagree": [r["name"] for r in real if vs[r["name"]]["slope"] is False],
        "params_disagree": [r["name"] for r in real if vs[r["name"]]["params"] is False],
        "llm_fail": [r["name"] for r in real if vs[r["name"]]["llm"] is False],
        "real_failures": dict(Counter(normalise(r.get("real_error") or "?") for r in records
                                      if r.get("built") and not r.get("real_ok")).most_common()),
        "build_failures": dict(Counter(normalise("; ".join(r.get("build_errors", [])) or "?")
                                       for r in records if not r.get("built")).most_common()),
        "cache_classes": dict(Counter(r["real"]["cache_class"] for r in real)),
        "windowed": [r["name"] for r in real
                     if r.get("fp_ok") and any(not x.endswith("/None") for x in r["fp_layers"])],
        "fixed_state": [r["name"] for r in real if r.get("fp_ok") and any(x.split(":")[1].startswith("0/")
                                                                        and not x.endswith("/0/None")
                                                                        for x in r["fp_layers"])],
    }


def headline(s: dict[str, Any]) -> list[str]:
    n = s["real_runs"]

    def frac(check: str) -> str:
        c = s[check]
        return f"{c['agree']}/{c['agree'] + c['disagree']}"

    return [f"{s['models']} model types, {s['built']} built, {n} whose real prefill and decode run",
            f"footprint traces {s['traced_of_real']}/{n} of those ({len(s['declined_of_real'])} declined with a "
            f"FootprintError, {len(s['crashed_of_real'])} other errors"
            + (f"; {len(s['encoder_decoder_declined'])} encoder-decoder models declined by design"
               if s["encoder_decoder_declined"] else "") + ")",
            f"cache bytes equal the real cache at {PROMPT + 1}, {PROMPT + 2} and {LONG + 1} tokens: {frac('kv')} "
            f"(latent attention against its closed form: {len(s['latent_models'])} models)",
            f"decode line (FLOPs growth from cache length {PROMPT} to {LONG}) equals FlopCounterMode's: "
            f"{frac('slope')}",
            f"parameters exact: {frac('params')}; tfp.llm returns a result (and so does every weight scheme): "
            f"{frac('llm')}"]


def markdown(s: dict[str, Any], meta: dict[str, Any], records: list[Record]) -> str:
    out = [f"# `footprint llm` over every {meta['mapping']} model of transformers, against real runs", ""]
    out += [f"- {k}: {v}" for k, v in meta.items()]
    out += ["", "## Headline", ""] + [f"- {h}" for h in headline(s)]
    for key, title in (("kv_disagree", "cache bytes disagree"), ("slope_disagree", "decode line disagrees"),
                       ("params_disagree", "parameters disagree"), ("llm_fail", "tfp.llm failed"),
                       ("declined_of_real", "declined (FootprintError) though the real model runs"),
                       ("crashed_of_real", "other errors though the real model runs"),
                       ("encoder_decoder_declined", "encoder-decoder models, declined by design (llm serves decoders)"),
                       ("latent_models", "latent attention (checked against the closed form)"),
                       ("windowed", "sliding-window layers (capped)"), ("fixed_state", "fixed-size state layers"),
                       ("traced_where_real_fails", "traced, though the real run fails")):
        out += ["", f"## {title}: {len(s[key])}", "", ", ".join(s[key]) or "none"]
    out += ["", "## real caches", ""] + [f"- {k}: {v}" for k, v in s["cache_classes"].items()]
    out += ["", "## why the real run fails (not counted)", ""]
    out += [f"- {n}: `{c}`" for c, n in s["real_failures"].items()] or ["none"]
    out += ["", "## build failures", ""] + ([f"- {n}: `{c}`" for c, n in s["build_failures"].items()] or ["none"])
    out += ["", "## per model", "", "```"] + [line(r) for r in records] + ["```"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated model types")
    ap.add_argument("--mapping", choices=list(MAPPINGS), default="causal-lm",
                    help="which auto class: causal language models (default), or image-text-to-text models "
                         "(not also causal language models) served text only")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-gb", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    from transformers.models.auto import modeling_auto

    mapping_names = getattr(modeling_auto, MAPPINGS[args.mapping][0])
    names = sorted(mapping_names)
    if args.mapping != "causal-lm":  # the causal language models are the default sweep's
        names = [n for n in names if n not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES]
    if args.models:
        wanted = {m.strip() for m in args.models.split(",")}
        names = [n for n in names if n in wanted]
    names = names[: args.limit]
    print(f"{len(names)} {args.mapping} model types", flush=True)
    source = footprint_source(footprint_ready())
    t0 = time.perf_counter()
    records = sweep([(args.mapping, n) for n in names], args.workers, args.timeout, args.max_gb, runner=run_llm,
                    describe=line)
    wall = time.perf_counter() - t0
    records.sort(key=lambda r: r["name"])
    import torch
    import transformers

    s = summarise(records)
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if argv is None else str(argv)
    meta = {"mapping": f"{args.mapping} ({MAPPINGS[args.mapping][0]}"
                       + (", less the causal language models)" if args.mapping != "causal-lm" else ")"),
            "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
            "footprint": source, "command": f"`{command}` ({wall / 60:.1f} min, {time.strftime('%Y-%m-%d %H:%M')})",
            "machine": f"{os.cpu_count()} CPU cores, {args.workers} models at once, 1 torch thread each",
            "set-up": f"prefill {PROMPT} tokens then two decode steps; a prefill of {LONG} then one decode step; "
                      f"batch 1; float32; sliding windows cut to {WINDOW} tokens"}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "llm_zoo_sweep" + MAPPINGS[args.mapping][2]
    write_whole(args.out / f"{stem}.json", json.dumps({"meta": meta, "summary": s, "records": records},
                                                            indent=1, default=str))
    write_whole(args.out / f"{stem}.md", markdown(s, meta, records))
    print()
    for h in headline(s):
        print(h)
    for key in ("kv_disagree", "slope_disagree", "params_disagree", "llm_fail", "crashed_of_real",
                "declined_of_real"):
        if s[key]:
            print(f"{key}: {', '.join(s[key])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
