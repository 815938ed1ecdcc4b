"""Terminal renderer for ``footprint llm``: formatting only, every number from the result."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .layout import Column, fit_tables
from .terminal import as_text
from .units import binary, count, si
from .watch import sampling_lines

if TYPE_CHECKING:
    from ..estimate.llm.result import LlmResult, LlmRow


def _ms(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
    if ms < 1:
        us = seconds * 1e6
        return f"{us:.0f} us" if us >= 100 else f"{us:.1f} us" if us >= 10 else f"{us:.2f} us"
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms"


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _header(res: LlmResult) -> list[Text]:
    s = res.serving
    setup = f" · {s.gpus} GPUs, tensor parallel {s.tp}" if s.gpus > 1 else ""
    lines = [Text.assemble((res.model, "bold"), f" · batch {s.batch} · prompt {s.prompt:,} + output {s.output:,}"
                           f" tokens{setup}"),
             Text(f"weights {res.weights_scheme} · KV cache {res.kv_scheme}")]
    params = f"parameters {count(res.params)}"
    if res.experts:
        params += (f" ({count(res.active_params)} active per token: {res.experts[1]} of {res.experts[0]} "
                   "experts)")
    layers = len(res.layers)
    lines.append(Text(f"{params} · weights {binary(res.weights_bytes)} · KV cache "
                      f"{binary(res.kv_bytes_per_token)} per token ({layers} layers)"))
    lines.append(Text(f"prefill {si(res.prefill_flops, 'FLOP')} · one decode step {si(res.decode_flops, 'FLOP')}",
                      style="dim"))
    return lines


def table(res: LlmResult, width: int) -> list[Table]:
    """One row per accelerator: memory needed, fits, largest batch and context, speeds."""
    s = res.serving
    cols = [Column("accelerator", "left", wrap=True), Column("needs"), Column("max\nbatch"),
            Column("max\ncontext"), Column("TTFT"), Column("per\ntoken"), Column("tok/s"),
            Column("tok/s at\nmax batch")]
    cells = [[r.accelerator.id, binary(r.total_bytes), f"{r.max_batch:,}" if r.fits else "no fit",
              f"{r.max_context:,}", _ms(r.ttft_s), _ms(r.tpot_s), _rate(s.batch / r.tpot_s) if r.tpot_s else "",
              _rate(r.max_batch_tokens_per_s) if r.max_batch else ""] for r in res.rows]
    return fit_tables(cols, cells, width, row_styles=[None if r.fits else "dim" for r in res.rows])


def _prefill_tokens(res: LlmResult, r: LlmRow) -> str:
    """The tokens the prefill's activations are held for: all the batch's prompts, a chunk of
    each, or the engine's tokens per step."""
    s = res.serving
    each = min(s.prompt, s.chunk or s.prompt)
    budget = (r.vllm.knobs.get("max_num_batched_tokens") or r.vllm.knobs.get("ubatch_size")) if r.vllm else None
    if budget and budget < s.batch * each:
        return f"{int(budget):,} tokens a step (the engine's chunked prefill), transient"
    return f"{s.batch} x {each:,} tokens, transient"


