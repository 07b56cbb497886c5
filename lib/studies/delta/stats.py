"""The middle of the causal chain, measured: ΔO, Δδ and the dW_Q / dW_K error they cause, from captured steps.

Pure functions on arrays (numpy or torch; computed in float64 with torch, on any device). Links of Qiu & Yao tested:

* L3  the error of O has the sign of V where V is one-signed;
* L4  Δδ = δ_lp − δ_hp = rowsum(dO∘ΔO) > 0 systematically, ΔO = O_lp − O_ref;
* L5  that error enters dW_Q as E_Q = dW_Q,hp − dW_Q,lp = α Σ_T Δδ[T]·(PK)[T]ᵀ X[T] (rank-1 terms), and dW_K as
      E_K = α Σ_T Δδ[T]·Q[T]ᵀ (PX)[T] — derived in the same way: dS_lp − dS_hp = −diag(Δδ)·P because
      dS = P∘(dP − δ), so dQ_hp − dQ_lp = α·diag(Δδ)·P·K and dK_hp − dK_lp = α·Pᵀ·diag(Δδ)·Q; dW = dQᵀX, dKᵀX;
* L6  the terms are similar across tokens and steps, so E accumulates instead of cancelling;
* L7  that error pushes ‖W_Q‖₂ up.

Conventions (stated once, used everywhere):
* O_ref is FP64 softmax attention of the captured q, k, v (no tiles); P is its probability matrix. ΔO, Δδ, E are
  "low precision minus reference" for O and δ, and "reference minus low precision" for gradients (the paper's
  sign): the gradient training applied is g_lp = g_hp − E.
* Sign that raises the norm: an optimiser step is W ← W − lr·g_lp = W − lr·g_hp + lr·E, so to first order the
  error changes σ₁(W) by +lr·u₁ᵀE v₁ (SGD); with Adam the error's share of the update is ≈ +lr·E ⊘ (√v̂ + ε)
  (summed over the momentum's lifetime, v̂ taken as unchanged by the error), so `push_adam` = u₁ᵀ(E ⊘ (√v̂ + ε))v₁.
  **Positive push raises ‖W‖₂.** (u₁, σ₁, v₁): top singular triplet of W^h (D × C, nn.Linear layout).
* "Rows whose BF16 maximum repeats": the row max of the BF16-rounded FP32 scores α·q·kᵀ occurs ≥ 2 times
  (`lib.training.metrics.bf16_row_ties`); "tile ties": two of them in one key tile of `tile` keys.
* V one-signed in feature i for row T: s[T, i] = Σ_t P[T, t]·sign(V[t, i]) has |s| ≥ `one_signed` (default 0.9):
  at least 95% of the row's attention mass sits on keys whose V[:, i] has one sign. ULP of O: BF16 ULP of O_ref.
* Baselines. Rank-1 terms of different tokens: *random directions* (a, b replaced by Gaussian vectors of the same
  shapes: pairwise cosine 0 ± 1/√(D·C)) for their similarity, and *shuffled signs* (Δδ[T] → ±|Δδ[T]| with fair
  random signs, geometry kept) for whether their signs make them add up. E at different steps: shuffled signs (E
  recomputed from the same step's terms with random Δδ signs). The coherence ρ² = ‖Σ terms‖²_F / Σ‖term‖²_F is 1
  in expectation under either null and up to n for n identical terms.

Statistical tests (`lib.stats`): exact binomial sign tests (scipy), sign-flip permutation tests (seeded),
Clopper–Pearson intervals. Rows of one sequence are not independent; the verdicts (`claims`) therefore test per-step sums across
steps, and report row-level counts only as evidence.
"""
from __future__ import annotations

import numpy as np
import torch

from lib.stats import coherence, stable_rank

__all__ = ["reference", "delta_delta", "ties", "v_sign", "ulp_bf16", "error_q", "error_k",
           "true_grad", "reference_grads", "term_factors", "unit_gram", "token_coherence", "term_cos_matrix",
           "scores", "head_term_factors", "token_coherence_heads",
           "layer_stats", "capture_stats", "replay_o", "variant_stats", "step_matrix_stats", "ALPHA", "ONE_SIGNED"]

