"""Is profiling the zoo as fast as it was? Time ``profile`` of this tree against another commit's,
alternating, on the models of the model-zoo sweep.

The other commit's ``src/torch_footprint`` is exported (``git archive``) and imported under
another name (``torch_footprint_ref``: its imports are relative), so one process builds each
model once (as benchmarks/model_zoo_sweep.py builds it, random weights, on the input whose real
forward runs) and profiles it with both versions in turn, ``--rounds`` times each, starting with
the reference in even rounds and with this tree in odd ones. Per model the fastest of its
rounds counts; the ratio is the sum over the models both versions profile (this tree / the
reference), with the median of the per-model ratios beside it. Each model runs in a process of
its own (the sweep's fork server), one torch thread each.

    python benchmarks/profile_time_ab.py --ref 31ad526 [--only torchvision]... [--timm-sample 80]
        [--limit N] [--models a,b] [--rounds 3] [--workers 2] [--out benchmarks/results]

Writes ``profile_time_ab.{json,md}`` in ``--out``. Target (the state-restoring trace): the zoo's
profiling time within 5% of the reference's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import model_zoo_sweep as zoo  # noqa: E402

# the children (the sweep's fork server) read these from the environment
REF_ENV, ROUNDS_ENV = "FOOTPRINT_AB_REF_DIR", "FOOTPRINT_AB_ROUNDS"


def export_ref(ref: str, into: Path) -> str:
    """``src/torch_footprint`` at ``ref``, as the package ``torch_footprint_ref`` under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src/torch_footprint"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "src" / "torch_footprint").rename(into / "torch_footprint_ref")
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


def time_model(lib: str, name: str, send: Callable[[zoo.Record], None]) -> zoo.Record:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    sys.path.insert(0, os.environ[REF_ENV])
    import torch_footprint_ref as old

    import torch_footprint as new

    rec: zoo.Record = {"lib": lib, "name": name, "built": False, "forward_ok": False}
    model, inputs = zoo._attempt(lib, name, "small" if lib == "transformers" else "default", rec, send)
    if lib == "transformers" and not rec["forward_ok"]:
        retry: zoo.Record = {"lib": lib, "name": name, "built": False, "forward_ok": False}
        model, inputs = zoo._attempt(lib, name, "layers", retry, send)
        if retry["forward_ok"]:
            rec = retry
    if not rec.get("forward_ok"):
        rec["stage"] = "done"
        return rec
    rec["stage"] = "timing"
    send(rec)
    times: dict[str, list[float]] = {"ref": [], "new": []}
    errors: dict[str, str] = {}
    for r in range(int(os.environ.get(ROUNDS_ENV, "3"))):
        order = (("ref", old), ("new", new)) if r % 2 == 0 else (("new", new), ("ref", old))
        for label, tfp in order:
            if label in errors:
                continue
            t = time.perf_counter()
            try:
                tfp.profile(model, inputs[1])
            except Exception as e:
                errors[label] = zoo.error_text(e)
                continue
            times[label].append(time.perf_counter() - t)
    rec.update(ref_s=min(times["ref"]) if times["ref"] else None, new_s=min(times["new"]) if times["new"] else None,
               ref_all=[round(x, 4) for x in times["ref"]], new_all=[round(x, 4) for x in times["new"]],
               errors=errors, stage="done")
    return rec


def describe(rec: zoo.Record) -> str:
    if rec.get("ref_s") and rec.get("new_s"):
        return (f"{rec['lib']:12s} {rec['name'][:40]:40s} ref {rec['ref_s']:.3f}s new {rec['new_s']:.3f}s "
                f"x{rec['new_s'] / rec['ref_s']:.3f}")
    why = rec.get("errors") or rec.get("forward_error", "")
    return f"{rec['lib']:12s} {rec['name'][:40]:40s} not timed {why}"[:160]


def summary(records: list[zoo.Record]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lib in [*zoo.LIBS, "all"]:
        rs = [r for r in records if (lib == "all" or r["lib"] == lib) and r.get("ref_s") and r.get("new_s")]
        if not rs:
            continue
        ref, new = sum(r["ref_s"] for r in rs), sum(r["new_s"] for r in rs)
        out[lib] = {"models": len(rs), "ref_s": round(ref, 2), "new_s": round(new, 2), "ratio": round(new / ref, 4),
                    "median_ratio": round(statistics.median(r["new_s"] / r["ref_s"] for r in rs), 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="the commit to compare with (e.g. the branch's base)")
    ap.add_argument("--only", action="append", choices=zoo.LIBS, help="a library (repeatable; default: all)")
    ap.add_argument("--timm-sample", type=int, default=80, help="timm models spread over the families (default 80)")
    ap.add_argument("--limit", type=int, default=None, help="at most N models per library")
    ap.add_argument("--models", default=None, help="comma-separated names")
    ap.add_argument("--rounds", type=int, default=3, help="profiles per version and model (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="models at once (default 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per model (default 300)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output folder")
    args = ap.parse_args(argv)
    os.environ[ROUNDS_ENV] = str(args.rounds)
    only = [m.strip() for m in args.models.split(",")] if args.models else None
    tasks = zoo.list_tasks(args.only or list(zoo.LIBS), args.timm_sample, only)
    if args.limit is not None:
        tasks = [t for lib in zoo.LIBS for t in [t for t in tasks if t[0] == lib][:args.limit]]
    with tempfile.TemporaryDirectory() as tmp:
        ref = export_ref(args.ref, Path(tmp))
        os.environ[REF_ENV] = tmp
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "src"], capture_output=True,
                               text=True).stdout.strip()
        state = " (uncommitted changes in src/)" if dirty else ""
        print(f"{len(tasks)} models; reference {ref}, this tree {head}{state}", flush=True)
        t0 = time.perf_counter()
        records = zoo.sweep(tasks, max(1, args.workers), args.timeout, runner=time_model, describe=describe)
        wall = time.perf_counter() - t0
    s = summary(records)
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if argv is None else str(argv)
    meta = {"command": command, "reference": ref, "this tree": head + state,
            "rounds": args.rounds, "workers": args.workers, "wall_s": round(wall, 1),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    args.out.mkdir(parents=True, exist_ok=True)
    records.sort(key=lambda r: (zoo.LIBS.index(r["lib"]), r["name"]))
    zoo.write_whole(args.out / "profile_time_ab.json", json.dumps({"meta": meta, "summary": s, "records": records},
                                                                   indent=1, default=str))
    lines = ["# Profiling time: this tree against a reference commit, alternating", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "Per model the fastest of its rounds; ratio = this tree's sum / the reference's sum over the models "
              "both profile.", "", "| library | models | reference s | this tree s | ratio | median per-model ratio |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {lib} | {v['models']} | {v['ref_s']} | {v['new_s']} | {v['ratio']} | {v['median_ratio']} |"
              for lib, v in s.items()]
    zoo.write_whole(args.out / "profile_time_ab.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
