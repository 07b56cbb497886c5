"""Property tests of the β fix (`lib.fp.reference.fixed_row_max`, the code the emulator and chapter use).

Hypothesis draws the *families* of rows (size, magnitude of the maxima, number of exact ties, masking, β, tie_tol);
numpy draws the rows of each family in bulk, so ≥ 10^6 rows run in a few seconds. Three properties:
1. the adjusted max is never NaN and never +Inf; it is −Inf exactly for fully masked rows; otherwise it is the rule
   of Qiu & Yao §4 (β·max for a repeated positive max, 0 for a repeated negative max, unchanged otherwise);
2. the FA2 online softmax with the fix (FP32 and FP64) never produces NaN/Inf weights, including huge and tiny
   maxima, all-equal rows and fully masked rows / tiles;
3. in exact arithmetic the fix never changes the softmax: FP64 weights with and without the fix agree to rounding
   (where no weight underflows), and 60-digit mpmath arithmetic agrees to 1e-50.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.fp.reference import check_fix_args, fixed_row_max, online_softmax_rows
from tests.precision import EPS32

ROWS_PER_EXAMPLE = 12_000
EXAMPLES = 45                       # 45 × 12 000 × (property 1 and 2) > 10^6 rows
_seen = {"rows": 0}

families = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "n": st.integers(1, 96),
    "block_n": st.sampled_from([1, 4, 16, 32, 128]),
    "log10_max": st.floats(-38, 38),                 # magnitude of the row maxima: tiny ... huge
    "sign": st.sampled_from([-1.0, 1.0, 0.0]),        # 0.0: maxima exactly 0
    "ties": st.integers(1, 5),                       # copies of the max
    "all_equal_frac": st.floats(0, 1),
    "masked_frac": st.floats(0, 1),
    "beta": st.sampled_from([1.0000001, 1.5, 2.0, 7.0, 8.0, 1e6]),
    "tie_tol": st.sampled_from([0.0, 1e-3, 0.5]),
    "max_shift": st.sampled_from([64.0, 64.0, 10.0, None]),   # None: the paper's exact rule (no guard)
})


def make_rows(f, dtype=np.float32):
    """(R, n) rows: a max of magnitude 10^log10_max (sign per family) repeated `ties` times, the rest below it;
    a fraction of all-equal rows and of fully masked rows; random masking of other entries."""
    rng = np.random.default_rng(f["seed"])
    R, n = ROWS_PER_EXAMPLE, f["n"]
    mag = 10.0 ** (f["log10_max"] + rng.uniform(-1, 1, R))
    mx = np.clip(f["sign"] * mag, -np.finfo(np.float32).max, np.finfo(np.float32).max).astype(dtype)
    below = mx[:, None] - np.abs(mx[:, None]) * rng.uniform(0.0, 3.0, (R, n)) - rng.uniform(0, 5, (R, n))
    with np.errstate(over="ignore"):
        s = below.astype(dtype)           # below −FLT_MAX becomes −inf: a masked entry
    cols = rng.permuted(np.tile(np.arange(n), (R, 1)), axis=1)[:, :min(f["ties"], n)]
    np.put_along_axis(s, cols, mx[:, None], axis=1)
    eq = rng.random(R) < f["all_equal_frac"]
    s[eq] = mx[eq, None]
    s = np.where(rng.random((R, n)) < 0.2 * f["masked_frac"], -np.inf, s).astype(dtype)
    s[rng.random(R) < 0.1 * f["masked_frac"]] = -np.inf          # fully masked rows
    return s


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(families)
def test_fixed_row_max_is_the_rule_and_never_nan(f):
    s = make_rows(f)
    m = np.max(s, axis=1)
    with np.errstate(over="ignore"):
        out = fixed_row_max(s, m, beta=f["beta"], tie_tol=f["tie_tol"], max_shift=f["max_shift"])
    _seen["rows"] += s.shape[0]
    assert out.dtype == s.dtype and out.shape == m.shape
    assert not np.isnan(out).any()
    assert not np.isposinf(out).any()
    assert np.array_equal(np.isneginf(out), np.isneginf(m))           # −inf exactly for fully masked rows
    # the rule, written independently in float64
    m64 = m.astype(np.float64)
    thr = (m - np.float32(f["tie_tol"])) if f["tie_tol"] else m
    repeated = (np.sum(s >= thr[:, None], axis=1) >= 2) & np.isfinite(m64)
    with np.errstate(over="ignore"):
        scaled = np.float32(f["beta"]) * m.astype(np.float32)
    expect = np.where(repeated & (m64 > 0) & np.isfinite(scaled), scaled, m)
    expect = np.where(repeated & (m64 < 0), 0.0, expect).astype(np.float32)
    if f["max_shift"] is not None:      # the guard: a shift larger than max_shift becomes max_shift
        with np.errstate(over="ignore", invalid="ignore"):
            d = np.where(m > 0, (np.float32(f["beta"]) - np.float32(1)) * m, -m)
            expect = np.where(repeated & (m != 0) & (d > np.float32(f["max_shift"])),
                              m + np.float32(f["max_shift"]), expect).astype(np.float32)
        fin = np.isfinite(m64)
        slack = np.spacing(np.abs(m[fin]) + np.float32(f["max_shift"])).astype(np.float64)
        assert np.all(out[fin].astype(np.float64) - m64[fin] <= f["max_shift"] + slack)   # shift ≤ max_shift
    assert np.array_equal(out, expect)
    # the fix only ever lowers the peak weight below 1 (or leaves the row alone)
    assert np.all((out >= m) | np.isneginf(m))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(families, st.sampled_from(["beta", "beta_split"]))
def test_online_softmax_with_fix_never_nan_or_inf(f, fix):
    for dtype in (np.float32, np.float64):
        s = make_rows(f, dtype)
        w, m, l = online_softmax_rows(s, block_n=f["block_n"], fix=fix, beta=f["beta"], tie_tol=f["tie_tol"],
                                      max_shift=f["max_shift"])
        assert np.isfinite(w).all() and np.isfinite(l).all()
        if f["max_shift"] is not None:
            # with the guard, every row with a finite entry keeps a non-zero row sum (its max weight ≥ e^−64)
            assert (l[np.isfinite(s).any(axis=1)] > 0).all()
        assert not np.isnan(m).any() and not np.isposinf(m).any()
        assert (w >= 0).all() and (w <= 1).all()
        _seen["rows"] += s.shape[0] if dtype == np.float32 else 0


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(families, st.sampled_from(["beta", "beta_split"]))
def test_fix_does_not_change_softmax_in_exact_arithmetic(f, fix):
    """FP64: where no weight underflows (the shift (β−1)·max stays ≤ 600 and entries lie within 100 of the max),
    weights with and without the fix agree to a few ulps of FP64 times the shift."""
    f = dict(f, log10_max=min(f["log10_max"], 1.5))
    s = make_rows(f, np.float64)
    s = np.where(np.isneginf(s), s, np.maximum(s, np.max(s, axis=1, keepdims=True) - 100))
    keep = (np.isfinite(np.max(s, axis=1))) & ((f["beta"] - 1) * np.abs(np.max(s, axis=1)) <= 600)
    s = s[keep]
    if not len(s):
        return
    w0, _, _ = online_softmax_rows(s, block_n=f["block_n"])
    w1, _, _ = online_softmax_rows(s, block_n=f["block_n"], fix=fix, beta=f["beta"], tie_tol=f["tie_tol"],
                                   max_shift=f["max_shift"])
    # exp(x − m) with |x − m| ≤ shift: its FP64 argument is off by ≤ eps64·shift, so the weight by that relative (8×
    # 1e-15 ≈ 36·eps64 of room); the row sums of ≤ a few hundred FP64 weights: ≪ 1e-12
    shift = (f["beta"] - 1) * np.abs(np.max(s, axis=1, keepdims=True)) + 200
    assert np.all(np.abs(w1 - w0) <= 1e-15 * shift * np.maximum(w0, 1e-300) * 8 + 1e-300)
    assert np.allclose(w1.sum(1), 1.0, rtol=1e-12)


def test_fix_exact_with_mpmath():
    """60-digit arithmetic: softmax with the fixed max equals softmax with the plain max, row by row."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 12))
        mx = float(rng.choice([-1, 1]) * rng.uniform(0.1, 20))
        s = (mx - rng.uniform(0, 30, n)).astype(np.float32)
        s[rng.choice(n, 2, replace=False)] = np.float32(mx)
        m_fix = float(fixed_row_max(s[None, :], beta=7.0)[0])
        assert m_fix != float(np.max(s))                        # the fix fired
        for shift in (float(np.max(s)), m_fix):
            e = [mpmath.exp(mpmath.mpf(float(x)) - mpmath.mpf(shift)) for x in s]
            tot = mpmath.fsum(e)
            w = [x / tot for x in e]
            if shift == float(np.max(s)):
                ref = w
        assert max(abs(a - b) for a, b in zip(w, ref)) < mpmath.mpf(10) ** -50


