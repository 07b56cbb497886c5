"""lib/fp/rounding_bias.py: bit tables, the worked example, the enumeration, the Monte Carlo; and chapter 1's figures
(lib/studies/rounding/figures.py)."""
from fractions import Fraction

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.fp import rounding_bias as rb
from lib.fp import theory
from lib.studies.rounding import figures as rfig
from tests.precision import EPS32


def test_worked_example_reproduces_the_paper():
    w = rb.worked_example()
    assert w["sum_fp32"] == pytest.approx(-4.703990459442139, abs=0)  # the FP32 value printed in the paper
    assert w["sum_bf16"] == -4.71875 and w["no_residual_bf16"] == -4.6875
    assert w["error"] == pytest.approx(-0.014759540557861328, abs=0)
    assert w["sum_exact_equals_fp32"]
    assert w["anatomy"]["sticky"] == 1 and w["anatomy_no_residual"]["sticky"] == 0
    assert w["anatomy"]["direction"] == "away from zero" and w["anatomy_no_residual"]["case"].startswith("exact tie")
    row = w["table"][3]
    assert row["bits"].replace(" ", "").replace("|", "") == format(int(np.float32(w["sum_fp32"]).view(np.uint32)), "032b")


def test_bit_table_and_anatomy():
    t = rb.bit_table([("one", 1.0), ("x", -3.0078125)])
    assert t[0]["exponent"] == "01111111" and t[0]["fraction"] == "0000000" and t[1]["sign"] == "1"
    a = rb.rounding_anatomy(np.float32(1.0 + 2 ** -8))          # exact half ULP above 1, even LSB -> down
    assert (a["guard"], a["sticky"], a["rounded"]) == (1, 0, 1.0)
    a = rb.rounding_anatomy(np.float32(1.0 + 2 ** -8 + 2 ** -20))
    assert a["sticky"] == 1 and a["rounded"] == 1.0 + 2 ** -7
    with pytest.raises(ValueError):
        rb.rounding_anatomy(1.0, 23)


@pytest.mark.parametrize("k,m", [(2, 7), (3, 5), (4, 4)])
def test_enumeration_equals_theory_exactly(k, m):
    for rho in (Fraction(0), Fraction(1, 1024), Fraction(3, 4)):
        e = rb.enumerate_bias(k, m, rho)
        assert e["mean_ulps"] == theory.expected_error_ulps(k, rho, m)
        assert e["p_tie"] == theory.tie_probability(k, m)
    neg = rb.enumerate_bias(2, 7, Fraction(1, 1024), sign=-1)
    assert neg["mean_ulps"] == -theory.expected_error_ulps(2, Fraction(1, 1024))


def test_enumeration_rejects_bad_input():
    with pytest.raises(ValueError):
        rb.enumerate_bias(2, 7, Fraction(1, 3))
    with pytest.raises(ValueError):
        rb.enumerate_bias(4, 7)          # 2**28 tuples
    with pytest.raises(ValueError):
        rb.enumerate_bias(2, 7, sign=2)


def test_make_rows_shapes_ties_and_grid():
    S, V = rb.make_rows(np.random.default_rng(0), 3, 4, 64, 16, 2, 10.0, frac_neg=1.0, m=5)
    assert S.shape == (3, 4, 64) and V.shape == (3, 64, 16) and S.dtype == V.dtype == np.float32
    assert ((S == S.max(-1, keepdims=True)).sum(-1) == 2).all()
    assert (V < 0).all() and np.array_equal(rb.round_rne(V, 5), V) and np.array_equal(rb.round_rne(S, 5), S)
    with pytest.raises(ValueError):
        rb.make_rows(np.random.default_rng(0), 1, 1, 8, 16, 9, 1.0)


