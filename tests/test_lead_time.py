"""lib/studies/practice/lead_time.py: the monitor's warning rule replayed on planted census series — a warning that
fires before the failure, one that never fires, one that fires after it, a false alarm, the rise rule alone, events
off the monitor's schedule, a record that lacks a quantity — and the glue of a planted comparison of arms; then the
committed GPT-2 arms read the same way."""
import numpy as np
import pytest

from lib.monitor import Thresholds
from lib.studies.practice import lead_time as lt

TH = Thresholds()              # the monitor's own thresholds: every planted value is placed relative to them
E, L, H = 6, 3, 4
STEPS = np.arange(E) * 200     # events at 0, 200, …, 1000


def quiet():
    """(conj, logit) of a run on which no rule fires: rates at the floor's tenth, logits at a tenth of the bound."""
    return np.full((E, L, H), TH.floor / 10), np.full((E, L, H), TH.max_logit / 10)


def test_a_warning_before_the_failure_gives_its_lead_and_layer():
    conj, logit = quiet()
    conj[2, 1, 3] = TH.conjunction * 1.5                      # step 400, layer 2 (1-based), head 3
    found = lt.replay(STEPS, conj, logit, "authors", every=200)
    kinds = {k for _, _, k, _ in found}
    assert kinds == {"conjunction", "rise"}                   # 1.5 % is also more than 10× the floor
    first = lt.first_warnings(found)
    assert first["conjunction"] == (400, 1) and first["logit"] is None
    r = lt.lead_times({k: None if v is None else v[0] for k, v in first.items()}, failure=1000)
    assert r["conjunction"] == dict(step=400, lead=600, before=True, false_alarm=False)
    assert r["logit"] == dict(step=None, lead=None, before=False, false_alarm=False)


def test_the_thresholds_are_the_monitors():
    """A rate just above the monitor's threshold fires, just below does not (no rise: the first event is as high)."""
    for factor, fires in ((1.001, True), (0.999, False)):
        conj, logit = quiet()
        conj[:] = TH.conjunction * factor
        assert lt.first_warnings(lt.replay(STEPS, conj, logit))["conjunction"] == ((0, 0) if fires else None)
        conj, logit = quiet()
        logit[3, 2, 0] = TH.max_logit * factor
        assert lt.first_warnings(lt.replay(STEPS, conj, logit))["logit"] == ((600, 2) if fires else None)


def test_never_fires_and_fires_after_the_failure():
    conj, logit = quiet()
    assert lt.replay(STEPS, conj, logit) == []
    logit[5, 0, 1] = 2 * TH.max_logit                         # step 1000, after a failure at 900
    r = lt.lead_times({"logit": lt.first_warnings(lt.replay(STEPS, conj, logit))["logit"][0]}, failure=900)
    assert r["logit"] == dict(step=1000, lead=-100, before=False, false_alarm=False)


def test_a_warning_in_a_run_that_did_not_fail_is_a_false_alarm():
    r = lt.lead_times({"logit": 600, "rise": None}, failure=None)
    assert r["logit"]["false_alarm"] and r["logit"]["lead"] is None and not r["rise"]["false_alarm"]


def test_the_rise_rule_alone_and_the_monitors_schedule():
    """A rate 20× its first event's but under the threshold: the rise rule fires, the threshold does not. An event
    the monitor would not take (off its `every`) is skipped: its spike warns only when every event counts."""
    conj, logit = quiet()
    base = TH.floor * 2
    conj[:, 0, 0] = base
    conj[3, 0, 0] = min(20 * base, TH.conjunction / 2)
    first = lt.first_warnings(lt.replay(STEPS, conj, logit))
    assert first["rise"] == (600, 0) and first["conjunction"] is None
    steps = STEPS.copy()
    steps[3] = 999                                            # the spike at an off-schedule step
    assert lt.first_warnings(lt.replay(steps, conj, logit, every=200))["rise"] is None
    assert lt.first_warnings(lt.replay(steps, conj, logit, every=None))["rise"] == (999, 0)


def _arrays(label, conj, logit, placement="authors", drop=()):
    a = {f"{label}__census__step": STEPS, f"{label}__census__{placement}/conjunction": conj,
         f"{label}__census__{placement}/max_logit": logit}
    return {k: v for k, v in a.items() if not any(k.endswith(d) for d in drop)}


def test_a_missing_quantity_is_named_and_not_replayed():
    conj, logit = quiet()
    conj[1, 0, 0] = 2 * TH.conjunction
    logit[:] = 2 * TH.max_logit
    r = lt.run_leads(_arrays("a:s0", conj, logit, drop=("max_logit",)), "a:s0", 800, "authors", 200)
    assert r["missing"] == ["max_logit"] and r["replayed"] == ["conjunction", "rise"]
    assert r["logit"] is None and r["conjunction"]["lead"] == 600 and r["layer"]["conjunction"] == 1
    none = lt.run_leads({}, "a:s0", 800, "authors", 200)
    assert none["missing"] == ["conjunction", "max_logit"] and none["replayed"] == []
    assert lt._cell(r["logit"]) == "not recorded" and lt._cell(r["conjunction"]) == "200 (600 ahead)"


