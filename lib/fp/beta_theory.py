"""Theory of the β fix (chapter 7): shift invariance, and when β is too small or too large.

The fix replaces the tile max r_m of a row with repeated maxima by m = β·r_m (r_m > 0) or 0 (r_m < 0). The largest
P̄ entry becomes exp(−(β−1)·r_m) (or exp(r_m) for negative r_m). Two things can go wrong:

* **too small** — the shifted largest entry still *rounds* to 1 in the low-precision format, so P̄ = 1 entries (and the
  tie bias) come back: happens when (β−1)·r_m ≤ x₁, with x₁ the largest x for which round(exp(−x)) = 1.
  For RNE with m mantissa bits, the neighbours of 1 below are 1 − 2^−(m+1) and 1, so round(exp(−x)) = 1 iff
  exp(−x) ≥ 1 − 2^−(m+2) (the tie goes to 1, which is even): x₁ = −ln(1 − 2^−(m+2)).
* **too large** — the row underflows: every P̄ entry is below the smallest representable value, ℓ = 0 and O = 0/0.
  Under RNE a value rounds to 0 once it is at most half the smallest subnormal: with FP32 P̄/ℓ (production FA2)
  that is (β−1)·r_m ≥ 150·ln 2 ≈ 103.97; with ℓ and P̄ stored in BF16 (the paper's code) 134·ln 2 ≈ 92.88; and
  precision degrades earlier, below the normal range 2^−126 (x ≈ 87.34).
* **large but finite** — in the paper's code LSE = m + log ℓ is stored in BF16, and m = β·r_m is β times larger than
  without the fix, so the absolute LSE error (half a BF16 ULP of |LSE|) grows with β; the backward P = exp(S − LSE)
  then carries a relative error of up to exp(ulp(LSE)/2) − 1.

All thresholds are derived in exact arithmetic (sympy) and cross-checked numerically in the tests.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from lib.fp.bf16 import check_mantissa_bits, round_rne, ulp

__all__ = ["shift_invariance_proof", "x_round_to_one", "x_round_to_one_measured", "underflow_x",
           "beta_window", "lse_relative_error", "regime"]


def shift_invariance_proof(n: int = 4):
    """Sympy: softmax(s − c)_i − softmax(s)_i simplifies to 0 for symbolic scores s_1..s_n and shift c.

    Returns the list of simplified differences (all 0) — the fix changes nothing in exact arithmetic."""
    s = sp.symbols(f"s1:{n + 1}", real=True)
    c = sp.Symbol("c", real=True)
    soft = lambda v: [sp.exp(vi) / sum(sp.exp(vj) for vj in v) for vi in v]  # noqa: E731
    shifted = soft([si - c for si in s])
    plain = soft(list(s))
    return [sp.simplify(a - b) for a, b in zip(shifted, plain)]


def x_round_to_one(m: int = 7) -> float:
    """Largest x ≥ 0 with RNE_m(exp(−x)) == 1, in exact arithmetic: −ln(1 − 2^−(m+2)). BF16 (m=7): ≈ 0.0019550."""
    m = check_mantissa_bits(m)
    return float(-sp.log(1 - sp.Rational(1, 2 ** (m + 2))).evalf(30))


def x_round_to_one_measured(m: int = 7) -> float:
    """The same threshold measured: the largest FP32 x with RNE_m(float32(exp(−x))) == 1, by bisection on the FP32 grid
    (exp(−x) is monotone). Differs from the exact value only by FP32 exp's own rounding."""
    m = check_mantissa_bits(m)
    lo, hi = np.float32(0.0), np.float32(1.0)       # round(exp(-lo)) == 1, round(exp(-hi)) < 1
    f = lambda x: round_rne(np.exp(-np.float32(x), dtype=np.float32), m) == np.float32(1.0)  # noqa: E731
    assert f(lo) and not f(hi)
    ulo, uhi = int(lo.view(np.uint32)), int(hi.view(np.uint32))
    while uhi - ulo > 1:                             # bisection on bit patterns = on the FP32 grid
        mid = (ulo + uhi) // 2
        if f(np.uint32(mid).view(np.float32)):
            ulo = mid
        else:
            uhi = mid
    return float(np.uint32(ulo).view(np.float32))


def underflow_x(fmt: str = "fp32") -> float:
    """x from which RNE(exp(−x)) is 0 in `fmt`: exp(−x) ≤ half the smallest subnormal (the tie goes to even, 0).
    'fp32': 2^−150 (x ≈ 103.97), 'bf16': 2^−134 (≈ 92.88); 'bf16_normal'/'fp32_normal': 2^−126 (≈ 87.34), where
    exp(−x) leaves the normal range and starts losing mantissa bits."""
    exps = {"fp32": 150, "bf16": 134, "bf16_normal": 126, "fp32_normal": 126}
    if fmt not in exps:
        raise ValueError(f"fmt must be one of {sorted(exps)}, got {fmt!r}")
    return exps[fmt] * math.log(2)


def beta_window(r_m: float, m: int = 7, fmt: str = "bf16") -> tuple[float, float]:
    """For a positive repeated max r_m: (β_min, β_max) such that the fix is effective (no entry rounds to 1) and the
    row does not underflow: β_min = 1 + x₁/r_m, β_max = 1 + underflow_x(fmt)/r_m. Raises for r_m ≤ 0."""
    if not r_m > 0:
        raise ValueError(f"r_m must be > 0 (negative repeated maxima are shifted to 0, independent of β), got {r_m}")
    return 1.0 + x_round_to_one(m) / r_m, 1.0 + underflow_x(fmt) / r_m


def lse_relative_error(beta: float, r_m, m: int = 7):
    """Worst-case relative error of the backward P = exp(S − LSE) when LSE ≈ β·r_m is stored with m mantissa bits:
    exp(ulp(β·r_m)/2) − 1 (dimensionless). Vectorised over r_m."""
    if not beta > 1:
        raise ValueError(f"beta must be > 1, got {beta}")
    lse = beta * np.asarray(r_m, dtype=np.float64)
    return np.expm1(ulp(lse, m) / 2)


def regime(beta: float, r_m: float, m: int = 7, fmt: str = "bf16") -> str:
    """'ineffective' (shifted max still rounds to 1), 'underflow' (row vanishes), or 'ok'; for a positive repeated max."""
    lo, hi = beta_window(r_m, m, fmt)
    if beta <= lo:
        return "ineffective"
    if beta >= hi:
        return "underflow"
    return "ok"
