"""Result files: written whole or not at all, with the mode the user's umask gives."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from torch_footprint.errors import FootprintError
from torch_footprint.files import read_json, write_json


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_json_files_respect_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        write_json(tmp_path / "out.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == mode
    assert read_json(tmp_path / "out.json") == {"a": 1}


def test_a_failed_write_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_json(tmp_path / "out.json", {"a": object()})  # not serialisable, half-way through
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.json").write_text('{"kept": true}')
    with pytest.raises(TypeError):
        write_json(tmp_path / "old.json", {"a": object()})
    assert read_json(tmp_path / "old.json") == {"kept": True}  # the previous file stays whole
    with pytest.raises(FootprintError, match="does not exist"):
        write_json(tmp_path / "no" / "out.json", {})


def test_a_command_line_process_ends_with_its_whole_answer_written(tmp_path: Path) -> None:
    """The process ends without tearing torch down (os._exit): the output and the file are whole
    first, and the exit code is the answer's."""
    import json
    import subprocess
    import sys

    out = tmp_path / "p.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    run = subprocess.run([sys.executable, "-m", "torch_footprint", "profile", "resnet18", "--json", str(out)],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().endswith(f"wrote {out}")  # the last line printed
    assert json.loads(out.read_text())["kind"] == "profile"
    bad = subprocess.run([sys.executable, "-m", "torch_footprint", "profile", "nosuch"], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("footprint: error: unknown model 'nosuch'")
