"""What a watched timeline says, in pure functions: its summary (peaks, means, busy share,
energy), the observed peak, that peak beside a prediction with the difference named, and the
findings in words."""

from __future__ import annotations

from typing import Any

from ..errors import FootprintError
from .sampling import Sample

FULL_MEMORY = 0.8  # share of device memory above which "memory full, utilisation low" is judged
LOW_UTILISATION = 0.5


# --- what the timeline says (pure functions) --------------------------------------------------

def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(samples: list[Sample]) -> dict[str, Any]:
    """Peaks, means and energy by device and by process over the samples."""
    devices: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(k for s in samples for k in s.devices):
        rows = [(s.t, s.devices[key]) for s in samples if key in s.devices]
        first = rows[0][1]

        def vals(name: str, rows: list[tuple[float, dict[str, Any]]] = rows) -> list[Any]:
            return [r[name] for _, r in rows if r.get(name) is not None]

        used = vals("memory_used")
        util = vals("utilisation")
        energy = vals("energy_j")
        power = vals("power_w")
        d: dict[str, Any] = {"kind": first.get("kind"), "name": first.get("name"), "cpus": first.get("cpus"),
                             "memory_total": first.get("memory_total"),
                             "memory_used_first": used[0] if used else None,
                             "memory_used_peak": max(used) if used else None,
                             "utilisation_mean": _mean(util), "idle_share": 1 - _mean(util) if util else None,
                             "power_w_mean": _mean(power), "power_w_peak": max(power) if power else None,
                             "energy_j": energy[-1] - energy[0] if len(energy) > 1 else None}
        if used:
            i = used.index(max(used))
            d["memory_used_peak_t"] = [t for t, r in rows if r.get("memory_used") is not None][i]
        clocks = vals("sm_clock_mhz")
        if clocks:
            d["sm_clock_mhz_mean"] = _mean(clocks)
        devices[key] = d
    processes: dict[int, dict[str, Any]] = {}
    for s in samples:
        for p in s.processes:
            row = processes.setdefault(p["pid"], {"pid": p["pid"], "name": p.get("name"), "rss_peak": 0,
                                                  "rss_peak_t": s.t, "cpu": [], "threads_peak": 0,
                                                  "first_t": s.t, "last_t": s.t, "device_memory_peak": {}})
            row["last_t"] = s.t
            if p.get("rss", 0) > row["rss_peak"]:
                row["rss_peak"], row["rss_peak_t"] = p["rss"], s.t
            if p.get("cpu") is not None:
                row["cpu"].append(p["cpu"])
            row["threads_peak"] = max(row["threads_peak"], p.get("threads", 0))
            for key, dev in s.devices.items():
                used = dev.get("processes", {}).get(p["pid"], dev.get("processes", {}).get(str(p["pid"])))
                if used is not None:
                    row["device_memory_peak"][key] = max(row["device_memory_peak"].get(key, 0), used)
    for row in processes.values():
        row["cpu_mean"] = _mean(row.pop("cpu"))
    tree = [sum(p.get("rss", 0) for p in s.processes) for s in samples]
    cpu_tree = [sum(p["cpu"] for p in s.processes if p.get("cpu") is not None) for s in samples[1:]]
    return {"samples": len(samples), "duration_s": samples[-1].t - samples[0].t if samples else 0.0,
            "devices": devices, "processes": list(processes.values()),
            "rss_tree_peak": max(tree) if tree else None,
            "cpu_tree_mean": _mean(cpu_tree)}


