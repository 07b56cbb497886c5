"""The δ-channel statistics (lib/studies/delta/stats.py) on planted inputs with a known answer, and each one shown
able to fail: the same statistic on a planted input without the effect gives the null answer."""
from fractions import Fraction

import numpy as np
import pytest
import torch

from lib.fp.numerics import FP32
from lib.fp.reference import attention_fp64, emulate_backward, emulate_forward
from lib import stats
from lib.studies.delta import stats as ds
from lib.studies.delta import verdicts as dv
from lib.studies.delta.planted import planted, random_terms
from tests.precision import EPS32


# ---------------------------------------------------------------------------------- E: the derivation itself
def test_error_matrices_equal_the_gradient_change_of_the_delta_error():
    """E_Q, E_K from the formulas = the dW_Q, dW_K change when the emulator's backward is given δ + Δδ instead of δ
    (an independent implementation: lib.fp.reference in float32, all-FP32 numerics)."""
    rng = np.random.default_rng(0)
    b, H, T, D, C = 2, 2, 24, 16, 12
    q, k, v, do = (rng.standard_normal((b, H, T, D)).astype(np.float32) for _ in range(4))
    x = rng.standard_normal((b, T, C)).astype(np.float32)
    scale = 0.25
    ref = attention_fp64(q, k, v, do, scale=scale)
    dd = (1e-2 * rng.standard_normal((b, H, T))).astype(np.float32)
    fwd = emulate_forward(q, k, v, FP32, scale=scale)
    base = emulate_backward(q, k, v, fwd.o, fwd.lse, do, FP32, scale=scale, delta=ref["delta"].astype(np.float32))
    lp = emulate_backward(q, k, v, fwd.o, fwd.lse, do, FP32, scale=scale,
                          delta=(ref["delta"] + dd).astype(np.float32))
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    p, _ = ds.reference(t(q), t(k), t(v), scale)
    eq = ds.error_q(t(dd), p, t(k), t(x), scale).numpy()
    ek = ds.error_k(t(dd), p, t(q), t(x), scale).numpy()
    # The emulator's two backward passes share P and dP bit for bit; only dS = P∘(dP − δ) (two FP32 roundings) and
    # its FP32 sums over T rows (γ_T ≤ T·eps32/2 of Σ|dS||K|, in any matmul order) differ: per pass ≤ (T/2 + 2)·eps32
    # of α·|dS|·|K| (|dS|·|Q| for dK), both passes (T + 4)·eps32; then Σ over (b, t) against |x| in FP64.
    # (P's own FP32 error enters only as ΔP∘Δδ, second order.) The bound is ≤ 0.4 % of max|E|: 3 % errors fail.
    abs_ds = np.abs(p.numpy() * (do.astype(np.float64) @ np.swapaxes(v, -1, -2) - ref["delta"][..., None]))
    for e, key, other, a_ds in ((eq, "dq", k, abs_ds), (ek, "dk", q, np.swapaxes(abs_ds, -1, -2))):
        want = np.einsum("bhtd,btc->hdc", base[key].astype(np.float64) - lp[key], x)
        bound = (T + 4) * EPS32 * scale * (a_ds @ np.abs(other.astype(np.float64)))
        assert np.abs(want).max() > 1e-3
        assert np.all(np.abs(e - want) <= np.einsum("bhtd,btc->hdc", bound, np.abs(x))), key
    # the reference gradients used for the 'total error' agree with the FP64 oracle (both FP64: np.allclose's
    # 1e-5 relative, 1e-8 absolute is far from their ~1e-15)
    dq_ref, dk_ref = ds.reference_grads(p, t(q), t(k), t(v), t(do), p @ t(v), scale)
    assert np.allclose(dq_ref.numpy(), ref["dq"]) and np.allclose(dk_ref.numpy(), ref["dk"])


# --------------------------------------------------------------------------------------- planted: the effect
@pytest.fixture(scope="module")
def tied():
    P = planted("ties", spec="paper")
    return P, ds.layer_stats(P["arr"], P["scale"], n_shuffle=200)["stats"]


