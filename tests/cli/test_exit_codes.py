"""Every verb's exit codes, as ``footprint --help`` names them: 0 an answer (including "nothing
fits"), 1 a verdict failed, 2 bad input, 3 internal error, 130 interrupted."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from torch_footprint import api
from torch_footprint.cli import EXIT_CODES, main
from torch_footprint.cli.commands import COMMANDS
from torch_footprint.errors import ExitCode

HERE = Path(__file__).parents[1]
MODEL = f"{HERE / 'fixtures' / 'models.py'}:build"
INPUTS = ["--input", "2,3,8,8", "--input", "2,10"]
TINY = str(HERE / "configs" / "gpt2-tiny")
LLAMA = str(HERE / "configs" / "llama-tiny")
PLAN = [LLAMA, "--gpu", "h100-sxm", "--seq", "16", "--global-batch", "2", "--ac", "none"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A saved profile, and a budget it meets and one it does not."""
    d = tmp_path_factory.mktemp("exit")
    prof = d / "p.json"
    assert main(["profile", MODEL, *INPUTS, "--json", str(prof)]) == 0
    ok, over = d / "ok.toml", d / "over.toml"
    ok.write_text('[budget]\nparams = "<= 1M"\n')
    over.write_text('[budget]\nparams = "<= 10"\n')
    return {"profile": str(prof), "ok": str(ok), "over": str(over), "dir": str(d)}


# verb -> (an answer, a bad input, the API function (or the one it calls) to make fail)
CASES: dict[str, tuple[list[str], list[str], str]] = {
    "profile": ([MODEL, *INPUTS, "--depth", "0"], [MODEL, "--input", "2,x"], "api.profile"),
    "memory": ([MODEL, *INPUTS], [MODEL, *INPUTS, "--utilisation", "2"], "api.memory"),
    "bench": ([MODEL, *INPUTS, "--device", "cpu", "--min-reps", "2", "--min-time", "0"],
              [MODEL, *INPUTS, "--min-reps", "0"], "api.bench"),
    "gpus": ([], ["--vendor", "nosuch"], "api.gpus"),
    "fit": ([MODEL, *INPUTS, "--gpu", "t4"], [MODEL, *INPUTS, "--gpus", "0"], "api.fit"),
    "predict": ([MODEL, *INPUTS, "--gpu", "t4"], [MODEL, *INPUTS, "--gpu", "nosuchgpu"], "api.predict"),
    "calibrate": (["--quick", "--force"], ["--device", "tpu"], "api.calibrate"),
    "plan": ([*PLAN, "--gpus", "2"], [*PLAN, "--gpus", "0"], "api.plan"),
    "llm": ([TINY, "--prompt", "8", "--output", "4", "--gpu", "l4"], [TINY, "--quant", "int3"], "api.llm"),
    "show": (["{profile}", "--depth", "0"], ["{dir}/missing.json"], "results.record.load"),
    "report": ([MODEL, *INPUTS, "-o", "{dir}/r.html"], [MODEL, *INPUTS], "api.report"),
    "diff": (["{profile}", "{profile}"], ["{profile}", "{dir}/missing.json"], "api.diff"),
    "check": (["{profile}", "--budget", "{ok}"], ["{profile}", "--budget", "{dir}/missing.toml"], "api.check"),
    "schema": ([], ["--nosuchflag"], "results.record.schema"),
    "watch": (["--interval", "0.2", "--json", "{dir}/w.json", "--", sys.executable, "-c", "pass"],
              ["--pid", "999999999"], "api.watch"),
}

# the verbs whose answer's 0 is asserted where the answer itself is checked, with the same arguments:
# calibrate's is a real calibration of about 30 s
ANSWERED_ELSEWHERE = {"calibrate": "tests/measure/test_calibrate.py::test_calibrate_saves_and_the_roofline_uses_it"}


def _run(verb: str, args: list[str], saved: dict[str, str]) -> int:
    try:
        return main([verb, *(a.format(**saved) for a in args)])
    except SystemExit as e:  # argparse's usage errors exit with 2 themselves
        return int(e.code or 0)


def test_every_verb_is_covered() -> None:
    assert set(CASES) == set(COMMANDS)


def test_help_names_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert EXIT_CODES in capsys.readouterr().out
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 130]


@pytest.mark.parametrize("verb", list(CASES))
def test_an_answer_is_0_and_bad_input_2(verb: str, saved: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    if verb == "llm":
        pytest.importorskip("transformers")
    good, bad, _ = CASES[verb]
    if verb not in ANSWERED_ELSEWHERE:
        assert _run(verb, good, saved) == 0, capsys.readouterr().err
    assert _run(verb, bad, saved) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("verb", list(CASES))
@pytest.mark.parametrize(("raised", "code", "said"), [
    (RuntimeError("boom"), 3, "footprint: internal error: RuntimeError: boom"),
    (KeyboardInterrupt(), 130, "footprint: interrupted"),
])
def test_a_bug_is_3_and_ctrl_c_130(verb: str, raised: BaseException, code: int, said: str, saved: dict[str, str],
                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    where, name = CASES[verb][2].rsplit(".", 1)
    module = api if where == "api" else __import__(f"torch_footprint.{where}", fromlist=["x"])

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise raised

    monkeypatch.setattr(module, name, fail)
    assert _run(verb, CASES[verb][0], saved) == code
    assert capsys.readouterr().err.startswith(said)


def test_nothing_fits_is_an_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", MODEL, *INPUTS, "--gpu", "t4", "--latency", "1us"]) == 0
    assert "pick: none" in capsys.readouterr().out


def test_a_failed_verdict_is_1(saved: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", saved["profile"], "--budget", saved["over"], "--json", saved["dir"] + "/c.json"]) == 1
    assert json.loads(Path(saved["dir"], "c.json").read_text())["passed"] is False
    # a calibration that fails its own checks is not saved, and says so
    from torch_footprint.measure import calibrate

    def failing(device: str, **kw: Any) -> calibrate.CalibrationResult:
        return calibrate.CalibrationResult({"device": device, "name": "cpu", "threads": 1, "torch": "x",
                                            "matmul_tflops": {}, "conv_tflops": {}, "copy_gbs": 1.0,
                                            "op_overhead_us": 1.0, "seconds": 0.1,
                                            "problems": ["a cache copy slower than DRAM"]}, None)

    monkeypatch.setattr(calibrate, "calibrate_device", failing)
    capsys.readouterr()
    assert main(["calibrate"]) == 1
    assert "calibration not saved: a cache copy slower than DRAM" in capsys.readouterr().err
