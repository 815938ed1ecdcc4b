"""Regenerate every pasted output of the documentation from the code, with one command.

A block to regenerate follows a marker naming its command::

    <!-- output: footprint profile resnet50 --depth 1 -->
    ```text
    $ footprint profile resnet50 --depth 1
    ...what it prints...
    ```

and a block whose figures change from run to run (a measured time) says why it is not
checked: ``<!-- output, not checked (timings): footprint bench resnet18 -->``.

    python docs/regenerate.py            # rewrite every block of README.md and docs/ in place
    python docs/regenerate.py --check    # rewrite nothing; name each checked block that differs

Commands run in this process (``torch_footprint.cli.main``), at 100 columns, with no saved
calibration (an empty ``TORCH_FOOTPRINT_HOME``), in a scratch folder holding a copy of
docs/examples (the budget file ``check`` reads), so what they print depends on the code
alone. Commands joined by `` && `` run in turn in the same folder; the block shows the last
one's output. tests/cli/test_docs.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
WIDTH = 100
MARK = re.compile(r"<!-- output(?:, not checked \((?P<why>[^)]*)\))?: (?P<cmd>footprint [^\n]*?) -->\n"
                  r"```(?P<lang>[a-z]*)\n(?P<body>.*?)```", re.S)


@dataclass(frozen=True)
class Block:
    path: Path
    start: int  # offsets of the whole marker + block in the file's text
    end: int
    command: str
    lang: str
    body: str
    unchecked: str | None  # why its figures are not compared, or None

    @property
    def line(self) -> int:
        return self.path.read_text()[: self.start].count("\n") + 1


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(path, m.start(), m.end(), m["cmd"], m["lang"], m["body"], m["why"]) for m in MARK.finditer(text)]


@contextlib.contextmanager
def _scratch() -> Iterator[None]:
    """A fixed width, no calibration, a scratch folder to run in (files a command writes land there)."""
    old_env = {k: os.environ.get(k) for k in ("COLUMNS", "TORCH_FOOTPRINT_HOME")}
    old_cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["COLUMNS"] = str(WIDTH)
        os.environ["TORCH_FOOTPRINT_HOME"] = str(Path(tmp) / "home")
        for f in EXAMPLES.glob("*"):
            shutil.copy(f, tmp)
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(old_cwd)
            for k, v in old_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def output_of(command: str) -> str:
    """What ``command`` prints (stdout, then stderr), after the command itself; of a chain
    (``a && b``), what its last command prints."""
    from torch_footprint.cli import main

    with _scratch():
        for part in command.split(" && "):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(shlex.split(part)[1:])
                except SystemExit as e:  # argparse's own exits (--help)
                    code = e.code
            if code not in (0, 1, 2, None):
                raise RuntimeError(f"{part!r} exited {code}: {err.getvalue()}")
    lines = (out.getvalue() + err.getvalue()).rstrip("\n").splitlines()
    return "\n".join([f"$ {command}", *(line.rstrip() for line in lines)]) + "\n"


def regenerate(check: bool) -> list[str]:
    """Rewrite the blocks (or, with ``check``, list those whose output differs)."""
    differ = []
    for path in documents():
        text = path.read_text()
        found = blocks(path)
        if not found:
            continue
        out, last = [], 0
        for b in found:
            if check and b.unchecked:
                continue
            now = output_of(b.command)
            if now != b.body:
                differ.append(f"{path.relative_to(ROOT)}:{b.line}: {b.command}")
            out.append(text[last:b.start])
            marker = f"<!-- output{f', not checked ({b.unchecked})' if b.unchecked else ''}: {b.command} -->"
            out.append(f"{marker}\n```{b.lang}\n{now}```")
            last = b.end
        out.append(text[last:])
        if not check:
            path.write_text("".join(out))
    return differ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 naming each block that differs")
    args = ap.parse_args()
    differ = regenerate(args.check)
    for d in differ:
        print(("differs: " if args.check else "rewrote: ") + d)
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
