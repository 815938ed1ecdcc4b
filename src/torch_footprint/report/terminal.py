"""Terminal renderer for a profile (rich). Formatting only: every number comes from the result."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis import ModuleRow, OperatorRow, Totals
from .layout import Cell, Column, fit_tables
from .units import binary, count, percent, shape, si
from .watch import sampling_lines

CONVENTIONS = (
    "1 MAC = 2 FLOPs. MACs count matrix ops only (matmul, convolution, attention): the figure thop, "
    "fvcore and torchvision's \"GFLOPS\" report. FLOPs = matrix FLOPs (2 x MACs, tensor-core work) + "
    "vector FLOPs (elementwise, reductions, norms, softmax, bias adds; the per-operator convention: the docs' "
    "page on FLOPs and MACs)."
)


def _tree_label(row: ModuleRow, root_name: str) -> str:
    if row.path == "":
        return root_name
    return "  " * (row.depth - 1) + "├─ " + row.name


def module_table(rows: list[ModuleRow], root_name: str, title: str | None = None,
                 width: int = 160) -> list[Table]:
    cols = [Column("module", "left", wrap=True), Column("type", "left", style="dim", priority=7),
            Column("output", "left", priority=6), Column("params"), Column("MACs"), Column("FLOPs"),
            Column("share"), Column("read", priority=8), Column("written", priority=9)]
    cells = []
    for r in rows:
        calls = f" x{r.calls}" if r.calls > 1 else ""
        cells.append([
            _tree_label(r, root_name),
            r.type + calls,
            shape(r.out_shapes),
            count(r.params) if r.params else "",
            si(r.macs, "MAC") if r.macs else "",
            si(r.flops, "FLOP") if r.flops else "",
            percent(r.share) if r.flops else "",
            binary(r.bytes_read) if r.bytes_read else "",
            binary(r.bytes_written) if r.bytes_written else "",
        ])
    return fit_tables(cols, cells, width, title=title, row_styles=["bold" if r.path == "" else None for r in rows])


def operator_table(rows: list[OperatorRow], title: str | None = None, width: int = 160) -> list[Table]:
    cols = [Column("operator", "left", wrap=True), Column("kind", "left", style="dim", priority=7),
            Column("calls"), Column("MACs"), Column("FLOPs"), Column("share"), Column("read", priority=8),
            Column("written", priority=9)]
    cells = [[r.op, r.kind, str(r.calls), si(r.macs, "MAC") if r.macs else "", si(r.flops, "FLOP") if r.flops else "",
              percent(r.share) if r.flops else "", binary(r.bytes_read), binary(r.bytes_written)] for r in rows]
    return fit_tables(cols, cells, width, title=title,
                      row_styles=["yellow" if r.kind == "unknown" else None for r in rows])


def _totals_line(label: str, t: Totals) -> Text:
    line = Text(f"{label}: ", style="bold")
    line.append(f"{si(t.macs, 'MAC')} = {si(t.matrix_flops, 'FLOP')} matrix; ")
    line.append(f"+ {si(t.vector_flops, 'FLOP')} vector = {si(t.flops, 'FLOP')} in all; ")
    line.append(f"{binary(t.bytes_read)} read, {binary(t.bytes_written)} written, {t.ops} kernels")
    return line


DEFAULT_WIDTH = 100


def text_console(width: int | None = None, color: bool = False) -> Console:
    """A console that writes into a string: ``width`` columns, ANSI colours when ``color``."""
    return Console(file=io.StringIO(), width=width or DEFAULT_WIDTH, force_terminal=color,
                   color_system="standard" if color else None)


def as_text(draw: Callable[..., None]) -> Callable[..., str]:
    """A renderer of one signature from a function that draws on a console: the result in
    (positional), view options as keywords, ``width`` and ``color`` for the terminal, text out."""

    @functools.wraps(draw)
    def render(result: Any, *args: Any, width: int | None = None, color: bool = False, **view: Any) -> str:
        console = text_console(width, color)
        draw(result, console, *args, **view)
        return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]

    return render


@as_text
def render_profile(p: Any, console: Console, by: str = "module", depth: int | None = 2) -> None:
    """A :class:`~torch_footprint.analysis.Profile`: its table by module or operator and totals."""
    tr = p.trace
    s = tr.settings
    inputs = ", ".join("x".join(str(d) for d in i["shape"]) + f":{i['dtype']}" for i in tr.inputs) or "(none)"
    mode = "train mode" if s.get("training") else "eval mode"
    passes = "forward + backward" if s.get("backward") else "forward"
    header = Text(f"{tr.model}", style="bold cyan")
    header.append(f"  input {inputs}  ·  {mode}, {passes}  ·  {s.get('tensors')} tensors, "
                  f"kernels of {s.get('device')}", style="dim")
    console.print(header)
    phases = ("forward",)
    if by == "operator":
        console.print(*operator_table(p.by_operator(phases), title="forward, by operator", width=console.width))
        if s.get("backward"):
            console.print(*operator_table(p.by_operator(("backward",)), title="backward, by operator",
                                          width=console.width))
    else:
        console.print(*module_table(p.by_module(depth, phases), tr.modules[0].type,
                                    title=f"forward, by module (depth {depth})" if depth is not None else None,
                                    width=console.width))
    dtypes = ", ".join(f"{count(n)} {d}" for d, n in p.params_by_dtype.items())
    console.print(Text.assemble(
        ("params: ", "bold"), f"{p.params:,} ({count(p.params)}; {dtypes}), trainable {p.trainable_params:,}; ",
        f"{binary(p.param_bytes)} of parameters, {binary(p.buffer_bytes)} of buffers"))
    console.print(_totals_line("forward", p.forward))
    if s.get("backward"):
        bwd = p.backward
        console.print(_totals_line("backward", bwd))
        ratio = bwd.matrix_flops / p.matrix_flops if p.matrix_flops else 0.0
        console.print(Text(f"backward / forward matrix FLOPs: {ratio:.3f}", style="dim"))
    unknown = p.unknown_ops
    if unknown:
        listed = ", ".join(f"{op} (x{n})" for op, n in sorted(unknown.items()))
        console.print(Text(f"no formula, FLOPs not counted: {listed}", style="yellow"))
    else:
        console.print(Text("every operator had a formula", style="dim"))
    for note in p.notes:
        console.print(Text(f"note: {note}", style="dim"))
    console.print(Text(CONVENTIONS, style="dim italic"))


def describe_workload(s: dict[str, Any]) -> tuple[str, str]:
    """The inputs and the kind of run of a result's settings, as one header shows them."""
    inputs = ", ".join("x".join(str(d) for d in i["shape"]) + f":{i['dtype']}" for i in s.get("inputs", []))
    what = "training step" if s.get("backward") else "inference"
    if s.get("backward"):
        what += f" ({s.get('optimizer') or 'no optimizer'}, {s.get('precision')}"
        what += ", checkpointing" if s.get("checkpointing") else ""
        what += ")"
    elif s.get("precision") not in (None, "fp32"):
        what += f" ({s.get('precision')})"
    return inputs, what


