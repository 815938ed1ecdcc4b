"""A model's layout over pipeline and expert-parallel ranks: its repeated blocks (what the
pipeline's stages split) and its experts (what expert parallelism splits), and the checks a
layout must pass against them."""

from __future__ import annotations

from torch import nn

from ...errors import FootprintError
from ...settings import Parallel

EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def repeated_blocks(model: nn.Module) -> tuple[str, int]:
    """The longest run of repeated blocks (the largest ``nn.ModuleList``): its path and length;
    ("", 0) when the model has none."""
    best = ("", 0)
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > best[1] and "expert" not in name.rsplit(".", 1)[-1]:
            best = (name, len(mod))
    return best


def expert_count(model: nn.Module) -> int | None:
    """Experts per mixture-of-experts layer: the model config's count, else the longest
    ``experts`` list of modules; None when it has none."""
    config = getattr(model, "config", None)
    for key in EXPERT_COUNTS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    lists = [len(m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and n.endswith("experts")]
    return max(lists) if lists else None


def check_layout(model: nn.Module, p: Parallel) -> None:
    """Refuse a layout the model cannot take: ``--pp`` x ``--vpp`` stages that do not divide its
    repeated blocks (torchtitan and Megatron-LM split them evenly), ``--ep`` that does not divide
    its experts."""
    if p.pp > 1:
        path, n = repeated_blocks(model)
        stages = p.pp * p.vpp
        what = f"--pp {p.pp}" + (f" x --vpp {p.vpp}" if p.vpp > 1 else "")
        if not n:
            raise FootprintError(f"{what}: found no run of repeated blocks to split into pipeline stages")
        if n % stages:
            raise FootprintError(f"{what} = {stages} stages do not divide the model's {n} blocks ({path})")
    if p.ep > 1:
        experts = expert_count(model)
        if experts is None:
            raise FootprintError(f"--ep {p.ep} splits the experts of mixture-of-experts layers: this model has none")
        if experts % p.ep:
            raise FootprintError(f"--ep {p.ep} does not divide the model's {experts} experts per layer")
