"""The δ-dose reading: thresholds, the stage-2 rule, equal-RMS sizes and the claim's verdicts, on synthetic results
with known answers (each verdict reachable, so none of these checks can pass whatever the data)."""
import numpy as np
import pytest

from lib.book import results
from lib.studies.dose import reading as d


def fake(cells, rms_per_lam=None, name="delta_dose"):
    """A Result holding one run per (component, λ, seed, outcome); injected RMS = rms_per_lam[c](λ) (default λ)."""
    runs, arrays = [], {}
    for comp, lam, seed, out in cells:
        rid = f"{d.arm_name(comp, lam)}_s{seed}_lr0.0005"
        runs.append(dict(id=rid, arm=d.arm_name(comp, lam), attn=d.dose_spec("paper/round_block=512", comp, lam),
                         seed=seed, tag="", outcome=out, steps=1500, onset=900 if out == "exploded" else None,
                         best=0.9, final=0.9 if out == "stable" else 2.5))
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
    small_bias = {"bias": lambda lam: 0.01 * lam}          # bias-only is far smaller per row than the other parts
    bias, noise = _three("bias", 100, 300), _three("noise", 30, 100)
    # bias breaks at RMS 3, below the RMS at which true (5) and noise (30) still stay stable; removing the bias
    # (noise-only) moves the threshold from λ 10 up to λ 100
    v = d.claim_delta_bias_dose([fake(bias + noise + _three("true", 5, 10), small_bias)])
    assert v["status"] == "reproduced" and "bias λ* 300" in v["evidence"]
    # potent per unit size, but the true error breaks at the same λ as noise-only: the size sets it
    assert d.claim_delta_bias_dose([fake(bias + noise + _three("true", 30, 100), small_bias)])["status"] == "partly"
    # bias as large per row as the rest: it breaks at RMS 300, above where true survives: no potency
    assert d.claim_delta_bias_dose([fake(bias + noise + _three("true", 30, 100))])["status"] == "not reproduced"
    # a degraded run counts as broken in this reading
    v = d.claim_delta_bias_dose([fake(_three("bias", 100, 300, hi_out="degraded") + noise + _three("true", 5, 10),
                                      small_bias)])
    assert v["status"] == "reproduced"
    # bias never breaks: censored, no verdict
    r = fake(_three("bias", 100, 300, hi_out="stable") + noise + _three("true", 5, 10), small_bias)
    assert d.claim_delta_bias_dose([r])["status"] == "inconclusive"
    # one seed per λ: inconclusive
    r = fake([("bias", 100, 0, "stable"), ("bias", 300, 0, "exploded"), ("noise", 30, 0, "stable"),
              ("noise", 100, 0, "exploded"), ("true", 5, 0, "stable"), ("true", 10, 0, "exploded")], small_bias)
    assert d.claim_delta_bias_dose([r])["status"] == "inconclusive"
    assert d.claim_delta_bias_dose([results.Result("x", "full", {}, dict(runs=[], lr=1e-3), {})]) is None


def test_prereg_rule_kept_beside_the_rule_in_use():
    """The rule fixed before the runs (failed = exploded / non-finite; bias's failing RMS below noise's largest
    unfailed λ's) is still computed, and can give each of its answers."""
    small_bias = {"bias": lambda lam: 0.01 * lam}
    assert d.prereg_verdict([fake(_three("bias", 100, 300) + _three("noise", 30, 100), small_bias)]) == "reproduced"
    assert d.prereg_verdict([fake(_three("bias", 100, 300) + _three("noise", 30, 100))]) == "not reproduced"
    assert d.prereg_verdict([fake(_three("bias", 100, 300, hi_out="degraded") + _three("noise", 30, 100),
                                  small_bias)]) == "inconclusive"


def test_unstable_reading_and_spike():
    r = fake(_three("noise", 10, 30, hi_out="degraded"))
    assert d.thresholds([r])["noise"]["censored"] and d.unstable_thresholds([r])["noise"]["lam_star"] == 30.0
    rid = r.data["runs"][0]["id"]
    w = np.ones((30, 4)); w[:, 2] = np.linspace(1, 5, 30)        # layer 2 grows 5×, the others stay
    r.arrays[f"{rid}__wq_norm_layer"] = w
    sp = d.wq_spike(r, rid)
    assert sp["layer"] == 2 and sp["ratio"] == pytest.approx(5.0) and sp["step"] == 1450
    rows = d.run_table([r])
    assert len(rows) == 6 and rows[0]["spike_layer"] == 2 and rows[1]["spike_layer"] is None


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


def test_chapter_numbers_name_the_placement_and_each_stages_seeds():
    """The δ error's placement in words and the seeds of the two stages, from the results (planted: stage 1 alone,
    then with a stage-2 result)."""
    s1 = fake([("true", 10.0, 0, "stable"), ("true", 30.0, 0, "exploded")])
    s1.data.update(placement="paper/round_block=512", seeds=[0])
    n = d.chapter_numbers([s1])
    assert n["placement"] == "paper placement, 512-key blocks"
    assert n["stage1_seeds"] == "0" and n["stage2_seeds"].startswith("none")
    s2 = fake([("true", 10.0, 1, "stable"), ("true", 10.0, 2, "stable")], name="delta_dose_seeds")
    s2.data.update(seeds=[1, 2])
    assert d.chapter_numbers([s1, s2])["stage2_seeds"] == "1, 2"
