"""lib/training/horizon.py: the common horizon skips non-finite runs; re-judging a late explosion at an early horizon."""
import numpy as np
import pytest

from lib.training import horizon


def _late_blowup(n=600, at=500):
    loss = np.full(n, 1.0)
    loss[at:] = 4.0                       # a jump far above the "exploded" threshold, late in the run
    return loss, np.ones(n)


def test_common_horizon_ignores_nonfinite_runs():
    rows = [dict(steps=900, outcome="stable"), dict(steps=700, outcome="exploded"), dict(steps=80, outcome="nonfinite")]
    assert horizon.common_horizon(rows) == 700
    assert horizon.common_horizon([dict(steps=5, outcome="nonfinite")]) is None


def test_rejudge_before_and_after_the_blowup():
    loss, gn = _late_blowup()
    row = dict(id="r", steps=600, outcome="exploded", onset=500)
    early = horizon.rejudge(row, loss, gn, warmup=10, h=400)
    assert early["outcome"] == "stable" and early["steps"] == 400 and early["full_outcome"] == "exploded"
    late = horizon.rejudge(row, loss, gn, warmup=10, h=600)
    assert late["outcome"] == "exploded" and late["horizon"] == 600
    assert horizon.rejudge(dict(row, outcome="nonfinite"), loss, gn, 10, 400)["outcome"] == "nonfinite"
    with pytest.raises(ValueError, match="longer than run"):
        horizon.rejudge(row, loss, gn, 10, 601)


def test_judge_result_uses_the_shortest_run_of_the_result():
    from types import SimpleNamespace
    late, gn = _late_blowup(n=600, at=500)
    early, _ = _late_blowup(n=400, at=300)
    runs = [dict(id="a", steps=600, outcome="exploded", onset=500), dict(id="b", steps=400, outcome="exploded",
                                                                       onset=300)]
    res = SimpleNamespace(data=dict(runs=runs), meta=dict(config=dict(warmup=10)),
                          arrays={"a__loss": late, "a__grad_norm": gn, "b__loss": early, "b__grad_norm": gn[:400]})
    h, j = horizon.judge_result(res)
    assert h == 400 and j["a"]["outcome"] == "stable" and j["b"]["outcome"] == "exploded"


def test_arm_words_and_stable_arms_read_judged_rows_in_seed_order():
    runs = [dict(id="a2", arm="a", seed=2, tag=""), dict(id="a0", arm="a", seed=0, tag=""),
            dict(id="a0r", arm="a", seed=0, tag="repeat"), dict(id="b0", arm="b", seed=0, tag="")]
    judged = {"a2": dict(outcome="exploded", onset=647), "a0": dict(outcome="degraded", onset=None),
              "a0r": dict(outcome="stable", onset=None), "b0": dict(outcome="stable", onset=12)}
    assert horizon.arm_words(runs, judged, "a") == "degraded, exploded (647)"      # seed order, repeat left out
    assert horizon.arm_words(runs, judged, "a", onsets=False) == "degraded, exploded"
    assert horizon.arm_words(runs, judged, "b") == "stable"                        # no onset for a stable run
    assert horizon.arm_words(runs, judged, "c") == ""
    assert horizon.stable_arms(runs, judged) == ["b"]
    judged["a2"] = judged["a0"] = dict(outcome="stable", onset=None)
    assert horizon.stable_arms(runs, judged) == ["a", "b"]


def test_outcome_words_is_the_one_formatter():
    from lib.training.outcome import words
    assert words(["exploded", "stable", "degraded"], [647, None, 1136]) == "exploded (647), stable, degraded (1136)"
    assert words(["stable"] * 3, compact=True) == "3 × stable"
    assert words(["stable", "exploded"], compact=True) == "stable, exploded"      # not all alike: the list
    assert words(["stable"] * 2, [None, 5], compact=True) == "stable, stable (5)"  # an onset keeps the list
    assert words([]) == ""
