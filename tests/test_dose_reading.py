"""The δ-dose reading: thresholds, the stage-2 rule, equal-RMS sizes and the claim's verdicts, on synthetic results
with known answers (each verdict reachable, so none of these checks can pass whatever the data)."""
import numpy as np
import pytest

from lib.book import results
from lib.readings import dose_reading as d


def fake(cells, rms_per_lam=None, name="delta_dose"):
    """A Result holding one run per (component, λ, seed, outcome); injected RMS = rms_per_lam[c](λ) (default λ)."""
    runs, arrays = [], {}
    for comp, lam, seed, out in cells:
        rid = f"{d.arm_name(comp, lam)}_s{seed}_lr0.0005"
        runs.append(dict(id=rid, arm=d.arm_name(comp, lam), attn=d.dose_spec("paper/round_block=512", comp, lam),
                         seed=seed, tag="", outcome=out, steps=1500, onset=900 if out == "exploded" else None))
        steps = np.arange(0, 1500, 50, dtype=float)
        r = (rms_per_lam or {}).get(comp, lambda x: x)(lam)
        arrays[f"{rid}__step"] = steps
        arrays[f"{rid}__dose_inj_rms"] = np.where(steps < 900, r, 1e6 * r)   # after the onset: ignored
        arrays[f"{rid}__dose_dd_rms"] = np.full(len(steps), 1.0)
    return results.Result(name, "full", {}, dict(runs=runs, lr=5e-4), arrays)


def test_parse_roundtrip_and_errors():
    assert d.parse_dose(d.dose_spec("paper/round_block=512", "bias", 300)) == ("bias", 300.0)
    assert d.parse_dose("dose/paper") == ("true", 1.0)
    assert d.parse_dose("paper") is None
    with pytest.raises(ValueError):
        d.parse_dose("dose/paper/c=sideways/lam=3")
    with pytest.raises(ValueError):
        d.dose_spec("paper", "true", -1)


def test_threshold_majority_and_brackets():
    cells = {10.0: [(0, "stable", "a")], 30.0: [(0, "degraded", "b")], 100.0: [(0, "exploded", "c")]}
    t = d.threshold(cells)
    assert (t["lam_star"], t["lam_lo"], t["censored"]) == (100.0, 30.0, False)   # degraded is not a failure
    two_of_three = {30.0: [(0, "exploded", "a"), (1, "stable", "b"), (2, "nonfinite", "c")]}
    assert d.threshold(two_of_three)["lam_star"] == 30.0
    one_of_three = {30.0: [(0, "exploded", "a"), (1, "stable", "b"), (2, "stable", "c")]}
    assert d.threshold(one_of_three)["censored"]


def test_stage2_rule_cases():
    s1 = fake([("true", 10, 0, "stable"), ("true", 30, 0, "exploded"), ("true", 100, 0, "exploded"),
               ("bias", 30, 0, "stable"), ("bias", 300, 0, "stable"),
               ("noise", 10, 0, "exploded"), ("noise", 30, 0, "exploded")])
    plan = d.stage2_runs(d.outcomes([s1]))
    assert ("true", 10.0, (1, 2)) in plan and ("true", 30.0, (1, 2)) in plan
    assert ("bias", 300.0, (1, 2)) in plan and ("bias", 3000.0, (0, 1, 2)) in plan   # censored: extend 10×
    assert ("noise", 1.0, (0, 1, 2)) in plan and ("noise", 10.0, (1, 2)) in plan     # failed at the bottom
    assert len(plan) == 6


def _three(comp, lo, hi, lo_out="stable", hi_out="exploded"):
    return [(comp, lo, s, lo_out) for s in (0, 1, 2)] + [(comp, hi, s, hi_out) for s in (0, 1, 2)]


def test_claim_verdicts_each_reachable():
    small_bias = {"bias": lambda lam: 0.01 * lam, "noise": lambda lam: lam}
    # bias fails at λ 300 (RMS 3), noise still up at λ 30 (RMS 30): bias fails at a smaller injected size
    r = fake(_three("bias", 100, 300) + _three("noise", 30, 100), small_bias)
    v = d.claim_delta_bias_dose([r])
    assert v["status"] == "reproduced" and "bias: λ* 300" in v["evidence"]
    # same λ thresholds but bias as large per row as noise: size alone explains them
    r = fake(_three("bias", 100, 300) + _three("noise", 30, 100))
    assert d.claim_delta_bias_dose([r])["status"] == "not reproduced"
    # bias never fails: censored, no verdict
    r = fake(_three("bias", 100, 300, hi_out="stable") + _three("noise", 30, 100), small_bias)
    assert d.claim_delta_bias_dose([r])["status"] == "inconclusive"
    # one seed per λ: inconclusive
    r = fake([("bias", 100, 0, "stable"), ("bias", 300, 0, "exploded"), ("noise", 30, 0, "stable"),
              ("noise", 100, 0, "exploded")], small_bias)
    assert d.claim_delta_bias_dose([r])["status"] == "inconclusive"
    assert d.claim_delta_bias_dose([results.Result("x", "full", {}, dict(runs=[], lr=1e-3), {})]) is None


def test_rms_ignores_steps_after_onset_and_unions_results():
    s1 = fake([("bias", 300, 0, "exploded")], {"bias": lambda lam: 2.0})
    s2 = fake([("bias", 300, 1, "exploded"), ("bias", 300, 2, "stable")], {"bias": lambda lam: 4.0},
              name="delta_dose_seeds")
    t = d.thresholds([s1, s2])["bias"]
    assert t["lam_star"] == 300.0 and t["n_seeds_hi"] == 3
    assert t["rms_hi"] == pytest.approx(4.0)          # median of 2, 4, 4 (the onset's 1e6 spike ignored)
    assert d.natural_rms([s1, s2]) == pytest.approx(1.0)


def test_stage2_entry_is_the_rules_plan_on_the_committed_stage1():
    """The full stage-2 grid is the rule's plan on the committed stage 1, restricted to the components it names."""
    from lib.book import registry
    if not results.exists("delta_dose", "full"):
        pytest.skip("no committed full delta_dose (stage 1) result")
    plan = d.stage2_runs(d.outcomes([results.load("delta_dose", "full")]))
    cfg = registry.resolve("delta_dose_seeds", "full")
    seeds = tuple(cfg["seeds"])
    entry = {(c, float(lam), seeds) for c, lams in cfg["grid"].items() for lam in lams}
    rule = {cell for cell in plan if cell[0] in cfg["grid"]}
    assert entry == rule
