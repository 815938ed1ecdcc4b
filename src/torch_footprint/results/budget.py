"""``footprint check``: a result against a budget file.

A budget is a TOML file::

    baseline = "main.json"        # optional: the result that relative caps are taken from

    [workload]                    # optional: how a MODEL is run (a result FILE is read as it is)
    input = ["1,3,224,224"]       # or input-ids = "8,1024"
    batch = 32
    train = true
    optimizer = "adamw"
    precision = "bf16-mixed"

    [budget]
    params = "<= 30M"             # absolute caps: "<= X", "< X", or X alone (at most X)
    train_peak_memory = "<= 38GiB"
    "latency_ms on l4" = 12       # a number: at most that, in the metric's unit
    "throughput on l4" = ">= 500" # higher-is-better metrics take ">="
    flops = "+2%"                 # relative to the baseline: at most 2% above it

Sizes take binary units (``38GiB``, ``512MiB``), counts decimal ones (``30M``, ``4.1G``).
Any mistake (an unknown metric, a malformed rule, a key out of place) is reported with its
line number.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FootprintError
from ..quantities import parse_bytes
from .metrics import Metric

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# every metric name a budget may cap; "... on ID" and "... at batch N" take any id or batch
METRICS = ("params", "trainable_params", "param_bytes", "flops", "macs", "backward_flops", "peak_memory",
           "provision_memory", "train_peak_memory", "inference_peak_memory", "weights_bytes", "kv_bytes_per_token")
PATTERNS = (r"latency_ms on \S+", r"largest_batch on \S+", r"throughput on \S+",
            r"measured_latency_ms at batch \d+", r"measured_throughput at batch \d+", r"ttft_ms on \S+",
            r"tpot_ms on \S+", r"tokens_per_s on \S+", r"max_context on \S+")
# [workload]'s keys: a report's settings as the command line spells them (settings.py defines them)
WORKLOAD_FIELDS = ("batch", "train", "optimizer", "precision", "checkpointing", "grads", "weights", "utilisation")
WORKLOAD_KEYS = ("input", "input-ids", *(k.replace("_", "-") for k in WORKLOAD_FIELDS), "dtype")
_COUNT = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


@dataclass
class Rule:
    metric: str
    op: str  # "<=", "<", ">=", ">"
    limit: float | None  # absolute (None: relative)
    relative: float | None = None  # +0.02 for "+2%"
    line: int = 0
    text: str = ""


@dataclass
class Budget:
    rules: list[Rule]
    workload: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    path: str = ""

    @property
    def accelerators(self) -> list[str]:
        """Accelerators named by the rules (``latency_ms on l4``...), in order."""
        out: list[str] = []
        for r in self.rules:
            if " on " in r.metric:
                acc = r.metric.split(" on ", 1)[1]
                if acc not in out:
                    out.append(acc)
        return out


def _line_of(lines: list[str], key: str, start: int = 0) -> int:
    pat = re.compile(r'^\s*(["\']?)' + re.escape(key) + r'\1\s*=')
    for i, text in enumerate(lines[start:], start + 1):
        if pat.match(text):
            return i
    return 0


def _known(metric: str) -> bool:
    return metric in METRICS or any(re.fullmatch(p, metric) for p in PATTERNS)


def _number(text: str, metric: str) -> float:
    """A limit in the metric's unit: sizes for *memory/*_bytes, counts for params and FLOPs."""
    t = text.strip()
    if metric.endswith("memory") or metric.endswith("_bytes"):
        return float(parse_bytes(t))
    m = re.fullmatch(r"([0-9.eE+-]+)\s*([kKmMgGtT]?)", t)
    if not m:
        raise ValueError(t)
    return float(m[1]) * _COUNT[m[2].lower()]


