"""The chain probe (`lib.training.chain_probe`): its dW_Q error is the real gradient difference the O error makes."""
import numpy as np
import torch

from lib.training import chain_probe as cp
from lib.training.model import GPTConfig, build_lm
from lib.training.metrics import bf16_row_ties

CFG = dict(n_layer=2, n_head=2, n_embd=32, block_size=24)


def _classes(q, k, v):
    s = (q.float() @ k.float().transpose(-2, -1)) / q.shape[-1] ** 0.5
    T = s.shape[-1]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    tied = bf16_row_ties(s)
    return dict(tied=tied, window=tied, one_signed=torch.ones(q.shape, dtype=torch.bool))


def _grads(attn_spec, x, seed=0, **kw):
    torch.manual_seed(seed)
    m = build_lm(GPTConfig(**CFG, attn=attn_spec, **kw))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    probe = cp.ChainProbe(every=1, layers=[1], rows=x.shape[0], classes=_classes)
    m.set_step(3, 0)
    probe.before_forward(0, m)
    m(x, x)[1].backward()
    g = m.attn_layers[1].c_attn.weight.grad[:32].clone()
    probe.after_backward(0, m, opt)
    return g, probe


def test_dwq_error_equals_the_gradient_difference_the_injection_makes():
    x = torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(1))
    for kw in ({}, dict(qk_norm="fixed", qk_gain=1.5), dict(pos="rope")):
        g0, _ = _grads("naive,inject/r=0", x, **kw)
        g1, probe = _grads("naive,inject/r=1/e=4096/heads=1", x, **kw)   # a large error: the difference is visible
        diff = (g1 - g0).double().view(2, 16, 32)
        rec = probe.records[0]
        assert rec["dg_norm"].shape == (1, 2)
        assert rec["dg_norm"][0, 0] == 0.0                                   # head 0 received no error
        # the difference of two FP32 trainings' gradients (their FP32 noise ~1e-6 of |g|) vs the probe's own: 2e-3
        np.testing.assert_allclose(rec["dg_norm"][0, 1], diff[1].norm().item(), rtol=2e-3)


def test_push_sign_follows_the_top_singular_pair():
    torch.manual_seed(0)
    w = torch.randn(1, 4, 6)
    s, u, v, _ = cp._top_pair(w, None, 200)
    # 200 power iterations (converged) in FP32; the FP32 SVD's σ₁ ≤ (m + n)·eps32 = 1.2e-6 off: 1e-5
    assert torch.allclose(s, torch.linalg.matrix_norm(w, ord=2), rtol=1e-5)
    dg = -torch.einsum("hd,hc->hdc", u, v)          # a gradient error that lowers W·v along u ... raises σ₁ in SGD
    push = -torch.einsum("hd,hdc,hc->h", u, dg, v)
    assert push.item() > 0.99
    w2 = w - 0.01 * dg                               # the SGD step with that error
    assert torch.linalg.matrix_norm(w2, ord=2) > torch.linalg.matrix_norm(w, ord=2)


def test_records_hold_counts_and_delta_sums():
    x = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(2))
    _, probe = _grads("naive,inject/r=1/heads=0:1", x)
    arr = cp.records_arrays(probe.records)
    assert arr["step"].tolist() == [0] and arr["n_rows"][0, 0, 0] == 2 * 24
    assert (arr["dd_pos"] <= arr["n_rows"]).all() and np.isfinite(arr["push_sgd"]).all()
    assert np.isnan(arr["dg_cos_prev"]).all()          # no earlier event


def test_split_numerics_names_the_placement_of_each_arm():
    from lib.fp.numerics import FA2, FP32, PAPER
    cfg = lambda a: GPTConfig(**CFG, attn=a).layer_specs()[0]        # noqa: E731
    assert cp.split_numerics(cfg("fp32_flash")) == FP32
    assert cp.split_numerics(cfg("sdpa")) == FA2
    assert cp.split_numerics(cfg("fa2")) == FA2
    assert cp.split_numerics(cfg("paper/round_block=64")) == PAPER.replace(round_block=64)
    for other in ("paper+fix", "paper/rounding=sr", "paper/mantissa_bits=6", "inject/r=0", "authors"):
        assert cp.split_numerics(cfg(other)) is None, other
