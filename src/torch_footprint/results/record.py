"""The envelope of every JSON file footprint writes, and reading such files back.

Every ``--json`` file is one object: the result's own fields (``to_dict()``) plus an
envelope saying what it is, so that a file read months later, by a bot or by ``diff``,
``check`` and ``show``, is understood or refused with one clear line:

* ``schema_version``: an integer, raised when a field changes meaning or goes away (the
  tool version is separate: many releases share one schema);
* ``tool`` and ``tool_version``; ``created`` (UTC, ISO 8601); ``kind`` (the verb that
  wrote it: profile, memory, report, ...);
* ``fingerprint``: what was analysed (model, inputs, settings) and a hash of it, so that
  two files of different models or settings are not compared by mistake;
* ``units``: the unit of every kind of number in the file.

The shipped JSON Schema (``schema.json`` beside this module, printed by ``footprint
schema``) describes the envelope and each kind's main fields. Files without a
``schema_version`` (written before it existed: version 0) are migrated on reading;
files of a newer version are refused.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import FootprintError

SCHEMA_VERSION = 1
TOOL = "torch-footprint"
KINDS = ("profile", "memory", "bench", "fit", "predict", "gpus", "calibrate", "llm", "report", "diff", "check",
         "watch", "plan", "plan-serve")
# kinds whose settings are top-level fields rather than a "settings" object
SETTINGS_KEYS = {"llm": ("batch", "prompt", "output", "gpus", "tp", "engine", "chunk", "weights_scheme", "kv_scheme"),
                 "watch": ("command", "pid", "interval_s")}
UNITS = {
    "bytes": "B (keys ending in _bytes, and byte counts by category or module)",
    "time": "s (keys ending in _s)",
    "flops": "FLOP (1 MAC = 2 FLOPs; macs count matrix operators only)",
    "rate": "per second (flop_per_s: FLOP/s; samples_per_s: samples/s; bandwidth_bytes_per_s: B/s)",
    "params": "count of scalar parameters",
    "intensity": "FLOP per byte moved",
}
_ENVELOPE = ("schema_version", "tool", "tool_version", "created", "kind", "fingerprint", "units")


def fingerprint(model: str | None, inputs: Any, settings: dict[str, Any] | None) -> dict[str, Any]:
    """What was analysed, and a stable hash of it (independent of key order)."""
    what = {"model": model, "inputs": inputs if inputs is not None else [],
            "settings": {k: v for k, v in (settings or {}).items() if k not in ("model", "inputs")}}
    text = json.dumps(what, sort_keys=True, default=str, separators=(",", ":"))
    return {**what, "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


def _subject(kind: str, payload: dict[str, Any]) -> tuple[str | None, Any, dict[str, Any]]:
    """The model, inputs and settings a result names, wherever its kind keeps them."""
    settings = dict(payload.get("settings") or {k: payload.get(k) for k in SETTINGS_KEYS.get(kind, ())})
    model = payload.get("model") or settings.get("model")
    inputs = payload.get("inputs") if "inputs" in payload else settings.get("inputs")
    return model, inputs, settings


def envelope(kind: str, payload: dict[str, Any], *, created: str | None = None) -> dict[str, Any]:
    """``payload`` (a result's ``to_dict()``) with the envelope in front of it."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    from .. import __version__

    clash = [k for k in _ENVELOPE if k in payload]
    if clash:
        raise ValueError(f"a result cannot carry envelope keys: {clash}")
    model, inputs, settings = _subject(kind, payload)
    head = {"schema_version": SCHEMA_VERSION, "tool": TOOL, "tool_version": __version__,
            "created": created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "kind": kind, "fingerprint": fingerprint(model, inputs, settings), "units": UNITS}
    return {**head, **payload}


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The shipped JSON Schema of every file footprint writes."""
    return json.loads(resources.files(__package__).joinpath("schema.json").read_text())


def validate(doc: dict[str, Any], name: str = "the file") -> None:
    """Check ``doc`` against the shipped schema; a mismatch is one line naming the field."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    err = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise FootprintError(f"{name} does not match footprint's schema {SCHEMA_VERSION} at {where}: "
                             f"{err.message[:200]}")


def _guess_kind(doc: dict[str, Any]) -> str | None:
    """The verb that wrote a file of schema version 0 (before the envelope), from its fields."""
    if isinstance(doc.get("trace"), dict) and "params" in doc:
        return "profile"
    if "peak" in doc and "provision_bytes" in doc:
        return "memory"
    if "rows" in doc and "pick" in doc:
        return "fit"
    if "points" in doc and "device" in doc:
        return "bench"
    if "accelerator" in doc and "time_s" in doc:
        return "predict"
    if "accelerators" in doc:
        return "gpus"
    return None


def migrate(doc: dict[str, Any], name: str = "the file") -> dict[str, Any]:
    """Bring a file of an older schema version to this one, or refuse it with one line."""
    version = doc.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise FootprintError(f"{name} has a schema_version that is not an integer: {version!r}")
    if version > SCHEMA_VERSION:
        raise FootprintError(f"{name} was written with schema version {version} (by {doc.get('tool')} "
                             f"{doc.get('tool_version')}); this torch-footprint reads versions up to "
                             f"{SCHEMA_VERSION}: upgrade it")
    if version == SCHEMA_VERSION:
        return doc
    if version < 0:
        raise FootprintError(f"{name} has schema_version {version}: no such version")
    # version 0: the result's fields alone, no envelope
    kind = _guess_kind(doc)
    if kind is None:
        raise FootprintError(f"{name} is not a torch-footprint result (no schema_version, and not a profile, "
                             "memory, fit, bench or predict result of an older version)")
    return envelope(kind, doc, created="unknown (written before schema version 1)")


def load(path: str | Path, kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read one of our JSON files: migrated to this schema version, validated, of one of ``kinds``."""
    from ..files import read_json

    name = f"'{path}'"
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise FootprintError(f"{name} is not a torch-footprint result (its JSON is not an object)")
    if "schema_version" in doc and doc.get("tool") != TOOL:
        raise FootprintError(f"{name} is not a torch-footprint result (tool is {doc.get('tool')!r})")
    doc = migrate(doc, name)
    validate(doc, name)
    if kinds is not None and doc["kind"] not in kinds:
        raise FootprintError(f"{name} holds a '{doc['kind']}' result; this needs one of: {', '.join(kinds)}")
    return doc
