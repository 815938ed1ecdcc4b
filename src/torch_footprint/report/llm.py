"""Terminal renderer for ``footprint llm``: formatting only, every number from the result."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..estimate.llm import LlmResult, LlmRow
from .terminal import make_console
from .units import binary, count, si


def _ms(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
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


def table(res: LlmResult) -> Table:
    """One row per accelerator: memory needed, fits, largest batch and context, speeds."""
    s = res.serving
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold", padding=0)
    t.add_column("accelerator", no_wrap=True)
    t.add_column("needs", justify="right", no_wrap=True)
    t.add_column("max\nbatch", justify="right", no_wrap=True)
    t.add_column("max\ncontext", justify="right", no_wrap=True)
    t.add_column("TTFT", justify="right", no_wrap=True)
    t.add_column("per\ntoken", justify="right", no_wrap=True)
    t.add_column("tok/s", justify="right", no_wrap=True)
    t.add_column("tok/s at\nmax batch", justify="right", no_wrap=True)
    for r in res.rows:
        t.add_row(r.accelerator.id, binary(r.total_bytes), f"{r.max_batch:,}" if r.fits else "no fit",
                  f"{r.max_context:,}",
                  _ms(r.ttft_s), _ms(r.tpot_s), _rate(s.batch / r.tpot_s) if r.tpot_s else "",
                  _rate(r.max_batch_tokens_per_s) if r.max_batch else "",
                  style=None if r.fits else "dim")
    return t


def detail(res: LlmResult, r: LlmRow) -> Table:
    """One accelerator in full: where the memory goes and how the time is spent."""
    s = res.serving
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_header=False, padding=(0, 1))
    t.add_column("what", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("note", style="dim")
    per = " per rank" if s.tp > 1 else ""
    t.add_row("weights" + per, binary(r.weights_bytes), res.weights_scheme)
    t.add_row("KV cache" + per, binary(r.kv_bytes), f"{s.batch} x {s.context:,} tokens")
    t.add_row("prefill activations", binary(r.activation_bytes),
              f"{s.batch} x {min(s.prompt, s.chunk or s.prompt):,} tokens, transient")
    t.add_row("runtime", binary(r.overhead_bytes), "CUDA context, cuBLAS workspace" if r.overhead_bytes else "")
    t.add_row("needed", binary(r.total_bytes), f"of {binary(r.capacity)}: {'fits' if r.fits else 'does not fit'}")
    t.add_row("largest batch", f"{r.max_batch:,}", f"at {s.context:,} tokens")
    t.add_row("longest context", f"{r.max_context:,}", f"at batch {s.batch}")
    if r.vllm:
        v = r.vllm
        t.add_row("vLLM KV blocks", f"{v.blocks:,}", f"{v.tokens:,} tokens in {binary(v.capacity_bytes)}; "
                                                      f"{v.concurrency:.1f}x concurrency at {s.context:,} tokens")
    t.add_row("time to first token", _ms(r.ttft_s), f"MFU {100 * r.mfu:.0f}%")
    t.add_row("time per output token", _ms(r.tpot_s),
              f"{_ms(r.tpot_first_s)} first, {_ms(r.tpot_last_s)} last; MBU {100 * r.mbu:.0f}%")
    if s.tp > 1:
        t.add_row("all-reduces per step", _ms(r.comm_s), f"2 per layer over {s.tp} ranks")
    t.add_row("tokens/s per request", _rate(1 / r.tpot_s) if r.tpot_s else "", "")
    t.add_row("tokens/s in all", _rate(s.batch / r.tpot_s) if r.tpot_s else "", f"batch {s.batch}")
    t.add_row("request latency", _ms(r.ttft_s + s.output * r.tpot_s), f"{s.output:,} tokens")
    if r.max_batch:
        t.add_row("tokens/s at max batch", _rate(r.max_batch_tokens_per_s), f"batch {r.max_batch:,}")
    return t


def measured_table(res: LlmResult) -> Table | None:
    m = res.measured
    if not m:
        return None
    r = res.rows[0] if res.rows else None
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold", padding=(0, 1),
              title=f"measured on {m['device']} (random weights; {m['runs']} generations)", title_justify="left")
    t.add_column("", no_wrap=True)
    t.add_column("predicted", justify="right", no_wrap=True)
    t.add_column("measured", justify="right", no_wrap=True)
    t.add_column("error", justify="right", no_wrap=True)

    def err(p: float | None, x: float | None) -> str:
        return f"{100 * (p - x) / x:+.0f}%" if p and x else ""

    pred: dict[str, Any] = {}
    if r is not None:
        pred = {"ttft": r.ttft_s, "tpot": r.tpot_s, "tps": 1 / r.tpot_s if r.tpot_s else None,
                "mem": r.weights_bytes + r.kv_bytes + r.activation_bytes}
    t.add_row("time to first token", _ms(pred["ttft"]) if pred else "", _ms(m["ttft_s"]),
              err(pred.get("ttft"), m["ttft_s"]))
    t.add_row("time per output token", _ms(pred["tpot"]) if pred else "",
              f"{_ms(m['tpot_s'])} (p90 {_ms(m['tpot_p90_s'])})", err(pred.get("tpot"), m["tpot_s"]))
    tps = m["tokens_per_s_per_request"]
    t.add_row("tokens/s per request", _rate(pred["tps"]) if pred.get("tps") else "", _rate(tps) if tps else "",
              err(pred.get("tps"), tps))
    if m.get("peak_bytes"):
        t.add_row("peak memory", binary(pred["mem"]) if pred else "", binary(m["peak_bytes"]),
                  err(pred.get("mem"), m["peak_bytes"]))
    return t


def render_llm(res: LlmResult, console: Console | None = None) -> None:
    console = console or make_console()
    for line in _header(res):
        console.print(line)
    if len(res.rows) == 1 or res.measured:
        for r in res.rows[:1]:
            console.print(Text(f"\n{r.accelerator.name}", style="bold"))
            console.print(detail(res, r))
        rest = res.rows[1:]
    else:
        rest = res.rows
    if rest:
        console.print()
        console.print(table(replace_rows(res, rest)))
    mt = measured_table(res)
    if mt is not None:
        console.print(mt)
    notes = list(res.notes)
    for r in res.rows:
        notes += [f"{r.accelerator.id}: {n}" for n in r.notes]
    if res.rows and len(res.rows) > 1:
        notes.append("needs: weights + runtime + the larger of (KV cache at the prompt + the prefill's "
                     "activations) and (KV cache at the full context); max batch at the full context; TTFT: "
                     "the prefill of the whole batch; per token: the mean decode step over the output")
    for n in notes:
        console.print(Text("note: " + n, style="dim"))


def replace_rows(res: LlmResult, rows: list[LlmRow]) -> LlmResult:
    from dataclasses import replace

    return replace(res, rows=rows)
