"""The serving simulation's charts (report/simulation.py) drawn from saved figures."""

from __future__ import annotations

from torch_footprint.report.simulation import simulation_charts


def _row(name: str, rates: list[float]) -> dict:
    sweep = [{"request_rate": r, "output_tokens_per_s": 100.0 * r, "e2e_s": {"p50": 1.0 + r}} for r in rates]
    return {"accelerator": name, "simulation": {"sweep": sweep, "kv_over_time": [[1.0, 0.25], [2.0, 0.5]]}}


def test_throughput_against_latency_one_point_per_rate() -> None:
    html = simulation_charts([_row("h100-sxm", [1, 2, 4, 8]), _row("l4", [1, 2])])
    assert html.count('class="plot llm-sweep"') == 1 and html.count("<circle") == 6
    assert "h100-sxm at 8 req/s: 800 tokens/s" in html
    assert 'class="plot llm-kv"' in html and "at most 50% of the cache" in html


def test_no_sweep_no_sweep_chart() -> None:
    html = simulation_charts([_row("h100-sxm", [1])])
    assert "llm-sweep" not in html and "llm-kv" in html
    assert simulation_charts([{"accelerator": "x", "simulation": None}]) == ""
