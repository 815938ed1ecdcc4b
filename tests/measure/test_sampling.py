"""Sampling readers (RAPL, NVML through a stand-in and for real where a GPU is), the
comparison of an observed peak with a prediction, and sampling during bench."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from torch_footprint.measure import sampling
from torch_footprint.measure.devices import Nvml, Rapl
from torch_footprint.measure.sampling import Probe, RunSampling, Sample, Sampler
from torch_footprint.measure.timeline import EXTRA, OUTSIDE, RESERVE, compare_peak, findings, observed_peak, summarise
from torch_footprint.report.watch import render_watch, render_watch_html, sample_lines, sampling_lines

GiB, MiB = 2**30, 2**20


# --- comparison (pure) -------------------------------------------------------------------------

PRED = {"peak_bytes": 60 * GiB, "overheads": {"cuda_context": GiB // 2}, "timeline": [[0.0, GiB], [1.0, 60 * GiB]]}


def test_a_gpu_peak_is_split_into_outside_torch_reserve_and_extra() -> None:
    obs = {"kind": "cuda", "peak_bytes": 71 * GiB, "torch_reserved_bytes": 68 * GiB,
           "torch_allocated_bytes": 63 * GiB}
    c = compare_peak(obs, PRED)
    assert c["difference_bytes"] == 71 * GiB - 60 * GiB - GiB // 2
    parts = {p["name"]: p["bytes"] for p in c["parts"]}
    assert parts == {OUTSIDE: 3 * GiB - GiB // 2, RESERVE: 5 * GiB, EXTRA: 3 * GiB}
    assert sum(parts.values()) == c["difference_bytes"]
    assert "largest part: allocator reserve (+5.00 GiB)" in c["summary"]
    # no allocated figure: reserve and extra merged, and still adding up
    c = compare_peak({**obs, "torch_allocated_bytes": None}, PRED)
    assert [p["name"] for p in c["parts"]] == [OUTSIDE, f"{RESERVE} + {EXTRA}"]
    assert sum(p["bytes"] for p in c["parts"]) == c["difference_bytes"]
    # no torch figures at all (watched from outside): not split, and saying so
    c = compare_peak({"kind": "cuda", "peak_bytes": 55 * GiB}, PRED)
    assert len(c["parts"]) == 1 and c["parts"][0]["bytes"] == c["difference_bytes"] < 0
    assert "less" in c["summary"] and "memory_reserved" in c["notes"][0]


def test_a_cpu_peak_is_rss_against_the_bare_interpreter() -> None:
    c = compare_peak({"kind": "cpu", "peak_bytes": 900 * MiB, "baseline_bytes": 300 * MiB},
                     {"peak_bytes": 500 * MiB, "overheads": {}})
    parts = {p["name"]: p["bytes"] for p in c["parts"]}
    assert parts == {OUTSIDE: 300 * MiB, EXTRA: 100 * MiB}
    assert "resident memory (RSS)" in c["notes"][0] and "interpreter" in c["notes"][0]


def _gpu_sample(t: float, used: int, mine: int, util: float, torch_at: dict[str, int] | None = None) -> Sample:
    return Sample(t, {"gpu0": {"kind": "gpu", "index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_used": used,
                               "memory_total": 80 * GiB, "utilisation": util, "memory_utilisation": util / 2,
                               "sm_clock_mhz": 1980, "power_w": 300.0, "energy_j": 1000.0 + 300 * t,
                               "temperature_c": 50, "processes": {4242: mine, 999: GiB}}},
                  [{"pid": 4242, "name": "python", "rss": 3 * GiB, "cpu": 1.0, "threads": 12}],
                  {"gpu0": torch_at} if torch_at else None)


def test_a_gpu_timeline_is_summed_up_and_named() -> None:
    samples = [_gpu_sample(0.0, 2 * GiB, GiB, 0.1), _gpu_sample(1.0, 72 * GiB, 71 * GiB, 0.3,
                                                               {"reserved": 68 * GiB, "allocated": 63 * GiB}),
               _gpu_sample(2.0, 70 * GiB, 69 * GiB, 0.2)]
    obs = observed_peak(samples)
    assert obs == {"kind": "cuda", "device": "gpu0", "peak_bytes": 71 * GiB, "t": 1.0,
                   "source": "NVML: device memory of the job's processes", "torch_reserved_bytes": 68 * GiB,
                   "torch_allocated_bytes": 63 * GiB}
    s = summarise(samples)
    gpu = s["devices"]["gpu0"]
    assert gpu["memory_used_peak"] == 72 * GiB and gpu["utilisation_mean"] == pytest.approx(0.2)
    assert gpu["energy_j"] == pytest.approx(600.0) and s["processes"][0]["device_memory_peak"] == {"gpu0": 71 * GiB}
    said = findings(s)
    assert "gpu0 (NVIDIA H100 80GB HBM3) was idle 80% of the run (mean utilisation 20%)" in said
    assert any("likely waiting on input" in f for f in said)  # memory 90% full, busy 20%
    lines = sample_lines(samples[1])
    assert lines[0].startswith("[0] NVIDIA H100 80GB HBM3 | 50°C, 30 % | 1980 MHz | 72.0 GiB / 80.0 GiB | 300 W")
    assert "python/4242(71.0 GiB)" in lines[0] and "(+1 other)" in lines[0]


def test_watch_renderers_read_a_result_dict() -> None:
    from torch_footprint.measure.watch import WatchResult

    samples = [_gpu_sample(float(t), (2 + t) * GiB, (1 + t) * GiB, 0.9) for t in range(5)]
    res = WatchResult(["python", "train.py"], 4242, 1.0, time.time(), samples, exit_code=0, ended="exited",
                      duration_s=4.0, predicted=PRED)
    d = res.to_dict()
    assert d["comparison"]["observed_peak_bytes"] == 5 * GiB
    text = render_watch(d)
    assert "predicted: 60.0 GiB peak of the step's tensors + 512 MiB cuda context = 60.5 GiB" in text
    assert "difference: -55.5 GiB" in text
    html = render_watch_html(d)
    from html.parser import HTMLParser

    HTMLParser().feed(html)
    assert html.count("<svg") == 4  # memory, utilisation, power, the predicted step
    assert "predicted: step peak + overheads" in html


# --- RAPL ----------------------------------------------------------------------------------------

def _powercap(root: Path, energy: int, top: int = 1000) -> Path:
    pkg = root / "intel-rapl:0"
    (pkg / "intel-rapl:0:0").mkdir(parents=True)  # a sub-domain (core): not added to the package's figure
    (pkg / "name").write_text("package-0\n")
    (pkg / "energy_uj").write_text(f"{energy}\n")
    (pkg / "max_energy_range_uj").write_text(f"{top}\n")
    (pkg / "intel-rapl:0:0" / "energy_uj").write_text("5\n")
    return pkg / "energy_uj"


def test_rapl_counts_package_energy_across_a_wrap(tmp_path: Path) -> None:
    counter = _powercap(tmp_path, 900)
    r = Rapl(str(tmp_path))
    assert r.available and r.why is None and [d[0] for d in r.domains] == ["package-0"]
    assert r.energy_j() == 0.0
    counter.write_text("950\n")
    assert r.energy_j() == pytest.approx(50e-6)
    counter.write_text("20\n")  # wrapped at 1000 µJ: 50 + 70
    assert r.energy_j() == pytest.approx(120e-6)


def test_rapl_says_why_there_is_no_energy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "does not exist" in Rapl(str(tmp_path / "absent")).why
    assert "no RAPL package domain" in Rapl(str(tmp_path)).why
    counter = _powercap(tmp_path, 1)
    real = Path.read_text

    def denied(self: Path, *a, **k) -> str:
        if self == counter:
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", denied)
    r = Rapl(str(tmp_path))
    assert not r.available and "readable by root only" in r.why and "CVE-2020-8694" in r.why


# --- NVML --------------------------------------------------------------------------------------

class FakeNvml:
    """pynvml's calls as NVML answers them: mW, mJ, percent, MHz, bytes."""

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self) -> None:
        self.energy_calls = 0

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-0000000{h}-aaaa"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=(10 + h) * GiB, total=80 * GiB)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 312_500

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self.energy_calls += 1
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)  # a pre-Volta GPU

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=4242, usedGpuMemory=9 * GiB), SimpleNamespace(pid=7, usedGpuMemory=None)]

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:
        return 1410 if which == self.NVML_CLOCK_SM else 1593

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 61

    def nvmlShutdown(self) -> None:
        pass


