"""Reading the GPT-2 chain arms (gpt2_arms) on the toy run: the numbers the chapter glues, its table, the growth
ratios against FP32 attention, the probe's sign counts and the figure."""
import re

import numpy as np
import pytest

from lib.book.runner import live_result
from lib.studies.gpt2 import figures, reading


@pytest.fixture(scope="module")
def toy():
    return live_result("gpt2_arms", "ci")


def test_numbers_cover_every_arm(toy):
    n = reading.arms_numbers(toy)
    for arm in ("fp32", "paper"):
        for k in ("steps", "failed_at", "loss_common", "logit_common", "wq_common", "conj_authors", "dd_share",
                  "push_share", "telemetry"):
            assert f"{arm}_{k}" in n, (arm, k)
    assert n["common_step"] == "3" and n["n_seeds"] == "1"
    table = reading.arms_table(toy)
    assert table.count("\n") == 3 and "FP32 attention" in table


def test_growth_ratios_are_against_the_reference(toy):
    cfg = reading.cfg_of(toy)
    g = reading.growth_ratios(toy.arrays, toy.data["runs"], cfg["rules"])
    r = g["0"]["paper"][2]
    a, b = (reading.layer_series(toy.arrays, f"{arm}:s0") for arm in ("paper", "fp32"))
    i = reading.at_step(a, 2)
    assert np.allclose(r["logit"], a["logit"][i] / b["logit"][reading.at_step(b, 2)])
    assert reading.fp32_spread(toy.arrays, toy.data["runs"], cfg["rules"]) is None     # one seed: no verdict


def test_probe_signs_count_what_the_probe_recorded(toy):
    ps = reading.probe_signs(toy.arrays, "paper:s0")
    assert ps["n_events"] == 3
    assert ps["dd_n"] == int(np.sum(toy.arrays["paper:s0__probe__dd_nz_tied"]))
    assert 0.0 <= ps["push_share"] <= 1.0 or np.isnan(ps["push_share"])


def test_chain_figure_draws_every_arm(toy):
    fig = figures.chain_figure(toy)
    assert len(fig.axes[1].lines) == 2


def _planted(seed: int, arm: str, logit_l2: float, steps=(0, 2000, 4000)) -> tuple[dict, dict]:
    """One planted run: 3 layers × 2 heads, every logit 10 and ‖W_Q,h‖₂ 2 except layer 2's, which is `logit_l2`
    (and its ‖W_Q,h‖₂ a tenth of it) from step 2,000 on."""
    E = len(steps)
    logit = np.full((E, 3, 2), 10.0)
    logit[1:, 1, :] = logit_l2
    lab = f"{arm}:s{seed}"
    arrays = {f"{lab}__census__step": np.asarray(steps), f"{lab}__census__fa2/max_logit": logit,
              f"{lab}__census__wq_sigma": np.where(logit > 10, logit / 10, 2.0), f"{lab}__loss": np.ones(4001)}
    return dict(label=lab, steps=4001), arrays


class _Res:
    def __init__(self, parts, seed, rules):
        self.data = dict(runs=[p[0] for p in parts], telemetry={})
        self.arrays = {k: v for p in parts for k, v in p[1].items()}
        self.meta = {"config": dict(rules=rules, seeds=[seed], arms=[{"label": p[0]["label"].split(":")[0]}
                                                                        for p in parts], steps=4001)}


RULES = dict(failure_window=100, failure_rise=0.3, growth_steps=[2000, 4000], reference="fp32")


def test_growth_verdict_needs_growth_beyond_the_reference_spread_in_every_seed():
    """FP32 seeds differ by 1.5× in layer 2 (the spread). An arm 100× FP32 in layer 2 in both seeds grows layer 2; an
    arm 100× in one seed and 1.2× (inside the spread) in the other grows nothing; one seed gives no verdict."""
    s0 = _Res([_planted(0, "fp32", 20.0), _planted(0, "paper", 2000.0), _planted(0, "sdpa", 2000.0)], 0, RULES)
    s1 = _Res([_planted(1, "fp32", 30.0), _planted(1, "paper", 3000.0), _planted(1, "sdpa", 36.0)], 1, RULES)
    M = reading.merge_seeds([s0, s1])
    assert reading.cfg_of(M)["seeds"] == [0, 1] and len(M.data["runs"]) == 6
    v = reading.growth_verdict(M.arrays, M.data["runs"], RULES)
    assert v["paper"] == {2000: {"logit": [2], "wq": [2]}, 4000: {"logit": [2], "wq": [2]}}
    assert v["sdpa"][2000] == {"logit": [], "wq": []}
    words = reading.growth_words(v, reading.fp32_spread(M.arrays, M.data["runs"], RULES),
                                 reading.growth_ratios(M.arrays, M.data["runs"], RULES))
    assert words["paper_grown_logit"] == "layers 2" and words["sdpa_grown_logit"] == "none"
    assert words["paper_grown_min_ratio"] == words["paper_grown_max_ratio"] == "100" and words["spread_max"] == "1.5"
    assert reading.growth_verdict(s0.arrays, s0.data["runs"], RULES) is None
    with pytest.raises(ValueError):                       # one run twice is not two seeds
        reading.merge_seeds([s0, s0])


def test_growth_onset_and_the_census_before_a_failure():
    _, arrays = _planted(1, "paper", 5000.0)
    assert reading.growth_onset(arrays, "paper:s1") == (2000, [2])
    assert reading.growth_onset(arrays, "paper:s1", big=1e4) is None
    pre = reading.before_failure(arrays, "paper:s1", 3999)
    assert pre["step"] == 2000 and pre["logit"] == 5000.0 and pre["logit_layer"] == 2 and pre["wq"] == 500.0


def test_explosion_verdict_counts_failures_that_never_recover():
    """The paper placement exploding in one seed of two (a step up that stays) and spiking in the other (a step up
    that comes back) is "partly"; exploding in both is "reproduced"; a FP32 failure makes it no longer so."""
    def run(seed, arm, jump_at=None, back_at=None):
        meta, arrays = _planted(seed, arm, 20.0)
        loss = np.full(4001, 3.0)
        if jump_at is not None:
            loss[jump_at:back_at] = 4.0
        arrays[f"{arm}:s{seed}__loss"] = loss
        return meta, arrays
    s0 = _Res([run(0, "fp32"), run(0, "paper", 1000, 1200)], 0, RULES)
    s1 = _Res([run(1, "fp32"), run(1, "paper", 2000)], 1, RULES)
    v = reading.explosion_verdict(reading.merge_seeds([s0, s1]))
    assert (v["status"], v["n_boom"], v["n_paper"]) == ("partly", 1, 2)
    assert re.search(r"seed 1: failed at step 2,0[23]\d, not recovered", v["evidence"]), v["evidence"]
    s0b = _Res([run(0, "fp32"), run(0, "paper", 1000)], 0, RULES)
    assert reading.explosion_verdict(reading.merge_seeds([s0b, s1]))["status"] == "reproduced"
    s0c = _Res([run(0, "fp32", 500), run(0, "paper", 1000)], 0, RULES)
    assert reading.explosion_verdict(reading.merge_seeds([s0c, s1]))["status"] == "partly"