@pytest.fixture(scope="module")
def untied():
    P = planted("no_ties", spec="paper")
    return P, ds.layer_stats(P["arr"], P["scale"], n_shuffle=200)["stats"]


def test_planted_ties_o_error_has_the_sign_of_v(tied):
    P, st = tied
    assert st["n_tie"][0] / st["n_rows"][0] == pytest.approx((P["arr"]["q"].shape[2] - 1) / P["arr"]["q"].shape[2])
    mean_ulp = st["sum_os_ulp"][0] / st["n_os"][0]
    # theory: ≈ 0.233 ULP along sign(V); sampling over 32,768 entries (sd ≈ 0.002; rows share a tie): 0.03
    assert mean_ulp == pytest.approx(P["pred"]["os_mean_ulp"], abs=0.03)
    agree = st["n_os_agree"][0] / (st["n_os_agree"][0] + st["n_os_disagree"][0])
    assert agree == pytest.approx(P["pred"]["os_frac_agree"], abs=0.03)     # theory: ≈ 0.746 (sd ≈ 0.0025)
    # dO = −c everywhere, so dO·ΔO > 0 exactly where ΔO has the sign of V (every feature is one-signed here)
    el = st["n_el_agree"][0] / (st["n_el_agree"][0] + st["n_el_disagree"][0])
    assert el == pytest.approx(agree)                                       # the same counts (ratios in FP64)


def test_planted_ties_delta_delta_positive(tied):
    P, st = tied
    # the prediction is first order in the rounding error (its ρ terms dropped): 10 %
    assert st["sum_dd"][0] / st["n_rows"][0] == pytest.approx(P["pred"]["dd_mean"], rel=0.1)
    t = stats.sign_test(n_pos=st["n_pos"][0], n_neg=st["n_neg"][0])
    assert t["frac_pos"] > 0.95 and t["p_greater"] < 1e-100
    assert st["sum_dd"][0] / st["sum_abs_dd"][0] > 0.9


def test_planted_ties_error_is_rank_one_and_raises_the_norm(tied):
    P, st = tied
    # rank one by construction: ‖E‖_F² / ‖E‖₂² = 1 up to FP64 rounding (and the FP32 inputs' ≤ eps32 per entry)
    assert st["eq_srank"][0] == pytest.approx(1.0, abs=1e-6) and st["ek_srank"][0] == pytest.approx(1.0, abs=1e-6)
    # u₁ᵀE_Qv₁ = α·ΣΔδ·(PK)₀·‖ξ‖ with (PK)₀ ≈ 2 (to 1e-3: the planted P's weight off the tied pair): positive,
    # i.e. it raises ‖W_Q‖₂
    want = P["scale"] * st["sum_dd"][0] * P["pred"]["pk0"] * P["pred"]["xi_norm"]
    assert st["push_sgd_q"][0] == pytest.approx(want, rel=1e-3) and want > 0
    assert st["push_sgd_k"][0] > 0
    # the terms are identical in direction and nearly all of one sign: ρ² close to the number of terms
    assert st["tokq_cos_unsigned"][0] == pytest.approx(1.0, abs=1e-9)     # identical directions: FP64 rounding
    assert st["tokq_cos_signed"][0] > 0.9
    assert st["tokq_rho2"][0] > 0.8 * st["tokq_m"][0] and st["tokq_p_shuffle"][0] < 0.01


# ------------------------------------------------------------------------------------- planted: the nulls
def test_planted_no_ties_gives_the_null(untied):
    P, st = untied
    assert st["n_tie"][0] == 0
    # the nulls, sampled: 32,768 entries (a fraction's sd ≈ 0.003) and 2,048 rows (sd ≈ 0.011); ≥ 4 sd of room
    assert abs(st["sum_os_ulp"][0] / st["n_os"][0]) < 0.02
    agree = st["n_os_agree"][0] / (st["n_os_agree"][0] + st["n_os_disagree"][0])
    assert abs(agree - 0.5) < 0.02
    t = stats.sign_test(n_pos=st["n_pos"][0], n_neg=st["n_neg"][0])
    assert abs(t["frac_pos"] - 0.5) < 0.05 and t["p_two"] > 1e-3
    assert abs(st["sum_dd"][0] / st["sum_abs_dd"][0]) < 0.05
    # the same identical directions, but signs that cancel: no coherence beyond shuffled signs
    assert st["tokq_rho2"][0] < st["tokq_rho2_null_q99"][0]


