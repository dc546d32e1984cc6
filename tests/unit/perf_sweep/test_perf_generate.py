"""The generation benchmark's plan, workload and statistics (pure; no model)."""
from __future__ import annotations

import numpy as np

from perf_sweep.generate_bench import plan_arms
from perf_sweep.generate_report import render_generate_markdown, targets
from perf_sweep.generate_workload import RequestTiming, Sla, long_tailed_lengths, poisson_workload, summarise


def test_output_lengths_are_long_tailed_between_16_and_256_and_seeded():
    lengths = long_tailed_lengths(2000, seed=3)
    assert min(lengths) >= 16 and max(lengths) <= 256 and lengths == long_tailed_lengths(2000, seed=3)
    assert np.median(lengths) < np.mean(lengths) < 2 * np.median(lengths)  # a long right tail
    assert max(lengths) == 256


def test_poisson_arrivals_have_the_asked_rate():
    workload = poisson_workload(4000, rate=2.0, seed=1)
    gaps = np.diff([w.arrival_s for w in workload])
    assert workload[0].arrival_s == 0 and abs(gaps.mean() - 0.5) < 0.03


def test_plan_compares_three_policies_per_rate_plus_the_controls():
    arms = plan_arms(rates=(0.5, 1.0), count=8)
    names = [a.name for a in arms]
    assert {"continuous@0.5", "static@1", "one_at_a_time@1"} <= set(names)
    assert any(a.fixed_length for a in arms if a.name.startswith("equal-length"))
    assert {a.prefix_sharing for a in arms if a.name.startswith("prefix")} == {True, False}


def test_summary_and_targets_from_token_times():
    sla = Sla(ttft_s=1.0, itl_s=0.2)
    fast = [RequestTiming(0.0, (0.5, 0.6, 0.7)), RequestTiming(1.0, (1.2, 1.3))]
    slow = [RequestTiming(0.0, (3.0, 3.5)), RequestTiming(1.0, (6.0, 6.1))]
    a = {"name": "continuous@1", "rate": 1.0, **summarise(fast, [2, 2, 1], 2, sla)}
    b = {"name": "static@1", "rate": 1.0, **summarise(slow, [1, 1], 2, sla)}
    assert a["sla_met"] == 2 and b["sla_met"] == 0 and a["mean_occupancy"] == round(5 / 3 / 2, 3)
    lines = targets([a, b])
    assert lines[0].startswith("- PASS") and "P99 TTFT" in lines[0]
    assert "## Targets" in render_generate_markdown({"machine": "m", "command": "c", "sla": {"ttft_s": 1, "itl_s": 0.2},
                                                      "settings": {}, "arms": [a, b]}, [])


def test_the_report_names_the_command_as_it_was_run(monkeypatch):
    """`make perf-generate QUICK=1` runs `python -m perf_sweep.generate_bench --quick`, whose main() gets
    argv=None: the report said `python -m perf_sweep.generate_bench ` (the full run's command)."""
    import sys

    from perf_sweep.generate_bench import command_line

    monkeypatch.setattr(sys, "argv", ["generate_bench.py", "--quick"])
    assert command_line(None) == "python -m perf_sweep.generate_bench --quick"
    assert command_line(["--rates", "0.5", "1"]) == "python -m perf_sweep.generate_bench --rates 0.5 1"


def test_quick_keeps_the_rates_and_count_it_was_given():
    """`--quick --rates 0.5 --count 3` ran rate 1.0 with 6 requests per arm, saying nothing."""
    quick = plan_arms(quick=True)
    assert {a.rate for a in quick if not a.name.startswith("prefix")} == {1.0} and {a.count for a in quick if not a.name.startswith("prefix")} == {6}
    given = plan_arms(rates=[0.5], count=3, quick=True)
    assert {a.rate for a in given if not a.name.startswith("prefix")} == {0.5}
    assert {a.count for a in given if not a.name.startswith("prefix")} == {3}
    assert {a.rate for a in plan_arms()} >= {0.25, 0.5, 1.0}
