"""Flags derived from the setting records' fields, and the records read back from parsed flags.

A command names the records (and, where it takes only some, the fields) it reads; each field
becomes one flag with the field's type, default and help (:mod:`torch_footprint.settings`),
so an option is written once whatever the number of commands that take it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FootprintError
from ..settings import Record, field_docs, field_types, literal_choices, opt

Fields = Mapping[type, Sequence[str] | None]  # a record -> the fields a command takes (None: all)


@dataclass(frozen=True)
class View(Record):
    """How the command line shows and saves a result (not a setting of the work)."""

    depth: int | None = opt(metavar="N")
    """module tree depth to show"""
    by: typing.Literal["module", "operator"] = opt("module", metavar="module|operator", what="table")
    """table to show"""
    top: int = opt(10, metavar="N")
    """how many of the slowest operators to list"""
    json: str | None = opt(metavar="FILE")
    """also write the result as JSON"""
    csv: str | None = opt(metavar="FILE")
    """also write the table shown as CSV"""
    html: str | None = opt(metavar="FILE")
    """also write a self-contained HTML report"""
    debug: bool = opt(False)
    """show tracebacks"""

    def check(self) -> None:
        if self.depth is not None and self.depth < 0:
            raise FootprintError("--depth cannot be negative")
        if self.top < 0:
            raise FootprintError("--top cannot be negative")


@dataclass(frozen=True)
class Command:
    """One verb of the command line: its records, its own arguments, and what it runs."""

    name: str
    summary: str
    run: Callable[[argparse.Namespace, dict[type, Any]], int]
    takes: Fields = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)  # this verb's defaults, where they differ
    helps: Mapping[str, str] = field(default_factory=dict)  # this verb's words for a field, where they differ
    required: Sequence[str] = ()
    positional: Sequence[tuple[str, str]] = ()  # (name, help) of positional arguments
    extra: Callable[[argparse.ArgumentParser], None] | None = None  # arguments of its own
    examples: str = ""


class _Deprecated(argparse.Action):
    """An old spelling: stores the value (transformed) in the field's place and warns once."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", transform: Any = None,
                 **kw: Any) -> None:
        self.new, self.transform = new, transform
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        value = self.const if self.nargs == 0 else values
        hint = self.new
        if callable(self.transform):
            value = self.transform(value)
            hint = f"{self.new} {value}"
        if isinstance(getattr(ns, self.dest, None), list):
            getattr(ns, self.dest).append(value)
        else:
            setattr(ns, self.dest, value)
        print(f"footprint: warning: {option_string} is deprecated: use {hint}", file=sys.stderr)


def _kind(tp: Any) -> tuple[str, Any]:
    """How a field's type reads from the command line: ("flag"|"repeat"|"value", converter)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    if tp is bool:
        return "flag", None
    if typing.get_origin(tp) is tuple:  # a repeatable flag
        return "repeat", str
    if literal_choices(tp):
        return "value", str
    if args == [int]:
        return "value", int
    if args == [float]:
        return "value", float
    return "value", str


def add_fields(p: argparse.ArgumentParser, cls: type, names: Sequence[str] | None, cmd: Command,
               helps: bool = True) -> None:
    """One flag per field of ``cls`` (``names`` of them, or all with a flag); without ``helps``,
    flags without their help texts."""
    docs, types = field_docs(cls) if helps else {}, field_types(cls)
    for f in dataclasses.fields(cls):
        if (names is not None and f.name not in names) or not f.metadata.get("cli", True):
            continue
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        flags = [flag, *([meta["short"]] if meta.get("short") else []), *meta.get("aliases", ())]
        default = cmd.defaults.get(f.name, f.default)
        words = cmd.helps.get(f.name, docs.get(f.name, ""))
        if default not in (None, (), False, True) and "default" not in words:
            words += f" (default {default})"
        kind, conv = _kind(types[f.name])
        kw: dict[str, Any] = {"dest": f.name, "help": words.replace("%", "%%")}
        if kind == "flag":
            kw["action"] = "store_false" if flag.startswith("--no-") else "store_true"
            kw["default"] = default
        elif kind == "repeat":
            kw.update(action="append", default=list(default), metavar=meta.get("metavar"), type=conv)
        else:
            kw.update(default=default, metavar=meta.get("metavar"), type=conv)
        if f.name in cmd.required:
            kw["required"] = True
        p.add_argument(*flags, **kw)
        for old, transform in meta.get("deprecated", {}).items():
            nargs = 0 if kind == "flag" else None
            p.add_argument(old, dest=f.name, action=_Deprecated, new=flag, transform=transform, nargs=nargs,
                           const=True if kind == "flag" else None, help=argparse.SUPPRESS, default=argparse.SUPPRESS)


def _takes(cmd: Command, cls: type, name: str) -> bool:
    names = cmd.takes.get(cls, ())
    return cls in cmd.takes and (names is None or name in names)


def _model_and_inputs(p: argparse.ArgumentParser, cmd: Command, helps: bool) -> None:
    """The model (positional) and its inputs: the command-line spellings of Workload's two
    fields that are not flags of their own."""
    from ..settings import Workload

    if _takes(cmd, Workload, "model"):
        words = field_docs(Workload)["model"].split(", or an nn.Module")[0] if helps else ""
        p.add_argument("model", help=cmd.helps.get("model", words))
    if _takes(cmd, Workload, "inputs"):
        p.add_argument("--input", "-i", action="append", default=[], metavar="SHAPE[:DTYPE]",
                       help="an input shape such as 1,3,224,224 or 1,128:int64; repeat for several positional "
                            "inputs; NAME=SHAPE for a keyword input")
        p.add_argument("--input-ids", metavar="B,T", help="token ids for a language model (int64 input_ids)")


def _inputs_of(args: argparse.Namespace) -> list[Any] | None:
    """The input specs given by --input (repeatable) and --input-ids (None: the model's default)."""
    from ..sources.inputs import parse_input_ids, parse_shape

    specs = [parse_shape(s) for s in getattr(args, "input", [])]
    if getattr(args, "input_ids", None):
        specs.append(parse_input_ids(args.input_ids))
    return specs or None


def build(sub: Any, cmd: Command, helps: bool = True) -> argparse.ArgumentParser:
    """The sub-parser of ``cmd``: its positional arguments, its records' flags, its own (the
    flags' help texts only with ``helps``)."""
    p = sub.add_parser(cmd.name, help=cmd.summary, description=cmd.summary, epilog=cmd.examples or None,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_and_inputs(p, cmd, helps)
    for name, words in cmd.positional:
        p.add_argument(name, help=words)
    for cls, names in cmd.takes.items():
        add_fields(p, cls, names, cmd, helps)
    if cmd.extra is not None:
        cmd.extra(p)
    return p


def records(args: argparse.Namespace, cmd: Command) -> dict[type, Any]:
    """The command's records made from the parsed flags (each checks itself)."""
    from ..settings import Workload

    out = {}
    for cls, names in cmd.takes.items():
        kw = {}
        for f in dataclasses.fields(cls):
            if hasattr(args, f.name) and (names is None or f.name in names):
                v = getattr(args, f.name)
                kw[f.name] = tuple(v) if isinstance(v, list) else v
        if cls is Workload and _takes(cmd, Workload, "inputs"):
            kw["inputs"] = _inputs_of(args)
        out[cls] = cls(**kw)
    return out


def settings_of(r: Mapping[type, Any]) -> dict[str, Any]:
    """The records of a parsed command as the API's keyword arguments (``workload=...``), the
    view left out."""
    return {cls.__name__.lower(): rec for cls, rec in r.items() if cls is not View}
