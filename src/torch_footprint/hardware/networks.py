"""Networks between GPU nodes, from ``networks.toml`` (each row sourced)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import FootprintError

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Network:
    """A node's compute fabric: ``nics`` ports of ``port_gbps`` Gb/s each, one direction."""

    id: str
    name: str
    port_gbps: float
    nics: int
    source: str
    notes: str = ""

    def per_gpu(self, gpus_per_node: int) -> float:
        """Bytes/s each of a node's ``gpus_per_node`` GPUs can send off the node."""
        return self.port_gbps * 1e9 / 8 * self.nics / gpus_per_node


@cache
def networks() -> dict[str, Network]:
    raw = tomllib.loads((Path(__file__).with_name("networks.toml")).read_text())
    return {n["id"]: Network(**n) for n in raw["network"]}


def get_network(name: str) -> Network:
    """The network called ``name``; a one-line error listing the known ones otherwise."""
    nets = networks()
    if name not in nets:
        raise FootprintError(f"unknown network '{name}': use {', '.join(nets)}")
    return nets[name]


def network_for(name: str | None, port_gbps: float | None = None, nics: int | None = None,
                gpus_per_node: int = 8) -> Network | None:
    """The network between nodes a user describes: a row of the table by ``name``, its port
    speed or NIC count replaced where given; or, with no name, ``nics`` ports of ``port_gbps``
    (default one port per GPU). None when nothing is given."""
    from dataclasses import replace

    if name is not None:
        net = get_network(name)
        if port_gbps is None and nics is None:
            return net
        return replace(net, port_gbps=port_gbps or net.port_gbps, nics=nics or net.nics,
                       name=f"{net.name} ({nics or net.nics} x {port_gbps or net.port_gbps:g} Gb/s as given)")
    if port_gbps is None:
        return None
    n = nics or gpus_per_node
    return Network("given", f"{n} x {port_gbps:g} Gb/s", port_gbps, n, "--network-gbps")