ALPHA = 0.01        # per-head significance level; Bonferroni-divided by the number of heads tested
ONE_SIGNED = 0.9    # |Σ_t P·sign(V)| ≥ this: V one-signed in that feature for that row
F64 = torch.float64


# ================================================================================================ replay (float64)
def _t(x, device=None, dtype=F64) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")
    return x.to(device=device if device is not None else x.device, dtype=dtype)


def _causal_mask(T, device):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def scores(q, k, scale: float, causal: bool = True):
    """α·q·kᵀ (..., T, T) in the dtype of q, k, with −inf above the diagonal when causal: what `reference` takes the
    softmax of and `ties` rounds to BF16 (compute it once and pass it to both)."""
    s = scale * (q @ k.transpose(-1, -2))
    if causal:
        s = s.masked_fill(~_causal_mask(s.shape[-1], s.device), float("-inf"))
    return s


def reference(q, k, v, scale: float, causal: bool = True, s=None):
    """FP64 softmax attention of q, k, v (..., T, D): (P (..., T, T), O_ref (..., T, D)). `s`: the scores
    `scores(q, k, scale, causal)` if already computed."""
    if s is None:
        s = scores(q, k, scale, causal)
    p = torch.softmax(s, dim=-1)
    return p, p @ v


def delta_delta(o_lp, o_ref, do):
    """Δδ = rowsum(dO∘(O_lp − O_ref)) over the last axis (float64)."""
    return (do * (o_lp - o_ref)).sum(-1)


def ties(q, k, scale: float, causal: bool = True, tile: int = 64, s=None):
    """(row_tie, tile_tie) bool (..., T): the BF16-rounded FP32 scores' row max occurs ≥ 2 times (anywhere / in one
    key tile of `tile` keys). The FP32 scores are the FP64 ones `scores(q, k, scale, causal)` rounded (`s`: those
    FP64 scores if already computed)."""
    from lib.training.metrics import bf16_row_ties, bf16_tile_ties
    if s is None:
        s = scores(q.to(F64), k.to(F64), scale, causal)
    s = s.float()
    return bf16_row_ties(s), bf16_tile_ties(s, int(tile))


def v_sign(p, v):
    """s = P·sign(V) (..., T, D): +1 where all of a row's attention mass sits on keys with V[:, i] > 0."""
    return p @ torch.sign(v)


def ulp_bf16(x):
    """BF16 ULP of |x| (float64; NaN where x = 0)."""
    _, e = torch.frexp(x.abs())
    u = torch.ldexp(torch.ones_like(x), (e - 8).to(torch.int32))
    return torch.where(x == 0, torch.full_like(x, float("nan")), u)


def error_q(dd, p, k, x, scale: float, pk=None):
    """E_Q^h = α Σ_{rows, T} Δδ[T]·(PK)[T]ᵀ X[T]: dd (b, H, T), p (b, H, T, T), k (b, H, T, D), x (b, T, C) ->
    (H, D, C). `pk`: P·K (b, H, T, D) if already computed."""
    return scale * torch.einsum("bht,bhtd,btc->hdc", dd, p @ k if pk is None else pk, x)


def error_k(dd, p, q, x, scale: float, px=None):
    """E_K^h = α Σ_{rows, T} Δδ[T]·Q[T]ᵀ (PX)[T] -> (H, D, C). `px`: P·X (b, H, T, C) if already computed (the
    costliest product of a layer's replay: compute it once)."""
    return scale * torch.einsum("bht,bhtd,bhtc->hdc", dd, q, p @ x[:, None] if px is None else px)


def true_grad(g, x):
    """dW^h = Σ_{rows, T} g[T]ᵀ X[T] for g (b, H, T, D) (dq or dk), x (b, T, C) -> (H, D, C)."""
    return torch.einsum("bhtd,btc->hdc", g, x)


