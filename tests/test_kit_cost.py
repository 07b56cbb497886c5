"""The kit's cost benchmarks at ci scale on the CPU: census_cost (the training loop's census beside a GPT-2 step) and
monitor_overhead (the attention monitor in the step): what each event saw (the planted peaked q, k, v reach the census,
the model's own do not tie), the shares as their definitions say, and the registered full configurations."""
import statistics

import pytest

from lib.book import registry
from lib.book.runner import run_live


@pytest.fixture(scope="module")
def census_cost():
    return run_live("census_cost", "ci")["data"]


@pytest.fixture(scope="module")
def monitor_overhead():
    return run_live("monitor_overhead", "ci")["data"]


def _events(data):
    return {ev["input"]: ev for arm in data["arms"] for ev in arm["events"]}


@pytest.mark.parametrize("name", ["census_cost", "monitor_overhead"])
def test_planted_ties_reach_the_census_and_the_model_s_own_do_not(name, request):
    data = request.getfixturevalue(name)
    ev = _events(data)
    # attention_shaped(peaked=True): keys 0 and 1 tied ≈ 16 above the rest, so every row from 1 on is tied and most
    # sit in the sticky-bit window (≈ 0.66 at T = 64); a fresh model's random scores tie almost never.
    assert ev["peaked"]["window_rate"] > 0.5 and ev["model"]["window_rate"] < 0.05
    assert data["device"] == "cpu" and data["batch_tokens"] == 4 * 64


def test_census_cost_share_is_the_event_over_every_steps(census_cost):
    cfg = registry.resolve("census_cost", "ci")
    (arm,) = census_cost["arms"]
    assert len(arm["step_ms"]) == cfg["rounds"] and arm["step_ms_median"] == statistics.median(arm["step_ms"])
    for ev in arm["events"]:
        assert ev["rows"] == 2 and len(ev["ms"]) == cfg["event_reps"] and ev["ms_median"] > 0
        assert ev["share"] == pytest.approx(ev["ms_median"] / (200 * arm["step_ms_median"]))
        assert ev["meets"] == (ev["share"] <= 0.05)
    assert census_cost["worst_share"] == max(ev["share"] for ev in arm["events"])
    assert census_cost["meets"] == all(ev["meets"] for ev in arm["events"])


def test_monitor_overhead_share_is_the_extra_over_every_steps(monitor_overhead):
    cfg = registry.resolve("monitor_overhead", "ci")
    (arm,) = monitor_overhead["arms"]
    for ev in arm["events"]:
        assert len(ev["plain_ms"]) == len(ev["event_ms"]) == cfg["event_reps"]
        assert ev["extra_ms"] == pytest.approx(statistics.median(ev["event_ms"]) - statistics.median(ev["plain_ms"]))
        assert ev["share"] == pytest.approx(ev["extra_ms"] / (100 * arm["step_ms_median"]))
        # the monitor's own census and σ₁ time (its records) sits inside the event step
        assert 0 < ev["monitor_ms"] < max(ev["event_ms"])
    assert monitor_overhead["meets"] == all(ev["share"] <= 0.01 for ev in arm["events"])


def test_full_configurations_are_the_registered_measurements():
    cc, mo = registry.resolve("census_cost", "full"), registry.resolve("monitor_overhead", "full")
    gpt2 = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 50304}
    assert cc["model"] == mo["model"] == gpt2 and cc["batch_size"] == mo["batch_size"] == 32
    assert (cc["every"], cc["target"], cc["placements"]) == (200, 0.05, ["authors", "fa2"])
    assert (mo["every"], mo["target"], mo["batch_rows"]) == (100, 0.01, 4)
    assert {a["attn"] for a in cc["arms"]} == {"sdpa", "paper/round_block=512"} and all(a["compile"] for a in cc["arms"])
    assert {a["compile"] for a in mo["arms"]} == {True, False}
