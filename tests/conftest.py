"""Shared test set-up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# helpers shared by tests of several stages (tests/fixtures/model_state.py: a never-profiled copy)
sys.path.insert(0, str(Path(__file__).parent / "fixtures"))


@pytest.fixture(autouse=True)
def _no_user_calibration(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's calibration file (~/.cache/torch-footprint)."""
    monkeypatch.setenv("TORCH_FOOTPRINT_HOME", str(tmp_path_factory.mktemp("footprint-home")))
