"""The machine footprint runs on: its CPU as a database row, its GPU found by name, and
the ceilings ``footprint calibrate`` measured on it (kept in a small JSON file)."""

from __future__ import annotations

import json
import os
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any

from .db import Accelerator

CALIBRATION_VERSION = "torch-footprint-calibration/1"


def proc_fields(path: str) -> dict[str, str]:
    """The ``Key: value`` lines of a /proc file (the first of each key; empty where unreadable)."""
    info: dict[str, str] = {}
    try:
        for line in Path(path).read_text().splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return info


def proc_kib(path: str, field: str) -> int | None:
    """A "Field:  1234 kB" line of a /proc file, in bytes (None where there is none)."""
    value = proc_fields(path).get(field)
    try:
        return int(value.split()[0]) * 1024 if value else None
    except ValueError:
        return None


def available_ram() -> int | None:
    return proc_kib("/proc/meminfo", "MemAvailable")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity set; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_seconds() -> tuple[float, float] | None:
    """Seconds the CPUs of this process's affinity set have spent busy (user, nice, system,
    irq, softirq) and stolen by the hypervisor since boot, from /proc/stat (None elsewhere)."""
    try:
        allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        lines = Path("/proc/stat").read_text().splitlines()
        tick = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        return None
    busy = steal = 0
    found = False
    for line in lines:
        name, *fields = line.split()
        if name in allowed and len(fields) >= 8:
            user, nice, system, _idle, _iowait, irq, softirq, stolen = (int(f) for f in fields[:8])
            busy += user + nice + system + irq + softirq
            steal += stolen
            found = True
    return (busy / tick, steal / tick) if found else None


def load_average() -> float | None:
    """The one-minute load average (runnable and waiting tasks)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _cpuinfo() -> dict[str, str]:
    return proc_fields("/proc/cpuinfo")


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def cpu_name() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine() or "CPU"


def last_level_cache_bytes(folder: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The CPU's largest cache in bytes, as Linux lists it (``folder``/index*/size, e.g.
    "266240K"); 0 where it does not say."""
    largest = 0
    for index in folder.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:].upper(), 1)
        digits = text[:-1] if unit > 1 else text
        if digits.isdigit():
            largest = max(largest, int(digits) * unit)
    return largest


def cpu_threads() -> int:
    import torch

    return torch.get_num_threads()


@lru_cache(maxsize=1)
def _theoretical_fp32() -> tuple[float, str]:
    """cores x clock x FLOPs per cycle from /proc/cpuinfo (two FMA units of the widest vector)."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    per_cycle, isa = (64, "AVX-512") if "avx512f" in flags else (32, "AVX2+FMA") if {"avx2", "fma"} <= flags \
        else (8, "SSE")
    try:
        mhz = float(info.get("cpu MHz", "0"))
    except ValueError:
        mhz = 0.0
    mhz = mhz or 2000.0
    cores = cpu_threads()
    how = f"{cores} threads x {mhz / 1000:.2f} GHz x {per_cycle} FLOP/cycle ({isa})"
    return cores * mhz * 1e6 * per_cycle / 1e12, how


def local_cpu(calibrations: dict[str, Any] | None = None) -> Accelerator:
    """This machine's CPU as a row: calibrated ceilings where ``footprint calibrate`` ran, else
    the theoretical fp32 peak and no bandwidth (predictions then ask for a calibration).
    ``calibrations``: the calibration file's devices, when the caller has read it already."""
    cal = (read_calibrations() if calibrations is None else calibrations).get(device_key("cpu"))
    ram_gib = _ram_bytes() / 2**30
    peak, how = _theoretical_fp32()
    notes = f"This machine's CPU ({cpu_threads()} threads). Theoretical fp32 peak: {how}."
    estimated = ["fp32", "memory_gb"]
    bandwidth = None
    if cal:
        bandwidth = round(cal["copy_gbs"], 1)
        notes += f" Bandwidth measured by `footprint calibrate` on {cal.get('when', '?')}."
    return Accelerator(id="cpu", name=f"{cpu_name()} (this machine)", vendor="local", kind="cpu",
                       memory_gb=round(ram_gib, 1), bandwidth_gbs=bandwidth, tflops={"fp32": round(peak, 4)},
                       source="https://www.kernel.org/doc/html/latest/filesystems/proc.html", notes=notes,
                       estimated=tuple(estimated), origin="detected", calibrated=cal)


def cuda_device_name() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def find_local_gpu(rows: list[Accelerator], name: str | None = None) -> Accelerator | None:
    """The database row of CUDA device 0 (or of the device ``name`` as CUDA reports it), by alias
    (exact, then prefix)."""
    name = name or cuda_device_name()
    if name is None:
        return None
    low = name.lower()
    for a in rows:
        if low in (x.lower() for x in a.aliases) or low == a.name.lower():
            return a
    for a in rows:
        if any(low.startswith(x.lower()) for x in a.aliases if len(x) > 6):
            return a
    return None


def local_gpu_calibrated(rows: list[Accelerator], calibrations: dict[str, Any]) -> Accelerator | None:
    """The database row of this machine's CUDA device carrying its saved calibration, if
    ``footprint calibrate --device cuda`` ran here (CUDA is not touched otherwise)."""
    if not any(k.startswith("cuda:") for k in calibrations):
        return None
    row = find_local_gpu(rows)
    cal = calibrations.get(device_key("cuda"))
    if row is None or not cal:
        return None
    from dataclasses import replace

    return replace(row, calibrated=cal)


# ---------------------------------------------------------------------------- calibration file
def calibration_path() -> Path:
    """``$TORCH_FOOTPRINT_HOME/calibration.json``, default ``~/.cache/torch-footprint``."""
    home = os.environ.get("TORCH_FOOTPRINT_HOME")
    if home:
        return Path(home) / "calibration.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torch-footprint" / "calibration.json"


def read_calibrations() -> dict[str, Any]:
    """Every device's saved ceilings, by device key (empty when there is no valid file)."""
    p = calibration_path()
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_VERSION:
        return {}
    return data.get("devices", {})


def device_key(device: str) -> str:
    if device == "cpu":
        return f"cpu:{cpu_name()}:{cpu_threads()}t"
    return f"cuda:{cuda_device_name()}"


def save_calibration(device: str, result: dict[str, Any]) -> Path:
    from ..files import write_json

    devices = read_calibrations()
    devices[device_key(device)] = result
    p = calibration_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    write_json(p, {"format": CALIBRATION_VERSION, "devices": devices})
    return p
