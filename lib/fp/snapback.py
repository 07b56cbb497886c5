"""Why round-then-normalise keeps the tie bias where P̄V's own rounding has lost it: the second rounding snaps back.

With k tied maxima (P̄ = 1) the unnormalised output is Ō = T + R, T = Σ_tied V (a multiple of q = 2⁻ᵐ in [1, 2)·k
units) and R the remainder of the other keys; ℓ = k + s with s = Σ_other P̄. Round then normalise stores
P̃ = round(Ō) and returns round(P̃ / ℓ). P̃ / k lies on O's grid (k a power of two), and P̃ / ℓ sits σ ULPs of O below
it, σ = |P̃|·s / (k·ℓ·u) ≈ ρ / k (ρ = |R| / q). While σ < ½ the second rounding returns P̃ / k exactly: it throws away
the remainder that the exact O = (T + R) / ℓ = T / k + (zero-mean terms) does not contain. So O's error is
(P̃ − T) / k, whose mean over the residues of T is −(⌊ρ⌋ + ½) / k ULP with V < 0 — the full −1/(2k) tie bias for
ρ < 1, even where ρ ≈ ½ and P̄V's own error (P̃ − T − R, a sawtooth in ρ) averages to zero. Past σ ≈ ½ the second
rounding steps down by rne(σ) and the mean becomes a square wave in ρ that washes out once ρ spreads over several
ULPs. Normalise then round has no snap-back: it rounds Ō / ℓ itself, whose deviation from T / k has either sign.

`rtn_parts` measures this on the Monte Carlo rows of `lib.fp.rounding_bias` (its `make_rows` and `emulate_rows`,
unchanged) and splits each output's error in O into the first rounding's part, (P̃ − Ō₃₂) / ℓ, and the second's,
round(P̃ / ℓ) − P̃ / ℓ, in ULPs of the exact O.
"""
from __future__ import annotations

import numpy as np

from lib.fp.bf16 import ulp
from lib.fp.rounding_bias import cluster_ci, emulate_rows, make_rows


# The cell chapter 1 and the intro read in words: two tied maxima, gap 10 nats, where the remainder is about half an
# ULP of one V — chosen from the derivation (σ ≈ ρ/k well inside ½ while ρ is far from 0), not from the outcome.
SHOWCASE = (2, 10)


def tied_power_of_two(k: int) -> bool:
    """Whether the derivation applies: at least two tied maxima (k = 1 has no tie to round) and k a power of two."""
    return k >= 2 and not k & (k - 1)


def predicted_rtn(k: int, rho_fp32: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Each output's expected round-then-normalise error (ULPs of O, V < 0, k a power of two): −(⌊ρ⌋ + ½) / k from
    the first rounding (0 where the FP32 accumulator lost the remainder: an exact tie, which RNE rounds to even
    without bias) plus rne(σ), the second rounding's step back towards zero. `rho_fp32`: |Ō₃₂ − T| / q;
    `sigma`: how far P̃ / ℓ lies below P̃ / k, in ULPs of O."""
    if not tied_power_of_two(k):
        raise ValueError(f"the snap-back derivation needs k ≥ 2 tied maxima, a power of two (P̃ / k on O's grid), "
                         f"got {k}")
    first = np.where(rho_fp32 > 0, -(np.floor(rho_fp32) + 0.5) / k, 0.0)
    return first + np.rint(sigma)


def rtn_parts(seed: int, k: int, gap: float, n_problems: int = 32, m: int = 7, n_keys: int = 256, rows: int = 16,
              d: int = 16, spread: float = 4.0) -> dict:
    """One cell of the Monte Carlo of `lib.fp.rounding_bias.mc_cell` (all V < 0, RNE, sequential FP32), with the
    error of round-then-normalise O split in two. Each entry is (mean, 95 % half-width) over the problems, in ULPs:
      "pv"       P̄V's error (ULPs of the exact P̄V)           "o_rtn"   O's error, round then normalise
      "first"    (P̃ − Ō₃₂) / ℓ: the first rounding, divided   "second"  round(P̃ / ℓ) − P̃ / ℓ: the second rounding
      "rest"     O's error − first − second (FP32 sums and the division; ≈ 0)
      "o_ntr"    O's error, normalise then round              "predicted" `predicted_rtn`, averaged
    and scalars "rho" (mean ρ = |R| / q of the exact remainder), "sigma" (mean σ) and "snap" (the share of outputs
    with round(P̃ / ℓ) = P̃ / k). With the same seed and sizes as a cell of `mc_grid`, "pv", "o_rtn" and "o_ntr" are
    that cell's rne_pv, rne_o_rtn and rne_o_ntr."""
    rng = np.random.default_rng(seed)
    S, V = make_rows(rng, n_problems, rows, n_keys, d, k, gap, 1.0, m, spread)
    o = emulate_rows(S, V, m)
    f64 = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    pv32, p_t, ell = f64(o["pv_fp32"]), f64(o["pv_lp"]), f64(o["ell_fp32"])
    o_ex, tied = o["o_exact"], o["tied_sum"]
    u = ulp(o_ex, m)
    quotient = f64((o["pv_lp"] / o["ell_fp32"]).astype(np.float32))     # the FP32 value the second rounding sees
    total = (f64(o["o_rtn"]) - o_ex) / u
    first = (p_t - pv32) / ell / u
    second = (f64(o["o_rtn"]) - quotient) / u
    sigma = (np.abs(p_t) / k - np.abs(p_t) / ell) / u
    q = 2.0 ** -m
    out = {name: cluster_ci(x) for name, x in (
        ("pv", (p_t - o["pv_exact"]) / ulp(o["pv_exact"], m)), ("o_rtn", total), ("first", first),
        ("second", second), ("rest", total - first - second), ("o_ntr", (f64(o["o_ntr"]) - o_ex) / u))}
    if tied_power_of_two(k):
        out["predicted"] = cluster_ci(predicted_rtn(k, np.abs(pv32 - tied) / q, sigma))
    out.update(rho=float((np.abs(o["pv_exact"] - tied) / q).mean()), sigma=float(sigma.mean()),
               snap=float((f64(o["o_rtn"]) == p_t / k).mean()))
    return out


def grid_cells(grid: list[dict], cfg: dict, which) -> list[dict]:
    """`rtn_parts` for each (k, gap) of `which`, with the sizes of the Monte Carlo whose `grid` (its records) and
    `cfg` (its configuration: n_problems, rows_per_problem, features, spread) are given. A cell the grid holds gets
    its seed, so its "pv", "o_rtn" and "o_ntr" are the grid's own; a cell off the grid gets a seed above every grid
    seed. Each row: k, gap, "on_grid" and the entries of `rtn_parts`."""
    seeds = {(r["k"], r["gap"]): r["seed"] for r in grid}
    n_keys, m = grid[0]["n_keys"], grid[0]["m"]
    top = max(seeds.values())
    out = []
    for j, (k, gap) in enumerate(which):
        seed = seeds.get((k, gap), top + 1000 * (j + 1))
        parts = rtn_parts(seed, k, gap, n_problems=cfg["n_problems"], m=m, n_keys=n_keys,
                          rows=cfg["rows_per_problem"], d=cfg["features"], spread=cfg["spread"])
        out.append(dict(k=k, gap=gap, on_grid=(k, gap) in seeds, **parts))
    return out
