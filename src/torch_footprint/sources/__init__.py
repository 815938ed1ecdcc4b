"""Model and input sources: a name, a config or a factory -> a module without weights, and its inputs."""

from .building import Built
from .inputs import InputSpec, parse_dtype, parse_input_ids, parse_shape
from .models import resolve
from .prepare import Workload, prepare

__all__ = ["Built", "InputSpec", "Workload", "parse_dtype", "parse_input_ids", "parse_shape", "prepare", "resolve"]
