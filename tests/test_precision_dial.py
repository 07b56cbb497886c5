"""lib/studies/dial/precision_dial.py: arm specs, the reading of outcomes, and the CI code path through the kernel."""
import numpy as np
import pytest

from lib.book import registry
from lib.studies.dial import precision_dial as pd
from lib.book.runner import run_live
from lib.studies.dial import table as dr
from lib.training.spec import AttnSpec


def test_arm_specs_parse_to_the_intended_numerics():
    specs = pd.arm_specs(4)
    assert set(specs) == {"paper_m4", "paper_m4_sr", "paper_m4+fix", "paper_m4_dfp32o", "paper_m4_sm32",
                          "paper_m4+fix_sm32"}
    rne, sr = AttnSpec.parse(specs["paper_m4"]), AttnSpec.parse(specs["paper_m4_sr"])
    fix, dfo = AttnSpec.parse(specs["paper_m4+fix"]), AttnSpec.parse(specs["paper_m4_dfp32o"])
    assert rne.numerics.mantissa_bits == 4 and rne.numerics.rounding == "rne" and rne.fix is None
    assert sr.numerics.rounding == "sr" and sr.numerics.replace(rounding="rne") == rne.numerics
    assert fix.fix == "beta_split" and fix.numerics == rne.numerics
    assert dfo.numerics.delta_source == "fp32_o" and dfo.numerics.replace(delta_source="saved_o") == rne.numerics
    sm, fsm = AttnSpec.parse(specs["paper_m4_sm32"]), AttnSpec.parse(specs["paper_m4+fix_sm32"])
    assert sm.fix is None and sm.numerics == rne.numerics.replace(round_s_minus_m=False)
    assert fsm.fix == "beta_split" and fsm.numerics == sm.numerics
    assert "paper_m5_dfp32o" not in pd.arm_specs(5, smallest=False)


def _s(arm, outcome):
    return dict(arm=arm, outcome=outcome)


@pytest.mark.parametrize("rne,sr,fix,word", [
    ("stable", "stable", "stable", "did not fail"),
    ("exploded", "exploded", "stable", "coarseness alone"),
    ("exploded", "stable", "degraded", "the bias, not the coarseness"),
    ("nonfinite", "stable", "exploded", "fix did not help"),
])
def test_verdict_reading(rne, sr, fix, word):
    v = dr.verdicts([_s("paper_m3", rne), _s("paper_m3_sr", sr), _s("paper_m3+fix", fix)], [3])
    assert word in v["3"]["reading"] and v["3"]["rne"] == [rne]


def test_verdict_without_valid_sr_and_a_failing_fix():
    s = [_s("paper_m3", "exploded"), _s("paper_m3_sr", "nonfinite"), _s("paper_m3+fix", "exploded"),
         _s("paper_m5", "stable"), _s("paper_m5_sr", "nonfinite"), _s("paper_m5+fix", "exploded")]
    v = dr.verdicts(s, [3, 5], sr_valid=False)
    assert "SR invalid" in v["3"]["reading"] and "did not prevent" in v["3"]["reading"]
    assert v["3"]["sr"] == [] and v["3"]["invalid"] == {"sr": ["nonfinite"]} and not v["3"]["sr_valid"]
    assert "fix itself failed" in v["5"]["reading"]
    assert "coarseness alone" in dr.verdicts(s, [3])["3"]["reading"]     # the same outcomes, SR taken at face value
    assert not dr.sr_valid({"git_commit": "675045d"}) and dr.sr_valid({"git_commit": "8b8d26d"})


def test_verdict_reports_the_s_minus_m_fp32_arms():
    s = [_s("paper_m4", "exploded"), _s("paper_m4+fix", "exploded"), _s("paper_m4_sm32", "stable"),
         _s("paper_m4+fix_sm32", "stable")]
    r = dr.verdicts(s, [4])["4"]["reading"]
    assert "RNE with S − m in FP32 trained" in r and "the fix with S − m in FP32 trained" in r
    r = dr.verdicts(s[:2] + [_s("paper_m4+fix_sm32", "nonfinite")], [4])["4"]["reading"]
    assert "the fix with S − m in FP32 failed" in r and "RNE with S − m" not in r


@pytest.mark.parametrize("bad", [dict(bits=[7]), dict(kinds=["rne", "bogus"]), dict(controls=["paper", "sdpa"])])
def test_bad_plan_is_refused(bad):
    with pytest.raises(ValueError):
        pd.plan("full", registry.resolve("precision_dial", "full", bad))


