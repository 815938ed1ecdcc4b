"""``footprint gpus``: the accelerator database."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..settings import Target
from .commands import COMMANDS
from .fit import EXAMPLES
from .options import Command, View
from .output import save_json, show


def _own(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sources", action="store_true", help="show each row's datasheet URL")
    p.add_argument("--vendor", help="only this vendor: nvidia, amd, apple, local")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.hardware import render_gpus

    rows = api.gpus(r[Target].hardware, vendor=args.vendor)
    show(render_gpus, rows, sources=args.sources)
    save_json(r[View].json, "gpus", {"accelerators": [a.to_dict() for a in rows]})
    return 0


COMMAND = Command("gpus", COMMANDS["gpus"][1], run, takes={Target: ("hardware",), View: ("json", "debug")},
                  helps={"json": "also write the database as JSON"}, extra=_own, examples=EXAMPLES)