def observed_peak(samples: list[Sample], baseline_rss: int | None = None) -> dict[str, Any]:
    """The observed side of the comparison: on a GPU the job's device memory at its peak
    (NVML's per-process figures summed over the job's processes, on the device where it
    peaked; the device's used memory above the first sample where NVML lists none of the
    job's pids, as in a container's own pid namespace); on a CPU the resident memory of the
    job's largest process at its peak, with the bare-interpreter baseline."""
    per_gpu: dict[str, list[tuple[float, int, dict[str, Any] | None]]] = {}
    for s in samples:
        pids = {p["pid"] for p in s.processes}
        for key, dev in s.devices.items():
            if dev.get("kind") != "gpu":
                continue
            procs = dev.get("processes", {})
            mine = [b for pid, b in procs.items() if int(pid) in pids]
            if mine:
                per_gpu.setdefault(key, []).append((s.t, sum(mine), (s.torch or {}).get(key)))
    if per_gpu:
        key = max(per_gpu, key=lambda k: max(b for _, b, _ in per_gpu[k]))
        t, peak, torch_at = max(per_gpu[key], key=lambda r: r[1])
        out: dict[str, Any] = {"kind": "cuda", "device": key, "peak_bytes": peak, "t": t,
                               "source": "NVML: device memory of the job's processes"}
        if torch_at:
            out["torch_reserved_bytes"], out["torch_allocated_bytes"] = torch_at["reserved"], torch_at["allocated"]
        return out
    gpus = {k for s in samples for k, d in s.devices.items() if d.get("kind") == "gpu"}
    if gpus:  # NVML lists none of the job's pids: the device's growth over the run
        best: dict[str, Any] | None = None
        for key in gpus:
            rows = [(s.t, s.devices[key]["memory_used"]) for s in samples
                    if key in s.devices and s.devices[key].get("memory_used") is not None]
            if not rows:
                continue
            t, used = max(rows, key=lambda r: r[1])
            grown = used - rows[0][1]
            if best is None or grown > best["peak_bytes"]:
                at = next((s.torch or {}).get(key) for s in samples if s.t == t)
                best = {"kind": "cuda", "device": key, "peak_bytes": grown, "t": t,
                        "source": "NVML: the device's used memory above its first sample (NVML lists none of the "
                                  "job's pids: another pid namespace)"}
                if at:
                    best["torch_reserved_bytes"], best["torch_allocated_bytes"] = at["reserved"], at["allocated"]
        if best is not None:
            return best
    peak_row: tuple[float, int, int] | None = None
    for s in samples:
        for p in s.processes:
            if peak_row is None or p.get("rss", 0) > peak_row[1]:
                peak_row = (s.t, p.get("rss", 0), p["pid"])
    out = {"kind": "cpu", "peak_bytes": peak_row[1] if peak_row else 0, "t": peak_row[0] if peak_row else 0.0,
           "pid": peak_row[2] if peak_row else None, "source": "RSS of the job's largest process"}
    if baseline_rss is not None:
        out["baseline_bytes"] = baseline_rss
    return out


def check_predicted(predicted: dict[str, Any]) -> None:
    """A prediction as :func:`compare_peak` reads it, or bad input (exit 2)."""
    if not isinstance(predicted, dict) or not isinstance(predicted.get("peak_bytes"), int):
        raise FootprintError("a prediction needs 'peak_bytes' (a whole number of bytes)")
    overheads = predicted.get("overheads", {})
    if not isinstance(overheads, dict) or not all(isinstance(v, int) for v in overheads.values()):
        raise FootprintError("a prediction's 'overheads' are {name: bytes} with whole numbers of bytes")
    timeline = predicted.get("timeline", [])
    if not isinstance(timeline, list) or not all(
            isinstance(r, (list, tuple)) and len(r) == 2 and 0 <= r[0] <= 1 for r in timeline):
        raise FootprintError("a prediction's 'timeline' is a list of [t_fraction (0 to 1), bytes] pairs")


OUTSIDE = "memory outside PyTorch"
RESERVE = "allocator reserve"
EXTRA = "what the job allocated that the model does not"


