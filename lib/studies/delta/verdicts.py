"""The δ-channel verdicts (chapters 4, 5): the rules fixed before any full-scale data existed, a run's per-seed
summary of its captured steps (`run_summary`), and the claims a `delta_capture` result supports (`claims`).

Statistics from `lib.stats`; per-step quantities from `lib.studies.delta.stats`.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from lib.stats import drift, sign_test
from lib.studies.delta.stats import _COUNT_KEYS, ALPHA, step_matrix_stats

__all__ = ["VERDICT_RULES", "PUSH_SHARE", "SEED_RULE", "run_summary", "claims", "claims_from_summaries"]

# The verdict rules, fixed before any full-scale data existed. "Per head" tests are Bonferroni-corrected over all
# heads of all layers of a seed (α / (L·H)); a seed supports a claim when at least one head passes and more heads
# pass in the claimed direction than in the opposite one; "reproduced" needs ≥ 3 seeds and support in ≥ 2/3 of them,
# "partly" support in at least one seed (or, for wq_norm_push, the sign without the size), "not reproduced" none.
VERDICT_RULES = {
    "o_error_v_sign": "L3: per head, the per-step mean ULP error of O along sign(V) in one-signed features "
                      "(|Σ P·sign V| ≥ 0.9) is positive at more steps than chance (exact sign test across steps, "
                      "one-sided p < 0.01 / heads)",
    "delta_bias": "L4: per head, the per-step sum of Δδ over the captured rows is positive at more steps than "
                  "chance (exact sign test across steps, one-sided p < 0.01 / heads) and the pooled normalised "
                  "bias mean(Δδ)/mean|Δδ| is > 0",
    "low_rank": "L5–L6: per head, E_Q accumulates across steps (ρ² = ‖Σ_t E_t‖²/Σ‖E_t‖² beyond the sign-flip "
                "null, p < 0.01 / heads) and within more than half of the steps its rank-1 token terms add up "
                "beyond shuffled signs (token ρ² above the null's 99th percentile)",
    "wq_norm_push": "L7: per head, the Adam-scaled error's component along W_Q's top singular pair, "
                    "u₁ᵀ(E ⊘ (√v̂+ε))v₁, is positive (raises ‖W_Q^h‖₂) at more steps than chance (one-sided "
                    "p < 0.01 / heads); full support also needs its extrapolated sum over the run to be ≥ 10% of "
                    "the head's measured σ₁ growth",
}
PUSH_SHARE = 0.10
SEED_RULE = ("a seed supports a claim when at least one head passes in the claimed direction and more heads pass in "
             "it than against it; 'reproduced' needs at least 3 seeds with support in at least two thirds of them, "
             "'partly' support in at least one seed, 'not reproduced' none")


def _seed_support(n_plus: int, n_minus: int) -> bool:
    return n_plus >= 1 and n_plus > n_minus


def _status(support: list[bool], partial: list[bool] | None = None) -> str:
    n = len(support)
    if n == 0:
        return "not yet tested"
    k = sum(support)
    if n >= 3 and k >= math.ceil(2 * n / 3):
        return "reproduced"
    if k >= 1 or (partial is not None and any(partial)):
        return "partly"
    return "not reproduced"


def run_summary(per_step: dict, E_steps: dict | None = None, n_flip: int = 2000, seed: int = 0) -> dict:
    """Per-head tests of one seed from its per-step statistics.

    per_step: {name: (N, L, H)} stacked `capture_stats` (NaN rows for steps not captured), plus "step" (N,) and
    optionally "push_scale" (N,) = lr·clip factor·(capture_every)·(B/b) to extrapolate pushes to the whole run and
    batch, and "wq_growth" (L, H) = measured σ₁(W_Q^h) growth over the run. E_steps: {"q": (N, L, H, D, C), …}.
    Returns {name: (L, H) numpy} of test results and step-matrix statistics."""
    with warnings.catch_warnings():   # all-NaN heads (a statistic a caller did not compute) give NaN, silently
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run_summary(per_step, E_steps, n_flip, seed)


def _run_summary(per_step, E_steps, n_flip, seed) -> dict:
    """The body of `run_summary`."""
    ok = np.isfinite(np.asarray(per_step["n_rows"], dtype=np.float64)[:, 0, 0])
    g = {k: np.asarray(v, dtype=np.float64)[ok] for k, v in per_step.items()
         if isinstance(v, np.ndarray) and v.ndim == 3}
    N, L, H = g["n_rows"].shape
    for name in _COUNT_KEYS + ("tokq_rho2", "tokq_rho2_null_q99", "tokq_cos_unsigned", "tokq_cos_signed",
                               "tokk_rho2", "tokk_rho2_null_q99", "eq_srank", "eq_shuf_srank"):
        g.setdefault(name, np.full((N, L, H), np.nan))   # statistics a caller did not compute read as NaN
    out = {}
    z = np.zeros((L, H))
    # L4: Δδ per step (sum over rows), and pooled rows
    out["dd_step_pos"], out["dd_step_n"] = z.copy(), z.copy()
    out["dd_step_p_greater"], out["dd_step_p_less"] = z.copy(), z.copy()
    out["dd_drift_z"], out["dd_drift_p"] = z.copy(), z.copy()
    out["os_step_p_greater"], out["os_step_p_less"] = z.copy(), z.copy()
    out["push_p_greater"], out["push_p_less"] = z.copy(), z.copy()
    for l in range(L):
        for h in range(H):
            inc = g["sum_dd"][:, l, h]
            t = sign_test(inc)
            out["dd_step_pos"][l, h], out["dd_step_n"][l, h] = t["n_pos"], t["n"]
            out["dd_step_p_greater"][l, h], out["dd_step_p_less"][l, h] = t["p_greater"], t["p_less"]
            d = drift(inc, n_flip=n_flip, seed=seed + 7 * (l * H + h))
            out["dd_drift_z"][l, h], out["dd_drift_p"][l, h] = d["z"], d["p_flip"]
            with np.errstate(invalid="ignore", divide="ignore"):
                os_mean = g["sum_os_ulp"][:, l, h] / g["n_os"][:, l, h]
            t = sign_test(os_mean)
            out["os_step_p_greater"][l, h], out["os_step_p_less"][l, h] = t["p_greater"], t["p_less"]
            if "push_adam_q" in g:
                t = sign_test(g["push_adam_q"][:, l, h])
                out["push_p_greater"][l, h], out["push_p_less"][l, h] = t["p_greater"], t["p_less"]
            else:
                out["push_p_greater"][l, h] = out["push_p_less"][l, h] = np.nan
    tot = lambda n: g[n].sum(0)  # noqa: E731
    out["rows_pos"], out["rows_neg"] = tot("n_pos"), tot("n_neg")
    with np.errstate(invalid="ignore", divide="ignore"):
        out["rows_frac_pos"] = out["rows_pos"] / (out["rows_pos"] + out["rows_neg"])
        out["norm_bias"] = tot("sum_dd") / tot("sum_abs_dd")
        out["norm_bias_tie"] = tot("sum_dd_tie") / tot("sum_abs_dd_tie")
        out["norm_bias_notie"] = tot("sum_dd_notie") / tot("sum_abs_dd_notie")
        out["tie_frac"] = tot("n_tie") / tot("n_rows")
        out["rel_dd"] = tot("sum_abs_dd") / tot("sum_abs_delta")
        out["os_frac_agree"] = tot("n_os_agree") / (tot("n_os_agree") + tot("n_os_disagree"))
        out["os_mean_ulp"] = tot("sum_os_ulp") / tot("n_os")
        out["mix_mean_ulp"] = tot("sum_mix_ulp") / tot("n_mix")
        out["el_frac_agree"] = tot("n_el_agree") / (tot("n_el_agree") + tot("n_el_disagree"))
        out["tokq_rho2_med"] = np.nanmedian(g["tokq_rho2"], 0)
        out["tokq_frac_beyond"] = np.mean(g["tokq_rho2"] > g["tokq_rho2_null_q99"], 0)
        out["tokq_cos_unsigned"] = np.nanmean(g["tokq_cos_unsigned"], 0)
        out["tokq_cos_signed"] = np.nanmean(g["tokq_cos_signed"], 0)
        out["tokk_rho2_med"] = np.nanmedian(g["tokk_rho2"], 0)
        out["tokk_frac_beyond"] = np.mean(g["tokk_rho2"] > g["tokk_rho2_null_q99"], 0)
        out["eq_srank_med"] = np.nanmedian(g["eq_srank"], 0)
        out["eq_shuf_srank_med"] = np.nanmedian(g["eq_shuf_srank"], 0)
        if "eq_cos_grad" in g:
            out["eq_cos_grad_med"] = np.nanmedian(g["eq_cos_grad"], 0)
            out["eq_ratio_med"] = np.nanmedian(g["eq_fro"] / g["gq_fro"], 0)
            out["eq_share_tot_med"] = np.nanmedian(g["eq_fro"] / g["totq_fro"], 0)
            out["eq_cos_tot_med"] = np.nanmedian(g["eq_cos_tot"], 0)
    if "push_adam_q" in g and "push_scale" in per_step:
        sc = np.asarray(per_step["push_scale"], dtype=np.float64)[ok]
        out["push_adam_total"] = np.einsum("n,nlh->lh", sc, g["push_adam_q"])
        out["push_sgd_total"] = np.einsum("n,nlh->lh", sc, g["push_sgd_q"])
    if "wq_growth" in per_step:
        out["wq_growth"] = np.asarray(per_step["wq_growth"], dtype=np.float64)
    if E_steps is not None:
        out.update(_step_matrices(E_steps, ok, n_flip, seed, L, H))
    return out


def _step_matrices(E_steps: dict, ok, n_flip: int, seed: int, L: int, H: int) -> dict:
    """`step_matrix_stats` of every head and side: E_steps {side: (N, L, H, D, C)}, ok (N,) the captured steps ->
    {f"steps_{side}_{rho2, p, null_q99, cum_srank}": (L, H), f"steps_{side}_cos": (L, H, N', N')}. Heads outside,
    sides inside: the sides of one head share its seed, so `coherence` draws its signs once per head (cached)."""
    every = bool(np.all(ok))       # the usual case: no copy of the (N, L, H, D, C) stacks
    e = {side: np.asarray(a) if every else np.asarray(a)[ok] for side, a in E_steps.items()}
    out = {}
    for side, a in e.items():
        for n in ("rho2", "p", "null_q99", "cum_srank"):
            out[f"steps_{side}_{n}"] = np.zeros((L, H))
        out[f"steps_{side}_cos"] = np.zeros((L, H, a.shape[0], a.shape[0]))
    for l in range(L):
        for h in range(H):
            for side, a in e.items():
                s = step_matrix_stats(a[:, l, h], n_flip=n_flip, seed=seed + 11 * (l * H + h))
                for n, k in (("rho2", "rho2"), ("p", "p_flip"), ("null_q99", "null_q99"), ("cum_srank", "cum_srank")):
                    out[f"steps_{side}_{n}"][l, h] = s[k]
                out[f"steps_{side}_cos"][l, h] = s["cos"] if s["n"] == a.shape[0] else np.nan
    return out


def claims(result, ci_as_untested: bool = True) -> dict:
    """Verdicts of a `delta_capture` result (anything with .data and .arrays, e.g. `lib.book.results.load(...)`):
    {claim: {"status", "evidence"}} by `VERDICT_RULES`, recomputed from its per-seed test arrays ("sum__*").
    A ci-scale result (a tiny model for a few steps) tests the code path, not the claim: with `ci_as_untested` its
    status is "not yet tested" and the evidence says what the rules gave."""
    data, arrays = result.data, result.arrays
    names = [k[len("sum__"):] for k in arrays if k.startswith("sum__")]
    n_seeds = len(data.get("runs", []))
    summaries = [{n: np.asarray(arrays[f"sum__{n}"][i]) for n in names} for i in range(n_seeds)] if names else []
    out = claims_from_summaries(summaries, data.get("context", {}))
    if ci_as_untested and (data.get("scale") or getattr(result, "scale", None)) == "ci":
        out = {c: dict(status="not yet tested", evidence=f"ci scale only (a tiny model: the code path, not the "
                                                         f"claim); the rules gave '{v['status']}': {v['evidence']}")
               for c, v in out.items()}
    return out


def claims_from_summaries(summaries: list[dict], context: dict) -> dict:
    """Verdicts on o_error_v_sign (L3), delta_bias (L4), low_rank (L5–L6) and wq_norm_push (L7) from the
    per-seed `run_summary` outputs, by `VERDICT_RULES`. context: {"regime": str (arm, LR, shape, batch), "tile":
    str (compute / rounding tile), "seeds": [...], "horizon": str (steps and captures)} for the evidence lines.
    Returns {claim: {"status", "evidence"}}; "not yet tested" when there is no seed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _claims(summaries, context)


