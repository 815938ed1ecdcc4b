"""``footprint bench``: latency, throughput and memory measured on the local device."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError, Interrupted
from ..hardware.local import proc_kib
from ..trace.step import run_step
from .sampling import RunSampling
from .search import OutOfMemory, SearchResult, largest_runnable_batch, release_memory
from .timer import Clock, CpuClock, CudaClock, Stats, measure, warm_up


@dataclass
class BenchPoint:
    batch: int
    stats: Stats
    flops: int | None = None  # FLOPs of one call (forward, or forward + backward when training)
    memory: dict[str, int] = field(default_factory=dict)
    predicted_s: float | None = None  # roofline latency on this device's database row
    peak_flops: float | None = None  # that row's peak for the main dtype, FLOP/s
    sampling: dict[str, Any] | None = None  # what was sampled over the timed calls (measure/sampling.py)

    @property
    def samples_per_second(self) -> float:
        return self.stats.per_second(self.batch)

    @property
    def achieved_flops(self) -> float | None:
        return self.flops / self.stats.median if self.flops and self.stats.median else None

    @property
    def utilisation(self) -> float | None:
        """Achieved FLOP/s over the device's peak (model FLOPs utilisation)."""
        a = self.achieved_flops
        return a / self.peak_flops if a and self.peak_flops else None

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "stats": self.stats.to_dict(), "samples_per_second": self.samples_per_second,
                "flops": self.flops, "achieved_flop_per_s": self.achieved_flops, "memory": self.memory,
                "predicted_s": self.predicted_s, "peak_flop_per_s": self.peak_flops, "utilisation": self.utilisation,
                "sampling": self.sampling}


@dataclass
class BenchResult:

    kind = "bench"  # the envelope's kind of its saved file
    model: str
    device: str
    mode: str
    settings: dict[str, Any]
    points: list[BenchPoint] = field(default_factory=list)
    search: SearchResult | None = None
    profiler_table: str | None = None
    notes: list[str] = field(default_factory=list)
    unfinished: list[int | str] = field(default_factory=list)  # what Ctrl-C left undone
    profiler_ops: list[dict[str, Any]] = field(default_factory=list)  # torch.profiler's table, as rows

    def add_predictions(self, latency: dict[int, Any], accelerator: Any) -> None:
        """Put the roofline latency (by batch) on the device's row beside each measured point."""
        for pt in self.points:
            pred = latency.get(pt.batch)
            if pred is not None and accelerator is not None:
                pt.predicted_s = pred.time_s
                # the main dtype's own peak; none where the row has none for it (a CPU's theoretical
                # peak is fp32's: its bf16 units can run above it, and a share over 100% is wrong)
                pt.peak_flops = accelerator.peak(pred.main_dtype) or (
                    accelerator.peak("fp32") if pred.main_dtype == "fp32" or accelerator.kind != "cpu" else None)
        if accelerator is not None:
            self.notes.append(f"predicted: roofline on '{accelerator.id}' ("
                              f"{'calibrated' if accelerator.calibrated else 'datasheet'} ceilings); % of peak: "
                              "achieved FLOP/s over its " + ("theoretical peak (cores x clock x FMA width)"
                                                             if accelerator.kind == "cpu" else "datasheet peak"))
        elif not self.device.startswith("cuda"):
            self.notes.append("run `footprint calibrate` to see the roofline prediction and % of peak beside this")

    def __repr__(self) -> str:
        medians = {p.batch: round(p.stats.median, 9) for p in self.points}
        return f"BenchResult(model={self.model!r}, device={self.device!r}, mode={self.mode!r}, median_s={medians})"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "mode": self.mode, "settings": self.settings,
                "points": [p.to_dict() for p in self.points], "notes": self.notes,
                "largest_batch": self.search.batch if self.search else None,
                "search": self.search.tried if self.search else None, "profiler_table": self.profiler_table,
                "interrupted": bool(self.unfinished), "unfinished": self.unfinished,
                "profiler_ops": self.profiler_ops}


_KINETO_NOISE = re.compile(r"^(USDT:.*profiler_(start|stop)|ERROR:.*gpuGetDeviceCount failed.*)$")


@contextlib.contextmanager
def kineto_quiet() -> Iterator[None]:
    """Hold back what kineto writes straight to file descriptor 2 when the profiler starts and
    stops ("USDT: ... profiler_start"; "gpuGetDeviceCount failed" where there is no GPU); any
    other line written meanwhile is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            for line in held.read().decode(errors="replace").splitlines():
                if not _KINETO_NOISE.match(line.strip()):
                    print(line, file=sys.stderr)


def profiler_rows(averages: Any, cuda: bool, limit: int = 15) -> list[dict[str, Any]]:
    """torch.profiler's operator averages as rows (seconds), the most self time first."""
    def self_s(e: Any) -> float:
        return (e.self_device_time_total if cuda else e.self_cpu_time_total) / 1e6

    total = sum(self_s(e) for e in averages) or 1.0
    rows = [{"op": e.key, "calls": e.count, "self_s": self_s(e), "self_share": self_s(e) / total,
             "total_s": (e.device_time_total if cuda else e.cpu_time_total) / 1e6} for e in averages]
    return sorted(rows, key=lambda r: -r["self_s"])[:limit]