def parse_budget(path: str | Path) -> Budget:
    """Read a budget file; every mistake is one line naming the file and line."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise FootprintError(f"budget file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FootprintError(f"cannot read budget file '{path}': {e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise FootprintError(f"{path}: not valid TOML: {e}") from None
    lines = text.splitlines()

    def fail(line: int, msg: str) -> FootprintError:
        return FootprintError(f"{path}, line {line}: {msg}" if line else f"{path}: {msg}")

    for key in data:
        if key not in ("budget", "workload", "baseline"):
            near = difflib.get_close_matches(key, ["budget", "workload", "baseline"], 1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            line = _line_of(lines, key) or next((i for i, t in enumerate(lines, 1) if f"[{key}]" in t), 0)
            raise fail(line, f"unknown key '{key}'{hint}: a budget has [budget], [workload] and baseline")
    rules_in = data.get("budget")
    if not isinstance(rules_in, dict) or not rules_in:
        raise fail(0, "no [budget] table with at least one cap, e.g. params = \"<= 30M\"")
    start = next((i for i, t in enumerate(lines) if t.strip().startswith("[budget]")), 0)
    baseline = data.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise fail(_line_of(lines, "baseline"), "baseline is the path of a saved result, a string")
    rules = []
    for metric, value in rules_in.items():
        line = _line_of(lines, metric, start)
        if not _known(metric):
            near = difflib.get_close_matches(metric, METRICS, 1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise fail(line, f"unknown metric '{metric}'{hint}; metrics are {', '.join(METRICS)}, "
                             "'latency_ms on ID', 'largest_batch on ID', 'throughput on ID', "
                             "'measured_latency_ms at batch N', 'measured_throughput at batch N', "
                             "'ttft_ms on ID', 'tpot_ms on ID', 'tokens_per_s on ID' and 'max_context on ID'")
        rules.append(_rule(metric, value, line, fail))
        if rules[-1].relative is not None and baseline is None:
            raise fail(line, f"'{metric}' is relative ({value}) but the budget names no baseline = \"FILE.json\"")
    workload = data.get("workload", {})
    if not isinstance(workload, dict):
        raise fail(_line_of(lines, "workload"), "workload is a table: [workload]")
    for key in workload:
        if key not in WORKLOAD_KEYS:
            near = difflib.get_close_matches(key, WORKLOAD_KEYS, 1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise fail(_line_of(lines, key), f"unknown workload setting '{key}'{hint}; settings are "
                                             + ", ".join(WORKLOAD_KEYS))
    if baseline is not None and not Path(baseline).is_absolute():
        baseline = str(p.parent / baseline)
    return Budget(rules=rules, workload=workload, baseline=baseline, path=str(path))


def _rule(metric: str, value: Any, line: int, fail: Any) -> Rule:
    higher = metric.startswith(("throughput", "largest_batch", "measured_throughput", "tokens_per_s", "max_context"))
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise fail(line, f"'{metric}': a cap is a number or a string such as \"<= 30M\" or \"+2%\"")
    if isinstance(value, (int, float)):
        return Rule(metric, ">=" if higher else "<=", float(value), line=line, text=str(value))
    text = value.strip()
    rel = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)\s*%", text)
    if rel:
        return Rule(metric, ">=" if higher else "<=", None, float(rel[1]) / 100, line=line, text=text)
    m = re.fullmatch(r"(<=|<|>=|>)?\s*(.+)", text)
    op = (m[1] if m and m[1] else (">=" if higher else "<="))
    try:
        limit = _number(m[2] if m else text, metric)
    except (ValueError, FootprintError):
        raise fail(line, f"cannot read the cap '{value}' of '{metric}': use e.g. \"<= 30M\", \"<= 38GiB\", "
                         "12 or \"+2%\"") from None
    return Rule(metric, op, limit, line=line, text=text)


@dataclass
class Outcome:
    rule: Rule
    value: float | None
    limit: float | None
    unit: str
    passed: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.rule.metric, "rule": self.rule.text, "value": self.value, "limit": self.limit,
                "unit": self.unit, "passed": self.passed, "reason": self.reason, "line": self.rule.line}


_OPS = {"<=": lambda v, lim: v <= lim, "<": lambda v, lim: v < lim, ">=": lambda v, lim: v >= lim,
        ">": lambda v, lim: v > lim}


def check(budget: Budget, metrics: dict[str, Metric], baseline: dict[str, Metric] | None = None) -> list[Outcome]:
    """Each rule against the result's metrics (and the baseline's, for relative caps). A
    metric the result does not hold is a failure that says so."""
    out = []
    for r in budget.rules:
        m = metrics.get(r.metric)
        if m is None:
            out.append(Outcome(r, None, r.limit, "", False, "the result holds no such figure (see the workload)"))
            continue
        limit = r.limit
        if r.relative is not None:
            base = (baseline or {}).get(r.metric)
            if base is None:
                out.append(Outcome(r, m.value, None, m.unit, False, "the baseline holds no such figure"))
                continue
            limit = base.value * (1 + r.relative)
        assert limit is not None
        ok = _OPS[r.op](m.value, limit)
        out.append(Outcome(r, m.value, limit, m.unit, ok))
    return out


@dataclass
class CheckResult:
    """What ``footprint check`` found: every cap's outcome, for the result of ``subject``."""

    kind = "check"  # the envelope's kind of its saved file

    outcomes: list[Outcome]
    subject: dict[str, Any]  # the checked result's fingerprint
    budget: str
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    def __repr__(self) -> str:
        failed = sum(1 for o in self.outcomes if not o.passed)
        return (f"CheckResult(budget={self.budget!r}, passed={self.passed}, "
                f"outcomes=<{len(self.outcomes)} caps, {failed} failed>)")

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "budget": self.budget, "results": [o.to_dict() for o in self.outcomes],
                "notes": self.notes,
                "model": self.subject.get("model"), "inputs": self.subject.get("inputs"),
                "settings": self.subject.get("settings")}


