"""Reports and results CI acts on: the versioned JSON and its schema, the memory timeline,
the HTML report (self-contained, light), diff, check and CSV."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from torch import nn

import torch_footprint
from torch_footprint.analysis.memory import replay
from torch_footprint.analysis.timeline import Timeline, downsample, memory_timeline
from torch_footprint.cli import main
from torch_footprint.estimate.workload import trace_step
from torch_footprint.report.html import render_html
from torch_footprint.results.record import envelope, schema
from torch_footprint.settings import Training, Workload

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "src" / "torch_footprint" / "results" / "schema.json").read_text())
GPT2_TINY = str(Path(__file__).parents[1] / "configs" / "gpt2-tiny")
LLAMA_70B = str(Path(__file__).parents[1] / "configs" / "llama3-70b")
ENVELOPE = ("schema_version", "tool", "tool_version", "created", "kind", "fingerprint", "units")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def valid(path: Path) -> dict[str, Any]:
    """The file, checked against the shipped schema with jsonschema itself."""
    doc = json.loads(path.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    return doc


# ---------------------------------------------------------------- versioned JSON


def test_the_shipped_schema_is_a_valid_json_schema_and_footprint_schema_prints_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    code, out, _ = run(capsys, "schema")
    assert code == 0 and json.loads(out) == SCHEMA == schema()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One file of each kind the command line writes, from small workloads."""
    d = tmp_path_factory.mktemp("written")
    runs = {
        "profile": ["profile", "resnet18", "--backward"],
        "profile34": ["profile", "resnet34"],
        "memory": ["memory", GPT2_TINY, "--input-ids", "2,32", "--train", "--optimizer", "adamw"],
        "predict": ["predict", "resnet18", "--gpu", "l4"],
        "fit": ["fit", "resnet18", "--gpu", "l4", "--gpu", "a100-sxm-80gb", "--csv", str(d / "fit.csv")],
        "gpus": ["gpus"],
        "bench": ["bench", GPT2_TINY, "--input-ids", "1,8", "--device", "cpu", "--min-reps", "1", "--min-time", "0"],
        "report": ["report", "resnet18", "--train", "--optimizer", "sgd", "--gpu", "l4", "-o", str(d / "r.html"),
                   "--chrome-trace", str(d / "trace.json")],
        "llm": ["llm", GPT2_TINY, "--prompt", "64", "--output", "16", "--gpu", "l4"],
        "llm_fp8": ["llm", GPT2_TINY, "--prompt", "64", "--output", "16", "--gpu", "l4", "--kv", "fp8"],
        "gpt2_b1": ["profile", GPT2_TINY, "--input-ids", "1,32"],
        "gpt2_b2": ["profile", GPT2_TINY, "--input-ids", "2,32"],
    }
    out = {}
    for name, argv in runs.items():
        out[name] = d / f"{name}.json"
        assert main([*argv, "--json", str(out[name])]) == 0, name
    out["html"] = d / "r.html"
    out["chrome"] = d / "trace.json"
    out["fit_csv"] = d / "fit.csv"
    return out


def test_every_file_we_write_validates_and_carries_the_envelope(written: dict[str, Path]) -> None:
    for name, path in written.items():
        if path.suffix != ".json" or name == "chrome":  # a Chrome trace is Chrome's format, not ours
            continue
        doc = valid(path)
        assert list(doc)[:7] == list(ENVELOPE), name
        assert doc["schema_version"] == 1 and isinstance(doc["schema_version"], int)
        assert doc["tool"] == "torch-footprint" and doc["tool_version"] == torch_footprint.__version__
        created = dt.datetime.fromisoformat(doc["created"])
        assert created.utcoffset() == dt.timedelta(0)
        assert abs((dt.datetime.now(dt.timezone.utc) - created).total_seconds()) < 3600
        assert doc["units"]["bytes"].startswith("B") and doc["units"]["time"].startswith("s")
    assert json.loads(written["memory"].read_text())["kind"] == "memory"
    assert json.loads(written["gpus"].read_text())["kind"] == "gpus"


