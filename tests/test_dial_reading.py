"""lib/studies/dial/table.py: the common-horizon re-judging, bit-identical repeats and the SR/RNE noise ratio."""
from types import SimpleNamespace

import numpy as np
import pytest

from lib.studies.dial import table as dr

WARM = 20


def _curve(n, blow_at=None, seed=0):
    """A falling loss curve of n steps; from blow_at on it climbs by 3 nats (an explosion)."""
    rng = np.random.default_rng(seed)
    loss = 3.0 * np.exp(-np.arange(n) / 50.0) + 1.0 + 0.01 * rng.standard_normal(n)
    if blow_at is not None:
        loss[blow_at:] += np.linspace(0, 3, n - blow_at)
    return loss.astype(np.float32), np.full(n, 0.5, np.float32)


def _result(name, commit, bits, runs):
    """runs: [(arm, seed, curve kwargs)] -> a Result-like object with summaries judged like the harness does."""
    from lib.training import outcome, proxy
    data_runs, arrays = [], {}
    for arm, seed, kw in runs:
        rid = f"{arm}_s{seed}_lr0.005"
        loss, gn = _curve(**kw, seed=seed)
        c = outcome.classify(loss, gn, WARM)
        data_runs.append(dict(id=rid, arm=arm, seed=seed, lr=5e-3, outcome=c["outcome"], onset=c["onset"],
                              steps=len(loss), final=c["final"]))
        arrays[f"{rid}__loss"], arrays[f"{rid}__grad_norm"] = loss, gn
    return SimpleNamespace(name=name, meta={"git_commit": commit, "config": {"warmup": WARM}},
                           data=dict(bits=bits, runs=data_runs), arrays=arrays)


def test_late_explosion_is_judged_at_the_common_horizon():
    """RNE explodes at step 700 of a 1000-step run, SR explodes at 300 of 500: at the horizon (500 steps) RNE
    trained and SR failed, which the whole-run outcomes (both exploded) hide."""
    a = _result("precision_dial_fine", "abc", [5], [("paper_m5", 0, dict(n=1000, blow_at=700)),
                                                     ("fp32", 0, dict(n=900))])
    b = _result("precision_dial_sr", "abc", [5], [("paper_m5_sr", 0, dict(n=500, blow_at=300))])
    t = dr.at_common_horizon([a, b])
    assert t["horizon"] == {5: 500}
    row = {r["kind"]: r for r in t["rows"]}
    assert row["rne"]["full_outcome"] == "exploded" and row["rne"]["outcome"] == "stable"
    assert row["rne"]["steps"] == 500 and row["rne"]["full_steps"] == 1000
    assert row["sr"]["outcome"] == "exploded" and row["sr"]["onset"] is not None
    v = t["verdicts"]["5"]
    assert v["rne"] == ["stable"] and v["sr"] == ["exploded"]
    assert "SR failed in 1 of 1 seeds where RNE failed in 0 of 1" in v["reading"]
    f = dr.facts(t)
    assert f["sr_fails_first"] == [5] and f["sr_worse"] == [5] and f["count"][5]["sr"] == dict(n=1, failed=1)
    assert t["controls"][0]["steps"] == 900          # controls are not cut


def test_nonfinite_runs_keep_their_outcome_and_do_not_set_the_horizon():
    loss, gn = _curve(200)
    loss[150:] = np.nan
    a = _result("precision_dial", "abc", [3], [("paper_m3", 0, dict(n=800, blow_at=100)),
                                               ("paper_m3+fix", 0, dict(n=600))])
    a.data["runs"].append(dict(id="x", arm="paper_m3_sr", seed=0, lr=5e-3, outcome="nonfinite", onset=150,
                               steps=200, final=float("nan")))
    a.arrays["x__loss"], a.arrays["x__grad_norm"] = loss, gn
    t = dr.at_common_horizon([a])
    assert t["horizon"] == {3: 600}
    assert {r["kind"]: r["outcome"] for r in t["rows"]} == {"rne": "exploded", "fix": "stable", "sr": "nonfinite"}


