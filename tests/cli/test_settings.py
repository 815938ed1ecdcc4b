"""One definition of every option: the setting records, the flags derived from them, the API
verbs taking the same records, and the vocabularies they name agreeing with the code that
implements them."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import warnings

import pytest
from torch import nn

import torch_footprint as tfp
from torch_footprint import api, settings
from torch_footprint.cli import command, parser
from torch_footprint.cli.commands import COMMANDS
from torch_footprint.cli.options import View
from torch_footprint.errors import FootprintError
from torch_footprint.settings import Memory, Parallel, Target, Training, Workload


def _sub(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_a_field_name_belongs_to_one_record() -> None:
    # keyword shortcuts name a field: two records with one name would make the shortcut ambiguous
    seen: dict[str, str] = {}
    for cls in (*settings.RECORDS, View):
        for f in dataclasses.fields(cls):
            assert f.name not in seen, (f.name, seen.get(f.name), cls.__name__)
            seen[f.name] = cls.__name__


@pytest.mark.parametrize("verb", list(COMMANDS))
def test_every_field_a_command_takes_is_one_flag_with_the_fields_help(verb: str) -> None:
    cmd = command(verb)
    actions = {a.dest: a for a in _sub(verb)._actions if a.help != argparse.SUPPRESS}
    for cls, names in cmd.takes.items():
        docs = settings.field_docs(cls)
        for f in dataclasses.fields(cls):
            if (names is not None and f.name not in names) or not f.metadata.get("cli", True):
                continue
            a = actions[f.name]
            flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            assert flag in a.option_strings
            words = cmd.helps.get(f.name, docs[f.name])
            assert a.help.replace("%%", "%").startswith(words), (verb, f.name)
            default = cmd.defaults.get(f.name, f.default)
            assert a.default == (list(default) if isinstance(default, tuple) else default), (verb, f.name)


def test_the_api_verbs_read_what_the_command_lines_do() -> None:
    for verb, takes in api.VERBS.items():
        assert {cls: names for cls, names in command(verb).takes.items() if cls is not View} == takes, verb


def test_records_and_keyword_shortcuts_give_the_same_answer() -> None:
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    a = tfp.memory(m, "8,16", train=True, optimizer="adamw", utilisation=0.5)
    b = tfp.memory(m, "8,16", training=Training(train=True, optimizer="adamw"), target=Target(utilisation=0.5))
    c = tfp.memory(m, workload=Workload(inputs="8,16"), training=Training(train=True), optimizer="adamw",
                   utilisation=0.5)  # a field given beside its record overrides the record's
    assert a.to_dict() == b.to_dict() == c.to_dict()
    assert a.provision == pytest.approx(a.total / 0.5, abs=1)


def test_a_verb_refuses_a_name_it_does_not_read() -> None:
    with pytest.raises(TypeError, match=r"profile\(\) got an unexpected keyword argument 'gpus'"):
        tfp.profile(nn.Linear(4, 4), "2,4", gpus=8)  # a profile is one device's trace
    with pytest.raises(TypeError, match="takes training= as a Training"):
        tfp.memory(nn.Linear(4, 4), "2,4", training=Parallel())


def test_help_shows_each_verbs_own_keywords() -> None:
    sig = inspect.signature(tfp.fit)
    wanted = {"workload", "training", "parallel", "target", "batch", "optimizer", "gpus", "latency"}
    assert wanted <= set(sig.parameters)
    assert "max_batch" not in sig.parameters  # memory's, not fit's
    assert sig.parameters["utilisation"].default == 0.8


def test_earlier_names_still_work_and_say_the_new_one(capsys: pytest.CaptureFixture[str]) -> None:
    m = nn.Linear(8, 8)
    with pytest.warns(DeprecationWarning) as said:
        old = tfp.profile(m, "2,8", backward=True, dtype="fp64")
    assert [str(w.message) for w in said] == ["profile(): backward= is deprecated, use train=",
                                              "profile(): dtype= is deprecated, use precision="]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = tfp.profile(m, "2,8", train=True, precision="fp64")
    assert old.to_dict() == new.to_dict() and old.trace.inputs[0]["dtype"] == "float64"
    from torch_footprint.cli import main

    assert main(["profile", "resnet18", "--backward", "--depth", "0"]) == 0
    err = capsys.readouterr().err
    assert err == "footprint: warning: --backward is deprecated: use --train\n"


def test_llm_weight_scheme_is_quant_and_the_old_spelling_warns(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from pathlib import Path

    from torch_footprint.cli import main

    tiny = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")
    assert main(["llm", tiny, "--prompt", "16", "--output", "8", "--gpu", "l4", "--quant", "int8"]) == 0
    new = capsys.readouterr().out
    assert main(["llm", tiny, "--prompt", "16", "--output", "8", "--gpu", "l4", "--weights", "int8"]) == 0
    out, err = capsys.readouterr()
    assert out == new and err == "footprint: warning: --weights is deprecated: use --quant\n"


def test_vocabularies_agree_with_the_code_that_implements_them() -> None:
    import typing

    from torch_footprint.estimate.layouts.sharding import STRATEGIES
    from torch_footprint.estimate.llm.quantization import KV_SCHEMES, SCHEMES
    from torch_footprint.trace import setups

    def values(tp: object) -> set[str]:
        return set(typing.get_args(tp))

    assert values(settings.Optimizer) == set(setups.optimizers())
    assert values(settings.Precision) == set(setups.PRECISIONS)
    assert values(settings.Strategy) == {*STRATEGIES, "tp"}
    assert values(settings.Quant) == set(SCHEMES)
    assert values(settings.KvCache) == set(KV_SCHEMES)


def test_records_check_themselves() -> None:
    assert Workload(precision="Half").precision == "fp16"  # the spellings people type
    assert Target(gpu="l4").gpu == ("l4",) and Memory(overhead={"cuda_context": "1GiB"}).overhead == (
        "cuda_context=1GiB",)
    assert Target(tf32=True).tf32 == "on"
    for bad, message in ((lambda: Training(optimizer="adam"), "--optimizer needs --train"),
                         (lambda: Parallel(gpus=4, tp=3), "--tp 3 must divide --gpus 4"),
                         (lambda: Parallel(gpus=8, tp=2, strategy="tp"), "--strategy tp puts every GPU"),
                         (lambda: Target(utilisation=1.5), r"utilisation must be in \(0, 1\]"),
                         (lambda: Workload(batch=0), "batch must be at least 1")):
        with pytest.raises(FootprintError, match=message):
            bad()


def test_a_run_builds_its_own_verbs_flags_and_help_texts_only_when_asked() -> None:
    import gc

    from torch_footprint.cli import main
    from torch_footprint.collector import _freeze_after

    def subs(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices

    run = subs(parser(["memory", "resnet50", "--train"]))
    assert set(run) == set(COMMANDS)  # every verb listed (a misspelt one's choices), one built
    flags = {s for a in run["memory"]._actions for s in a.option_strings}
    assert {"--train", "--optimizer", "--ac"} <= flags
    assert {s for a in run["profile"]._actions for s in a.option_strings} == {"-h", "--help"}
    train = next(a for a in run["memory"]._actions if "--train" in a.option_strings)
    assert train.help == ""
    asked = subs(parser(["memory", "--help"]))["memory"]
    train = next(a for a in asked._actions if "--train" in a.option_strings)
    assert train.help.startswith(settings.field_docs(Training)["train"])
    # a call from Python (a test, a notebook) leaves the garbage collector as it was
    assert main(["schema"]) == 0
    assert _freeze_after not in gc.callbacks
