"""``footprint check``: a model or saved result against a budget file; exit 1 when over budget."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..errors import ExitCode
from ..settings import Workload
from .commands import COMMANDS
from .options import Command, View
from .output import save_json, show
from .report import EXAMPLES


def _own(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", required=True, metavar="FILE.toml", help="the caps: a TOML file of metric = limit")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.progress import progress
    from ..report.verdicts import render_check

    with progress(f"check {args.target} against {args.budget}"):  # a model is traced and priced: seconds
        res = api.check(args.target, args.budget, trust_remote_code=r[Workload].trust_remote_code)
    show(render_check, res)
    save_json(r[View].json, "check", res.to_dict())
    return ExitCode.ANSWER if res.passed else ExitCode.VERDICT_FAILED


COMMAND = Command(
    "check", COMMANDS["check"][1], run, takes={Workload: ("trust_remote_code",), View: ("json", "debug")},
    positional=(("target", "a result saved with --json, or a model run as the budget's [workload] says"),),
    helps={"json": "also write every cap's outcome as JSON (for bots)"}, extra=_own, examples=EXAMPLES)
