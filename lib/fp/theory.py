"""Exact theory of the tie + sticky-bit rounding bias (chapter 1), in exact rationals and sympy.

Model
-----
``k`` "tied" terms v₁…v_k (the entries with P̄ = 1) are drawn independently and uniformly from the ``2**m`` values
of the m-mantissa-bit grid in one binade, [1, 2) (the result in ULPs does not depend on which binade: scaling by
a power of two is exact). They all have the same sign (taken positive here; negative terms flip the sign of every
error). A remainder r ≥ 0 of the same sign (the P̄ ≪ 1 terms) is added, and the exact sum v₁+…+v_k+r is rounded
once to m mantissa bits with round-to-nearest-even (RNE), as an FP32 accumulator rounded to BF16 does.

Units: ``q = 2**-m`` is the ULP of the tied terms; ``ρ = r / q`` is the remainder in those units. The sum
Σ = v₁+…+v_k is an integer multiple of q, Σ/q ∈ [k·2**m, 2k·2**m − k]. Its own ULP is 2**d · q with
d = ⌊log₂(Σ/q)⌋ − m dropped bits. Every error is reported in ULPs *of the result's binade*.

Results (all computed here, none typed):
* r = 0: the error is −j (j < half), +(2**d − j) (j > half) or ±half (a tie, resolved to the even neighbour), where j
  is the dropped residue. When k is a power of two, j is exactly uniform and the tie's parity is balanced, so the mean
  is exactly 0. For other k the sum straddles two binades and the mean is a tiny non-zero rational.
* 0 < ρ < ½ (the sticky regime: r sets the sticky bit but cannot change the kept bits): every tie is now above the
  midpoint and rounds *away from zero*, so the mean error is A_k − B_k·ρ (exact rationals from
  `expected_error_symbolic`); for k = 2**d it is 1/(2k) − ρ/k ULP: every tie error has the sign of the terms.
* general ρ: `expected_error_ulps` evaluates the exact mean for any remainder (a sawtooth in ρ with period ≈ 1 that
  averages to ≈ 0 once r is spread over many q: the "diffuse attention" regime).
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np
import sympy as sp

from lib.fp.bf16 import check_mantissa_bits

__all__ = ["RHO", "sum_pmf", "rne_error_q", "expected_error_ulps", "expected_error_symbolic", "power_of_two_closed_form",
           "tie_probability", "theory_table", "expected_error_float"]

RHO = sp.Symbol("rho", positive=True)  # remainder in units of q = ULP of the tied terms


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k (number of tied terms) must be an int >= 1, got {type(k).__name__} {k!r}")
    if not 1 <= int(k) <= 16:
        raise ValueError(f"k (number of tied terms) must be in [1, 16], got {k}")
    return int(k)


@lru_cache(maxsize=None)
def sum_pmf(k: int, m: int = 7) -> tuple[int, tuple[int, ...]]:
    """Exact distribution of Σ/q for k i.i.d. terms uniform on the m-bit grid of [1, 2).

    Returns (S0, counts): Σ/q = S0 + i occurs in counts[i] of the 2**(m·k) equally likely k-tuples (Python ints,
    exact)."""
    k, m = _check_k(k), check_mantissa_bits(m)
    if m > 10:
        raise ValueError(f"sum_pmf is exact by convolution; m must be <= 10 here, got {m}")
    base = np.ones(2 ** m, dtype=object)
    pmf = np.array([1], dtype=object)
    for _ in range(k):
        pmf = np.convolve(pmf, base)
    return k * 2 ** m, tuple(int(c) for c in pmf)


def rne_error_q(S: int, rho: Fraction, m: int = 7) -> tuple[Fraction, int]:
    """Exact RNE error of rounding S + rho (both in units of q; S an integer ≥ 2**m, 0 ≤ rho) to m mantissa bits.

    Returns (error in units of q, d) where 2**d·q is the ULP of the rounded value's binade *before* rounding."""
    m = check_mantissa_bits(m)
    x = Fraction(S) + Fraction(rho)
    if x <= 0:
        raise ValueError("S + rho must be positive")
    e = x.numerator.bit_length() - x.denominator.bit_length()   # floor(log2 x), possibly off by one
    if Fraction(2) ** e > x:
        e -= 1
    d = e - m
    spacing = Fraction(2) ** d
    quot = x / spacing
    lo = quot.numerator // quot.denominator
    rem = quot - lo
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return lo * spacing - x, d


