"""`lib.studies.delta.reading.telemetry_sign` and its figure on synthetic telemetry arrays with a planted answer:
a head whose Σ Δδ is positive at every step passes the sign test upward, one negative at every step downward, fair
coin flips pass neither; zeros and NaN steps are not counted; the fix arm's zeroed-row shares are averaged per layer."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from scipy.stats import binomtest

from lib.book import plotting
from lib.studies.delta import figures as dp
from lib.studies.delta import reading as dr

S, N, L, H = 2, 60, 2, 3


class _Res:
    """A stand-in for a `healthy_headline` result: runs and `<id>__...` telemetry arrays."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.data, self.arrays = {"runs": []}, {}
        self.meta = {"scale": "ci", "device": "cpu", "git_commit": "0" * 40}
        for arm, attn in (("paper_x", "paper"), ("paper_x+fix", "paper+fix")):
            for s in range(S):
                rid = f"{arm}_s{s}"
                self.data["runs"].append({"id": rid, "arm": arm, "seed": s, "attn": attn, "tag": ""})
                dd = rng.choice([-1.0, 1.0], size=(N, L, H)) * rng.uniform(0.5, 2.0, (N, L, H))
                dd[:, 0, 0] = np.abs(dd[:, 0, 0])          # always positive
                dd[:, 1, 2] = -np.abs(dd[:, 1, 2])         # always negative
                dd[3, 0, 1], dd[4, 0, 1] = 0.0, np.nan     # neither counts
                self.arrays[f"{rid}__delta_err_sum"] = dd
                self.arrays[f"{rid}__step"] = np.arange(N) * 50.0
                self.arrays[f"{rid}__fix_zero_rows"] = (np.full((N, L), np.nan) if "fix" not in arm else
                                                        np.tile([0.01, 0.05], (N, 1)) * (1 + s))
        # a repeat run (tagged) must be left out
        self.data["runs"].append({"id": "paper_x_s0_rep", "arm": "paper_x", "seed": 0, "attn": "paper",
                                  "tag": "repeat"})


def test_counts_tests_and_zero_rows():
    res = _Res()
    rd = dr.telemetry_sign(res)
    assert list(rd["arms"]) == ["paper_x", "paper_x+fix"]
    r = rd["arms"]["paper_x"]
    assert r["k"].shape == (S, L, H) and r["seeds"] == [0, 1]
    dd = np.stack([res.arrays[f"paper_x_s{s}__delta_err_sum"] for s in range(S)])
    ok = np.isfinite(dd) & (dd != 0)
    assert np.array_equal(r["n"], ok.sum(1)) and np.array_equal(r["k"], ((dd > 0) & ok).sum(1))
    assert np.all(r["n"][:, 0, 1] == N - 2) and np.all(r["n"][:, 0, 0] == N)
    want = binomtest(int(r["k"][0, 0, 2]), int(r["n"][0, 0, 2]), 0.5, alternative="greater").pvalue
    assert r["p_greater"][0, 0, 2] == pytest.approx(want)
    # the planted heads pass, each in its direction, in every seed; the coin flips rarely do
    thr = rd["alpha"] / (L * H)
    assert np.all(r["p_greater"][:, 0, 0] < thr) and np.all(r["p_less"][:, 1, 2] < thr)
    assert np.all(r["n_up"] >= 1) and np.all(r["n_down"] >= 1)
    assert np.all(r["nb"][:, 0, 0] == 1.0) and np.all(r["nb"][:, 1, 2] == -1.0)
    assert np.all(np.isnan(r["zero_rows"]))
    f = rd["arms"]["paper_x+fix"]
    assert np.allclose(f["zero_rows"], [[0.01, 0.05], [0.02, 0.10]]) and f["zero_rows_max"].max() == pytest.approx(0.1)


def test_lag1_autocorrelation_of_alternating_signs_is_minus_one():
    res = _Res()
    for s in range(S):
        res.arrays[f"paper_x_s{s}__delta_err_sum"][:, 1, 0] = np.where(np.arange(N) % 2, 1.0, -1.0)
    r = dr.telemetry_sign(res, arms=["paper_x"])["arms"]["paper_x"]
    assert np.allclose(r["ac1"][:, 1, 0], -1.0) and np.all(r["frac"][:, 1, 0] == 0.5)


def test_numbers_and_their_keys_without_a_result():
    res = _Res()
    n = dr.telemetry_numbers(dr.telemetry_sign(res))
    assert n["p_cells"] == S * L * H and n["p_up"] == int(dr.telemetry_sign(res)["arms"]["paper_x"]["n_up"].sum())
    assert n["f_zero_layer"] == 1 and n["f_zero_max"] == pytest.approx(0.1)
    assert np.isnan(n["f_zero_rank_corr"])       # two layers: too few to rank
    assert n["p_zero_line"] == "none (no fix)"
    assert n["p_step_first"] == 0 and n["p_step_last"] == 50 * (len(dr.telemetry_sign(res)["arms"]["paper_x"]
                                                                    ["steps"]) - 1)       # the steps recorded
    empty = dr.telemetry_numbers(None)
    assert set(empty) == set(n) and all(v is None for v in empty.values())
    with pytest.raises(ValueError, match="no run of arm"):
        dr.telemetry_sign(res, arms=["fa2"])
    with pytest.raises(ValueError, match="two arms"):
        dr.telemetry_numbers(dr.telemetry_sign(res, arms=["paper_x"]))


@pytest.mark.parametrize("with_result", [True, False])
def test_figure_is_readable(with_result):
    fig = dp.telemetry_sign_strip(dr.telemetry_sign(_Res()) if with_result else None)
    try:
        assert plotting.check_figure(fig) == []
        if with_result:
            assert len(fig.axes) == 2
    finally:
        plt.close(fig)


def test_leans_count_the_cells_on_each_side_and_say_so(monkeypatch):
    """`telemetry_leans`: per arm, the (head, seed) cells whose share of positive steps lies above / below ½, their
    median, the sign test across cells and the fix's largest zeroed share; `lean_words` says each."""
    from lib.training import runs as training_runs
    monkeypatch.setattr(training_runs, "arm_label", lambda res, arm: {"paper_x": "planted", "paper_x+fix": "fixed"}[arm])
    res = _Res()
    leans = dr.telemetry_leans(res)
    reading = dr.telemetry_sign(res)
    for x in leans:
        frac = reading["arms"][x["arm"]]["frac"]
        assert x["cells"] == S * L * H and x["above"] == int((frac > 0.5).sum())
        assert x["below"] == int((frac < 0.5).sum()) and x["median"] == pytest.approx(float(np.median(frac)))
        want = binomtest(x["above"], x["above"] + x["below"], 0.5, alternative="greater").pvalue
        assert x["p_greater"] == pytest.approx(want)
    assert leans[0]["zero_max"] is None and leans[1]["zero_max"] == pytest.approx(0.10)   # 0.05 × (1 + seed 1)
    words = dr.lean_words(leans)
    assert words.startswith(f"planted: {leans[0]['above']} of {S * L * H} (head, seed) cells above ½")
    assert "fixed: " in words and "at most 10.0% of a layer's rows zeroed at one step" in words
    assert dr.lean_words([]) == ""
