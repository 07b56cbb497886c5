"""The training study's extra attention backends: the authors' algorithm ("authors"), the row-zeroing controls
("+zero_rows", lib/training/zero_rows.py) and the δ-dose backend ("dose"); their spec grammar and telemetry."""
import math

import numpy as np
import pytest
import torch

from lib.fp.fix import Fix
from lib.training import authors_backend, dose_backend
from lib.training.authors_fa import authors_attention
from lib.training.model import AttnCall, GPTConfig, naive_attention, run_backend
from lib.training.spec import AttnSpec
from lib.training.train import TrainConfig, _parser, train
from lib.training.zero_rows import OURS_ZERO_AT, authors_shift, authors_zero_at, ours_shift
from tests.precision import EPS32, attention_rtol


def planted(n=32, d=16, seed=0, hot=None):
    """(q, k, v, dO), (1, 2, n, d) FP32, BF16-valued (d a power of 4); keys 0 and 1 are the same vector u, so every
    row sees an exactly tied pair; `hot` {row: score}: those rows' queries point along u with the tied score as
    given (powers of two: exact), the other rows have small O(0.1) scores and a 0 on the pair."""
    g = torch.Generator().manual_seed(seed)
    k = (0.3 * torch.randn(1, 2, n, d, generator=g)).bfloat16().float()
    u = torch.zeros(d)
    u[0] = math.sqrt(d)                           # q = (a/√d)·u scores (a/√d)·|u|²·(1/√d) = a on u
    k[:, :, 0] = u
    k[:, :, 1] = u
    k[:, :, 2:, 0] = 0.0                          # other keys orthogonal to u: the tied pair is the max of a hot row
    q = (0.1 * torch.randn(1, 2, n, d, generator=g)).bfloat16().float()
    q[:, :, :, 0] = 0.0                           # ordinary rows: scores are O(0.1) on every key, ties unlikely
    for row, score in (hot or {}).items():
        q[:, :, row] = u * (score / math.sqrt(d))
    v = (-2.0 + 0.3 * torch.randn(1, 2, n, d, generator=g)).bfloat16().float()
    do = torch.randn(1, 2, n, d, generator=g)
    return q, k, v, do


HOT = {3: 2.0, 5: 32.0, 9: 2.0, 12: 32.0, 20: 32.0}   # β = 7: shift 12 (kept) or 192 (underflows in FP32)
ZEROED = [5, 12, 20]


def grads(fn, q, k, v, do):
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = fn(qq, kk, vv)
    o.backward(do)
    return o.detach(), qq.grad, kk.grad, vv.grad


# ------------------------------------------------------------------------------------------------ spec grammar
def test_authors_spec_grammar():
    s = AttnSpec.parse("authors/tile=512+fix", beta=7.0, tie_tol=0.0)
    assert (s.backend, s.fix, s.opts.tile, s.opts.floor) == ("authors", Fix("beta", 7.0, 0.0, None), 512, 1e-10)
    s = AttnSpec.parse("authors/tile=-1/beta=2/tie_tol=1e-3/floor=0+fix", beta=7.0)
    assert (s.opts.tile, s.fix.beta, s.fix.tie_tol, s.opts.floor, s.zero_at) == (-1, 2.0, 1e-3, 0.0, None)
    z = AttnSpec.parse("authors+zero_rows", beta=7.0, tie_tol=0.0)
    assert z.fix.kind == "zero_rows" and z.zero_at == pytest.approx(-math.log(1e-10)) and z.label == "authors+zero_rows"
    assert AttnSpec.parse("authors/zero_at=88+zero_rows").zero_at == 88.0
    assert GPTConfig(n_layer=1, n_head=1, n_embd=16, attn="authors+zero_rows", zero_at=50.0).layer_specs()[0] \
        .zero_at == 50.0
    assert AttnSpec.parse("authors").fix.kind is None and AttnSpec.parse("authors").opts.tile == 512
    for bad in ("authors/tile=0", "authors/tile=x", "authors/beta", "authors/foo=1", "authors+fix_split",
                "authors/tile=1/tile=2", "authors/floor=-1", "authors/zero_at=-3+zero_rows", "authors/beta=1+fix",
                "authors/tie_tol=-1"):
        with pytest.raises(ValueError):
            AttnSpec.parse(bad)
    with pytest.raises(ValueError):
        AttnSpec("sdpa", fix=Fix("zero_rows"))
    with pytest.raises(ValueError):
        AttnSpec("authors")                       # options missing
    assert AttnSpec.parse("paper+zero_rows").zero_at == pytest.approx(OURS_ZERO_AT)
    assert AttnSpec.parse("paper+fix").zero_at is None