def detail(res: LlmResult, r: LlmRow, width: int) -> list[Table]:
    """One accelerator in full: where the memory goes and how the time is spent."""
    s = res.serving
    per = " per rank" if s.tp > 1 else ""
    cells = [
        ["weights" + per, binary(r.weights_bytes), res.weights_scheme],
        ["KV cache" + per, binary(r.kv_bytes), f"{s.batch} x {s.context:,} tokens"],
        ["prefill activations", binary(r.activation_bytes), _prefill_tokens(res, r)],
        ["runtime", binary(r.overhead_bytes), "CUDA context, cuBLAS workspace" if r.overhead_bytes else ""],
        ["needed", binary(r.total_bytes), f"of {binary(r.capacity)}: {'fits' if r.fits else 'does not fit'} (the "
         "larger of the prefill's peak and the full context's)"],
        ["largest batch", f"{r.max_batch:,}", f"at {s.context:,} tokens"],
        ["longest context", f"{r.max_context:,}", f"at batch {s.batch}"],
    ]
    if r.vllm:
        v = r.vllm
        unit = "blocks" if v.block > 1 else "tokens"
        held = ", ".join(f"{k} {binary(b)}" for k, b in v.held_back.items())
        cells.append([f"{v.title} KV {unit}", f"{v.blocks:,}",
                      f"{v.tokens:,} tokens in {binary(v.capacity_bytes)}; {v.concurrency:.1f}x concurrency at "
                      f"{s.context:,} tokens (held back: {held})"])
        if v.error:
            cells.append(["", "", v.error])
    cells += [["time to first token", _ms(r.ttft_s), f"MFU {100 * r.mfu:.0f}%"],
              ["time per output token", _ms(r.tpot_s),
               f"{_ms(r.tpot_first_s)} first, {_ms(r.tpot_last_s)} last; MBU {100 * r.mbu:.0f}%"]]
    if s.tp > 1:
        cells.append(["all-reduces per step", _ms(r.comm_s), f"2 per layer over {s.tp} ranks"])
    cells += [["tokens/s per request", _rate(1 / r.tpot_s) if r.tpot_s else "", ""],
              ["tokens/s in all", _rate(s.batch / r.tpot_s) if r.tpot_s else "", f"batch {s.batch}"],
              ["request latency", _ms(r.ttft_s + s.output * r.tpot_s), f"{s.output:,} tokens"]]
    if r.max_batch:
        cells.append(["tokens/s at max batch", _rate(r.max_batch_tokens_per_s),
                      f"batch {r.max_batch:,}: output tokens over its prefill and {s.output:,} decode steps"])
    if r.simulation:
        m = r.simulation

        def pcts(key: str) -> str:
            return " / ".join(_ms(m[key][q]) for q in ("p50", "p90", "p99"))

        rate = m.get("request_rate")
        sent = (f"at {rate:g} requests/s (Poisson)" if rate and rate != float("inf") else "all at once" if rate
                else f"from {m['concurrency']} clients" if m.get("concurrency") else "at the trace's times")
        lengths = m.get("lengths") or "fixed"
        cells += [["simulated serving", f"{_rate(m['output_tokens_per_s'])}",
                   f"output tokens/s ({_rate(m.get('input_tokens_per_s') or 0)} in): {m['requests']:,} requests "
                   f"{sent} in {m['duration_s']:.1f} s; {m['preemptions']} preemptions; cache at most "
                   f"{100 * m['kv_peak_fraction']:.0f}% full"],
                  ["TTFT p50/p90/p99", pcts("ttft_s"), "chunked prefill beside the running decodes"],
                  ["TPOT p50/p90/p99", pcts("tpot_s"), ""],
                  ["ITL p50/p90/p99", pcts("itl_s"), "between a request's tokens"] if "itl_s" in m else ["", "", ""],
                  ["latency p50/p90/p99", pcts("e2e_s"),
                   f"{s.prompt:,} + {s.output:,} tokens" if lengths == "fixed" else f"lengths: {lengths}"]]
        if "slo" in m:
            slo = m["slo"]
            cells.append(["goodput", f"{m['goodput_requests_per_s']:.3g} req/s",
                          f"{100 * slo['fraction']:.0f}% of requests meet TTFT <= "
                          f"{_ms(slo['ttft_s']) if slo['ttft_s'] else '-'} and TPOT <= "
                          f"{_ms(slo['tpot_s']) if slo['tpot_s'] else '-'}"])
        if m.get("usd_per_m_output_tokens") is not None:
            cells.append(["$ per million tokens", f"${m['usd_per_m_output_tokens']:.3g} out",
                          f"${m['usd_per_m_input_tokens']:.3g} in; {m['gpus']} GPU(s) at "
                          f"${m['usd_per_gpu_hour']:g}/h ({m.get('price_from') or m['price_source']})"])
        if m.get("joules_per_output_token") is not None:
            cells.append(["energy per token", f"{m['joules_per_output_token']:.3g} J out",
                          f"{m['joules_per_input_token'] or 0:.3g} J in; {m['energy_note']}"])
        for row in m.get("sweep") or []:
            cells.append([f"at {row['request_rate']:g} req/s", _rate(row["output_tokens_per_s"]),
                          f"TTFT p50 {_ms(row['ttft_s']['p50'])}, TPOT p50 {_ms(row['tpot_s']['p50'])}, "
                          f"latency p99 {_ms(row['e2e_s']['p99'])}"])
        cells += [["", "", note] for note in m.get("notes") or []]
        cells = [c for c in cells if any(c)]
    cols = [Column("", "left"), Column("value"), Column("note", "left", wrap=True, style="dim")]
    return fit_tables(cols, cells, width)