def test_fully_masked_rows_and_tiles():
    s = np.full((3, 8), -np.inf, np.float32)
    s[1, :4] = [1.0, 1.0, 0.5, -2.0]            # second tile fully masked for row 1
    s[2, :4] = [-3.0, -3.0, -4.0, -5.0]         # repeated negative max, then a masked tile
    out = fixed_row_max(s[:, :4], beta=7.0)
    assert np.isneginf(out[0]) and out[1] == 7.0 and out[2] == 0.0
    w, m, l = online_softmax_rows(s, block_n=4, fix="beta", beta=7.0)
    assert np.isfinite(w).all() and (w[0] == 0).all()
    # FP32: ℓ (8 terms), the division, the check's own sum of 8: ≤ (8 + 1 + 8)·eps32/2 ≈ 1e-6; 16·eps32 ≈ 1.9e-6
    np.testing.assert_allclose(w[1:].sum(1), 1.0, rtol=16 * EPS32)


def test_too_large_beta_underflows_the_whole_row_without_the_guard():
    """The paper's App. C warning, pinned down: with the paper's exact rule (max_shift=None) and β = 7, a repeated
    max of 20 shifts every exponent below −120, so in FP32 the row sum underflows to 0 and the row's weights are all
    0 (finite here only because of ℓ_safe; a kernel dividing by ℓ gives NaN). β = 2, or the default guard
    max_shift = 64, keeps the row a softmax. (Chapter 7 studies this range.)"""
    s = np.array([[20.0, 20.0, 19.0, 0.0]], np.float32)
    w7, _, l7 = online_softmax_rows(s, block_n=4, fix="beta", beta=7.0, max_shift=None)
    w2, _, l2 = online_softmax_rows(s, block_n=4, fix="beta", beta=2.0, max_shift=None)
    wg, mg, lg = online_softmax_rows(s, block_n=4, fix="beta", beta=7.0)
    assert l7[0] == 0 and (w7 == 0).all()
    assert l2[0] > 0 and abs(w2.sum() - 1) < 1e-6       # FP32, 4 keys: ≤ (4 + 1 + 4)·eps32/2 ≈ 5e-7
    assert mg[0] == np.float32(20.0 + 64.0) and lg[0] > 0 and abs(wg.sum() - 1) < 1e-6