def test_dose_spec_grammar():
    s = AttnSpec.parse("dose/paper/c=bias/lam=30", beta=5.0, tie_tol=1e-3, max_shift=None)
    o = s.opts
    assert (s.backend, o.component, o.lam, o.placement.backend, o.placement.numerics, o.placement.fix.kind) == \
        ("dose", "bias", 30.0, "ours", "paper", None)
    f = AttnSpec.parse("dose/paper/lam=1+fix", beta=5.0, tie_tol=1e-3, max_shift=None).opts
    assert (f.component, f.placement.fix) == ("true", Fix("beta", 5.0, 1e-3, None))
    a = AttnSpec.parse("dose/authors/tile=-1/c=noise/lam=3").opts
    assert a.placement.backend == "authors" and a.placement.opts.tile == -1 and a.component == "noise"
    d = AttnSpec.parse("dose/paper/delta_source=dp_p/c=flip").opts
    assert d.placement.numerics.delta_source == "dp_p" and d.lam == 1.0
    cfg = GPTConfig(n_layer=2, n_head=1, n_embd=16, attn="sdpa,dose/fa2/c=random/lam=10")
    assert cfg.layer_specs()[1].opts.component == "random" and cfg.to_dict()["attn"][1]["opts"]["lam"] == 10.0
    for bad in ("dose", "dose/c=true", "dose/paper/c=sign", "dose/paper/lam=-1", "dose/paper/lam=x",
                "dose/sdpa", "dose/naive/lam=1", "dose/dose/paper", "dose/paper+zero_rows", "dose/paper/c=true/c=flip"):
        with pytest.raises(ValueError):
            AttnSpec.parse(bad)


def test_cli_flags_reach_the_model():
    a = _parser().parse_args(["--qk-norm", "--zero-at", "30", "--attn", "authors/tile=-1+zero_rows"])
    cfg = TrainConfig.flat(**vars(a))
    m = cfg.model
    assert m.qk_norm is True and m.layer_specs()[0].zero_at == 30.0
    assert _parser().parse_args([]).qk_norm is False
    with pytest.raises(ValueError):
        TrainConfig.flat(zero_at=-1.0)


# -------------------------------------------------------------------------------------------- authors backend
def test_authors_backend_is_the_authors_algorithm():
    torch.manual_seed(0)
    q, k, v, do = torch.randn(4, 2, 2, 40, 16).unbind(0)
    spec = AttnSpec.parse("authors/tile=16/beta=2/tie_tol=1e-3+fix")
    ours = grads(lambda a, b, c: run_backend(spec, a, b, c), q, k, v, do)
    ref = grads(lambda a, b, c: authors_attention(a, b, c, q_tile=16, k_tile=16, stable=True, beta=2.0,
                                                  tie_tol=1e-3), q, k, v, do)
    assert all(torch.equal(x, y) for x, y in zip(ours, ref))
    untiled = run_backend(AttnSpec.parse("authors/tile=-1"), q, k, v)
    assert torch.equal(untiled, authors_attention(q, k, v, q_tile=40, k_tile=40))
    naive = naive_attention(q, k, v)                              # both FP32, other matmul orders: FP32's bound
    torch.testing.assert_close(untiled, naive, rtol=0, atol=attention_rtol(40, 16) * naive.abs().max().item())


