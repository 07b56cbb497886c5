"""The small GPT (lib/training/model.py): structure, init, backends, per-layer specs, W_Q/W_K hooks, causality."""
import math

import pytest
import torch

from lib.fp.fix import Fix
from lib.training.model import GPT, GPTConfig, naive_attention, sdpa_attention
from lib.training.spec import AttnSpec
from tests.precision import EPS32, attention_rtol

TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=32)


def _proj_tol(x: torch.Tensor, w: torch.Tensor) -> float:
    """Two FP32 evaluations of x·Wᵀ (sums of C terms, any order) differ by ≤ 2·γ_C = C·eps32 of Σ|x||w|."""
    C = x.shape[-1]
    return C * EPS32 * (x.abs().reshape(-1, C) @ w.abs().reshape(-1, C).T).max().item()


def _kernel_import_error():
    try:
        import kernels.attention  # noqa: F401
    except ImportError as e:  # not written yet; any other error while importing it is a failure, not a skip
        return f"kernels.attention cannot be imported yet: {type(e).__name__}: {e}"
    return None


def test_structure_tied_and_param_count():
    m = GPT(GPTConfig(**TINY))
    assert m.transformer.wte.weight is m.lm_head.weight
    L, C, V, T = 2, 32, 256, 32
    # tied embedding, positions, per block: c_attn 3C², c_proj C², MLP 8C², two LayerNorm weights; final LN
    assert m.num_params() == V * C + T * C + L * (12 * C * C + 2 * C) + C
    assert not any("bias" in n for n, _ in m.named_parameters())


def test_init_scales():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=256, block_size=64))
    cp = torch.cat([p.flatten() for n, p in m.named_parameters() if n.endswith("c_proj.weight")])
    fc = torch.cat([p.flatten() for n, p in m.named_parameters() if n.endswith("c_fc.weight")])
    # the std of 262,144 (c_proj) and 1,048,576 (c_fc) draws: relative sd ≤ 1/√(2n) ≈ 0.0014
    assert abs(cp.std().item() / (0.02 / math.sqrt(8)) - 1) < 0.02
    assert abs(fc.std().item() / 0.02 - 1) < 0.02


def test_sdpa_and_naive_backends_agree_in_fp32():
    torch.manual_seed(1)
    a = GPT(GPTConfig(**TINY, attn="sdpa"))
    b = GPT(GPTConfig(**TINY, attn="naive"))
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 256, (3, 32))
    la, lossa = a(x, x)
    lb, lossb = b(x, x)
    # two attention layers, each ≤ (T + D)·eps32 of max|V| (≲ 1) apart, read out by small weights
    torch.testing.assert_close(la, lb, rtol=1e-5, atol=2 * attention_rtol(32, 16))
    q, k, v = torch.randn(3, 2, 2, 17, 16).unbind(0)
    naive = naive_attention(q, k, v)
    torch.testing.assert_close(sdpa_attention(q, k, v), naive, rtol=0,
                               atol=attention_rtol(17, 16) * naive.abs().max().item())


def test_causal():
    torch.manual_seed(2)
    m = GPT(GPTConfig(**TINY, attn="naive"))
    x = torch.randint(0, 256, (1, 32))
    x2 = x.clone()
    x2[0, 20:] = (x2[0, 20:] + 1) % 256
    # the same computations for these rows (masked keys weigh exactly 0): FP32's default tolerance is ample
    torch.testing.assert_close(m(x)[0][:, :20], m(x2)[0][:, :20])
    assert not torch.allclose(m(x)[0][:, 20:], m(x2)[0][:, 20:])


def test_specs_parse_and_validate():
    cfg = GPTConfig(**TINY, attn=["paper+fix", "sdpa"], beta=5.0, tie_tol=1e-3)
    s0, s1 = cfg.layer_specs()
    assert (s0.backend, s0.numerics, s0.fix) == ("ours", "paper", Fix("beta", 5.0, 1e-3))
    assert s1.backend == "sdpa" and s1.fix.kind is None and s0.label == "paper+fix" and s1.label == "sdpa"
    assert GPTConfig(**TINY, attn="fa2,naive").layer_specs()[1].backend == "naive"
    assert cfg.to_dict()["attn"][0]["numerics"] == "paper"
    with pytest.raises(ValueError, match="2 layers"):
        GPTConfig(**TINY, attn=["sdpa"] * 3)
    with pytest.raises(ValueError, match="unknown attention spec"):
        GPTConfig(**TINY, attn="flash")
    with pytest.raises(ValueError):
        AttnSpec("sdpa", fix=Fix("beta"))
    with pytest.raises(TypeError, match="is a lib.fp.fix.Fix"):
        AttnSpec("ours", fix="beta")              # the kind alone is not a fix: parse takes it flat
    with pytest.raises(ValueError):
        GPTConfig(n_layer=1, n_head=3, n_embd=32)
    with pytest.raises(TypeError):
        AttnSpec.parse(3)


