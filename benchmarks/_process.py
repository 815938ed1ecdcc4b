"""Shared by the benchmark scripts: timing a whole process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_process(cmd: list[str]) -> tuple[float, float, str]:
    """Run ``cmd`` under a small wrapper process so that RUSAGE_CHILDREN covers that child
    alone: wall seconds, the child's peak RSS in MiB, and its output."""
    wrapper = [sys.executable, "-c",
               "import resource,subprocess,sys;r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
               "sys.stdout.write(r.stdout+r.stderr);"
               "print('MAXRSS_KIB',resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
               "sys.exit(r.returncode)", *cmd]
    t = time.perf_counter()
    proc = subprocess.run(wrapper, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}")
    rss_kib = float(proc.stdout.rsplit("MAXRSS_KIB", 1)[1].split()[0])
    return wall, rss_kib / 1024, proc.stdout
