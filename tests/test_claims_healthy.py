"""The healthy-regime claims (`lib.claims.table.derive_healthy`) and their reader
(`lib.training.runs`), on synthetic results: every verdict is reachable and each can fail."""
from __future__ import annotations

import numpy as np
import pytest

from lib.book.results import Result
from lib.claims import table as claims
from lib.studies.fix import reading as fix_reading
from lib.training import runs as hr

N, WARM, LR = 400, 50, 5e-4
SPECS = {"paper_rb512": "paper/round_block=512", "fa2": "fa2", "fp32": "naive", "sdpa": "sdpa",
         "paper_rb512+fix_b7": "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix",
         "paper_rb512+fix_b2": "paper/round_block=512/beta=2/tie_tol=0.001/max_shift=none+fix"}


def _curve(kind: str, seed: int):
    """(loss, grad_norm) of N steps: a falling curve that stays down ("stable"), rises by 0.2 ("degraded") or by
    1.0 ("exploded"), or turns NaN ("nonfinite") from step 300 on."""
    loss = 2.0 * np.exp(-np.arange(N) / 60.0) + 0.5 + 0.001 * seed
    loss[300:] += {"stable": 0.0, "degraded": 0.2, "exploded": 1.0, "nonfinite": np.nan}[kind]
    return loss, np.ones(N)


def _result(name, arms: dict, logit: float = 50.0, steps: int = N, stale=()):
    """A training Result: arms = {arm: [kind per seed]}; per-run arrays as the experiments write them."""
    runs, arrays = [], {}
    for arm, kinds in arms.items():
        for seed, kind in enumerate(kinds):
            rid = f"{arm}_s{seed}_lr{LR:g}"
            loss, gn = _curve(kind, seed)
            runs.append(dict(id=rid, arm=arm, attn=SPECS[arm], seed=seed, lr=LR, outcome=kind, steps=steps,
                             onset=None, tag="",
                             best=float(loss.min()), final=float(loss[-1])))
            arrays[f"{rid}__loss"], arrays[f"{rid}__grad_norm"] = loss[:steps], gn[:steps]
            arrays[f"{rid}__step"] = np.arange(0, steps, 50.0)
            arrays[f"{rid}__max_logit"] = np.full((len(arrays[f"{rid}__step"]), 2), logit)
            arrays[f"{rid}__fix_zero_rows"] = np.full((len(arrays[f"{rid}__step"]), 2), 0.01 * seed)
    meta = {"config": {"warmup": WARM, "data_seed": 0, "seq_len": 512}, "scale": "full"}
    return Result(name, "full", meta, dict(lr=LR, steps=steps, runs=runs), arrays, list(stale))


def _refs(kind="stable", logit=50.0):
    return _result("regime pilots", {"fp32": [kind] * 3, "sdpa": ["stable"] * 3}, logit=logit)


def _headline(paper, fix7, fix2=None, fa2=None):
    a = _result("healthy_headline", {"paper_rb512": paper, "paper_rb512+fix_b7": fix7})
    more = {k: v for k, v in (("paper_rb512+fix_b2", fix2), ("fa2", fa2)) if v}
    return hr.merge([a, _result("healthy_headline_more", more)]) if more else a


def test_explosion_not_reproduced_when_the_paper_placement_trains():
    c = claims.derive_healthy(_headline(["stable"] * 3, ["stable"] * 3, ["stable"] * 3, ["stable"] * 3), _refs())
    assert c["explosion"]["status"] == "not reproduced"
    assert c["fix_stabilises"]["status"] == c["fp32_o_stabilises"]["status"] == "not yet tested"
    ev = c["explosion"]["evidence"]
    for must in ("healthy regime", "LR 0.0005", "512-key rounding blocks", "seeds 0, 1, 2", f"judged at {N}",
                 "FA2 placement stable, stable, stable"):
        assert must in ev, must
    # each fix arm is named by the spec it trained with, in words (β, ties, guard come from the run)
    ev = c["fix_stabilises"]["evidence"]
    assert "paper placement, 512-key blocks, fix β = 2, ties within 0.001, exact rule: stable" in ev
    assert "fix β = 7, ties within 0.001, exact rule" in ev and "paper_rb512" not in ev