def expected_error_ulps(k: int, rho=0, m: int = 7) -> Fraction:
    """Exact mean signed error, in ULPs of the result, of RNE(v₁+…+v_k + rho·q) over all 2**(m·k) tuples.

    rho: the same-sign remainder in units of q (a Fraction, int, or a float that is converted exactly)."""
    S0, counts = sum_pmf(k, m)
    rho = Fraction(rho)
    if rho < 0:
        raise ValueError(f"rho must be >= 0 (same sign as the tied terms), got {rho}")
    total = Fraction(0)
    for i, c in enumerate(counts):
        err, d = rne_error_q(S0 + i, rho, m)
        total += c * err / Fraction(2) ** d
    return total / (2 ** (m * k))


def tie_probability(k: int, m: int = 7) -> Fraction:
    """Exact probability that the dropped bits of v₁+…+v_k are exactly one half ULP (a tie)."""
    S0, counts = sum_pmf(k, m)
    n = 0
    for i, c in enumerate(counts):
        S = S0 + i
        d = S.bit_length() - 1 - m
        if d >= 1 and S % (1 << d) == 1 << (d - 1):
            n += c
    return Fraction(n, 2 ** (m * k))


def expected_error_symbolic(k: int, m: int = 7) -> sp.Expr:
    """The exact mean error in ULPs as a sympy expression in RHO = r/q, valid on the sticky window 0 < ρ < ½.

    In that window no kept bit changes: a residue j < half rounds down (error −j − ρ), j ≥ half rounds up
    (error 2**d − j − ρ; the tie j = half now goes up because the sticky bit is set)."""
    S0, counts = sum_pmf(k, m)
    const, slope = sp.Rational(0), sp.Rational(0)
    for i, c in enumerate(counts):
        S = S0 + i
        d = S.bit_length() - 1 - m
        if d <= 0:
            e_const = 0
        else:
            j, h = S % (1 << d), 1 << (d - 1)
            e_const = -j if j < h else (1 << d) - j
        const += sp.Rational(c * e_const, 2 ** max(d, 0))
        slope += sp.Rational(c, 2 ** max(d, 0))
    n = sp.Integer(2) ** (m * k)
    return sp.nsimplify(const / n) - sp.nsimplify(slope / n) * RHO


def power_of_two_closed_form(k: int) -> sp.Expr:
    """The closed form for k = 2**d (d ≥ 1) on the sticky window: 1/(2k) − ρ/k ULP (uniform residues; derivation
    in chapter 1). Raises for k not a power of two."""
    k = _check_k(k)
    if k < 2 or k & (k - 1):
        raise ValueError(f"the closed form holds for k a power of two >= 2, got {k}")
    return sp.Rational(1, 2 * k) - RHO / k


def theory_table(ks=range(1, 9), m: int = 7) -> list[dict]:
    """Per k: P(tie), exact mean at r = 0, and the sticky-window expression A − B·ρ (with A, B as Fractions)."""
    rows = []
    for k in ks:
        expr = expected_error_symbolic(k, m)
        A = Fraction(str(expr.subs(RHO, 0)))
        B = Fraction(str(-sp.diff(expr, RHO)))
        rows.append({"k": int(k), "p_tie": tie_probability(k, m), "mean_r0": expected_error_ulps(k, 0, m),
                     "A": A, "B": B, "expr": expr})
    return rows


def expected_error_float(k: int, rho, m: int = 7) -> np.ndarray:
    """Vectorised float64 version of `expected_error_ulps` for many remainders rho (array, units of q; a negative
    rho is a remainder of the opposite sign to the tied terms).

    Exact up to float64 rounding of rho; used to predict the Monte Carlo mean from each row's actual remainder."""
    S0, counts = sum_pmf(k, m)
    S = (S0 + np.arange(len(counts))).astype(np.float64)
    w = np.array([float(c) for c in counts]) / float(2 ** (m * k))
    rho = np.asarray(rho, dtype=np.float64)
    if np.any(S0 + rho <= 0):
        raise ValueError("need S + rho > 0 (a negative rho, a remainder of the opposite sign, must not flip the sum)")
    x = S[None, :] + rho.reshape(-1, 1)                 # (n_rho, n_S), in units of q
    e = np.floor(np.log2(x))
    spacing = np.exp2(np.maximum(e - m, 0.0))           # ULP of the result in units of q (>= 1)
    rounded = np.round(x / spacing) * spacing            # np.round is ties-to-even
    err_ulp = (rounded - x) / spacing
    return (err_ulp * w[None, :]).sum(axis=1).reshape(rho.shape)
