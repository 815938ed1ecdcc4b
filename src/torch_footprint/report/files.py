"""Writing result files whole or not at all (shared with the stages that keep files)."""

from ..files import read_json, write_json

__all__ = ["read_json", "write_json"]
