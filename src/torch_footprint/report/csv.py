"""CSV of the tables: one row per module (or per operator), one column per figure; the
unit of each column is in its name (``_bytes``: B, ``flops``: FLOP, ``macs``: MAC)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any


def table_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` (dicts, such as ``ModuleRow.to_dict()``) as CSV with these ``columns``; lists
    (output shapes) are written as ``1x3x224x224``, several joined by ``;``."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    return out.getvalue()


def _cell(v: Any) -> Any:
    if isinstance(v, list):
        return ";".join("x".join(str(d) for d in s) if isinstance(s, list) else str(s) for s in v)
    return "" if v is None else v


MODULE_COLUMNS = ("path", "type", "depth", "calls", "out_shapes", "params", "param_bytes", "flops", "macs",
                  "matrix_flops", "vector_flops", "bytes_read", "bytes_written")
OPERATOR_COLUMNS = ("op", "kind", "calls", "flops", "macs", "bytes_read", "bytes_written")
FIT_COLUMNS = ("accelerator", "name", "capacity_bytes", "need_bytes", "fits", "largest_batch", "latency_s",
               "lower_bound_s", "bound", "throughput_samples_per_s", "throughput_batch", "meets_target", "tdp_w")
