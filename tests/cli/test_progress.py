"""Every verb that can take seconds shows progress on stderr while it works (a spinner with the
elapsed time, drawn only when stderr is a terminal): here the progress context is replaced by
one that records what it was told, and each command is run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_footprint.cli import main
from torch_footprint.report import progress as progress_module


@pytest.fixture()
def heard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    said: list[str] = []

    @contextlib.contextmanager
    def recording(message: str, console: object = None) -> Iterator[object]:
        said.append(message)
        yield lambda m, fraction=None: said.append(m)

    monkeypatch.setattr(progress_module, "progress", recording)
    return said


@pytest.mark.parametrize("argv", [
    ["profile", "resnet18"],
    ["memory", "resnet18", "--train", "--optimizer", "sgd"],
    ["predict", "resnet18", "--gpu", "l4"],
    ["fit", "resnet18", "--gpu", "l4"],
    ["report", "resnet18", "--gpu", "l4", "-o", "{tmp}/r.html"],
    ["check", "resnet18", "--budget", "{tmp}/budget.toml"],
])
def test_a_long_verb_shows_progress(argv: list[str], heard: list[str], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "budget.toml").write_text('[budget]\nparams = "<= 30M"\n"latency_ms on l4" = 1000\n')
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    capsys.readouterr()
    assert code == 0 and heard and heard[0].startswith(f"{argv[0]} ")
