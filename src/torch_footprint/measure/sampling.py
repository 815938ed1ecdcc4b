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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FootprintError, MissingExtraError
from ..hardware.local import cpu_seconds, usable_cpus

RAPL_ROOT = "/sys/class/powercap"


# --- optional libraries ----------------------------------------------------------------------

def psutil_module() -> Any | None:
    """psutil, or None where it is not installed."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil


def require_psutil(purpose: str) -> Any:
    mod = psutil_module()
    if mod is None:
        raise MissingExtraError("psutil", "watch", purpose)
    return mod


NO_PSUTIL = "psutil is not installed (pip install 'torch-footprint[watch]')"


# --- processes -------------------------------------------------------------------------------

class Processes:
    """A root process and, with ``descendants``, every process below it, read through psutil.

    Each reading lists one row per live process: pid, parent, name, resident memory (bytes),
    CPU (cores busy since the previous reading: 1.0 is one core all the time) and threads.
    """

    def __init__(self, pid: int, descendants: bool = True) -> None:
        self.psutil = require_psutil("watching a process")
        self.root = self.psutil.Process(pid)
        self.descendants = descendants
        self._known: dict[int, Any] = {pid: self.root}
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (when, CPU seconds)
        self.seen: dict[int, float] = {}  # every pid seen -> its create time (to end them, never a reused pid)

    def members(self) -> list[Any]:
        procs = [self.root]
        if self.descendants:
            try:
                procs += self.root.children(recursive=True)
            except self.psutil.Error:
                pass
        out = []
        for p in procs:  # keep psutil's objects: they remember the create time (no reused pid)
            out.append(self._known.setdefault(p.pid, p))
        return out

    def read(self, now: float | None = None) -> list[dict[str, Any]]:
        rows = []
        for p in self.members():
            when = time.monotonic() if now is None else now
            try:
                with p.oneshot():
                    mem = p.memory_info()
                    cpu = p.cpu_times()
                    busy = cpu.user + cpu.system
                    row = {"pid": p.pid, "ppid": p.ppid(), "name": p.name(), "rss": mem.rss,
                           "threads": p.num_threads()}
                    self.seen.setdefault(p.pid, p.create_time())
            except self.psutil.Error:  # gone (or a zombie) between the listing and the reading
                continue
            last = self._last.get(p.pid)
            row["cpu"] = (busy - last[1]) / (when - last[0]) if last and when > last[0] else None
            self._last[p.pid] = (when, busy)
            rows.append(row)
        return rows


def thread_cpu_seconds(pid: int | None = None) -> dict[int, float] | None:
    """CPU seconds (user + system) of each thread of a process (this one by default), by
    thread id; None without psutil."""
    psutil = psutil_module()
    if psutil is None:
        return None
    try:
        return {t.id: t.user_time + t.system_time for t in psutil.Process(pid or os.getpid()).threads()}
    except psutil.Error:
        return None


def rss_bytes() -> int:
    """This process's resident memory (/proc/self/statm; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        psutil = psutil_module()
        return psutil.Process().memory_info().rss if psutil else 0


# --- CPU package energy (RAPL) ----------------------------------------------------------------

