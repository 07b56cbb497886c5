"""Chapter 1 Monte Carlo (numpy, CPU): mean signed rounding error of P̄V and O on attention-shaped rows.

Sweeps (all with RNE, the β shift and stochastic rounding as columns, both normalisation orders):
* ``grid``      k tied maxima × score gap g (heat-maps), all V negative, N = 256 keys;
* ``frac_neg``  the fraction of negative V (k = 2, g = 14);
* ``n_keys``    the row length N (k = 2, g = 14);
* ``dial``      mantissa width m = 3…10 with S, P̄, V and the outputs all on the m-bit grid, and the gap chosen per m
                so that the remainder is the same fraction ρ* of the tied terms' ULP (k = 2);
* ``accum``     normalise-then-round with sequential FP32 vs exact accumulators (k = 2), the diagnostic of the
                FP32-swamping effect.
Every cell records the theory prediction (`lib.fp.theory`) from the cell's own FP32 remainders.
"""
from __future__ import annotations

import numpy as np

SEED = 20251004
RHO_TARGET = 0.02   # precision dial: remainder as a fraction of the tied terms' ULP
SPREAD = 4.0        # non-max scores are s_max − g − U(0, SPREAD)


def dial_gap(m: int, n_keys: int = 256, k: int = 2, rho: float = RHO_TARGET, spread: float = SPREAD) -> float:
    """The gap g that makes the expected remainder r = Σ_rest P̄|V| equal rho·2**-m (ULP of the tied terms).

    E[r] = (N − k)·e^{−g}·E[e^{−U(0,spread)}]·E|V| with E|V| ≈ 1.5 (|V| uniform in [1, 2))."""
    mean_exp = (1 - np.exp(-spread)) / spread
    return float(np.log((n_keys - k) * mean_exp * 1.5 / (rho * 2.0 ** -m)))


def _accum_diag(seed, n_problems, gaps):
    from lib.fp.rounding_bias import emulate_rows, make_rows, summarize
    recs = []
    for i, g in enumerate(gaps):
        S, V = make_rows(np.random.default_rng(seed + i), n_problems, 16, 256, 16, 2, g)
        rec = {"gap": g}
        for acc in ("sequential", "matmul", "exact"):
            s = summarize(emulate_rows(S, V, 7, accumulate=acc))
            rec[f"{acc}_o_ntr"], rec[f"{acc}_o_ntr_ci"] = s["o_ntr"], s["o_ntr_ci"]
            rec[f"{acc}_pv"], rec[f"{acc}_pv_ci"] = s["pv"], s["pv_ci"]
        recs.append(rec)
    return recs


def run(scale: str, cfg: dict) -> dict:
    """cfg: n_problems (independent problems per cell, 16 rows × 16 features each), ks, gaps (score units),
    n_keys_list (row lengths of the N sweep), accum_gaps (gaps of the accumulator diagnostic)."""
    from lib.fp.rounding_bias import mc_grid
    P, ks, gaps = cfg["n_problems"], cfg["ks"], cfg["gaps"]
    kw = dict(n_problems=P, spread=SPREAD)
    grid = mc_grid(SEED, ks, gaps, **kw)
    frac = mc_grid(SEED + 1, [2], [14.0], frac_negs=[0.5, 0.6, 0.75, 0.9, 1.0], **kw)
    nk = mc_grid(SEED + 2, [2], [14.0], n_keys_list=cfg["n_keys_list"], **kw)
    dial = []
    for m in range(3, 11):
        rec = mc_grid(SEED + 3 + m, [2], [dial_gap(m)], m=m, **kw)[0]
        dial.append(rec)
    accum = _accum_diag(SEED + 50, P, cfg["accum_gaps"])
    return {"data": {"grid": grid, "frac_neg": frac, "n_keys": nk, "dial": dial, "accum": accum},
            "config": {"n_problems": P, "rows_per_problem": 16, "features": 16, "spread": SPREAD, "beta": 2.0,
                       "rho_target": RHO_TARGET, "ks": ks, "gaps": gaps},
            "seeds": [SEED]}
