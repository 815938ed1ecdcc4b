"""What ``bench`` shows beside a measurement: the predicted peak (its CPU budget check), the
FLOPs of one call (achieved FLOP/s) and the roofline latency on the device's own row."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..dtypes import parse_dtype, rate_key
from ..errors import FootprintError
from ..hardware import Accelerator
from ..settings import Training, Workload
from .kernels.roofline import Prediction, estimate_latency
from .memory import estimate_memory
from .workload import trace_forward


class Alongside:
    """Predictions for ``w`` (its model a name, or the module being measured) at any batch,
    its inputs at a batch given by ``specs_at(batch)``."""

    def __init__(self, w: Workload, t: Training, specs_at: Callable[[int], Any],
                 accelerator: Accelerator | None) -> None:
        self.w, self.t, self.specs_at, self.accelerator = w, t, specs_at, accelerator
        self.latency: dict[int, Prediction] = {}

    def _at(self, batch: int, precision: str | None) -> Workload:
        return dataclasses.replace(self.w, inputs=self.specs_at(batch), batch=None, precision=precision)

    def peak(self, batch: int) -> int:
        """The traced peak of one call at ``batch`` (in the model's own dtype), in bytes."""
        return estimate_memory(self._at(batch, None), self.t).peak.peak_bytes

    def flops(self, batch: int) -> int | None:
        """FLOPs of one call at ``batch`` (forward, plus backward when training); the roofline
        latency at that batch is kept in :attr:`latency` on the way."""
        from ..analysis import totals

        prec = self.w.precision
        mixed = prec is not None and prec.endswith("-mixed")
        try:
            trace, _ = trace_forward(self._at(batch, None if mixed else prec), Training(train=self.t.train))
        except FootprintError:
            return None
        if self.accelerator is not None:
            # under autocast the matrix work runs in its dtype (the trace is in the weights' dtype)
            compute = rate_key(parse_dtype(prec.removesuffix("-mixed"))) if mixed and prec else None
            try:
                self.latency[batch] = estimate_latency(trace, self.accelerator, compute_dtype=compute)
            except FootprintError:
                pass
        phases = ("forward", "backward") if self.t.train else ("forward",)
        return totals(trace, phases).flops
