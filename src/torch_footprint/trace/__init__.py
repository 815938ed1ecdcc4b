"""The tracing engine: one event per aten operator, recorded over fake tensors."""

from .records import MemFree, ModuleInfo, OpEvent, TensorInfo, Trace
from .tracer import trace_model

__all__ = ["MemFree", "ModuleInfo", "OpEvent", "TensorInfo", "Trace", "trace_model"]
