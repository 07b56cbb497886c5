"""Reading the GPT-2 chain arms (gpt2_arms) on the toy run: the numbers the chapter glues, its table, the growth
ratios against FP32 attention, the probe's sign counts and the figure."""
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
