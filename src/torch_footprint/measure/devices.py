"""The readers :mod:`.sampling` samples from, each one reading of one source: the job's
processes (psutil), the CPU package's energy (RAPL under /sys/class/powercap), NVIDIA GPUs
(NVML, through nvidia-ml-py) and torch's own CUDA allocator figures in this process."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import FootprintError, MissingExtraError

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
