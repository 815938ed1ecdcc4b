"""Bad input, across every verb and file format: one line on stderr, exit code 2, never a traceback.

The parsers are fuzzed too (hypothesis): any text given to a size, a time, an input spec, a
batch list or a hardware file either parses or raises FootprintError, never anything else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_errors import bad_input_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_footprint.errors import FootprintError
from torch_footprint.hardware.db import load_file
from torch_footprint.measure.runner import parse_batches
from torch_footprint.quantities import parse_bytes, parse_seconds
from torch_footprint.sources.inputs import parse_input_ids, parse_shape

FIXTURES = Path(__file__).parents[1] / "fixtures" / "models.py"
ROW = {"id": "card", "name": "Card", "vendor": "nvidia", "kind": "gpu", "memory_gb": 8, "bandwidth_gbs": 400,
       "tflops": {"fp32": 10.0}, "source": "https://example.com/card.pdf"}


def _toml(row: dict) -> str:
    def value(v: object) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    return "[[accelerator]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in row.items())


# a file name (in the test's folder) -> its content; FILE:<name> in an argument is replaced by its path
FILES = {
    "broken.toml": "[[accelerator]\nid = ",
    "broken.json": '{"accelerator": [',
    "empty.json": '{"accelerator": []}',
    "missing-field.toml": _toml({k: v for k, v in ROW.items() if k != "bandwidth_gbs"}),
    "negative.toml": _toml(dict(ROW, memory_gb=-8)),
    "text-number.json": json.dumps({"accelerator": [dict(ROW, memory_gb="eight")]}),
    "unknown-dtype.toml": _toml(dict(ROW, tflops={"fp32": 10.0, "fp64x": 1.0})),
    "no-fp32.toml": _toml(dict(ROW, tflops={"fp16": 10.0})),
    "duplicate.toml": _toml(ROW) + _toml(ROW),
    "unknown-field.toml": _toml(dict(ROW, colour="green")),
    "bad-kind.json": json.dumps({"accelerator": [dict(ROW, kind="tpu")]}),
    "bad-id.toml": _toml(dict(ROW, id="My Card")),
    "not-a-table.json": json.dumps({"accelerator": [3]}),
    "bool-number.json": json.dumps({"accelerator": [dict(ROW, bandwidth_gbs=True)]}),
    "saved-not-json.json": "{not json",
    "saved-no-trace.json": json.dumps({"params": 3}),
    "saved-list.json": json.dumps([1, 2]),
    "saved-bad-trace.json": json.dumps({"trace": {"format": "torch-footprint-trace/1", "model": "m"}}),
    "saved-other-format.json": json.dumps({"trace": {"format": "something-else/9"}}),
    "saved-empty.json": "",
    "bad-config/config.json": '{"model_type": "gpt2", "n_layer": 2,',
}

LLAMA = str(Path(__file__).resolve().parents[1] / "configs" / "llama-tiny")
CUDA_UNAVAILABLE = not torch.cuda.is_available()

CASES = [
    # profile: model names, input specs, dtypes, options
    (["profile", "resnet5O"], "unknown model 'resnet5O'"),
    (["llm", "meta-llama/Llama-3.1-8B"], "written hf:meta-llama/Llama-3.1-8B"),
    (["profile", ""], "no model name"),
    (["profile", "timm:not_a_timm_model_at_all"], "not_a_timm_model_at_all"),
    (["profile", "resnet50", "--input", "1,3,224,abc"], "'abc' is not a whole number"),
    (["profile", "resnet50", "--input", "1,,224"], "malformed input shape"),
    (["profile", "resnet50", "--input", ""], "malformed input shape"),
    (["profile", "resnet50", "--input", ":int64"], "malformed input shape"),
    (["profile", "resnet50", "--input", "1,-3,224,224"], "cannot be negative"),
    (["profile", "resnet50", "--input", "1,3,224,224:float33"], "unknown dtype 'float33'"),
    (["profile", "resnet50", "--input", "9a=1,3"], "not a valid keyword name"),
    (["profile", "resnet50", "--input", "1.5,3,224,224"], "'1.5' is not a whole number"),
    (["profile", "resnet50", "--input-ids", "1,2,3"], "BATCH,TOKENS"),
    (["profile", "resnet50", "--input-ids", "a,b"], "'a' is not a whole number"),
    (["profile", "resnet50", "--dtype", "int8"], "unknown precision 'int8'"),
    (["profile", "resnet50", "--dtype", "fp33"], "unknown precision 'fp33'"),
    (["profile", "resnet50", "--depth", "-1"], "--depth cannot be negative"),
    (["profile", "resnet50", "--depth", "x"], "invalid int value: 'x'"),
    (["profile", "resnet50", "--by", "tree"], "unknown table 'tree': use module, operator"),
    (["profile", "model.py"], "name the factory to call"),
    (["profile", "no/such/file.py:build"], "does not exist"),
    (["profile", f"{FIXTURES}:nothing"], "has no attribute 'nothing'"),
    (["profile", f"{FIXTURES}:not_a_module"], "not a torch.nn.Module"),
    (["profile", f"{FIXTURES}:broken", "--input", "2,4"], "in module 'decoder' (Linear)"),
    (["profile", "resnet50", "--input", "1,3,224"], "the model raised"),
    (["profile", "resnet50", "--weights", "NOPE"], "has no weights 'NOPE'"),
    (["profile", "resnet18", "--json", "/no/such/folder/out.json"], "does not exist"),
    (["profile", "no_such_package.models:make_net"], "cannot import module 'no_such_package.models'"),
    (["profile", "resnet18", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    # memory: byte sizes, optimizers, precisions, overheads
    (["memory", "resnet18", "--batch", "0"], "batch must be at least 1"),
    (["memory", "resnet18", "--batch", "two"], "invalid int value: 'two'"),
    (["memory", "resnet18", "--train", "--optimizer", "adamx"], "adamx"),
    (["memory", "resnet18", "--optimizer", "adamw"], "--optimizer needs --train"),
    (["memory", "resnet18", "--train", "--precision", "fp8-mixed"], "fp8-mixed"),
    (["memory", "resnet18", "--checkpointing"], "add --train"),
    (["memory", "resnet18", "--max-batch", "24XB"], "cannot read the memory size '24XB'"),
    (["memory", "resnet18", "--max-batch", "GiB"], "cannot read the memory size 'GiB'"),
    (["memory", "resnet18", "--max-batch=-5GiB"], "cannot be negative"),
    (["memory", "resnet18", "--max-batch", "1.2.3GiB"], "cannot read the memory size"),
    (["memory", "resnet18", "--max-batch", "100KiB"], "its weights alone take"),
    (["memory", "resnet18", "--overhead", "cuda_context"], "--overhead takes NAME=SIZE"),
    (["memory", "resnet18", "--overhead", "cuda_context=lots"], "cannot read the memory size 'lots'"),
    (["memory", "resnet18", "--utilisation", "1.5"], "utilisation must be in (0, 1]"),
    (["memory", "resnet18", "--utilisation", "0"], "utilisation must be in (0, 1]"),
    (["memory", "resnet18", "--device", "tpu"], "unknown device 'tpu'"),
    (["memory", "resnet18", "--grads", "maybe"], "unknown grads 'maybe': use none, zero"),
    # bench: batch lists, devices, counts
    (["bench", "resnet18", "--batch", "0"], "at least 1"),
    (["bench", "resnet18", "--batch", "1,many"], "whole numbers or 'auto'"),
    (["bench", "resnet18", "--batch", ","], "whole numbers or 'auto'"),
    (["bench", "resnet18", "--device", "quantum"], "unknown device 'quantum'"),
    (["bench", "resnet18", "--device", "tpu"], "unknown device 'tpu'"),
    (["bench", "resnet18", "--min-reps", "0"], "--min-reps must be at least 1"),
    (["bench", "resnet18", "--min-time", "-1"], "--min-time not negative"),
    (["bench", "resnet18", "--threads", "0"], "--threads must be at least 1"),
    (["bench", "resnet18", "--max-memory", "lots"], "cannot read the memory size 'lots'"),
    (["bench", "resnet18", "--dtype", "fp33"], "unknown precision 'fp33'"),
    # several ranks: more than this machine has, a --tp that does not divide the heads, an unknown strategy,
    # and NCCL's GPU ranks asked for where there is no GPU (CUDA_UNAVAILABLE: on a machine without one)
    (["bench", "resnet18", "--train", "--nproc", "100000"], "--nproc 100000 is more than the"),
    (["bench", "resnet18", "--train", "--nproc", "2", "--strategy", "pp"], "unknown strategy 'pp'"),
    (["fit", LLAMA, "--input-ids", "2,64", "--train", "--gpus", "3", "--tp", "3", "--gpu", "h100-sxm"],
     "--tp 3 does not divide the model's 4 attention heads"),
    (["fit", LLAMA, "--input-ids", "2,64", "--train", "--gpus", "2", "--framework", "deepspeed"],
     "unknown training framework 'deepspeed': use torch, megatron"),
    (["fit", LLAMA, "--input-ids", "2,64", "--train", "--gpus", "2", "--vocab-parallel", "--gpu", "h100-sxm"],
     "--vocab-parallel splits the vocabulary among tensor-parallel ranks: add --tp 2 or more"),
    (["fit", LLAMA, "--input-ids", "2,64", "--train", "--gpus", "2", "--async-tp"],
     "--async-tp overlaps the tensor-parallel collectives: add --tp 2 or more"),
    *([(["bench", "resnet18", "--train", "--nproc", "2", "--device", "cuda"], "CUDA is not available")]
      if CUDA_UNAVAILABLE else []),
    (["bench", "resnet18", "--train", "--optimizer", "nope"], "nope"),
    # gpus and hardware files, TOML and JSON
    (["gpus", "--vendor", "intel"], "no accelerator of vendor 'intel'"),
    (["gpus", "--hardware", "FILE:missing.toml"], "cannot read hardware file"),
    (["gpus", "--hardware", "FILE:broken.toml"], "not valid TOML"),
    (["gpus", "--hardware", "FILE:broken.json"], "not valid JSON"),
    (["gpus", "--hardware", "FILE:empty.json"], "expected a list of accelerators"),
    (["gpus", "--hardware", "FILE:missing-field.toml"], "field 'bandwidth_gbs' is missing"),
    (["gpus", "--hardware", "FILE:negative.toml"], "field 'memory_gb': must be positive"),
    (["gpus", "--hardware", "FILE:text-number.json"], "field 'memory_gb': expected a number"),
    (["gpus", "--hardware", "FILE:unknown-dtype.toml"], "field 'tflops.fp64x': unknown dtype"),
    (["gpus", "--hardware", "FILE:no-fp32.toml"], "field 'tflops.fp32' is missing"),
    (["gpus", "--hardware", "FILE:duplicate.toml"], "field 'id' repeats row #1"),
    (["gpus", "--hardware", "FILE:unknown-field.toml"], "unknown field 'colour'"),
    (["gpus", "--hardware", "FILE:bad-kind.json"], "field 'kind' must be one of"),
    (["gpus", "--hardware", "FILE:bad-id.toml"], "field 'id' must be lower-case"),
    (["gpus", "--hardware", "FILE:not-a-table.json"], "expected a table of fields"),
    (["gpus", "--hardware", "FILE:bool-number.json"], "field 'bandwidth_gbs': expected a number"),
    # fit and predict: times, efficiencies, accelerators, strategies
    (["fit", "resnet18", "--latency", "10parsecs"], "cannot read the latency '10parsecs'"),
    (["fit", "resnet18", "--latency=-5ms"], "positive time"),
    (["fit", "resnet18", "--latency", "ms"], "cannot read the latency"),
    # a bare number where the unit matters: refused, naming the units to add
    (["fit", "resnet18", "--latency", "10"], "the latency '10' has no unit: write 10ms or 10s"),
    (["memory", "resnet18", "--max-batch", "24"], "the --max-batch budget '24' has no unit: write 24GiB"),
    (["memory", "resnet18", "--device", "cuda", "--overhead", "cuda_context=300"], "'300' has no unit"),
    (["bench", "resnet18", "--max-memory", "16"], "the --max-memory budget '16' has no unit"),
    (["fit", "resnet18", "--gpu", "A100"], "'A100' could be 4 accelerators: a100-pcie-40gb, a100-sxm-40gb"),
    (["llm", "hf:gpt2", "--prompt", "128", "--gpu", "h100"], "'h100' could be 3 accelerators"),
    # a batch that the predicted peak says will not fit is not run
    (["bench", "resnet18", "--batch", "4096", "--max-memory", "1GiB"], "batch 4096 needs about"),
    (["bench", "resnet50", "--batch", "100000"], "over this machine's budget"),
    # a malformed file is named as such, not as a bug
    (["profile", "FILE:bad-config"], "bad-config/config.json': It looks like the config file"),
    (["fit", "resnet18", "--efficiency", "matrix"], "KIND=FRACTION"),
    (["fit", "resnet18", "--efficiency", "matrix=high"], "KIND=FRACTION"),
    (["fit", "resnet18", "--gpus", "x"], "invalid int value: 'x'"),
    (["fit", "resnet18", "--strategy", "zero4"], "unknown strategy 'zero4'"),
    (["fit", "resnet18", "--hardware", "FILE:broken.toml"], "not valid TOML"),
    (["predict", "resnet18", "--gpu", "h100-sxn"], "unknown accelerator 'h100-sxn'"),
    (["predict", "resnet18"], "the following arguments are required: --gpu"),
    (["predict", "resnet18", "--gpu", "t4", "--depth", "-1"], "cannot be negative"),
    (["predict", "resnet18", "--gpu", "t4", "--train", "--optimizer", "adamv"], "unknown optimizer 'adamv'"),
    (["predict", "resnet18", "--gpu", "t4", "--gpu", "l4"], "predict times one accelerator"),
    (["predict", "resnet18", "--gpu", "t4", "--tf32", "maybe"], "unknown TF32 setting 'maybe': use on, off"),
    # calibrate
    (["calibrate", "--device", "tpu"], "cannot calibrate device 'tpu'"),
    (["calibrate", "--threads", "0"], "--threads must be at least 1"),
    # show: saved JSON
    (["show", "/no/such/profile.json"], "does not exist"),
    (["show", "FILE:saved-not-json.json"], "is not valid JSON"),
    (["show", "FILE:saved-empty.json"], "is not valid JSON"),
    # files without a schema_version that are no older result either (the loader's check, report/schema.py)
    (["show", "FILE:saved-no-trace.json"], "is not a torch-footprint result (no schema_version"),
    (["show", "FILE:saved-list.json"], "is not a torch-footprint result (its JSON is not an object)"),
    (["show", "FILE:saved-bad-trace.json"], "is not a torch-footprint result (no schema_version"),
    (["show", "FILE:saved-other-format.json"], "is not a torch-footprint result (no schema_version"),
    (["show", "FILE:."], "is a folder"),
    # the command itself
    (["profil", "resnet18"], "invalid choice: 'profil'"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad-input")
    for name, text in FILES.items():
        (d / name).parent.mkdir(exist_ok=True)
        (d / name).write_text(text)
    return d


def test_there_are_at_least_sixty_cases() -> None:
    assert len(CASES) >= 60
    assert {argv[0] for argv, _ in CASES} >= {"profile", "memory", "bench", "gpus", "fit", "predict", "calibrate",
                                               "show"}


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_code_2(argv: list[str], message: str, folder: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(folder / a[5:]) if a.startswith("FILE:") else a for a in argv]
    err = bad_input_line(argv, capsys)
    assert message in err, err


# ------------------------------------------------------------------------------------ fuzzing the parsers
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TEXT = st.text(st.characters(codec="utf-8"), max_size=30) | st.from_regex(
    r"\A[0-9 ,.xX:=+eE-]{0,20}(ki?b|mi?b|gib|tb|ms|us|s|fp16|int64|bool|auto)?\Z")


def _one_line(e: FootprintError) -> None:
    assert str(e) and "\n" not in str(e)


@FUZZ
@given(TEXT)
def test_byte_sizes_parse_or_say_why(text: str) -> None:
    try:
        n = parse_bytes(text)
    except FootprintError as e:
        _one_line(e)
    else:
        assert isinstance(n, int) and n >= 0


@FUZZ
@given(TEXT)
def test_times_parse_or_say_why(text: str) -> None:
    try:
        s = parse_seconds(text)
    except FootprintError as e:
        _one_line(e)
    else:
        assert s > 0


@FUZZ
@given(TEXT)
def test_input_specs_parse_or_say_why(text: str) -> None:
    for parse in (parse_shape, parse_input_ids):
        try:
            spec = parse(text)
        except FootprintError as e:
            _one_line(e)
        else:
            assert all(isinstance(d, int) and d >= 0 for d in spec.shape)


@FUZZ
@given(TEXT)
def test_batch_lists_parse_or_say_why(text: str) -> None:
    try:
        batches = parse_batches(text)
    except FootprintError as e:
        _one_line(e)
    else:
        assert all(b == "auto" or (isinstance(b, int) and b >= 1) for b in batches)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10, 10**4) | st.floats(allow_nan=True)
                       | st.text(max_size=8), lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=6)


@pytest.mark.filterwarnings("ignore::torch_footprint.errors.FootprintWarning")  # a source that is not a URL
@FUZZ
@given(st.dictionaries(st.sampled_from([*ROW, "tflops", "notes", "aliases", "estimated", "tdp_w", "x"]), _VALUES,
                       max_size=10), st.booleans())
def test_hardware_rows_load_or_say_which_field(tmp_path_factory: pytest.TempPathFactory, row: dict,
                                                keep_valid_base: bool) -> None:
    data = dict(ROW, **row) if keep_valid_base else row
    path = tmp_path_factory.mktemp("fuzz") / "hw.json"
    path.write_text(json.dumps({"accelerator": [data]}))
    try:
        load_file(path)
    except FootprintError as e:
        _one_line(e)
        assert str(path) in str(e)


@pytest.mark.filterwarnings("ignore::torch_footprint.errors.FootprintWarning")
@FUZZ
@given(st.text(max_size=200))
def test_hardware_files_of_any_text_load_or_say_why(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    for name in ("hw.toml", "hw.json"):
        (folder / name).write_text(text)
        try:
            load_file(folder / name)
        except FootprintError as e:
            assert str(e)
