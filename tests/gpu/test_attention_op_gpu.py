"""GPU check of O kept in FP32 through the custom ops (`kernels.attention_op`, marked `gpu`; skipped without CUDA).

On the native path the forward stores O in BF16; with round_o=False and δ from the saved O, the op also keeps the
FP32 O the kernel normalised and δ reads that one: the op's gradients equal the backward launched on the FP32 O bit
for bit and differ from the backward launched on the BF16 O. The CPU interpreter runs only the emulated path, where
tests/test_attention_op.py checks the same option against the emulator.
"""
import pytest
import torch

import lib.book.setup  # noqa: F401
from kernels.attention import attention_bwd, attention_fwd
from kernels.attention_op import attention_op
from lib.fp.numerics import get_profile

pytestmark = pytest.mark.gpu

FP32_O = get_profile("paper").replace(round_pv=False, round_acc=False, round_l=False, normalize_then_round=True,
                                      round_o=False, round_block=512)


def test_native_o_kept_in_fp32_feeds_delta():
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(2, 3, 1024, 64, generator=g).to("cuda", torch.bfloat16) for _ in range(4))
    q = q * 4
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = attention_op(qq, kk, vv, causal=True, numerics=FP32_O, path="native")
    o.backward(do)
    o_st, lse, o32 = attention_fwd(q, k, v, causal=True, scale=0.125, nm=FP32_O, fix=None, beta=7.0, tie_tol=0.0,
                                   path="native", store_o32=True)
    assert torch.equal(o.detach(), o_st) and torch.equal(o_st, o32.to(torch.bfloat16))
    want = attention_bwd(do, q, k, v, o32, lse, causal=True, scale=0.125, nm=FP32_O, path="native")[:3]
    for got, w, name in zip((qq.grad, kk.grad, vv.grad), want, ("dq", "dk", "dv")):
        assert torch.equal(got, w), name
    dq_bf16_o = attention_bwd(do, q, k, v, o_st, lse, causal=True, scale=0.125, nm=FP32_O, path="native")[0]
    assert not torch.equal(qq.grad, dq_bf16_o)
