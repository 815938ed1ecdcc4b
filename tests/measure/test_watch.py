"""footprint watch on this CPU: real child processes that allocate known amounts at known
times, exit codes passed through, Ctrl-C that stops the job and keeps the timeline, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil", reason="footprint watch needs psutil (the 'watch' extra)")

from torch_footprint.errors import FootprintError, MissingExtraError  # noqa: E402
from torch_footprint.measure import devices  # noqa: E402
from torch_footprint.measure.watch import WatchResult, watch  # noqa: E402
from torch_footprint.report.watch import plain_line, render_live, render_watch, render_watch_html  # noqa: E402

MiB = 2**20
INTERVAL = 0.1
JITTER = 0.1  # how late a sample may come on a loaded 2-core machine, beyond its interval

# the child logs each event with its monotonic time (the same clock as the watcher's on Linux)
ALLOCATING_CHILD = textwrap.dedent("""
    import json, sys, time
    log = open(sys.argv[1], "w")
    def event(name, **kw):
        log.write(json.dumps({"event": name, "t": time.monotonic(), **kw}) + "\\n")
        log.flush()
    time.sleep(0.4)
    event("baseline")
    time.sleep(0.4)
    a = b"\\1" * (64 << 20)          # written: every page resident
    event("alloc", bytes=64 << 20)
    time.sleep(0.6)
    b = bytearray(b"\\2") * (160 << 20)
    event("alloc", bytes=160 << 20)
    time.sleep(0.6)
    del a
    event("free", bytes=64 << 20)
    time.sleep(0.6)
    sys.exit(7)
""")


def _child_rss(result: WatchResult, pid: int) -> list[tuple[float, int]]:
    """(monotonic time, RSS) of one process over the samples."""
    return [(result.monotonic_origin + s.t, p["rss"]) for s in result.samples for p in s.processes if p["pid"] == pid]


def test_the_timeline_shows_known_allocations_within_one_interval_and_2_percent(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    res = watch([sys.executable, "-c", ALLOCATING_CHILD, str(log)], interval=INTERVAL)
    assert res.ended == "exited" and res.exit_code == 7 and res.exit_status == 7
    events = [json.loads(line) for line in log.read_text().splitlines()]
    series = _child_rss(res, res.pid)
    assert len(series) >= 20

    def level_at(t: float) -> tuple[float, int]:
        """The first sample taken at or after t."""
        return next((ts, rss) for ts, rss in series if ts >= t)

    base_t, base = level_at(events[0]["t"])
    expected = base
    for ev in events[1:]:
        expected += ev["bytes"] if ev["event"] == "alloc" else -ev["bytes"]
        seen_t, rss = level_at(ev["t"])
        # the first sample after the event already shows it, and it came within one interval
        assert seen_t - ev["t"] <= INTERVAL + JITTER, (ev, seen_t)
        assert abs((rss - base) - (expected - base)) <= 0.02 * ev["bytes"], (ev, rss - base, expected - base)
    # and the peak is the two allocations together
    peak = max(rss for _, rss in series)
    assert abs(peak - base - (64 + 160) * MiB) <= 0.02 * (64 + 160) * MiB
    summary = res.summary()
    assert summary["processes"][0]["rss_peak"] == peak
    assert "cpu" in summary["devices"]
    # the timeline survives JSON and renders again from it
    again = WatchResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert again.summary()["processes"][0]["rss_peak"] == peak
    text = render_watch(again.to_dict())
    assert "exited with status 7" in text and "RSS peak" in text
    assert "<svg" in render_watch_html(again.to_dict())


def test_a_clean_exit_and_a_signal_pass_through_and_the_output_goes_to_a_log(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    ok = watch([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], interval=INTERVAL,
               job_log=log)
    assert ok.exit_code == 0 and ok.exit_status == 0
    assert sorted(log.read_text().split()) == ["err", "out"]
    killed = watch([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                   interval=INTERVAL)
    assert killed.exit_code == 128 + signal.SIGKILL and killed.exit_status == 137


def test_the_live_display_prints_a_plain_line_per_interval_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    with render_live(Console(file=sys.stdout, force_terminal=False)) as show:
        res = watch([sys.executable, "-c", "import time; time.sleep(0.35)"], interval=INTERVAL, on_sample=show)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == len(res.samples) >= 3
    assert "job: 1 process, RSS" in lines[-1] and plain_line(res.samples[-1]) == lines[-1]


WATCHER = textwrap.dedent("""
    import json, sys
    from torch_footprint.files import write_json
    from torch_footprint.measure.watch import watch
    res = watch(json.loads(sys.argv[1]), interval=0.1, grace=float(sys.argv[3]))
    write_json(sys.argv[2], res.to_dict())
    sys.exit(res.exit_status)
