"""What ``bench`` shows beside a measurement: the predicted peak (its CPU budget check), the
FLOPs of one call (achieved FLOP/s) and the roofline latency on the device's own row."""

from __future__ import annotations

from typing import Any

from ..dtypes import rate_key
from ..errors import FootprintError
from ..hardware import Accelerator
from .memory import estimate_memory
from .roofline import Prediction, estimate_latency
from .workload import StepSpec, trace_forward


class Alongside:
    """Predictions for ``source`` (a name, or the module being measured) at any batch."""

    def __init__(self, source: Any, specs_at: Any, *, train: bool, optimizer: str | None, dtype: str | None,
                 autocast: Any, accelerator: Accelerator | None, weights: str | None,
                 trust_remote_code: bool) -> None:
        self.source, self.specs_at = source, specs_at
        self.train, self.optimizer, self.dtype, self.autocast = train, optimizer, dtype, autocast
        self.accelerator = accelerator
        self.common = dict(weights=weights, trust_remote_code=trust_remote_code)
        self.latency: dict[int, Prediction] = {}

    def peak(self, batch: int) -> int:
        """The traced peak of one call at ``batch``, in bytes."""
        spec = StepSpec(train=self.train, optimizer=self.optimizer if self.train else None)
        return estimate_memory(self.source, self.specs_at(batch), spec, **self.common).peak.peak_bytes

    def flops(self, batch: int) -> int | None:
        """FLOPs of one call at ``batch`` (forward, plus backward when training); the roofline
        latency at that batch is kept in :attr:`latency` on the way."""
        from ..analysis import totals

        try:
            trace, _ = trace_forward(self.source, self.specs_at(batch), backward=self.train, dtype=self.dtype,
                                     **self.common)
        except FootprintError:
            return None
        if self.accelerator is not None:
            try:  # under autocast the matrix work runs in its dtype (the trace is in the weights' dtype)
                self.latency[batch] = estimate_latency(trace, self.accelerator,
                                                       compute_dtype=rate_key(self.autocast) if self.autocast
                                                       else None)
            except FootprintError:
                pass
        phases = ("forward", "backward") if self.train else ("forward",)
        return totals(trace, phases).flops