def test_random_terms_have_no_shared_structure():
    R = random_terms(n=8, H=2, T=32, D=16, C=24, seed=0)
    st = ds.layer_stats(R["arr"], R["scale"], n_shuffle=200)["stats"]
    D, C = 16, 24
    assert (st["eq_srank"] > 3.0).all() and (st["ek_srank"] > 3.0).all()   # a random 16 × 24 matrix: ≈ 4.9
    assert (np.abs(st["tokq_cos_unsigned"]) < 5 / np.sqrt(D * C)).all()     # random directions: sd 1/√(DC)
    assert (st["tokq_rho2"] < st["tokq_rho2_null_q99"]).all()
    assert (st["tokq_p_shuffle"] > 0.01).all()


def test_term_cos_matrix_baselines(tied):
    P, _ = tied
    a = {n: torch.from_numpy(np.asarray(P["arr"][n], np.float64)) for n in ("q", "k", "v", "o", "do", "x")}
    p, o_ref = ds.reference(a["q"], a["k"], a["v"], P["scale"])
    dd = ds.delta_delta(a["o"], o_ref, a["do"])
    w, ah, bh, _ = ds.term_factors(dd[:, 0].reshape(-1), (p @ a["k"])[:, 0].reshape(-1, 16),
                                   a["x"].reshape(-1, a["x"].shape[-1]), P["scale"])
    real = ds.term_cos_matrix(w, ah, bh, top=32)
    shuf = ds.term_cos_matrix(w, ah, bh, top=32, baseline="shuffled")
    rand = ds.term_cos_matrix(w, ah, bh, top=32, baseline="random")
    off = ~np.eye(32, dtype=bool)
    assert real[off].mean() > 0.9 and abs(shuf[off].mean()) < 0.2 and abs(rand[off].mean()) < 0.1
    with pytest.raises(ValueError):
        ds.term_cos_matrix(w, ah, bh, baseline="nope")


# ------------------------------------------------------------------------------------------- verdict rules
def _per_step(rng, N, H, dd_pos_heads=(), push_heads=()):
    sum_dd = rng.standard_normal((N, 1, H))
    for h in dd_pos_heads:
        sum_dd[:, 0, h] = np.abs(sum_dd[:, 0, h]) + 0.1
    push = rng.standard_normal((N, 1, H))
    for h in push_heads:
        push[:, 0, h] = np.abs(push[:, 0, h]) + 0.1
    ones = np.ones((N, 1, H))
    return dict(n_rows=ones * 100, sum_dd=sum_dd, sum_abs_dd=np.abs(sum_dd) * 3, n_pos=ones * 50,
                n_neg=ones * 50, sum_os_ulp=rng.standard_normal((N, 1, H)), n_os=ones * 10, push_adam_q=push,
                push_sgd_q=push, push_scale=np.ones(N), wq_growth=np.full((1, H), 0.5 * N),
                tokq_rho2=ones * 5.0, tokq_rho2_null_q99=ones * 2.0, step=np.arange(N))


def _E(rng, N, H, coherent_heads=()):
    e = rng.standard_normal((N, 1, H, 4, 6))
    for h in coherent_heads:
        e[:, 0, h] = np.outer(np.arange(4.0), np.ones(6)) + 0.05 * e[:, 0, h]
    return {"q": e}


