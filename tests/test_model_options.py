"""The model's options (`lib.training.model`): off by default, and each doing what it says."""
import math

import pytest
import torch

from lib.fp.fix import USER_BETA, Fix
from lib.training.model import GPT, GPTConfig, build_lm, parse_spec, rope, StableSpec

SMALL = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)


def test_build_lm_is_gpt_bit_for_bit_and_draws_after_it():
    """The loop's build (`build_lm`) has GPT's parameters and forward; its extra draws come after the init, so the
    generator ends elsewhere."""
    torch.manual_seed(0)
    g = GPT(GPTConfig(**SMALL))
    after_gpt = torch.get_rng_state()
    torch.manual_seed(0)
    m = build_lm(GPTConfig(**SMALL))
    assert not torch.equal(torch.get_rng_state(), after_gpt)
    x = torch.randint(0, 256, (2, 16))
    lg, lm = g(x, x)[1], m(x, x)[1]
    assert torch.equal(lg, lm)
    lg.backward()
    lm.backward()
    for (n, a), (_, b) in zip(g.named_parameters(), m.named_parameters()):
        assert torch.equal(a.grad, b.grad), n


def test_no_positions_makes_repeated_prefix_tokens_identical():
    """With pos="none" the first n equal tokens have equal hidden states: their keys tie exactly in the first layer,
    and in later layers up to the rounding of softmax(1/3, 1/3, 1/3)·V on this CPU path (a flash kernel computes
    (V + V + V)/3 = V exactly, so on the GPU they stay equal)."""
    torch.manual_seed(1)
    m = GPT(GPTConfig(**SMALL, pos="none"))
    assert "wpe" not in m.transformer
    x = torch.randint(1, 256, (2, 16))
    x[:, :3] = 0
    m.set_capture(True)
    with torch.no_grad():
        m(x)
    for i, a in enumerate(m.attn_layers):
        k, v = a.captured["k"], a.captured["v"]
        # later layers: layer 0's softmax(⅓, ⅓, ⅓)·V (≤ 2·eps32 of |V| off) carried through the residual, the MLP
        # and the LayerNorm (÷σ, σ ≈ 0.1), then C = 32-term projections that rows may add in other orders (edge
        # tiles; ≤ 16·eps32 of Σ|x||w|): ~1e-6 at |k| ≲ 1. Keys of other tokens differ by ~0.3.
        same = torch.equal if i == 0 else (lambda a_, b_: torch.allclose(a_, b_, rtol=1e-5, atol=1e-6))
        assert same(k[:, :, 0], k[:, :, 1]) and same(k[:, :, 0], k[:, :, 2]) and same(v[:, :, 0], v[:, :, 2])
        assert not torch.allclose(k[:, :, 2], k[:, :, 3])
    # with learned positions the same prefix does not give equal keys
    m2 = GPT(GPTConfig(**SMALL))
    m2.set_capture(True)
    with torch.no_grad():
        m2(x)
    assert not torch.equal(m2.attn_layers[0].captured["k"][:, :, 0], m2.attn_layers[0].captured["k"][:, :, 1])


def test_rope_scores_depend_on_offset_only():
    torch.manual_seed(2)
    D = 8
    q0, k0 = torch.randn(D), torch.randn(D)
    T = 12
    q = q0.expand(1, 1, T, D).clone()
    k = k0.expand(1, 1, T, D).clone()
    qr, kr = rope(q), rope(k)
    s = (qr[0, 0] @ kr[0, 0].T)
    # FP32 angles t·θ (t ≤ 11: ≤ 11·eps32 off) and 8-term dot products of |q||k| ≈ 2.4: a few 1e-6
    assert torch.allclose(s[5, 3], s[9, 7], atol=1e-5) and torch.allclose(s[4, 4], s[11, 11], atol=1e-5)
    assert not torch.allclose(s[5, 3], s[5, 4], atol=1e-3)
    assert torch.allclose(qr.norm(dim=-1), q.norm(dim=-1), atol=1e-5)    # cos² + sin² = 1 to eps32, |q| ≈ 3


@pytest.mark.parametrize("mode", ["fixed", "capped"])
def test_bounded_qk_norm_bounds_every_logit(mode):
    g = 1.5
    torch.manual_seed(3)
    m = GPT(GPTConfig(**SMALL, qk_norm=mode, qk_gain=g))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(50.0)   # huge weights: an unbounded model's logits would be enormous
        if mode == "capped":
            for a in m.attn_layers:
                a.qk_theta.fill_(30.0)   # gain at its cap
    m.set_capture(True)
    with torch.no_grad():
        m(torch.randint(0, 256, (2, 16)))
    D = m.config.head_dim
    bound = math.sqrt(D) * g * g
    for a in m.attn_layers:
        q, k = a.captured["q"], a.captured["k"]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        assert s.abs().max() <= bound * (1 + 1e-5)   # the norms (≤ 8·eps32) and a D = 16 dot (γ_16 = 8·eps32)
        assert s.abs().max() > 0.5 * bound       # and the bound is approached (aligned q, k exist)


def test_capped_gain_is_learnable_and_below_cap():
    m = GPT(GPTConfig(**SMALL, qk_norm="capped", qk_gain=2.0))
    a = m.attn_layers[0]
    # the gain at init, one FP32 evaluation: allclose's default 1e-5 relative is ≫ its rounding
    assert a.qk_theta.requires_grad and torch.allclose(a.gain().flatten(), torch.full((2,), 1.0))
    x = torch.randint(0, 256, (2, 16))
    m(x, x)[1].backward()
    assert a.qk_theta.grad is not None and a.qk_theta.grad.abs().sum() > 0


def test_config_validation_and_specs():
    with pytest.raises(ValueError):
        GPTConfig(**SMALL, pos="alibi")
    with pytest.raises(ValueError):
        GPTConfig(**SMALL, qk_norm="cosine")
    with pytest.raises(ValueError):
        GPTConfig(**SMALL, qk_gain=0.0)
    assert parse_spec("stable+fix") == StableSpec(fix=Fix("beta", USER_BETA), text="stable+fix")
    assert parse_spec("stable/beta=7+fix").fix.beta == 7.0
    assert parse_spec("stable").fix == Fix(None, USER_BETA)       # the user kernel's β, not the paper's
    with pytest.raises(ValueError):
        parse_spec("stable/gamma=1")
    specs = GPTConfig(**SMALL, attn="sdpa,inject/r=0.1").layer_specs()
    assert specs[0].backend == "sdpa" and specs[1].rate == 0.1
