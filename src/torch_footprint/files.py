"""Writing result files whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import FootprintError


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` as JSON atomically: a temporary file in the same folder, then a rename."""
    _write(path, lambda f: (json.dump(data, f, indent=1), f.write("\n")))


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) atomically, as :func:`write_json` does."""
    _write(path, lambda f: f.write(text))


def _write(path: str | os.PathLike[str], fill: Any) -> None:
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise FootprintError(f"cannot write '{target}': folder '{folder}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, target)
    except OSError as e:
        raise FootprintError(f"cannot write '{target}': {e.strerror or e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise FootprintError(f"file '{path}' does not exist") from None
    except json.JSONDecodeError as e:
        raise FootprintError(f"'{path}' is not valid JSON: {e}") from None
    except UnicodeDecodeError:
        raise FootprintError(f"'{path}' is not a JSON file (it is not text)") from None
    except IsADirectoryError:
        raise FootprintError(f"'{path}' is a folder, not a JSON file") from None
