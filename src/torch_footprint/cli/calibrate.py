"""``footprint calibrate``: measure what this machine reaches, for later predictions."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import api
from ..errors import ExitCode
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_json, show


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.hardware import render_calibration
    from ..report.progress import progress

    with progress("calibrating") as update:
        res = api.calibrate(progress=lambda s: update(f"calibrating: {s}"), **settings_of(r))
    show(render_calibration, res)
    save_json(r[View].json, "calibrate", res.to_dict())
    if res.problems and not res.saved:
        print("footprint: calibration not saved: " + "; ".join(res.problems) + ". `footprint calibrate "
              "--force` saves it anyway", file=sys.stderr)
        return ExitCode.VERDICT_FAILED
    return ExitCode.ANSWER


COMMAND = Command(
    "calibrate", COMMANDS["calibrate"][1], run, takes={**api.VERBS["calibrate"], View: ("json", "debug")},
    helps={"device": "cpu or cuda (default cpu)", "nproc": "also time all-reduces across N ranks (torchrun): the link",
           "threads": "torch's CPU threads while measuring (default: torch's)",
           "json": "also write the measurements to this JSON file"})