def test_repeats_finds_bit_identical_and_differing_reruns():
    a = _result("precision_dial", "c1", [3], [("paper", 0, dict(n=300)), ("fp32", 0, dict(n=300))])
    b = _result("precision_dial_fine", "c2", [4], [("paper", 0, dict(n=250)), ("fp32", 1, dict(n=300))])
    r = dr.repeats([a, b])
    assert len(r) == 1 and r[0]["arm"] == "paper" and r[0]["steps"] == 250 and r[0]["identical"]
    b.arrays["paper_s0_lr0.005__loss"] = b.arrays["paper_s0_lr0.005__loss"].copy()
    b.arrays["paper_s0_lr0.005__loss"][77] += 1e-6
    r = dr.repeats([a, b])
    assert not r[0]["identical"] and r[0]["first_diff"] == 77


def test_repeats_skip_sr_runs_with_the_backward_bug():
    a = _result("precision_dial", "675045d", [3], [("paper_m3_sr", 0, dict(n=100))])
    b = _result("precision_dial_sr", "abc", [3], [("paper_m3_sr", 0, dict(n=100))])
    assert dr.repeats([a, b]) == []


def test_sr_error_ratio_matches_theory():
    r = dr.sr_error_ratio(5, n=1 << 18)
    # 2^18 samples: an RMS's relative sd ≈ 1/√(2n) ≈ 0.0014; 1 % is ≈ 7 sd
    assert r["rms_rne_ulp"] == pytest.approx(12 ** -0.5, rel=0.01)
    assert r["rms_sr_ulp"] == pytest.approx(6 ** -0.5, rel=0.01)
    assert r["bits_equiv"] == pytest.approx(0.5, abs=0.02)
    with pytest.raises(ValueError):
        dr.sr_error_ratio(0)


def test_claim_bias_not_coarseness_follows_the_runs():
    from lib.claims.table import derive_dial
    rne = _result("precision_dial_fine", "abc", [4], [("paper_m4", 0, dict(n=600, blow_at=200))])
    sr_fails = _result("precision_dial_sr", "abc", [4], [("paper_m4_sr", 0, dict(n=500, blow_at=250))])
    sr_trains = _result("precision_dial_sr", "abc", [4], [("paper_m4_sr", 0, dict(n=500))])
    # SR failing where RNE fails cannot refute the bias: SR's √2 × larger noise alone predicts it
    assert derive_dial([rne, sr_fails])["bias_not_coarseness"]["status"] == "inconclusive"
    assert derive_dial([rne, sr_trains])["bias_not_coarseness"]["status"] == "reproduced"
    assert derive_dial([rne]) == {} and derive_dial([]) == {}       # no SR run: no verdict
    buggy = _result("precision_dial_sr", "675045d", [4], [("paper_m4_sr", 0, dict(n=500))])
    assert derive_dial([rne, buggy]) == {}                          # only an invalid SR run: no verdict


def test_sr_failing_in_some_seeds_more_often_than_rne_is_reported():
    """SR fails in 2 of 3 seeds, RNE in 0 of 2: not "every SR seed failed" (sr_fails_first), but SR failed more often
    (sr_worse); at a width where both fail equally nothing is added."""
    a = _result("precision_dial_fine", "abc", [5, 6], [
        ("paper_m5", 0, dict(n=600)), ("paper_m5", 1, dict(n=600)),
        ("paper_m5_sr", 0, dict(n=600, blow_at=300)), ("paper_m5_sr", 1, dict(n=600)),
        ("paper_m5_sr", 2, dict(n=600, blow_at=350)),
        ("paper_m6", 1, dict(n=600)), ("paper_m6_sr", 1, dict(n=600))])
    t = dr.at_common_horizon([a])
    f = dr.facts(t)
    assert f["sr_fails_first"] == [] and f["sr_worse"] == [5]
    assert f["count"][5] == dict(rne=dict(n=2, failed=0), sr=dict(n=3, failed=2))
    assert "SR failed in 2 of 3 seeds where RNE failed in 0 of 2" in t["verdicts"]["5"]["reading"]
    assert "SR failed" not in t["verdicts"]["6"]["reading"]