@as_text
def render_memory(est: Any, console: Console, top: int = 10) -> None:
    """A :class:`~torch_footprint.estimate.memory.MemoryEstimate`."""
    s = est.settings
    inputs, what = describe_workload(s)
    header = Text(f"{s.get('model')}", style="bold cyan")
    header.append(f"  input {inputs}  ·  {what}  ·  for {s.get('target')}", style="dim")
    console.print(header)
    peak = est.peak
    cells: list[list[Cell]] = []
    styles: list[str | None] = []
    for cat, nbytes in peak.breakdown.items():
        cells.append([cat, binary(nbytes), percent(nbytes / peak.peak_bytes) if peak.peak_bytes else ""])
        styles.append(None)
    cells.append(["peak of tensors", binary(peak.peak_bytes), ""])
    styles.append("bold")
    if est.steady is not None:
        cells.append(["peak, later steps", binary(est.steady.peak_bytes), ""])
        styles.append("bold")
    for name, nbytes in est.overheads.items():
        cells.append([f"+ {name.replace('_', ' ')}", binary(nbytes), ""])
        styles.append("dim")
    cells += [["total", binary(est.total), ""], [f"provision (total / {est.utilisation:g})", binary(est.provision), ""]]
    styles += ["bold", "bold green"]
    console.print(*fit_tables([Column("category", "left", wrap=True), Column("bytes"), Column("share")], cells,
                              console.width, title="memory at the peak", row_styles=styles))
    console.print(Text.assemble(("peak: ", "bold"), f"{binary(peak.peak_bytes)} during the {peak.phase}, after ",
                                f"{peak.op} in '{peak.module or '<root>'}'; ",
                                f"{binary(peak.baseline_bytes)} alive before the first op"))
    if est.steady is not None:
        st = est.steady
        used = "later steps" if est.larger is st else "first step"
        console.print(Text.assemble(("later steps: ", "bold"), f"{binary(st.peak_bytes)} during the {st.phase}, "
                                    f"after {st.op} in '{st.module or '<root>'}' (optimizer state alive from the "
                                    f"start); the total uses the {used}"))
    if peak.activations_by_module:
        acts = [[mod or "<root>", binary(nbytes)] for mod, nbytes in list(peak.activations_by_module.items())[:top]]
        rest = list(peak.activations_by_module.values())[top:]
        if rest:
            acts.append([f"({len(rest)} more)", binary(sum(rest))])
        console.print(*fit_tables([Column("module", "left", wrap=True), Column("bytes")], acts, console.width,
                                  title="activations saved for the backward, by module",
                                  row_styles=[None] * top + ["dim"] if rest else None))
    fit = est.scaling
    if fit is not None:
        traced = f"traced at batches {', '.join(map(str, fit.batches))}"
        line = Text("batch: ", style="bold")
        if len(fit.pieces) > 1:  # the peak moves from one operator (or phase) to another as the batch grows
            line.append(f"the peak, exactly ({traced}; every operator's bytes are affine in the batch):")
            ranges = [f"batches {p.start}-{nxt.start - 1}" if nxt.start - 1 > p.start else f"batch {p.start}"
                      for p, nxt in zip(fit.pieces, fit.pieces[1:])] + [f"batches {fit.pieces[-1].start} and up"]
            for p, r in zip(fit.pieces, ranges):
                line.append(f"\n  {r}: {binary(p.fixed)} + {_per_sample(p.per_sample)} x batch (in the {p.phase})",
                            style="")
        elif fit.pieces or fit.affine:
            line.append(f"peak = {binary(fit.fixed)} + {_per_sample(fit.per_sample)} x batch ({traced}; affine)")
        else:
            line.append(f"peak ≈ {binary(fit.fixed)} + {_per_sample(fit.per_sample)} x batch through batches "
                        f"{fit.batches[0]} and {fit.batches[1]} (peaks {', '.join(binary(x) for x in fit.peaks)}: "
                        "the model ran different operators at these batch sizes, so this line is approximate)")
        console.print(line)
        if est.budget is not None:
            console.print(Text.assemble(("largest batch within ", "bold"), (binary(est.budget), "bold"),
                                        (f" at {est.utilisation:.0%} utilisation: ", "bold"),
                                        (f"{fit.max_batch}", "bold green"),
                                        " (checked by tracing that batch and the next)" if fit.max_batch_checked
                                        else ""))
    for note in est.notes:
        console.print(Text(f"note: {note}", style="dim"))
    state = peak.persistent.get("optimizer state", 0)
    if s.get("backward") and state and not peak.breakdown.get("optimizer state"):
        console.print(Text(f"note: this is the first training step: the optimizer allocates its state "
                           f"({binary(state)}) in its step, after this peak; 'peak, later steps' is a later step, "
                           "with the state allocated before it", style="yellow"))
    console.print(Text("Memory in binary units. Activations: tensors made in the forward and alive when it ends "
                       "(saved for the backward). Temporaries: anything else alive at the peak.", style="dim italic"))