def compare_peak(observed: dict[str, Any], predicted: dict[str, Any]) -> dict[str, Any]:
    """The observed peak beside the predicted one, the difference split where the figures allow.

    ``observed``: {"kind": "cuda" | "cpu", "peak_bytes", and where known
    "torch_reserved_bytes", "torch_allocated_bytes" (the job's allocator at that moment, on a
    GPU) or "baseline_bytes" (a bare interpreter with torch imported, on a CPU)}.
    ``predicted``: {"peak_bytes" (the step's tensors), "overheads": {name: bytes}}.

    difference = observed - (predicted peak + overheads), split into parts that add up to it:

    * on a GPU: memory outside PyTorch (the process's device memory minus torch's reserve:
      CUDA context, libraries' workspaces, NCCL buffers) less the predicted overheads;
      allocator reserve (reserved minus allocated: cached blocks, fragmentation); what the job
      allocated that the model does not (allocated minus the predicted peak: data on the
      device, extra copies, metrics). A part whose figures are missing is merged into the
      next one and named so.
    * on a CPU: RSS counts the interpreter and its libraries (the bare-interpreter baseline)
      less the predicted overheads, and the rest: the job's tensors and everything else it
      holds, including memory the C allocator keeps after frees (not measurable from outside,
      so not split).
    """
    overheads = dict(predicted.get("overheads", {}))
    over = sum(overheads.values())
    pred_peak = int(predicted["peak_bytes"])
    total = pred_peak + over
    obs = int(observed["peak_bytes"])
    diff = obs - total
    parts: list[dict[str, Any]] = []
    notes: list[str] = []
    if observed.get("kind") == "cuda":
        reserved, allocated = observed.get("torch_reserved_bytes"), observed.get("torch_allocated_bytes")
        if reserved is not None:
            parts.append({"name": OUTSIDE, "bytes": obs - reserved - over,
                          "what": "device memory of the process beyond torch's reserve (CUDA context, library "
                                  "workspaces, communication buffers), less the predicted overheads"})
            if allocated is not None:
                parts.append({"name": RESERVE, "bytes": reserved - allocated,
                              "what": "memory torch's caching allocator holds but no tensor uses (cached blocks, "
                                      "fragmentation)"})
                parts.append({"name": EXTRA, "bytes": allocated - pred_peak,
                              "what": "tensors alive at the peak beyond the model's step (data kept on the device, "
                                      "extra copies, metrics)"})
            else:
                parts.append({"name": f"{RESERVE} + {EXTRA}", "bytes": reserved - pred_peak,
                              "what": "torch's reserve beyond the predicted peak (no allocated figure from the job "
                                      "to tell the two apart)"})
        else:
            parts.append({"name": f"{OUTSIDE} + {RESERVE} + {EXTRA}", "bytes": diff,
                          "what": "not split: the job's own torch figures (reserved, allocated) were not available; "
                                  "NVML sees the process's device memory, not how PyTorch uses it"})
            notes.append("to split the difference, the job's torch.cuda.memory_reserved() and memory_allocated() at "
                         "the peak are needed")
    else:
        base = observed.get("baseline_bytes")
        if base is not None:
            parts.append({"name": OUTSIDE, "bytes": base - over,
                          "what": "what a bare interpreter with torch imported holds (Python, torch's and other "
                                  "libraries' code and data), less the predicted overheads"})
            parts.append({"name": EXTRA, "bytes": obs - base - pred_peak,
                          "what": "resident memory beyond the bare interpreter and the model's step: the job's "
                                  "other data, memory the C allocator keeps after frees"})
        else:
            parts.append({"name": f"{OUTSIDE} + {EXTRA}", "bytes": diff,
                          "what": "not split: no bare-interpreter baseline was measured"})
        notes.append("on a CPU the observed figure is resident memory (RSS): it counts the interpreter and its "
                     "libraries, and memory the C allocator keeps after frees; it does not count pages swapped "
                     "out or never touched. There is no allocator reserve to read from outside")
    if parts:
        parts[-1]["bytes"] += diff - sum(p["bytes"] for p in parts)  # exact sum (a no-op where it already is)
    share = diff / total if total else None
    return {"kind": observed.get("kind"), "observed_peak_bytes": obs, "predicted_peak_bytes": pred_peak,
            "predicted_overheads": overheads, "predicted_total_bytes": total, "difference_bytes": diff,
            "difference_share": share, "parts": parts, "observed": observed, "notes": notes,
            "summary": _summary_sentence(obs, total, diff, share, parts)}


def _gib(n: float) -> str:
    """Bytes in GiB, or MiB under one GiB (the findings are words; the report formats the tables)."""
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MiB"


def _summary_sentence(obs: int, total: int, diff: int, share: float | None, parts: list[dict[str, Any]]) -> str:
    word = "more" if diff >= 0 else "less"
    text = f"observed peak {_gib(obs)} against {_gib(total)} predicted: {_gib(abs(diff))} {word}"
    if share is not None:
        text += f" ({abs(share):.1%})"
    if parts and diff:
        largest = max(parts, key=lambda p: abs(p["bytes"]))
        text += f"; the largest part: {largest['name']} ({'+' if largest['bytes'] >= 0 else '-'}"
        text += f"{_gib(abs(largest['bytes']))})"
    return text


def findings(summary: dict[str, Any], comparison: dict[str, Any] | None = None) -> list[str]:
    """What the timeline says, in words."""
    out = []
    for key, d in summary.get("devices", {}).items():
        util = d.get("utilisation_mean")
        if d.get("kind") == "gpu" and util is not None:
            out.append(f"{key} ({d.get('name')}) was idle {d['idle_share']:.0%} of the run (mean utilisation "
                       f"{util:.0%})")
            used, total = d.get("memory_used_peak"), d.get("memory_total")
            if used and total and used / total > FULL_MEMORY and util < LOW_UTILISATION:
                out.append(f"{key}: memory {used / total:.0%} full but busy only {util:.0%} of the time: the loop is "
                           "likely waiting on input (data loading, host-side work) rather than on the GPU")
        if d.get("energy_j") is not None and summary.get("duration_s"):
            out.append(f"{key}: {d['energy_j']:.1f} J over {summary['duration_s']:.1f} s "
                       f"({d['energy_j'] / summary['duration_s']:.1f} W mean)")
    cpu = summary.get("devices", {}).get("cpu")
    if summary.get("cpu_tree_mean") is not None and cpu is not None and cpu.get("cpus"):
        out.append(f"the job kept {summary['cpu_tree_mean']:.2f} of {cpu['cpus']} CPUs busy on average")
    elif summary.get("cpu_tree_mean") is not None:
        out.append(f"the job kept {summary['cpu_tree_mean']:.2f} CPUs busy on average")
    if comparison is not None:
        out.append(comparison["summary"])
    return out


