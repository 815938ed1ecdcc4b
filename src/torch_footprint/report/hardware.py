"""Terminal renderers for the hardware database, roofline predictions, fit and calibration."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..dtypes import RATE_KEYS
from .terminal import describe_workload, make_console
from .units import binary, si


def _t(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 1000 else f"{seconds:,.0f} s"


def _rate(x: float | None) -> str:
    if not x:
        return ""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _fig(acc: Any, field: str, value: float | None, fmt: str = "{:g}") -> str:
    if value is None:
        return "-"
    return ("~" if field in acc.estimated else "") + fmt.format(value)


def render_gpus(rows: list[Any], console: Console | None = None, sources: bool = False) -> None:
    """The database as a table: memory, bandwidth, dense peaks per dtype, power."""
    console = console or make_console()
    t = Table(header_style="bold", pad_edge=False, title="accelerators (dense peaks; ~ derived, see notes)",
              title_justify="left")
    t.add_column("id", no_wrap=True)
    t.add_column("memory", justify="right", no_wrap=True)
    t.add_column("GB/s", justify="right", no_wrap=True)
    for d in RATE_KEYS:
        t.add_column(d, justify="right", no_wrap=True)
    t.add_column("TDP", justify="right", no_wrap=True)
    if sources:
        t.add_column("source", overflow="fold")
    for a in rows:
        cells = [a.id, _fig(a, "memory_gb", a.memory_gb, "{:g} GB"), _fig(a, "bandwidth_gbs", a.bandwidth_gbs)]
        cells += [_fig(a, d, a.tflops.get(d)) for d in RATE_KEYS]
        cells.append(_fig(a, "tdp_w", a.tdp_w, "{:g} W"))
        if sources:
            cells.append(a.source)
        t.add_row(*cells, style="cyan" if a.kind == "cpu" else None)
    console.print(t)
    console.print(Text("TFLOPS (TOPS for int8), dense, with fp32 accumulate where the chip has tensor cores. "
                       "GB as sold (read as GiB: memory comes in binary sizes). `footprint gpus --sources` "
                       "adds each row's datasheet; `--json` writes everything.", style="dim italic"))
    cpu = next((a for a in rows if a.kind == "cpu"), None)
    if cpu is not None and not cpu.calibrated:
        console.print(Text("cpu: not calibrated (no bandwidth); run `footprint calibrate` to measure this "
                           "machine's ceilings", style="yellow"))


def render_prediction(pred: Any, console: Console | None = None, depth: int = 1, top: int = 10) -> None:
    """A roofline prediction: totals, by module, the slowest operators."""
    console = console or make_console()
    a = pred.accelerator
    head = Text(f"{a.name}", style="bold cyan")
    head.append(f"  ·  ceilings: {pred.ceilings.source}"
                + (f" (efficiency {', '.join(f'{k} {v:g}' for k, v in pred.ceilings.efficiency.items())})"
                   if pred.ceilings.efficiency else ""), style="dim")
    console.print(head)
    tb = pred.time_by_bound()
    console.print(Text.assemble(("roofline latency: ", "bold"), (_t(pred.time_s), "bold green"),
                                f"   lower bound (FLOPs / {pred.main_dtype} peak): {_t(pred.lower_bound_s)}",
                                f"   {si(pred.flops, 'FLOP')}"))
    console.print(Text(f"time in compute-bound ops {_t(tb['compute'])}, memory-bound {_t(tb['memory'])}, "
                       f"launch-bound {_t(tb['overhead'])}; mostly {pred.bound}-bound", style="dim"))
    phases = pred.by_phase()
    if len(phases) > 1:
        console.print(Text("by phase: " + ", ".join(f"{k} {_t(v)}" for k, v in phases.items()), style="dim"))
    t = Table(title=f"by module (depth {depth})", title_justify="left", header_style="bold", pad_edge=False)
    for col in ("module", "time", "share", "compute", "memory", "launch", "ops"):
        t.add_column(col, justify="left" if col == "module" else "right", no_wrap=True)
    total = pred.time_s or 1.0
    for m in pred.by_module(depth):
        t.add_row(m.module or "<total>", _t(m.time_s), f"{100 * m.time_s / total:.1f}%", _t(m.compute_s),
                  _t(m.memory_s), _t(m.overhead_s), str(m.ops), style="bold" if not m.module else None)
    console.print(t)
    o = Table(title=f"slowest {top} operators", title_justify="left", header_style="bold", pad_edge=False)
    for col in ("op", "module", "phase", "dtype", "FLOPs", "bytes", "time", "bound"):
        o.add_column(col, justify="right" if col in ("FLOPs", "bytes", "time") else "left", no_wrap=True)
    for op in sorted(pred.ops, key=lambda x: -x.time_s)[:top]:
        o.add_row(op.op, op.module or "<root>", op.phase, op.dtype, si(op.flops, "FLOP"), binary(op.bytes),
                  _t(op.time_s), op.bound)
    console.print(o)
    for n in pred.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print(Text("time = max(FLOPs / compute ceiling, bytes / bandwidth ceiling) + launch overhead, per "
                       "operator; a prediction, not a measurement.", style="dim italic"))


def render_fit(res: Any, console: Console | None = None) -> None:
    """The ranking of accelerators for one workload."""
    console = console or make_console()
    s = res.settings
    inputs, what = describe_workload(s)
    head = Text(f"{s.get('model')}", style="bold cyan")
    head.append(f"  input {inputs}  ·  {what}  ·  batch {res.batch} per rank"
                + (f"  ·  {res.gpus} GPUs, {res.strategy}" if res.gpus > 1 else "")
                + (f", tensor parallel {res.tp}" if getattr(res, "tp", 1) > 1 else ""), style="dim")
    console.print(head)
    t = Table(header_style="bold", pad_edge=False)
    cols = ["accelerator", "memory", "needs", "fits", "largest batch", f"latency @{res.batch}", "lower bound",
            "bound", "samples/s @largest"]
    if res.target_s is not None:
        cols.insert(6, "meets")
    notes = any(r.reason for r in res.rows)
    if notes:
        cols.append("note")
    for c in cols:
        t.add_column(c, justify="left" if c in ("accelerator", "bound", "note") else "right", no_wrap=c != "note")
    rows = sorted(res.rows, key=lambda r: (not r.fits, r.latency_s if r.latency_s is not None else float("inf")))
    for r in rows:
        p = r.prediction
        cells = [r.accelerator.id, binary(r.capacity), binary(r.need), "yes" if r.fits else "no",
                 str(r.largest_batch) if r.largest_batch else "0" if r.largest_batch == 0 else "-",
                 _t(r.latency_s), _t(p.lower_bound_s) if p else "", p.bound if p else "",
                 _rate(r.throughput)] + ([r.reason] if notes else [])
        if res.target_s is not None:
            cells.insert(6, "" if r.meets_target is None else "yes" if r.meets_target else "no")
        style = "bold green" if r.accelerator.id == res.pick else None if r.fits else "dim"
        t.add_row(*cells, style=style)
    console.print(t)
    if res.states is not None:
        st = res.states
        line = (f"model states per rank: weights {binary(st.weights)}, gradients {binary(st.gradients)}, "
                f"optimizer {binary(st.optimizer)}, buffers {binary(st.buffers)}")
        if st.extra:
            line += f", {st.extra_what} {binary(st.extra)}"
        console.print(Text(line + f" = {binary(st.total)}", style="dim"))
    if res.peak is not None:
        console.print(Text(f"peak of tensors per rank at batch {res.batch}: {binary(res.peak.peak_bytes)} "
                           f"(during the {res.peak.phase}); needs = (peak + fixed overheads) / "
                           f"{s.get('utilisation', 0.8):g}", style="dim"))
    for r in rows:
        if r.step is not None and (r.accelerator.id == res.pick or (res.pick is None and r is rows[0])):
            st = r.step
            console.print(Text(f"{r.accelerator.id}: step {_t(st.time_s)} = compute {_t(sum(st.compute_s.values()))}"
                               f" + communication not hidden {_t(st.exposed_s)} (of {_t(st.comm_s)}: "
                               + "; ".join(f"{c.op} of {c.what} {_t(c.time_s)}" for c in st.collectives)
                               + f"; link {st.link.source if st.link else '?'})", style="dim"))
    if res.pick:
        console.print(Text.assemble(("pick: ", "bold"), (res.pick, "bold green"), f"  ({res.why})"))
    else:
        console.print(Text.assemble(("pick: none", "bold red"), f"  ({res.why})"))
    for n in res.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print(Text("Latency and throughput are roofline predictions (per operator: max of compute and memory "
                       "time, plus launch overhead); lower bound = FLOPs / peak, the seed documents' estimate.",
                       style="dim italic"))


def render_calibration(res: dict[str, Any], path: Any, console: Console | None = None) -> None:
    console = console or make_console()
    console.print(Text(f"{res['name']}  ·  {res['device']}  ·  {res['threads']} threads  ·  torch {res['torch']}",
                       style="bold cyan"))
    t = Table(header_style="bold", pad_edge=False)
    t.add_column("ceiling", no_wrap=True)
    t.add_column("measured", justify="right", no_wrap=True)
    for k, v in res["matmul_tflops"].items():
        t.add_row(f"matmul {k}", si(v * 1e12, "FLOP/s"))
    for k, v in res["conv_tflops"].items():
        t.add_row(f"convolution {k} (3x3, 64 channels)", si(v * 1e12, "FLOP/s"))
    t.add_row("copy bandwidth (read + write)", f"{res['copy_gbs']:.1f} GB/s")
    if "cache_copy_gbs" in res:
        t.add_row("copy bandwidth, 4 MiB (cache)", f"{res['cache_copy_gbs']:.1f} GB/s")
    t.add_row("per-operator overhead (eager model)", f"{res['op_overhead_us']:.2f} us")
    if "link" in res:
        ln = res["link"]
        t.add_row(f"all-reduce bus bandwidth, {ln['nproc']} ranks ({ln['backend']})", f"{ln['busbw_gbs']:.3g} GB/s")
        t.add_row("all-reduce latency per ring step", f"{ln['latency_us']:.1f} us")
    console.print(t)
    for b, table in res.get("conv_fp32_by_batch_k", {}).items():
        console.print(Text(f"convolution fp32 at batch {b} by reduction length K: "
                           + ", ".join(f"K={int(k)} {si(r * 1e12, 'FLOP/s')}" for k, r in table), style="dim"))
    console.print(Text("matmul fp32 by K: " + ", ".join(f"K={int(k)} {si(r * 1e12, 'FLOP/s')}"
                                                       for k, r in res.get("matmul_fp32_by_k", [])), style="dim"))
    console.print(Text(f"saved to {path} ({res['seconds']:.1f} s); `footprint fit` and `footprint predict` now "
                       "use these ceilings for this device", style="dim"))


def _err(pred: float | None, meas: float) -> str:
    return f"{100 * (pred - meas) / meas:+.1f}%" if pred is not None and meas else ""


def render_ranks(res: Any, console: Console | None = None) -> None:
    """Print a :class:`~torch_footprint.measure.distributed.RanksBench`: per rank, the
    measured peak, step and communication time beside the prediction."""
    console = console or make_console()
    s = res.settings
    header = Text(res.model, style="bold cyan")
    header.append(f"  ·  training, {res.strategy} over {res.nproc} ranks on {res.device} (torchrun)  ·  "
                  f"optimizer {s.get('optimizer')}, {s.get('precision')}, {s.get('threads')} thread(s) per rank",
                  style="dim")
    console.print(header)
    p = res.predicted
    step = p.step if p else None
    t = Table(header_style="bold", pad_edge=False)
    for col in ("rank", "peak", "predicted", "error", "step", "predicted", "error", "comm", "predicted"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in res.ranks:
        t.add_row(str(r.rank), binary(r.peak_bytes), binary(p.peak.peak_bytes) if p else "",
                  _err(p.peak.peak_bytes if p else None, r.peak_bytes), _t(r.step_s),
                  _t(step.time_s) if step else "", _err(step.time_s if step else None, r.step_s), _t(r.comm_s),
                  _t(step.comm_s) if step else "")
    console.print(t)
    if step is not None:
        exposed = step.exposed_s / step.time_s if step.time_s else 0.0
        console.print(Text(f"predicted step: compute {_t(sum(step.compute_s.values()))}, communication "
                           f"{_t(step.comm_s)} of which {_t(step.exposed_s)} not hidden ({exposed:.0%} of the step)",
                           style="dim"))
        for c in step.collectives:
            console.print(Text(f"  {c.op} of {c.what}: {c.calls} call(s), {binary(c.nbytes)}, {_t(c.time_s)}"
                               f"{', overlapped' if c.overlapped else ''}", style="dim"))
    for n in [*(p.notes if p else []), *(step.notes if step else []), *res.notes]:
        console.print(Text(n, style="dim"))