def measured_table(res: LlmResult, width: int) -> list[Table]:
    m = res.measured
    if not m:
        return []
    r = res.rows[0] if res.rows else None

    def err(p: float | None, x: float | None) -> str:
        return f"{100 * (p - x) / x:+.0f}%" if p and x else ""

    pred: dict[str, Any] = {}
    if r is not None:
        pred = {"ttft": r.ttft_s, "tpot": r.tpot_s, "tps": 1 / r.tpot_s if r.tpot_s else None,
                "mem": r.weights_bytes + r.kv_bytes + r.activation_bytes}
    tps = m["tokens_per_s_per_request"]
    cells = [
        ["time to first token", _ms(pred["ttft"]) if pred else "", _ms(m["ttft_s"]),
         err(pred.get("ttft"), m["ttft_s"])],
        ["time per output token", _ms(pred["tpot"]) if pred else "", _ms(m["tpot_s"]), _ms(m["tpot_p90_s"]),
         err(pred.get("tpot"), m["tpot_s"])],
        ["tokens/s per request", _rate(pred["tps"]) if pred.get("tps") else "", _rate(tps) if tps else "", "",
         err(pred.get("tps"), tps)],
    ]
    cells[0].insert(3, "")
    if m.get("peak_bytes"):
        cells.append(["peak memory", binary(pred["mem"]) if pred else "", binary(m["peak_bytes"]), "",
                      err(pred.get("mem"), m["peak_bytes"])])
    cols = [Column("", "left"), Column("predicted"), Column("measured"), Column("p90"), Column("error")]
    return fit_tables(cols, cells, width,
                      title=f"measured on {m['device']} (random weights; {m['runs']} generations)")


@as_text
def render_llm(res: LlmResult, console: Console, max_context: bool = False) -> None:
    """An :class:`~torch_footprint.estimate.llm.pricing.LlmResult`; ``max_context`` leads with the
    longest context (rows sorted by it)."""
    if max_context:
        res = replace_rows(res, sorted(res.rows, key=lambda r: -r.max_context))
    for line in _header(res):
        console.print(line)
    if len(res.rows) == 1 or res.measured:
        for r in res.rows[:1]:
            console.print(Text(f"\n{r.accelerator.name}", style="bold"))
            console.print(*detail(res, r, console.width))
        rest = res.rows[1:]
    else:
        rest = res.rows
    if rest:
        console.print()
        console.print(*table(replace_rows(res, rest), console.width))
    console.print(*measured_table(res, console.width))
    for line in sampling_lines((res.measured or {}).get("sampling"), item="token", label="measured"):
        console.print(Text(line, style="dim"))
    notes = list(res.notes)
    for r in res.rows:
        notes += [f"{r.accelerator.id}: {n}" for n in r.notes]
    if res.rows and len(res.rows) > 1:
        notes.append("needs: weights + runtime + the larger of (KV cache at the prompt + the prefill's "
                     "activations) and (KV cache at the full context); max batch at the full context; TTFT: "
                     "the prefill of the whole batch; per token: the mean decode step over the output; tok/s at "
                     "max batch: output tokens over the largest batch's prefill and decode")
    for n in notes:
        console.print(Text("note: " + n, style="dim"))


def replace_rows(res: LlmResult, rows: list[LlmRow]) -> LlmResult:
    return replace(res, rows=rows)
