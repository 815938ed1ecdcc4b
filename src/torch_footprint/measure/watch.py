"""``footprint watch``: run a real job (or follow one by pid) and sample what it uses.

Every ``interval`` seconds one :class:`~torch_footprint.measure.sampling.Sample`: each GPU
(NVML: memory used and total, utilisation, clocks, power, energy, each process's device
memory), the CPUs (share busy, machine memory, package energy where RAPL is readable) and
each process of the job, the root and its descendants (resident memory, CPU, threads).

A command runs in a process group of its own: Ctrl-C (or SIGTERM) to the watcher sends
SIGINT to the whole group, then SIGTERM after ``grace`` seconds, then SIGKILL, and ends any
process of the job that left the group; the timeline taken so far is kept. The command's
exit status is the result's (a signal N as 128 + N, as shells do).

With a prediction (``predicted``: the peak of one step's tensors, the fixed overheads and
the predicted timeline), :func:`compare_peak` sets the observed peak beside it and names
the difference.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FootprintError
from .sampling import CpuDevice, Probe, Processes, Rapl, Sample, open_nvml, require_psutil

FULL_MEMORY = 0.8  # share of device memory above which "memory full, utilisation low" is judged
LOW_UTILISATION = 0.5


@dataclass
class WatchResult:
    """A watched run: its timeline and how it ended. ``exit_code``: the command's own exit
    status (None when following a pid, whose status only its parent can read)."""

    command: list[str] | None
    pid: int | None
    interval: float
    started_at: float  # seconds since the epoch
    samples: list[Sample] = field(default_factory=list)
    exit_code: int | None = None
    ended: str = "running"  # "exited", "interrupted", "gone" (a followed pid ended), "time limit"
    duration_s: float = 0.0
    predicted: dict[str, Any] | None = None
    baseline_rss: int | None = None  # CPU: a bare `import torch` interpreter's RSS (bytes)
    notes: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    left_running: list[int] = field(default_factory=list)  # pids of the job alive after it ended
    monotonic_origin: float = 0.0  # time.monotonic() at t = 0 (to line the samples up with the job's own log)
    torch_stats_pids: list[int] | None = None  # with torch_stats: the job's processes that reported

    @property
    def interrupted(self) -> bool:
        return self.ended == "interrupted"

    @property
    def exit_status(self) -> int:
        """What ``footprint watch`` exits with: the command's status passed through; 130
        after Ctrl-C; 0 after following a pid to its end."""
        if self.interrupted:
            return 130
        return self.exit_code if self.exit_code is not None else 0

    def summary(self) -> dict[str, Any]:
        return summarise(self.samples)

    def comparison(self) -> dict[str, Any] | None:
        if self.predicted is None:
            return None
        return compare_peak(observed_peak(self.samples, self.baseline_rss), self.predicted)

    def findings(self) -> list[str]:
        return findings(self.summary(), self.comparison())

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "pid": self.pid, "interval_s": self.interval, "started_at": self.started_at,
                "duration_s": self.duration_s, "ended": self.ended, "exit_code": self.exit_code,
                "exit_status": self.exit_status, "summary": self.summary(), "predicted": self.predicted,
                "baseline_rss": self.baseline_rss, "comparison": self.comparison(), "findings": self.findings(),
                "notes": self.notes, "unavailable": self.unavailable, "left_running": self.left_running,
                "monotonic_origin": self.monotonic_origin, "torch_stats_pids": self.torch_stats_pids,
                "samples": [s.to_dict() for s in self.samples]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WatchResult:
        return cls(command=d.get("command"), pid=d.get("pid"), interval=d["interval_s"], started_at=d["started_at"],
                   samples=[Sample.from_dict(s) for s in d.get("samples", [])], exit_code=d.get("exit_code"),
                   ended=d.get("ended", "exited"), duration_s=d.get("duration_s", 0.0), predicted=d.get("predicted"),
                   baseline_rss=d.get("baseline_rss"), notes=list(d.get("notes", [])),
                   unavailable=dict(d.get("unavailable", {})), left_running=list(d.get("left_running", [])),
                   monotonic_origin=d.get("monotonic_origin", 0.0), torch_stats_pids=d.get("torch_stats_pids"))


# --- the run ---------------------------------------------------------------------------------

def watch(command: Sequence[str] | None = None, pid: int | None = None, interval: float = 1.0, *,
          predicted: dict[str, Any] | None = None, on_sample: Callable[[Sample, WatchResult], None] | None = None,
          grace: float = 10.0, timeout: float | None = None, baseline_rss: int | None = None,
          torch_stats: bool = False, job_log: str | os.PathLike[str] | None = None) -> WatchResult:
    """Run ``command`` (argv list; no shell) or follow process ``pid`` until it ends, a
    sample every ``interval`` seconds; ``on_sample(sample, result)`` hears each one (the
    live display). ``predicted`` ({"peak_bytes", "overheads": {name: bytes}, "timeline":
    [[t_fraction, bytes], ...]}) adds the comparison of peaks; on a CPU the comparison needs
    ``baseline_rss`` (a bare interpreter with torch imported; measured with
    :func:`bare_torch_rss` when not given). ``timeout``: stop the command after so many
    seconds. Ctrl-C stops the command (not a followed pid) and returns what was sampled,
    with ``ended == "interrupted"``. ``torch_stats`` (a command only): each Python process
    of the job reports torch's allocated and reserved CUDA bytes through a sitecustomize put
    first on its PYTHONPATH (:class:`TorchStats`), so that a GPU peak can be split.
    ``job_log``: a file that takes the command's output (stdout and stderr, appended), to
    keep it from writing over a live display on the same terminal.

    Bad input raises :class:`~torch_footprint.errors.FootprintError` (exit 2): neither or
    both of command and pid, a command that cannot start, a pid that does not exist or is
    not this user's, NVML missing or broken on a machine with an NVIDIA driver, psutil
    missing."""
    if (not command) == (pid is None):
        raise FootprintError("footprint watch needs a command to run (after `--`) or --pid N, and not both")
    if not interval > 0:
        raise FootprintError(f"--interval must be more than 0 seconds, got {interval}")
    if torch_stats and not command:
        raise FootprintError("--torch-stats needs a command to run: a running process cannot be asked for its figures")
    if predicted is not None:
        check_predicted(predicted)
    psutil = require_psutil("footprint watch")
    followed = _follow(psutil, pid) if pid is not None else None
    nvml, why = open_nvml(required=True)
    rapl = Rapl()
    unavailable: dict[str, str] = {}
    if rapl.why:
        unavailable["CPU package energy"] = rapl.why
    if nvml is None:
        unavailable["GPUs"] = why or "no NVIDIA GPU on this machine"
    result = WatchResult(list(command) if command else None, pid, interval, time.time(), predicted=predicted,
                         baseline_rss=baseline_rss, unavailable=unavailable)
    stats = TorchStats(interval, nvml) if torch_stats else None
    try:
        proc = _start(command, stats.environment() if stats else None, job_log) if command else None
    except FootprintError:
        if nvml is not None:
            nvml.close()
        if stats is not None:
            stats.close()
        raise
    root = proc.pid if proc is not None else pid
    assert root is not None
    result.pid = root
    try:
        procs = Processes(root)
    except psutil.NoSuchProcess:  # a command that ended at once: nothing to sample
        procs = None
    probe = Probe(processes=procs, nvml=nvml, cpu=CpuDevice(rapl))
    began = result.monotonic_origin = probe.began
    with _sigterm_as_interrupt():  # SIGTERM while stopping the job, too, ends in SIGKILL to it, not in leaving it
        try:
            k = 0
            while True:
                sample = probe.read()
                if stats is not None:
                    sample.torch = stats.read(sample)
                result.samples.append(sample)
                if on_sample is not None:
                    on_sample(sample, result)
                k = max(k + 1, int((time.monotonic() - began) / interval) + 1)
                if _wait(proc, followed, max(0.0, began + k * interval - time.monotonic())):
                    result.ended = "exited" if proc is not None else "gone"
                    break
                if timeout is not None and time.monotonic() - began >= timeout:
                    result.ended = "time limit"
                    if proc is not None:
                        _stop(proc, procs, grace)
                    break
        except KeyboardInterrupt:
            result.ended = "interrupted"
            if proc is not None:
                _stop(proc, procs, grace)
        finally:
            if proc is not None and proc.poll() is None:  # an error of ours: never leave the job running
                _stop(proc, procs, grace)
            if nvml is not None:
                nvml.close()
            if stats is not None:
                result.torch_stats_pids = sorted(stats.reported)
                stats.close()
    result.duration_s = time.monotonic() - began
    if proc is not None:
        code = proc.returncode
        result.exit_code = 128 - code if code is not None and code < 0 else code
    if procs is not None:
        result.left_running = _alive(psutil, procs)
        if result.left_running:
            result.notes.append(f"{len(result.left_running)} process(es) the job started still run after it ended: "
                                + ", ".join(map(str, result.left_running)))
    if predicted is not None and result.baseline_rss is None and not _gpu_watched(result.samples):
        result.baseline_rss = bare_torch_rss()
    return result


def _gpu_watched(samples: list[Sample]) -> bool:
    return any(d.get("kind") == "gpu" for s in samples for d in s.devices.values())


def _start(command: Sequence[str], env: dict[str, str] | None = None,
           log: str | os.PathLike[str] | None = None) -> subprocess.Popen[bytes]:
    """The command in a process group of its own (the terminal's Ctrl-C reaches the watcher only)."""
    argv = [str(a) for a in command]
    group: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    out: Any = None
    if log is not None:
        try:
            out = open(log, "ab")  # noqa: SIM115 - the child holds it; closed here once it has it
        except OSError as e:
            raise FootprintError(f"cannot write the job's output to '{log}': {e.strerror or e}") from None
    try:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT if out else None, **group)
    except FileNotFoundError:
        raise FootprintError(f"cannot start '{argv[0]}': no such program or file") from None
    except PermissionError:
        raise FootprintError(f"cannot start '{argv[0]}': permission denied (is it executable?)") from None
    except OSError as e:
        raise FootprintError(f"cannot start '{argv[0]}': {e.strerror or e}") from None
    finally:
        if out is not None:
            out.close()


