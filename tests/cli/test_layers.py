"""The layer contract (import-linter, in pyproject.toml): kept by the code as it is, broken by an
upward import planted in a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (the dev extra)")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "src" / "torch_footprint", root / "src" / "torch_footprint",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


def test_the_code_keeps_the_contract(copy: Path) -> None:
    r = _lint(copy)
    assert r.returncode == 0, r.stdout[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout


@pytest.mark.parametrize(("module", "planted", "broken"), [
    ("analysis/summary.py", "from ..estimate import memory", "torch_footprint.analysis is not allowed to import "
                                                             "torch_footprint.estimate"),
    ("report/units.py", "from ..estimate.llm import pricing", "torch_footprint.report is not allowed to import "
                                                              "torch_footprint.estimate"),
    ("trace/records.py", "from .. import api", "torch_footprint.trace is not allowed to import torch_footprint.api"),
])
def test_a_planted_upward_import_breaks_it(copy: Path, module: str, planted: str, broken: str) -> None:
    path = copy / "src" / "torch_footprint" / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{planted}  # planted\n")
        r = _lint(copy)
    finally:
        path.write_text(original)
    assert r.returncode == 1 and broken in r.stdout, r.stdout[-2000:]


def test_no_module_imports_itself_back() -> None:
    # within a layer too: the memory estimate and the accelerator ranking once imported each other
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("torch_footprint", exclude_type_checking_imports=True)
    cycles = [(a, b) for a in sorted(graph.modules) for b in graph.find_modules_directly_imported_by(a)
              if b.startswith("torch_footprint") and b != a and graph.chain_exists(importer=b, imported=a)]
    assert cycles == []


def test_modules_stay_readable() -> None:
    # one concern per module: none over about 450 lines but the FLOP formula table
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "src" / "torch_footprint").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 460 and p.name != "formulas.py"}
    assert long == {}