class Rapl:
    """The CPU packages' energy counters under /sys/class/powercap (intel-rapl:N/energy_uj;
    AMD processors show theirs under the same name). ``why`` says why there is no reading
    where there is none: no powercap folder (a container, a VM, another OS), no package
    domain, or counters readable by root only (Linux 5.10 and later, since the Platypus
    power side channel, CVE-2020-8694)."""

    def __init__(self, root: str = RAPL_ROOT) -> None:
        self.domains: list[tuple[str, Path, int]] = []  # (name, energy_uj file, wrap range in µJ)
        self.why: str | None = None
        self._raw: dict[Path, int] = {}
        self._total = 0.0  # µJ since the first reading, wraps included
        base = Path(root)
        if not base.is_dir():
            self.why = (f"{root} does not exist: the kernel exposes no powercap (RAPL) counters here "
                        "(a container or VM without them, or not Linux)")
            return
        packages = sorted(p for p in base.glob("intel-rapl:*") if p.name.count(":") == 1)  # not sub-domains
        if not packages:
            self.why = (f"no RAPL package domain under {root} (the CPU has none, or the intel_rapl driver is "
                        "not loaded)")
            return
        for pkg in packages:
            energy = pkg / "energy_uj"
            try:
                name = (pkg / "name").read_text().strip()
            except OSError:
                name = pkg.name
            try:
                top = int((pkg / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                top = 0
            try:
                int(energy.read_text())
            except PermissionError:
                self.why = (f"{energy} is readable by root only (Linux 5.10 and later, since CVE-2020-8694): "
                            f"run as root, or make it readable (sudo chmod a+r {base}/intel-rapl:*/energy_uj)")
                self.domains = []
                return
            except (OSError, ValueError) as e:
                self.why = f"{energy} cannot be read: {getattr(e, 'strerror', None) or e}"
                self.domains = []
                return
            self.domains.append((name, energy, top))

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def energy_j(self) -> float | None:
        """Joules the packages used since the first call (counter wrap-around handled)."""
        if not self.domains:
            return None
        for _, path, top in self.domains:
            try:
                raw = int(path.read_text())
            except (OSError, ValueError):
                return None
            last = self._raw.get(path)
            if last is not None:
                delta = raw - last
                self._total += delta + top if delta < 0 and top else max(delta, 0)
            self._raw[path] = raw
        return self._total / 1e6


# --- NVIDIA GPUs (NVML) ------------------------------------------------------------------------

def gpu_present() -> bool:
    """An NVIDIA driver is loaded here (its files exist); CUDA is not initialised to know."""
    return Path("/proc/driver/nvidia").exists() or Path("/dev/nvidiactl").exists()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """NVIDIA GPUs through NVML. ``indices``: NVML's device indices (all by default).

    A reading per device: name, memory used and total (bytes), utilisation of the SMs and of
    the memory (shares, over NVML's own sample period), SM and memory clocks (MHz), power
    (W), the energy counter (J since the driver loaded, Volta and later), temperature (°C)
    and the device memory of each process on it (by pid). A figure the device does not
    support is None; NVML is not asked for it again."""

    def __init__(self, pynvml: Any, indices: Iterable[int] | None = None) -> None:
        self.nv = pynvml
        count = pynvml.nvmlDeviceGetCount()
        self.indices = list(range(count)) if indices is None else list(indices)
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self.names = [_text(pynvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in self.handles]
        self._unsupported: set[str] = set()

    def keep(self, indices: Iterable[int]) -> None:
        """Read only these devices (NVML indices) from now on."""
        wanted = set(indices)
        rows = [r for r in zip(self.indices, self.handles, self.names, self.uuids) if r[0] in wanted]
        self.indices, self.handles, self.names, self.uuids = (list(c) for c in zip(*rows)) if rows else ([], [], [], [])

    def _get(self, what: str, fn: Callable[[], Any]) -> Any:
        if what in self._unsupported:
            return None
        try:
            return fn()
        except self.nv.NVMLError as e:
            if getattr(e, "value", None) == self.nv.NVML_ERROR_NOT_SUPPORTED:
                self._unsupported.add(what)
            return None

    def read(self) -> dict[str, dict[str, Any]]:
        nv = self.nv
        out = {}
        for i, h, name in zip(self.indices, self.handles, self.names):
            mem = self._get("memory", lambda h=h: nv.nvmlDeviceGetMemoryInfo(h))
            util = self._get("utilisation", lambda h=h: nv.nvmlDeviceGetUtilizationRates(h))
            power = self._get("power", lambda h=h: nv.nvmlDeviceGetPowerUsage(h))
            energy = self._get("energy", lambda h=h: nv.nvmlDeviceGetTotalEnergyConsumption(h))
            procs = self._get("processes", lambda h=h: nv.nvmlDeviceGetComputeRunningProcesses(h)) or []
            out[f"gpu{i}"] = {
                "kind": "gpu", "index": i, "name": name,
                "memory_used": int(mem.used) if mem is not None else None,
                "memory_total": int(mem.total) if mem is not None else None,
                "utilisation": util.gpu / 100 if util is not None else None,
                "memory_utilisation": util.memory / 100 if util is not None else None,
                "sm_clock_mhz": self._get("sm clock", lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                "memory_clock_mhz": self._get("memory clock",
                                              lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                "power_w": power / 1000 if power is not None else None,
                "energy_j": energy / 1000 if energy is not None else None,
                "temperature_c": self._get("temperature",
                                           lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                "processes": {int(p.pid): int(p.usedGpuMemory) for p in procs if p.usedGpuMemory is not None},
            }
        return out

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that may be half gone
            pass


def open_nvml(required: bool, indices: Iterable[int] | None = None) -> tuple[Nvml | None, str | None]:
    """NVML where it starts: (reader, None); else (None, why). With ``required`` and an
    NVIDIA driver loaded here, a missing or broken NVML is bad input (exit 2) instead."""
    present = gpu_present()
    try:
        import pynvml
    except ImportError:
        if required and present:
            raise MissingExtraError("nvidia-ml-py", "watch", "watching the GPUs of this machine (NVML)") from None
        return None, "nvidia-ml-py is not installed (pip install 'torch-footprint[watch]')" if present else None
    try:
        pynvml.nvmlInit()
        return Nvml(pynvml, indices), None
    except pynvml.NVMLError as e:
        why = f"NVML did not start: {e}"
        if required and present:
            raise FootprintError(f"this machine has an NVIDIA driver but {why} (is the driver's libnvidia-ml.so.1 "
                                 "visible to this process?)") from None
        return None, why if present else None


def nvml_index_of(torch_index: int, nvml: Nvml) -> int | None:
    """NVML's index of torch's ``cuda:torch_index`` (they differ under CUDA_VISIBLE_DEVICES): by UUID."""
    import torch

    try:
        uuid = str(torch.cuda.get_device_properties(torch_index).uuid)
    except (AttributeError, RuntimeError):
        return None
    for i, u in zip(nvml.indices, nvml.uuids):
        if u.removeprefix("GPU-") == uuid.removeprefix("GPU-"):
            return i
    return None


# --- torch's own figures ----------------------------------------------------------------------

class TorchCuda:
    """The caching allocator's figures of this process on one CUDA device (bytes)."""

    def __init__(self, index: int) -> None:
        import torch

        self.cuda = torch.cuda
        self.index = index

    def read(self) -> dict[str, int]:
        return {"allocated": self.cuda.memory_allocated(self.index), "reserved": self.cuda.memory_reserved(self.index)}


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
