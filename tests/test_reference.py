"""Tests of the oracle: the FP64 reference against an independent torch-autograd attention, the emulator against
FP64 (fp32 profile: FP32 accuracy; fa2: BF16 accuracy, comparable to plain torch BF16 attention), the rounding
placement of each profile, and input validation."""
import numpy as np
import pytest
import torch

from lib.fp.bf16 import round_rne
from lib.fp.numerics import FA2, FP32, PAPER
from lib.fp.reference import (attention_fp64, emulate_attention, emulate_backward, emulate_delta, emulate_forward,
                           padded_head_dim)
from tests.precision import attention_rtol


def _inputs(B=1, H=2, N=37, d=24, seed=0, bf16=True):
    g = torch.Generator().manual_seed(seed)
    t = [torch.randn(B, H, N, d, generator=g) for _ in range(4)]
    return [x.bfloat16().float() if bf16 else x for x in t]


def _naive_torch64(q, k, v, do, causal, scale):
    """Independent reference: textbook softmax attention in float64 with gradients from torch.autograd."""
    q, k, v = (x.double().requires_grad_(True) for x in (q, k, v))
    s = scale * q @ k.transpose(-1, -2)
    if causal:
        N = s.shape[-1]
        s = s.masked_fill(~torch.tril(torch.ones(N, N, dtype=torch.bool)), float("-inf"))
    o = torch.softmax(s, -1) @ v
    o.backward(do.double())
    return o.detach().numpy(), torch.logsumexp(s, -1).detach().numpy(), q.grad.numpy(), k.grad.numpy(), \
        v.grad.numpy()


@pytest.mark.parametrize("causal", [True, False])
def test_fp64_reference_matches_autograd(causal):
    q, k, v, do = _inputs(N=29, d=16)
    ref = attention_fp64(q, k, v, do, causal=causal, scale=0.3)
    o, lse, dq, dk, dv = _naive_torch64(q, k, v, do, causal, 0.3)
    # both FP64, other orders: sums of ≤ 29 terms, ~29·eps64 ≈ 6e-15 of their magnitudes (≲ 10 here): 1e-12
    for a, b in ((ref["o"], o), (ref["lse"], lse), (ref["dq"], dq), (ref["dk"], dk), (ref["dv"], dv)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref["delta"], (do.double().numpy() * o).sum(-1), rtol=1e-12, atol=1e-12)


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


def _assert_fp32_close(emu, ref, N, d, keys=("o", "dq", "dk", "dv")):
    """The FP32 emulation within FP32 attention's error bound of the FP64 reference (any matmul order)."""
    for key in keys:
        assert _rel(emu[key], ref[key]) <= attention_rtol(N, d, backward=key != "o"), key
    # LSE = m + log ℓ: the forward's bound, against its largest |entry|; δ = rowsum(dO∘O): the backward's
    lse_tol = attention_rtol(N, d) * np.abs(ref["lse"]).max()
    np.testing.assert_allclose(emu["lse"], ref["lse"], rtol=0, atol=lse_tol)
    if "delta" in emu:
        np.testing.assert_allclose(emu["delta"], ref["delta"], rtol=0,
                                   atol=attention_rtol(N, d, backward=True) * np.abs(ref["delta"]).max())


@pytest.mark.parametrize("causal,N,d,blocks", [(True, 37, 24, (16, 16)), (False, 45, 64, (32, 16)),
                                              (True, 64, 16, (64, 64))])
def test_emulator_fp32_close_to_fp64(causal, N, d, blocks):
    q, k, v, do = _inputs(N=N, d=d, bf16=False)
    ref = attention_fp64(q, k, v, do, causal=causal)
    emu = emulate_attention(q, k, v, do, "fp32", causal=causal, block_m=blocks[0], block_n=blocks[1])
    _assert_fp32_close(emu, ref, N, d)


def test_emulator_fa2_error_is_bf16_sized_and_like_torch_bf16():
    """fa2's error vs FP64 is BF16-sized (≫ FP32's) and within 2× the error of plain torch BF16 attention
    (BF16 matmuls + softmax in BF16 on the same BF16 inputs), the FA2 test rule."""
    q, k, v, do = _inputs(N=64, d=32, seed=3)
    ref = attention_fp64(q, k, v, do, causal=True)
    fa2 = emulate_attention(q, k, v, do, "fa2", causal=True, block_m=16, block_n=16)
    fp32 = emulate_attention(q, k, v, do, "fp32", causal=True, block_m=16, block_n=16)
    s = (q.bfloat16() @ k.bfloat16().transpose(-1, -2)) * (32 ** -0.5)
    s = s.masked_fill(~torch.tril(torch.ones(64, 64, dtype=torch.bool)), float("-inf"))
    o_torch = (torch.softmax(s, -1) @ v.bfloat16()).float().numpy()
    e_fa2, e_fp32, e_torch = (_rel(x, ref["o"]) for x in (fa2["o"], fp32["o"], o_torch))
    assert e_fp32 < attention_rtol(64, 32) < e_fa2 < 2 * e_torch, (e_fp32, e_fa2, e_torch)   # 1.1e-5 ≪ 2^-9
    assert np.array_equal(fa2["o"], round_rne(fa2["o"]))            # O on the BF16 grid
    for key in ("dq", "dk", "dv"):          # a few BF16 roundings (≤ 2^-8 each), dP − δ's cancellation: 2e-2 ≈ 5·2^-8
        assert _rel(fa2[key], ref[key]) < 2e-2, key


