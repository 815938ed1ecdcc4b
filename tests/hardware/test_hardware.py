"""The accelerator database: loads, every row sourced, dense figures, schema errors that
name the file, the row and the field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import torch_footprint as tfp
from torch_footprint.cli import main
from torch_footprint.errors import FootprintError
from torch_footprint.hardware.db import BUILTIN, load_file

ROW = """
[[accelerator]]
id = "{id}"
name = "Test card"
vendor = "test"
kind = "gpu"
memory_gb = {mem}
bandwidth_gbs = 100
tdp_w = 50
tflops = {{ fp32 = 10.0, tf32 = 20.0, fp16 = 40.0, bf16 = 40.0 }}
source = "https://example.com/datasheet.pdf"
"""


def test_database_loads_with_a_source_for_every_row():
    rows = load_file(BUILTIN)
    assert len(rows) >= 35
    assert len({a.id for a in rows}) == len(rows)
    for a in rows:
        assert re.match(r"^https://\S+$", a.source), a.id
        assert a.memory_gb > 0 and a.bandwidth_gbs and a.bandwidth_gbs > 0, a.id
        assert a.tflops["fp32"] > 0, a.id
        assert set(a.estimated) <= {"fp32", "tf32", "fp16", "bf16", "fp8", "int8", "memory_gb", "bandwidth_gbs",
                                    "tdp_w", "vector_fp32"}
        if a.estimated:
            assert a.notes, f"{a.id}: derived figures must say how in notes"


def test_the_accelerators_the_issue_lists_are_there():
    ids = {a.id for a in tfp.hardware.list()}
    wanted = ["t4", "v100-pcie-32gb", "v100-sxm2-32gb", "a10", "a10g", "a100-pcie-40gb", "a100-sxm-40gb",
              "a100-pcie-80gb", "a100-sxm-80gb", "l4", "l40s", "h100-pcie", "h100-sxm", "h200-sxm", "b200",
              "rtx-3060", "rtx-3070", "rtx-3080", "rtx-3090", "rtx-4060-ti-16gb", "rtx-4070", "rtx-4080",
              "rtx-4090", "rtx-5080", "rtx-5090", "gtx-1080-ti", "rtx-2080-ti", "p100-pcie-16gb", "quadro-rtx-6000",
              "jetson-agx-orin-64gb", "mi250x-gcd", "mi300x", "apple-m1", "apple-m2-max", "cpu"]
    assert not [w for w in wanted if w not in ids]


@pytest.mark.parametrize("acc_id, dtype, dense, sparse", [
    # NVIDIA's H100 datasheet: "BF16 Tensor Core 1,979 teraFLOPS*" (* with sparsity)
    ("h100-sxm", "bf16", 989.4, 1979.0),
    # A100 datasheet: TF32 156 | 312*, BF16 312 | 624*
    ("a100-sxm-80gb", "tf32", 156.0, 312.0),
    # L4 datasheet: FP8 485* TFLOPS (sparse)
    ("l4", "fp8", 242.5, 485.0),
])
def test_tensor_figures_are_dense_not_sparse(acc_id, dtype, dense, sparse):
    a = tfp.hardware.get(acc_id)
    assert a.tflops[dtype] == pytest.approx(dense, rel=1e-3)
    assert a.tflops[dtype] == pytest.approx(sparse / 2, rel=1e-3)


def test_geforce_fp16_is_the_fp32_accumulate_rate():
    # Ada whitepaper, RTX 4090: fp16 tensor 165.2 TFLOPS with fp32 accumulate, 330.3 with fp16 accumulate
    assert tfp.hardware.get("rtx-4090").tflops["fp16"] == pytest.approx(165.2)
    # GA102 whitepaper, RTX 3090: 71 with fp32 accumulate (142 with fp16 accumulate)
    assert tfp.hardware.get("rtx-3090").tflops["fp16"] == pytest.approx(71.0)


def test_sxm_and_pcie_are_kept_apart():
    sxm, pcie = tfp.hardware.get("h100-sxm"), tfp.hardware.get("h100-pcie")
    assert (sxm.bandwidth_gbs, pcie.bandwidth_gbs) == (3350, 2000)
    assert sxm.tdp_w == 700 and pcie.tdp_w == 350


def test_get_by_alias_and_close_names():
    assert tfp.hardware.get("NVIDIA H100 80GB HBM3").id == "h100-sxm"
    with pytest.raises(FootprintError, match="h100-sxm"):
        tfp.hardware.get("h100-sxn")


def test_memory_is_read_in_binary_units():
    assert tfp.hardware.get("h100-sxm").memory_bytes == 80 * 2**30
    assert tfp.hardware.get("h100-sxm").bandwidth == 3350e9


@pytest.mark.parametrize("change, message", [
    (lambda r: r.replace('source = "https://example.com/datasheet.pdf"\n', ""), "field 'source' is missing"),
    (lambda r: r.replace("memory_gb = 8", 'memory_gb = "eight"'), "field 'memory_gb': expected a number"),
    (lambda r: r.replace("memory_gb = 8", "memory_gb = -8"), "field 'memory_gb': must be positive"),
    (lambda r: r.replace("fp32 = 10.0,", "fp64 = 5.0, fp32 = 10.0,"), "field 'tflops.fp64': unknown dtype"),
    (lambda r: r.replace("fp32 = 10.0, ", ""), "field 'tflops.fp32' is missing"),
    (lambda r: r.replace('"https://example.com/datasheet.pdf"', '""'), "field 'source' must be a non-empty string"),
    (lambda r: r.replace('kind = "gpu"', 'kind = "tpu"'), "field 'kind' must be one of"),
    (lambda r: r + 'colour = "green"\n', "unknown field 'colour'"),
    (lambda r: r + "link_gbs = 32\n", "fields 'link_gbs' and 'link' go together"),
    (lambda r: r + 'link_gbs = 0\nlink = "PCIe"\n', "field 'link_gbs': must be positive"),
    (lambda r: r + 'link_gbs = 32\nlink = "PCIe"\nlink_source = "a forum"\n', "field 'link_source' must be a URL"),
    (lambda r: r + "power_limit_w = 60\n", "field 'power_limit_w' (60 W) needs the board's 'tdp_w' and must not"),
    (lambda r: r.replace("tdp_w = 50\n", "") + "power_limit_w = 40\n", "field 'power_limit_w' (40 W) needs"),
    (lambda r: r + "power_limit_w = 0\n", "field 'power_limit_w': must be positive"),
])
def test_malformed_row_names_file_row_and_field(tmp_path, change, message):
    f = tmp_path / "mine.toml"
    f.write_text(ROW.format(id="good", mem=8) + change(ROW.format(id="bad-card", mem=8)))
    with pytest.raises(FootprintError) as e:
        load_file(f)
    text = str(e.value)
    assert str(f) in text and "accelerator #2 (bad-card)" in text and message in text


def test_a_source_that_is_not_a_url_is_accepted_with_a_warning(tmp_path, capsys):
    from torch_footprint.cli import main
    from torch_footprint.errors import FootprintWarning

    f = tmp_path / "mine.toml"
    f.write_text(ROW.format(id="my-card", mem=8).replace('"https://example.com/datasheet.pdf"', '"me"'))
    with pytest.warns(FootprintWarning, match=r"accelerator #1 \(my-card\): field 'source' is not a URL \('me'\)"):
        [row] = load_file(f)
    assert row.source == "me"
    assert main(["gpus", "--hardware", str(f)]) == 0
    out, err = capsys.readouterr()
    assert "my-card" in out and err.startswith("footprint: warning: ") and err.count("\n") == 1


def test_duplicate_id_and_invalid_toml(tmp_path):
    f = tmp_path / "dup.toml"
    f.write_text(ROW.format(id="x", mem=8) + ROW.format(id="x", mem=16))
    with pytest.raises(FootprintError, match=r"#2 \(x\): field 'id' repeats row #1"):
        load_file(f)
    g = tmp_path / "broken.toml"
    g.write_text("[[accelerator]\nid = ")
    with pytest.raises(FootprintError, match="not valid TOML"):
        load_file(g)


def test_user_file_adds_and_replaces_rows_toml_or_json(tmp_path):
    f = tmp_path / "mine.json"
    row = {"id": "h100-sxm", "name": "My H100", "vendor": "nvidia", "kind": "gpu", "memory_gb": 80,
           "bandwidth_gbs": 3000, "tflops": {"fp32": 60}, "source": "https://example.com/x"}
    f.write_text(json.dumps({"accelerator": [row, {**row, "id": "my-card", "name": "Mine"}]}))
    rows = {a.id: a for a in tfp.hardware.list(f)}
    assert rows["h100-sxm"].name == "My H100" and rows["h100-sxm"].origin == str(f)
    assert "my-card" in rows and "a100-sxm-80gb" in rows


def test_a_power_limit_below_the_tdp_loads_and_slows_the_matrix_units(tmp_path):
    import dataclasses

    f = tmp_path / "mine.toml"
    stock = tfp.hardware.get("h100-sxm")
    f.write_text(ROW.format(id="h100-sxm", mem=80).replace("tdp_w = 50", "tdp_w = 700") + "power_limit_w = 500\n")
    [row] = load_file(f)
    assert row.power_limit_w == 500.0 and row.to_dict()["power_limit_w"] == 500.0
    capped = dataclasses.replace(stock, power_limit_w=500.0)
    prof = tfp.profile("resnet18", "64,3,224,224", precision="bf16")
    stock_p, capped_p = (tfp.predict(prof, g) for g in (stock, capped))
    # the convolutions (matrix work) at the capped clocks, the memory-bound kernels as before
    matrix = [(a.compute_s, b.compute_s) for a, b in zip(stock_p.ops, capped_p.ops, strict=True) if a.kind == "matrix"]
    assert matrix and all(b > a for a, b in matrix)
    assert capped_p.time_s > stock_p.time_s
    assert [o.memory_s for o in stock_p.ops] == [o.memory_s for o in capped_p.ops]
    assert any(n.startswith("power limit 500 W of its 700 W TDP") for n in capped_p.notes)
    assert not any(n.startswith("power limit") for n in stock_p.notes)


def test_cli_gpus_and_a_bad_hardware_file(tmp_path, capsys):
    assert main(["gpus", "--vendor", "amd"]) == 0
    out = capsys.readouterr().out
    assert "mi300x" in out and "1307.4" in out and "h100-sxm" not in out
    bad = tmp_path / "bad.toml"
    bad.write_text(ROW.format(id="bad", mem=0))
    assert main(["gpus", "--hardware", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "accelerator #1 (bad): field 'memory_gb': must be positive" in err and "Traceback" not in err
    out_json = tmp_path / "db.json"
    assert main(["gpus", "--json", str(out_json)]) == 0
    assert len(json.loads(out_json.read_text())["accelerators"]) >= 35


def test_bench_stays_the_verb_after_the_measuring_package_is_imported():
    import torch_footprint.measure.runner  # noqa: F401

    assert callable(tfp.bench) and tfp.bench.__name__ == "bench"


@pytest.mark.parametrize("acc_id, both_ways_gbs", [
    # the vendors' two-way figures (datasheets): one direction is half
    ("v100-sxm2-32gb", 300), ("a100-sxm-80gb", 600), ("h100-sxm", 900), ("h200-sxm", 900), ("b200", 1800),
    ("h100-pcie", 128), ("a100-pcie-80gb", 64), ("l4", 64), ("l40s", 64), ("a10", 64), ("mi300x", 896),
])
def test_interconnect_is_one_direction_per_gpu(acc_id, both_ways_gbs):
    acc = tfp.hardware.get(acc_id)
    assert acc.link_gbs == both_ways_gbs / 2 and acc.link_bandwidth == both_ways_gbs / 2 * 1e9
    assert acc.link and acc.to_dict()["link_gbs"] == both_ways_gbs / 2


def test_link_fields_load_from_a_user_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(ROW.format(id="linked", mem=8) + 'link_gbs = 25\nlink = "RoCE 200 Gb/s"\n'
                 'link_source = "https://example.com/nic.pdf"\n' + ROW.format(id="plain", mem=8))
    linked, plain = load_file(f)
    assert (linked.link_gbs, linked.link, linked.link_source) == (25.0, "RoCE 200 Gb/s", "https://example.com/nic.pdf")
    assert plain.link_gbs is None and plain.link_bandwidth is None


def test_the_last_level_cache_is_read_as_linux_lists_it(tmp_path: Path) -> None:
    # this machine's listing: L1d 48K, L1i 32K, L2 2048K, L3 266240K (260 MiB = 272,629,760 bytes)
    from torch_footprint.hardware.local import last_level_cache_bytes

    for i, size in enumerate(("48K", "32K", "2048K", "266240K")):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 260 * 2**20
    (tmp_path / "index4").mkdir()
    (tmp_path / "index4" / "size").write_text("1M\n")  # a smaller one, in MiB: the largest stays
    assert last_level_cache_bytes(tmp_path) == 260 * 2**20
    assert last_level_cache_bytes(tmp_path / "missing") == 0  # nothing listed: unknown
