"""``footprint schema``: the JSON Schema of every file footprint writes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .commands import COMMANDS
from .options import Command, View


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..results.record import schema

    print(json.dumps(schema(), indent=1))
    return 0


COMMAND = Command("schema", COMMANDS["schema"][1], run, takes={View: ("debug",)})