def pick_device(device: str | None) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise FootprintError(f"unknown device '{device}': use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise FootprintError(f"device '{device}' is not supported: use cpu, cuda or cuda:N")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise FootprintError(f"device '{device}' was asked for, but CUDA is not available on this machine "
                             f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'})")
    return str(dev)


def parse_batches(text: str | Sequence[int | str]) -> list[int | str]:
    """``"1,8,32,auto"`` -> [1, 8, 32, "auto"]."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[int | str] = []
    for item in items:
        item = str(item).strip().lower()
        if item == "auto":
            out.append("auto")
            continue
        try:
            b = int(item)
        except ValueError:
            raise FootprintError(f"batch sizes are whole numbers or 'auto', got '{item}'") from None
        if b < 1:
            raise FootprintError(f"a batch size must be at least 1, got {b}")
        out.append(b)
    if not out:
        raise FootprintError("no batch size given")
    return out


class RssSampler:
    """Peak resident set size of this process over a block.

    On Linux the kernel keeps the high-water mark (VmHWM) and lets a process reset it
    (``/proc/self/clear_refs``, "5"): nothing runs beside the timed calls. Elsewhere a
    thread samples the RSS every 10 ms; on a machine with few cores it competes with the
    timed calls (about 20% slower on 2 cores at a 1 ms period), so it is the fallback only.
    """

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.page = os.sysconf("SC_PAGE_SIZE")

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    @staticmethod
    def _hwm() -> int | None:
        return proc_kib("/proc/self/status", "VmHWM")

    @staticmethod
    def _reset_hwm() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.01)

    def __enter__(self) -> RssSampler:
        self.base = self.rss()
        self.peak = self.base
        if not (self._reset_hwm() and self._hwm() is not None):
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is None:
            self.peak = max(self.peak, self._hwm() or 0)
            return
        self._stop.set()
        self._thread.join()


def _sampled(watched: RunSampling, stats: Stats, batch: int, cuda: bool) -> dict[str, Any]:
    """The sampling summary of one batch's timed calls; on a CPU how busy the device was is the
    contention check's figure (this process's CPU time over threads x wall time)."""
    out = watched.summary(stats.reps * batch, item="sample")
    if not cuda and stats.contention is not None:
        out["device_busy"] = stats.contention.obtained
        n = stats.contention.threads
        out["device_busy_source"] = f"CPU time of this process over {n} thread{'' if n == 1 else 's'} x wall time"
        if stats.contention.busy:
            out["idle_cause"] = "other processes held the CPUs: the threads waited for them, not for work"
    return out


def run_bench(model: nn.Module, make_inputs: Callable[[int], tuple[tuple[Any, ...], dict[str, Any]]], *,
              name: str, device: str, batches: list[int | str], default_batch: int,
              predicted_peak: Callable[[int], int] | None = None, flops_of: Callable[[int], int | None] | None = None,
              autocast: torch.dtype | None = None, channels_last: bool = False, compile: bool = False,
              train: bool = False, optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
              inference_mode: bool = True, cudnn_benchmark: bool = False, profile: bool = False,
              budget: int | None = None, min_reps: int = 30, min_seconds: float = 2.0,
              settings: dict[str, Any] | None = None, notes: list[str] | None = None,
              progress: Callable[[str, float | None], None] | None = None,
              sample_interval: float | None = 0.1) -> BenchResult:
    """Time ``model`` (already on ``device``) at each batch size; "auto" finds the largest
    batch that runs first. ``predicted_peak(batch)`` gives the CPU budget check its figure
    (a batch over ``budget`` counts as out of memory without running); ``flops_of(batch)``
    gives the FLOPs of one call for the achieved FLOP/s. ``progress(message, fraction)``
    hears what is running (fraction None while searching or warming up). ``sample_interval``:
    seconds between samples of memory, utilisation and power over each batch's timed calls
    (:class:`~torch_footprint.measure.sampling.RunSampling`; None: no sampling)."""
    cuda = device.startswith("cuda")
    m = model.to(memory_format=torch.channels_last) if channels_last else model
    m.train(train)
    if cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    run_model: Callable[..., Any] = torch.compile(m) if compile else m
    opt = optimizer(list(m.parameters())) if train and optimizer is not None else None
    if train and opt is None:
        raise FootprintError("training steps need an optimizer")
    clock: Clock = CudaClock() if cuda else CpuClock()

    def inputs_at(b: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs = make_inputs(b)
        if channels_last:
            args = tuple(a.to(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4
                         else a for a in args)
        return args, kwargs

    def step_fn(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
        grad = torch.inference_mode if inference_mode else torch.no_grad
        device_type = torch.device(device).type
        return lambda: run_step(run_model, args, kwargs, backward=train, optimizer=opt, autocast=autocast,
                                device_type=device_type, no_grad=grad)

    result = BenchResult(model=name, device=device, mode="train" if train else "inference",
                         settings=dict(settings or {}, threads=torch.get_num_threads(), min_reps=min_reps,
                                       min_seconds=min_seconds, memory_budget=budget),
                         notes=list(notes or []))

    def try_batch(b: int) -> None:
        if progress:
            progress(f"batch search: trying {b}", None)
        if budget is not None and not cuda and predicted_peak is not None:
            need = predicted_peak(b)
            if need > budget:
                raise OutOfMemory(f"batch {b} needs {need} bytes, over the budget of {budget}")
        args, kwargs = inputs_at(b)
        fn = step_fn(args, kwargs)
        fn()
        if cuda:
            torch.cuda.synchronize()
        del fn, args, kwargs

    concrete: list[int] = []
    try:
        for b in batches:
            if b == "auto":
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                baseline = torch.cuda.memory_allocated() if cuda else None
                result.search = largest_runnable_batch(try_batch, start=default_batch)
                release_memory()
                if baseline is not None:
                    result.notes.append(f"after the batch search CUDA memory allocated is "
                                        f"{torch.cuda.memory_allocated()} bytes (before: {baseline})")
                if result.search.batch == 0:
                    raise FootprintError("not even the smallest batch fits in memory")
                concrete.append(result.search.batch)
            else:
                _refuse_over_budget(int(b), None if cuda else budget, predicted_peak)
                concrete.append(int(b))

        for b in concrete:
            if progress:
                progress(f"batch {b}: warming up", None)
            args, kwargs = inputs_at(b)
            fn = step_fn(args, kwargs)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            sampler: Any = contextlib.nullcontext() if cuda else RssSampler()
            with sampler:
                warm = warm_up(fn, clock)  # here, not in measure(): the sampling covers the timed calls only
                watched = RunSampling(device, sample_interval) if sample_interval else None
                with watched or contextlib.nullcontext():
                    stats = measure(fn, clock, min_reps=min_reps, min_seconds=min_seconds, warmup=False,
                                    threads=torch.get_num_threads(),
                                    on_progress=_timing(progress, b))
                stats.warmup_reps = warm
            if cuda:
                mem = {"cuda_max_allocated": torch.cuda.max_memory_allocated(),
                       "cuda_max_reserved": torch.cuda.max_memory_reserved()}
            else:
                mem = {"cpu_peak_rss_delta": sampler.peak - sampler.base}
            result.points.append(BenchPoint(b, stats, flops_of(b) if flops_of else None, mem,
                                            sampling=_sampled(watched, stats, b, cuda) if watched else None))
            del fn, args, kwargs
            gc.collect()

        if profile and concrete:
            # kineto logs "gpuGetDeviceCount failed" as an ERROR on machines without a GPU
            os.environ.setdefault("KINETO_LOG_LEVEL", "5")
            args, kwargs = inputs_at(concrete[0])
            fn = step_fn(args, kwargs)
            acts = [torch.profiler.ProfilerActivity.CPU]
            if cuda:
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            prof_run = torch.profiler.profile(activities=acts)
            with kineto_quiet():
                prof_run.start()
            try:
                for _ in range(5):
                    fn()
                if cuda:
                    torch.cuda.synchronize()
            finally:
                with kineto_quiet():
                    prof_run.stop()
            key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
            averages = prof_run.key_averages()
            result.profiler_table = averages.table(sort_by=key, row_limit=15)
            result.profiler_ops = profiler_rows(averages, cuda)
    except KeyboardInterrupt:  # keep what was measured; say what was not
        done = {p.batch for p in result.points}
        result.unfinished = [b for b in [*concrete, *batches[len(concrete):]] if b not in done] or ["profiler table"]
        raise Interrupted(result) from None
    return result


def _refuse_over_budget(batch: int, budget: int | None, predicted_peak: Callable[[int], int] | None) -> None:
    """A batch asked for whose predicted peak is over this machine's budget is refused before
    anything is allocated (on a CPU an allocation that large swaps or is killed, not caught)."""
    if budget is None or predicted_peak is None:
        return
    need = predicted_peak(batch)
    if need > budget:
        raise FootprintError(f"batch {batch} needs about {need / 2**30:.1f} GiB (its predicted peak), over this "
                             f"machine's budget of {budget / 2**30:.1f} GiB: not run (--max-memory sets the budget; "
                             "--batch auto finds the largest that fits)")


def _timing(progress: Callable[[str, float | None], None] | None, batch: int) -> Callable[[float], None] | None:
    """What the timer tells ``progress`` while it times ``batch``."""
    if progress is None:
        return None
    return lambda fraction: progress(f"batch {batch}: timing", fraction)
