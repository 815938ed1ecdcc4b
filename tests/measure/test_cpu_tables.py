"""The linear table's weights come from beyond a core's L2, sized from what Linux reports."""

from __future__ import annotations

from pathlib import Path

from torch_footprint.measure import cpu_tables


def _cache(root: Path, index: int, level: int, kind: str, size: str) -> None:
    d = root / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_l2_is_read_from_the_level_2_cache(tmp_path: Path) -> None:
    # a Sapphire Rapids core as sysfs lists it: 48K L1d, 32K L1i, 2048K L2, 107520K L3
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "107520K")]):
        _cache(tmp_path, i, level, kind, size)
    assert cpu_tables.l2_bytes(tmp_path) == 2048 * 1024


def test_no_cache_listing_falls_back_to_two_mebibytes(tmp_path: Path) -> None:
    assert cpu_tables.l2_bytes(tmp_path / "absent") == cpu_tables.L2_FALLBACK == 2 * 2**20


def test_the_pool_holds_four_times_the_l2_in_distinct_weights() -> None:
    l2 = cpu_tables.l2_bytes()
    for k in cpu_tables.LINEAR_K:
        pool = cpu_tables.weight_pool(cpu_tables.LINEAR_N, k)
        assert len(pool) >= 2 and sum(w.numel() * 4 for w in pool) >= 4 * l2
        assert len({w.data_ptr() for w in pool}) == len(pool)