def test_nvml_readings_in_units_and_unsupported_figures_asked_once() -> None:
    fake = FakeNvml()
    nv = Nvml(fake)
    first = nv.read()
    assert set(first) == {"gpu0", "gpu1"}
    g = first["gpu1"]
    assert g["name"] == "NVIDIA A100-SXM4-80GB" and g["memory_used"] == 11 * GiB and g["memory_total"] == 80 * GiB
    assert g["utilisation"] == 0.87 and g["memory_utilisation"] == 0.40 and g["power_w"] == 312.5
    assert g["sm_clock_mhz"] == 1410 and g["memory_clock_mhz"] == 1593 and g["temperature_c"] == 61
    assert g["energy_j"] is None and g["processes"] == {4242: 9 * GiB}
    nv.read()
    assert fake.energy_calls == 1  # NOT_SUPPORTED is remembered
    nv.keep([1])
    assert list(nv.read()) == ["gpu1"]


def test_a_probe_over_the_fake_gpu_and_this_process() -> None:
    probe = Probe(nvml=Nvml(FakeNvml()), cpu=sampling.CpuDevice(), rss_only=True)
    with Sampler(probe, 0.02) as s:
        time.sleep(0.1)
    assert len(s.samples) >= 4
    last = s.samples[-1]
    assert last.devices["gpu0"]["power_w"] == 312.5 and last.processes[0]["pid"] == os.getpid()
    assert last.devices["cpu"]["utilisation"] is not None


