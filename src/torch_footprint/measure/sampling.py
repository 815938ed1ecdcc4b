"""Sampling a running job: memory, utilisation, clocks and power over time.

Each reader takes one reading of one source:

* :class:`Processes`: a process and its descendants through psutil (resident memory, CPU
  time, threads);
* :class:`Nvml`: NVIDIA GPUs through NVML (nvidia-ml-py, the library gpustat and nvitop use):
  device memory used and total, utilisation, clocks, power, the energy counter and each
  process's device memory;
* :class:`Rapl`: the CPU package's energy counters the kernel exposes under
  /sys/class/powercap (RAPL), where they exist and are readable;
* :class:`TorchCuda`: torch's own allocator statistics, in this process only.

A :class:`Probe` combines readers into one :class:`Sample`; a :class:`Sampler` takes samples
in a background thread at an interval (``bench``, ``llm --measure``); ``footprint watch``
takes them in its main loop (:mod:`torch_footprint.measure.watch`). :class:`RunSampling`
wraps a timed block of this process and sums it up (peaks, means, energy, busy share).

psutil and nvidia-ml-py are optional (the ``watch`` extra): without psutil the in-process
path falls back to /proc/self for the resident memory and says what it could not read.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import FootprintError
from ..hardware.local import cpu_seconds, usable_cpus
from .devices import (
    NO_PSUTIL,
    Nvml,
    Processes,
    Rapl,
    TorchCuda,
    nvml_index_of,
    open_nvml,
    psutil_module,
    rss_bytes,
    thread_cpu_seconds,
)

# --- samples ---------------------------------------------------------------------------------

@dataclass
class Sample:
    """One moment: ``t`` seconds since sampling began; ``devices`` by id ("cpu", "gpu0", ...);
    ``processes`` one row per process watched; ``torch`` the allocator's figures by device
    (in process only)."""

    t: float
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)
    torch: dict[str, dict[str, int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"t": round(self.t, 6), "devices": self.devices, "processes": self.processes}
        if self.torch is not None:
            d["torch"] = self.torch
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(d["t"], d.get("devices", {}), d.get("processes", []), d.get("torch"))


class CpuDevice:
    """The CPUs of this process's affinity set: the share of them busy (every process; from
    /proc/stat, as the contention check reads it), the machine's memory, package energy."""

    def __init__(self, rapl: Rapl | None = None) -> None:
        self.cpus = usable_cpus()
        self.rapl = rapl
        self._last: tuple[float, float] | None = None
        psutil = psutil_module()
        self._vm = psutil.virtual_memory if psutil else None

    def read(self, now: float) -> dict[str, Any]:
        busy = cpu_seconds()
        util = None
        if busy is not None:
            if self._last is not None and now > self._last[0]:
                util = min(1.0, max(0.0, (busy[0] - self._last[1]) / ((now - self._last[0]) * self.cpus)))
            self._last = (now, busy[0])
        row: dict[str, Any] = {"kind": "cpu", "name": f"{self.cpus} CPUs", "cpus": self.cpus, "utilisation": util}
        if self._vm is not None:
            vm = self._vm()
            row["memory_used"], row["memory_total"] = int(vm.total - vm.available), int(vm.total)
        energy = self.rapl.energy_j() if self.rapl is not None else None
        row["energy_j"] = energy
        return row