def test_explosion_reproduced_only_with_healthy_stable_contrasts():
    h = _headline(["exploded"] * 3, ["stable"] * 3, ["stable"] * 3, ["stable"] * 3)
    c = claims.derive_healthy(h, _refs())
    assert c["explosion"]["status"] == "reproduced"
    assert c["fix_stabilises"]["status"] == "reproduced"
    assert "6 of 6 fix runs stayed stable" in c["fix_stabilises"]["evidence"]
    # an fa2 run that failed, a degraded reference, or logits above the bound: no longer "reproduced"
    bad_fa2 = _headline(["exploded"] * 3, ["stable"] * 3, ["stable"] * 3, ["stable", "exploded", "stable"])
    assert claims.derive_healthy(bad_fa2, _refs())["explosion"]["status"] == "partly"
    assert claims.derive_healthy(h, _refs(kind="degraded"))["explosion"]["status"] == "partly"
    assert claims.derive_healthy(h, _refs(logit=500.0))["explosion"]["status"] == "partly"


def test_explosion_partly_when_some_seeds_fail_and_degraded_is_not_a_failure():
    c = claims.derive_healthy(_headline(["exploded", "stable", "stable"], ["stable"] * 3), _refs())
    assert c["explosion"]["status"] == "partly"
    c = claims.derive_healthy(_headline(["degraded"] * 3, ["stable"] * 3), _refs())
    assert c["explosion"]["status"] == "not reproduced"           # degraded did not fail
    assert c["fix_stabilises"]["status"] == "not yet tested"


def test_fix_verdicts_count_both_betas_and_degraded_is_not_stable():
    h = _headline(["exploded"] * 3, ["stable"] * 3, ["exploded"] * 3)
    assert claims.derive_healthy(h, _refs())["fix_stabilises"]["status"] == "partly"
    h = _headline(["exploded"] * 3, ["nonfinite"] * 3, ["degraded"] * 3)
    c = claims.derive_healthy(h, _refs())
    assert c["fix_stabilises"]["status"] == "not reproduced"
    assert c["fp32_o_stabilises"]["status"] == "not yet tested" and "no FP32-O arm" in c["fp32_o_stabilises"]["evidence"]


def test_runs_are_judged_at_the_common_horizon():
    """A fix run that exploded after the paper arm's last step is judged on the shared steps only."""
    a = _result("healthy_headline", {"paper_rb512": ["exploded"] * 3}, steps=N)
    b = _result("healthy_headline_more", {"paper_rb512+fix_b2": ["exploded"] * 3}, steps=N)
    for r in b.data["runs"]:                      # the fix runs stop at step 290, before their rise at 300
        r["steps"] = 290
        for k in ("loss", "grad_norm"):
            b.arrays[f"{r['id']}__{k}"] = b.arrays[f"{r['id']}__{k}"][:290]
    b.data["steps"] = a.data["steps"]             # registry steps are equal: one headline
    c = claims.derive_healthy(hr.merge([a, b]), _refs())
    assert "judged at 290 steps" in c["explosion"]["evidence"]
    assert c["explosion"]["status"] == "not reproduced"          # the paper arm rose at 300, after the horizon


def test_merge_refuses_results_that_are_not_one_headline():
    a = _result("healthy_headline", {"paper_rb512": ["stable"]})
    b = _result("healthy_headline_more", {"fa2": ["stable"]})
    m = hr.merge([a, b])
    assert {r["arm"] for r in m.data["runs"]} == {"paper_rb512", "fa2"} and "fa2_s0_lr0.0005__loss" in m.arrays
    b.data["lr"] = 1e-3
    with pytest.raises(ValueError, match="differ"):
        hr.merge([a, b])
    with pytest.raises(ValueError, match="more than one"):
        hr.merge([a, a])
    s = hr.merge([a, _result("healthy_headline_more", {"fa2": ["stable"]}, stale=["code changed"])])
    assert s.stale == ["healthy_headline_more: code changed"]