def test_the_fingerprint_names_what_was_analysed_and_hashes_it(written: dict[str, Path]) -> None:
    fp = json.loads(written["gpt2_b1"].read_text())["fingerprint"]
    assert fp["model"].endswith("gpt2-tiny") and [i["shape"] for i in fp["inputs"]] == [[1, 32]]
    # the documented definition: sha256 of the canonical JSON of model, inputs and settings, 16 hex digits
    text = json.dumps({"model": fp["model"], "inputs": fp["inputs"], "settings": fp["settings"]},
                      sort_keys=True, separators=(",", ":"))
    assert fp["sha256"] == hashlib.sha256(text.encode()).hexdigest()[:16]
    other = json.loads(written["gpt2_b2"].read_text())["fingerprint"]
    assert other["sha256"] != fp["sha256"] and other["settings"] == fp["settings"]


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ENVELOPE}


def test_a_file_of_schema_version_0_is_migrated(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                                tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_strip(json.loads(written["profile"].read_text()))))
    code, out, err = run(capsys, "show", str(old), "--depth", "1")
    assert code == 0, err
    assert "11,689,512" in out  # torchvision's published num_params for resnet18
    code, _, err = run(capsys, "show", str(old), "--html", str(tmp_path / "old.html"))
    assert code == 0, err
    from torch_footprint.results.record import load

    mem = tmp_path / "mem.json"
    mem.write_text(json.dumps(_strip(json.loads(written["memory"].read_text()))))
    doc = load(mem)
    assert doc["kind"] == "memory" and doc["schema_version"] == 1 and doc["created"].startswith("unknown")


@pytest.mark.parametrize("content, message", [
    ({"schema_version": 2, "tool": "torch-footprint", "tool_version": "9.0"}, "schema version 2"),
    ({"schema_version": 1, "tool": "other-tool"}, "not a torch-footprint result"),
    ({"rows": 3}, "not a torch-footprint result"),
    ([1, 2], "not a torch-footprint result"),
    ({"schema_version": "one", "tool": "torch-footprint"}, "not an integer"),
])
def test_files_that_are_not_ours_or_newer_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, content: Any, message: str) -> None:
    f = tmp_path / "x.json"
    f.write_text(json.dumps(content))
    for argv in (["show", str(f)], ["diff", str(f), str(f)], ["check", str(f), "--budget", str(f)]):
        if argv[0] == "check":
            b = tmp_path / "b.toml"
            b.write_text('[budget]\nparams = "<= 1M"\n')
            argv[-1] = str(b)
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_damaged_file_of_ours_names_the_field(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                                tmp_path: Path) -> None:
    doc = json.loads(written["profile"].read_text())
    doc["params"] = "many"
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    code, _, err = run(capsys, "show", str(f))
    assert code == 2 and "at params" in err and "'many'" in err
    (tmp_path / "bin.json").write_bytes(bytes(range(256)))
    code, _, err = run(capsys, "show", str(tmp_path / "bin.json"))
    assert code == 2 and "not a JSON file" in err


# ---------------------------------------------------------------- memory timeline


def test_timeline_of_a_linear_training_step_by_hand() -> None:
    """nn.Linear(4, 3), batch 2, fp32, SGD with momentum. Parameters 12 + 3 floats = 60 B;
    input 2x4 = 32 B; output 2x3 = 24 B (an activation); the loss 4 B; the backward's
    grad_output 4 B (autograd detail); the weight's gradient 48 B, the bias's 12 B; the
    mm of the weight gradient copies its 2x3 operand (24 B of scratch); momentum buffers
    60 B. The peak is at the last momentum buffer: 60 + 60 + 32 + 60 = 212 B."""
    tr, _ = trace_step(Workload(nn.Linear(4, 3), "2,4"), Training(train=True, optimizer="momentum"))
    tl = memory_timeline(tr)
    s = tl.series
    assert tl.index[0] == -1 and len(tl.index) == len(tr.events) + 1
    assert set(s["parameter"]) == {60} and set(s["input"]) == {32}
    assert max(s["activation"]) == 24 and max(s["autograd detail"]) == 4 and max(s["gradient"]) == 60
    assert max(s["optimizer state"]) == 60 and max(s["temporary"]) == 4 + 24
    at, peak = tl.peak
    assert peak == 212 == replay(tr).peak_bytes
    assert tr.events[at].phase == "optimizer"
    k = tl.index.index(at)
    assert {c: v[k] for c, v in s.items() if v[k]} == {"parameter": 60, "optimizer state": 60, "input": 32,
                                                       "gradient": 60}
    assert [p[0] for p in tl.phases] == ["forward", "loss", "backward", "optimizer"]