def test_authors_backward_runs_under_the_forwards_autocast(monkeypatch):
    seen = []
    orig = authors_backend._authors_backward      # their backward, which the autocast wrapper calls as a function

    def spy(ctx, do):
        seen.append(torch.is_autocast_enabled("cpu"))
        return orig(ctx, do)
    monkeypatch.setattr(authors_backend, "_authors_backward", spy)
    torch.manual_seed(1)
    q, k, v, do = (t.bfloat16() for t in torch.randn(4, 1, 2, 24, 16).unbind(0))
    spec = AttnSpec.parse("authors/tile=8")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o, dq, dk, dv = grads(lambda a, b, c: run_backend(spec, a, b, c), q, k, v, do)
    assert seen == [True] and o.dtype == dq.dtype == torch.bfloat16
    o, *_ = grads(lambda a, b, c: run_backend(spec, a, b, c), q.float(), k.float(), v.float(), do)
    assert seen == [True, False]                  # no autocast in the forward: none in the backward


def test_authors_underflow_rows_counted_from_the_clamped_row_sum():
    q, k, v, _ = planted(hot=HOT)
    for tile in (-1, 16):
        stats = {}
        o = run_backend(AttnSpec.parse(f"authors/tile={tile}+fix"), q, k, v, call=AttnCall(stats=stats))
        # β = 7: a tied max of 32 is shifted by 192 (every P̄ underflows, ℓ = the clamp); of 2 by 12 (ℓ ≈ 2e-5)
        assert stats["underflow_of"] == 2 * 32 and stats["underflow_n"] == 2 * len(ZEROED)
        assert o[:, :, ZEROED].eq(0).all() and o[:, :, [3, 9]].abs().min() > 1.0
        assert torch.equal(o, run_backend(AttnSpec.parse(f"authors/tile={tile}+fix"), q, k, v))  # probe: no effect
        plain = {}
        run_backend(AttnSpec.parse(f"authors/tile={tile}"), q, k, v, call=AttnCall(stats=plain))
        assert plain["underflow_n"] == 0
    assert run_backend(AttnSpec.parse("authors"), q, k, v, call=AttnCall()) is not None   # no stats: no counting


# ------------------------------------------------------------------------------------------- zero-rows controls
def test_exact_rule_shifts_on_planted_rows():
    q, k, _, _ = planted(hot=HOT)
    for shift in (authors_shift(q, k, tile=32, beta=7.0, tie_tol=0.0), authors_shift(q, k, tile=16, beta=7.0,
                                                                                         tie_tol=0.0),
                  ours_shift(q, k, beta=7.0, tie_tol=0.0, round_s=True, tile=16)):
        assert shift.shape == (1, 2, 32)
        # (β − 1)·max of exact scores (BF16 values, powers of two): FP32's default 1.3e-6 relative is one rounding
        torch.testing.assert_close(shift[:, :, ZEROED], torch.full((1, 2, 3), 6 * 32.0))
        torch.testing.assert_close(shift[:, :, [3, 9]], torch.full((1, 2, 2), 6 * 2.0))
    # −ln(1e-10) = 23.02585…: the literal's 4 decimals
    assert authors_zero_at(1e-10) == pytest.approx(23.0259, abs=1e-4) and authors_zero_at(0.0) == OURS_ZERO_AT


@pytest.mark.parametrize("tile", [-1, 16])
def test_authors_zero_rows_matches_the_exact_rule(tile):
    q, k, v, do = planted(hot=HOT)
    fix = grads(lambda a, b, c: run_backend(AttnSpec.parse(f"authors/tile={tile}+fix"), a, b, c), q, k, v, do)
    stats = {}
    ctl = grads(lambda a, b, c: run_backend(AttnSpec.parse(f"authors/tile={tile}+zero_rows"), a, b, c,
                                            call=AttnCall(stats=stats)), q, k, v, do)
    zero = lambda o: o.eq(0).all(-1)                                                           # noqa: E731
    assert torch.equal(zero(fix[0]), zero(ctl[0])) and zero(ctl[0])[:, :, ZEROED].all()
    assert stats["underflow_n"] == 2 * len(ZEROED)
    for g in (fix[1], ctl[1]):                    # no gradient reaches q through a zeroed row
        assert g[:, :, ZEROED].eq(0).all()
    # Elsewhere the same, up to the FP32 rounding of the shifted rows (and, with tiles, the clamp their fully
    # masked tiles add to ℓ: 1e-10 against ℓ ≈ 1e-5 for a tied max of 2 shifted by 12). The clamp uses 80 % of
    # this tolerance, in exact arithmetic (the same on every machine); FP32's rounding alone uses < 5 % of it.
    for a, b in zip(fix, ctl):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item())
    if tile == -1:                                # untiled: rows the rule leaves alone are computed identically
        keep = authors_shift(q, k, tile=32, beta=7.0, tie_tol=0.0) == 0
        assert keep.sum() > 40 and torch.equal(fix[0][keep], ctl[0][keep])