def _nvml_here() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device on this machine"
    nv, why = sampling.open_nvml(required=False)
    if nv is None:
        return f"NVML is not usable here: {why}"
    nv.close()
    return None


@pytest.mark.skipif(_nvml_here() is not None, reason=str(_nvml_here()))
def test_nvml_agrees_with_torch_cuda_in_this_process() -> None:
    """NVML's figures for this process against torch.cuda's: the device's total and used
    memory as cudaMemGetInfo sees them, and this process's growth as torch reserves 1 GiB."""
    nv, _ = sampling.open_nvml(required=True)
    try:
        index = sampling.nvml_index_of(torch.cuda.current_device(), nv)
        assert index is not None, "torch's device not found in NVML by UUID"
        nv.keep([index])
        key = f"gpu{index}"
        torch.cuda.init()
        torch.cuda.synchronize()
        before = nv.read()[key]
        free, total = torch.cuda.mem_get_info()
        assert before["memory_total"] == total
        assert abs(before["memory_used"] - (total - free)) <= 64 * MiB
        x = torch.empty(GiB, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        after = nv.read()[key]
        grew = after["memory_used"] - before["memory_used"]
        assert abs(grew - GiB) <= 0.02 * GiB + 2 * MiB
        mine = after["processes"].get(os.getpid())
        if mine is not None:  # NVML lists host pids; inside a container's pid namespace this one is absent
            assert mine >= torch.cuda.memory_reserved()
        del x
    finally:
        nv.close()


# --- sampling during bench -------------------------------------------------------------------

class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_bench_reports_busy_share_rss_and_why_energy_is_missing() -> None:

    from torch_footprint import bench
    from torch_footprint.report.terminal import render_bench

    res = bench(Small(), "8,64", device="cpu", min_reps=10, min_time=0.3)
    s = res.points[0].sampling
    assert s["samples"] >= 3 and s["rss_peak"] >= s["rss_mean"] > 0
    assert 0 < s["device_busy"] <= 1.5 and "threads x wall time" in s["device_busy_source"]
    # the sampled window encloses the timed loop (which may stop at max_reps before min_time)
    st = res.points[0].stats
    assert s["thread_cpu_shares"] and s["wall_s"] >= st.wall >= sum(st.samples) > 0
    if Rapl().available:
        assert s["energy_per_sample_j"] == pytest.approx(s["energy_j"] / (res.points[0].stats.reps * 8))
    else:
        assert s["unavailable"]["energy"] == Rapl().why
    out = render_bench(res, width=80)
    assert "busy" in out and "RSS peak" in out and "CPU share per busy thread" in out
    assert ("energy not available" in out) != Rapl().available
    assert res.to_dict()["points"][0]["sampling"]["rss_peak"] == s["rss_peak"]


def test_run_sampling_without_psutil_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)
    with RunSampling("cpu", 0.02) as r:
        sum(i * i for i in range(200_000))
    s = r.summary(10)
    assert s["rss_peak"] > 0 and "thread_cpu_shares" not in s
    assert "psutil is not installed" in s["unavailable"]["per-thread CPU time"]
    assert any("per-thread CPU time not available" in line for line in sampling_lines(s))


