"""The accelerator database: a data file shipped in the package, schema-checked at load.

``accelerators.toml`` (next to this module) holds one table per device. Users add their
own rows with a TOML or JSON file of the same shape (``--hardware FILE``); a row with an
id already present replaces it. Every problem names the file, the row and the field.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..dtypes import RATE_KEYS
from ..errors import FootprintError, FootprintWarning

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DTYPES = RATE_KEYS  # the rate keys of a row's tflops table
KINDS = ("gpu", "soc", "cpu")
BUILTIN = Path(__file__).with_name("accelerators.toml")
_REQUIRED = ("id", "name", "vendor", "kind", "memory_gb", "bandwidth_gbs", "tflops", "source")
_OPTIONAL = ("tdp_w", "vector_fp32", "notes", "estimated", "aliases", "link_gbs", "link", "link_source", "units",
             "memory_type", "units_source", "architecture", "cuda_memory_mib", "cuda_memory_source", "power_limit_w")
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


@dataclass(frozen=True)
class Accelerator:
    """One device: memory, bandwidth, dense peaks per dtype, power, and where the figures come from."""

    id: str
    name: str
    vendor: str
    kind: str
    memory_gb: float
    bandwidth_gbs: float | None
    tflops: dict[str, float]
    source: str
    tdp_w: float | None = None
    vector_fp32: float | None = None
    notes: str = ""
    estimated: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    origin: str = "built-in"
    link_gbs: float | None = None  # interconnect to its peers, one direction, GB/s (decimal)
    link: str = ""  # that link in words ("NVLink 4, 18 links")
    link_source: str = ""  # where the link figure comes from, when not ``source``
    calibrated: dict[str, Any] | None = field(default=None, compare=False)
    units: int | None = None  # SMs (NVIDIA) or compute units (AMD): what a kernel's tiles spread over
    memory_type: str = ""  # HBM3, GDDR6X, ...
    units_source: str = ""
    architecture: str = ""  # volta, ampere, hopper, ... (the whitepaper of units_source)
    cuda_memory_mib: float | None = None  # the total CUDA reports (cudaGetDeviceProperties), MiB
    cuda_memory_source: str = ""  # where that figure was printed
    power_limit_w: float | None = None  # a board run below its TDP (nvidia-smi -pl): its clocks fall

    @property
    def memory_bytes(self) -> int:
        """Capacity in bytes: memory is sold in binary sizes ("80 GB" HBM is 80 GiB of chips)."""
        return int(self.memory_gb * 2**30)

    @property
    def usable_bytes(self) -> int:
        """The memory CUDA reports as the device's total (``torch.cuda.get_device_properties``'s
        ``total_memory``, what serving engines size against), where the database has the figure:
        the driver keeps part of the chips for itself (an "80 GB" H100 reports 79.2 GiB); else
        the capacity as sold."""
        return int(self.cuda_memory_mib * 2**20) if self.cuda_memory_mib is not None else self.memory_bytes

    @property
    def bandwidth(self) -> float | None:
        """Peak memory bandwidth in bytes per second."""
        return None if self.bandwidth_gbs is None else self.bandwidth_gbs * 1e9

    @property
    def link_bandwidth(self) -> float | None:
        """Interconnect bandwidth to its peers in bytes per second, one direction (None: unpublished)."""
        return None if self.link_gbs is None else self.link_gbs * 1e9

    def peak(self, dtype: str) -> float | None:
        """Dense peak in FLOP/s (OP/s for int8) for ``dtype``; None where none is published."""
        v = self.tflops.get(dtype)
        return None if v is None else v * 1e12

    @property
    def vector_peak(self) -> float:
        """FLOP/s for elementwise and reduction work (the non-matrix fp32 rate)."""
        return (self.vector_fp32 if self.vector_fp32 is not None else self.tflops["fp32"]) * 1e12

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("id", "name", "vendor", "kind", "memory_gb", "bandwidth_gbs", "tdp_w",
                                            "tflops", "vector_fp32", "source", "notes", "estimated", "aliases",
                                            "origin", "link_gbs", "link", "link_source", "units",
                                            "memory_type", "units_source", "architecture", "cuda_memory_mib",
                                            "cuda_memory_source", "power_limit_w")}
        d["estimated"], d["aliases"] = list(self.estimated), list(self.aliases)
        if self.calibrated:
            d["calibrated"] = self.calibrated
        return d


def _number(v: Any, where: str, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FootprintError(f"{where}: expected a number, got {v!r}")
    if (v <= 0) if positive else (v < 0):
        raise FootprintError(f"{where}: must be {'positive' if positive else 'non-negative'}, got {v!r}")
    return float(v)


def _row(raw: Any, origin: str, index: int) -> Accelerator:
    label = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else "?"
    at = f"{origin}: accelerator #{index + 1} ({label})"
    if not isinstance(raw, dict):
        raise FootprintError(f"{at}: expected a table of fields, got {type(raw).__name__}")
    for k in _REQUIRED:
        if k not in raw:
            raise FootprintError(f"{at}: field '{k}' is missing (required: {', '.join(_REQUIRED)})")
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise FootprintError(f"{at}: unknown field '{sorted(unknown)[0]}' (fields: {', '.join(_REQUIRED + _OPTIONAL)})")
    for k in ("id", "name", "vendor", "kind", "source"):
        if not isinstance(raw[k], str) or not raw[k].strip():
            raise FootprintError(f"{at}: field '{k}' must be a non-empty string, got {raw[k]!r}")
    if not _ID.match(raw["id"]):
        raise FootprintError(f"{at}: field 'id' must be lower-case letters, digits, '.' and '-', got {raw['id']!r}")
    if raw["kind"] not in KINDS:
        raise FootprintError(f"{at}: field 'kind' must be one of {', '.join(KINDS)}, got {raw['kind']!r}")
    if not re.match(r"^https?://\S+$", raw["source"]):  # any text is a source; a URL lets others check it
        warnings.warn(f"{at}: field 'source' is not a URL ({raw['source']!r}); a datasheet URL lets others "
                      "check the figures", FootprintWarning, stacklevel=2)
    tf = raw["tflops"]
    if not isinstance(tf, dict):
        raise FootprintError(f"{at}: field 'tflops' must be a table of dtype = TFLOPS, got {tf!r}")
    for k in tf:
        if k not in DTYPES:
            raise FootprintError(f"{at}: field 'tflops.{k}': unknown dtype (dtypes: {', '.join(DTYPES)})")
    if "fp32" not in tf:
        raise FootprintError(f"{at}: field 'tflops.fp32' is missing (every row needs the fp32 rate)")
    tflops = {k: _number(tf[k], f"{at}: field 'tflops.{k}'") for k in DTYPES if k in tf}
    estimated = raw.get("estimated", [])
    if not isinstance(estimated, list) or not all(isinstance(x, str) for x in estimated):
        raise FootprintError(f"{at}: field 'estimated' must be a list of field names, got {estimated!r}")
    fields = {*DTYPES, "memory_gb", "bandwidth_gbs", "tdp_w", "vector_fp32", "link_gbs"}
    for x in estimated:
        if x not in fields:
            raise FootprintError(f"{at}: field 'estimated' names '{x}', which is not a figure of the row")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(x, str) for x in aliases):
        raise FootprintError(f"{at}: field 'aliases' must be a list of strings, got {aliases!r}")
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise FootprintError(f"{at}: field 'notes' must be a string, got {notes!r}")
    link = raw.get("link", "")
    if not isinstance(link, str):
        raise FootprintError(f"{at}: field 'link' must be a string, got {link!r}")
    if ("link_gbs" in raw) != bool(link.strip()):
        raise FootprintError(f"{at}: fields 'link_gbs' and 'link' go together (the figure and the link it is for)")
    link_source = raw.get("link_source", "")
    if link_source and not (isinstance(link_source, str) and re.match(r"^https?://\S+$", link_source)):
        raise FootprintError(f"{at}: field 'link_source' must be a URL, got {link_source!r}")
    cuda_source = raw.get("cuda_memory_source", "")
    if ("cuda_memory_mib" in raw) != bool(cuda_source) or (
            cuda_source and not (isinstance(cuda_source, str) and re.match(r"^https?://\S+$", cuda_source))):
        raise FootprintError(f"{at}: fields 'cuda_memory_mib' and 'cuda_memory_source' go together (the figure and "
                             "the URL where it is printed)")
    tdp = _number(raw["tdp_w"], f"{at}: field 'tdp_w'") if "tdp_w" in raw else None
    limit = _number(raw["power_limit_w"], f"{at}: field 'power_limit_w'") if "power_limit_w" in raw else None
    if limit is not None and (tdp is None or limit > tdp):
        raise FootprintError(f"{at}: field 'power_limit_w' ({limit:g} W) needs the board's 'tdp_w' and must not exceed "
                             "it (a limit below the TDP slows the clocks; one above it is not modelled)")
    return Accelerator(
        id=raw["id"], name=raw["name"], vendor=raw["vendor"], kind=raw["kind"],
        memory_gb=_number(raw["memory_gb"], f"{at}: field 'memory_gb'"),
        bandwidth_gbs=_number(raw["bandwidth_gbs"], f"{at}: field 'bandwidth_gbs'"),
        tflops=tflops, source=raw["source"],
        tdp_w=tdp,
        vector_fp32=_number(raw["vector_fp32"], f"{at}: field 'vector_fp32'") if "vector_fp32" in raw else None,
        notes=" ".join(notes.split()), estimated=tuple(estimated), aliases=tuple(aliases), origin=origin,
        link_gbs=_number(raw["link_gbs"], f"{at}: field 'link_gbs'") if "link_gbs" in raw else None,
        link=link.strip(), link_source=link_source,
        units=int(_number(raw["units"], f"{at}: field 'units'")) if "units" in raw else None,
        memory_type=str(raw.get("memory_type", "")), units_source=str(raw.get("units_source", "")),
        architecture=str(raw.get("architecture", "")),
        cuda_memory_mib=_number(raw["cuda_memory_mib"], f"{at}: field 'cuda_memory_mib'")
        if "cuda_memory_mib" in raw else None, cuda_memory_source=cuda_source, power_limit_w=limit,
    )


def load_file(path: str | os.PathLike[str]) -> list[Accelerator]:
    """Read and check one database file (TOML, or JSON with the same shape)."""
    p = Path(path)
    origin = str(path) if p != BUILTIN else "built-in"
    try:
        text = p.read_text()
    except OSError as e:
        raise FootprintError(f"cannot read hardware file {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
        raise FootprintError(f"{origin}: not valid {kind}: {e}") from None
    rows = data.get("accelerator") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not rows:
        raise FootprintError(f"{origin}: expected a list of accelerators ([[accelerator]] tables in TOML, "
                             "or {\"accelerator\": [...]} in JSON)")
    out = [_row(r, origin, i) for i, r in enumerate(rows)]
    seen: dict[str, int] = {}
    for i, a in enumerate(out):
        if a.id in seen:
            raise FootprintError(f"{origin}: accelerator #{i + 1} ({a.id}): field 'id' repeats row #{seen[a.id] + 1}")
        seen[a.id] = i
    return out


@lru_cache(maxsize=1)
def builtin() -> tuple[Accelerator, ...]:
    return tuple(load_file(BUILTIN))


# words that name a maker or a product line, not a device: "NVIDIA GeForce RTX 4090" is the 4090
_NOISE = frozenset({"nvidia", "amd", "geforce", "tesla", "instinct", "rtx", "gtx", "apple", "gpu", "hgx", "graphics",
                    "card", "per", "the"})


def _words(text: str) -> set[str]:
    """The words of a device's name as people write it: lower case, "80 GB" as "80gb", makers dropped."""
    t = re.sub(r"(\d+)\s*gb\b", r"\1gb", text.lower())
    return {w for w in re.split(r"[^a-z0-9]+", t) if w and w not in _NOISE}