def _follow(psutil: Any, pid: int) -> Any:
    """The process to follow, if it exists and is this user's."""
    if pid <= 0:
        raise FootprintError(f"--pid must be a process id (a positive number), got {pid}")
    if pid == os.getpid():
        raise FootprintError(f"process {pid} is this footprint process itself")
    try:
        p = psutil.Process(pid)
        uid = p.uids().real
        status = p.status()
        name = p.name()
    except psutil.NoSuchProcess:
        raise FootprintError(f"no process with pid {pid} is running") from None
    except psutil.AccessDenied:
        raise FootprintError(f"process {pid} is not yours: footprint watches only your own processes") from None
    if uid != os.getuid():
        try:
            import pwd

            owner = pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError):
            owner = f"uid {uid}"
        raise FootprintError(f"process {pid} ({name}) belongs to {owner}, not to you (uid {os.getuid()}): "
                             "footprint watches only your own processes")
    if status == psutil.STATUS_ZOMBIE:
        raise FootprintError(f"process {pid} ({name}) has already exited")
    return p


def _wait(proc: subprocess.Popen[bytes] | None, followed: Any, seconds: float) -> bool:
    """Wait up to ``seconds`` for the job to end; True when it has."""
    if proc is not None:
        try:
            proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False
    import psutil

    try:
        followed.wait(timeout=seconds)
        return True
    except psutil.TimeoutExpired:
        return False
    except psutil.NoSuchProcess:
        return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop(proc: subprocess.Popen[bytes], procs: Processes | None, grace: float) -> None:
    """SIGINT to the job's process group (as Ctrl-C would), SIGTERM after ``grace`` seconds,
    SIGKILL two seconds later; a second Ctrl-C goes straight to SIGKILL. Then every process
    of the job still alive (those that left the group too) is killed."""
    pgid = proc.pid
    try:
        for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 2.0)):
            _signal_group(pgid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:
        pass
    finally:
        if proc.poll() is None:
            _signal_group(pgid, signal.SIGKILL)
            proc.wait()
        _signal_group(pgid, signal.SIGKILL)  # what is left of the group after its leader ended
        if procs is not None:
            import psutil

            for p in _members_alive(psutil, procs):
                with contextlib.suppress(psutil.Error):
                    p.kill()


def _members_alive(psutil: Any, procs: Processes) -> list[Any]:
    alive = []
    for pid, created in procs.seen.items():
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.Error:
            continue
    return alive


def _alive(psutil: Any, procs: Processes) -> list[int]:
    return sorted(p.pid for p in _members_alive(psutil, procs))


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM to the watcher stops the job as Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class TorchStats:
    """torch's CUDA figures from inside the job: a sitecustomize (``_watch_hook``) put first
    on the job's PYTHONPATH starts a thread in each Python process that appends
    {"t", "pid", "cuda": [{"uuid", "allocated", "reserved"}]} lines to a file per process in a
    folder of ours. Each sample takes the latest line of each of the job's processes (at most
    one interval old) and sums them by device (NVML's key where the UUID is known)."""

    HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watch_hook")

    def __init__(self, interval: float, nvml: Any = None) -> None:
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="footprint-watch-")
        self.interval = interval
        self.keys = {u.removeprefix("GPU-"): f"gpu{i}" for i, u in zip(nvml.indices, nvml.uuids)} if nvml else {}
        self._offsets: dict[str, int] = {}
        self._latest: dict[int, list[dict[str, Any]]] = {}
        self.reported: set[int] = set()

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.HOOK, env.get("PYTHONPATH")) if p)
        env["FOOTPRINT_WATCH_TORCH_DIR"] = self.folder
        env["FOOTPRINT_WATCH_INTERVAL"] = repr(self.interval)
        return env

    def read(self, sample: Sample) -> dict[str, dict[str, int]] | None:
        import json

        for name in os.listdir(self.folder):
            path = os.path.join(self.folder, name)
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(name, 0))
                    data = f.read()
            except OSError:
                continue
            done = data.rfind(b"\n") + 1  # whole lines only; a half-written one waits for the next sample
            self._offsets[name] = self._offsets.get(name, 0) + done
            for line in data[:done].decode(errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                self.reported.add(row["pid"])
                self._latest[row["pid"]] = row.get("cuda", [])
        pids = {p["pid"] for p in sample.processes}
        out: dict[str, dict[str, int]] = {}
        for pid, rows in self._latest.items():
            if pid not in pids:
                continue
            for r in rows:
                key = self.keys.get(str(r["uuid"]).removeprefix("GPU-"), f"cuda-{str(r['uuid'])[:8]}")
                acc = out.setdefault(key, {"allocated": 0, "reserved": 0})
                acc["allocated"] += int(r["allocated"])
                acc["reserved"] += int(r["reserved"])
        return out or None

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


_BARE: dict[str, int] = {}


def bare_torch_rss(python: str | None = None) -> int | None:
    """The resident memory (bytes) of an interpreter that has imported torch and done
    nothing else: what the interpreter and its libraries hold before a model exists."""
    exe = python or sys.executable
    if exe in _BARE:
        return _BARE[exe]
    code = ("import torch, os\nwith open('/proc/self/statm') as f:\n"
            "    print(int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE'))")
    try:
        out = subprocess.run([exe, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        _BARE[exe] = int(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return _BARE[exe]


# --- what the timeline says (pure functions) --------------------------------------------------

def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(samples: list[Sample]) -> dict[str, Any]:
    """Peaks, means and energy by device and by process over the samples."""
    devices: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(k for s in samples for k in s.devices):
        rows = [(s.t, s.devices[key]) for s in samples if key in s.devices]
        first = rows[0][1]

        def vals(name: str, rows: list[tuple[float, dict[str, Any]]] = rows) -> list[Any]:
            return [r[name] for _, r in rows if r.get(name) is not None]

        used = vals("memory_used")
        util = vals("utilisation")
        energy = vals("energy_j")
        power = vals("power_w")
        d: dict[str, Any] = {"kind": first.get("kind"), "name": first.get("name"), "cpus": first.get("cpus"),
                             "memory_total": first.get("memory_total"),
                             "memory_used_first": used[0] if used else None,
                             "memory_used_peak": max(used) if used else None,
                             "utilisation_mean": _mean(util), "idle_share": 1 - _mean(util) if util else None,
                             "power_w_mean": _mean(power), "power_w_peak": max(power) if power else None,
                             "energy_j": energy[-1] - energy[0] if len(energy) > 1 else None}
        if used:
            i = used.index(max(used))
            d["memory_used_peak_t"] = [t for t, r in rows if r.get("memory_used") is not None][i]
        clocks = vals("sm_clock_mhz")
        if clocks:
            d["sm_clock_mhz_mean"] = _mean(clocks)
        devices[key] = d
    processes: dict[int, dict[str, Any]] = {}
    for s in samples:
        for p in s.processes:
            row = processes.setdefault(p["pid"], {"pid": p["pid"], "name": p.get("name"), "rss_peak": 0,
                                                  "rss_peak_t": s.t, "cpu": [], "threads_peak": 0,
                                                  "first_t": s.t, "last_t": s.t, "device_memory_peak": {}})
            row["last_t"] = s.t
            if p.get("rss", 0) > row["rss_peak"]:
                row["rss_peak"], row["rss_peak_t"] = p["rss"], s.t
            if p.get("cpu") is not None:
                row["cpu"].append(p["cpu"])
            row["threads_peak"] = max(row["threads_peak"], p.get("threads", 0))
            for key, dev in s.devices.items():
                used = dev.get("processes", {}).get(p["pid"], dev.get("processes", {}).get(str(p["pid"])))
                if used is not None:
                    row["device_memory_peak"][key] = max(row["device_memory_peak"].get(key, 0), used)
    for row in processes.values():
        row["cpu_mean"] = _mean(row.pop("cpu"))
    tree = [sum(p.get("rss", 0) for p in s.processes) for s in samples]
    cpu_tree = [sum(p["cpu"] for p in s.processes if p.get("cpu") is not None) for s in samples[1:]]
    return {"samples": len(samples), "duration_s": samples[-1].t - samples[0].t if samples else 0.0,
            "devices": devices, "processes": list(processes.values()),
            "rss_tree_peak": max(tree) if tree else None,
            "cpu_tree_mean": _mean(cpu_tree)}


def observed_peak(samples: list[Sample], baseline_rss: int | None = None) -> dict[str, Any]:
    """The observed side of the comparison: on a GPU the job's device memory at its peak
    (NVML's per-process figures summed over the job's processes, on the device where it
    peaked; the device's used memory above the first sample where NVML lists none of the
    job's pids, as in a container's own pid namespace); on a CPU the resident memory of the
    job's largest process at its peak, with the bare-interpreter baseline."""
    per_gpu: dict[str, list[tuple[float, int, dict[str, Any] | None]]] = {}
    for s in samples:
        pids = {p["pid"] for p in s.processes}
        for key, dev in s.devices.items():
            if dev.get("kind") != "gpu":
                continue
            procs = dev.get("processes", {})
            mine = [b for pid, b in procs.items() if int(pid) in pids]
            if mine:
                per_gpu.setdefault(key, []).append((s.t, sum(mine), (s.torch or {}).get(key)))
    if per_gpu:
        key = max(per_gpu, key=lambda k: max(b for _, b, _ in per_gpu[k]))
        t, peak, torch_at = max(per_gpu[key], key=lambda r: r[1])
        out: dict[str, Any] = {"kind": "cuda", "device": key, "peak_bytes": peak, "t": t,
                               "source": "NVML: device memory of the job's processes"}
        if torch_at:
            out["torch_reserved_bytes"], out["torch_allocated_bytes"] = torch_at["reserved"], torch_at["allocated"]
        return out
    gpus = {k for s in samples for k, d in s.devices.items() if d.get("kind") == "gpu"}
    if gpus:  # NVML lists none of the job's pids: the device's growth over the run
        best: dict[str, Any] | None = None
        for key in gpus:
            rows = [(s.t, s.devices[key]["memory_used"]) for s in samples
                    if key in s.devices and s.devices[key].get("memory_used") is not None]
            if not rows:
                continue
            t, used = max(rows, key=lambda r: r[1])
            grown = used - rows[0][1]
            if best is None or grown > best["peak_bytes"]:
                at = next((s.torch or {}).get(key) for s in samples if s.t == t)
                best = {"kind": "cuda", "device": key, "peak_bytes": grown, "t": t,
                        "source": "NVML: the device's used memory above its first sample (NVML lists none of the "
                                  "job's pids: another pid namespace)"}
                if at:
                    best["torch_reserved_bytes"], best["torch_allocated_bytes"] = at["reserved"], at["allocated"]
        if best is not None:
            return best
    peak_row: tuple[float, int, int] | None = None
    for s in samples:
        for p in s.processes:
            if peak_row is None or p.get("rss", 0) > peak_row[1]:
                peak_row = (s.t, p.get("rss", 0), p["pid"])
    out = {"kind": "cpu", "peak_bytes": peak_row[1] if peak_row else 0, "t": peak_row[0] if peak_row else 0.0,
           "pid": peak_row[2] if peak_row else None, "source": "RSS of the job's largest process"}
    if baseline_rss is not None:
        out["baseline_bytes"] = baseline_rss
    return out


def check_predicted(predicted: dict[str, Any]) -> None:
    """A prediction as :func:`compare_peak` reads it, or bad input (exit 2)."""
    if not isinstance(predicted, dict) or not isinstance(predicted.get("peak_bytes"), int):
        raise FootprintError("a prediction needs 'peak_bytes' (a whole number of bytes)")
    overheads = predicted.get("overheads", {})
    if not isinstance(overheads, dict) or not all(isinstance(v, int) for v in overheads.values()):
        raise FootprintError("a prediction's 'overheads' are {name: bytes} with whole numbers of bytes")
    timeline = predicted.get("timeline", [])
    if not isinstance(timeline, list) or not all(
            isinstance(r, (list, tuple)) and len(r) == 2 and 0 <= r[0] <= 1 for r in timeline):
        raise FootprintError("a prediction's 'timeline' is a list of [t_fraction (0 to 1), bytes] pairs")


OUTSIDE = "memory outside PyTorch"
RESERVE = "allocator reserve"
EXTRA = "what the job allocated that the model does not"


def compare_peak(observed: dict[str, Any], predicted: dict[str, Any]) -> dict[str, Any]:
    """The observed peak beside the predicted one, the difference split where the figures allow.

    ``observed``: {"kind": "cuda" | "cpu", "peak_bytes", and where known
    "torch_reserved_bytes", "torch_allocated_bytes" (the job's allocator at that moment, on a
    GPU) or "baseline_bytes" (a bare interpreter with torch imported, on a CPU)}.
    ``predicted``: {"peak_bytes" (the step's tensors), "overheads": {name: bytes}}.

    difference = observed - (predicted peak + overheads), split into parts that add up to it:

    * on a GPU: memory outside PyTorch (the process's device memory minus torch's reserve:
      CUDA context, libraries' workspaces, NCCL buffers) less the predicted overheads;
      allocator reserve (reserved minus allocated: cached blocks, fragmentation); what the job
      allocated that the model does not (allocated minus the predicted peak: data on the
      device, extra copies, metrics). A part whose figures are missing is merged into the
      next one and named so.
    * on a CPU: RSS counts the interpreter and its libraries (the bare-interpreter baseline)
      less the predicted overheads, and the rest: the job's tensors and everything else it
      holds, including memory the C allocator keeps after frees (not measurable from outside,
      so not split).
    """
    overheads = dict(predicted.get("overheads", {}))
    over = sum(overheads.values())
    pred_peak = int(predicted["peak_bytes"])
    total = pred_peak + over
    obs = int(observed["peak_bytes"])
    diff = obs - total
    parts: list[dict[str, Any]] = []
    notes: list[str] = []
    if observed.get("kind") == "cuda":
        reserved, allocated = observed.get("torch_reserved_bytes"), observed.get("torch_allocated_bytes")
        if reserved is not None:
            parts.append({"name": OUTSIDE, "bytes": obs - reserved - over,
                          "what": "device memory of the process beyond torch's reserve (CUDA context, library "
                                  "workspaces, communication buffers), less the predicted overheads"})
            if allocated is not None:
                parts.append({"name": RESERVE, "bytes": reserved - allocated,
                              "what": "memory torch's caching allocator holds but no tensor uses (cached blocks, "
                                      "fragmentation)"})
                parts.append({"name": EXTRA, "bytes": allocated - pred_peak,
                              "what": "tensors alive at the peak beyond the model's step (data kept on the device, "
                                      "extra copies, metrics)"})
            else:
                parts.append({"name": f"{RESERVE} + {EXTRA}", "bytes": reserved - pred_peak,
                              "what": "torch's reserve beyond the predicted peak (no allocated figure from the job "
                                      "to tell the two apart)"})
        else:
            parts.append({"name": f"{OUTSIDE} + {RESERVE} + {EXTRA}", "bytes": diff,
                          "what": "not split: the job's own torch figures (reserved, allocated) were not available; "
                                  "NVML sees the process's device memory, not how PyTorch uses it"})
            notes.append("to split the difference, the job's torch.cuda.memory_reserved() and memory_allocated() at "
                         "the peak are needed")
    else:
        base = observed.get("baseline_bytes")
        if base is not None:
            parts.append({"name": OUTSIDE, "bytes": base - over,
                          "what": "what a bare interpreter with torch imported holds (Python, torch's and other "
                                  "libraries' code and data), less the predicted overheads"})
            parts.append({"name": EXTRA, "bytes": obs - base - pred_peak,
                          "what": "resident memory beyond the bare interpreter and the model's step: the job's "
                                  "other data, memory the C allocator keeps after frees"})
        else:
            parts.append({"name": f"{OUTSIDE} + {EXTRA}", "bytes": diff,
                          "what": "not split: no bare-interpreter baseline was measured"})
        notes.append("on a CPU the observed figure is resident memory (RSS): it counts the interpreter and its "
                     "libraries, and memory the C allocator keeps after frees; it does not count pages swapped "
                     "out or never touched. There is no allocator reserve to read from outside")
    if parts:
        parts[-1]["bytes"] += diff - sum(p["bytes"] for p in parts)  # exact sum (a no-op where it already is)
    share = diff / total if total else None
    return {"kind": observed.get("kind"), "observed_peak_bytes": obs, "predicted_peak_bytes": pred_peak,
            "predicted_overheads": overheads, "predicted_total_bytes": total, "difference_bytes": diff,
            "difference_share": share, "parts": parts, "observed": observed, "notes": notes,
            "summary": _summary_sentence(obs, total, diff, share, parts)}


def _gib(n: float) -> str:
    """Bytes in GiB, or MiB under one GiB (the findings are words; the report formats the tables)."""
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MiB"


def _summary_sentence(obs: int, total: int, diff: int, share: float | None, parts: list[dict[str, Any]]) -> str:
    word = "more" if diff >= 0 else "less"
    text = f"observed peak {_gib(obs)} against {_gib(total)} predicted: {_gib(abs(diff))} {word}"
    if share is not None:
        text += f" ({abs(share):.1%})"
    if parts and diff:
        largest = max(parts, key=lambda p: abs(p["bytes"]))
        text += f"; the largest part: {largest['name']} ({'+' if largest['bytes'] >= 0 else '-'}"
        text += f"{_gib(abs(largest['bytes']))})"
    return text


def findings(summary: dict[str, Any], comparison: dict[str, Any] | None = None) -> list[str]:
    """What the timeline says, in words."""
    out = []
    for key, d in summary.get("devices", {}).items():
        util = d.get("utilisation_mean")
        if d.get("kind") == "gpu" and util is not None:
            out.append(f"{key} ({d.get('name')}) was idle {d['idle_share']:.0%} of the run (mean utilisation "
                       f"{util:.0%})")
            used, total = d.get("memory_used_peak"), d.get("memory_total")
            if used and total and used / total > FULL_MEMORY and util < LOW_UTILISATION:
                out.append(f"{key}: memory {used / total:.0%} full but busy only {util:.0%} of the time: the loop is "
                           "likely waiting on input (data loading, host-side work) rather than on the GPU")
        if d.get("energy_j") is not None and summary.get("duration_s"):
            out.append(f"{key}: {d['energy_j']:.1f} J over {summary['duration_s']:.1f} s "
                       f"({d['energy_j'] / summary['duration_s']:.1f} W mean)")
    cpu = summary.get("devices", {}).get("cpu")
    if summary.get("cpu_tree_mean") is not None and cpu is not None and cpu.get("cpus"):
        out.append(f"the job kept {summary['cpu_tree_mean']:.2f} of {cpu['cpus']} CPUs busy on average")
    elif summary.get("cpu_tree_mean") is not None:
        out.append(f"the job kept {summary['cpu_tree_mean']:.2f} CPUs busy on average")
    if comparison is not None:
        out.append(comparison["summary"])
    return out


__all__ = ["WatchResult", "bare_torch_rss", "check_predicted", "compare_peak", "findings", "observed_peak",
           "summarise", "watch"]
