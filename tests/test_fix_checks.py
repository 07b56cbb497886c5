"""lib/studies/fix/checks.py: the fix acts on tied rows, leaves FP32 attention unchanged up to rounding, changes BF16 O."""
import numpy as np
import pytest

from lib.studies.fix.checks import fix_effect, tied_inputs
from tests.precision import attention_rtol


def test_fix_effect_on_tied_inputs():
    r = fix_effect(seed=1, B=2, N=64, d=16, block=32)
    assert r["pairs_fixed"] > 0 and r["pairs_fixed"] <= r["pairs"]
    # shift-invariance: rounding-level change only, FP32 attention's bound of max|V| (exact integer scores)
    fp32 = attention_rtol(64, 16) * np.abs(tied_inputs(1, 2, 64, 16)[2]).max()
    assert r["fp32_max_abs_change"] < fp32
    assert r["fp32_err_fix"] < fp32 and r["paper_err_fix"] > r["fp32_err_fix"]
    assert 0 < r["paper_frac_changed"] <= 1         # in BF16 it does change the rounded output


def test_inputs_and_bad_tiling():
    q, k, v = tied_inputs(0, B=1, N=8, d=4)
    assert np.array_equal(q, np.round(q)) and (v < 0).all()
    with pytest.raises(ValueError):
        fix_effect(N=50, block=32)
