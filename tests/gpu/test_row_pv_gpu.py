"""kernels/row_pv.py on the GPU: emulated path against the numpy oracle, native path against torch's BF16."""
import numpy as np
import pytest
import torch

import lib.setup  # noqa: F401
from kernels.row_pv import row_pv
from lib import rounding_bias as rb


@pytest.mark.gpu
def test_emulated_path_matches_numpy_within_accumulation_order():
    S, V = rb.make_rows(np.random.default_rng(0), 4, 16, 256, 16, 2, 14.0)
    out = row_pv(torch.from_numpy(S).cuda(), torch.from_numpy(V).cuda())
    ref = rb.emulate_rows(S, V, accumulate="exact")
    acc = out["acc"].cpu().numpy()
    assert np.allclose(acc, ref["pv_fp32"], rtol=2e-6, atol=0)   # FP32 accumulation, order differs
    p = out["p"].cpu().numpy()
    assert np.array_equal(rb.round_rne(p), p) and (p.max(-1) == 1.0).all()


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
