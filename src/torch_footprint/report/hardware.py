"""Terminal renderers for the hardware database, roofline predictions, fit and calibration."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from ..dtypes import RATE_KEYS
from .layout import Column, fit_tables
from .terminal import as_text, describe_workload
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


@as_text
def render_gpus(rows: list[Any], console: Console, sources: bool = False) -> None:
    """The database as a table: memory, bandwidth, dense peaks per dtype, power."""
    cols = [Column("id", "left", wrap=True), Column("memory"), Column("GB/s"), *(Column(d) for d in RATE_KEYS),
            Column("TDP")]
    cells = []
    for a in rows:
        cells.append([a.id, _fig(a, "memory_gb", a.memory_gb, "{:g} GB"), _fig(a, "bandwidth_gbs", a.bandwidth_gbs),
                      *(_fig(a, d, a.tflops.get(d)) for d in RATE_KEYS), _fig(a, "tdp_w", a.tdp_w, "{:g} W")])
    console.print(*fit_tables(cols, cells, console.width, title="accelerators (dense peaks; ~ derived, see notes)",
                              row_styles=["cyan" if a.kind == "cpu" else None for a in rows]))
    if sources:  # one line each, never folded: a URL split across lines cannot be copied
        console.print(Text("sources", style="bold"))
        for a in rows:
            console.print(Text(f"{a.id}: {a.source}"), soft_wrap=True)
    console.print(Text("TFLOPS (TOPS for int8), dense, with fp32 accumulate where the chip has tensor cores. "
                       "GB as sold (read as GiB: memory comes in binary sizes). `footprint gpus --sources` "
                       "adds each row's datasheet; `--json` writes everything.", style="dim italic"))
    cpu = next((a for a in rows if a.kind == "cpu"), None)
    if cpu is not None and not cpu.calibrated:
        console.print(Text("cpu: not calibrated (no bandwidth); run `footprint calibrate` to measure this "
                           "machine's ceilings", style="yellow"))


@as_text
def render_prediction(pred: Any, console: Console, depth: int = 1, top: int = 10) -> None:
    """A roofline prediction: totals, by module, the slowest operators."""
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
    console.print(Text(f"whole operators by what bounds them: compute {_t(tb['compute'])}, memory "
                       f"{_t(tb['memory'])}, launch {_t(tb['overhead'])}; mostly {pred.bound}-bound", style="dim"))
    phases = pred.by_phase()
    if len(phases) > 1:
        console.print(Text("by phase: " + ", ".join(f"{k} {_t(v)}" for k, v in phases.items()), style="dim"))
    step = getattr(pred, "step", None)
    if step is not None:  # a training layout's whole step on one rank
        console.print(Text.assemble(("step of the layout: ", "bold"), (_t(step.time_s), "bold green"),
                                    "  = " + ", ".join(f"{k} {_t(v)}" for k, v in step.compute_s.items() if v)
                                    + f", communication not hidden {_t(step.exposed_s)} ({step.ranks} GPUs)"))
    total = pred.time_s or 1.0
    mods = pred.by_module(depth)
    cols = [Column("module", "left", wrap=True), Column("time"), Column("share"), Column("compute"),
            Column("memory"), Column("launch"), Column("ops")]
    cells = [[m.module or "<total>", _t(m.time_s), f"{100 * m.time_s / total:.1f}%", _t(m.compute_s), _t(m.memory_s),
              _t(m.overhead_s), str(m.ops)] for m in mods]
    console.print(*fit_tables(cols, cells, console.width, title=f"by module (depth {depth})",
                              row_styles=["bold" if not m.module else None for m in mods]))
    cols = [Column("op", "left", wrap=True), Column("module", "left", wrap=True, priority=8),
            Column("phase", "left", priority=9), Column("dtype", "left", priority=10), Column("FLOPs"),
            Column("bytes"), Column("time"), Column("bound", "left")]
    cells = [[op.op, op.module or "<root>", op.phase, op.dtype, si(op.flops, "FLOP"), binary(op.bytes), _t(op.time_s),
              op.bound] for op in sorted(pred.ops, key=lambda x: -x.time_s)[:top]]
    console.print(*fit_tables(cols, cells, console.width, title=f"slowest {top} operators"))
    for n in pred.notes:
        console.print(Text(f"note: {n}", style="dim"))
    gpu = a.kind == "gpu"
    console.print(Text("time = max(FLOPs / compute ceiling, bytes / bandwidth ceiling) + launch overhead, per "
                       "operator" + (" (its memory term with the kernels it runs besides its own: an NCHW "
                                     "convolution's transposes, batch norm's second pass)" if gpu else "")
                       + "; a prediction, not a measurement. The compute, memory and launch columns sum "
                       "each term over the operators, so they add up to more than the time (only the larger of "
                       "compute and memory counts per operator); the line above the table sums whole operators "
                       "by their bound."
                       + (" Calibrated: the host dispatches while the device runs, so the time is when the later "
                          "of the two is done (an operator's share: how far it moves that), not the sum."
                          if pred.ceilings.overlap else ""), style="dim italic"))


@as_text
def render_fit(res: Any, console: Console) -> None:
    """The ranking of accelerators for one workload."""
    s = res.settings
    inputs, what = describe_workload(s)
    head = Text(f"{s.get('model')}", style="bold cyan")
    head.append(f"  input {inputs}  ·  {what}  ·  batch {res.batch} per rank"
                + (f"  ·  {res.gpus} GPUs, {res.strategy}" if res.gpus > 1 else "")
                + (f", tensor parallel {res.tp}" if getattr(res, "tp", 1) > 1 else ""), style="dim")
    console.print(head)
    # two-line headers: the figures below them are short
    cols = [Column("accelerator", "left", wrap=True), Column("memory"), Column("needs"), Column("fits"),
            Column("max\nbatch"), Column(f"latency\n@{res.batch}"), Column("lower\nbound", priority=20),
            Column("bound", "left", priority=21), Column("samples/s\n@max")]
    if res.target_s is not None:
        cols.insert(6, Column("meets"))
    notes = any(r.reason for r in res.rows)
    if notes:
        cols.append(Column("note", "left", wrap=True, priority=30))
    rows = sorted(res.rows, key=lambda r: (not r.fits, r.latency_s if r.latency_s is not None else float("inf")))
    cells = []
    for r in rows:
        p = r.prediction
        row = [r.accelerator.id, binary(r.capacity), binary(r.need), "yes" if r.fits else "no",
               str(r.largest_batch) if r.largest_batch else "0" if r.largest_batch == 0 else "-",
               _t(r.latency_s), _t(p.lower_bound_s) if p else "", p.bound if p else "",
               _rate(r.throughput)] + ([r.reason] if notes else [])
        if res.target_s is not None:
            row.insert(6, "" if r.meets_target is None else "yes" if r.meets_target else "no")
        cells.append(row)
    console.print(*fit_tables(cols, cells, console.width, row_styles=[
        "bold green" if r.accelerator.id == res.pick else None if r.fits else "dim" for r in rows]))
    if res.states is not None:
        st = res.states
        line = (f"model states per rank: weights {binary(st.weights)}, gradients {binary(st.gradients)}, "
                f"optimizer {binary(st.optimizer)}, buffers {binary(st.buffers)}")
        if st.extra:
            line += f", {st.extra_what} {binary(st.extra)}"
        console.print(Text(line + f" = {binary(st.total)}", style="dim"))
    if res.peak is not None:
        util = s.get("utilisation", 0.8)
        console.print(Text(f"peak of tensors per rank at batch {res.batch}: {binary(res.peak.peak_bytes)} "
                           f"(during the {res.peak.phase}); needs = peak + what the process holds beyond its "
                           f"tensors on NVIDIA GPUs, (peak + fixed overheads) / {util:g} elsewhere", style="dim"))
        shown = next((r for r in rows if r.extras and r.accelerator.vendor == "nvidia"), None)
        if shown is not None:
            console.print(Text(f"beyond the tensors on {shown.accelerator.id}: " + ", ".join(
                f"{k} {binary(v)}" for k, v in shown.extras.items() if v) + f"; to provision at {util:.0%}: "
                f"{binary(shown.provision or 0)} (not counted: memory the caching allocator reserves above "
                "what is allocated)", style="dim"))
    for r in rows:
        if r.step is not None and (r.accelerator.id == res.pick or (res.pick is None and r is rows[0])):
            st = r.step
            slower = st.compute_s.get("beside hidden collectives", 0.0)
            beside = f" ({_t(slower)} of it the slowdown beside hidden collectives)" if slower else ""
            console.print(Text(f"{r.accelerator.id}: step {_t(st.time_s)} = compute {_t(sum(st.compute_s.values()))}"
                               f"{beside} + communication not hidden {_t(st.exposed_s)} (of {_t(st.comm_s)}: "
                               + "; ".join(f"{c.op} of {c.what} {_t(c.time_s)}" for c in st.collectives)
                               + f"; link {st.link.source if st.link else '?'})", style="dim"))
    if res.pick:
        console.print(Text.assemble(("pick: ", "bold"), (res.pick, "bold green"), f"  ({res.why})"))
    else:
        console.print(Text.assemble(("pick: none", "bold red"), f"  ({res.why})"))
    for n in res.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print(Text("max batch: the largest batch that fits; samples/s @max: the throughput there. Latency and "
                       "throughput are roofline predictions (per operator: max of compute and memory time, plus "
                       "launch overhead); lower bound = FLOPs / peak FLOP/s of the main dtype.",
                       style="dim italic"))


@as_text
def render_calibration(cal: Any, console: Console) -> None:
    """A :class:`~torch_footprint.measure.calibrate.CalibrationResult`: each ceiling measured, where it was saved."""
    res, path = cal.measured, cal.path
    threads = f"{res['threads']} thread" + ("" if res["threads"] == 1 else "s")
    console.print(Text(f"{res['name']}  ·  {res['device']}  ·  {threads}  ·  torch {res['torch']}",
                       style="bold cyan"))
    cells = [[f"matmul {k}", si(v * 1e12, "FLOP/s")] for k, v in res["matmul_tflops"].items()]
    cells += [[f"convolution {k} (3x3, 64 channels)", si(v * 1e12, "FLOP/s")] for k, v in res["conv_tflops"].items()]
    cells.append(["copy bandwidth (read + write)", f"{res['copy_gbs']:.1f} GB/s"])
    if "cache_copy_gbs" in res:
        cells.append(["copy bandwidth, 4 MiB (cache)", f"{res['cache_copy_gbs']:.1f} GB/s"])
    if "matvec_gbs" in res:
        cells.append(["one-row product streaming a large matrix", f"{res['matvec_gbs']:.1f} GB/s"])
    priced = res.get("op_overhead_priced_us")  # a GPU's: the probe shown, not priced
    gpu_note = f" (shown; priced at {priced:.0f} us)" if priced is not None else ""
    cells.append(["per-operator overhead (eager model)", f"{res['op_overhead_us']:.2f} us{gpu_note}"])
    if "view_overhead_us" in res:
        cells.append(["per view (eager dispatch, no kernel)", f"{res['view_overhead_us']:.2f} us"])
    if "link" in res:
        ln = res["link"]
        cells.append([f"all-reduce bus bandwidth, {ln['nproc']} ranks ({ln['backend']})",
                      f"{ln['busbw_gbs']:.3g} GB/s"])
        cells.append(["all-reduce latency per ring step", f"{ln['latency_us']:.1f} us"])
        if "ceilings" in ln:
            one = ln["ceilings"]
            each = f"in each of {ln['nproc']} ranks at once, {ln['threads']} thread(s)"
            cells.append([f"matmul fp32, {each}", si(one["matmul_tflops"].get("fp32", 0) * 1e12, "FLOP/s")])
            cells.append([f"copy bandwidth, {each}", f"{one['copy_gbs']:.1f} GB/s"])
    console.print(*fit_tables([Column("ceiling", "left", wrap=True), Column("measured")], cells, console.width))
    # by reduction length: one row per K, one column per kernel and batch
    by_k: dict[str, dict[int, float]] = {f"conv batch {b}": {int(k): r for k, r in table}
                                         for b, table in res.get("conv_fp32_by_batch_k", {}).items()}
    by_k["matmul"] = {int(k): r for k, r in res.get("matmul_fp32_by_k", [])}
    ks = sorted({k for col in by_k.values() for k in col})
    if ks:
        cells = [[str(k), *(si(col[k] * 1e12, "FLOP/s") if k in col else "" for col in by_k.values())] for k in ks]
        console.print(*fit_tables([Column("K"), *(Column(name) for name in by_k)], cells, console.width,
                                  title="fp32 rate by reduction length K (MACs behind one output element)"))
    streams = res.get("matvec_gbs_by_k") or {}
    cols = {f"{rows} row{'s' if rows != '1' else ''} {'W.t' if lay == 't' else 'W'}": dict(table)
            for lay, by_rows in streams.items() if isinstance(by_rows, dict) for rows, table in by_rows.items()}
    ks = sorted({int(k) for col in cols.values() for k in col})
    if ks:
        cells = [[str(k), *(f"{col[float(k)]:.1f} GB/s" if float(k) in col else "" for col in cols.values())]
                 for k in ks]
        console.print(*fit_tables([Column("K"), *(Column(name) for name in cols)], cells, console.width,
                                  title="weights streamed by a few-row product (a decode step's) against K: "
                                  "x @ W (W stored K x N), x @ W.t (stored N x K, as nn.Linear's)"))
    for problem in res.get("problems", []):
        console.print(Text(f"check failed: {problem}", style="yellow bold"))
    if path is None:
        console.print(Text(f"not saved ({res['seconds']:.1f} s)", style="yellow"))
        return
    console.print(Text(f"saved to {path} ({res['seconds']:.1f} s); `footprint fit` and `footprint predict` now "
                       "use these ceilings for this device", style="dim"))


def _err(pred: float | None, meas: float) -> str:
    return f"{100 * (pred - meas) / meas:+.1f}%" if pred is not None and meas else ""


@as_text
def render_ranks(res: Any, console: Console) -> None:
    """Print a :class:`~torch_footprint.measure.distributed.RanksBench`: per rank, the
    measured peak, step and communication time beside the prediction."""
    s = res.settings
    header = Text(res.model, style="bold cyan")
    how = (f"pipeline ({s['schedule']}, {s['microbatches']} micro-batches of {s['batch_per_rank']})"
           if s.get("schedule") else res.strategy)
    header.append(f"  ·  training, {how} over {res.nproc} ranks on {res.device} (torchrun)  ·  "
                  f"optimizer {s.get('optimizer')}, {s.get('precision')}, {s.get('threads')} thread(s) per rank",
                  style="dim")
    console.print(header)
    p = res.predicted
    step = p.step if p else None
    cols = [Column(c) for c in ("rank", "peak", "predicted", "error", "step", "predicted", "error", "comm",
                                "predicted")]
    cells = [[str(r.rank), binary(r.peak_bytes), binary(p.peak_of(r.rank)) if p else "",
              _err(p.peak_of(r.rank) if p else None, r.peak_bytes), _t(r.step_s),
              _t(step.time_s) if step else "", _err(step.time_s if step else None, r.step_s), _t(r.comm_s),
              _t(step.comm_s) if step else ""] for r in res.ranks]
    console.print(*fit_tables(cols, cells, console.width))
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