def test_ours_zero_rows_matches_the_exact_rule_kernel():
    pytest.importorskip("kernels.attention")
    q, k, v, do = planted(n=32, d=16, hot=HOT)
    fix = grads(lambda a, b, c: run_backend(AttnSpec.parse("paper+fix", beta=7.0, max_shift=None), a, b, c),
                q, k, v, do)
    ctl = grads(lambda a, b, c: run_backend(AttnSpec.parse("paper+zero_rows", beta=7.0), a, b, c), q, k, v, do)
    zero = lambda o: o.eq(0).all(-1)                                                           # noqa: E731
    assert torch.equal(zero(fix[0]), zero(ctl[0])) and zero(ctl[0])[:, :, ZEROED].all()
    assert fix[1][:, :, ZEROED].eq(0).all() and ctl[1][:, :, ZEROED].eq(0).all()
    keep = ours_shift(q, k, beta=7.0, tie_tol=0.0, round_s=True) == 0   # rows the rule leaves alone
    assert keep.sum() > 40 and torch.equal(fix[0][keep], ctl[0][keep])
    # tied rows below the level: the shifted and the plain BF16 placement round differently (a few BF16 ulps)
    torch.testing.assert_close(fix[0], ctl[0], rtol=0, atol=4 * 2 ** -8 * v.abs().max().item())
    with pytest.raises(ValueError, match="mantissa_bits"):   # its tie rebuild knows BF16 scores only
        run_backend(AttnSpec.parse("paper/mantissa_bits=5+zero_rows"), q, k, v)


# ------------------------------------------------------------------------------------------------- dose backend
def test_dose_components():
    g = torch.Generator().manual_seed(0)
    dd = torch.randn(3, 4, 50, generator=g) + 0.5
    bias, noise, true = (dose_backend.component(dd, c) for c in ("bias", "noise", "true"))
    assert torch.equal(true, dd) and torch.equal(dose_backend.component(dd, "flip"), -dd)
    # two FP32 means of 50 terms (the row's, then the noise's), each ≤ γ_50 = 25·eps32 of max|Δδ|, in any order
    assert bias.var(dim=-1).max() == 0 and noise.mean(dim=-1).abs().max() < 50 * EPS32 * dd.abs().max()
    torch.testing.assert_close(bias + noise, true)               # two FP32 roundings of |Δδ| ≤ 5: ≪ atol 1e-5
    s = dose_backend.row_signs(dd.shape, seed=0, step=7, layer=1, device="cpu")
    assert set(s.unique().tolist()) == {-1.0, 1.0} and abs(s.mean().item()) < 0.1   # 600 fair signs: sd 0.04
    assert torch.equal(dose_backend.component(dd, "random", s), dd * s)
    assert torch.equal(s, dose_backend.row_signs(dd.shape, seed=0, step=7, layer=1, device="cpu"))
    for other in (dict(seed=1, step=7, layer=1), dict(seed=0, step=8, layer=1), dict(seed=0, step=7, layer=2)):
        assert not torch.equal(s, dose_backend.row_signs(dd.shape, device="cpu", **other))
    with pytest.raises(ValueError):
        dose_backend.component(dd, "random")


def _dose(q, k, v, do, o_lp, comp, lam, signs=None):
    stats = {}
    out = grads(lambda a, b, c: dose_backend.DoseAttention.apply(a, b, c, o_lp, 1 / math.sqrt(q.shape[-1]), True,
                                                                 comp, lam, signs, stats), q, k, v, do)
    return out, stats


