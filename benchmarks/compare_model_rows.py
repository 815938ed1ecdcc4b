"""Two runs of validate_models.py side by side, row by row: what each row's prediction was,
what it is, and how its error moved.

    python benchmarks/compare_model_rows.py OLD.txt NEW.txt

Rows are matched by model, task, batch, precision, GPU and the trailing note (compiled,
batch 1...); the saved outputs of benchmarks/results/ are such runs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROW = re.compile(r"^(?P<key>\S+\s+\S+\s+\d+\s+\S+\s+.+?)\s+(?P<pub>[\d.e+]+)\s+(?P<pred>[\d.e+]+)\s+"
                 r"(?P<err>[+-][\d.]+)%(?P<note>.*)$")


def rows(path: str) -> dict[str, tuple[float, float, str]]:
    out: dict[str, tuple[float, float, str]] = {}
    for line in Path(path).read_text().splitlines():
        m = ROW.match(line)
        if m:
            key = " ".join(m["key"].split()) + m["note"]
            while key in out:  # a row printed twice (the same set-up from two sources)
                key += "'"
            out[key] = (float(m["pred"]), float(m["err"]), m["note"].strip())
    return out


def main() -> None:
    old, new = rows(sys.argv[1]), rows(sys.argv[2])
    print(f"{'row':78s} {'old pred':>10s} {'new pred':>10s} {'old err':>8s} {'new err':>8s}")
    for key, (pred, err, _) in new.items():
        before = old.get(key)
        if before is None:
            print(f"{key[:78]:78s} {'-':>10s} {pred:10.4g} {'-':>8s} {err:+7.1f}%")
        else:
            print(f"{key[:78]:78s} {before[0]:10.4g} {pred:10.4g} {before[1]:+7.1f}% {err:+7.1f}%")
    gone = [k for k in old if k not in new]
    if gone:
        print(f"\n{len(gone)} rows of the old run not in the new one: " + "; ".join(gone))


if __name__ == "__main__":
    main()
