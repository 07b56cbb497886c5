"""Generic statistics: sign tests, proportions' intervals, drift against a random walk, coherence of matrices,
stable rank. Pure functions on arrays (numpy or torch, computed in float64); no study's vocabulary.

* `sign_test(x)`: exact binomial sign test (scipy); `normalised_bias(x)`: mean(x) / mean|x|.
* `clopper_pearson(k, n)`: exact interval of a binomial proportion.
* `t_interval(x)`, `bootstrap_interval(x)`: intervals of the mean of independent draws — Student's t, and the
  percentile bootstrap (resampling the draws); each draw must be one independent unit (a problem), never an element
  of a group that shares its randomness.
* `drift(increments)`: is a cumulative sum a drift or a random walk (sign-flip permutation test)?
* `coherence(mats)`: do matrices add up along one direction (ρ² with a sign-flip null)?
* `stable_rank(m)`, `frob_cos(a, b)`, `top_component(e, u, v)`: matrix summaries.
* `one_sided_sign_p(k, n)`: the chance of k or more of n fair coin flips coming up heads.
* `sign_test_power(n, share, alpha)`, `detectable_share(n, alpha, power)`: what a one-sided exact sign test of n
  signs can see — its power at a true share of positives, and the smallest share it detects with that power.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

__all__ = ["sign_test", "normalised_bias", "clopper_pearson", "t_interval", "bootstrap_interval", "drift", "stable_rank", "frob_cos", "top_component",
           "coherence", "one_sided_sign_p",
           "sign_test_power", "detectable_share"]

F64 = torch.float64
# The quantile of a sign-flip null that `coherence` reports as null_q99, and `lib.studies.delta.stats` as
# rho2_null_q99 (both write the number inline; tests check that they agree with this value).
NULL_QUANTILE = 0.99


# ================================================================================================ plain statistics
def sign_test(x=None, *, n_pos=None, n_neg=None) -> dict:
    """Exact binomial sign test of x ≠ 0 (zeros dropped), or of given counts. Returns n_pos, n_neg, n (= n_pos +
    n_neg), frac_pos (NaN if n = 0), p_two (two-sided), p_greater (H1: P(x > 0) > ½), p_less."""
    from scipy.stats import binomtest
    if x is not None:
        x = np.asarray(x, dtype=np.float64).ravel()
        x = x[np.isfinite(x)]
        n_pos, n_neg = int((x > 0).sum()), int((x < 0).sum())
    n_pos, n_neg = int(n_pos), int(n_neg)
    n = n_pos + n_neg
    if n == 0:
        return dict(n_pos=0, n_neg=0, n=0, frac_pos=float("nan"), p_two=1.0, p_greater=1.0, p_less=1.0)
    return dict(n_pos=n_pos, n_neg=n_neg, n=n, frac_pos=n_pos / n,
                p_two=float(binomtest(n_pos, n, 0.5).pvalue),
                p_greater=float(binomtest(n_pos, n, 0.5, alternative="greater").pvalue),
                p_less=float(binomtest(n_pos, n, 0.5, alternative="less").pvalue))


def normalised_bias(x) -> float:
    """mean(x) / mean|x| ∈ [−1, 1] (1: every value positive; 0: no bias); NaN if every value is 0."""
    x = np.asarray(x, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    a = np.abs(x).sum()
    return float(x.sum() / a) if a > 0 else float("nan")


def clopper_pearson(k, n, level: float = 0.95) -> tuple:
    """Exact (Clopper–Pearson) interval of a binomial proportion k/n; arrays broadcast. (NaN, NaN) where n = 0."""
    from scipy.stats import beta
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    a = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, beta.ppf(a, k, n - k + 1), 0.0)
        hi = np.where(k < n, beta.ppf(1 - a, k + 1, n - k), 1.0)
    bad = n <= 0
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def t_interval(x, level: float = 0.95) -> dict:
    """Student's t interval of the mean of independent draws x (NaN dropped): mean ± t_{(1+level)/2}(n − 1)·s/√n,
    exact when the draws are normal and right to O(1/n) otherwise. Returns mean, lo, hi, sd (ddof 1), n, dof and
    t (the quantile); lo, hi NaN where n < 2."""
    from scipy.stats import t as student_t
    x = np.asarray(x, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return dict(mean=float("nan"), lo=float("nan"), hi=float("nan"), sd=float("nan"), n=0, dof=-1,
                    t=float("nan"))
    m = float(x.mean())
    if n < 2:
        return dict(mean=m, lo=float("nan"), hi=float("nan"), sd=float("nan"), n=1, dof=0, t=float("nan"))
    sd = float(x.std(ddof=1))
    tq = float(student_t.ppf((1 + level) / 2, n - 1))
    half = tq * sd / math.sqrt(n)
    return dict(mean=m, lo=m - half, hi=m + half, sd=sd, n=n, dof=n - 1, t=tq)


def bootstrap_interval(x, level: float = 0.95, n_boot: int = 4000, seed: int = 0) -> tuple:
    """Percentile bootstrap interval (lo, hi) of the mean of independent draws x (NaN dropped): the (1 ∓ level)/2
    quantiles of the means of `n_boot` resamples of x with replacement (numpy's generator seeded with `seed`).
    A little too narrow for few draws (it ignores that the spread is estimated); (NaN, NaN) where n < 2."""
    x = np.asarray(x, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    n = x.size
    if n < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for i0 in range(0, n_boot, 1024):            # in chunks: memory ≤ 1024·n draws
        i1 = min(n_boot, i0 + 1024)
        means[i0:i1] = x[rng.integers(0, n, size=(i1 - i0, n))].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(lo), float(hi)


def drift(increments, n_flip: int = 10000, seed: int = 0) -> dict:
    """Is the cumulative sum of `increments` (one per step) a drift or a random walk?

    Returns cum (cumulative sum), band (√(cumulative Σx²): the ±1σ envelope of a sum of independent symmetric
    increments of these sizes — the random-walk scaling, √n for equal sizes), z = Σx / √Σx² (≈ N(0, 1) under
    that null), and p_flip: two-sided sign-flip permutation p-value of |Σx| (seeded; exact null for independent,
    symmetric increments), p_greater its one-sided version (H1: positive drift)."""
    x = np.asarray(increments, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return dict(cum=np.zeros(0), band=np.zeros(0), z=float("nan"), p_flip=1.0, p_greater=1.0, n=0)
    cum, band = np.cumsum(x), np.sqrt(np.cumsum(x * x))
    tot = float(np.sqrt((x * x).sum()))
    z = float(x.sum() / tot) if tot > 0 else 0.0
    rng = np.random.default_rng(seed)
    flips = rng.choice(np.array([-1.0, 1.0]), size=(n_flip, x.size)) @ x
    obs = x.sum()
    p_two = float((1 + np.sum(np.abs(flips) >= abs(obs) - 1e-12 * abs(obs))) / (n_flip + 1))
    p_gt = float((1 + np.sum(flips >= obs - 1e-12 * abs(obs))) / (n_flip + 1))
    return dict(cum=cum, band=band, z=z, p_flip=p_two, p_greater=p_gt, n=int(x.size))


def stable_rank(m) -> float:
    """‖M‖_F² / ‖M‖₂² of a matrix (1 for rank 1, up to min(shape)); NaN for the zero matrix."""
    m = torch.as_tensor(np.asarray(m) if not isinstance(m, torch.Tensor) else m).to(F64)
    s = torch.linalg.svdvals(m)
    return float((s * s).sum() / (s[0] ** 2)) if s[0] > 0 else float("nan")


def frob_cos(a, b) -> float:
    """⟨A, B⟩_F / (‖A‖_F ‖B‖_F); NaN if either is zero."""
    a = torch.as_tensor(np.asarray(a) if not isinstance(a, torch.Tensor) else a).to(F64)
    b = torch.as_tensor(np.asarray(b) if not isinstance(b, torch.Tensor) else b).to(F64)
    na, nb = torch.linalg.norm(a), torch.linalg.norm(b)
    return float((a * b).sum() / (na * nb)) if na > 0 and nb > 0 else float("nan")


def top_component(e, u, v) -> float:
    """uᵀ E v: the first-order change of σ₁(W) when E is added to W (u, v: W's top singular vectors)."""
    e, u, v = (torch.as_tensor(np.asarray(t) if not isinstance(t, torch.Tensor) else t).to(F64) for t in (e, u, v))
    return float(u @ e @ v)


@functools.lru_cache(maxsize=4)
def _fair_signs(n: int, m: int, seed: int) -> torch.Tensor:
    """(n, m) fair ±1 draws, float64 on the CPU, from torch's CPU generator seeded with `seed`.

    Cached: `run_summary` tests the four error matrices (q, k and their shuffled-sign baselines) of one head with
    the same seed, so the same draws serve all four (the draws are those an uncached call gives; callers must not
    modify the returned tensor)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randint(0, 2, (n, m), generator=gen) * 2 - 1).to(F64)


def coherence(mats, n_flip: int = 2000, seed: int = 0) -> dict:
    """Do matrices M_1…M_n (e.g. E at successive steps) add up along one direction?

    rho2 = ‖Σ M_i‖²_F / Σ‖M_i‖²_F (1 in expectation for independent, sign-symmetric M_i; n for n identical ones);
    p_flip: P(ρ² under random signs ε_i M_i ≥ observed) (seeded Monte Carlo on the Gram matrix); null_q99."""
    m = torch.stack([torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).to(F64).reshape(-1)
                     for x in mats])
    g = m @ m.T
    tr = float(torch.trace(g))
    if tr == 0:
        return dict(rho2=float("nan"), p_flip=1.0, null_q99=float("nan"), n=int(m.shape[0]))
    rho2 = float(g.sum()) / tr
    eps = _fair_signs(n_flip, m.shape[0], seed)
    null = ((eps @ g.cpu()) * eps).sum(1) / tr
    return dict(rho2=rho2, p_flip=float((1 + (null >= rho2 - 1e-12 * abs(rho2)).sum()) / (n_flip + 1)),
                null_q99=float(torch.quantile(null, 0.99)), n=int(m.shape[0]))


def one_sided_sign_p(k: int, n: int) -> float:
    """P(X ≥ k) for X ~ Binomial(n, ½): the one-sided sign-test p-value of k of n pairs going one way."""
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2 ** n


def top_of_p(k: int, n: int, arms: int) -> float:
    """P(X ≥ k) for X ~ Binomial(n, 1/arms): the chance that one named arm of `arms` exchangeable arms comes out on
    top (say, the largest logit) in k or more of n independent seeds, if the arms did not differ."""
    p = 1.0 / arms
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


def _critical_count(n: int, alpha: float):
    """The fewest positives of n signs that pass a one-sided exact sign test at `alpha` (None when no count can)."""
    from scipy.stats import binom
    if n <= 0:
        return None
    k = int(binom.isf(alpha, n, 0.5))               # P(X > k) ≤ alpha: start there, then step to the exact edge
    while k > 0 and binom.sf(k - 2, n, 0.5) <= alpha:
        k -= 1
    while k <= n and binom.sf(k - 1, n, 0.5) > alpha:
        k += 1
    return k if k <= n else None


def sign_test_power(n: int, share: float, alpha: float) -> float:
    """The chance that a one-sided exact sign test of n independent signs passes at level `alpha` when each sign is
    positive with probability `share` (0 when no count of n can pass)."""
    from scipy.stats import binom
    k = _critical_count(int(n), alpha)
    return 0.0 if k is None else float(binom.sf(k - 1, int(n), share))


def detectable_share(n: int, alpha: float, power: float = 0.8) -> float:
    """The smallest true share of positive signs that a one-sided exact sign test of n independent signs at level
    `alpha` detects with probability `power` (NaN when no count of n can pass: the test sees nothing)."""
    from scipy.optimize import brentq
    if _critical_count(int(n), alpha) is None:
        return float("nan")
    return float(brentq(lambda p: sign_test_power(n, p, alpha) - power, 0.5, 1.0, xtol=1e-9))
