"""Bias injection (`lib.training.inject`): the O error of the tie bias on chosen rows, entering only through δ."""
import math

import numpy as np
import pytest
import torch

from lib.fp.bf16 import ulp
from lib.training import inject
from lib.training.model import naive_attention
from tests.precision import attention_rtol


def _qkv(seed=0, B=2, H=3, T=24, D=8):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g).requires_grad_() for _ in range(3)]


def test_parse_and_validate():
    s = inject.parse("inject/r=0.01/heads=0:2/select=random/e=0.5/lam=3")
    assert (s.rate, s.heads, s.select, s.e, s.lam) == (0.01, (0, 2), "random", 0.5, 3.0)
    assert inject.parse("inject/r=1").e == inject.E_DEFAULT
    for bad in ("inject", "inject/r=2", "inject/r=0.1/select=all", "inject/r=0.1/heads=1:1", "inject/q=1",
                "inject/r=x", "inject/r=0.1/lam=-1"):
        with pytest.raises(ValueError):
            inject.parse(bad)


def test_ulp_bf16_matches_the_numpy_reference():
    x = torch.tensor([1.0, -1.0, 0.75, 3.0e-3, -1234.5, 2.0 ** -126, 0.0])
    want = np.where(x.numpy() == 0, 0.0, ulp(x.numpy()))
    assert np.array_equal(inject.ulp_bf16(x).numpy(), want.astype(np.float32))


def test_rate_zero_is_fp32_attention_bit_for_bit():
    q, k, v = _qkv()
    o = inject.attention(q, k, v, spec=inject.parse("inject/r=0"))
    do = torch.randn_like(o)
    g1 = torch.autograd.grad(o, (q, k, v), do)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    from lib.training.dose_backend import DoseAttention
    o2 = DoseAttention.apply(q2, k2, v2, None, 1 / math.sqrt(8), True, "true", 0.0, None, None)
    # dose's forward is naive's op for op (equal in fact); 1e-6 absolute leaves it room
    assert torch.equal(o, o2) and torch.allclose(o, naive_attention(q, k, v), atol=1e-6)
    for a, b in zip(g1, torch.autograd.grad(o2, (q2, k2, v2), do)):
        assert torch.equal(a, b)


def test_injected_error_enters_only_through_delta():
    """dV is untouched; dQ and dK change by exactly what δ + λ·rowsum(dO∘E) predicts; E = e·ulp(O)·sign(O) on the
    selected rows of the selected heads only."""
    q, k, v = _qkv(1)
    spec = inject.parse("inject/r=1/heads=1/select=random/lam=2")
    call = type("C", (), dict(stats={}, seed=0, step=0, layer=0))()
    o = inject.attention(q, k, v, spec=spec, call=call)
    err, rows = call.stats["inj_err"], call.stats["inj_rows"]
    assert rows[:, 1].all() and not rows[:, [0, 2]].any()
    o32 = naive_attention(q.detach(), k.detach(), v.detach())
    assert torch.equal(err[:, 1], 0.25 * inject.ulp_bf16(o32[:, 1]) * torch.sign(o32[:, 1]))
    do = torch.randn_like(o)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    q0, k0, v0 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o0 = naive_attention(q0, k0, v0)
    dq0, dk0, dv0 = torch.autograd.grad(o0, (q0, k0, v0), do)
    assert torch.allclose(dv, dv0, atol=1e-6)                 # dV: autograd's ops both ways (equal in fact)
    # the change predicted from Δδ alone: dS changes by −P·λΔδ, so dQ by −scale·λΔδ·(P K)
    s = (q0 @ k0.transpose(-2, -1)).detach() / math.sqrt(8)
    s = s.masked_fill(~torch.ones(24, 24, dtype=torch.bool).tril(), float("-inf"))
    p = torch.softmax(s, -1)
    dd = (do * err).sum(-1)
    pred = -(2.0 * dd).unsqueeze(-1) * (p @ k0.detach()) / math.sqrt(8)
    # two FP32 backward passes that differ in δ's evaluation: FP32 attention's backward bound apart (1e-3 relative
    # for pred's own FP32 evaluation); the injected head's change is ≫ that
    noise = attention_rtol(24, 8, backward=True) * dq0.abs().max().item()
    assert torch.allclose(dq - dq0, pred, atol=noise, rtol=1e-3)
    assert (dq - dq0)[:, [0, 2]].abs().max() < noise and (dq - dq0)[:, 1].abs().max() > 10 * noise


