"""kernels/row_pv.py in the Triton interpreter: bit-exact against the numpy emulation of the same placement."""
import numpy as np
import pytest
import torch

import lib.book.setup  # noqa: F401  (interpreter before kernels)
from kernels.row_pv import row_pv
from lib.fp import rounding_bias as rb
from lib.studies.rounding import bias_kernel, bias_montecarlo
from lib.book.runner import run_live


@pytest.mark.parametrize("m,beta", [(7, None), (4, None), (7, 2.0)])
def test_emulated_path_bit_exact(m, beta):
    S, V = rb.make_rows(np.random.default_rng(m), 2, 20, 100, 16, 2, 14.0, m=m)   # R=20: a partial row block
    out = row_pv(torch.from_numpy(S), torch.from_numpy(V), m=m, beta=beta)
    ref = rb.emulate_rows(S, V, m, beta=beta, accumulate="matmul")
    for k, rk in (("pv", "pv_lp"), ("o_rtn", "o_rtn"), ("o_ntr", "o_ntr"), ("acc", "pv_fp32")):
        assert np.array_equal(out[k].numpy(), ref[rk]), k
    assert np.array_equal(out["ell"].numpy(), ref["ell_fp32"][..., 0])


def test_stochastic_path_on_grid_and_seeded():
    S, V = rb.make_rows(np.random.default_rng(5), 2, 16, 64, 16, 2, 14.0)
    St, Vt = torch.from_numpy(S), torch.from_numpy(V)
    a = row_pv(St, Vt, stochastic=True, seed=1)
    b = row_pv(St, Vt, stochastic=True, seed=1)
    c = row_pv(St, Vt, stochastic=True, seed=2)
    assert torch.equal(a["pv"], b["pv"]) and not torch.equal(a["pv"], c["pv"])
    assert np.array_equal(rb.round_rne(a["pv"].numpy()), a["pv"].numpy())
    # SR lands on one of the two neighbours of the FP32 accumulator
    lo = np.minimum(a["pv"].numpy(), a["acc"].numpy())
    assert (np.abs(a["pv"].numpy() - a["acc"].numpy()) <= rb.ulp(a["acc"].numpy())).all() and lo.size


def test_bad_inputs():
    S, V = rb.make_rows(np.random.default_rng(0), 1, 16, 32, 16, 2, 14.0)
    St, Vt = torch.from_numpy(S), torch.from_numpy(V)
    with pytest.raises(TypeError):
        row_pv(St.double(), Vt)
    with pytest.raises(ValueError):
        row_pv(St, Vt[:, :, :8])
    with pytest.raises(ValueError):
        row_pv(St, Vt, m=0)
    with pytest.raises(ValueError):
        row_pv(St, Vt, beta=1.0)
    with pytest.raises(ValueError):
        row_pv(St, Vt, native=True)            # no GPU here (and the interpreter's bf16 is wrong)


@pytest.fixture(scope="module")
def kernel_ci():
    return run_live("bias_kernel", "ci")


def test_kernel_experiment_ci(kernel_ci):
    r = kernel_ci
    cells = r["data"]["cells"]
    assert not r["data"]["native_measured"]
    by = {(c["k"], c["gap"], c["method"], c["path"]): c for c in cells}
    emu, npy = by[(2, 14.0, "rne", "emulated")], by[(2, 14.0, "rne", "numpy")]
    assert abs(emu["pv"] - emu["theory_pv"]) <= emu["pv_ci"] and emu["pv"] < -0.15
    assert emu["pv"] == npy["pv"]              # the final P̄V rounding does not see the accumulation order here
    assert abs(by[(2, 14.0, "sr", "emulated")]["pv"]) < 0.1


def test_montecarlo_experiment_ci():
    r = run_live("bias_montecarlo", "ci")
    d = r["data"]
    assert {"grid", "frac_neg", "n_keys", "dial", "accum"} <= set(d)
    for rec in d["dial"]:
        assert abs(rec["rne_pv"] - rec["theory_pv"]) <= rec["rne_pv_ci"] + 0.005
    assert bias_montecarlo.dial_gap(10) > bias_montecarlo.dial_gap(3)


def test_gpu_summary_formats_a_full_result_layout(kernel_ci):
    # The layout of a `full` result, built from the CI run: the emulated cells stand in for the native ones, so
    # only the formatting code path is tested here (the GPU run supplies the real native numbers).
    d = kernel_ci["data"]
    cells = d["cells"] + [dict(c, path="native") for c in d["cells"] if c["path"] == "emulated"]
    agreement = [{"k": 2, "gap": 14.0, "method": "rne", "pv_lp_equal": 1.0, "o_rtn_equal": 1.0, "o_ntr_equal": 1.0,
                  "acc_equal": 0.5, "p_equal": 1.0}]
    md = bias_kernel.gpu_summary_md({"cells": cells, "agreement": agreement}, "full · test")
    assert "full · test" in md and "native tensor-core path gives" in md and "nan" not in md
    with pytest.raises(KeyError):
        bias_kernel.gpu_summary_md(d, "x")
