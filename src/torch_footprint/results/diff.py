"""``footprint diff``: what changed between two saved results, by metric and by module."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import FootprintError
from .metrics import Metric, metrics_of, module_metrics


@dataclass
class Change:
    metric: str
    unit: str
    before: float | None
    after: float | None
    module: str | None = None
    better: str = "lower"

    @property
    def change(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before

    @property
    def percent(self) -> float | None:
        c = self.change
        return None if c is None or not self.before else 100.0 * c / self.before

    @property
    def verdict(self) -> str:
        """better, worse or same (by the metric's direction); new or gone when one side lacks it."""
        if self.before is None:
            return "new"
        if self.after is None:
            return "gone"
        if self.after == self.before:
            return "same"
        lower = self.after < self.before
        return "better" if lower == (self.better == "lower") else "worse"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change, "percent": self.percent, "verdict": self.verdict}


@dataclass
class Diff:
    """What ``footprint diff`` found: each metric's change, and each module's that changed."""

    kind = "diff"  # the envelope's kind of its saved file

    before: dict[str, Any]  # the fingerprints of both files
    after: dict[str, Any]
    metrics: list[Change]
    modules: list[Change]
    notes: list[str]

    def __repr__(self) -> str:
        return (f"Diff(before={self.before.get('model')!r}, after={self.after.get('model')!r}, "
                f"metrics=<{len(self.metrics)} changes>, modules=<{len(self.modules)} changes>)")

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "metrics": [c.to_dict() for c in self.metrics],
                "modules": [c.to_dict() for c in self.modules], "notes": self.notes,
                "model": self.after.get("model"), "inputs": self.after.get("inputs"),
                "settings": self.after.get("settings")}


def _pairs(a: dict[str, Metric], b: dict[str, Metric], module: str | None = None) -> list[Change]:
    out = []
    for name in [*a, *(k for k in b if k not in a)]:
        ma, mb = a.get(name), b.get(name)
        m = ma or mb
        assert m is not None
        if m.alias:
            continue
        out.append(Change(name, m.unit, ma.value if ma else None, mb.value if mb else None, module, m.better))
    return out


def what_differs(fa: dict[str, Any], fb: dict[str, Any]) -> list[str]:
    """How two fingerprints differ: model, inputs, and each setting by name."""
    out = []
    for key in ("model", "inputs"):
        if fa.get(key) != fb.get(key):
            out.append(f"{key}: {fa.get(key)} vs {fb.get(key)}")
    sa, sb = fa.get("settings") or {}, fb.get("settings") or {}
    for key in sorted(set(sa) | set(sb)):
        if sa.get(key) != sb.get(key):
            out.append(f"{key}: {sa.get(key)} vs {sb.get(key)}")
    return out


def diff(a: dict[str, Any], b: dict[str, Any], *, force: bool = False, depth: int | None = 2,
         names: tuple[str, str] = ("before", "after")) -> Diff:
    """Compare result ``b`` with result ``a`` (both read by ``report.schema.load``). Results of
    different models, inputs or settings are refused unless ``force``."""
    fa, fb = a["fingerprint"], b["fingerprint"]
    notes = []
    if fa["sha256"] != fb["sha256"]:
        differs = what_differs(fa, fb)
        if not force:
            raise FootprintError(f"{names[0]} and {names[1]} are of different workloads ("
                                 + "; ".join(differs[:4]) + "): add --force to compare them anyway")
        notes.append("different workloads, compared with --force: " + "; ".join(differs))
    metrics = _pairs(metrics_of(a), metrics_of(b))
    if not metrics:
        raise FootprintError(f"{names[0]} ({a['kind']}) and {names[1]} ({b['kind']}) share no metric to compare")
    ma, mb = module_metrics(a, depth), module_metrics(b, depth)
    modules = []
    for path in [*ma, *(p for p in mb if p not in ma)]:
        modules += [c for c in _pairs(ma.get(path, {}), mb.get(path, {}), module=path) if c.verdict != "same"]
    return Diff(before=fa, after=fb, metrics=metrics, modules=modules, notes=notes)
