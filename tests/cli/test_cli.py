"""The command line: real runs, and bad input giving one clear message, exit code 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torch_footprint.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "models.py"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_profile_resnet50_prints_the_tree_and_conventions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "profile", "resnet50", "--depth", "1")
    assert code == 0, err
    assert "25,557,032" in out  # torchvision's published num_params
    assert "4.09 GMAC" in out  # torchvision's published 4.089 "GFLOPS" (MACs)
    assert "layer4" in out and "1 MAC = 2 FLOPs" in out
    assert "every operator had a formula" in out


def test_profile_by_operator_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    code, out, err = run(capsys, "profile", "resnet18", "--by", "operator", "--json", str(target))
    assert code == 0, err
    assert "aten.convolution.default" in out
    data = json.loads(target.read_text())
    assert data["params"] == 11689512 and "trace" in data
    code, out2, err = run(capsys, "show", str(target), "--depth", "1")
    assert code == 0, err
    assert "11,689,512" in out2


def test_profile_file_factory_with_two_inputs_and_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "profile", f"{FIXTURES}:build", "--input", "1,3,64,64", "--input", "1,10",
                         "--dtype", "bf16")
    assert code == 0, err
    # conv: 64*64 positions x 8 out x 3 in x 9; head: 18 x 4
    assert f"{(64 * 64 * 8 * 3 * 9 + 18 * 4) / 1e3:.0f} KMAC" in out
    assert "bfloat16" in out


def test_profile_hf_input_ids(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    cfg = Path(__file__).parents[1] / "configs" / "gpt2-tiny"
    code, out, err = run(capsys, "profile", str(cfg), "--input-ids", "2,32", "--backward")
    assert code == 0, err
    assert "backward / forward matrix FLOPs: 2.000" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["profile", "resnet5O"], "unknown model 'resnet5O'"),
        (["profile", "resnet50", "--input", "1,3,224,abc"], "'abc' is not a whole number"),
        (["profile", "resnet50", "--input", "1,,224"], "malformed input shape"),
        (["profile", "resnet50", "--input", "1,3,224,224:float33"], "unknown dtype 'float33'"),
        (["profile", "resnet50", "--dtype", "int8"], "unknown precision 'int8'"),
        (["profile", "no/such/file.py:build"], "does not exist"),
        (["profile", f"{FIXTURES}:nothing"], "has no attribute 'nothing'"),
        (["profile", f"{FIXTURES}:not_a_module"], "not a torch.nn.Module"),
        (["profile", f"{FIXTURES}:broken", "--input", "2,4"], "in module 'decoder' (Linear)"),
        (["profile", "resnet50", "--input", "1,3,224"], "the model raised"),
        (["profile", "resnet50", "--weights", "NOPE"], "has no weights 'NOPE'"),
        (["profile", "hf:not-a-real/model-id-anywhere"], "could not load the config"),
        (["profile", "resnet18", "--json", "/no/such/folder/out.json"], "does not exist"),
        (["show", "/no/such/profile.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_clear_error(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and err.startswith("footprint: error: ")


def test_unknown_name_suggests_close_matches(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "profile", "resnet5O")
    assert code == 2 and "resnet50" in err


def test_missing_extra_names_the_extra() -> None:
    # a Python where timm cannot be imported
    code = ("import sys; sys.modules['timm'] = None; from torch_footprint.cli import main; "
            "sys.exit(main(['profile', 'timm:resnet18']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2
    assert "pip install 'torch-footprint[timm]'" in r.stderr and "Traceback" not in r.stderr


def test_console_script_runs_as_a_process() -> None:
    r = subprocess.run([sys.executable, "-m", "torch_footprint", "profile", "resnet18", "--input", "1,3,oops"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "malformed" in r.stderr
    r = subprocess.run([sys.executable, "-m", "torch_footprint", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("torch-footprint ")


def test_package_factory_resolves_from_the_current_directory(tmp_path: Path) -> None:
    # the README's `footprint profile mypkg.models:make_net`, run from the folder that holds mypkg/;
    # `python -P -m` leaves the current directory off sys.path, as the `footprint` script does
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text("from torch import nn\n\ndef make_net():\n    return nn.Linear(8, 4)\n")
    r = subprocess.run([sys.executable, "-P", "-m", "torch_footprint", "profile", "mypkg.models:make_net",
                        "--input", "1,8"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "32 MAC" in r.stdout  # 8 x 4 multiply-accumulates


def test_a_package_not_found_names_the_folder_searched(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder joins sys.path for this test only
    code, _, err = run(capsys, "profile", "nopkg.models:make_net")
    assert code == 2 and f"from {tmp_path}" in err and err.count("\n") == 1
