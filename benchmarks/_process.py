"""Shared by the benchmark scripts: timing a whole process."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compile_sources() -> None:
    """Byte-compile torch-footprint's sources, as installing its wheel does: an editable install
    under PYTHONDONTWRITEBYTECODE (this machine's setting) would otherwise compile every module
    again in each timed process, a cost no installed copy pays."""
    import compileall

    compileall.compile_dir(ROOT / "src" / "torch_footprint", quiet=1)


def timed_process(cmd: list[str]) -> tuple[float, float, str]:
    """Run ``cmd`` under a small wrapper process so that RUSAGE_CHILDREN covers that child
    alone: wall seconds, the child's peak RSS in MiB, and its output."""
    wall, _, rss, out = timed_process_cpu(cmd)
    return wall, rss, out


def timed_process_cpu(cmd: list[str]) -> tuple[float, float, float, str]:
    """As :func:`timed_process`, with the child's CPU seconds (user + system) as the second figure:
    on a machine other processes load, the CPU time a process took moves far less than its wall time."""
    wrapper = [sys.executable, "-c",
               "import resource,subprocess,sys;r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
               "sys.stdout.write(r.stdout+r.stderr);u=resource.getrusage(resource.RUSAGE_CHILDREN);"
               "print('MAXRSS_KIB',u.ru_maxrss);print('CPU_S',u.ru_utime+u.ru_stime);"
               "sys.exit(r.returncode)", *cmd]
    compile_sources()  # outside the timed span
    t = time.perf_counter()
    proc = subprocess.run(wrapper, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}")
    rss_kib = float(proc.stdout.rsplit("MAXRSS_KIB", 1)[1].split()[0])
    cpu = float(proc.stdout.rsplit("CPU_S", 1)[1].split()[0])
    return wall, cpu, rss_kib / 1024, proc.stdout


def compare(commands: dict[str, list[str]], reference: str, repeat: int) -> None:
    """Run each command ``repeat`` times, alternating, as whole processes; print every run,
    then the median wall time and peak RSS of each and their ratios to ``reference``'s."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for i in range(repeat):
        for name, cmd in commands.items():
            wall, rss, _ = timed_process(cmd)
            results[name].append((wall, rss))
            print(f"run {i + 1} {name:24s} {wall:6.2f} s {rss:7.0f} MiB", flush=True)
    print()
    ref_t = statistics.median(w for w, _ in results[reference])
    ref_m = statistics.median(m for _, m in results[reference])
    print(f"{'tool':26s} {'wall (median)':>14s} {'peak RSS':>10s} {'time ratio':>11s} {'RSS ratio':>10s}")
    for name, rows in results.items():
        t = statistics.median(w for w, _ in rows)
        m = statistics.median(r for _, r in rows)
        print(f"{name:26s} {t:12.2f} s {m:6.0f} MiB {t / ref_t:10.2f}x {m / ref_m:9.2f}x")
