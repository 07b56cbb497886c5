"""Link 4 from both records of Δδ's sign (`lib.studies.delta.two_tests`), on planted captures and planted telemetry:
an all-upward whole batch is detected and a balanced one is not; captured rows whose heads all pass are; the status
follows from the two tests by its table (a weak row-level test beside a whole-batch lean gives "partly", a strong one
"inconclusive"); the verdict table reads it (tests/test_verdict_table.py)."""
import numpy as np
import pytest

from lib.book import results
from lib.studies.delta import reading, two_tests

S, L, H = 3, 2, 3


class _Res:
    def __init__(self, data, arrays):
        self.data, self.arrays, self.meta = data, arrays, {}


def _telemetry(shares, n_steps=60):
    """A training result whose paper-placement runs have, per (seed, layer, head), the share `shares[s, l, h]` of
    telemetry steps with Σ Δδ > 0 (the positive steps first)."""
    runs, arrays = [], {}
    for s in range(S):
        rid = f"run{s}"
        runs.append(dict(id=rid, arm="paper_rb512", seed=s, attn="paper/round_block=512"))
        dd = -np.ones((n_steps, L, H))
        for l in range(L):
            for h in range(H):
                dd[: int(round(shares[s, l, h] * n_steps)), l, h] = 1.0
        arrays[f"{rid}__delta_err_sum"] = dd
    return _Res({"runs": runs}, arrays)


def _capture(p_greater, norm_bias=0.1, n_steps=30):
    """A capture's per-seed summaries: every head with the given one-sided p-value upward (and 1 downward)."""
    shape = (S, L, H)
    return _Res({}, {"sum__dd_step_pos": np.full(shape, 0.6 * n_steps), "sum__dd_step_n": np.full(shape, n_steps),
                     "sum__dd_step_p_greater": np.full(shape, p_greater), "sum__dd_step_p_less": np.ones(shape),
                     "sum__norm_bias": np.full(shape, norm_bias)})


def _batch(shares):
    return two_tests.batch_test(reading.telemetry_sign(_telemetry(shares), arms=["paper_rb512"]))


def test_an_all_upward_whole_batch_is_detected_and_a_balanced_one_is_not():
    up = _batch(np.full((S, L, H), 0.8))
    assert (up["above"], up["below"], up["direction"]) == (S * L * H, 0, "up")
    assert up["p_greater"] == pytest.approx(0.5 ** (S * L * H))
    assert up["share_med"] == pytest.approx(0.8) and up["seeds_up"] == S
    balanced = np.where(np.arange(S * L * H).reshape(S, L, H) % 2 == 0, 0.4, 0.6)
    b = _batch(balanced)
    assert (b["above"], b["below"], b["direction"]) == (9, 9, "none")
    down = _batch(np.full((S, L, H), 0.2))
    assert down["direction"] == "down"
    # the power: with 18 cells, the share of cells above ½ the test detects at α = 0.01 with 80 % power
    from lib import stats
    assert up["detectable"] == pytest.approx(stats.detectable_share(S * L * H, 0.01, 0.8))


def test_one_seed_against_the_others_is_no_whole_batch_lean():
    shares = np.full((S, L, H), 0.8)
    shares[0] = 0.3                        # 12 above, 6 below: not significant, and seed 0 leans the other way
    assert _batch(shares)["direction"] == "none"


def test_captured_rows_whose_heads_all_pass_are_detected():
    assert two_tests.row_test(_capture(1e-9))["direction"] == "up"
    assert two_tests.row_test(_capture(0.5))["direction"] == "none"
    assert two_tests.row_test(_capture(1e-9, norm_bias=-0.1))["direction"] == "none"     # the bias must agree
    r = two_tests.row_test(_capture(0.5))
    from lib import stats
    assert r["detectable"] == pytest.approx(stats.detectable_share(30, 0.01 / (L * H)))


def test_the_status_follows_from_the_two_tests():
    weak, strong = dict(direction="none", detectable=0.9), dict(direction="none", detectable=0.55)
    up = dict(direction="up", share_med=0.6)
    assert two_tests.combine(weak, up)["status"] == "partly"                 # too weak to see a lean of 0.6
    assert "leans positive" in two_tests.combine(weak, up)["phrase"]
    assert two_tests.combine(strong, up)["status"] == "inconclusive"         # could have seen it and did not
    assert two_tests.combine(dict(weak, direction="up"), up)["status"] == "reproduced"
    none = dict(direction="none", share_med=0.5)
    assert two_tests.combine(weak, none)["status"] == "not reproduced"
    assert two_tests.combine(dict(weak, direction="up"), dict(direction="down", share_med=0.4))["status"] == \
        "inconclusive"


def test_the_verdict_end_to_end():
    all_up = _telemetry(np.full((S, L, H), 0.8))
    v = two_tests.verdict(_capture(1e-9), all_up)
    assert v["status"] == "reproduced" and v["evidence"].startswith("positive in both tests")
    v = two_tests.verdict(_capture(0.5), _telemetry(np.where(np.arange(S * L * H).reshape(S, L, H) % 2, 0.4, 0.6)))
    assert v["status"] == "not reproduced"
    v = two_tests.verdict(_capture(0.5), all_up)           # 30 steps at α/6 need ≈ 0.83 of steps: 0.8 is too weak
    assert v["status"] == "partly" and f"{v['row']['detectable']:.0%}" in v["evidence"]


def test_every_pair_of_outcomes_has_a_status():
    for a in ("up", "some", "none", "down"):
        for b in ("up", "none", "down"):
            for det in (0.55, 0.95):
                c = two_tests.combine(dict(direction=a, detectable=det), dict(direction=b, share_med=0.6))
                assert c["status"] in ("reproduced", "partly", "not reproduced", "inconclusive") and c["phrase"]
    assert two_tests.p_text(9.2e-23) == "9e-23" and two_tests.p_text(0.0123) == "0.012"


def test_the_paper_arm_is_the_explosion_studys():
    from lib.studies.explosion.reading import PAPER
    assert two_tests.PAPER_ARM == PAPER
