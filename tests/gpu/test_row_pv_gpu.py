"""kernels/row_pv.py on the GPU: emulated path against the numpy oracle, native path against torch's BF16."""
import numpy as np
import pytest
import torch

import lib.book.setup  # noqa: F401
from kernels.row_pv import row_pv
from lib.fp import rounding_bias as rb


@pytest.mark.gpu
def test_emulated_path_matches_numpy_within_accumulation_order():
    S, V = rb.make_rows(np.random.default_rng(0), 4, 16, 256, 16, 2, 14.0)
    out = row_pv(torch.from_numpy(S).cuda(), torch.from_numpy(V).cuda())
    p = out["p"].cpu().numpy()
    assert np.array_equal(rb.round_rne(p), p) and (p.max(-1) == 1.0).all()
    # P̄ from the GPU's exp may differ from numpy's by one BF16 ULP; the products are then accumulated in FP32
    ref_p = rb.round_rne(np.exp(S - S.max(-1, keepdims=True)).astype(np.float32))
    assert (np.abs(p - ref_p) <= rb.ulp(ref_p)).all()
    exact = np.einsum("brn,bnd->brd", p.astype(np.float64), V.astype(np.float64))
    # Any FP32 summation order of n exact products is within γ_n·Σ|p·v| of the exact sum (γ_n = n·u/(1 − n·u),
    # u = 2^-24); a fixed rtol is not a valid bound (the first GPU run missed rtol=1e-6 at 8.6e-7 relative on
    # some entries because of cancellation-free but long sums).
    n, u = p.shape[-1], 2.0 ** -24
    bound = n * u / (1 - n * u) * np.einsum("brn,bnd->brd", np.abs(p.astype(np.float64)), np.abs(V.astype(np.float64)))
    assert (np.abs(out["acc"].cpu().numpy() - exact) <= bound).all()
    assert np.array_equal(out["pv"].cpu().numpy(), rb.round_rne(out["acc"].cpu().numpy()))


@pytest.mark.gpu
def test_native_path_is_bf16_and_close_to_emulated():
    S, V = rb.make_rows(np.random.default_rng(1), 4, 16, 256, 16, 2, 14.0)
    St, Vt = torch.from_numpy(S).cuda(), torch.from_numpy(V).cuda()
    nat = row_pv(St, Vt, native=True)
    emu = row_pv(St, Vt)
    for k in ("pv", "o_rtn", "o_ntr"):
        x = nat[k].cpu().numpy()
        assert np.array_equal(rb.round_rne(x), x)                  # on the BF16 grid
        assert np.abs(x - emu[k].cpu().numpy()).max() <= rb.ulp(np.abs(x)).max()  # at most one BF16 ULP apart
    # the native `.to(bfloat16)` of the FP32 accumulator is RNE: compare with torch's cast of the same values
    acc = nat["acc"]
    assert torch.equal(acc.to(torch.bfloat16).float(), nat["pv"])