def test_profiles_round_where_they_say():
    q, k, v, do = _inputs(N=40, d=16, seed=5)
    pap = emulate_attention(q, k, v, do, PAPER, block_m=16, block_n=16)
    fa2 = emulate_attention(q, k, v, do, FA2, block_m=16, block_n=16)
    on_grid = lambda x: np.array_equal(x, round_rne(x))  # noqa: E731
    assert on_grid(pap["l"]) and not on_grid(fa2["l"])                # running ℓ in BF16 only for paper
    assert on_grid(pap["o"]) and on_grid(fa2["o"])
    assert not on_grid(pap["lse"])                                    # LSE FP32 under autocast
    assert on_grid(pap["dq"]) and on_grid(pap["dk"]) and on_grid(pap["dv"])   # BF16 accumulators
    assert not on_grid(fa2["dq"])
    assert not np.array_equal(pap["o"], fa2["o"])
    m4 = emulate_forward(q, k, v, FA2.replace(mantissa_bits=4), block_m=16, block_n=16)
    assert np.array_equal(m4.o, round_rne(m4.o, 4)) and not np.array_equal(m4.o, fa2["o"])


def test_delta_sources_agree_in_fp32():
    q, k, v, do = _inputs(N=33, d=16, seed=2, bf16=False)
    fwd = emulate_forward(q, k, v, FP32, block_m=16, block_n=16)
    d_o = emulate_delta(fwd.o, do, FP32)
    d_pp = emulate_delta(fwd.o, do, FP32.replace(delta_source="dp_p"), q=q, k=k, v=v, lse=fwd.lse,
                         block_m=16, block_n=16)
    d_f = emulate_delta(None, do, FA2.replace(delta_source="fp32_o"), q=q, k=k, v=v, block_m=16, block_n=16)
    # two FP32 evaluations of δ (Σ dP∘P over N = 33 keys, Σ dO∘O over d = 16): ≤ (N + d)·eps32 ≈ 6e-6 of Σ|terms|
    np.testing.assert_allclose(d_pp, d_o, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(d_f, d_o)
    d_bf = emulate_delta(round_rne(fwd.o), do, FA2)
    assert not np.array_equal(d_bf, d_o)


def test_fix_does_not_change_fp64_output():
    """Attention-shaped rows with exact ties (identical keys): the fix fires (the running max moves) but the FP32
    emulation with the fix stays at FP32 distance from the FP64 reference, like the emulation without it."""
    q, k, v, do = _inputs(N=48, d=16, seed=7, bf16=False)
    k[..., 5, :] = k[..., 3, :] = k[..., 0, :] = 2.0 * k[..., 0, :]      # identical keys: exact score ties
    ref = attention_fp64(q, k, v, do, causal=True)
    plain = emulate_attention(q, k, v, do, "fp32", block_m=16, block_n=16)
    fixed = emulate_attention(q, k, v, do, "fp32", block_m=16, block_n=16, fix="beta", beta=2.0)
    assert (fixed["m"] != plain["m"]).any()
    _assert_fp32_close(fixed, ref, 48, 16)


def test_tiles_change_bits_not_values():
    q, k, v, _ = _inputs(N=50, d=16, seed=4)
    a = emulate_forward(q, k, v, "fa2", block_m=16, block_n=16)
    b = emulate_forward(q, k, v, "fa2", block_m=64, block_n=32)
    assert _rel(a.o, b.o) < 2e-2                  # other tiles, other BF16 roundings of P̄ and O: 2e-2 ≈ 5·2^-8
    assert padded_head_dim(24) == 32 and padded_head_dim(8) == 16 and padded_head_dim(64) == 64


def test_stochastic_rounding_is_unbiased_in_the_mean():
    q, k, v, _ = _inputs(N=16, d=16, seed=9, bf16=False)
    sr = FA2.replace(rounding="sr", round_o=False, round_pv=True)
    outs = np.stack([emulate_forward(q, k, v, sr, block_m=16, block_n=16, seed=s).o for s in range(40)])
    ref = emulate_forward(q, k, v, FP32, block_m=16, block_n=16).o
    rne = emulate_forward(q, k, v, FA2.replace(round_o=False, round_pv=True), block_m=16, block_n=16).o
    assert np.abs(outs.mean(0) - ref).mean() < np.abs(rne - ref).mean()


@pytest.mark.parametrize("call,err", [
    (lambda q, k, v: emulate_forward(q, k[..., :5, :], v), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, "bf16"), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, 3), TypeError),
    (lambda q, k, v: emulate_forward(q, k, v, fix="gamma"), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, fix="beta", beta=1.0), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, fix="beta", beta=0.9), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, fix="beta", tie_tol=-1.0), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, block_m=24), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, scale=-1.0), ValueError),
    (lambda q, k, v: emulate_forward(q, k, v, causal="yes"), TypeError),
    (lambda q, k, v: emulate_forward(q.numpy().astype(np.int32), k, v), TypeError),
    (lambda q, k, v: emulate_forward([1.0], k, v), TypeError),
    (lambda q, k, v: emulate_backward(q, k, v, q, q[..., 0], q[..., :3, :]), ValueError),
    (lambda q, k, v: attention_fp64(q, k, v, q[..., :3, :]), ValueError),
    (lambda q, k, v: emulate_delta(None, q, FA2.replace(delta_source="dp_p")), ValueError),
])
def test_bad_input_raises(call, err):
    q, k, v, _ = _inputs(N=8, d=16)
    with pytest.raises(err):
        call(q, k, v)