def _compact(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _matches(rows: list[Accelerator], key: str) -> list[Accelerator]:
    """The rows every word of ``key`` names (a word equal to one of the row's; failing that, the
    start of one: "mi300" for mi300x); of several, the one whose id says no more than ``key``
    ("3090" is rtx-3090, not rtx-3090-ti; "m2" the M2, not the M2 Max)."""
    want = _words(key)
    if not want:
        return []
    words = {a.id: _words(" ".join((a.id, a.name, *a.aliases))) for a in rows}
    hits = [a for a in rows if want <= words[a.id]]
    if not hits:
        hits = [a for a in rows if all(any(w.startswith(q) for w in words[a.id]) for q in want)]
    if len(hits) > 1:
        plain = [a for a in hits if _words(a.id) <= want]
        if len(plain) == 1:
            return plain
    return hits


def find(rows: list[Accelerator], name: str) -> Accelerator:
    """One accelerator of ``rows`` by id, alias or name (case-insensitive), or by the words people
    write ("A100 80GB", "H100 SXM", "4090", "RTX 4090"). A name that fits several rows is refused
    with all of them; an unknown one with the closest ids."""
    key = name.strip().lower()
    for a in rows:
        if key == a.id or key == a.name.lower() or key in (x.lower() for x in a.aliases):
            return a
    compact = _compact(key)
    for a in rows:
        if compact and compact in (_compact(a.id), *(_compact(x) for x in a.aliases)):
            return a
    hits = _matches(rows, key)
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise FootprintError(f"'{name}' could be {len(hits)} accelerators: {', '.join(a.id for a in hits)}; "
                             "give one of these ids")
    import difflib

    close = difflib.get_close_matches(key, [a.id for a in rows], n=4, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise FootprintError(f"unknown accelerator '{name}'.{hint} `footprint gpus` lists them all.")