def reference_grads(p, q, k, v, do, o_ref, scale: float):
    """FP64 dq, dk of attention with probabilities p: dS = P∘(dO·Vᵀ − rowsum(dO∘O_ref)); dq = α dS K,
    dk = α dSᵀ Q."""
    ds = p * (do @ v.transpose(-1, -2) - (do * o_ref).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.transpose(-1, -2) @ q


def term_factors(dd, a, b, scale: float):
    """The rank-1 terms w_T·â_T b̂_Tᵀ of one head, flattened over (rows, T) and restricted to tokens with Δδ ≠ 0:
    dd (n,), a (n, D), b (n, C) -> (w (m,) signed term norms α·Δδ·‖a‖‖b‖, â (m, D), b̂ (m, C), kept index)."""
    na, nb = torch.linalg.norm(a, dim=-1), torch.linalg.norm(b, dim=-1)
    keep = (dd != 0) & (na > 0) & (nb > 0)
    w = scale * dd[keep] * na[keep] * nb[keep]
    return w, a[keep] / na[keep, None], b[keep] / nb[keep, None], torch.nonzero(keep).flatten()


def unit_gram(ah, bh):
    """Ĝ[i, j] = ⟨â_i b̂_iᵀ, â_j b̂_jᵀ⟩_F = (â_i·â_j)(b̂_i·b̂_j): cosines between unit rank-1 terms (m, m)."""
    return (ah @ ah.T) * (bh @ bh.T)


def token_coherence(w, g, n_shuffle: int = 200, seed: int = 0) -> dict:
    """Coherence of the rank-1 terms of one head and step, from signed term norms w (m,) and their unit Gram ĝ.

    rho2 = ‖Σ w_T u_T‖² / Σ w_T² (1 in expectation under shuffled signs; m if the terms are identical and
    same-signed); rho2_null_q99 and p_shuffle from `n_shuffle` fair random sign draws (seeded); cos_unsigned: mean
    pairwise cosine of the unit terms u_T (their similarity, sign of Δδ ignored; random directions: 0 ± 1/√(D·C));
    cos_signed: the same with the sign of Δδ (> 0: the terms add up); frac_pos: share of terms with Δδ > 0.
    (`token_coherence_heads` computes the same for all heads of a layer, from the factors of the terms.)"""
    keep = torch.ones((1, w.numel()), dtype=torch.bool, device=w.device)
    eps = _sign_draws(keep, n_shuffle, [seed])
    quads, null = _quad_forms(w, g, keep[0], eps[0])
    c = _coherence_finish(w[None], keep, quads[None], null[None], n_shuffle)
    c = {n: float(t[0]) for n, t in c.items()}
    c["m"] = int(c["m"])
    return c


def head_term_factors(dd, a, b, scale: float):
    """`term_factors` of all heads at once, with dropped tokens zeroed instead of removed (so that heads keep one
    shape): dd (H, n), a (H, n, D), b (H, n, C), or b (n, C) when every head shares it (X on the E_Q side) ->
    (w (H, n) signed term norms α·Δδ·‖a‖‖b‖, â (H, n, D), b̂ (shape of b), keep (H, n) bool). A dropped token
    (Δδ = 0 or a zero factor) has w = 0 and â = 0, so it adds nothing to any Gram quadratic form."""
    na, nb = torch.linalg.norm(a, dim=-1), torch.linalg.norm(b, dim=-1)
    keep = (dd != 0) & (na > 0) & (nb > 0)
    w = torch.where(keep, scale * dd * na * nb, torch.zeros_like(dd))
    ah = torch.where(keep[..., None], a / na[..., None], torch.zeros_like(a))
    bh = torch.where((nb > 0)[..., None], b / nb[..., None], torch.zeros_like(b))   # no 0/0: NaN·0 is NaN
    return w, ah, bh, keep


def _sign_draws(keep, n_shuffle: int, seeds) -> torch.Tensor:
    """Fair ±1 draws for the kept terms of each head, zero elsewhere: keep (H, n) bool -> (H, n_shuffle, n) float64
    on keep's device. Head h's draws come from torch's CPU generator seeded with seeds[h], shape (n_shuffle, m_h)
    for its m_h kept terms, placed at their columns (the draws of the one-head computation on those m_h terms)."""
    kc = keep.cpu()                                          # one device sync for every head's term count
    eps = torch.zeros((kc.shape[0], n_shuffle, kc.shape[1]), dtype=F64)
    for h in range(kc.shape[0]):
        m = int(kc[h].sum())
        if m >= 2:
            gen = torch.Generator(device="cpu").manual_seed(int(seeds[h]))
            eps[h][:, kc[h]] = (torch.randint(0, 2, (n_shuffle, m), generator=gen) * 2 - 1).to(F64)
    return eps.to(keep.device)


def _quad_forms(w, g, keep, eps):
    """One head's Gram quadratic forms: w (n,) term norms, g (n, n) unit Gram, keep (n,) bool, eps (S, n) sign
    draws -> (uᵀĝu for u = w, keep, sign(w): (3,); the null ρ² numerators (ε|w|)ᵀĝ(ε|w|): (S,)). One pass of ĝ
    for the three observed forms (ĝ is the largest operand: memory-bound on a CPU)."""
    u = torch.stack([w, keep.to(w.dtype), torch.sign(w)], 1)             # (n, 3)
    quads = (u * (g @ u)).sum(0)
    ew = eps * w.abs()
    return quads, ((ew @ g) * ew).sum(1)


def _coherence_finish(w, keep, quads, null, n_shuffle: int) -> dict:
    """The statistics of `token_coherence` from the quadratic forms of H heads: w, keep (H, n), quads (H, 3), null
    (H, S) -> {m, rho2, rho2_null_q99, p_shuffle, cos_unsigned, cos_signed, frac_pos: (H,) float64 tensors}, NaN
    (p_shuffle 1) for heads with fewer than 2 terms."""
    m = keep.to(F64).sum(1)
    ww = (w * w).sum(1)
    rho2 = quads[:, 0] / ww
    pairs = m * (m - 1)
    null = null / ww[:, None]
    out = dict(m=m, rho2=rho2, rho2_null_q99=torch.quantile(null, 0.99, dim=1),
               p_shuffle=(1 + (null >= (rho2 - 1e-12 * rho2.abs())[:, None]).sum(1)).to(F64) / (n_shuffle + 1),
               cos_unsigned=(quads[:, 1] - m) / pairs, cos_signed=(quads[:, 2] - m) / pairs,
               frac_pos=(w > 0).to(F64).sum(1) / m)
    few = m < 2
    nan = torch.full_like(rho2, float("nan"))
    return {n: (t if n == "m" else torch.where(few, torch.ones_like(t) if n == "p_shuffle" else nan, t))
            for n, t in out.items()}


def token_coherence_heads(w, ah, bh, keep, n_shuffle: int = 200, seeds=None) -> dict:
    """`token_coherence` of the H heads of a layer, from `head_term_factors`' w, â, b̂, keep, on the device of w and
    with one host sync for all heads (the sign draws' term counts). seeds[h]: head h's sign-draw seed (default h).

    Head h's unit Gram ĝ_h = (â_h â_hᵀ) ∘ (b̂_h b̂_hᵀ) (`unit_gram`; n × n with zero rows for dropped tokens) is
    built in two reused n × n buffers, one head at a time; a b̂ shared by the heads (n, C) has its Gram computed
    once. Returns {m, rho2, rho2_null_q99, p_shuffle, cos_unsigned, cos_signed, frac_pos: (H,) float64 tensors}."""
    H, n = w.shape
    seeds = list(range(H)) if seeds is None else list(seeds)
    eps = _sign_draws(keep, n_shuffle, seeds)
    shared = bh.dim() == 2
    g = torch.empty((n, n), dtype=w.dtype, device=w.device)
    gb = bh @ bh.T if shared else torch.empty_like(g)
    quads, nulls = [], []
    for h in range(H):
        if not shared:
            torch.mm(bh[h], bh[h].T, out=gb)
        torch.mm(ah[h], ah[h].T, out=g).mul_(gb)
        qf, nl = _quad_forms(w[h], g, keep[h], eps[h])
        quads.append(qf)
        nulls.append(nl)
    return _coherence_finish(w, keep, torch.stack(quads), torch.stack(nulls), n_shuffle)


def term_cos_matrix(w, ah, bh, top: int = 64, baseline: str | None = None, seed: int = 0) -> np.ndarray:
    """Signed cosines sign(w_i)·sign(w_j)·Ĝ[i, j] between the rank-1 terms of the `top` tokens with the largest
    |w| (in token order), as a (top, top) numpy array. baseline="shuffled": fair random signs instead of
    sign(Δδ); baseline="random": Gaussian â, b̂ of the same shapes instead of the real ones."""
    idx = torch.argsort(w.abs(), descending=True)[:top].sort().values
    w, ah, bh = w[idx], ah[idx], bh[idx]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    s = torch.sign(w)
    if baseline == "shuffled":
        s = (torch.randint(0, 2, s.shape, generator=gen) * 2 - 1).to(w)
    elif baseline == "random":
        ah = torch.randn(ah.shape, generator=gen, dtype=F64).to(ah.device)
        bh = torch.randn(bh.shape, generator=gen, dtype=F64).to(bh.device)
        ah, bh = ah / torch.linalg.norm(ah, dim=-1, keepdim=True), bh / torch.linalg.norm(bh, dim=-1, keepdim=True)
    elif baseline is not None:
        raise ValueError(f"baseline must be None, 'shuffled' or 'random', got {baseline!r}")
    return (s[:, None] * unit_gram(ah, bh) * s[None, :]).cpu().numpy()


# ------------------------------------------------------------------------------------------- one layer, one capture
_COUNT_KEYS = ("n_rows", "n_pos", "n_neg", "sum_dd", "sum_abs_dd", "sum_dd2", "sum_abs_delta",
               "n_tie", "n_pos_tie", "n_neg_tie", "sum_dd_tie", "sum_abs_dd_tie",
               "n_pos_notie", "n_neg_notie", "sum_dd_notie", "sum_abs_dd_notie", "n_tiletie",
               "n_el_agree", "n_el_disagree",
               "n_os", "n_os_agree", "n_os_disagree", "sum_os_err", "sum_os_abs", "sum_os_ulp",
               "n_os_tie", "n_os_agree_tie", "n_os_disagree_tie", "sum_os_ulp_tie",
               "n_mix_agree", "n_mix_disagree", "sum_mix_ulp", "n_mix")


def _host(d: dict) -> dict:
    """{name: tensor of one shape (H,)} -> {name: float64 numpy (H,)}, in one device-to-host copy (a copy per
    statistic would wait for the device once per statistic)."""
    if not d:
        return {}
    a = torch.stack([t.to(F64) for t in d.values()]).cpu().numpy()
    return dict(zip(d, a))


def _delta_counts_t(dd, tie, tile_tie, delta_ref=None) -> dict:
    """`delta_counts` as (H,) tensors on the device of dd."""
    r = lambda t: t.sum(dim=(0, 2))  # noqa: E731
    pos, neg = (dd > 0).double(), (dd < 0).double()
    tie_d, no = tie.double(), (~tie).double()
    out = dict(n_rows=r(torch.ones_like(dd)), n_pos=r(pos), n_neg=r(neg), sum_dd=r(dd), sum_abs_dd=r(dd.abs()),
               sum_dd2=r(dd * dd), n_tie=r(tie_d), n_pos_tie=r(pos * tie_d), n_neg_tie=r(neg * tie_d),
               sum_dd_tie=r(dd * tie_d), sum_abs_dd_tie=r(dd.abs() * tie_d), n_pos_notie=r(pos * no),
               n_neg_notie=r(neg * no), sum_dd_notie=r(dd * no), sum_abs_dd_notie=r(dd.abs() * no),
               n_tiletie=r(tile_tie.double()))
    if delta_ref is not None:
        out["sum_abs_delta"] = r(delta_ref.abs())
    return out


def delta_counts(dd, tie, tile_tie, delta_ref=None) -> dict:
    """Per-head counts and sums of Δδ (b, H, T), overall and split by row ties: {name: (H,) float64 numpy}."""
    return _host(_delta_counts_t(dd, tie, tile_tie, delta_ref))


def _o_error_counts_t(err, do, s, o_ref, tie, one_signed: float = ONE_SIGNED) -> dict:
    """`o_error_counts` as (H,) tensors on the device of err."""
    r = lambda t: t.sum(dim=(0, 2, 3))  # noqa: E731
    prod = do * err
    ulp = ulp_bf16(o_ref)
    e_ulp = torch.where(torch.isfinite(ulp), err / ulp, torch.zeros_like(err))
    os_ = (s.abs() >= one_signed).double()
    mix = 1.0 - os_
    sg = torch.sign(s)
    agree = ((torch.sign(err) * sg) > 0).double()
    disagree = ((torch.sign(err) * sg) < 0).double()
    t4 = tie[..., None].double()
    return dict(n_el_agree=r((prod > 0).double()), n_el_disagree=r((prod < 0).double()),
                n_os=r(os_), n_os_agree=r(agree * os_), n_os_disagree=r(disagree * os_),
                sum_os_err=r(err * sg * os_), sum_os_abs=r(err.abs() * os_), sum_os_ulp=r(e_ulp * sg * os_),
                n_os_tie=r(os_ * t4), n_os_agree_tie=r(agree * os_ * t4), n_os_disagree_tie=r(disagree * os_ * t4),
                sum_os_ulp_tie=r(e_ulp * sg * os_ * t4),
                n_mix=r(mix), n_mix_agree=r(agree * mix), n_mix_disagree=r(disagree * mix),
                sum_mix_ulp=r(e_ulp * sg * mix))


def o_error_counts(err, do, s, o_ref, tie, one_signed: float = ONE_SIGNED) -> dict:
    """L3/L4 counts per head from ΔO, dO, s = P·sign(V), O_ref (b, H, T, D) and row ties (b, H, T): {name: (H,)
    float64 numpy}."""
    return _host(_o_error_counts_t(err, do, s, o_ref, tie, one_signed))


def _cos_heads(a, b):
    """`frob_cos` of each head's pair: a, b (H, D, C) -> (H,) (NaN where either is zero)."""
    na, nb = torch.linalg.norm(a, dim=(1, 2)), torch.linalg.norm(b, dim=(1, 2))
    ok = (na > 0) & (nb > 0)
    return torch.where(ok, (a * b).sum((1, 2)) / (na * nb), torch.full_like(na, float("nan")))


def _svd_stats(E: dict) -> dict:
    """σ₁, stable rank (E and its shuffled-sign baseline) of every head: E {"q", "k", "q_shuf", "k_shuf": (H, D, C)
    float64 CPU tensors} -> {name: (H,) numpy}. One batched SVD of the host copy of E (made anyway, for the
    result): on a GPU, a batch of 64 × 384 SVDs runs as a loop of small iterative solver calls."""
    sides = ("q", "q_shuf", "k", "k_shuf")
    sv = torch.linalg.svdvals(torch.stack([E[n] for n in sides]))        # (4, H, min(D, C))
    sv = dict(zip(sides, sv))
    out = {}
    for side in ("q", "k"):
        a, b = sv[side], sv[f"{side}_shuf"]
        out[f"e{side}_sigma1"] = a[:, 0].numpy()
        out[f"e{side}_srank"] = ((a ** 2).sum(1) / a[:, 0] ** 2).numpy()
        out[f"e{side}_shuf_srank"] = ((b ** 2).sum(1) / b[:, 0] ** 2).numpy()
    return out


def _heads_first(t, H: int):
    """(b, H, T, …) -> (H, b·T, …): the tokens of every captured row, per head (the order `term_factors` sees)."""
    return t.transpose(0, 1).reshape(H, -1, *t.shape[3:])


def layer_stats(arr: dict, scale: float, *, causal: bool = True, tile: int = 64, one_signed: float = ONE_SIGNED,
                n_shuffle: int = 200, seed: int = 0, device=None, o_lp=None, keep_matrices: bool = True) -> dict:
    """Every per-head statistic of one layer of one capture.

    arr: decoded arrays of the layer (`lib.training.capture.Capture.layer`): q, k, v, o, do (b, H, T, D), x
    (b, T, C), optional dq, dk (b, H, T, D), wq_u/wq_s/wq_v, wk_*, adam_q, adam_k. `o_lp` replaces the captured O
    (a replay under other numerics). Returns {"stats": {name: (H,) numpy}, "E": {"q", "k", "q_shuf", "k_shuf":
    (H, D, C) float64 CPU tensors} (if keep_matrices)}.

    Everything per head is computed for all heads at once on `device`, and the statistics come back to the host in
    a few copies per layer (a per-head loop with a host copy per statistic left a GPU idle and the worker bound by
    its CPU)."""
    dev = device if device is not None else "cpu"
    q, k, v, do = (_t(arr[n], dev) for n in ("q", "k", "v", "do"))
    o = _t(arr["o"] if o_lp is None else o_lp, dev)
    x = _t(arr["x"], dev)
    H = q.shape[1]
    s = scores(q, k, scale, causal)                 # once for the reference and the tie test
    p, o_ref = reference(q, k, v, scale, causal, s=s)
    tie, tile_tie = ties(q, k, scale, causal, tile, s=s)
    del s
    err = o - o_ref
    dd = delta_delta(o, o_ref, do)
    td = _delta_counts_t(dd, tie, tile_tie, delta_ref=(do * o_ref).sum(-1))
    td.update(_o_error_counts_t(err, do, v_sign(p, v), o_ref, tie, one_signed))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shuf = (torch.randint(0, 2, dd.shape, generator=gen) * 2 - 1).to(dd)
    px = p @ x[:, None]                                    # (b, H, T, C): E_K's and its terms' factor, once
    pk = p @ k
    E = {"q": error_q(dd, p, k, x, scale, pk=pk), "k": error_k(dd, p, q, x, scale, px=px),
         "q_shuf": error_q(dd * shuf, p, k, x, scale, pk=pk), "k_shuf": error_k(dd * shuf, p, q, x, scale, px=px)}
    need_ref = any(f"d{side}" in arr for side in ("q", "k"))
    dq_ref, dk_ref = reference_grads(p, q, k, v, do, o_ref, scale) if need_ref else (None, None)
    for side in ("q", "k"):
        e, es = E[side], E[f"{side}_shuf"]
        td[f"e{side}_fro"] = torch.linalg.norm(e, dim=(1, 2))
        td[f"e{side}_shuf_fro"] = torch.linalg.norm(es, dim=(1, 2))
        if f"d{side}" in arr:
            g = true_grad(_t(arr[f"d{side}"], dev), x)
            gref = true_grad(dq_ref if side == "q" else dk_ref, x)
            tot = gref - g                                 # the whole gradient error (hp − lp) of these rows
            td[f"g{side}_fro"] = torch.linalg.norm(g, dim=(1, 2))
            td[f"e{side}_cos_grad"] = _cos_heads(e, g)
            td[f"tot{side}_fro"] = torch.linalg.norm(tot, dim=(1, 2))
            td[f"e{side}_cos_tot"] = _cos_heads(e, tot)
        w_ = f"w{side}"
        if f"{w_}_u" in arr:
            u, sig, vv = (_t(arr[f"{w_}_{n}"], dev) for n in ("u", "s", "v"))
            td[f"{w_}_sigma1"] = sig
            td[f"push_sgd_{side}"] = torch.einsum("hd,hdc,hc->h", u, e, vv)
            td[f"push_sgd_{side}_shuf"] = torch.einsum("hd,hdc,hc->h", u, es, vv)
            if f"adam_{side}" in arr:
                den = _t(arr[f"adam_{side}"], dev)
                td[f"push_adam_{side}"] = torch.einsum("hd,hdc,hc->h", u, e / den, vv)
                td[f"push_adam_{side}_shuf"] = torch.einsum("hd,hdc,hc->h", u, es / den, vv)
        # token coherence of the rank-1 terms (E_Q: (PK)[T]ᵀX[T], X shared by the heads; E_K: Q[T]ᵀ(PX)[T])
        a_all, b_all = (pk, x.reshape(-1, x.shape[-1])) if side == "q" else (q, _heads_first(px, H))
        w, ah, bh, keep = head_term_factors(_heads_first(dd, H), _heads_first(a_all, H), b_all, scale)
        c = token_coherence_heads(w, ah, bh, keep, n_shuffle, [seed + 1 + h for h in range(H)])
        del w, ah, bh
        for n in ("m", "rho2", "rho2_null_q99", "p_shuffle", "cos_unsigned", "cos_signed"):
            td[f"tok{side}_{n}"] = c[n]
    st = _host(td)
    E = {n: t.cpu() for n, t in E.items()}
    st.update(_svd_stats(E))
    out = {"stats": st}
    if keep_matrices:
        out["E"] = E
    return out


def capture_stats(cap, *, tile: int = 64, one_signed: float = ONE_SIGNED, n_shuffle: int = 200, seed: int = 0,
                  device=None, keep_matrices: bool = True) -> dict:
    """`layer_stats` of every layer of a `Capture`: {"step", "lr", "layers", "stats": {name: (L, H)},
    "E": {side: (L, H, D, C) float32 numpy}}."""
    per = [layer_stats(cap.layer(l), cap.meta["scale"], tile=tile, one_signed=one_signed, n_shuffle=n_shuffle,
                       seed=seed + 1000 * l, device=device, keep_matrices=keep_matrices) for l in cap.layers]
    names = sorted(set().union(*[p["stats"] for p in per]))
    H = len(cap.heads)
    stats = {n: np.stack([p["stats"].get(n, np.full(H, np.nan)) for p in per]) for n in names}
    out = {"step": cap.meta["step"], "lr": cap.meta["lr"], "layers": cap.layers, "stats": stats}
    if keep_matrices:
        out["E"] = {s: np.stack([p["E"][s].float().numpy() for p in per]) for s in per[0]["E"]}
    return out


# ------------------------------------------------------------------------------ replay under any Numerics
def replay_o(q, k, v, spec: str, *, block_m: int = 64, block_n: int = 64, scale=None, causal: bool = True):
    """O of the emulator (`lib.fp.reference.emulate_forward`) for attention spec `spec` (a `lib.training.model`
    kernel spec such as "paper", "fa2", "fp32", "paper+fix", "paper/<Numerics field>=<value>"; the Numerics value
    is passed through whole, so fields such as a rounding-block size act once the emulator reads them) on q, k, v
    (b, H, T, D) float32. Returns float32 numpy (b, H, T, D)."""
    from lib.fp.reference import emulate_forward
    from lib.training.spec import AttnSpec
    sp = AttnSpec.parse(spec)
    if sp.backend != "ours":
        raise ValueError(f"replay needs one of our kernel's specs (a Numerics), got {spec!r}")
    return emulate_forward(np.asarray(q, np.float32), np.asarray(k, np.float32), np.asarray(v, np.float32),
                           sp.numerics, causal=causal, scale=scale, block_m=block_m, block_n=block_n,
                           **sp.fix.kernel_args()).o


def variant_stats(arr: dict, scale: float, spec: str, *, block_n: int = 64, tile: int = 64, causal: bool = True,
                  one_signed: float = ONE_SIGNED) -> dict:
    """Δδ and O-error counts per head when the captured q, k, v, dO are replayed under `spec` (see `replay_o`),
    plus "o_match": the fraction of O elements equal to the captured O (1.0 when the replay reproduces training's
    own numerics bit for bit)."""
    o = replay_o(arr["q"], arr["k"], arr["v"], spec, block_n=block_n, scale=scale, causal=causal)
    q, k, v, do = (_t(arr[n]) for n in ("q", "k", "v", "do"))
    o_t = _t(o)
    s = scores(q, k, scale, causal)
    p, o_ref = reference(q, k, v, scale, causal, s=s)
    dd = delta_delta(o_t, o_ref, do)
    tie, tile_tie = ties(q, k, scale, causal, tile, s=s)
    st = delta_counts(dd, tie, tile_tie, delta_ref=(do * o_ref).sum(-1))
    st.update(o_error_counts(o_t - o_ref, do, v_sign(p, v), o_ref, tie, one_signed))
    st["o_match"] = (o == np.asarray(arr["o"], np.float32)).mean(axis=(0, 2, 3)).astype(np.float64)
    return st


# ------------------------------------------------------------------------------------- across steps, per head
def step_matrix_stats(E_steps: np.ndarray, n_flip: int = 2000, seed: int = 0) -> dict:
    """E at successive steps of one head, (N, D, C): cosine matrix (N, N), coherence across steps (`coherence`),
    and the stable rank and Frobenius norm of the cumulative error Σ E."""
    e = torch.as_tensor(np.asarray(E_steps)).to(F64)
    ok = torch.isfinite(e).flatten(1).all(1) & (torch.linalg.norm(e.flatten(1), dim=1) > 0)
    e = e[ok]
    n = e.shape[0]
    if n == 0:
        return dict(cos=np.zeros((0, 0)), rho2=float("nan"), p_flip=1.0, null_q99=float("nan"),
                    cum_srank=float("nan"), cum_fro=float("nan"), n=0)
    f = e.flatten(1)
    f = f / torch.linalg.norm(f, dim=1, keepdim=True)
    coh = coherence(list(e), n_flip=n_flip, seed=seed)
    cum = e.sum(0)
    return dict(cos=(f @ f.T).numpy(), rho2=coh["rho2"], p_flip=coh["p_flip"], null_q99=coh["null_q99"],
                cum_srank=stable_rank(cum), cum_fro=float(torch.linalg.norm(cum)), n=n)
