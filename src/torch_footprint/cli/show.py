"""``footprint show``: render a result saved with --json, without running the model."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import FootprintError
from .commands import COMMANDS
from .options import Command, View
from .output import save_html, show

HTML_KINDS = ("profile", "report", "memory", "fit", "predict", "bench", "llm")


def run(args: argparse.Namespace, r: dict[type, Any]) -> int:
    from ..analysis import Profile
    from ..report.terminal import render_profile
    from ..results.record import load

    view = r[View]
    doc: Any = load(args.file, HTML_KINDS)
    if not view.html and doc["kind"] != "profile":
        raise FootprintError(f"'{args.file}' holds a '{doc['kind']}' result: draw it with --html FILE.html "
                             "(the terminal view is a profile's)")
    if view.html:
        if doc["kind"] in ("memory", "fit", "predict", "bench", "llm"):  # the page of that one section
            doc = {**doc, doc["kind"]: doc}
        elif doc["kind"] == "profile":  # a profile's page: with the memory its trace implies
            from .. import api

            doc = api.report(Profile.from_dict(doc))
        save_html(view.html, doc, view.depth)
        return 0
    show(render_profile, Profile.from_dict(doc), by=view.by, depth=2 if view.depth is None else view.depth)
    return 0


COMMAND = Command(
    "show", COMMANDS["show"][1], run, takes={View: ("depth", "by", "html", "debug")},
    positional=(("file", "a file written by `footprint ... --json FILE`"),),
    helps={"depth": "module tree depth: of the table (default 2), of the HTML's bars (default: the shallowest with "
                    "five modules)",
           "html": "write the HTML report of a saved profile or report instead"})
