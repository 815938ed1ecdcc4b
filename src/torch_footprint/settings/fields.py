"""The machinery of the setting records: a field's command-line spelling (:func:`opt`), the
records' own checks (:class:`Record`), their help read from the source, and the records a
verb takes gathered from keyword arguments (:func:`gather`, :func:`verb_records`)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from ..errors import FootprintError


def opt(default: Any = None, *, flag: str | None = None, short: str | None = None, metavar: str | None = None,
        aliases: tuple[str, ...] = (), deprecated: Mapping[str, Any] | None = None,
        aliases_of_values: Mapping[str, str] | None = None, what: str | None = None,
        cli: bool = True) -> Any:
    """A settings field with its command-line spelling.

    ``flag`` replaces ``--field-name``; ``aliases`` are other current spellings;
    ``deprecated`` maps an old spelling to None (same value) or to a function of the value
    given (``--autocast bf16`` is ``--precision bf16-mixed``): it still works and warns with
    the new name. ``aliases_of_values`` normalises what people type; ``what`` names the
    vocabulary in errors ("unknown optimizer 'x'"). ``cli=False``: no flag."""
    meta = {"flag": flag, "short": short, "metavar": metavar, "aliases": aliases, "deprecated": dict(deprecated or {}),
            "values": dict(aliases_of_values or {}), "what": what, "cli": cli}
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple or a mapping proxy for a mutable default")
    return field(default=default, metadata=meta)


class Record:
    """The base of the setting records: each checks its fields when made (the vocabulary of
    every ``Literal`` field, the other spellings normalised)."""

    def __post_init__(self) -> None:
        hints = field_types(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if typing.get_origin(hints[f.name]) is tuple and not isinstance(value, tuple):
                # a repeatable field: one value, a list, or a mapping (its NAME=VALUE items)
                value = (value,) if isinstance(value, str) else tuple(
                    f"{k}={v}" for k, v in value.items()) if isinstance(value, Mapping) else tuple(value)
                object.__setattr__(self, f.name, value)
            choices = literal_choices(hints[f.name])
            if value is None or not choices:
                continue
            key = str(value).strip().lower()
            key = f.metadata.get("values", {}).get(key, key)
            if key not in choices:
                what = f.metadata.get("what") or f.name.replace("_", " ")
                raise FootprintError(f"unknown {what} '{value}': use {', '.join(choices)}")
            object.__setattr__(self, f.name, key)
        self.check()

    def check(self) -> None:
        """Checks across fields (override)."""


# --------------------------------------------------------------------------- reading the records

_TYPES: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    """The fields' types, resolved (once per class)."""
    if cls not in _TYPES:
        _TYPES[cls] = typing.get_type_hints(cls)
    return _TYPES[cls]


def literal_choices(tp: Any) -> tuple[str, ...]:
    """The values of a ``Literal`` type (inside ``X | None``), else ()."""
    if typing.get_origin(tp) is Literal:
        return tuple(str(a) for a in typing.get_args(tp))
    for arg in typing.get_args(tp):
        if typing.get_origin(arg) is Literal:
            return tuple(str(a) for a in typing.get_args(arg))
    return ()


@functools.cache
def field_docs(cls: Any) -> dict[str, str]:
    """Each field's help: the string literal under it in the class body (as vLLM reads its
    engine arguments' docs), whitespace folded."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for a, b in zip(body, body[1:], strict=False):
        if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr) \
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
            docs[a.target.id] = " ".join(b.value.value.split())
    return docs


def gather(wanted: tuple[type[Record], ...], given: Mapping[str, Any], verb: str) -> dict[type[Record], Any]:
    """The records a verb takes, from ``given``: records by their lower-case names
    (``training=Training(...)``) and fields by name (``optimizer="adamw"``), a field
    overriding its record's value. A name no record of the verb has is refused."""
    by_name = {cls.__name__.lower(): cls for cls in wanted}
    fields_of = {f.name: cls for cls in wanted for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    records: dict[type[Record], Any] = {}
    loose: dict[type[Record], dict[str, Any]] = {cls: {} for cls in wanted}
    for name, value in given.items():
        if name in by_name:
            cls = by_name[name]
            if value is not None and not isinstance(value, cls):
                raise TypeError(f"{verb}() takes {name}= as a {cls.__name__}, got {type(value).__name__}")
            if value is not None:
                records[cls] = value
        elif name in fields_of:
            loose[fields_of[name]][name] = value
        else:
            known = sorted([*by_name, *fields_of])
            raise TypeError(f"{verb}() got an unexpected keyword argument '{name}'; it takes: {', '.join(known)}")
    out = {}
    for cls in wanted:
        base = records.get(cls)
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in loose[cls].items()}
        out[cls] = dataclasses.replace(base, **kw) if base is not None else cls(**kw)
    return out


def signature_of(wanted: Mapping[type[Record], Any], head: Callable[..., Any]) -> inspect.Signature:
    """``head``'s own parameters, then every record of ``wanted`` and the fields it names (None:
    all) as keywords: the signature ``help()`` and editors show for a verb."""
    own = [p for p in inspect.signature(head).parameters.values() if p.kind != p.VAR_KEYWORD]
    params = [p for p in own if p.kind != p.KEYWORD_ONLY]
    taken = {p.name for p in own}
    for cls, names in wanted.items():
        params.append(inspect.Parameter(cls.__name__.lower(), inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=f"{cls.__name__} | None"))
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in taken and (names is None or f.name in names):
                taken.add(f.name)
                params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                                annotation=str(f.type)))
    params += [p for p in own if p.kind == p.KEYWORD_ONLY]
    return inspect.Signature(params, return_annotation=inspect.signature(head).return_annotation)


# earlier keyword names of the verbs: still taken, with a warning that names the new one
RENAMED: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    "dtype": ("precision", None), "backward": ("train", None), "batch_sizes": ("batches", None),
    "min_seconds": ("min_time", None), "only": ("gpu", None), "budget": ("max_batch", None),
    "overheads": ("overhead", None), "layout": ("channels_last", lambda v: v == "nhwc"),
    "autocast": ("precision", lambda v: f"{v}-mixed" if v else None),
    "weights": ("quant", None),  # llm's weight scheme (elsewhere --weights names torchvision weights)
}

Takes = Mapping[type, Sequence[str] | None]  # record -> the fields a verb reads (None: every one)


def fields_of(takes: Takes) -> dict[str, type]:
    """Every field a verb reads, and its record."""
    out = {}
    for cls, names in takes.items():
        for f in dataclasses.fields(cls):
            if names is None or f.name in names:
                out[f.name] = cls
    return out


def verb_records(verb: str, takes: Takes, given: Mapping[str, Any]) -> tuple[Any, ...]:
    """The records ``verb`` reads (``takes``, in its order) from records and fields given by
    name; an earlier keyword name is taken with a DeprecationWarning, a name the verb does not
    read is refused."""
    known = fields_of(takes)
    names = {cls.__name__.lower() for cls in takes} | set(known)
    kw: dict[str, Any] = {}
    for name, value in given.items():
        if name not in known and name in RENAMED and RENAMED[name][0] in known:
            new, how = RENAMED[name]
            warnings.warn(f"{verb}(): {name}= is deprecated, use {new}=", DeprecationWarning, stacklevel=4)
            name, value = new, how(value) if how else value
            if value is None and name in kw:
                continue
        if name not in names:
            raise TypeError(f"{verb}() got an unexpected keyword argument '{name}'; it takes: "
                            f"{', '.join(sorted(names))}")
        kw[name] = value
    records = gather(tuple(takes), kw, verb)
    return tuple(records[cls] for cls in takes)