class Probe:
    """Readers combined: one call to :meth:`read` is one :class:`Sample`."""

    def __init__(self, *, processes: Processes | None = None, nvml: Nvml | None = None, cpu: CpuDevice | None = None,
                 torch_cuda: dict[str, TorchCuda] | None = None, rss_only: bool = False) -> None:
        self.processes, self.nvml, self.cpu, self.torch_cuda = processes, nvml, cpu, torch_cuda or {}
        self.rss_only = rss_only  # this process's RSS from /proc/self (no psutil)
        self.began = time.monotonic()
        self._last_energy: dict[str, tuple[float, float]] = {}

    def read(self) -> Sample:
        now = time.monotonic()
        s = Sample(now - self.began)
        if self.processes is not None:
            s.processes = self.processes.read(now)
        elif self.rss_only:
            s.processes = [{"pid": os.getpid(), "rss": rss_bytes()}]
        if self.cpu is not None:
            s.devices["cpu"] = self.cpu.read(now)
        if self.nvml is not None:
            s.devices.update(self.nvml.read())
        for dev, row in s.devices.items():  # power from the energy counter where the device reports none
            e = row.get("energy_j")
            if e is None:
                continue
            last = self._last_energy.get(dev)
            if row.get("power_w") is None and last is not None and now > last[0]:
                row["power_w"] = (e - last[1]) / (now - last[0])
            self._last_energy[dev] = (now, e)
        if self.torch_cuda:
            s.torch = {dev: t.read() for dev, t in self.torch_cuda.items()}
        return s


