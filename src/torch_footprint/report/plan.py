"""``plan``'s answer on the terminal: the best layouts, why each wins, and the launch
configuration of the best ones to paste (torchtitan's TOML, Megatron-LM's flags)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from .layout import Column, fit_tables
from .terminal import as_text
from .units import binary, duration, si


def _layout(r: dict[str, Any]) -> str:
    parts = [f"dp {r['dp']}", f"tp {r['tp']}", f"pp {r['pp']}"]
    if r["vpp"] > 1:
        parts.append(f"vpp {r['vpp']}")
    for k in ("cp", "ep"):
        if r[k] > 1:
            parts.append(f"{k} {r[k]}")
    return " x ".join(parts)


def _sharding(r: dict[str, Any]) -> str:
    s = r["strategy"]
    if s == "fsdp" and r["dp_shard"] is not None and r["dp_shard"] < r["dp"]:
        return f"hsdp {r['dp_shard']}"
    return s


def why(r: dict[str, Any]) -> str:
    """In words: what the step loses to the bubble and to communication, the memory left."""
    out = []
    if r["pp"] > 1:
        out.append(f"bubble {r['bubble_share']:.0%}")
    out.append(f"exposed comm {r['exposed_share']:.0%}")
    out.append(f"{binary(r['headroom_bytes'])} free")
    return ", ".join(out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else str(v)


def toml(sections: dict[str, dict[str, Any]]) -> str:
    """torchtitan's job-config sections as TOML."""
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        for k, v in values.items():
            lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines).rstrip()


@as_text
def render_plan(res: Any, console: Console, top: int = 5) -> None:
    """The top ``top`` layouts that fit, best first; the best one's launch configuration."""
    d = res.to_dict() if hasattr(res, "to_dict") else res
    head = Text(d["model"], style="bold cyan")
    head.append(f"  ·  {d['gpus']} x {d['accelerator']}  ·  sequence {d['seq']}  ·  global batch "
                f"{d['global_batch']} sequences ({si(d['global_batch'] * d['seq'])} tokens) a step", style="dim")
    console.print(head)
    ruled = d.get("layouts_ruled_out_by_states", 0)
    if ruled:
        console.print(Text(f"{d['layouts_evaluated']} layouts evaluated of {d['layouts_considered']} possible: "
                           f"{d['layouts_priced']} priced, {ruled} ruled out by their model states alone (more "
                           "than the memory before any activation; the others cannot fit or beat the best), from "
                           f"{d['traces']} traces", style="dim"))
    else:
        console.print(Text(f"{d['layouts_evaluated']} layouts priced of {d['layouts_considered']} possible (the others "
                           f"cannot fit or beat the best), from {d['traces']} traces", style="dim"))
    rows = d["rows"][:top]
    if not rows:
        console.print(Text(d["closest"] or "nothing fits", style="bold red"))
        for n in d["notes"]:
            console.print(Text(f"note: {n}", style="dim"))
        return
    cost = d.get("tokens") is not None
    cols = [Column("#"), Column("layout", "left", wrap=True), Column("sharding", "left"), Column("micro\nbatch"),
            Column("grad\naccum"), Column("ac", "left"), Column("tokens/s\nper GPU"), Column("step"),
            Column("needs"), Column("why", "left", wrap=True, priority=30)]
    if cost:
        cols.insert(8, Column("GPU-hours" + ("\n/ $" if d.get("price") else "")))
    cells = []
    for i, r in enumerate(rows, 1):
        sched = f" {r['schedule']}" if r["pp"] > 1 else ""
        row = [str(i), _layout(r) + sched, _sharding(r), str(r["micro_batch"]), str(r["grad_accum"]), r["ac"],
               f"{r['tokens_per_s_per_gpu']:,.0f}", duration(r["step_s"]), binary(r["need_bytes"]), why(r)]
        if cost:
            run = r["run"]
            row.insert(8, si(run["gpu_hours"]) + (f"\n${si(run['usd'])}" if "usd" in run else ""))
        cells.append(row)
    console.print(*fit_tables(cols, cells, console.width, row_styles=["bold green", *[None] * (len(rows) - 1)]))
    if cost and d.get("price"):
        p = d["price"]
        console.print(Text(f"a run of {si(d['tokens'])} tokens at ${p['usd_per_hour']:g} per GPU-hour ({p['source']}"
                           + (f", {p['date']}" if p.get("date") else "") + ")", style="dim"))
    titan = next(((i, r["launch"]["torchtitan"]) for i, r in enumerate(d["rows"], 1)
                  if r["launch"]["torchtitan"] is not None), None)
    if titan is not None:
        console.print(Text(f"torchtitan, #{titan[0]} (job config TOML" + (
            "; torchtitan has no ZeRO-1, so not #1" if titan[0] > 1 else "") + "):", style="bold"))
        console.print(Text(toml(titan[1])))
    if rows[0]["launch"]["megatron"] is not None:
        console.print(Text("Megatron-LM, #1:", style="bold"))
        console.print(Text(" ".join(rows[0]["launch"]["megatron"])))
    else:
        console.print(Text("Megatron-LM: no such FP8 recipe (its --fp8-recipe: tensorwise, delayed, mxfp8, blockwise)",
                           style="dim"))
    for n in d["notes"]:
        console.print(Text(f"note: {n}", style="dim"))


