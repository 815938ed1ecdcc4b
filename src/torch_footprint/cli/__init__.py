"""The ``footprint`` command: parse, call the Python API, render. Nothing else lives here.

Each verb is a module of this package holding one :class:`~.options.Command` (its records,
its own arguments, what it runs); :data:`.commands.COMMANDS` lists them. Flags come from the
setting records' fields (:mod:`.options`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..collector import own_process
from ..errors import ExitCode, FootprintError
from .commands import COMMANDS, EXAMPLES
from .options import Command, build, records

EXIT_CODES = """exit codes:
  0    an answer (including "nothing fits")
  1    a verdict failed: check over budget, a calibration that fails its own checks
  2    bad input: the model, a flag or a file cannot be used (one line says why)
  3    internal error: a bug in torch-footprint (--debug shows the traceback)
  130  interrupted (Ctrl-C); what was finished is kept
"""

__all__ = ["EXIT_CODES", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr and exit code 2 (like every other error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.BAD_INPUT, f"footprint: error: {message} (see `{self.prog} --help`)\n")


def command(name: str) -> Command:
    """The verb ``name``'s command, from its module."""
    return importlib.import_module(f".{COMMANDS[name][0]}", __name__).COMMAND  # type: ignore[no-any-return]


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; given the arguments about to be parsed, only their verb's
    flags are built, and their help texts only when help is asked for (reading the fields' docs
    from the source is most of the parser's cost, and a run without ``--help`` never shows them)."""
    p = _Parser(prog="footprint", description="What a PyTorch model costs and what hardware it needs.",
                epilog=EXAMPLES + "\n" + EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)
    verb = argv[0] if argv and argv[0] in COMMANDS else None
    helps = verb is None or any(a in ("-h", "--help") for a in argv or ())
    for name, (_, summary) in COMMANDS.items():
        if verb is None or name == verb:
            build(sub, command(name), helps=helps)
        else:  # listed (and a misspelt verb's choices), never parsed in this run
            sub.add_parser(name, help=summary)
    return p


def _one_line_warnings() -> None:
    """Our warnings as one line on stderr ("footprint: warning: ..."), others as Python shows them."""
    import warnings

    from ..errors import FootprintWarning

    shown = warnings.showwarning
    if getattr(shown, "footprint", False):
        return

    def show(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        if issubclass(category, FootprintWarning):
            print(f"footprint: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *args, **kwargs)  # type: ignore[arg-type]

    show.footprint = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (:class:`~torch_footprint.errors.ExitCode`)."""
    whole_process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser(argv)
    args = p.parse_args(argv)
    # the process is the command line's, start to end; the verbs that time or watch real runs
    # leave the collector and the exit as the user's own code has them
    owned = whole_process and args.verb not in ("bench", "calibrate", "watch")
    if owned:
        own_process()
    if args.version:
        from .. import __version__

        print(f"torch-footprint {__version__}")
        return ExitCode.ANSWER
    if args.verb is None:
        p.print_help()
        return ExitCode.BAD_INPUT
    debug = getattr(args, "debug", False) or os.environ.get("FOOTPRINT_DEBUG") == "1"
    _one_line_warnings()
    code = _run(command(args.verb), args, debug)
    if owned:
        # the whole answer is out: end without tearing down torch's millions of objects one by one
        # (a fifth of a second of a 70B profile); nothing of ours is left to write at exit
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    return code


def _run(cmd: Command, args: argparse.Namespace, debug: bool) -> int:
    """The verb's answer as an exit code; errors as one line (with ``debug``, raised)."""
    try:
        return cmd.run(args, records(args, cmd))
    except FootprintError as e:
        if debug:
            raise
        print(f"footprint: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("footprint: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as e:  # a bug of ours: say so plainly, without a traceback
        if debug:
            raise
        print(f"footprint: internal error: {type(e).__name__}: {e}\n"
              "This is a bug in torch-footprint; run again with --debug for the traceback and report it.",
              file=sys.stderr)
        return ExitCode.INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
