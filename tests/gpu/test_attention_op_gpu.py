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
from kernels.attention_op import attention_op, fp32_o_numerics
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


FP32_O_DELTA = get_profile("paper").replace(round_block=512, delta_source="fp32_o")


def test_native_fp32_o_delta_matches_the_emulated_o_prime():
    """δ from an FP32 O′ on the native path (O′ computed natively, its P̄ an FP32 operand): the op's gradients are
    the backward launched on that O′, bit for bit, and O′ agrees with the emulated O′ to FP32 sum order on all but
    the rows where that order moved an unrounded score across S's BF16 rounding boundary (≤ 1 % of rows)."""
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(2, 3, 1024, 64, generator=g).to("cuda", torch.bfloat16) for _ in range(4))
    q = q * 4
    kw = dict(causal=True, scale=0.125, fix=None, beta=7.0, tie_tol=0.0)
    _, _, o_nat = attention_fwd(q, k, v, nm=fp32_o_numerics(FP32_O_DELTA), path="native", store_o32=True, **kw)
    o_emu = attention_fwd(q.float(), k.float(), v.float(), nm=fp32_o_numerics(FP32_O_DELTA), path="emulated",
                          **kw)[0]
    off = ((o_nat - o_emu).abs() > 2 ** -16 * o_emu.abs().max()).any(-1).float().mean().item()
    print(f"rows of O′ beyond FP32 sum order: {off:.4%}")
    assert off <= 0.01
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    attention_op(qq, kk, vv, causal=True, numerics=FP32_O_DELTA, path="native").backward(do)
    lse = attention_fwd(q, k, v, nm=FP32_O_DELTA, path="native", **kw)[1]
    want = attention_bwd(do, q, k, v, o_nat, lse, causal=True, scale=0.125, nm=FP32_O_DELTA, path="native")[:3]
    for got, w, name in zip((qq.grad, kk.grad, vv.grad), want, ("dq", "dk", "dv")):
        assert torch.equal(got, w), name
