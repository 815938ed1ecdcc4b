"""What a GPU costs by the hour: a price the user gives (``--price ID=USD/H``), else the
shipped, dated table of public on-demand prices (``prices.toml``, each row with its source
and the date it was read). Training runs and serving fleets are priced from it: GPU-hours
and dollars for a run, dollars per million tokens."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import FootprintError

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Price:
    """One GPU's hourly price: US dollars per GPU-hour, where it was read and when."""

    gpu: str  # an accelerator id of the database
    usd_per_hour: float
    source: str  # an address, or "given" for a price on the command line
    date: str = ""  # when the price was read (YYYY-MM-DD)
    provider: str = ""
    notes: str = ""


@cache
def table() -> dict[str, Price]:
    """The shipped prices, by accelerator id (the lowest public on-demand price per GPU-hour
    among the rows of each id)."""
    raw = tomllib.loads(Path(__file__).with_name("prices.toml").read_text())
    out: dict[str, Price] = {}
    for row in raw.get("price", []):
        p = Price(**row)
        if p.gpu not in out or p.usd_per_hour < out[p.gpu].usd_per_hour:
            out[p.gpu] = p
    return out


def parse_prices(items: Iterable[str]) -> dict[str, Price]:
    """``ID=USD_PER_HOUR`` items (``h100-sxm=2.49``, ``a100-sxm-80gb=$1.79``) as prices."""
    out = {}
    for item in items:
        gpu, sep, value = str(item).partition("=")
        try:
            usd = float(value.strip().lstrip("$").removesuffix("/h"))
        except ValueError:
            sep = ""
        if not sep or not gpu.strip():
            raise FootprintError(f"--price takes GPU=USD_PER_HOUR, e.g. h100-sxm=2.49; got '{item}'")
        if not usd > 0:
            raise FootprintError(f"a price must be more than 0 dollars an hour, got '{item}'")
        out[gpu.strip()] = Price(gpu.strip(), usd, "given")
    return out


def hourly_price(gpu: str, given: Iterable[str] = ()) -> Price | None:
    """The price of one GPU-hour of ``gpu`` (an accelerator id): the one given, else the
    shipped table's (None when neither has it)."""
    prices = parse_prices(given)
    return prices.get(gpu) or table().get(gpu)