def _claims(summaries: list[dict], context: dict) -> dict:
    """The body of `claims_from_summaries`."""
    where = f"{context.get('regime', '?')}; {context.get('tile', '?')}; seeds " \
            f"{', '.join(map(str, context.get('seeds', [])))}; {context.get('horizon', '?')}"
    if not summaries:
        return {c: dict(status="not yet tested", evidence=f"no data ({where})") for c in VERDICT_RULES}
    out = {}
    nh = lambda s: s["dd_step_p_greater"].size  # noqa: E731
    # L3
    sup, words = [], []
    for s in summaries:
        thr = ALPHA / nh(s)
        plus, minus = int((s["os_step_p_greater"] < thr).sum()), int((s["os_step_p_less"] < thr).sum())
        sup.append(_seed_support(plus, minus))
        words.append(f"{plus}+/{minus}− of {nh(s)}")
    agree = [float(np.nanmean(s["os_frac_agree"])) for s in summaries]
    ulp = [float(np.nanmean(s["os_mean_ulp"])) for s in summaries]
    out["o_error_v_sign"] = dict(status=_status(sup), evidence=(
        f"heads whose O error follows sign(V) in one-signed features, per seed: {'; '.join(words)}; mean share "
        f"agreeing {', '.join(f'{a:.3f}' for a in agree)} (0.5 = no effect); mean error along sign(V) "
        f"{', '.join(f'{u:+.3f}' for u in ulp)} ULP ({where})"))
    # L4
    sup, words = [], []
    for s in summaries:
        thr = ALPHA / nh(s)
        plus = int(((s["dd_step_p_greater"] < thr) & (s["norm_bias"] > 0)).sum())
        minus = int(((s["dd_step_p_less"] < thr) & (s["norm_bias"] < 0)).sum())
        sup.append(_seed_support(plus, minus))
        words.append(f"{plus}+/{minus}− of {nh(s)}")
    fr = np.concatenate([np.ravel(s["rows_frac_pos"]) for s in summaries])
    nb = np.concatenate([np.ravel(s["norm_bias"]) for s in summaries])
    out["delta_bias"] = dict(status=_status(sup), evidence=(
        f"heads with Δδ > 0 at more steps than chance (p < {ALPHA:g}/heads), per seed: {'; '.join(words)}; "
        f"rows with Δδ > 0 per head {np.nanmin(fr):.3f}–{np.nanmax(fr):.3f}; normalised bias per head "
        f"{np.nanmin(nb):+.3f}…{np.nanmax(nb):+.3f} ({where})"))
    # L5–L6
    sup, words = [], []
    for s in summaries:
        if "steps_q_p" not in s:
            sup.append(False)
            words.append("no step matrices")
            continue
        thr = ALPHA / nh(s)
        ok = (s["steps_q_p"] < thr) & (s["tokq_frac_beyond"] > 0.5)
        sup.append(bool(ok.sum() >= 1))
        words.append(f"{int(ok.sum())} of {nh(s)} (ρ² across steps median {np.nanmedian(s['steps_q_rho2']):.2f}, "
                     f"sign-flip 99% {np.nanmedian(s['steps_q_null_q99']):.2f})")
    med_tok = [float(np.nanmedian(s["tokq_rho2_med"])) for s in summaries]
    cos_u = [float(np.nanmedian(s["tokq_cos_unsigned"])) for s in summaries]
    out["low_rank"] = dict(status=_status(sup), evidence=(
        f"heads whose E_Q accumulates across steps and within steps, per seed: {'; '.join(words)}; token ρ² "
        f"median {', '.join(f'{m:.2f}' for m in med_tok)} (1 = no coherence); rank-1 terms' mean cosine "
        f"{', '.join(f'{c:.2f}' for c in cos_u)} (random directions: 0) ({where})"))
    # L7
    sup, part, words = [], [], []
    for s in summaries:
        thr = ALPHA / nh(s)
        sig = s["push_p_greater"] < thr
        minus = int((s["push_p_less"] < thr).sum())
        big = np.zeros_like(sig)
        if "push_adam_total" in s and "wq_growth" in s:
            with np.errstate(invalid="ignore", divide="ignore"):
                big = (s["wq_growth"] > 0) & (s["push_adam_total"] >= PUSH_SHARE * s["wq_growth"])
        sup.append(_seed_support(int((sig & big).sum()), minus))
        part.append(_seed_support(int(sig.sum()), minus))
        share = ""
        if "push_adam_total" in s and "wq_growth" in s:
            with np.errstate(invalid="ignore", divide="ignore"):
                r = s["push_adam_total"] / s["wq_growth"]
            share = f", extrapolated push / σ₁ growth median {np.nanmedian(r):+.2g}"
        words.append(f"{int(sig.sum())}+/{minus}− of {nh(s)} heads{share}")
    out["wq_norm_push"] = dict(status=_status(sup, part), evidence=(
        f"heads whose Adam-scaled E_Q pushes ‖W_Q^h‖₂ up at more steps than chance, per seed: {'; '.join(words)} "
        f"({where})"))
    return out
