"""Named figures of a saved result, for ``diff`` and ``check``: one place that says where each
metric lives in each kind of file, its unit, and which way is better.

Metrics (those a file holds; a report holds most):

* ``params``, ``trainable_params`` (parameters), ``param_bytes`` (B);
* ``flops``, ``macs`` (forward), ``backward_flops`` (FLOP, MAC);
* ``peak_memory``, ``provision_memory`` (B), and the peak again as ``train_peak_memory``
  or ``inference_peak_memory`` by what was traced, so a budget says which it means;
* ``latency_ms on ID`` (predicted on accelerator ID: predict, report, fit),
  ``largest_batch on ID`` and ``throughput on ID`` (fit, samples/s);
* ``measured_latency_ms at batch N`` and ``measured_throughput at batch N`` (bench);
* ``weights_bytes``, ``kv_bytes_per_token``, and per accelerator ``ttft_ms on ID``,
  ``tpot_ms on ID``, ``tokens_per_s on ID``, ``max_context on ID`` (llm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    value: float
    unit: str  # "params", "FLOP", "MAC", "B", "ms", "samples/s", "samples"
    better: str = "lower"  # or "higher"
    alias: bool = False  # the same figure under a second name (left out of diffs)


def _profile(p: dict[str, Any], out: dict[str, Metric]) -> None:
    out["params"] = Metric(p["params"], "params")
    out["trainable_params"] = Metric(p["trainable_params"], "params")
    out["param_bytes"] = Metric(p["param_bytes"], "B")
    out["flops"] = Metric(p["forward"]["flops"], "FLOP")
    out["macs"] = Metric(p["forward"]["macs"], "MAC")
    if "backward" in p:
        out["backward_flops"] = Metric(p["backward"]["flops"], "FLOP")


def _memory(m: dict[str, Any], out: dict[str, Metric]) -> None:
    peak = m["peak"]["peak_bytes"]
    out["peak_memory"] = Metric(peak, "B")
    out["provision_memory"] = Metric(m["provision_bytes"], "B")
    training = bool((m.get("settings") or {}).get("backward"))
    out["train_peak_memory" if training else "inference_peak_memory"] = Metric(peak, "B", alias=True)


def _predict(p: dict[str, Any], out: dict[str, Metric]) -> None:
    out[f"latency_ms on {p['accelerator']}"] = Metric(p["time_s"] * 1e3, "ms")


def _fit(f: dict[str, Any], out: dict[str, Metric]) -> None:
    for r in f["rows"]:
        acc = r["accelerator"]
        if r["latency_s"] is not None:
            out.setdefault(f"latency_ms on {acc}", Metric(r["latency_s"] * 1e3, "ms"))
        if r["largest_batch"] is not None:
            out[f"largest_batch on {acc}"] = Metric(r["largest_batch"], "samples", "higher")
        if r["throughput_samples_per_s"] is not None:
            out[f"throughput on {acc}"] = Metric(r["throughput_samples_per_s"], "samples/s", "higher")


def _bench(b: dict[str, Any], out: dict[str, Metric]) -> None:
    for p in b["points"]:
        out[f"measured_latency_ms at batch {p['batch']}"] = Metric(p["stats"]["median"] * 1e3, "ms")
        out[f"measured_throughput at batch {p['batch']}"] = Metric(p["samples_per_second"], "samples/s", "higher")


def _llm(d: dict[str, Any], out: dict[str, Metric]) -> None:
    out["weights_bytes"] = Metric(d["weights_bytes"], "B")
    out["kv_bytes_per_token"] = Metric(d["kv_bytes_per_token"], "B")
    for r in d["accelerators"]:
        acc = r["accelerator"]
        if r["ttft_s"] is not None:
            out[f"ttft_ms on {acc}"] = Metric(r["ttft_s"] * 1e3, "ms")
        if r["tpot_s"] is not None:
            out[f"tpot_ms on {acc}"] = Metric(r["tpot_s"] * 1e3, "ms")
        if r.get("tokens_per_s") is not None:
            out[f"tokens_per_s on {acc}"] = Metric(r["tokens_per_s"], "tokens/s", "higher")
        if r["max_context"] is not None:
            out[f"max_context on {acc}"] = Metric(r["max_context"], "tokens", "higher")


_READERS = {"llm": _llm, "profile": _profile, "memory": _memory, "predict": _predict, "fit": _fit, "bench": _bench}


def metrics_of(doc: dict[str, Any]) -> dict[str, Metric]:
    """Every named metric a result holds (a file of one kind, or a report's sections)."""
    out: dict[str, Metric] = {}
    kind = doc.get("kind")
    if kind in _READERS:
        _READERS[kind](doc, out)
    elif kind == "report":
        for key, read in _READERS.items():
            if doc.get(key):
                read(doc[key], out)
    return out


def module_metrics(doc: dict[str, Any], depth: int | None = None) -> dict[str, dict[str, Metric]]:
    """Per module (path, down to ``depth``): parameters, forward FLOPs, and where a report has
    them, predicted time (ms) and activation bytes."""
    rows = doc.get("modules") or (doc.get("by_module") if doc.get("kind") == "profile" else None) or []
    out: dict[str, dict[str, Metric]] = {}
    for r in rows:
        if depth is not None and r["depth"] > depth:
            continue
        m = {"params": Metric(r["params"], "params"), "flops": Metric(r["flops"], "FLOP")}
        if r.get("time_s"):
            m["latency_ms"] = Metric(r["time_s"] * 1e3, "ms")
        if r.get("activation_bytes"):
            m["activation_bytes"] = Metric(r["activation_bytes"], "B")
        out[r["path"]] = m
    return out