@as_text
def render_fleet(res: Any, console: Console, top: int = 5) -> None:
    """The cheapest ``top`` serving fleets that meet the targets; the best one's launch line."""
    d = res.to_dict() if hasattr(res, "to_dict") else res
    head = Text(d["model"], style="bold cyan")
    slo = [f"TTFT <= {duration(d['slo_ttft_s'])}" if d["slo_ttft_s"] is not None else "",
           f"TPOT <= {duration(d['slo_tpot_s'])}" if d["slo_tpot_s"] is not None else ""]
    lengths = f"{d['prompt']:,} + {d['output']:,} tokens" if d["lengths"] == "fixed" else d["lengths"]
    head.append(f"  ·  {d['request_rate']:g} requests/s  ·  {lengths}  ·  {' and '.join(x for x in slo if x)} "
                f"for {d['attainment']:.0%} of requests", style="dim")
    console.print(head)
    console.print(Text(f"{d['candidates']} replica set-ups searched ({d['pruned']} cut short: they could not beat "
                       f"those kept), {d['simulations']} simulated points", style="dim"))
    rows = d["rows"][:top]
    if not rows:
        console.print(Text(d["closest"] or "nothing meets the targets", style="bold red"))
    else:
        cols = [Column("#"), Column("replica", "left", wrap=True), Column("replicas"), Column("GPUs"),
                Column("$ / hour"), Column("$ / M out"), Column("req/s\nper replica"), Column("TTFT p90"),
                Column("TPOT p90"), Column("met"), Column("cache\npeak")]
        cells = []
        for i, r in enumerate(rows, 1):
            knobs = "".join(f", {k} {v:g}" for k, v in r["knobs"].items())
            usd, per_m = r["usd_per_hour"], r["usd_per_m_output_tokens"]
            cells.append([str(i), f"{r['accelerator']} x {r['tp']}, {r['engine']}{knobs}", str(r["replicas"]),
                          str(r["gpus"]), "-" if usd is None else f"${usd:,.2f}",
                          "-" if per_m is None else f"${per_m:,.2f}", f"{r['rate_per_replica']:.3g}",
                          duration(r["ttft_s"]["p90"]), duration(r["tpot_s"]["p90"]), f"{r['attainment']:.0%}",
                          f"{r['kv_peak_fraction']:.0%}"])
        console.print(*fit_tables(cols, cells, console.width, row_styles=["bold green", *[None] * (len(rows) - 1)]))
        best = rows[0]
        if best["price"] is not None:
            p = best["price"]
            where = ", ".join(x for x in (p.get("provider"), p.get("date")) if x) or p["source"]
            console.print(Text(f"#1 at ${p['usd_per_hour']:g} per GPU-hour ({where})", style="dim"))
        console.print(Text(f"#1, each of {best['replicas']} replica(s):", style="bold"))
        console.print(Text(best["launch"]))
    for m in d["missed"][:top]:
        console.print(Text(f"cannot: {m['candidate']}: {m['why']}", style="dim"))
    if len(d["missed"]) > top:
        console.print(Text(f"... and {len(d['missed']) - top} more that cannot (--json lists them)", style="dim"))
    for n in d["notes"]:
        console.print(Text(f"note: {n}", style="dim"))
