"""lib/fp/theory.py: exact theory of the tie + sticky-bit bias, checked against independent computations."""
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from lib.fp import theory
from lib.fp.bf16 import exact_round_rne


def test_sum_pmf_counts_every_tuple():
    for k, m in ((1, 7), (2, 7), (3, 4)):
        S0, counts = theory.sum_pmf(k, m)
        assert S0 == k * 2 ** m and sum(counts) == 2 ** (m * k) and len(counts) == k * (2 ** m - 1) + 1


def test_rne_error_q_matches_fraction_reference():
    # independent oracle: lib.fp.bf16.exact_round_rne on the value in absolute units
    rng = np.random.default_rng(0)
    for _ in range(300):
        m = int(rng.integers(2, 8))
        S = int(rng.integers(2 ** m, 2 ** (m + 4)))
        rho = Fraction(int(rng.integers(0, 64)), 32)
        err, d = theory.rne_error_q(S, rho, m)
        x = (Fraction(S) + rho) / 2 ** m
        assert err / 2 ** m == exact_round_rne(x, m) - x


def test_r_zero_is_unbiased_for_powers_of_two_and_tiny_otherwise():
    for k in (1, 2, 4, 8):
        assert theory.expected_error_ulps(k, 0) == 0
    for k in (3, 5, 6, 7):
        v = theory.expected_error_ulps(k, 0)
        assert v != 0 and abs(v) < Fraction(1, 1000)


def test_sticky_window_is_one_sided_and_matches_closed_form():
    for k in (2, 4, 8):
        expr = theory.expected_error_symbolic(k)
        assert sp.simplify(expr - theory.power_of_two_closed_form(k)) == 0
    for k in range(2, 8):
        expr = theory.expected_error_symbolic(k)
        for rho in (Fraction(1, 1024), Fraction(1, 8), Fraction(3, 8)):
            exact = theory.expected_error_ulps(k, rho)
            assert exact == Fraction(str(expr.subs(theory.RHO, sp.Rational(rho.numerator, rho.denominator))))
            assert exact > 0  # away from zero for positive terms


def test_theory_table_and_tie_probability():
    rows = theory.theory_table(range(1, 5))
    assert [r["k"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["p_tie"] == Fraction(1, 2) and rows[3]["p_tie"] == Fraction(1, 4)
    assert rows[0]["A"] == 0 and rows[1]["A"] == Fraction(1, 4)


def test_float_version_agrees_with_exact_including_negative_rho():
    rhos = [0.0, 0.25, 0.75, 1.5, 3.125, -0.25, -1.5]
    for k in (2, 3):
        f = theory.expected_error_float(k, rhos)
        ex = [float(theory.expected_error_ulps(k, Fraction(r))) for r in rhos if r >= 0]
        assert np.allclose(f[: len(ex)], ex, rtol=0, atol=1e-12)   # FP64 against exact fractions ≤ 1: ~1e-16
    # symmetry: a remainder of the opposite sign pushes ties toward zero
    assert theory.expected_error_float(2, [-0.001])[0] < 0


def test_bad_inputs():
    with pytest.raises(TypeError):
        theory.sum_pmf(2.0)
    with pytest.raises(ValueError):
        theory.sum_pmf(0)
    with pytest.raises(ValueError):
        theory.expected_error_ulps(2, -1)
    with pytest.raises(ValueError):
        theory.power_of_two_closed_form(3)
    with pytest.raises(ValueError):
        theory.expected_error_float(2, [-1e6])