def test_dose_planted_error_gives_known_delta_error_and_injection():
    torch.manual_seed(0)
    B, H, T, D = 2, 3, 12, 8
    q, k, v = torch.randn(3, B, H, T, D).unbind(0)
    o = naive_attention(q, k, v)
    eps = 2.0 ** -10
    rowscale = torch.arange(1, T + 1, dtype=torch.float32).view(1, 1, T, 1)
    o_lp = o - eps * rowscale                    # every O entry of row t too negative by ε·(t + 1)
    do = -torch.ones(B, H, T, D)                 # dO negative, sign-correlated with the error: Δδ > 0
    expect_dd = (D * eps * rowscale.squeeze(-1)).expand(B, H, T)
    (base, s0) = _dose(q, k, v, do, o_lp, "true", 0.0)
    # O_lp = O − ε·(t + 1) is rounded in FP32: ≤ eps32·|O| ≈ 2.4e-4·ε per entry, inside 1e-3 of Δδ (and of Δδ²)
    torch.testing.assert_close(torch.tensor(s0["dose_dd_sum"], dtype=torch.float64), expect_dd.double().sum(),
                               rtol=1e-3, atol=0)
    assert s0["dose_n"] == B * H * T and s0["dose_inj_sq"] == 0.0
    p = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~torch.ones(T, T).tril().bool(),
                                                                             float("-inf")), -1)
    signs = dose_backend.row_signs((B, H, T), seed=0, step=0, layer=0, device="cpu")
    lam = 30.0
    for comp in ("true", "flip", "random", "bias", "noise"):
        (out, st) = _dose(q, k, v, do, o_lp, comp, lam, signs)
        c = dose_backend.component(expect_dd, comp, signs)
        # δ gains λ·c per row: dS changes by −P·λc, so dQ by −α·λ·diag(c)·P·K and dK by −α·λ·Pᵀ·diag(c)·Q
        dq_expect = -lam / math.sqrt(D) * (c.unsqueeze(-1) * p) @ k
        dk_expect = -lam / math.sqrt(D) * (c.unsqueeze(-1) * p).transpose(-2, -1) @ q
        # FP32 backward passes (sums of T = 12 terms: ~1e-6 of the gradients) against a change of 1e-3 to 1
        torch.testing.assert_close(out[1] - base[1], dq_expect, rtol=1e-3, atol=1e-6)
        torch.testing.assert_close(out[2] - base[2], dk_expect, rtol=1e-3, atol=1e-6)
        assert torch.equal(out[3], base[3]) and torch.equal(out[0], base[0])   # dV and O: no δ in them
        torch.testing.assert_close(torch.tensor(st["dose_inj_sq"], dtype=torch.float64),
                                   (lam * c).double().square().sum(), rtol=1e-3, atol=0)
    (_, sb) = _dose(q, k, v, do, o_lp, "bias", lam)
    assert sb["dose_dd_sum"] == s0["dose_dd_sum"] and sb["dose_dd_sum_head"].shape == (H,)