""")

# a job that starts a grandchild, writes both pids and waits; "ignore" makes it deaf to SIGINT
JOB = textwrap.dedent("""
    import json, signal, subprocess, sys, time
    if sys.argv[2] == "ignore":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump({"child": __import__("os").getpid(), "grandchild": grandchild.pid}, f)
    __import__("os").replace(sys.argv[1] + ".tmp", sys.argv[1])
    x = b"\\1" * (32 << 20)
    time.sleep(60)
""")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("job", ["default", "ignore"])
def test_ctrl_c_stops_the_job_and_its_children_and_keeps_the_timeline(tmp_path: Path, job: str) -> None:
    ready, out = tmp_path / "pids.json", tmp_path / "timeline.json"
    command = [sys.executable, "-c", JOB, str(ready), job]
    # the watcher in a process group of its own, as a shell runs a foreground job: Ctrl-C is SIGINT to that group
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, json.dumps(command), str(out), "0.5"],
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert watcher.poll() is None and time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        pids = json.loads(ready.read_text())
        time.sleep(0.4)
        began = time.monotonic()
        os.killpg(watcher.pid, signal.SIGINT)
        assert watcher.wait(timeout=20) == 130
        stopped_in = time.monotonic() - began
    finally:
        if watcher.poll() is None:
            watcher.kill()
    timeline = json.loads(out.read_text())
    assert timeline["ended"] == "interrupted" and timeline["exit_status"] == 130
    assert len(timeline["samples"]) >= 3
    seen = {p["pid"] for s in timeline["samples"] for p in s["processes"]}
    assert {pids["child"], pids["grandchild"]} <= seen  # the timeline holds the job's processes
    for pid in pids.values():  # and none of them is left
        assert _gone(pid), pid
    if job == "ignore":  # SIGINT ignored: SIGTERM after the grace period (0.5 s)
        assert stopped_in >= 0.5


def test_follow_a_pid_until_it_ends() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; x = b'1' * (16 << 20); time.sleep(0.6)"])
    try:
        res = watch(pid=p.pid, interval=INTERVAL)
    finally:
        p.wait()
    assert res.ended == "gone" and res.exit_code is None and res.exit_status == 0
    assert max(r for _, r in _child_rss(res, p.pid)) >= 16 * MiB


def test_bad_input_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(match: str, *args, **kwargs) -> None:
        with pytest.raises(FootprintError, match=match) as e:
            watch(*args, **kwargs)
        assert e.value.exit_code == 2 and "\n" not in str(e.value)

    refused("a command to run .* or --pid N")
    refused("and not both", ["true"], pid=os.getpid())
    refused("must be more than 0", ["true"], interval=0)
    refused("cannot start '/no/such/program': no such program", ["/no/such/program"])
    script = tmp_path / "not-executable.sh"
    script.write_text("echo hi\n")
    refused("cannot start .*permission denied", [str(script)])
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    refused(f"no process with pid {pid_max + 1}", pid=pid_max + 1)
    refused("is this footprint process itself", pid=os.getpid())
    # a process of another user
    if os.getuid() == 0:
        other = subprocess.Popen(["sleep", "10"], user=65534)
        try:
            refused(f"process {other.pid} .* not to you", pid=other.pid)
        finally:
            other.kill()
            other.wait()
    else:
        refused("process 1 .* not to you|process 1 is not yours", pid=1)
    refused("a prediction needs 'peak_bytes'", ["true"], predicted={"peak": 1})
    refused("cannot write the job's output to", ["true"], job_log=tmp_path / "no" / "such" / "folder.log")


def test_no_nvml_on_a_machine_with_a_gpu_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "gpu_present", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    with pytest.raises(MissingExtraError, match="nvidia-ml-py") as e:
        watch(["true"])
    assert e.value.exit_code == 2

    class BrokenNvml:
        class NVMLError(Exception):
            pass

        @classmethod
        def nvmlInit(cls) -> None:
            raise cls.NVMLError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", BrokenNvml)
    with pytest.raises(FootprintError, match="NVIDIA driver but NVML did not start: NVML Shared Library Not Found"):
        watch(["true"])
    # and no process was started for either
    assert not [c for c in psutil.Process().children() if c.name() == "true"]


def test_without_psutil_watch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'torch-footprint\[watch\]'"):
        watch(["true"])


def test_a_cpu_run_against_its_prediction_names_the_interpreter() -> None:
    """A job that imports torch and fills a 256 MiB tensor, watched with a prediction of
    exactly that: the observed RSS peak is the bare interpreter (measured apart) plus the
    tensor, and what is left unexplained is small."""
    child = "import torch, time\nx = torch.empty(256 << 20, dtype=torch.uint8).fill_(1)\ntime.sleep(0.3)\n"
    res = watch([sys.executable, "-c", child], interval=INTERVAL,
                predicted={"peak_bytes": 256 * MiB, "overheads": {}, "timeline": [[0.0, 0], [1.0, 256 * MiB]]})
    c = res.comparison()
    assert c["kind"] == "cpu" and res.baseline_rss and c["observed"]["baseline_bytes"] == res.baseline_rss
    parts = {p["name"]: p["bytes"] for p in c["parts"]}
    assert parts["memory outside PyTorch"] == res.baseline_rss
    assert abs(parts["what the job allocated that the model does not"]) <= 0.05 * 256 * MiB
    text = render_watch(res)
    assert "observed:" in text and "resident memory (RSS)" in text and "\\n" in text.splitlines()[0]


FAKE_CUDA_JOB = textwrap.dedent("""
    import sys, time, types
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True, device_count=lambda: 1,
        get_device_properties=lambda i: types.SimpleNamespace(uuid="abcdef12-3456-7890"),
        memory_allocated=lambda i: 5 << 20, memory_reserved=lambda i: 8 << 20)
    sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)  # torch's figures as an initialised CUDA gives them
    time.sleep(0.6)
