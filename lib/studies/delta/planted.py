"""Planted attention layers with a known answer for ΔO, Δδ and E — the tests (and chapter 4's demonstration) of
every statistic in `lib.studies.delta.stats`.

`planted(kind)` builds one layer's capture-shaped arrays: n problems (the batch axis, one head each), T query rows,
head dim D, width C, causal attention with scale α = 1/√D = 1/4 (D = 16), and q_t = 4·e₀ for every row, so
S[t, j] = k_j[0]:

* kind="ties": keys 0 and 1 are k = 2·e₀ (S = 2: two exactly tied maxima, P̄ = 1 for both), every other key scores
  S = 2 − `gap` (P̄ = e^(−gap): a tiny same-sign remainder that sets the sticky bit). V[t, i] is a uniformly drawn
  BF16 value in [−2, −1) (one-signed, negative) for every key and feature. Chapter 1's theory
  (`lib.fp.theory.expected_error_ulps`) then predicts, for each row t ≥ 2 and feature, a mean error of O of
  −(1/(2k) − ρ/k) ULP with k = 2 (ρ: the remainder in units of the tied terms' ULP): the sign of V. Row 0 sees one
  key (exact), row 1 two tied keys without remainder (mean error 0).
* kind="no_ties": key 0 alone is the maximum (S = 0) and the other keys score S = −U(`NO_TIE_GAPS`) (distinct):
  no P̄ but one equals 1, so by the paper's Remark 1 the rounding has no bias; the prediction is 0.

dO = −`do_scale` in every feature (the sign of the O error), so Δδ = rowsum(dO∘ΔO) > 0 is predicted with
mean `do_scale`·D·|mean error|·ULP(O) (ULP(O) = 2⁻⁷ here: O ∈ [−2, −1)). X[t] = ξ for every token and W_Q's top
singular pair is planted as (e₀, ξ/‖ξ‖), so E_Q = α·ΣΔδ·(PK)ᵀξ ≈ α·ΣΔδ·2·e₀ξᵀ is rank 1 with u₁ᵀE_Qv₁ =
2α·ΣΔδ·‖ξ‖ > 0 (it raises ‖W_Q‖₂), and E_K = α·ΣΔδ·4·e₀ξᵀ likewise. `random_terms` plants the null of the rank-1
analysis: Gaussian q, k, x and Δδ of random sign, so no structure is shared between tokens.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from lib.fp.bf16 import round_rne

__all__ = ["planted", "random_terms", "NO_TIE_GAPS"]

NO_TIE_GAPS = (0.5, 6.0)   # kind="no_ties": the other keys score this many logits below the single maximum


def planted(kind: str = "ties", *, n: int = 64, T: int = 32, D: int = 16, C: int = 8, gap: float = 14.0,
            do_scale: float = 0.01, spec: str = "paper", block_n: int = 64, seed: int = 0) -> dict:
    """Planted layer arrays and predictions. Returns {"arr": {q, k, v, o, do, x, wq_u, wq_s, wq_v, wk_u, wk_s,
    wk_v}, "scale": α, "kind", "pred": {"os_mean_ulp" (mean error of O along sign(V), in ULPs, over every (row,
    feature)), "dd_mean" (mean Δδ over rows), and for ties "frac_dd_pos_min" (lower bound of the share of rows t ≥ 2
    with Δδ > 0: 1 − 2^−D), "os_frac_agree" (share of non-zero O errors with the sign of V), "pk0" ((PK)[t]·e₀ ≈ 2)
    and "xi_norm" (‖ξ‖), so that u₁ᵀE_Qv₁ = α·ΣΔδ·pk0·xi_norm}}. `spec`: the attention numerics that produce O
    (`lib.studies.delta.stats.replay_o`)."""
    if kind not in ("ties", "no_ties"):
        raise ValueError(f"kind must be 'ties' or 'no_ties', got {kind!r}")
    if D != 16:
        raise ValueError("the planted scores assume D = 16 (α = 1/4, S = k[0])")
    from lib.studies.delta.stats import replay_o
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(D)
    q = np.zeros((n, 1, T, D), np.float32)
    q[..., 0] = 4.0
    k = np.zeros((n, 1, T, D), np.float32)
    if kind == "ties":
        k[:, 0, :2, 0] = 2.0
        k[:, 0, 2:, 0] = 2.0 - gap
    else:
        k[:, 0, 0, 0] = 0.0
        for b in range(n):   # distinct BF16 scores below the unique maximum
            vals = np.unique(round_rne(-rng.uniform(*NO_TIE_GAPS, size=4 * T).astype(np.float32)))
            k[b, 0, 1:, 0] = rng.permutation(vals)[:T - 1]
    v = -(1.0 + rng.integers(0, 128, size=(n, 1, T, D)) / 128.0).astype(np.float32)   # BF16 grid in [−2, −1)
    o = replay_o(q, k, v, spec, block_n=block_n, scale=scale)
    do = np.full((n, 1, T, D), -do_scale, np.float32)
    xi = np.linspace(1.0, 2.0, C).astype(np.float32)
    x = np.broadcast_to(xi, (n, T, C)).copy()
    e0 = np.zeros(D, np.float32)
    e0[0] = 1.0
    arr = dict(q=q, k=k, v=v, o=o, do=do, x=x,
               wq_u=e0[None], wq_s=np.ones(1, np.float32), wq_v=(xi / np.linalg.norm(xi))[None],
               wk_u=e0[None], wk_s=np.ones(1, np.float32), wk_v=(xi / np.linalg.norm(xi))[None])
    pred = {}
    if kind == "ties":
        from lib.fp.theory import expected_error_ulps
        q_ulp = 2.0 ** -7                    # ULP of the tied terms (V ∈ [1, 2) in magnitude)
        p_rest = float(round_rne(np.array([np.exp(-gap)], np.float32))[0])
        # mean remainder of the rows t ≥ 2 in units of q: Σ_{j=2..t} P̄·|V|, |V| averaging 1.5 - 1/256
        rho = np.mean([(t - 1) * p_rest * (1.5 - 1 / 256) / q_ulp for t in range(2, T)])
        per = float(expected_error_ulps(2, Fraction(float(rho))))
        pred["os_mean_ulp"] = per * (T - 2) / T            # rows 0 (exact) and 1 (no remainder: mean 0) dilute it
        pred["dd_mean"] = do_scale * D * per * 2.0 ** -7 * (T - 2) / T
        pred["frac_dd_pos_min"] = 1.0 - 2.0 ** -D
        # share of non-zero O errors with the sign of V: rows t ≥ 2 agree on every tie case (probability p) and by
        # chance otherwise; row 1 errs only on its tie cases, which round to even (half agree); row 0 is exact
        from lib.fp.theory import tie_probability
        p = float(tie_probability(2))
        pred["os_frac_agree"] = ((T - 2) * (p + (1 - p) / 2) + p / 2) / ((T - 2) + p)
        pred["pk0"] = 2.0                                    # (PK)[t] ≈ 2·e₀
        pred["xi_norm"] = float(np.linalg.norm(xi))
    else:
        pred["os_mean_ulp"] = 0.0
        pred["dd_mean"] = 0.0
    return {"arr": arr, "scale": float(scale), "pred": pred, "kind": kind}


def random_terms(*, n: int = 8, H: int = 2, T: int = 32, D: int = 16, C: int = 24, seed: int = 0) -> dict:
    """The null of the rank-1 analysis: Gaussian q, k, v, x, O = O_ref + Gaussian noise and dO Gaussian, so Δδ has
    random sign and the terms (PK)[T]ᵀX[T] share no direction beyond chance. Arrays as `planted` (b = n, H heads)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, H, T, D)).astype(np.float32) for _ in range(3))
    x = rng.standard_normal((n, T, C)).astype(np.float32)
    from lib.fp.reference import attention_fp64
    o_ref = attention_fp64(q, k, v, causal=True, scale=1.0 / np.sqrt(D))["o"]
    o = (o_ref + 1e-3 * rng.standard_normal(o_ref.shape)).astype(np.float32)
    do = rng.standard_normal((n, H, T, D)).astype(np.float32)
    return {"arr": dict(q=q, k=k, v=v, o=o, do=do, x=x), "scale": float(1.0 / np.sqrt(D))}
