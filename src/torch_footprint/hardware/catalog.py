"""The rows a command sees: the shipped database, this machine's devices, a user's file."""

from __future__ import annotations

import os

from .db import Accelerator, builtin, find, load_file
from .local import local_cpu, local_gpu_calibrated, read_calibrations


def load(extra: str | os.PathLike[str] | None = None, local: bool = True) -> list[Accelerator]:
    """The built-in rows, the local CPU (with ``local``), then the rows of ``extra`` (same id: replaced)."""
    rows = {a.id: a for a in builtin()}
    if local:
        calibrations = read_calibrations()
        cpu = local_cpu(calibrations)
        rows[cpu.id] = cpu
        gpu = local_gpu_calibrated(list(rows.values()), calibrations)  # this machine's GPU, calibrated
        if gpu is not None:
            rows[gpu.id] = gpu
    if extra is not None:
        for a in load_file(extra):
            rows[a.id] = a
    return list(rows.values())


def get(name: str, extra: str | os.PathLike[str] | None = None) -> Accelerator:
    """One accelerator by id, alias or name (case-insensitive); close names are suggested."""
    return find(load(extra), name)


def local_accelerator(device: str) -> Accelerator | None:
    """The row of the device a measurement runs on: the local GPU by name, the CPU only once
    calibrated (its datasheet-free row has no bandwidth before that)."""
    from .local import find_local_gpu

    rows = load()
    if device.startswith("cuda"):
        return find_local_gpu(rows)
    cpu = next((a for a in rows if a.id == "cpu"), None)
    return cpu if cpu is not None and cpu.calibrated else None
