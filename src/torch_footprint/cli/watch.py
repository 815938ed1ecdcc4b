"""``footprint watch``: run or follow a real job; device memory, utilisation and power beside
the prediction."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import api
from ..settings import Watch
from .commands import COMMANDS
from .options import Command, View, settings_of
from .output import save_json, save_text

EXAMPLES = """examples:
  footprint watch -- python train.py --epochs 1
  footprint watch --interval 0.5 --json run.json --html run.html -- python train.py
  footprint watch --predict resnet50 --batch 64 --train --optimizer sgd --device cuda -- python train.py
  footprint watch --pid 12345
"""


def _own(p: argparse.ArgumentParser) -> None:
    p.add_argument("command", nargs=argparse.REMAINDER, help="the job to run, after `--`")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..report.watch import render_live, render_watch, render_watch_html

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    view = r[View]
    with render_live(plain=True if r[Watch].plain else None) as show:
        res = api.watch(command or None, on_sample=show, **settings_of(r))
    sys.stdout.write(render_watch(res))
    save_json(view.json, "watch", res.to_dict())
    if view.html:
        save_text(view.html, render_watch_html(res.to_dict()))
    return int(res.exit_status)  # the job's own


COMMAND = Command(
    "watch", COMMANDS["watch"][1], run, takes={**api.VERBS["watch"], View: ("json", "html", "debug")},
    defaults={"json": "footprint-watch.json"},
    helps={"json": "write the timeline as JSON when the job ends", "html": "write the timeline as an HTML page",
           "device": "whose predicted fixed overheads to add with --predict: cpu or cuda"},
    extra=_own, examples=EXAMPLES)