def test_emulation_orders_and_bad_input():
    S, V = rb.make_rows(np.random.default_rng(1), 4, 4, 64, 16, 2, 14.0)
    out = rb.emulate_rows(S, V)
    assert np.array_equal(rb.round_rne(out["pv_lp"]), out["pv_lp"])
    for acc in ("exact", "matmul"):
        alt = rb.emulate_rows(S, V, accumulate=acc)
        # FP32 sums of 64 one-signed terms (P̄ ≥ 0, V < 0) in other orders: each ≤ γ_64 = 32·eps32 relative
        assert np.allclose(alt["pv_fp32"], out["pv_fp32"], rtol=64 * EPS32)
    beta = rb.emulate_rows(S, V, beta=2.0)
    assert beta["n_tied"].max() == 0                       # the shift leaves no P̄ exactly 1
    with pytest.raises(ValueError):
        rb.emulate_rows(S, V, stochastic=True)             # needs an rng
    with pytest.raises(ValueError):
        rb.emulate_rows(S, V[:, :10])
    with pytest.raises(ValueError):
        rb.emulate_rows(S, V, accumulate="kahan")
    with pytest.raises(ValueError):
        rb.shifted_max(S, 1.0)


def test_monte_carlo_cell_agrees_with_theory_and_fixes_remove_bias():
    c = rb.mc_cell(0, 2, 14.0, n_problems=24)
    r = c["rne"]
    assert abs(r["pv"] - c["theory_pv"]) <= r["pv_ci"]
    assert abs(r["o_ntr"] - c["theory_o_ntr"]) <= r["o_ntr_ci"] + 0.01
    assert r["pv"] < -0.15 and r["o_rtn"] < -0.15           # the paper's bias, in ULPs
    for meth in ("beta", "sr"):
        assert abs(c[meth]["pv"]) <= 3 * c[meth]["pv_ci"] + 0.01
    diffuse = rb.mc_cell(1, 2, 4.0, n_problems=24)["rne"]
    assert abs(diffuse["pv"]) <= 3 * diffuse["pv_ci"] + 0.01


def test_grid_and_figures():
    recs = rb.mc_grid(3, [1, 2], [8.0, 14.0], n_problems=4)
    assert len(recs) == 4 and {"rne_pv", "beta_o_rtn", "sr_o_ntr_ci", "theory_pv"} <= set(recs[0])
    figs = [rfig.fig_heatmaps(recs, meta={"scale": "ci"}),
            rfig.fig_theory(theory.theory_table(range(1, 4)), [{"k": 2, "mean_ulps": Fraction(1, 4)}],
                          [(0.1, 0.2, 0.01)], k_saw=(2,)),
            rfig.fig_precision_dial([dict(recs[0], m=3), dict(recs[1], m=4)])]
    cells = [{"k": r["k"], "gap": r["gap"], "method": m, "path": p, **{q: r[f"{m}_{q}"] + (p == "numpy")
                                                                       for q in ("pv", "o_rtn", "o_ntr")},
              **{f"{q}_ci": r[f"{m}_{q}_ci"] for q in ("pv", "o_rtn", "o_ntr")}}
             for r in recs for m in rb.METHODS for p in ("numpy", "emulated")]
    kfig = rfig.fig_kernel_compare(cells, k=2)
    assert len(kfig.axes) == 3 * 2                   # outputs × gaps
    bars = [c for c in kfig.axes[0].containers if type(c).__name__ == "BarContainer"]   # P̄V, first gap: per path
    assert [len(b) for b in bars] == [3, 3]
    first = next(r for r in recs if r["k"] == 2 and r["gap"] == 8.0)
    assert bars[1][0].get_height() == pytest.approx(first["rne_pv"]) and bars[0][0].get_height() == pytest.approx(
        first["rne_pv"] + 1)
    with pytest.raises(ValueError):
        rfig.fig_kernel_compare(cells, k=5)
    figs.append(kfig)
    for f in figs:
        assert f.axes
        plt.close(f)



def test_the_chapters_interval_level_is_the_one_cluster_ci_computes():
    """`figures.CI_LEVEL` (the level chapter 1 prints and the kernel figure's legend names) is the level of the
    Student-t half-widths of `cluster_ci`, over problems."""
    from scipy.stats import t as student_t
    x = np.random.default_rng(0).standard_normal((12, 4, 3))
    per_problem = x.reshape(12, -1).mean(axis=1)
    mean, hw = rb.cluster_ci(x)
    sd = per_problem.std(ddof=1) / np.sqrt(12)
    assert mean == pytest.approx(per_problem.mean())
    assert hw == pytest.approx(student_t.ppf((1 + rfig.CI_LEVEL) / 2, 11) * sd)
    assert hw != pytest.approx(student_t.ppf((1 + 0.9) / 2, 11) * sd)          # another level would fail