@pytest.mark.parametrize("variant,arms,controls", [
    ("precision_dial_sr", ["paper_m3_sr", "paper_m4_sr", "paper_m5_sr"], []),
    ("precision_dial_fine", ["paper_m4", "paper_m4+fix", "paper_m4_sm32", "paper_m4+fix_sm32", "paper_m5",
                             "paper_m5+fix", "paper_m5_sm32", "paper_m5+fix_sm32"], ["paper", "fp32"]),
    ("precision_dial_seeds", ["paper_m5", "paper_m5+fix", "paper_m5+fix_sm32"], []),
    ("precision_dial_sr_seeds", ["paper_m5_sr", "paper_m6_sr"], []),
    ("precision_dial_m6", ["paper_m6"], []),
])
def test_variants_plan_their_arms(variant, arms, controls):
    """Each variant's registry entry gives the arms and seeds its committed result was recorded with (the full
    plan is computed; nothing is trained)."""
    p = pd.plan("full", registry.resolve(variant, "full"))
    assert p["dial_arms"] == arms and p["control_arms"] == controls
    assert p["seeds"] == ([1, 2] if variant in ("precision_dial_seeds", "precision_dial_sr_seeds",
                                                "precision_dial_m6") else [0])
    from lib.book import results
    if results.exists(variant, "full"):          # the committed result was recorded with this configuration
        rec = results.load(variant, "full").meta["config"]["plan"]
        assert (rec["dial_arms"], rec["control_arms"], rec["seeds"], rec["steps"]) == \
            (p["dial_arms"], p["control_arms"], p["seeds"], p["steps"])


def test_ci_run_goes_through_every_arm():
    r = run_live("precision_dial", "ci")
    arms = [x["arm"] for x in r["data"]["runs"]]
    assert arms == ["paper_m3", "paper_m3_sr", "paper_m3+fix", "paper_m3_dfp32o", "paper_m3_sm32",
                    "paper_m3+fix_sm32", "fp32"]
    assert all(x["outcome"] != "error" for x in r["data"]["runs"]), r["data"]["runs"]
    for x in r["data"]["runs"]:
        assert np.isfinite(r["arrays"][f"{x['id']}__loss"]).all()
    # m = 3 rounding changes the computation: the RNE arm's loss curve is not FP32 attention's
    a, b = (r["arrays"][f"{x['id']}__loss"] for x in r["data"]["runs"] if x["arm"] in ("paper_m3", "fp32"))
    assert not np.array_equal(a, b)
    assert set(r["data"]["verdicts"]) == {"3"}


def test_merged_table_drops_sr_of_buggy_results():
    from types import SimpleNamespace
    runs = [dict(id="a", arm="paper_m3", seed=0, outcome="exploded", onset=300, steps=900, final=3.0, lr=5e-3),
            dict(id="b", arm="paper_m3_sr", seed=0, outcome="nonfinite", onset=200, steps=201, final=float("nan"), lr=5e-3),
            dict(id="c", arm="paper_m3+fix", seed=0, outcome="exploded", onset=320, steps=900, final=4.0, lr=5e-3),
            dict(id="d", arm="fp32", seed=0, outcome="stable", onset=None, steps=900, final=0.9, lr=5e-3)]
    old = SimpleNamespace(name="precision_dial", meta={"git_commit": "675045d"}, data=dict(bits=[3], runs=runs))
    new = SimpleNamespace(name="precision_dial_fine", meta={"git_commit": "abc"},
                          data=dict(bits=[5], runs=[dict(r, arm=r["arm"].replace("m3", "m5")) for r in runs]))
    t = dr.merged_table([old, new])
    assert t["bits"] == [3, 5] and t["lr"] == [5e-3] and len(t["controls"]) == 2
    sr = {r["m"]: r["valid"] for r in t["rows"] if r["kind"] == "sr"}
    assert sr == {3: False, 5: True}
    assert "SR invalid" in t["verdicts"]["3"]["reading"] and "coarseness alone" in t["verdicts"]["5"]["reading"]
    # a third result holding only a valid SR arm at m = 3: the reading of m = 3 now uses it with the RNE of `old`
    sr_only = SimpleNamespace(name="precision_dial_sr", meta={"git_commit": "def"},
                              data=dict(bits=[3], runs=[dict(runs[1], id="e", outcome="stable", steps=1200)]))
    t = dr.merged_table([old, new, sr_only])
    v3 = t["verdicts"]["3"]
    assert v3["rne"] == ["exploded"] and v3["sr"] == ["stable"] and v3["invalid"] == {"sr": ["nonfinite"]}
    assert "RNE failed, SR trained" in v3["reading"]


def test_facts_from_verdicts():
    t = dict(verdicts={"3": dict(rne=["exploded", "exploded"], fix=["exploded"], dfp32o=["exploded", "stable"]),
                       "5": dict(rne=["stable"], fix=["nonfinite"], dfp32o=[], fixsm32=["stable"], sr=["degraded"])})
    f = dr.facts(t)
    assert f["rne_failed"] == [3] and f["rne_trained"] == [5] and f["fix_failed"] == [3, 5]
    assert f["fix_breaks"] == [5] and f["dfp32o_failed"] == [] and f["dfp32o_run"] == [3]
    assert f["fixsm32_trained"] == [5] and f["sr_trained"] == [5] and f["sm32_failed"] == f["sm32_trained"] == []
