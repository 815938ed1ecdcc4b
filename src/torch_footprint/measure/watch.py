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
from .devices import Processes, Rapl, open_nvml, require_psutil
from .sampling import CpuDevice, Probe, Sample
from .timeline import check_predicted, compare_peak, findings, observed_peak, summarise


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

    def __repr__(self) -> str:  # the samples would fill a screen
        return (f"WatchResult(command={self.command!r}, pid={self.pid}, ended={self.ended!r}, "
                f"exit_code={self.exit_code}, duration_s={self.duration_s:.3g}, samples=<{len(self.samples)}>)")

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


__all__ = ["WatchResult", "bare_torch_rss", "check_predicted", "compare_peak", "findings", "observed_peak",
           "summarise", "watch"]