def test_qk_weight_hooks_and_capture():
    torch.manual_seed(3)
    m = GPT(GPTConfig(**TINY, attn="naive"))
    wq, wk = m.qk_weights(1)
    assert wq.shape == wk.shape == (2, 16, 32)
    assert wq.data_ptr() == m.transformer.h[1].attn.c_attn.weight.data_ptr()  # a view, not a copy
    x = torch.randint(0, 256, (2, 32))
    captured_in = {}
    m.transformer.h[1].ln_1.register_forward_hook(lambda mod, i, o: captured_in.setdefault("x", o.detach()))
    m.set_capture(True)
    _, loss = m(x, x)
    loss.backward()
    c = m.transformer.h[1].attn.captured
    xin = captured_in["x"]  # (B, T, C): the input of layer 1's attention
    for h in range(2):
        torch.testing.assert_close(c["q"][:, h], xin @ wq[h].T, rtol=0, atol=_proj_tol(xin, wq[h]))
        torch.testing.assert_close(c["k"][:, h], xin @ wk[h].T, rtol=0, atol=_proj_tol(xin, wk[h]))
    assert c["do"].shape == c["o"].shape == (2, 2, 32, 16)
    m.set_capture(False)
    assert m.transformer.h[1].attn.captured == {}


def test_ours_backend_matches_naive_with_fp32_numerics():
    reason = _kernel_import_error()
    if reason:
        pytest.skip(reason)
    torch.manual_seed(4)
    cfg = dict(n_layer=1, n_head=1, n_embd=16, block_size=16)
    a = GPT(GPTConfig(**cfg, attn="fp32"))
    b = GPT(GPTConfig(**cfg, attn="naive"))
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 256, (1, 16))
    la, lossa = a(x, x)
    lb, lossb = b(x, x)
    # FP32 attention both ways, other orders: ≤ (T + D)·eps32 = 3.8e-6 of max|V| (≲ 1); 1e-4, 1e-5 cover it
    torch.testing.assert_close(la, lb, rtol=1e-4, atol=1e-5)
    lossa.backward()
    lossb.backward()
    # the backward's 2·(T + D)·eps32, summed into the weight gradient over T = 16 tokens: 1e-3 relative
    torch.testing.assert_close(a.transformer.h[0].attn.c_attn.weight.grad,
                               b.transformer.h[0].attn.c_attn.weight.grad, rtol=1e-3, atol=1e-6)


def test_numerics_overrides_in_spec_strings():
    s = AttnSpec.parse("paper/delta_source=dp_p/round_o=false+fix")
    assert s.backend == "ours" and s.fix.kind == "beta" and s.label == "paper/delta_source=dp_p/round_o=false+fix"
    sp = AttnSpec.parse("paper+fix_split")
    assert sp.fix.kind == "beta_split" and sp.label == "paper+fix_split"
    with pytest.raises(ValueError):
        AttnSpec.parse("paper+fixsplit")
    assert s.numerics.delta_source == "dp_p" and s.numerics.round_o is False
    assert s.numerics.round_s is True                      # the rest stays the paper profile
    assert AttnSpec.parse("fa2/mantissa_bits=5").numerics.mantissa_bits == 5
    for bad in ("paper/round_o", "paper/nonexistent=1", "paper/delta_source=bogus", "sdpa/round_o=false"):
        with pytest.raises(ValueError):
            AttnSpec.parse(bad)
    cfg = GPTConfig(**TINY, attn="sdpa,paper/delta_source=fp32_o")
    assert cfg.layer_specs()[1].numerics.delta_source == "fp32_o"