def check_target(target: str, budget: str, *, trust_remote_code: bool, report: Any, predict: Any) -> CheckResult:
    """``target`` (a saved result, or a model run as the budget's [workload] says, through the
    ``report`` and ``predict`` verbs given) against the caps of budget file ``budget``."""
    import os

    from ..sources.inputs import parse_input_ids, parse_shape
    from .diff import what_differs
    from .metrics import metrics_of
    from .record import envelope, load

    b = parse_budget(budget)
    base = load(b.baseline) if b.baseline else None
    baseline = metrics_of(base) if base else None

    def result(doc: dict[str, Any], metrics: dict[str, Any]) -> CheckResult:
        notes = []
        if base is not None and base["fingerprint"]["sha256"] != doc["fingerprint"]["sha256"]:
            differs = what_differs(base["fingerprint"], doc["fingerprint"])
            notes.append("the baseline is of a different workload (" + "; ".join(differs[:4]) + ")")
        return CheckResult(check(b, metrics, baseline), doc["fingerprint"], b.path, notes)

    if target.endswith(".json") or os.path.isfile(target):
        doc = load(target)
        return result(doc, metrics_of(doc))
    w = dict(b.workload)
    shapes = w.pop("input", [])
    specs = [parse_shape(str(x)) for x in ([shapes] if isinstance(shapes, str) else shapes)]
    if w.get("input-ids"):
        specs.append(parse_input_ids(str(w.pop("input-ids"))))
    given = {("precision" if k == "dtype" else k.replace("-", "_")): v for k, v in w.items()}
    accs = b.accelerators
    rep = report(target, specs or None, gpu=tuple(accs[:1]), trust_remote_code=trust_remote_code, **given)
    doc = envelope("report", rep.to_dict())
    metrics = metrics_of(doc)
    for acc in accs:  # under the budget's own spelling of each accelerator (an id or a name)
        (latency,) = metrics_of({"kind": "predict", **predict(rep.profile, acc).to_dict()}).values()
        metrics[f"latency_ms on {acc}"] = latency
    return result(doc, metrics)