def test_dose_lambda_zero_is_fp32_attention():
    torch.manual_seed(1)
    q, k, v, do = torch.randn(4, 2, 2, 16, 16).unbind(0)
    o_lp = naive_attention(q, k, v) + 0.01 * torch.randn(2, 2, 16, 16)
    signs = dose_backend.row_signs((2, 2, 16), seed=3, step=1, layer=0, device="cpu")
    plain, _ = _dose(q, k, v, do, None, "true", 0.0)
    for comp in ("true", "random", "flip", "bias", "noise"):
        (out, _) = _dose(q, k, v, do, o_lp, comp, 0.0, signs)
        assert all(torch.equal(a, b) for a, b in zip(out, plain)), comp   # bit for bit, whatever O_lp and c
    ref = grads(naive_attention, q, k, v, do)
    assert torch.equal(plain[0], ref[0])          # the forward is the naive backend's, op for op
    # The backward: δ = rowsum(dO∘O) instead of autograd's rowsum(dP∘P) (equal in exact arithmetic) and another
    # summation order: FP32 rounding, ~2⁻²⁴ per term over sums of ≤ T + D = 32 terms, with cancellation in dP − δ.
    for a, b in zip(plain[1:], ref[1:]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


def test_dose_backend_in_a_model_trains_and_logs():
    pytest.importorskip("kernels.attention")
    TINY = dict(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=2, lr=3e-3, warmup=2, progress=False,
                eval_batches=1, steps=3, telemetry_every=2)
    a = train(TrainConfig.flat(**TINY, attn="naive,dose/paper/c=random/lam=30"))
    b = train(TrainConfig.flat(**TINY, attn="naive,dose/paper/c=random/lam=30"))
    assert a["loss"] == b["loss"]                                # the signs are seeded: same run, same numbers
    t = a["telemetry"]
    inj, dd, mean = (np.asarray(t[k_]) for k_ in ("dose_inj_rms", "dose_dd_rms", "dose_dd_mean"))
    assert inj.shape == (len(t["step"]), 2) and np.isnan(inj[:, 0]).all()
    assert np.isnan(np.asarray(t["underflow_rows"])).all()
    # |±Δδ| = |Δδ|: two FP32 RMS of B·H·T = 128 terms, each ≤ γ_128 = 64·eps32 in any order
    assert (dd[:, 1] > 0).all() and np.allclose(inj[:, 1], 30 * dd[:, 1], rtol=128 * EPS32)
    assert np.isfinite(mean[:, 1]).all() and np.asarray(t["dose_dd_sum_head"]).shape == (len(t["step"]), 2, 2)
    z = train(TrainConfig.flat(**TINY, attn="naive,dose/paper/c=true/lam=0"))
    n = train(TrainConfig.flat(**TINY, attn="naive,naive"))
    np.testing.assert_allclose(z["loss"], n["loss"], rtol=1e-5)  # λ = 0: FP32 attention (up to δ's FP32 order)
    u = train(TrainConfig.flat(**(TINY | dict(steps=2)), attn="authors/tile=16+fix,authors+zero_rows"))
    uf = np.asarray(u["telemetry"]["underflow_rows"])
    assert uf.shape == (2, 2) and ((uf >= 0) & (uf <= 1)).all()


def test_fix_row_stats_count_shifted_zeroed_and_guarded_rows():
    """Planted q, k: rows whose max repeats get shifted; with β = 7 a tied max above 87.3/6 ≈ 14.6 is zeroed by the
    exact rule and capped by a 64 guard; untied rows are left alone; the tie test uses the rounding block."""
    from lib.training.zero_rows import fix_row_stats, tie_block
    from lib.fp.numerics import PAPER
    T, D = 128, 16
    k = torch.zeros(1, 1, T, D)
    k[0, 0, 3, 0] = k[0, 0, 70, 0] = 1.0                  # two identical keys, in different 64-key tiles
    q = torch.zeros(1, 1, T, D)
    q[0, 0, :, 0] = torch.linspace(0, 20, T) * math.sqrt(D)   # the tied score grows along the rows: 11 to 20
    pb = PAPER.replace(round_block=128)
    assert tie_block(PAPER, T) == 64 and tie_block(pb, T) == 128 and tie_block(PAPER.replace(round_block=-1), T) == T
    per_tile = fix_row_stats(q, k, numerics=PAPER, beta=7.0, tie_tol=0.0, max_shift=None)
    per_block = fix_row_stats(q, k, numerics=pb, beta=7.0, tie_tol=0.0, max_shift=None)
    guarded = fix_row_stats(q, k, numerics=pb, beta=7.0, tie_tol=0.0, max_shift=64.0)
    # the two maxima never share a 64-key tile, so a per-tile test sees no tie; one 128-key block holds both: every
    # row from key 70 on (58 of 128) ties, and those whose tied score exceeds 87.3/6 ≈ 14.6 are zeroed
    assert per_tile["fix_rows"] == 0.0 and per_block["fix_rows"] == 58 / 128
    assert 0 < per_block["fix_zero_rows"] < per_block["fix_rows"] and guarded["fix_zero_rows"] == 0.0
    assert guarded["fix_guard_rows"] > 0 and per_block["fix_guard_rows"] == 0.0
