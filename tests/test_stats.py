"""lib/stats.py: the generic statistics on inputs with a known answer, each able to fail (the null input gives the
null answer)."""
import numpy as np
import pytest
import torch

from lib import stats


def test_sign_test_exact_binomial():
    t = stats.sign_test(n_pos=9, n_neg=1)
    assert t["frac_pos"] == 0.9
    assert t["p_greater"] == pytest.approx(11 / 1024)          # P(X ≥ 9), X ~ Bin(10, ½)
    assert t["p_less"] == pytest.approx(1023 / 1024)
    assert t["p_two"] == pytest.approx(22 / 1024)
    t = stats.sign_test(np.array([1.0, -2.0, 0.0, 3.0, np.nan]))  # zeros and NaN dropped
    assert (t["n_pos"], t["n_neg"], t["n"]) == (2, 1, 3)
    assert stats.sign_test([])["p_two"] == 1.0


def test_normalised_bias_and_ci():
    assert stats.normalised_bias([1.0, 1.0, -1.0]) == pytest.approx(1 / 3)
    assert stats.normalised_bias([2.0, -2.0]) == 0.0
    assert np.isnan(stats.normalised_bias([0.0, 0.0]))
    lo, hi = stats.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1)
    lo, hi = stats.clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** 0.1)


def test_drift_detects_a_drift_and_not_a_random_walk():
    d = stats.drift(np.ones(20), n_flip=4000, seed=1)
    assert d["z"] == pytest.approx(np.sqrt(20))
    assert d["p_greater"] < 1e-3 and d["p_flip"] < 1e-3
    assert np.allclose(d["band"], np.sqrt(np.arange(1, 21)))     # √n scaling for equal increments
    rng = np.random.default_rng(3)
    walk = rng.choice([-1.0, 1.0], size=200) * rng.uniform(0.5, 1.5, 200)
    d = stats.drift(walk, n_flip=4000, seed=1)
    assert abs(d["z"]) < 2.5 and d["p_flip"] > 0.01


def test_stable_rank_cos_top_component():
    u, v = np.array([1.0, 2.0, 0.0]), np.array([0.0, 1.0, 1.0, 3.0])
    assert stats.stable_rank(np.outer(u, v)) == pytest.approx(1.0)
    assert stats.stable_rank(np.eye(5)) == pytest.approx(5.0)
    assert stats.frob_cos(np.outer(u, v), -2 * np.outer(u, v)) == pytest.approx(-1.0)
    uh, vh = u / np.linalg.norm(u), v / np.linalg.norm(v)
    assert stats.top_component(3 * np.outer(uh, vh), uh, vh) == pytest.approx(3.0)


def test_coherence_identical_vs_random():
    m = np.arange(12.0).reshape(3, 4)
    c = stats.coherence([m] * 10, n_flip=2000, seed=0)
    assert c["rho2"] == pytest.approx(10.0) and c["p_flip"] < 0.01
    rng = np.random.default_rng(0)
    c = stats.coherence([rng.standard_normal((8, 16)) for _ in range(30)], n_flip=2000, seed=0)
    assert 0.5 < c["rho2"] < c["null_q99"] and c["p_flip"] > 0.01


def test_flip_signs_are_cached_and_equal_to_fresh_draws():
    stats._fair_signs.cache_clear()
    mats = [np.random.default_rng(i).standard_normal((4, 5)) for i in range(12)]
    first = stats.coherence(mats, n_flip=3000, seed=9)
    again = stats.coherence(mats, n_flip=3000, seed=9)                      # served from the cache
    assert first == again and stats._fair_signs.cache_info().hits >= 1
    gen = torch.Generator(device="cpu").manual_seed(9)
    fresh = (torch.randint(0, 2, (3000, 12), generator=gen) * 2 - 1).to(torch.float64)
    assert torch.equal(stats._fair_signs(3000, 12, 9), fresh)