class Sampler:
    """Samples a :class:`Probe` every ``interval`` seconds in a daemon thread, from entering
    the block to leaving it (a reading at each end). ``on_sample`` hears each sample (in the
    sampling thread)."""

    def __init__(self, probe: Probe, interval: float, on_sample: Callable[[Sample], None] | None = None) -> None:
        if not interval > 0:
            raise FootprintError(f"the sampling interval must be more than 0 seconds, got {interval}")
        self.probe, self.interval, self.on_sample = probe, interval, on_sample
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        s = self.probe.read()
        self.samples.append(s)
        if self.on_sample is not None:
            self.on_sample(s)

    def _run(self) -> None:
        began = time.monotonic()
        k = 1
        while not self._stop.wait(max(0.0, began + k * self.interval - time.monotonic())):
            self._take()
            k = max(k + 1, int((time.monotonic() - began) / self.interval) + 1)  # late: skip, don't bunch up

    def __enter__(self) -> Sampler:
        self._take()
        self._thread = threading.Thread(target=self._run, name="footprint-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take()


# --- a timed block of this process ------------------------------------------------------------

class RunSampling:
    """Sampling around a timed block of this process (``bench``, ``llm --measure``).

    On a CPU: this process's RSS over time, the CPU time of each of its threads and the
    package energy (RAPL) where readable. On a CUDA device, besides: NVML's device memory,
    utilisation, clocks, power and energy, and torch's allocator figures. :meth:`summary`
    sums the block up; ``unavailable`` says what could not be read and why."""

    def __init__(self, device: str = "cpu", interval: float = 0.1) -> None:
        self.device, self.interval = device, interval
        self.unavailable: dict[str, str] = {}
        self.cuda = device.startswith("cuda")
        self.psutil = psutil_module()
        if self.psutil is None:
            self.unavailable["per-thread CPU time"] = NO_PSUTIL
        self.rapl = Rapl()
        self.nvml: Nvml | None = None
        self.gpu_key: str | None = None
        torch_cuda = None
        if self.cuda:
            import torch

            index = torch.device(device).index
            index = torch.cuda.current_device() if index is None else index
            torch_cuda = {"cuda": TorchCuda(index)}
            self.nvml, why = open_nvml(required=False)
            if self.nvml is None:
                self.unavailable["GPU utilisation, clocks and power"] = why or "NVML is not available"
            else:
                nvml_index = nvml_index_of(index, self.nvml)
                if nvml_index is None:
                    nvml_index = self.nvml.indices[index] if index < len(self.nvml.indices) else self.nvml.indices[0]
                self.gpu_key = f"gpu{nvml_index}"
                self.nvml.keep([nvml_index])
        elif not self.rapl.available:
            self.unavailable["energy"] = self.rapl.why or "no energy counter"
        self.probe = Probe(cpu=CpuDevice(self.rapl if not self.cuda else None), nvml=self.nvml, torch_cuda=torch_cuda,
                           rss_only=True)
        self.sampler = Sampler(self.probe, interval)
        self._threads0: dict[int, float] | None = None
        self.threads: dict[int, float] | None = None  # CPU seconds of each thread over the block
        self.wall = 0.0

    def __enter__(self) -> RunSampling:
        self._threads0 = thread_cpu_seconds()
        self._t0 = time.monotonic()
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sampler.__exit__(*exc)
        self.wall = time.monotonic() - self._t0
        end = thread_cpu_seconds()
        if end is not None and self._threads0 is not None:
            self.threads = {tid: cpu - self._threads0.get(tid, 0.0) for tid, cpu in end.items()}
        if self.nvml is not None:
            self.nvml.close()

    def summary(self, items: int | None = None, item: str = "sample") -> dict[str, Any]:
        """The block summed up: peaks and means of what was sampled, each thread's CPU share,
        energy (J) and energy per ``item`` (``items`` of them in the block) where known."""
        samples = self.sampler.samples
        rss = [p["rss"] for s in samples for p in s.processes if "rss" in p]
        out: dict[str, Any] = {"interval_s": self.interval, "samples": len(samples), "wall_s": self.wall,
                               "rss_peak": max(rss) if rss else None,
                               "rss_mean": sum(rss) / len(rss) if rss else None}
        if self.threads is not None and self.wall > 0:
            shares = sorted((cpu / self.wall for cpu in self.threads.values()), reverse=True)
            out["thread_cpu_shares"] = [round(x, 4) for x in shares if x >= 0.01]
            out["threads"] = len(shares)
        key = self.gpu_key if self.cuda else "cpu"
        rows = [s.devices[key] for s in samples if key in s.devices]
        energy = None
        if rows:
            first, last = rows[0].get("energy_j"), rows[-1].get("energy_j")
            if first is not None and last is not None:
                energy = last - first
                out["energy_source"] = ("NVML's energy counter of the whole GPU" if self.cuda else
                                        "RAPL package counters: the whole CPU package, every process on it")
        if self.cuda and rows:
            def mean(k: str) -> float | None:
                vals = [r[k] for r in rows if r.get(k) is not None]
                return sum(vals) / len(vals) if vals else None

            def peak(k: str) -> int | None:
                vals = [r[k] for r in rows if r.get(k) is not None]
                return max(vals) if vals else None

            pid = os.getpid()
            own = [r["processes"][pid] for r in rows if pid in r.get("processes", {})]
            torch_rows = [s.torch["cuda"] for s in samples if s.torch]
            out["gpu"] = {"name": rows[0].get("name"), "memory_used_peak": peak("memory_used"),
                          "memory_total": rows[0].get("memory_total"),
                          "process_memory_peak": max(own) if own else None,
                          "torch_reserved_peak": max((t["reserved"] for t in torch_rows), default=None),
                          "torch_allocated_peak": max((t["allocated"] for t in torch_rows), default=None),
                          "utilisation_mean": mean("utilisation"),
                          "memory_utilisation_mean": mean("memory_utilisation"),
                          "sm_clock_mhz_mean": mean("sm_clock_mhz"), "power_w_mean": mean("power_w")}
            if not own:
                self.unavailable.setdefault("this process's GPU memory (NVML)",
                                            "NVML lists no process with this pid (a container's own pid namespace)")
            if energy is None and out["gpu"]["power_w_mean"] is not None:
                energy = out["gpu"]["power_w_mean"] * self.wall
                out["energy_source"] = "NVML's power readings x time (the GPU has no energy counter)"
            busy = out["gpu"]["utilisation_mean"]
            if busy is not None:
                out["device_busy"] = busy
                out["device_busy_source"] = "NVML utilisation: share of time a kernel ran"
            elif "GPU utilisation" not in " ".join(self.unavailable):
                self.unavailable["GPU utilisation"] = "NVML reports none for this GPU"
        if energy is not None:
            out["energy_j"] = energy
            out["power_w"] = energy / self.wall if self.wall > 0 else None
            if items:
                out[f"energy_per_{item}_j"] = energy / items
        elif "energy" not in self.unavailable and self.cuda:
            self.unavailable["energy"] = ("NVML reports neither energy nor power for this GPU" if self.nvml
                                          else self.unavailable.get("GPU utilisation, clocks and power", ""))
        out["unavailable"] = dict(self.unavailable)
        return out