def test_claims_rules_reproduced_partly_not():
    ctx = dict(regime="planted", tile="64", seeds=[0, 1, 2], horizon="30 steps")
    rng = np.random.default_rng(0)
    pos = [dv.run_summary(_per_step(rng, 30, 3, dd_pos_heads=(0,), push_heads=(1,)),
                          _E(rng, 30, 3, coherent_heads=(2,)), n_flip=2000, seed=s) for s in range(3)]
    neg = [dv.run_summary(_per_step(rng, 30, 3), _E(rng, 30, 3), n_flip=2000, seed=s) for s in range(3)]
    c = dv.claims_from_summaries(pos, ctx)
    assert c["delta_bias"]["status"] == "reproduced"
    assert c["low_rank"]["status"] == "reproduced"
    assert c["wq_norm_push"]["status"] == "reproduced"
    assert c["o_error_v_sign"]["status"] == "not reproduced"       # planted without an O-error effect
    assert "planted" in c["delta_bias"]["evidence"] and "seeds 0, 1, 2" in c["delta_bias"]["evidence"]
    c = dv.claims_from_summaries(neg, ctx)
    assert all(v["status"] == "not reproduced" for v in c.values()), c
    c = dv.claims_from_summaries([pos[0], neg[1], neg[2]], ctx)
    assert c["delta_bias"]["status"] == "partly"
    c = dv.claims_from_summaries(pos[:2], ctx)                        # two seeds are never enough to reproduce
    assert c["delta_bias"]["status"] == "partly"
    assert all(v["status"] == "not yet tested" for v in dv.claims_from_summaries([], ctx).values())


def test_push_too_small_is_only_partly():
    rng = np.random.default_rng(1)
    summ = []
    for s in range(3):
        ps = _per_step(rng, 30, 3, push_heads=(1,))
        ps["wq_growth"] = np.full((1, 3), 1e6)                         # the push is a negligible share of the growth
        summ.append(dv.run_summary(ps, None, n_flip=500, seed=s))
    c = dv.claims_from_summaries(summ, dict(seeds=[0, 1, 2]))
    assert c["wq_norm_push"]["status"] == "partly"
    assert c["low_rank"]["status"] == "not reproduced"                # no step matrices: cannot support


def test_expected_error_theory_is_what_the_planted_prediction_uses():
    from lib.fp.theory import expected_error_ulps
    assert expected_error_ulps(2, Fraction(0)) == 0                       # no remainder: unbiased
    assert expected_error_ulps(2, Fraction(1, 100)) == Fraction(1, 4) - Fraction(1, 200)


def test_gradient_comparisons_on_planted_gradients():
    """cos(E, true dW), ‖E‖/‖dW‖ and the share of the total gradient error, on gradients with a known answer: a
    captured dq that differs from the FP64 one only by the δ error (total error = E exactly), one equal to −E's own
    dq term (cos = −1), and one with an error orthogonal to E (cos with the total = 0); the Adam push with a constant
    denominator c is the SGD push / c."""
    P = planted("ties", spec="paper")
    a = {n: torch.from_numpy(np.asarray(v, np.float64)) for n, v in P["arr"].items()}
    s = P["scale"]
    p, o_ref = ds.reference(a["q"], a["k"], a["v"], s)
    dd = ds.delta_delta(a["o"], o_ref, a["do"])
    dq_ref, dk_ref = ds.reference_grads(p, a["q"], a["k"], a["v"], a["do"], o_ref, s)
    dq_delta = s * dd[..., None] * (p @ a["k"])                 # dQ_hp − dQ_lp of the δ channel
    dk_delta = s * (p.transpose(-1, -2) @ (dd[..., None] * a["q"]))
    arr = dict(P["arr"], dq=(dq_ref - dq_delta).numpy(), dk=(dk_ref - dk_delta).numpy(),
               adam_q=np.full((1, 16, 8), 0.5, np.float32), adam_k=np.full((1, 16, 8), 0.5, np.float32))
    st = ds.layer_stats(arr, s, n_shuffle=20)["stats"]
    # identities computed in FP64 (cos = ±1, equal norms, a push divided by an exact 0.5): 1e-9 and 1e-6 are rounding
    assert st["eq_cos_tot"][0] == pytest.approx(1.0, abs=1e-9) and st["ek_cos_tot"][0] == pytest.approx(1.0, abs=1e-9)
    assert st["totq_fro"][0] == pytest.approx(st["eq_fro"][0], rel=1e-9)
    assert st["push_adam_q"][0] == pytest.approx(st["push_sgd_q"][0] / 0.5, rel=1e-6)
    arr2 = dict(arr, dq=(-dq_delta).numpy())                     # the true gradient is −(E's dq): cos = −1
    st2 = ds.layer_stats(arr2, s, n_shuffle=20)["stats"]
    assert st2["eq_cos_grad"][0] == pytest.approx(-1.0, abs=1e-9)
    assert st2["eq_fro"][0] / st2["gq_fro"][0] == pytest.approx(1.0, rel=1e-9)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(dq_ref.shape) * float(dq_delta.abs().max())
    noise[..., 0] = 0.0                     # an error orthogonal to E's direction e₀ (X is ξ for every token here)
    arr3 = dict(arr, dq=(dq_ref.numpy() + noise))
    st3 = ds.layer_stats(arr3, s, n_shuffle=20)["stats"]
    assert abs(st3["eq_cos_tot"][0]) < 1e-9 and st3["totq_fro"][0] > 0