""")


def test_torch_stats_come_from_inside_the_job_and_chain_the_users_sitecustomize(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    marker = tmp_path / "their-sitecustomize-ran"
    (theirs / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    res = watch([sys.executable, "-c", FAKE_CUDA_JOB], interval=INTERVAL, torch_stats=True)
    assert res.exit_code == 0 and res.torch_stats_pids == [res.pid]
    assert marker.exists()  # the job's own sitecustomize still ran
    figures = [s.torch for s in res.samples if s.torch]
    assert figures and figures[-1] == {"cuda-abcdef12": {"allocated": 5 * MiB, "reserved": 8 * MiB}}
    with pytest.raises(FootprintError, match="--torch-stats needs a command"):
        watch(pid=res.pid, torch_stats=True)


def _cuda_here() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device on this machine"
    from torch_footprint.measure.devices import open_nvml

    nv, why = open_nvml(required=False)
    if nv is None:
        return f"NVML is not usable here: {why}"
    nv.close()
    return None


@pytest.mark.skipif(_cuda_here() is not None, reason=str(_cuda_here()))
def test_a_gpu_job_against_its_prediction_is_split_with_the_jobs_own_torch_figures() -> None:
    child = ("import torch, time\nx = torch.empty(512 << 20, dtype=torch.uint8, device='cuda').fill_(1)\n"
             "torch.cuda.synchronize()\ntime.sleep(1.5)\n")
    res = watch([sys.executable, "-c", child], interval=0.2, torch_stats=True,
                predicted={"peak_bytes": 512 * MiB, "overheads": {}})
    assert res.exit_code == 0 and res.torch_stats_pids == [res.pid]
    c = res.comparison()
    assert c["kind"] == "cuda" and c["observed"]["torch_allocated_bytes"] == 512 * MiB
    parts = {p["name"]: p["bytes"] for p in c["parts"]}
    assert parts["what the job allocated that the model does not"] == 0
    assert parts["allocator reserve"] >= 0 and parts["memory outside PyTorch"] > 0  # the CUDA context at least
    assert sum(parts.values()) == c["difference_bytes"]


def test_the_command_line_sets_the_predicted_step_beside_a_real_one(tmp_path: Path) -> None:
    """`footprint watch --predict MODEL` with memory's set-up flags: the job runs that very
    inference step (a 4096 x 4096 fp32 linear at batch 4096: 64 MiB weights, 64 MiB input,
    64 MiB output) and the JSON holds the predicted peak beside the observed one."""
    from torch_footprint.cli import main

    model = tmp_path / "lin.py"
    model.write_text("from torch import nn\n\ndef build():\n    return nn.Linear(4096, 4096, bias=False)\n")
    job = (f"import importlib.util, time, torch\nspec = importlib.util.spec_from_file_location('lin', {str(model)!r})\n"
           "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
           "with torch.no_grad():\n    y = m.build()(torch.randn(4096, 4096))\ntime.sleep(0.3)\n")
    out = tmp_path / "w.json"
    code = main(["watch", "--interval", str(INTERVAL), "--plain", "--predict", f"{model}:build", "--input", "4096,4096",
                 "--json", str(out), "--", sys.executable, "-c", job])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "watch" and doc["predicted"]["peak_bytes"] == 3 * 64 * MiB  # weights, input, output
    parts = {p["name"]: p["bytes"] for p in doc["comparison"]["parts"]}
    assert abs(parts["what the job allocated that the model does not"]) <= 0.1 * 3 * 64 * MiB
