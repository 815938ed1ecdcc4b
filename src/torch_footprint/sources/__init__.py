"""Model and input sources."""

from .inputs import InputSpec, parse_dtype, parse_input_ids, parse_shape
from .models import Built, resolve

__all__ = ["Built", "InputSpec", "parse_dtype", "parse_input_ids", "parse_shape", "resolve"]