def test_per_head_override_routes_heads(monkeypatch):
    import lib.training.backends as model_mod
    calls = []

    def fake(spec, q, k, v, *, causal=True, scale=None, call=None):  # marks each output with its backend
        calls.append((spec.backend, q.shape[1]))
        return torch.full_like(q, 1.0 if spec.backend == "naive" else 2.0)
    monkeypatch.setattr(model_mod, "run_backend", fake)
    spec = AttnSpec.parse("sdpa", heads=((1, 3), "naive"))
    q = torch.randn(2, 4, 8, 16)
    y = model_mod.attend(spec, q, q, q)
    assert sorted(calls) == [("naive", 2), ("sdpa", 2)]
    assert y[:, [1, 3]].eq(1.0).all() and y[:, [0, 2]].eq(2.0).all()
    assert spec.label == "sdpa[heads 1,3: naive]"
    with pytest.raises(ValueError, match="has 4 heads"):
        model_mod.attend(AttnSpec.parse("sdpa", heads=((4,), "naive")), q, q, q)
    for bad in (((), "naive"), ((1, 1), "naive"), ((-1,), "naive")):
        with pytest.raises(ValueError):
            AttnSpec.parse("sdpa", heads=bad)


def test_per_head_override_is_differentiable_and_matches_full_naive():
    torch.manual_seed(5)
    a = GPT(GPTConfig(**TINY, attn=[AttnSpec.parse("sdpa", heads=((1,), "naive")), "naive"]))
    b = GPT(GPTConfig(**TINY, attn="naive"))
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 256, (2, 32))
    la, lb = a(x, x)[1], b(x, x)[1]
    # SDPA for one head: ≤ (T + D)·eps32·max|V| (|V| ≲ 0.1 at init) in that head, ≪ FP32's default atol 1e-5
    torch.testing.assert_close(la, lb)
    la.backward()
    lb.backward()
    torch.testing.assert_close(a.transformer.h[0].attn.c_attn.weight.grad, b.transformer.h[0].attn.c_attn.weight.grad)


# ------------------------------------------------------------------------------------------------ QK-norm, x capture
# The model as it was before the QK-norm option and the new backends (the commit this option was added on).
PRE_QK_NORM = "2ce6e4bffe7c8284278adc2f288ba1f9e2532a60"


