"""lib/fp/fix_error.py: the β fix's own rounding error in the paper placement (chapter 7's figure and numbers)."""
import matplotlib
import numpy as np
import pytest

import lib.book.setup  # noqa: F401
from lib.fp import fix_error as fe
from lib.studies.fix import figures as fix_figures


def test_tied_rows_have_repeated_maxima_on_the_bf16_grid():
    s, v = fe.tied_rows(8.0, heads=3, n=32, seed=1)
    assert s.shape == v.shape == (3, 32, 32) and s.dtype == np.float32
    ties = (s == 8.0).sum(-1)
    assert (ties >= 2).all() and (ties == 2).mean() > 0.5 and (s <= 8.0).all() and (v < 0).all()
    from lib.fp.bf16 import round_rne
    assert np.array_equal(round_rne(s, 7), s) and np.array_equal(round_rne(v, 7), v)


def test_shift_spacing():
    # (β−1)·r = 48 lies in [32, 64): spacing 0.25; capped at 64: 0.5; uncapped 6·64 = 384: 2
    assert fe.shift_spacing(8.0) == 0.25 and fe.shift_spacing(32.0) == 0.5
    assert fe.shift_spacing(64.0, max_shift=None) == 2.0


def test_profile_shows_the_fix_error_and_its_cause():
    """The chapter's claims, at a small size: with the fix, the paper placement's backward row-sum error grows with
    r_m to several times the unfixed one; with S − m in FP32 it stays at the unfixed level; production FA2 numerics
    (FP32 ℓ and LSE) keep it at FP32 rounding level."""
    p = fe.fix_error_profile(r_values=(2, 32), heads=4, n=32)
    v = p["variants"]
    assert set(v) == set(fe.VARIANTS) and p["r"] == [2.0, 32.0] and p["config"]["rows_per_r"] == 128
    assert v["paper+fix"]["psum_err"][1] > 5 * v["paper"]["psum_err"][1]
    assert v["paper+fix"]["psum_err"][1] > 3 * v["paper+fix"]["psum_err"][0]
    assert v["paper+fix, S−m FP32"]["psum_err"][1] < 2 * v["paper"]["psum_err"][1]
    assert v["paper+fix"]["o_rms"][1] > 2 * v["paper"]["o_rms"][1]
    assert max(v["fa2+fix"]["psum_err"]) < 1e-5       # FP32 row sums of P (≤ 32 terms ≤ 1): γ_32 = 16·eps32 ≈ 2e-6
    # deterministic: same seed, same numbers
    assert fe.fix_error_profile(r_values=(2, 32), heads=4, n=32) == p


def test_bad_arguments():
    with pytest.raises(ValueError):
        fe.fix_error_profile(r_values=(3.01,))      # not a BF16 value
    with pytest.raises(ValueError):
        fe.fix_error_profile(r_values=(-1.0,))
    with pytest.raises(ValueError):
        fe.tied_rows(1.0, heads=0)


def test_figure():
    fig = fix_figures.fix_error_figure(fe.fix_error_profile(r_values=(2, 8), heads=2, n=16))
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == len(fe.VARIANTS)
    matplotlib.pyplot.close(fig)