def test_energy_per_sample_from_a_counter() -> None:
    class Counter:
        available, why = True, None

        def __init__(self) -> None:
            self.j = 0.0

        def energy_j(self) -> float:
            self.j += 0.5
            return self.j

    r = RunSampling("cpu", 0.02)
    r.rapl = r.probe.cpu.rapl = Counter()
    r.unavailable.pop("energy", None)
    with r:
        time.sleep(0.1)
    s = r.summary(100)
    n = s["samples"]
    assert s["energy_j"] == pytest.approx(0.5 * (n - 1))
    assert s["energy_per_sample_j"] == pytest.approx(s["energy_j"] / 100)
    assert s["power_w"] == pytest.approx(s["energy_j"] / s["wall_s"])
    assert "RAPL" in s["energy_source"]


def test_run_sampling_on_a_cuda_device_through_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU side of bench's sampling without a GPU: NVML's stand-in (no energy counter,
    312.5 W, 87% busy, this process holding 9 GiB) and torch.cuda's figures."""
    fake = FakeNvml()
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: [SimpleNamespace(pid=os.getpid(), usedGpuMemory=9 * GiB)]
    monkeypatch.setattr(sampling, "open_nvml", lambda required, indices=None: (Nvml(fake), None))
    monkeypatch.setattr(sampling, "nvml_index_of", lambda i, nv: 1)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=None: 6 * GiB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=None: 8 * GiB)
    with RunSampling("cuda:0", 0.02) as r:
        time.sleep(0.12)
    s = r.summary(1000, item="token")
    gpu = s["gpu"]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB" and gpu["memory_used_peak"] == 11 * GiB  # NVML's device 1
    assert gpu["process_memory_peak"] == 9 * GiB and gpu["torch_reserved_peak"] == 8 * GiB
    assert gpu["torch_allocated_peak"] == 6 * GiB and gpu["utilisation_mean"] == pytest.approx(0.87)
    assert s["device_busy"] == pytest.approx(0.87) and "NVML utilisation" in s["device_busy_source"]
    assert s["energy_j"] == pytest.approx(312.5 * s["wall_s"]) and "power readings x time" in s["energy_source"]
    assert s["energy_per_token_j"] == pytest.approx(s["energy_j"] / 1000)
    text = "\n".join(sampling_lines(s, item="token"))
    assert "NVIDIA A100-SXM4-80GB (NVML): utilisation 87.0%" in text and "J per token" in text
    assert "the device was busy 87.0% of the timed steps, idle 13.0%" in text
