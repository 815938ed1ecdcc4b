"""The predicted timeline as a Chrome trace (open it in https://ui.perfetto.dev or
chrome://tracing): one slice per operator, in trace (module) order, each as long as its
roofline time on the accelerator, with its module, FLOPs, bytes and bound; the live bytes
by category as counter tracks, one sample at each operator's start."""

from __future__ import annotations

from typing import Any


def chrome_trace(overview: Any) -> dict[str, Any]:
    """The Chrome trace of an :class:`~torch_footprint.results.overview.Overview` with a prediction:
    its operators on the accelerator, and its timeline (not downsampled) as counters."""
    prediction, timeline = overview.prediction, overview.timeline
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": f"predicted on {prediction.accelerator.name}"}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "operators"}},
    ]
    starts = prediction.starts()
    for o, t, dt in zip(prediction.ops, starts, prediction.effective):
        if o.kind == "view" and not o.overhead_s:  # no kernel, no dispatch: nothing to draw
            continue
        # each slice is the time the operator adds to the run (on a GPU: past the host's and
        # the device's clocks), so the slices lie back to back over the predicted time
        events.append({"ph": "X", "pid": 1, "tid": 1, "name": o.op, "cat": o.phase, "ts": t * 1e6,
                       "dur": dt * 1e6, "args": {"module": o.module or "<root>", "flops": o.flops,
                                                 "bytes": o.bytes, "bound": o.bound, "dtype": o.dtype,
                                                 "own_time_us": o.time_s * 1e6}})
    at = {i: k for k, i in enumerate(timeline.index)}
    for o, t in zip(prediction.ops, starts):
        k = at.get(o.index)
        if k is None:
            continue
        events.append({"ph": "C", "pid": 1, "name": "live bytes", "ts": t * 1e6,
                       "args": {c: s[k] for c, s in timeline.series.items()}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"accelerator": prediction.accelerator.id, "predicted_s": prediction.time_s}}
