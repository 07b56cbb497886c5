"""Round-then-normalise's snap-back (lib/fp/snapback.py): the split of O's error, the prediction, the grid's seeds."""
import numpy as np
import pytest

from lib.fp import rounding_bias as rb
from lib.fp import snapback

SEED = 20251004


def test_parts_add_up_to_the_error_of_o():
    p = snapback.rtn_parts(SEED, 2, 10.0, n_problems=8)
    assert abs(p["rest"][0]) < 1e-3                       # only the FP32 sums and division are left over
    assert p["o_rtn"][0] == pytest.approx(p["first"][0] + p["second"][0] + p["rest"][0], abs=1e-12)
    assert p["first"][0] == pytest.approx(p["pv"][0], abs=0.01)   # the first rounding's part is P̄V's own error


@pytest.mark.parametrize("k,gap", [(2, 10.0), (2, 11.0), (4, 10.0)])
def test_inside_the_window_o_keeps_the_full_tie_bias(k, gap):
    """σ < ½: round(P̃/ℓ) = P̃/k for (nearly) every output, and O errs by −1/(2k) (V < 0) whatever P̄V does."""
    p = snapback.rtn_parts(SEED + k, k, gap, n_problems=16)
    assert p["sigma"] < 0.5 and p["snap"] > 0.98
    assert p["o_rtn"][0] == pytest.approx(-1 / (2 * k), abs=0.02)
    assert p["predicted"][0] == pytest.approx(p["o_rtn"][0], abs=p["o_rtn"][1] + p["predicted"][1])
    assert abs(p["o_ntr"][0]) < 0.02                       # normalise-then-round has no snap-back


def test_at_half_an_ulp_pv_is_unbiased_but_o_is_not():
    p = snapback.rtn_parts(SEED, 2, 10.0, n_problems=16)
    assert 0.3 < p["rho"] < 0.8
    assert abs(p["pv"][0]) < 0.05 and p["o_rtn"][0] < -0.2


def test_past_the_window_the_second_rounding_steps_back():
    """k = 2, ρ ≈ 1.5 (σ ≈ 0.75): the second rounding steps back one ULP, and the mean turns positive."""
    p = snapback.rtn_parts(SEED, 2, 9.0, n_problems=16)
    assert 1.0 < p["rho"] < 2.0 and p["snap"] < 0.05
    assert p["o_rtn"][0] > 0.15
    assert p["predicted"][0] == pytest.approx(p["o_rtn"][0], abs=p["o_rtn"][1] + p["predicted"][1])


def test_prediction_formula():
    rho, sigma = np.array([0.5, 1.5, 0.0, 0.2]), np.array([0.2, 0.7, 0.0, 0.4])
    np.testing.assert_allclose(snapback.predicted_rtn(2, rho, sigma), [-0.25, 0.25, 0.0, -0.25])
    np.testing.assert_allclose(snapback.predicted_rtn(4, np.array([1.5]), np.array([0.3])), [-0.375])
    for k in (1, 3, 6):
        with pytest.raises(ValueError):
            snapback.predicted_rtn(k, rho, sigma)
    assert "predicted" not in snapback.rtn_parts(SEED, 3, 10.0, n_problems=2)


def test_grid_cells_reuse_the_grids_seeds():
    sizes = dict(n_problems=4, rows=4, d=8, spread=4.0)
    grid = rb.mc_grid(SEED, ks=[2], gaps=[10, 12], **sizes)
    cfg = dict(n_problems=4, rows_per_problem=4, features=8, spread=4.0)
    rows = snapback.grid_cells(grid, cfg, [(2, 10), (2, 9)])
    on, off = rows
    assert on["on_grid"] and not off["on_grid"]
    g10 = next(r for r in grid if r["gap"] == 10)
    assert (on["pv"][0], on["o_rtn"][0], on["o_ntr"][0]) == (g10["rne_pv"], g10["rne_o_rtn"], g10["rne_o_ntr"])