def test_one_sided_sign_p():
    assert stats.one_sided_sign_p(3, 3) == pytest.approx(1 / 8)
    assert stats.one_sided_sign_p(2, 3) == pytest.approx(4 / 8)



def test_top_of_p_is_the_binomial_tail_at_one_over_the_arms():
    """One arm of three on top in all of 3 seeds: (1/3)³; in 2 or more: 3·(1/3)²·(2/3) + (1/3)³; two arms is the
    sign test."""
    assert stats.top_of_p(3, 3, 3) == pytest.approx(1 / 27)
    assert stats.top_of_p(2, 3, 3) == pytest.approx(3 * (1 / 9) * (2 / 3) + 1 / 27)
    assert stats.top_of_p(2, 3, 2) == pytest.approx(stats.one_sided_sign_p(2, 3))
    assert stats.top_of_p(0, 3, 3) == pytest.approx(1.0)
    assert stats.one_sided_sign_p(0, 5) == 1.0
    assert stats.one_sided_sign_p(9, 10) == pytest.approx(stats.sign_test(n_pos=9, n_neg=1)["p_greater"])


def test_sign_test_power_matches_the_binomial():
    # n = 10 at α = 0.05: 9 of 10 passes (P(X ≥ 9 | ½) = 11/1024), 8 does not (56/1024 > 0.05); at a true share of
    # 0.9 the test passes with P(X ≥ 9 | 0.9) = 0.9¹⁰ + 10·0.9⁹·0.1.
    assert stats.sign_test_power(10, 0.9, 0.05) == pytest.approx(0.9 ** 10 + 10 * 0.9 ** 9 * 0.1)
    assert stats.sign_test_power(10, 0.5, 0.05) == pytest.approx(11 / 1024)       # its size, below α
    assert stats.sign_test_power(5, 0.99, 0.01) == 0.0                            # 5 of 5 has p = 1/32: never passes


def test_detectable_share_is_where_the_power_is_reached():
    s = stats.detectable_share(10, 0.05, 0.8)
    assert stats.sign_test_power(10, s, 0.05) == pytest.approx(0.8, abs=1e-6)
    assert 0.9 < s < 1                                    # at 0.9 the power is 0.736 < 0.8 (above)
    assert stats.detectable_share(100, 0.05) < stats.detectable_share(30, 0.05) < s     # more signs see less
    assert stats.detectable_share(30, 0.01 / 36) > stats.detectable_share(30, 0.01)     # a stricter level sees less
    assert np.isnan(stats.detectable_share(5, 0.01))                                   # a test that cannot pass


def test_the_null_quantile_is_the_one_coherence_reports():
    """`NULL_QUANTILE` (the number the chapters glue as the null's percentile) is the quantile of the sign-flip null
    that `coherence` returns as null_q99, and the one the token coherence of chapter 5 returns."""
    rng = np.random.default_rng(0)
    mats = [rng.standard_normal((4, 5)) for _ in range(12)]
    out = stats.coherence(mats, n_flip=500, seed=3)
    m = torch.stack([torch.as_tensor(x).to(torch.float64).reshape(-1) for x in mats])
    g = m @ m.T
    eps = stats._fair_signs(500, 12, 3)
    null = ((eps @ g) * eps).sum(1) / torch.trace(g)
    assert out["null_q99"] == pytest.approx(float(torch.quantile(null, stats.NULL_QUANTILE)))
    assert out["null_q99"] != pytest.approx(float(torch.quantile(null, 0.5)))          # the check can fail
    from lib.studies.delta.stats import _coherence_finish
    w, keep = torch.ones(1, 6, dtype=torch.float64), torch.ones(1, 6, dtype=torch.bool)
    nl = torch.as_tensor(rng.standard_normal((1, 300)) ** 2)
    r = _coherence_finish(w, keep, torch.ones(1, 3, dtype=torch.float64), nl, 300)
    assert float(r["rho2_null_q99"][0]) == pytest.approx(float(torch.quantile(nl[0] / 6, stats.NULL_QUANTILE)))