def test_placements_follow_the_kernel():
    assert lt.placement_of("paper/round_block=512") == "authors" and lt.placement_of("authors") == "authors"
    assert {lt.placement_of(s) for s in ("sdpa", "fa2", "fp32_flash", "stable+fix")} == {"fa2"}


def test_a_planted_comparison_of_arms():
    """Two arms, two seeds: the paper arm warns (authors' placement) and fails in seed 1 only; the FP32 arm's logit
    warning fires in both seeds, neither of which fails; the census of the other placement is never read."""
    arrays, q = {}, quiet()
    for seed in (0, 1):
        conj, logit = (x.copy() for x in q)
        conj[2, 1, 0] = 2 * TH.conjunction
        arrays |= _arrays(f"paper:s{seed}", conj, logit, "authors")
        arrays |= _arrays(f"paper:s{seed}", *quiet(), "fa2")
        conj, logit = quiet()
        logit[4, 0, 0] = 2 * TH.max_logit
        arrays |= _arrays(f"fp32:s{seed}", conj, logit, "fa2")
        arrays |= _arrays(f"fp32:s{seed}", *quiet(), "authors")
    outcomes = {"fp32": [(0, 1000, None, None), (1, 1000, None, None)],
                "paper": [(0, 1000, None, None), (1, 1000, 700, None)]}
    cfg = {"arms": [{"label": "fp32", "attn": "fp32_flash"}, {"label": "paper", "attn": "paper/round_block=512"}],
           "census_every": 200, "census_rows": 16, "rules": {"failure_window": 100, "failure_rise": 0.3}}
    leads = lt.arm_leads(arrays, outcomes, cfg)
    assert [(r["arm"], r["seed"], r["placement"]) for r in leads] == [
        ("fp32", 0, "fa2"), ("fp32", 1, "fa2"), ("paper", 0, "authors"), ("paper", 1, "authors")]
    n = lt.lead_numbers(leads, {"paper": "the paper's kernel", "fp32": "FP32 attention"}, cfg,
                        lt.arm_leads(arrays, outcomes, cfg, "authors"))
    assert (n["lt_n_runs"], n["lt_n_failed"], n["lt_n_boom"], n["lt_n_ok"]) == (4, 1, 1, 3)
    assert n["lt_monitor_lead"] == "300" and n["lt_logit_lead"] == "—" and n["lt_monitor_before"] == 1
    assert (n["lt_monitor_false"], n["lt_logit_false"]) == (1, 2)            # paper seed 0; both FP32 seeds
    assert (n["lt_authors_false"], n["lt_authors_n_ok"]) == (1, 3)
    assert n["lt_boom_runs"] == "the paper's kernel, seed 1" and n["lt_missing"] == "nothing"
    assert "it fired in 2 of 4 runs" == n["lt_logit_says"]
    rows = n["lt_md"].splitlines()
    assert len(rows) == 2 + 4 and "| the paper's kernel, seed 1 (authors') | 700, not recovered | 400 (300 ahead) |" \
        in rows[-1] and "800 (false alarm)" in rows[2]


# ------------------------------------------------------------------------------------------------ committed runs
def test_the_committed_gpt2_arms():
    from lib.book import results
    from lib.studies.gpt2 import reading as g2r
    chain = [results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")]
    if not chain:
        pytest.skip("no GPT-2 arms committed")
    M = g2r.merge_seeds(chain)
    cfg, oc = g2r.cfg_of(M), g2r.outcomes(M)
    leads = lt.arm_leads(M.arrays, oc, cfg)
    by = {(r["arm"], r["seed"]): r for r in leads}
    assert len(leads) == sum(len(v) for v in oc.values()) and all(r["missing"] == [] for r in leads)
    # the failure each row carries is the registered rule's, and every lead is that step minus the warning's
    for r in leads:
        assert r["failure"] == next(o[2] for o in oc[r["arm"]] if o[0] == r["seed"])
        for k in lt.KINDS:
            e = r[k]
            assert e["lead"] == (None if e["step"] is None or r["failure"] is None else r["failure"] - e["step"])
            assert e["step"] is None or e["step"] % cfg["census_every"] == 0
    if ("paper", 1) in by:                                    # the run that explodes (chapter 2c)
        assert by[("paper", 1)]["failure"] == 2810 and by[("paper", 1)]["placement"] == "authors"
    n = lt.lead_numbers(leads, g2r.CHAIN_ARMS, cfg)
    assert n["lt_n_failed"] + n["lt_n_ok"] == n["lt_n_runs"] == len(leads)
