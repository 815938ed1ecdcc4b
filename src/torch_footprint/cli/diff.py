"""``footprint diff``: what changed between two saved results."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from .commands import COMMANDS
from .options import Command, View
from .output import save_json, show
from .report import EXAMPLES


def _own(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="compare results of different models or settings")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.verdicts import render_diff

    view = r[View]
    res = api.diff(args.before, args.after, force=args.force, depth=view.depth)
    show(render_diff, res)
    save_json(view.json, "diff", res.to_dict())
    return 0


COMMAND = Command(
    "diff", COMMANDS["diff"][1], run, takes={View: ("depth", "json", "debug")}, defaults={"depth": 2},
    positional=(("before", "a result saved with --json"), ("after", "a result saved with --json")),
    helps={"depth": "module depth to compare", "json": "also write the diff as JSON"}, extra=_own,
    examples=EXAMPLES)
