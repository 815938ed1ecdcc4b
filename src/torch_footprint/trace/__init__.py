"""The tracing engine: one event per aten operator, recorded over meta or fake tensors."""

from .records import MemFree, ModuleInfo, OpEvent, TensorInfo, Trace
from .state import ModelState
from .step import StepOptions, loss_of, run_step, tensors_in
from .tracer import trace_model

__all__ = ["MemFree", "ModelState", "ModuleInfo", "OpEvent", "StepOptions", "TensorInfo", "Trace", "loss_of",
           "run_step", "tensors_in", "trace_model"]
