"""Chapter 8's reading of what the monitor and the census cost (`lib.studies.practice.reading.cost_numbers`), on the
committed results with planted shares: a target met or missed follows the largest share on each input, every
(step, window count) gets a row, and a result not run is said to be not measured."""
import copy
import dataclasses

import pytest

from lib.book import results
from lib.studies.practice.reading import cost_numbers

NAMES = ("monitor_overhead", "census_cost")
pytestmark = pytest.mark.skipif(not all(results.exists(n, "full") for n in NAMES), reason="costs not committed")


def _planted(name, model: float, peaked: float):
    res = results.load(name, "full")
    data = copy.deepcopy(res.data)
    for arm in data["arms"]:
        for ev in arm["events"]:
            ev["share"] = model if ev["input"] == "model" else peaked
    return dataclasses.replace(res, data=data)


def test_targets_follow_the_largest_share_on_each_input():
    mo, cc = _planted("monitor_overhead", 0.005, 0.002), _planted("census_cost", 0.2, 0.01)
    n = cost_numbers(mo, cc)
    words = n["cost_words"]
    assert "the monitor meets its target of 1.0 %" in words and "misses it on the peaked" not in words.split(";")[0]
    assert "the census misses its target of 5.0 %" in words.split(";")[1]
    rows = [ln for ln in n["cost_md"].splitlines()[2:]]
    want = sum(len({ev.get("rows", 0) for ev in a["events"]}) for r in (mo, cc) for a in r.data["arms"])
    assert len(rows) == want and "0.50 %" in n["cost_md"] and "20 %" in n["cost_md"]


def test_a_cost_not_run_is_said_not_measured():
    assert cost_numbers(None, None)["cost_words"] == "not measured yet"
    words = cost_numbers(results.load("monitor_overhead", "full"), None)["cost_words"]
    assert "the census's cost is not measured yet" in words
