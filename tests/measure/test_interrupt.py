"""Ctrl-C during `footprint bench`: the finished batch sizes are printed and saved, exit code 130,
no child process and no partial file left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "models.py"


def _session(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # state, ppid, pgrp, session


def test_sigint_after_the_first_batch_keeps_it(tmp_path: Path) -> None:
    marker, out = tmp_path / "batch-8-started", tmp_path / "out.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch_footprint", "bench", f"{FIXTURES}:slow_at_batch_8", "--input", "1,4",
         "--batch", "1,8", "--min-reps", "3", "--min-time", "0.05", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, FOOTPRINT_TEST_MARKER=str(marker)))
    try:
        give_up = time.monotonic() + 300  # a safety net for a broken run, not a timing
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < give_up
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)  # batch 1 is measured: batch 8 has begun
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    data = json.loads(out.read_text())
    assert [p["batch"] for p in data["points"]] == [1]
    assert data["interrupted"] is True and data["unfinished"] == [8]
    assert "not measured: 8" in stdout and f"wrote {out}" in stdout
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == ("footprint: interrupted: kept the finished batch sizes; "
                                               "not measured: 8")
    # nothing left running from the command's session, and no temporary file beside the JSON
    assert [p for p in os.listdir("/proc") if p.isdigit() and _session(p) == proc.pid] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-8-started", "out.json"]