@pytest.mark.parametrize("bad,err", [(0.0, ValueError), (-1.0, ValueError), (float("inf"), ValueError),
                                     ("64", TypeError)])
def test_bad_max_shift_raises(bad, err):
    with pytest.raises(err):
        fixed_row_max(np.zeros((1, 4), np.float32), beta=2.0, max_shift=bad)


def test_beta_overflow_keeps_the_max_finite():
    s = np.array([[3e38, 3e38, 1.0]], np.float32)
    with np.errstate(over="ignore"):
        out = fixed_row_max(s, beta=7.0)
    assert out[0] == np.float32(3e38)


@pytest.mark.parametrize("beta,tol,err", [(1.0, 0.0, ValueError), (0.5, 0.0, ValueError), (-2, 0.0, ValueError),
                                          (2.0, -1e-3, ValueError), (float("nan"), 0.0, ValueError),
                                          (float("inf"), 0.0, ValueError), ("2", 0.0, TypeError),
                                          (True, 0.0, TypeError)])
def test_bad_beta_and_tie_tol_raise(beta, tol, err):
    with pytest.raises(err):
        check_fix_args("beta", beta, tol)
    with pytest.raises(err):
        fixed_row_max(np.zeros((1, 4), np.float32), beta=beta, tie_tol=tol)


def test_enough_rows_were_checked():
    """Runs after the hypothesis tests in this module (pytest keeps file order): ≥ 10^6 rows in total."""
    if _seen["rows"] == 0:
        pytest.skip("run together with the property tests of this module")
    assert _seen["rows"] >= 1_000_000, _seen["rows"]