# ------------------------------------------------------------------------- the batched paths = the one-head ones
def test_heads_at_once_equal_one_head_at_a_time():
    """`layer_stats` computes the token coherence of all heads at once (dropped tokens zeroed, not removed; one
    Gram of X for the E_Q side) and reuses P·X, P·K and the scores: the same numbers, and the same sign draws, as
    `term_factors` + `unit_gram` + `token_coherence` head by head, and as the functions without the reused parts."""
    rng = np.random.default_rng(5)
    b, H, T, D, C = 2, 3, 24, 8, 12
    t = lambda *s: torch.from_numpy(rng.standard_normal(s))  # noqa: E731
    q, k, v, do, x = t(b, H, T, D), t(b, H, T, D), t(b, H, T, D), t(b, H, T, D), t(b, T, C)
    scale = 0.3
    s = ds.scores(q, k, scale)
    p, o_ref = ds.reference(q, k, v, scale)
    assert torch.equal(ds.reference(q, k, v, scale, s=s)[1], o_ref)
    assert all(torch.equal(a, c) for a, c in zip(ds.ties(q, k, scale, tile=8), ds.ties(q, k, scale, tile=8, s=s)))
    dd = t(b, H, T)
    dd[:, 0, :5] = 0.0                      # dropped tokens (Δδ = 0) in head 0
    dd[:, 2, 1:] = 0.0
    dd[1, 2, 0] = 0.0                       # head 2: one term (fewer than 2: NaN statistics)
    x[0, 3] = 0.0                           # a zero factor: dropped in every head on the E_Q side
    px, pk = p @ x[:, None], p @ k
    assert torch.equal(ds.error_k(dd, p, q, x, scale, px=px), ds.error_k(dd, p, q, x, scale))
    assert torch.equal(ds.error_q(dd, p, k, x, scale, pk=pk), ds.error_q(dd, p, k, x, scale))
    heads = lambda a: a.transpose(0, 1).reshape(H, b * T, *a.shape[3:])  # noqa: E731
    for a_all, b_all in ((pk, x.reshape(-1, C)), (q, heads(px))):
        w, ah, bh, keep = ds.head_term_factors(heads(dd), heads(a_all), b_all, scale)
        got = ds.token_coherence_heads(w, ah, bh, keep, n_shuffle=50, seeds=[7 + h for h in range(H)])
        for h in range(H):
            bb = b_all if b_all.dim() == 2 else b_all[h]
            w1, ah1, bh1, _ = ds.term_factors(heads(dd)[h], heads(a_all)[h], bb, scale)
            want = ds.token_coherence(w1, ds.unit_gram(ah1, bh1), n_shuffle=50, seed=7 + h)
            for n, val in want.items():
                if np.isnan(val):
                    assert np.isnan(float(got[n][h])), (n, h)
                else:
                    # FP64 both ways, other summation orders: ~1e-15 relative
                    assert float(got[n][h]) == pytest.approx(val, rel=1e-9, abs=1e-12), (n, h)
        assert float(got["m"][2]) < 2 and float(got["p_shuffle"][2]) == 1.0