def test_tied_rows_are_chosen_first():
    B, H, T = 4, 2, 1000
    tied = torch.zeros(B, H, T, dtype=torch.bool)
    tied[..., :100] = True                            # 10 % of the rows tie
    u = torch.rand(B, H, T, generator=torch.Generator().manual_seed(0))
    heads = torch.tensor([True, True])
    low = inject.select_rows(tied, heads, 0.05, u, "tied")
    # rows drawn by uniform u over B·H·T = 8,000: a rate's sd ≈ 0.0024 at 5 %, 0.0056 at 50 %
    assert not (low & ~tied).any() and abs(low.float().mean().item() - 0.05) < 0.01
    high = inject.select_rows(tied, heads, 0.5, u, "tied")
    assert high[tied].all() and abs(high.float().mean().item() - 0.5) < 0.02
    rnd = inject.select_rows(tied, heads, 0.05, u, "random")
    assert (rnd & ~tied).any()
    one_head = inject.select_rows(tied, torch.tensor([False, True]), 1.0, u, "tied")
    assert not one_head[:, 0].any() and one_head[:, 1].all()


def test_selection_is_reproducible_per_step_and_layer():
    q, k, v = _qkv(2)
    spec = inject.parse("inject/r=0.3/select=random")
    rows = []
    for step in (5, 5, 6):
        call = type("C", (), dict(stats={}, seed=0, step=step, layer=1))()
        inject.attention(q, k, v, spec=spec, call=call)
        rows.append(call.stats["inj_rows"])
    assert torch.equal(rows[0], rows[1]) and not torch.equal(rows[0], rows[2])


def test_direction_along_v_of_the_keys_at_the_maximum():
    """dir=v: the error follows the sign V has at every key of the row's BF16 maximum (tied keys, or the one key
    at the maximum), and is 0 on the features where those keys' V differ in sign or one is 0."""
    s = torch.full((1, 1, 3, 4), -5.0)
    s[0, 0, 0, [0, 2]] = 3.0              # row 0: keys 0 and 2 tied at the maximum
    s[0, 0, 1, 1] = 3.0                   # row 1: key 1 alone at the maximum
    s[0, 0, 2, 3] = 3.0                   # row 2: key 3 (masked below) would be the maximum
    s[0, 0, 2, 3] = float("-inf")
    s[0, 0, 2, [0, 1]] = 2.0              # ... so keys 0 and 1 tie
    v = torch.tensor([[1.0, -1.0, 2.0], [3.0, 0.0, -1.0], [2.0, 1.0, 5.0], [-4.0, -4.0, -4.0]]).view(1, 1, 4, 3)
    got = inject.max_key_signs(s, v)
    want = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, -1.0], [1.0, 0.0, 0.0]]).view(1, 1, 3, 3)
    assert torch.equal(got, want)


def test_dir_v_spec_and_error():
    assert inject.parse("inject/r=0.03/dir=v").dir == "v" and inject.parse("inject/r=0.03").dir == "o"
    with pytest.raises(ValueError):
        inject.parse("inject/r=0.03/dir=x")
    q, k, v = _qkv(3)
    with torch.no_grad():
        q[:, :, 5:10] = 0.0               # rows 5-9: every key they see tied at the maximum (score 0)
    call = type("C", (), dict(stats={}, seed=0, step=0, layer=0))()
    inject.attention(q, k, v, spec=inject.parse("inject/r=1/select=random/dir=v"), call=call)
    err, rows = call.stats["inj_err"], call.stats["inj_rows"]
    s = (q @ k.transpose(-2, -1)).detach() / math.sqrt(8)
    s = s.masked_fill(~torch.ones(24, 24, dtype=torch.bool).tril(), float("-inf"))
    o32 = naive_attention(q.detach(), k.detach(), v.detach())
    assert rows.all() and torch.equal(err, 0.25 * inject.ulp_bf16(o32) * inject.max_key_signs(s, v))
    assert call.stats["inj_n_pairs"] == int((err != 0).sum())
    # untied rows: the sign of V at the one key at the maximum, on every feature; rows 5-9: mostly 0 (V of several
    # keys one-signed in few features)
    assert (err[:, :, 10:] != 0).all() and (err[:, :, 6:10] == 0).float().mean() > 0.5