def test_arm_summary_and_best_within():
    h = _headline(["exploded", "stable", "stable"], ["stable"] * 3)
    s = hr.arm_summary(h)
    assert s[None]["horizon"] == N
    p = s["paper_rb512"]
    assert p["failed"] == 1 and p["stable"] == 2 and p["onsets"][1:] == [None, None] and p["onsets"][0] is not None
    z = s["paper_rb512+fix_b7"]["fix_zero_rows"]
    assert [t["layer_mean"] for t in z] == pytest.approx([0.0, 0.01, 0.02])
    assert s["paper_rb512"]["underflow_rows"] == [None] * 3            # not recorded
    b = hr.best_within(h, 200)
    assert set(b) == {r["id"] for r in h.data["runs"]}
    assert all(b[r["id"]] > r["best"] for r in h.data["runs"])         # still falling at step 200
    assert hr.best_within(h, N + 1) == {}


def test_step_bench_reads_the_target_and_the_spread():
    d = {"ratio_to_sdpa": {"paper_rb512": 1.25}, "ratio_to_sdpa_rounds": {"paper_rb512": [1.2, 1.25, 1.4]}}
    s = fix_reading.step_bench(d)
    assert s["met"] and s["every_round"] == "both" and (s["lo"], s["hi"]) == (1.2, 1.4)
    d["ratio_to_sdpa"]["paper_rb512"] = 1.35
    d["ratio_to_sdpa_rounds"]["paper_rb512"] = [1.31, 1.35, 1.5]
    s = fix_reading.step_bench(d)
    assert not s["met"] and s["every_round"] == "above"
    assert fix_reading.step_bench({"ratio_to_sdpa": {"paper_rb512": 1.0}})["rounds"] == [1.0]


def test_span():
    assert hr.span([0.5, 0.25]) == "0.250–0.500" and hr.span([1.0, 1.0]) == "1.000" and hr.span([None]) == "—"


def _wide(paper, fp32=("stable",) * 3, logit=50.0):
    """The headline at width 768 in two parts (seeds 0-1, seed 2), as healthy_headline_w768 and its _s2 are."""
    arms = {"paper_rb512": list(paper), "fp32": list(fp32), "sdpa": ["stable"] * 3}
    whole = _result("w768", arms, logit=logit)
    whole.meta["config"].update(n_embd=768, n_head=12)
    return whole


def test_a_second_width_joins_the_explosion_evidence():
    h = _headline(["stable"] * 3, ["stable"] * 3)
    c = claims.derive_healthy(h, _refs(), _wide(["stable"] * 3))
    ev = c["explosion"]["evidence"]
    assert c["explosion"]["status"] == "not reproduced"
    assert "width 768 (12 heads" in ev and "paper placement, 512-key blocks stable, stable, stable" in ev.split("width 768")[1]
    assert "healthy (all stable, max logit ≤ 50)" in ev
    # a failure at the second width alone makes the explosion "partly"
    assert claims.derive_healthy(h, _refs(), _wide(["exploded", "stable", "stable"]))["explosion"]["status"] == "partly"
    # "reproduced" needs every seed to fail at both widths, each regime healthy
    h_fail = _headline(["exploded"] * 3, ["stable"] * 3)
    assert claims.derive_healthy(h_fail, _refs())["explosion"]["status"] == "reproduced"
    assert claims.derive_healthy(h_fail, _refs(), _wide(["exploded"] * 3))["explosion"]["status"] == "reproduced"
    assert claims.derive_healthy(h_fail, _refs(), _wide(["stable"] * 3))["explosion"]["status"] == "partly"
    unhealthy = claims.derive_healthy(h_fail, _refs(), _wide(["exploded"] * 3, fp32=["degraded"] * 3))
    assert unhealthy["explosion"]["status"] == "partly"
    assert ("not healthy by the regime rule (max logit 50–50, bound 100; FP32 attention degraded, degraded, degraded; "
            "PyTorch flash SDPA stable") in unhealthy["explosion"]["evidence"]
    hot = claims.derive_healthy(h_fail, _refs(), _wide(["exploded"] * 3, logit=500.0))
    assert hot["explosion"]["status"] == "partly"
    assert "not healthy by the regime rule (max logit 500–500, bound 100; FP32 attention stable" in hot["explosion"]["evidence"]