def _per_sample(nbytes: float) -> str:
    """Bytes per sample, with a sign where the line falls and decimals where it is small."""
    return binary(nbytes) if abs(nbytes) >= 1024 or nbytes == int(nbytes) else f"{nbytes:.1f} B"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.3f} s"


@as_text
def render_bench(res: Any, console: Console) -> None:
    """Print a :class:`~torch_footprint.bench.runner.BenchResult`."""
    s = res.settings
    opts = [k for k in ("channels_last", "compile", "cudnn_benchmark") if s.get(k)]
    if s.get("dtype"):
        opts.append(f"dtype {s['dtype']}")
    if s.get("autocast"):
        opts.append(f"autocast {s['autocast']}")
    if res.mode == "inference":
        opts.append("inference_mode" if s.get("inference_mode") else "no_grad")
    else:
        opts.append(f"optimizer {s.get('optimizer')}")
    header = Text(f"{res.model}", style="bold cyan")
    threads = s.get("threads")
    header.append(f"  ·  {res.mode} on {res.device}  ·  {', '.join(opts)}  ·  {threads} "
                  f"thread{'' if threads == 1 else 's'}",
                  style="dim")
    console.print(header)
    predicted = any(p.predicted_s for p in res.points)
    # the first table holds what most readers want; the rest continue below when the terminal is narrow
    cols = [Column("batch"), Column("median"), Column("mean", priority=20), Column("std", priority=21),
            Column("p90", priority=22), Column("p99", priority=23), Column("min", priority=24), Column("spread"),
            Column("samples/s"), Column("GFLOP/s", priority=11)]
    cols += [Column("predicted", priority=12), Column("% of peak", priority=13)] if predicted else []
    sampled = [getattr(p, "sampling", None) or {} for p in res.points]
    busy = any(x.get("device_busy") is not None for x in sampled)
    energy = any(x.get("energy_per_sample_j") is not None for x in sampled)
    cols += [Column("busy", priority=10)] if busy else []
    cols += [Column("J/sample", priority=14)] if energy else []
    cols += [Column("memory", priority=25), Column("reps", priority=26)]
    cells: list[list[Cell]] = []
    for p, smp in zip(res.points, sampled):
        st = p.stats
        mem = p.memory.get("cuda_max_allocated", p.memory.get("cpu_peak_rss_delta"))
        label = "max alloc " if "cuda_max_allocated" in p.memory else "RSS +"
        cells.append([str(p.batch), _ms(st.median), _ms(st.mean), _ms(st.std), _ms(st.p90), _ms(st.p99),
                      _ms(st.min), Text(percent(st.spread), style="yellow bold" if st.noisy else ""),
                      f"{p.samples_per_second:,.1f}", f"{p.achieved_flops / 1e9:,.1f}" if p.achieved_flops else "",
                      *([_ms(p.predicted_s) if p.predicted_s else "", percent(p.utilisation) if p.utilisation else ""]
                        if predicted else []),
                      *([percent(smp["device_busy"]) if smp.get("device_busy") is not None else ""] if busy else []),
                      *([f"{smp['energy_per_sample_j']:.3g} J" if smp.get("energy_per_sample_j") is not None else ""]
                        if energy else []),
                      label + binary(mem) if mem is not None else "", f"{st.reps} (+{st.warmup_reps} warm-up)"])
    console.print(*fit_tables(cols, cells, console.width))
    for p in res.points:
        st = p.stats
        console.print(Text(f"batch {p.batch}: {st.reps} timed calls in {st.wall:.2f} s real, {st.user:.2f} s user, "
                           f"{st.sys:.2f} s sys CPU time", style="dim"))
        if st.noisy:
            console.print(Text(f"batch {p.batch}: noisy: spread (IQR / median) {percent(st.spread)} is over 10%; "
                               "the machine was busy or the clock unstable", style="yellow"))
        if st.contention is not None and st.contention.busy:
            console.print(Text(f"batch {p.batch}: {st.contention.describe()}", style="yellow bold"))
        for line in sampling_lines(getattr(p, "sampling", None), label=f"batch {p.batch}", unavailable=False):
            console.print(Text(line, style="dim"))
    gone = next((x["unavailable"] for x in sampled if x.get("unavailable")), {})
    for what, why in gone.items():
        console.print(Text(f"{what} not available: {why}", style="dim"))
    if res.unfinished:
        console.print(Text("interrupted (Ctrl-C): not measured: " + ", ".join(map(str, res.unfinished)),
                           style="yellow bold"))
    if res.search is not None:
        tried = ", ".join(f"{b}{'' if ok else ' (out of memory)'}" for b, ok in res.search.tried)
        console.print(Text.assemble(("largest batch: ", "bold"), (str(res.search.batch), "bold green"),
                                    f"  (tried {tried})"))
    if res.search is not None and s.get("memory_budget") and not res.device.startswith("cuda"):
        console.print(Text(f"CPU memory budget for the batch search: {binary(s['memory_budget'])} "
                           "(a batch whose predicted peak is over it counts as out of memory)", style="dim"))
    if res.profiler_ops:
        where = "CUDA" if res.device.startswith("cuda") else "CPU"
        cells = [[r["op"], str(r["calls"]), _ms(r["self_s"]), percent(r["self_share"]), _ms(r["total_s"])]
                 for r in res.profiler_ops]
        console.print(*fit_tables([Column("operator", "left", wrap=True), Column("calls"),
                                   Column(f"self {where}"), Column("self %"), Column(f"{where} total")], cells,
                                  console.width, title="torch.profiler, 5 calls at the first batch size"))
    for note in res.notes:
        console.print(Text(f"note: {note}", style="dim"))
    console.print(Text("Latency per call; spread = IQR / median. GFLOP/s: the traced FLOPs of one call over its "
                       "median time.", style="dim italic"))
