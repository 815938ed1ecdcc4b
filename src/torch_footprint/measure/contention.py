"""Is the machine busy? A timing taken while other processes hold the CPUs is slow and
can look steady (a 2-thread model sharing 2 cores with a busy loop ran 16x slower with a
spread under 1%), so the spread alone cannot tell. Around each timed block this module
reads what the CPUs of this process's affinity set did (/proc/stat) and what this process
got (its user + system time), and judges:

* oversubscribed: more compute threads than usable CPUs;
* contended: the CPU time other processes (and the hypervisor, as steal) took on those
  CPUs leaves fewer free cores than this process has threads.

The CPU time this process obtained over threads x wall time and the load average are
reported beside; the first is low for models whose kernels run on one thread anyway, so
it is not a verdict on its own.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..hardware.local import cpu_seconds, load_average, usable_cpus

MARGIN = 0.25  # cores other processes may take before a timing counts as contended
MIN_WALL = 0.2  # seconds: /proc/stat counts in 10 ms ticks; shorter windows are not judged


@dataclass(frozen=True)
class CpuSample:
    when: float
    own: float  # this process's user + system seconds
    machine: tuple[float, float] | None  # busy and stolen seconds of the usable CPUs
    load: float | None


def sample(children: bool = False) -> CpuSample:
    """Now; ``children``: this process's CPU time includes that of the children it waited for
    (the ranks torchrun started, and torchrun)."""
    t = os.times()
    own = t.user + t.system + (t.children_user + t.children_system if children else 0.0)
    return CpuSample(time.perf_counter(), own, cpu_seconds(), load_average())


@dataclass(frozen=True)
class Contention:
    """What the CPUs did while this process ran ``threads`` compute threads for ``wall`` seconds."""

    threads: int
    cpus: int
    wall: float
    own_cpu: float  # CPU seconds this process got
    others_cpu: float | None  # CPU seconds other processes took on the same CPUs (None: unknown)
    steal: float | None  # seconds the hypervisor took from those CPUs
    load: float | None  # one-minute load average at the start

    @property
    def obtained(self) -> float:
        """CPU time this process got over threads x wall time."""
        return self.own_cpu / (self.threads * self.wall) if self.threads and self.wall > 0 else 0.0

    @property
    def others_cores(self) -> float | None:
        if self.others_cpu is None or self.wall < MIN_WALL:
            return None
        return max(0.0, (self.others_cpu + (self.steal or 0.0)) / self.wall)

    @property
    def oversubscribed(self) -> bool:
        return self.threads > self.cpus

    @property
    def contended(self) -> bool:
        others = self.others_cores
        return others is not None and self.threads > self.cpus - others + MARGIN

    @property
    def busy(self) -> bool:
        return self.oversubscribed or self.contended

    @property
    def suggested_threads(self) -> int:
        """The most threads that had a CPU each to themselves."""
        free = self.cpus - (self.others_cores or 0.0)
        return max(1, min(self.threads, self.cpus, int(free + MARGIN)))

    def describe(self) -> str:
        """One sentence for the output: what was wrong and what to do ("" when clean)."""
        if not self.busy:
            return ""
        why = []
        if self.oversubscribed:
            why.append(f"{_threads(self.threads)} on {self.cpus} usable CPUs")
        if self.contended:
            why.append(f"other processes used {self.others_cores:.2f} of {self.cpus} CPUs")
        load = f"; load average {self.load:.2f}" if self.load is not None else ""
        return (f"busy machine: {', '.join(why)}{load}; this process got {self.obtained:.0%} of "
                f"{_threads(self.threads)} x wall time. Measure again when it is idle, or with "
                f"--threads {self.suggested_threads}")

    def to_dict(self) -> dict[str, Any]:
        return {"busy": self.busy, "oversubscribed": self.oversubscribed, "contended": self.contended,
                "threads": self.threads, "cpus": self.cpus, "wall_s": self.wall, "own_cpu_s": self.own_cpu,
                "obtained": self.obtained, "others_cpu_s": self.others_cpu, "steal_s": self.steal,
                "others_cores": self.others_cores, "load_average": self.load,
                "suggested_threads": self.suggested_threads}


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def between(start: CpuSample, end: CpuSample, threads: int, cpus: int | None = None) -> Contention:
    """The contention over the window from ``start`` to ``end``."""
    wall = end.when - start.when
    own = end.own - start.own
    others = steal = None
    if start.machine is not None and end.machine is not None:
        steal = end.machine[1] - start.machine[1]
        others = max(0.0, end.machine[0] - start.machine[0] - own)
    return Contention(threads, cpus or usable_cpus(), wall, own, others, steal, start.load)