def _adam_losses(model, forward, steps=3, seed=0):
    """Losses of `steps` AdamW steps of `forward(model, x, y) -> loss` on fixed random bytes, then the gradients of
    the last step and the parameters after it (all must match bit for bit, not only the rounded losses)."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    out = []
    for _ in range(steps):
        x = torch.randint(0, 256, (2, 32), generator=g)
        loss = forward(model, x, x.roll(-1, 1))
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out, grads, [p.detach().clone() for p in model.parameters()]


def _same(a, b):
    return a[0] == b[0] and all(torch.equal(x, y) for x, y in zip(a[1] + a[2], b[1] + b[2]))


def _reference_loss(m, idx, targets):
    """The forward of this GPT with FP32 attention written out without the model's attention module (no QK-norm)."""
    tr, C, H = m.transformer, m.config.n_embd, m.config.n_head
    B, T = idx.shape
    x = tr.wte(idx) + tr.wpe(torch.arange(T))
    for blk in tr.h:
        q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = naive_attention(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + blk.attn.c_proj(y)
        x = x + blk.mlp(blk.ln_2(x))
    logits = m.lm_head(tr.ln_f(x))
    return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def test_qk_norm_off_is_the_plain_computation():
    torch.manual_seed(0)
    a = GPT(GPTConfig(**TINY, attn="naive", qk_norm=False))
    b = GPT(GPTConfig(**TINY, attn="naive"))
    b.load_state_dict(a.state_dict())
    assert not any("_ln" in n for n, _ in a.named_parameters())
    assert _same(_adam_losses(a, lambda m, x, y: m(x, y)[1]), _adam_losses(b, _reference_loss))


def test_qk_norm_off_is_bit_identical_to_the_model_before_it():
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    try:
        src = subprocess.run(["git", "show", f"{PRE_QK_NORM}:lib/training/model.py"], cwd=root, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the pre-QK-norm commit is not in this checkout's git history")
    spec = importlib.util.spec_from_loader("model_before_qk_norm", loader=None)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old                  # dataclasses look their module up while the class is built
    try:
        exec(compile(src, "model_before_qk_norm", "exec"), old.__dict__)
        for attn in ("naive", "sdpa"):
            torch.manual_seed(3)
            a = old.GPT(old.GPTConfig(**TINY, attn=attn))
            torch.manual_seed(3)
            b = GPT(GPTConfig(**TINY, attn=attn, qk_norm=False))
            sa, sb = a.state_dict(), b.state_dict()
            assert list(sa) == list(sb) and all(torch.equal(sa[n], sb[n]) for n in sa)   # same init, same seed
            fwd = lambda m, x, y: m(x, y)[1]                                                # noqa: E731
            assert _same(_adam_losses(a, fwd), _adam_losses(b, fwd)), attn                 # bit for bit
    finally:
        del sys.modules[spec.name]


def test_qk_norm_normalises_q_and_k_per_head_and_trains():
    torch.manual_seed(4)
    m = GPT(GPTConfig(**TINY, attn="naive", qk_norm=True))
    L, C, D = 2, 32, 16
    assert m.num_params() == 256 * C + 32 * C + L * (12 * C * C + 2 * C + 2 * D) + C
    wq_before = m.qk_weights(0)[0].clone()
    m.set_capture(True)
    x = torch.randint(0, 256, (2, 32))
    _, loss = m(x, x)
    loss.backward()
    c = m.attn_layers[0].captured
    for t in (c["q"], c["k"]):   # gain 1 at init: zero mean, variance σ²/(σ² + eps) ≈ 1 over head_dim (σ² ≈ 0.01)
        # the mean: FP32, of D = 16 entries ≤ 4 in size: ≤ γ_16·4 = 8·eps32·4 ≈ 4e-6; the variance: eps/σ² varies
        assert t.mean(-1).abs().max() < 1e-5 and (t.var(-1, unbiased=False) - 1).abs().max() < 5e-3
    pre = torch.einsum("btc,hdc->bhtd", c["x"], m.qk_weights(0)[0])   # q before the norm, from x and W_Q
    # pre is another FP32 matmul (≤ C·eps32 of Σ|x||w|); the norm divides by σ and moves q by ≤ (2 + |q|) ≤ 6 times
    # its error over σ
    pre_tol = 6 * _proj_tol(c["x"], m.qk_weights(0)[0]) / pre.std(-1, unbiased=False).min().item()
    torch.testing.assert_close(torch.nn.functional.layer_norm(pre, (D,), eps=1e-5), c["q"], rtol=0, atol=pre_tol)
    assert m.attn_layers[0].q_ln.weight.grad.abs().sum() > 0 and m.attn_layers[0].k_ln.weight.grad.abs().sum() > 0
    assert torch.equal(m.qk_weights(0)[0], wq_before)
    for attn in ("sdpa", "authors/tile=16+fix"):  # every backend sees the normalised q, k
        torch.manual_seed(4)
        other = GPT(GPTConfig(**TINY, attn=attn, qk_norm=True))
        other.load_state_dict(m.state_dict())
        # the loss through other FP32 attentions (≤ (T + D)·eps32·max|V|, |V| ≲ 0.1): 1e-5 of the loss ≈ 5
        torch.testing.assert_close(other(x, x)[1], loss, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError):
        GPTConfig(**TINY, qk_norm=1)


def test_captured_x_gives_the_captured_q():
    torch.manual_seed(5)
    m = GPT(GPTConfig(**TINY, attn="naive"))
    x = torch.randint(0, 256, (2, 32))
    m(x)
    assert m.attn_layers[0].captured == {}        # nothing kept without capture
    m.set_capture(True)
    m(x)
    for i, layer in enumerate(m.attn_layers):
        c = layer.captured
        assert c["x"].shape == (2, 32, 32) and not c["x"].requires_grad
        wq, wk = m.qk_weights(i)
        torch.testing.assert_close(torch.einsum("btc,hdc->bhtd", c["x"], wq), c["q"], rtol=0,
                                   atol=_proj_tol(c["x"], wq))
        torch.testing.assert_close(torch.einsum("btc,hdc->bhtd", c["x"], wk), c["k"], rtol=0,
                                   atol=_proj_tol(c["x"], wk))


def test_fix_options_in_the_spec_win_over_the_config():
    s = AttnSpec.parse("paper/beta=2/tie_tol=0.001/max_shift=none+fix", beta=7.0, tie_tol=0.0, max_shift=64.0)
    assert s.fix == Fix("beta", 2.0, 0.001, None)
    s = AttnSpec.parse("paper/max_shift=32+fix_split", beta=7.0, tie_tol=0.0, max_shift=64.0)
    assert s.fix == Fix("beta_split", 7.0, 0.0, 32.0)
    with pytest.raises(ValueError, match="options of the fix"):
        AttnSpec.parse("paper/beta=2")
    with pytest.raises(ValueError, match="write a number"):
        AttnSpec.parse("paper/beta=big+fix")
