"""The record behind ``footprint report``: every section of one workload, from one trace.

One training step (or inference) is traced once; the profile (parameters, FLOPs by module
and operator), the memory estimate and its timeline by category, and, on an accelerator,
the roofline prediction are all read from that trace; ``fit`` (every accelerator) and
``bench`` (a real measurement) are added when asked. :meth:`Overview.to_dict` is what
``--json`` saves and what the HTML renderer draws, so a saved report re-renders without
the model (``footprint show report.json --html``). A new section (``llm``, say) is one
more key of that dict and one more renderer in ``report/html.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis import Profile
from ..analysis.summary import ancestors, by_module
from ..analysis.timeline import Timeline, downsample, memory_timeline


@dataclass
class Overview:
    """Every section of one workload's report; ``None`` where a section was not asked for."""

    kind = "report"  # the envelope's kind of its saved file

    profile: Profile
    memory: Any  # estimate.memory.MemoryEstimate
    timeline: Timeline
    accelerator: Any = None  # hardware.Accelerator
    prediction: Any = None  # estimate.roofline.Prediction on ``accelerator``
    fit: Any = None  # estimate.recommend.FitResult
    bench: Any = None  # measure.runner.BenchResult
    notes: list[str] = field(default_factory=list)

    def modules(self) -> list[dict[str, Any]]:
        """Every module (pre-order): parameters, forward and backward FLOPs, predicted time on the
        accelerator (all phases), and the activations saved for the backward made inside it."""
        tr = self.profile.trace
        fwd = by_module(tr, None, ("forward",))
        bwd = {r.path: r.flops for r in by_module(tr, None, ("backward",))} if tr.settings.get("backward") else {}
        times = {m.module: m.time_s for m in self.prediction.by_module(None)} if self.prediction else {}
        acts: dict[str, int] = {}
        for mod, nbytes in self.memory.peak.activations_by_module.items():
            for a in ancestors(mod):
                acts[a] = acts.get(a, 0) + nbytes
        return [{"path": r.path, "type": r.type, "depth": r.depth, "calls": r.calls, "out_shapes": r.out_shapes[:1],
                 "params": r.params, "flops": r.flops, "macs": r.macs, "backward_flops": bwd.get(r.path, 0),
                 "time_s": times.get(r.path, 0.0), "activation_bytes": acts.get(r.path, 0)} for r in fwd]

    def to_dict(self) -> dict[str, Any]:
        tr = self.profile.trace
        settings = dict(self.memory.settings)
        settings.pop("model", None)
        settings.pop("inputs", None)
        acc = self.accelerator
        d: dict[str, Any] = {"model": tr.model, "inputs": tr.inputs, "settings": settings, "notes": self.notes,
                             "profile": self.profile.to_dict(depth=1),
                             "memory": {**self.memory.to_dict(), "timeline": downsample(self.timeline).to_dict()},
                             "modules": self.modules(),
                             "accelerator": {**acc.to_dict(), "memory_bytes": acc.memory_bytes} if acc else None}
        if self.prediction is not None:
            d["predict"] = {**self.prediction.to_dict(), "roofline": self.prediction.roofline_points()}
        if self.fit is not None:
            d["fit"] = self.fit.to_dict()
        if self.bench is not None:
            d["bench"] = self.bench.to_dict()
        return d

    def __repr__(self) -> str:
        sections = [k for k in ("prediction", "fit", "bench") if getattr(self, k) is not None]
        return (f"Overview(model={self.profile.trace.model!r}, profile.params={self.profile.params}, "
                f"memory.total={self.memory.total}, <{', '.join(['profile', 'memory', *sections])}>)")



def overview_of(profile: Profile, memory: Any, accelerator: Any = None, **sections: Any) -> Overview:
    """A report from a traced profile, its memory estimate and the other sections (the same
    trace): the timeline replayed."""
    return Overview(profile=profile, memory=memory, timeline=memory_timeline(profile.trace), accelerator=accelerator,
                    **sections)
