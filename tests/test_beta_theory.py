"""lib/fp/beta_theory.py: thresholds derived exactly, then checked against measured rounding."""
import math

import numpy as np
import pytest
import torch

from lib.fp import beta_theory as bt
from lib.fp.bf16 import round_rne


def test_shift_invariance_is_exact():
    assert all(d == 0 for d in bt.shift_invariance_proof(4))


@pytest.mark.parametrize("m", [3, 5, 7, 10])
def test_round_to_one_threshold_theory_matches_measurement(m):
    exact, measured = bt.x_round_to_one(m), bt.x_round_to_one_measured(m)
    # FP32 exp is correctly rounded to within 1 ULP of exp(-x); near 1 that moves x by ≲ 2^-24 (relative to 1).
    assert abs(exact - measured) <= 2 ** -22
    x = np.float32(measured)
    assert round_rne(np.exp(-x), m) == 1.0
    assert round_rne(np.exp(-np.nextafter(x, np.float32(1))), m) < 1.0


def test_bf16_threshold_against_torch():
    x1 = bt.x_round_to_one(7)
    xs = torch.tensor([x1 * 0.99, x1 * 1.01], dtype=torch.float32)
    assert torch.exp(-xs).to(torch.bfloat16).float().tolist() == [1.0, 1.0 - 2 ** -8]
    assert math.isclose(x1, 0.0019550348, rel_tol=1e-7)   # the literal's 8 significant digits


def test_underflow_thresholds_against_torch():
    for fmt, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x = bt.underflow_x(fmt)
        below = torch.exp(-torch.tensor([x - 0.01], dtype=torch.float64)).to(dtype)
        above = torch.exp(-torch.tensor([x + 0.01], dtype=torch.float64)).to(dtype)
        assert below.item() > 0 and above.item() == 0


def test_beta_window_and_regimes():
    lo, hi = bt.beta_window(10.0)
    assert 1 < lo < 1.001 and math.isclose(hi, 1 + 134 * math.log(2) / 10)   # FP64 formulas: isclose's 1e-9
    assert bt.regime(7.0, 10.0) == "ok"
    assert bt.regime(7.0, 20.0) == "underflow"          # 6·20 = 120 > 92.2
    assert bt.regime(1.5, 1e-3) == "ineffective"        # 0.5e-3 < 1.955e-3
    with pytest.raises(ValueError):
        bt.beta_window(-1.0)
    with pytest.raises(ValueError):
        bt.underflow_x("fp8")


def test_lse_error_grows_with_beta():
    e2, e7 = bt.lse_relative_error(2.0, 10.0), bt.lse_relative_error(7.0, 10.0)
    assert e7 > e2 > 0
    # LSE = 70 lies in [64, 128): BF16 ULP 0.5, half-ULP 0.25 -> exp(0.25) - 1
    assert math.isclose(float(e7), math.expm1(0.25))
    with pytest.raises(ValueError):
        bt.lse_relative_error(1.0, 1.0)


def test_beta_window_figure_regions():
    import matplotlib.pyplot as plt
    from lib.studies.fix.figures import beta_window_figure
    fig = beta_window_figure()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("ineffective" in s for s in labels) and any("underflow" in s for s in labels)
    assert ax.get_xscale() == "log"
    plt.close(fig)