def test_timeline_agrees_with_the_replayed_peak_and_its_breakdown() -> None:
    tr, _ = trace_step(Workload("resnet18"), Training(train=True, optimizer="adam"))
    tl, peak = memory_timeline(tr), replay(tr)
    at, top = tl.peak
    assert (at, top) == (peak.event, peak.peak_bytes)
    k = tl.index.index(at)
    got = {c: v[k] for c, v in tl.series.items()}
    assert got["parameter"] == peak.breakdown["weights"]
    assert got["gradient"] == peak.breakdown["gradients"]
    assert got["optimizer state"] == peak.breakdown["optimizer state"]


def test_downsampling_keeps_each_runs_highest_and_lowest_points() -> None:
    totals = [0, 5, 1, 7, 2, 9, 3, 1, 4, 2]
    tl = Timeline(index=list(range(-1, 9)), series={"temporary": totals}, phases=[("forward", 0, 8)], events=9)
    # 2 runs of 5 points, [0 5 1 7 2] and [9 3 1 4 2]: their highest (7, 9) and lowest (0, 1), and the last point
    small = downsample(tl, max_points=4)
    assert small.index == [-1, 2, 4, 6, 8] and small.series["temporary"] == [0, 7, 9, 1, 2]
    assert small.peak == tl.peak == (4, 9)
    assert downsample(tl, max_points=20) is tl


# ---------------------------------------------------------------- HTML


