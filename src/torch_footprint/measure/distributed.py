"""``footprint bench --nproc N``: start N ranks with torch.distributed's own launcher
(``python -m torch.distributed.run``, i.e. torchrun) and collect what each measured.

The ranks run :mod:`.rank`. The launcher runs in a session of its own; the ranks write
their process ids beside their results. If a rank fails, torchrun stops the others and the
failing rank's one-line error is reported; if the ranks do not finish within ``timeout``
seconds (a hung collective), or the user presses Ctrl-C, torchrun's session is sent
SIGTERM, then SIGKILL, and so is every rank whose id was written and still runs: no
process is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FootprintError
from ..files import read_json, write_json

GRACE_S = 5.0
STARTUP_S = 300.0  # for torchrun and the ranks' imports, before ``timeout`` starts counting


@dataclass
class RankResult:
    rank: int
    start_bytes: int
    peak_bytes: int
    step_s: float
    comm_s: float
    collectives: dict[str, int] = field(default_factory=dict)


class RanksFailed(FootprintError):
    """A rank failed or hung; the message says which and why; ``pids``: the ranks' processes, stopped."""

    def __init__(self, message: str, pids: list[int] | None = None) -> None:
        super().__init__(message)
        self.pids = pids or []


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def check_nproc(nproc: int, device: str) -> None:
    """One line for an --nproc this machine cannot run: more ranks than cores (CPU) or GPUs."""
    if nproc < 2:
        raise FootprintError(f"--nproc must be at least 2, got {nproc}")
    if device.startswith("cuda"):
        import torch

        have = torch.cuda.device_count()
        if nproc > have:
            raise FootprintError(f"--nproc {nproc} is more than the {have} GPU(s) of this machine")
    elif nproc > usable_cores():
        raise FootprintError(f"--nproc {nproc} is more than the {usable_cores()} CPU cores this process may use")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _stop(proc: subprocess.Popen[bytes], rank_pids: list[int]) -> None:
    """SIGTERM to torchrun's session and to the ranks it started, SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for pid in rank_pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None and not any(_alive(p) for p in rank_pids):
                return
            time.sleep(0.05)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)


def _pids(out: Path) -> list[int]:
    pids = []
    for f in out.glob("rank*.pid"):
        with contextlib.suppress(ValueError, OSError):
            pids.append(int(f.read_text().strip()))
    return pids


def _wait(proc: Any, out: Path, nproc: int, timeout: float) -> int:
    """torchrun's exit status once it ends; ranks that have not finished ``timeout`` seconds
    after all of them connected (imports and start-up aside: STARTUP_S for those) are
    stopped, and reported as hung."""
    t0 = time.monotonic()
    started: float | None = None
    while True:
        rc = proc.poll()
        if rc is not None:
            return rc
        now = time.monotonic()
        if started is None and len(list(out.glob("rank*.ready"))) >= nproc:
            started = now
        late = (now - started > timeout) if started is not None else (now - t0 > max(STARTUP_S, timeout))
        if late:
            done = sorted(int(f.stem[4:]) for f in out.glob("rank*.json"))
            hung = [r for r in range(nproc) if r not in done]
            pids = _pids(out)
            for p in getattr(proc, "procs", [proc]):
                _stop(p, pids)
            what = (f"did not finish within {timeout:g} s of connecting (hung?)" if started is not None else
                    f"did not start and connect within {max(STARTUP_S, timeout):g} s")
            raise RanksFailed(f"rank(s) {', '.join(map(str, hung))} {what}: all ranks stopped", pids)
        time.sleep(0.1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now, for the rendezvous of several torchrun nodes."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_commands(nproc: int, nnodes: int, tail: list[str]) -> list[list[str]]:
    """One torchrun command per node: ``--standalone`` for one node; for several, each node a
    torchrun of ``nproc / nnodes`` ranks meeting the others by torchrun's own c10d
    rendezvous on 127.0.0.1 (what a multi-node job runs on each of its nodes)."""
    head = [sys.executable, "-m", "torch.distributed.run", "--max-restarts=0", "--monitor-interval=0.5"]
    if nnodes == 1:
        return [[*head, "--standalone", f"--nproc-per-node={nproc}", *tail]]
    rdzv = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc // nnodes}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id=footprint-{os.getpid()}-{time.monotonic_ns()}"]
    return [[*head, *rdzv, *tail] for _ in range(nnodes)]


class _Nodes:
    """The torchrun processes of one run, waited on and stopped as one: its exit status is the
    first non-zero one, once every node has ended."""

    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        self.procs = procs
        self.pid = procs[0].pid

    def poll(self) -> int | None:
        codes = [p.poll() for p in self.procs]
        if any(c is None for c in codes):
            return None
        return next((c for c in codes if c), 0)


def _stop_all(nodes: _Nodes, rank_pids: list[int]) -> None:
    for proc in nodes.procs:
        _stop(proc, rank_pids)


def run_ranks(spec: dict[str, Any], nproc: int, *, timeout: float = 600.0,
              threads: int | None = None, nnodes: int = 1) -> list[dict[str, Any]]:
    """Run ``spec`` (see :mod:`.rank`) on ``nproc`` ranks under torchrun, as ``nnodes`` torchrun
    processes (:func:`torchrun_commands`); each rank's JSON. Raises :class:`RanksFailed`
    naming the rank that failed or the ranks that hung."""
    check_nproc(nproc, spec.get("device", "cpu"))
    spec = dict(spec, timeout=timeout, threads=threads or max(1, usable_cores() // nproc))
    with tempfile.TemporaryDirectory(prefix="footprint-ranks-") as tmp:
        out = Path(tmp)
        write_json(out / "spec.json", spec)
        env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]), KINETO_LOG_LEVEL="5",
                   TORCHELASTIC_ERROR_FILE=str(out / "torchelastic.json"))
        src = str(Path(__file__).resolve().parents[2])  # the ranks import this very copy of footprint
        env["PYTHONPATH"] = os.pathsep.join(x for x in (src, env.get("PYTHONPATH")) if x)
        tail = ["-m", "torch_footprint.measure.rank", str(out / "spec.json"), str(out)]
        log = open(out / "torchrun.log", "wb")  # noqa: SIM115 - closed below, after the processes
        nodes = _Nodes([subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                        for cmd in torchrun_commands(nproc, nnodes, tail)])
        try:
            try:
                rc = _wait(nodes, out, nproc, timeout)
            except KeyboardInterrupt:  # stop them all, then let the interruption go on up
                _stop_all(nodes, _pids(out))
                raise
        finally:
            log.close()
            if nodes.poll() is None or any(_alive(p) for p in _pids(out)):
                _stop_all(nodes, _pids(out))
        errors = sorted(out.glob("rank*.error"), key=lambda f: f.stat().st_mtime_ns)
        if errors:  # the first to fail is the cause; the others lost their peer
            first = errors[0]
            line = first.read_text().splitlines()[0] if first.read_text() else "no message"
            then = [f.stem[4:] for f in errors[1:]]
            raise RanksFailed(f"rank {first.stem[4:]} failed: {line}"
                              + (f" (then rank {', '.join(then)}: its peer was gone)" if then else ""), _pids(out))
        if rc != 0:
            tail = (out / "torchrun.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RanksFailed(f"torchrun exited with status {rc}: {tail[0]}")
        return [read_json(out / f"rank{r}.json") for r in range(nproc)]


def launch(spec: dict[str, Any], nproc: int, *, timeout: float = 600.0, threads: int | None = None,
           nnodes: int = 1) -> list[RankResult]:
    """Training steps on ``nproc`` ranks (:func:`run_ranks`): what each rank measured."""
    return [RankResult(rank=d["rank"], start_bytes=d["start_bytes"], peak_bytes=d["peak_bytes"], step_s=d["step_s"],
                       comm_s=d["comm_s"], collectives=d["collectives"])
            for d in run_ranks(spec, nproc, timeout=timeout, threads=threads, nnodes=nnodes)]


CEILINGS_META = ("device", "name", "when", "seconds", "torch", "problems")  # not ceilings


def measure_link(nproc: int, device: str = "cpu", *, quick: bool = False,
                 timeout: float = 300.0) -> dict[str, Any]:
    """``footprint calibrate --nproc N``: all-reduces of 1 MiB and 64 MiB (quick: 16 MiB)
    across ``nproc`` ranks; the bus bandwidth and per-step latency rank 0 measured. On a
    CPU the ranks then calibrate at once, each on the threads ``bench --nproc`` gives a
    rank (its share of the cores): ``ceilings``, rank 0's. Ranks that share a CPU share
    its cores, caches and memory bandwidth, and a matmul on one thread is not half as fast
    as on two: scaling the whole machine's ceilings by the share of cores misses both."""
    cpu = not device.startswith("cuda")
    spec = {"mode": "collectives", "device": "cpu" if cpu else "cuda",
            "sizes": [2**20, (16 if quick else 64) * 2**20], "reps": 5 if quick else 15,
            "ceilings": cpu, "quick": quick}
    res = run_ranks(spec, nproc, timeout=timeout)[0]
    out = {k: res[k] for k in ("busbw_gbs", "latency_us", "points", "nproc", "backend")}
    if "ceilings" in res:
        out["threads"] = res["ceilings"]["threads"]
        out["ceilings"] = {k: v for k, v in res["ceilings"].items() if k not in CEILINGS_META}
    return out


@dataclass
class RanksBench:
    """``footprint bench --nproc N``: each rank's measurement beside one rank's prediction."""

    kind = "bench"  # the envelope's kind of its saved file

    model: str
    strategy: str
    nproc: int
    device: str
    settings: dict[str, Any]
    ranks: list[RankResult]
    predicted: Any  # estimate.ranks.RankPrediction
    notes: list[str] = field(default_factory=list)
    contention: Any = None  # measure.contention.Contention over the ranks' run (CPU), their threads together

    def __repr__(self) -> str:
        return (f"RanksBench(model={self.model!r}, strategy={self.strategy!r}, nproc={self.nproc}, "
                f"device={self.device!r}, ranks=<{len(self.ranks)}>)")

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "strategy": self.strategy, "nproc": self.nproc, "device": self.device,
                "settings": self.settings, "ranks": [r.__dict__ for r in self.ranks],
                "predicted": self.predicted.to_dict() if self.predicted else None, "notes": self.notes,
                "contention": self.contention.to_dict() if self.contention else None}
