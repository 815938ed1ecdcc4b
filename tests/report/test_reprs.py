"""Every result prints as one short line naming attributes it has, and draws itself in a
notebook: a stand-in IPython shell records the views registered for each type by name, and
each view turns a real result into HTML."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torch_footprint as tfp
from torch_footprint.files import write_json
from torch_footprint.report import notebook
from torch_footprint.results.record import envelope

TINY_GPT2 = Path(__file__).parents[1] / "configs" / "gpt2-tiny"


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("results")
    out: dict[str, Any] = {
        "profile": tfp.profile(_mlp(), "4,64"),
        "memory": tfp.memory(_mlp(), "4,64", train=True, optimizer="adamw"),
        "predict": tfp.predict(_mlp(), "l4", "4,64"),
        "fit": tfp.fit(_mlp(), "4,64", gpu=["l4", "t4"]),
        "llm": tfp.llm(str(TINY_GPT2), prompt=32, output=8, gpu="l4"),
        "report": tfp.make_report(_mlp(), "4,64", gpu="l4"),
        "watch": tfp.watch([sys.executable, "-c", "pass"], interval=0.05),
    }
    before, after = d / "a.json", d / "b.json"
    write_json(before, envelope("profile", tfp.profile(_mlp(), "4,64").to_dict()))
    write_json(after, envelope("profile", tfp.profile(_mlp(), "8,64").to_dict()))
    out["diff"] = tfp.diff(str(before), str(after), force=True)
    budget = d / "budget.toml"
    budget.write_text('[budget]\nparams = "<= 1K"\nflops = "<= 1G"\n')
    out["check"] = tfp.check(str(after), str(budget))
    return out


def _resolve(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("kind", ["profile", "memory", "predict", "fit", "llm", "report", "watch", "diff", "check"])
def test_a_result_prints_as_one_short_line_of_real_attributes(results: dict[str, Any], kind: str) -> None:
    res = results[kind]
    text = repr(res)
    assert "\n" not in text and len(text) <= 240, text
    assert text.startswith(type(res).__name__ + "(")
    names = re.findall(r"(?:\(|, )([a-z_][a-z_.]*)=", text)
    assert names, text
    for name in names:
        if name == "model" and not hasattr(res, "model"):
            continue  # the workload's name, as every result's repr starts
        _resolve(res, name)  # AttributeError if the repr names what the result does not have


def test_the_memory_repr_shows_the_figure_the_command_line_prints(results: dict[str, Any]) -> None:
    est = results["memory"]
    assert f"total={est.total}" in repr(est) and f"provision={est.provision}" in repr(est)
    assert est.total == est.larger.peak_bytes + sum(est.overheads.values())


def test_diff_check_and_watch_are_verbs_of_the_package() -> None:
    assert {"diff", "check", "watch", "llm", "make_report"} <= set(tfp.__all__)
    assert callable(tfp.diff) and callable(tfp.check) and callable(tfp.watch)


class _Formatter:
    def __init__(self) -> None:
        self.views: dict[str, Any] = {}

    def for_type_by_name(self, module: str, name: str, fn: Any) -> None:
        self.views[f"{module}.{name}"] = fn


def test_every_result_type_has_a_notebook_view(results: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = _Formatter()
    shell = types.SimpleNamespace(display_formatter=types.SimpleNamespace(formatters={"text/html": fmt}))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert notebook.notebook_views()
    for kind, res in results.items():
        key = f"{type(res).__module__}.{type(res).__name__}"
        assert key in fmt.views, f"{kind}: no notebook view for {key}"
        html = fmt.views[key](res)
        assert html.startswith(("<div", "<table")) and "<html" not in html, kind
    assert "over budget: 1 of 2 caps failed" in fmt.views["torch_footprint.results.budget.CheckResult"](
        results["check"])
    assert torch.is_grad_enabled()