class Page(HTMLParser):
    """Every tag, attribute and script of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self._in: str | None = None
        self._attrs: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in, self._attrs = tag, dict(attrs)

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            self.scripts.append((self._attrs, data))
        elif self._in == "style":
            self.styles.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def count(self, tag: str, cls: str | None = None) -> int:
        return sum(1 for t, a in self.tags if t == tag and (cls is None or cls in (a.get("class") or "").split()))


def check_self_contained(html: str) -> tuple[Page, dict[str, Any]]:
    """No network request of any kind; the data embedded once, valid, with no '</' inside."""
    page = Page()
    page.feed(html)
    for tag, attrs in page.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed", "image", "use", "audio", "video", "source")
        for name, value in attrs.items():
            assert name not in ("src", "href", "xlink:href", "srcset", "action", "data", "poster"), (tag, name)
            assert not any(w in (value or "") for w in ("url(", "http:", "https:", "file:")), (tag, name)
    for css in page.styles:
        assert "url(" not in css and "@import" not in css and "@font-face" not in css
    data = [body for attrs, body in page.scripts if attrs.get("type") == "application/json"]
    code = [body for attrs, body in page.scripts if attrs.get("type") != "application/json"]
    assert len(data) == 1 and "</" not in data[0]
    for js in code:
        for word in ("fetch(", "XMLHttpRequest", "import(", "WebSocket", "http:", "https:", ".src"):
            assert word not in js
    return page, json.loads(data[0])


@pytest.fixture(scope="module")
def resnet50_step() -> tuple[Any, str, dict[str, Any]]:
    """resnet50, a training step with AdamW on an A100 (as the README's command)."""
    rep = torch_footprint.make_report("resnet50", train=True, optimizer="adamw", gpu="a100-sxm-80gb")
    doc = envelope("report", rep.to_dict())
    return rep, render_html(doc), doc


def test_resnet50_report_is_self_contained_light_and_draws_every_plot(
        resnet50_step: tuple[Any, str, dict[str, Any]]) -> None:
    rep, html, doc = resnet50_step
    assert len(html.encode()) < 1_000_000
    page, data = check_self_contained(html)
    assert data == json.loads(json.dumps(doc))  # the result, embedded once
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert page.count("svg", "timeline") == 1 and page.count("svg", "roofline") == 1
    # the roofline: one point per (merged) operator
    assert page.count("circle", "pt") - 1 == len(doc["predict"]["roofline"]) == len(rep.prediction.roofline_points())
    assert sum(p["calls"] for p in doc["predict"]["roofline"]) == sum(
        1 for o in rep.prediction.ops if o.kind != "view" and o.flops > 0 and o.bytes > 0)
    # the timeline: one area per category present, every event covered, the peak replay's
    tl = doc["memory"]["timeline"]
    present = [c for c in tl["categories"] if any(tl["series"][c])]
    assert set(present) == {"parameter", "optimizer state", "input", "activation", "gradient", "autograd detail",
                            "temporary"}
    assert page.count("path", "c-activation") == 1 and tl["events"] == len(rep.profile.trace.events)
    assert tl["peak_bytes"] == doc["memory"]["peak"]["peak_bytes"] == replay(rep.profile.trace).peak_bytes
    # module bars at depth 1 (resnet50 has 10 children) and the collapsible tree, one per module
    assert page.count("rect", "bar") >= 4 * 10
    assert page.count("details", "m") == len(rep.profile.trace.modules) == len(doc["modules"])
    assert "25.6 M" in html and "4.09 GMAC" in html  # torchvision's published params and MACs
    assert "prefers-color-scheme:dark" in html


def test_a_saved_report_re_renders_to_the_same_page(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                                   tmp_path: Path) -> None:
    again = tmp_path / "again.html"
    code, _, err = run(capsys, "show", str(written["report"]), "--html", str(again))
    assert code == 0, err
    assert again.read_text() == written["html"].read_text()
    check_self_contained(again.read_text())
    code, _, err = run(capsys, "show", str(written["report"]), "--html", str(again), "--depth", "2")
    assert code == 0, err
    assert "modules at depth 2 (8)" in again.read_text()  # resnet18: two BasicBlocks in each of 4 layers
    mem = tmp_path / "mem.html"
    code, _, err = run(capsys, "show", str(written["memory"]), "--html", str(mem))
    assert code == 0, err
    page, data = check_self_contained(mem.read_text())
    assert data["kind"] == "memory" and page.count("svg", "breakdown") == 1 and page.count("svg", "timeline") == 0
    code, _, err = run(capsys, "show", str(written["gpus"]), "--html", str(mem))
    assert code == 2 and "holds a 'gpus' result" in err
    code, _, err = run(capsys, "show", str(written["report"]))
    assert code == 2 and "draw it with --html" in err


def test_a_profile_renders_as_html_and_in_a_notebook(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / "p.html"
    code, _, err = run(capsys, "show", str(written["profile"]), "--html", str(out))
    assert code == 0, err
    page, data = check_self_contained(out.read_text())
    assert data["kind"] == "report" and page.count("svg", "timeline") == 1 and page.count("svg", "roofline") == 0
    rep = torch_footprint.make_report(nn.Linear(4, 3), "2,4")
    frag = render_html(rep, fragment=True)
    assert frag.startswith('<div class="footprint">') and "<html" not in frag and "<svg" in frag
    assert "body{" not in frag  # a notebook page keeps its own body style
    prof = torch_footprint.profile(nn.Linear(4, 3), "2,4")
    # addmm of 2x4 by 4x3: 24 MACs = 48 FLOPs, plus 2x3 bias adds
    assert repr(prof) == "Profile(model='Linear', params=15, flops=54, macs=24, trace.events=<2>)"
    assert "<svg" in render_html(prof, fragment=True) and "15" in render_html(prof, fragment=True)


def test_the_chrome_trace_has_one_slice_per_operator_and_memory_counters(written: dict[str, Path]) -> None:
    trace = json.loads(written["chrome"].read_text())
    report = json.loads(written["report"].read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    root = next(m for m in report["predict"]["by_module"] if m["module"] == "")
    assert len(slices) == root["ops"]  # every operator but views that cost nothing
    starts = [e["ts"] for e in slices]
    assert starts == sorted(starts) and starts[0] == 0
    end = slices[-1]["ts"] + slices[-1]["dur"]
    assert end == pytest.approx(report["predict"]["time_s"] * 1e6, rel=1e-9)  # back to back: the predicted step
    assert sum(e["dur"] for e in slices) == pytest.approx(end, rel=1e-9)
    assert {e["cat"] for e in slices} == {"forward", "loss", "backward", "optimizer"}
    tl = report["memory"]["timeline"]
    assert set(counters[0]["args"]) == set(tl["categories"])
    assert max(sum(c["args"].values()) for c in counters) == tl["peak_bytes"]


@pytest.mark.slow
def test_a_70b_training_step_report_stays_under_3_mb() -> None:
    """Llama-3.1-70B (80 layers), AdamW, bf16-mixed, 1 x 2048 tokens: about 29,000 operators."""
    rep = torch_footprint.make_report(LLAMA_70B, {"input_ids": "1,2048:int64"}, train=True, optimizer="adamw",
                                      precision="bf16-mixed", gpu="h100-sxm")
    doc = envelope("report", rep.to_dict())
    html = render_html(doc)
    assert len(html.encode()) < 3 * 2**20
    page, data = check_self_contained(html)
    tl = data["memory"]["timeline"]
    assert tl["events"] == len(rep.profile.trace.events) > 20_000
    assert len(tl["index"]) <= 4002 and "of" in tl["method"]
    assert tl["peak_bytes"] == replay(rep.profile.trace).peak_bytes  # the peak survives downsampling
    assert page.count("details", "m") == len(rep.profile.trace.modules)


# ---------------------------------------------------------------- diff, check, CSV


def test_diff_resnet18_against_resnet34(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                        tmp_path: Path) -> None:
    a, b = str(written["profile"]), str(written["profile34"])
    code, _, err = run(capsys, "diff", a, b)
    assert code == 2 and "different workloads" in err and "model: resnet18 vs resnet34" in err
    out_json = tmp_path / "d.json"
    code, out, err = run(capsys, "diff", a, b, "--force", "--json", str(out_json))
    assert code == 0, err
    d = valid(out_json)
    params = next(c for c in d["metrics"] if c["metric"] == "params")
    # torchvision's published parameter counts: 11,689,512 and 21,797,672
    assert (params["before"], params["after"], params["change"]) == (11_689_512, 21_797_672, 10_108_160)
    assert params["percent"] == pytest.approx(86.4720, abs=1e-4) and params["verdict"] == "worse"
    # resnet34 adds blocks to layer1 (3 vs 2), layer2 (4 vs 2), layer3 (6 vs 2), layer4 (3 vs 2)
    layer3 = next(c for c in d["modules"] if c["module"] == "layer3" and c["metric"] == "params")
    # layer3 is a BasicBlock 128 -> 256 with its downsample (919,040) and BasicBlocks 256 -> 256 (1,180,672 each:
    # two 3x3 convolutions of 589,824 and two batch norms of 512)
    assert (layer3["before"], layer3["after"]) == (919_040 + 1_180_672, 919_040 + 5 * 1_180_672)
    assert "+86.47%" in out and "worse" in out


def test_diff_gpt2_at_two_batch_sizes(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                      tmp_path: Path) -> None:
    """Every matrix operator of the forward (projections, attention, MLP, logits) works per
    sample: twice the batch is exactly twice the MACs; the parameters stay."""
    code, out, err = run(capsys, "diff", str(written["gpt2_b1"]), str(written["gpt2_b2"]), "--force",
                         "--json", str(tmp_path / "d.json"))
    assert code == 0, err
    d = {c["metric"]: c for c in json.loads((tmp_path / "d.json").read_text())["metrics"]}
    assert d["macs"]["after"] == 2 * d["macs"]["before"] and d["macs"]["percent"] == 100.0
    assert d["macs"]["verdict"] == d["flops"]["verdict"] == "worse"
    assert d["params"]["verdict"] == "same" and d["params"]["change"] == 0


def test_check_against_absolute_and_relative_caps(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                                  tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    budget.write_text(f'baseline = "{written["profile"]}"\n\n[budget]\nparams = "<= 12M"\nflops = "+2%"\n')
    code, out, err = run(capsys, "check", str(written["profile"]), "--budget", str(budget))
    assert code == 0 and "budget met: 2 caps" in out, err
    out_json = tmp_path / "c.json"
    code, out, err = run(capsys, "check", str(written["profile34"]), "--budget", str(budget), "--json", str(out_json))
    assert code == 1 and "over budget: 2 of 2 caps failed" in out
    res = {r["metric"]: r for r in valid(out_json)["results"]}
    assert res["params"]["value"] == 21_797_672 and res["params"]["limit"] == 12e6 and not res["params"]["passed"]
    assert res["flops"]["limit"] == pytest.approx(1.02 * json.loads(written["profile"].read_text())["forward"]["flops"])
    memory = tmp_path / "m.toml"
    memory.write_text('[budget]\ntrain_peak_memory = "<= 38GiB"\n')
    code, out, _ = run(capsys, "check", str(written["predict"]), "--budget", str(memory))
    assert code == 1 and "MISSING" in out


def test_check_runs_a_model_as_the_workload_says(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    budget.write_text('[workload]\ninput = ["1,4"]\n\n[budget]\nparams = "<= 14"\n"latency_ms on l4" = 0.5\n')
    f = tmp_path / "m.py"
    f.write_text("from torch import nn\ndef build():\n    return nn.Linear(4, 3)\n")
    code, out, err = run(capsys, "check", f"{f}:build", "--budget", str(budget), "--json", str(tmp_path / "c.json"))
    assert code == 1, err  # 15 parameters (12 weights, 3 biases)
    res = {r["metric"]: r for r in valid(tmp_path / "c.json")["results"]}
    assert res["params"]["value"] == 15 and not res["params"]["passed"]
    assert res["latency_ms on l4"]["passed"] and 0 < res["latency_ms on l4"]["value"] < 0.5


@pytest.mark.parametrize("text, message", [
    ('[budget]\nparams = "<= 30M"\nparms = 3\n', "line 3: unknown metric 'parms' (did you mean 'params'?)"),
    ('[budget]\n\nflops = "<= 3 GFLOPs"\n', "line 3: cannot read the cap"),
    ('[budgte]\nparams = 3\n', "line 1: unknown key 'budgte' (did you mean 'budget'?)"),
    ('[budget]\nflops = "+2%"\n', "line 2: 'flops' is relative"),
    ('[workload]\nbatch-size = 3\n[budget]\nparams = 3\n', "line 2: unknown workload setting 'batch-size'"),
    ('[budget]\nparams = \n', "not valid TOML"),
    ('x = 1\n', "line 1: unknown key 'x'"),
])
def test_a_budget_with_a_typo_names_the_line(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                             tmp_path: Path, text: str, message: str) -> None:
    budget = tmp_path / "budget.toml"
    budget.write_text(text)
    code, _, err = run(capsys, "check", str(written["profile"]), "--budget", str(budget))
    assert code == 2 and message in err and "Traceback" not in err, err


def test_profile_csv_has_every_module(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "modules.csv"
    code, _, err = run(capsys, "profile", "resnet18", "--csv", str(out))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 68  # named_modules() of torchvision's resnet18
    root = rows[0]
    assert root["path"] == "" and int(root["params"]) == 11_689_512 and root["out_shapes"] == "1x1000"
    fc = next(r for r in rows if r["path"] == "fc")
    assert int(fc["macs"]) == 512 * 1000 and int(fc["params"]) == 512 * 1000 + 1000


def test_fit_and_bench_sections_draw_their_results(written: dict[str, Path]) -> None:
    """The accelerator comparison and predicted-beside-measured, from saved fit and bench results."""
    report = json.loads(written["report"].read_text())
    fit = _strip(json.loads(written["fit"].read_text()))
    bench = _strip(json.loads(written["bench"].read_text()))
    page, data = check_self_contained(render_html({**report, "fit": fit, "bench": bench}))
    assert data["fit"] == fit
    rows = fit["rows"]
    assert [r["accelerator"] for r in rows] == ["l4", "a100-sxm-80gb"] and fit["pick"] in ("l4", "a100-sxm-80gb")
    assert page.count("svg", "fit") == 1
    # per accelerator: a memory bar, a latency bar, a throughput bar
    assert page.count("rect", "bar") >= 3 * len(rows)
    points = bench["points"]
    bars = len(points) + sum(1 for p in points if p["predicted_s"])
    page, _ = check_self_contained(render_html({**report, "bench": bench}))
    # a bar per measured median, and one per prediction where this machine's row gave one
    assert page.count("rect", "bench") == bars >= len(points) >= 1


def test_every_result_renders_itself_in_a_notebook(written: dict[str, Path]) -> None:
    doc = json.loads(written["memory"].read_text())
    mem = _strip(doc)
    frag = render_html({**doc, "memory": mem}, fragment=True)
    assert frag.startswith('<div class="footprint">') and "at the peak" in frag
    for cat in mem["peak"]["breakdown"]:
        assert f"{cat}: " in frag
    est = torch_footprint.memory(nn.Linear(4, 3), "2,4", train=True, optimizer="momentum")
    # the total is the steady-state step's, at its weight-gradient matmul: weights 60, momentum
    # buffers 60 (from the step before), input 32, the weight's gradient 48, the loss and its gradient
    # 4 + 4, and the copy of the expanded output gradient BLAS needs 24 = 232 (the output, 24, let go
    # once the loss is taken, as a training loop does)
    assert repr(est) == ("MemoryEstimate(model='Linear', total=232, provision=290, peak.peak_bytes=212, "
                         "peak.phase='optimizer', steady.peak_bytes=232)")  # 232 / 0.8 = 290
    assert "212 B" in render_html(est, fragment=True)
    pred = torch_footprint.predict(nn.Linear(4, 3), "l4", "2,4")
    assert repr(pred).startswith("Prediction(accelerator='l4', time_s=") and repr(pred).endswith("ops=2)")
    assert render_html(pred, fragment=True).count('class="pt b-') == len(pred.roofline_points()) == 1


def test_fit_csv_has_a_row_per_accelerator(written: dict[str, Path]) -> None:
    rows = list(csv.DictReader(io.StringIO(written["fit_csv"].read_text())))
    fit = json.loads(written["fit"].read_text())
    assert [r["accelerator"] for r in rows] == ["l4", "a100-sxm-80gb"]
    for r, j in zip(rows, fit["rows"]):
        assert int(r["capacity_bytes"]) == j["capacity_bytes"] and int(r["need_bytes"]) == j["need_bytes"]
    # the L4's 24 GB and the A100's 80 GB, in bytes as the database gives them (GiB-sized)
    assert int(rows[0]["capacity_bytes"]) == 24 * 2**30 and int(rows[1]["capacity_bytes"]) == 80 * 2**30


def test_llm_results_are_enveloped_and_diffed(capsys: pytest.CaptureFixture[str], written: dict[str, Path],
                                              tmp_path: Path) -> None:
    """gpt2-tiny (2 layers, width 128): the KV cache holds a key and a value of 128 numbers per
    layer and token, 2 x 2 x 128 x 4 B = 2 KiB in fp32 and a quarter of it in fp8."""
    a, b = valid(written["llm"]), valid(written["llm_fp8"])
    assert a["kind"] == "llm" and a["fingerprint"]["settings"]["kv_scheme"] == "float32"
    assert b["fingerprint"]["settings"]["kv_scheme"] == "fp8"
    assert a["fingerprint"]["sha256"] != b["fingerprint"]["sha256"]
    code, _, err = run(capsys, "diff", str(written["llm"]), str(written["llm_fp8"]))
    assert code == 2 and "kv_scheme: float32 vs fp8" in err
    code, _, err = run(capsys, "diff", str(written["llm"]), str(written["llm_fp8"]), "--force", "--json",
                       str(tmp_path / "d.json"))
    assert code == 0, err
    d = {c["metric"]: c for c in json.loads((tmp_path / "d.json").read_text())["metrics"]}
    kv = d["kv_bytes_per_token"]
    assert (kv["before"], kv["after"], kv["percent"], kv["verdict"]) == (2 * 2 * 128 * 4, 2 * 2 * 128, -75.0, "better")
    assert d["weights_bytes"]["verdict"] == "same"
