"""Chapter 1: the tie + sticky-bit rounding bias, bit by bit and in attention-shaped Monte Carlo (numpy, CPU).

Contents
--------
* bits:        `bit_table`, `rounding_anatomy` — sign | exponent | fraction | dropped bits of computed values.
* example:     `worked_example` — the paper's −2.40625 + residual + −2.296875 addition, recomputed.
* enumeration: `enumerate_bias` — every k-tuple of one binade's m-bit values, added in FP32 and rounded with
               `lib.fp.bf16.round_rne`; the exact mean (a Fraction) must equal `lib.fp.theory.expected_error_ulps`.
* Monte Carlo: `make_rows` (attention-shaped scores S and values V), `emulate_rows` (P̄ = exp(S − m), P̄V in FP32,
               the two orders, β shift, stochastic rounding, any mantissa width), `mc_cell`, `mc_grid`.

Error convention: signed error = computed − exact (float64 of the same rounded operands), in ULPs of the exact
value's binade (m-bit ULP). Confidence intervals are 95 % Student-t intervals over independent *problems* (the rows
of one problem share V, so problems, not outputs, are the independent units).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from lib.fp.bf16 import (bit_fields, bit_string, bits_f32, check_mantissa_bits, round_rne, round_stochastic, ulp)

__all__ = ["bit_table", "rounding_anatomy", "worked_example", "enumerate_bias", "make_rows", "emulate_rows",
           "mc_cell", "mc_grid", "restore_nonfinite", "ORDERS", "METHODS"]

ORDERS = ("round_then_normalise", "normalise_then_round")
METHODS = ("rne", "beta", "sr")  # plain RNE, RNE with the paper's β shift, stochastic rounding of the outputs


# ------------------------------------------------------------------------------------------------------- bits
def bit_table(rows, m: int = 7) -> list[dict]:
    """[(label, fp32 value), ...] -> list of dicts (label, sign, exponent, fraction, dropped, bits, value)."""
    out = []
    for label, x in rows:
        f = bit_fields(np.float32(x), m)
        out.append({"quantity": label, "sign": f["sign"], "exponent": f["exponent"], "fraction": f["fraction"],
                    "dropped": f["dropped"], "bits": bit_string(np.float32(x), m), "value": f["value"]})
    return out


def rounding_anatomy(x, m: int = 7) -> dict:
    """The RNE decision for one FP32 value: kept LSB, round (guard) bit, sticky bit, direction, rounded value."""
    m = check_mantissa_bits(m)
    f = bit_fields(np.float32(x), m)
    if not f["dropped"]:
        raise ValueError("m = 23 keeps every bit; nothing is rounded")
    lsb, guard, sticky = int(f["fraction"][-1]), int(f["dropped"][0]), int("1" in f["dropped"][1:])
    up = guard == 1 and (sticky == 1 or lsb == 1)
    rounded = float(round_rne(np.array([x], dtype=np.float32), m)[0])
    kind = "below half" if guard == 0 else ("exact tie -> even" if sticky == 0 else "above half (sticky)")
    return {"lsb": lsb, "guard": guard, "sticky": sticky, "case": kind,
            "direction": "away from zero" if up else "toward zero", "rounded": rounded,
            "error": rounded - float(np.float32(x))}


# ---------------------------------------------------------------------------------------------------- example
def worked_example() -> dict:
    """The paper's addition: BF16 −2.40625 already holding a small FP32 residual, plus the BF16 −2.296875.

    The accumulator's low 16 bits are those printed in the paper (0000111000101110); everything else is computed."""
    a = np.float32(-2.40625)                    # a BF16 value: P̄ = 1 times V
    b = np.float32(-2.296875)                   # the second P̄ = 1 term, also BF16
    acc_bits = (int(a.view(np.uint32)) & 0xFFFF0000) | 0b0000111000101110
    acc = bits_f32(np.array(acc_bits, dtype=np.uint32)).item()  # a + residual, as the FP32 accumulator holds it
    acc = np.float32(acc)
    residual = float(acc) - float(a)
    s = np.float32(acc + b)                     # FP32 addition (exact here: both have ≤ 24 significant bits)
    s_bf = float(round_rne(np.array([s]))[0])
    s0 = np.float32(a + b)                      # counterfactual: no residual
    s0_bf = float(round_rne(np.array([s0]))[0])
    exact = Fraction(float(acc)) + Fraction(float(b))
    return {"a": float(a), "b": float(b), "acc": float(acc), "residual": residual, "sum_fp32": float(s),
            "sum_exact_equals_fp32": exact == Fraction(float(s)), "sum_bf16": s_bf, "error": s_bf - float(s),
            "error_ulps": (s_bf - float(s)) / float(ulp(float(s))), "ulp_sum": float(ulp(float(s))),
            "ulp_terms": float(ulp(float(a))),
            "no_residual_sum_fp32": float(s0), "no_residual_bf16": s0_bf, "no_residual_error": s0_bf - float(s0),
            "anatomy": rounding_anatomy(s), "anatomy_no_residual": rounding_anatomy(s0),
            "table": bit_table([("−2.40625 (BF16 term, P̄ = 1)", a), ("accumulator: term + small residual", acc),
                                ("−2.296875 (second P̄ = 1 term)", b), ("FP32 sum", s),
                                ("BF16(sum): sticky set, round away from 0", s_bf),
                                ("FP32 sum without the residual (tie)", s0), ("BF16: tie to even", s0_bf)])}


# ------------------------------------------------------------------------------------------------ enumeration
def _grid_values(m: int) -> np.ndarray:
    """The 2**m values of the m-bit grid in [1, 2), as float32."""
    return ((2 ** m + np.arange(2 ** m)) / 2 ** m).astype(np.float32)


def enumerate_bias(k: int, m: int = 7, rho=Fraction(0), sign: int = 1, max_tuples: int = 1 << 22) -> dict:
    """Exhaustive enumeration: every k-tuple of m-bit values in [1, 2) (times `sign`), plus the remainder
    r = rho·2**-m, summed in FP32 and rounded with RNE (`lib.fp.bf16.round_rne`). Exact bookkeeping.

    Returns {"mean_ulps": Fraction (signed, ULPs of the result), "n": tuples, "p_tie": Fraction,
    "frac_away": Fraction of tuples rounded away from zero}. rho must be a dyadic Fraction with denominator ≤ 2**16."""
    m = check_mantissa_bits(m)
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign!r}")
    rho = Fraction(rho)
    if rho < 0 or rho.denominator & (rho.denominator - 1) or rho.denominator > 2 ** 16:
        raise ValueError(f"rho must be a non-negative dyadic rational with denominator <= 2**16, got {rho}")
    n = (2 ** m) ** k
    if n > max_tuples:
        raise ValueError(f"{n} tuples > max_tuples={max_tuples}; lower k or m")
    vals = _grid_values(m) * np.float32(sign)
    idx = np.indices((2 ** m,) * k).reshape(k, -1)
    acc = np.zeros(n, dtype=np.float32)
    for i in range(k):                                   # FP32 accumulation, term by term (exact for these sums)
        acc = acc + vals[idx[i]]
    r = np.float32(float(rho) * 2.0 ** -m * sign)
    tot = acc + r
    exact = acc.astype(np.float64) + float(r)
    if not np.array_equal(tot.astype(np.float64), exact):
        raise AssertionError("FP32 accumulation was not exact; choose a coarser rho")
    rnd = round_rne(tot, m).astype(np.float64)
    u = ulp(exact, m)                                     # ULP of the exact sum's binade
    unit = 2.0 ** (-m - 20)                               # every error is an integer multiple of this
    err_units = np.rint((rnd - exact) / unit).astype(np.int64)
    if not np.array_equal(err_units * unit, rnd - exact):
        raise AssertionError("error not representable in the bookkeeping unit")
    mean = Fraction(0)
    for uu in np.unique(u):                               # exact: group by ULP, sum integers
        sel = u == uu
        mean += Fraction(int(err_units[sel].sum())) * Fraction(unit) / Fraction(float(uu))
    d = u / 2.0 ** -m
    resid = np.rint((acc.astype(np.float64) * 2 ** m) % d).astype(np.int64)
    p_tie = Fraction(int(((d >= 2) & (resid == d / 2)).sum()), n)
    away = Fraction(int((np.abs(rnd) > np.abs(exact)).sum()), n)
    return {"k": k, "m": m, "rho": rho, "sign": sign, "n": n, "mean_ulps": mean / n, "p_tie": p_tie,
            "frac_away": away}


# ------------------------------------------------------------------------------------------------ Monte Carlo
def make_rows(rng: np.random.Generator, n_problems: int, rows: int, n_keys: int, d: int, k: int, gap: float,
              frac_neg: float = 1.0, m: int = 7, spread: float = 4.0, smax_range=(1.0, 4.0)):
    """Attention-shaped inputs, every value on the m-bit grid.

    Per query row: k exactly tied maxima s_max ~ U(smax_range) at random key positions; the other n_keys − k
    scores are s_max − gap − U(0, spread) (kept strictly below s_max after rounding). V: |V| uniform on the m-bit
    grid of [1, 2) (one binade, as in the theory), negative with probability frac_neg.

    Returns S (n_problems, rows, n_keys) float32 and V (n_problems, n_keys, d) float32; rows of one problem share V.
    """
    m = check_mantissa_bits(m)
    if not 1 <= k <= n_keys:
        raise ValueError(f"need 1 <= k <= n_keys, got k={k}, n_keys={n_keys}")
    if gap < 0 or spread < 0 or not 0.0 <= frac_neg <= 1.0:
        raise ValueError(f"need gap >= 0, spread >= 0, 0 <= frac_neg <= 1 (got {gap}, {spread}, {frac_neg})")
    shape = (n_problems, rows, n_keys)
    smax = round_rne(rng.uniform(*smax_range, size=shape[:2] + (1,)).astype(np.float32), m)
    rest = round_rne((smax - gap - rng.uniform(0.0, spread, size=shape)).astype(np.float32), m)
    below = round_rne((smax * np.float32(1 - 2.0 ** -m)).astype(np.float32), m)   # grid point under s_max
    below = np.where(below < smax, below, smax - np.float32(ulp(smax, m)))
    rest = np.minimum(rest, below)
    tied = np.argsort(rng.random(shape), axis=-1)[..., :k]                       # k distinct positions per row
    S = rest.copy()
    np.put_along_axis(S, tied, np.broadcast_to(smax, tied.shape), axis=-1)
    mag = (2 ** m + rng.integers(0, 2 ** m, size=(n_problems, n_keys, d))) / 2 ** m
    sgn = np.where(rng.random((n_problems, n_keys, d)) < frac_neg, -1.0, 1.0)
    return S.astype(np.float32), (mag * sgn).astype(np.float32)


def shifted_max(S: np.ndarray, beta: float | None) -> np.ndarray:
    """Row max used in exp(S − max): plain (beta None) or the paper's rule (β·max for a repeated positive max,
    0 for a repeated negative max). S (..., n_keys) -> (..., 1) float32."""
    mx = S.max(axis=-1, keepdims=True)
    if beta is None:
        return mx
    if beta <= 1:
        raise ValueError(f"beta must be > 1, got {beta}")
    ties = (S == mx).sum(axis=-1, keepdims=True) > 1
    adj = np.where(ties & (mx > 0), np.float32(beta) * mx, mx)
    return np.where(ties & (mx < 0), np.float32(0), adj).astype(np.float32)


def _round(x, m, stochastic, rng):
    return round_stochastic(x, m, rng=rng) if stochastic else round_rne(x, m)


def emulate_rows(S: np.ndarray, V: np.ndarray, m: int = 7, beta: float | None = None, stochastic: bool = False,
                 rng: np.random.Generator | None = None, accumulate: str = "sequential") -> dict:
    """Row-wise P̄V in numpy with the kernel's rounding placement.

    P̄ = exp(S − max) in FP32, rounded to m bits (the matmul operand); ℓ = Σ P̄ (FP32, of the rounded P̄);
    Ō = P̄V accumulated sequentially over keys in FP32 (products are exact: ≤ 2m+2 significant bits).
    Outputs (all (n_problems, rows, d) float32 unless noted):
      pv_lp      round(Ō)                                 the unnormalised P̄V as stored in m bits
      o_rtn      round(round(Ō) / ℓ)                      "round then normalise" (paper code; ℓ kept FP32 here)
      o_ntr      round(Ō / ℓ)                             "normalise then round" (production FA2)
      pv_exact, o_exact (float64)                         the same operands in float64
      pv_fp32, ell_fp32                                   Ō and ℓ (B, R, 1) before any rounding
      tied_sum (float64)                                  Σ of the P̄ = 1 terms (the "big" part of Ō)
    `stochastic` replaces every output rounding by stochastic rounding (seeded by `rng`).
    `accumulate`: "sequential" (FP32, key by key, like Eq. 5 of the paper) or "exact" (float64 sums rounded once to
    FP32: a diagnostic that removes FP32 swamping of the tiny terms) or "matmul" (np.matmul / np.sum in FP32, the
    order the Triton interpreter uses for `tl.dot` / `tl.sum`: the bit-exact oracle of `kernels/row_pv.py`)."""
    if accumulate not in ("sequential", "exact", "matmul"):
        raise ValueError(f"accumulate must be 'sequential', 'exact' or 'matmul', got {accumulate!r}")
    m = check_mantissa_bits(m)
    if S.ndim != 3 or V.ndim != 3 or S.shape[0] != V.shape[0] or S.shape[2] != V.shape[1]:
        raise ValueError(f"need S (B, rows, N) and V (B, N, d); got {S.shape} and {V.shape}")
    if S.dtype != np.float32 or V.dtype != np.float32:
        raise TypeError("S and V must be float32")
    if stochastic and rng is None:
        raise ValueError("stochastic rounding needs an rng (for reproducibility)")
    mx = shifted_max(S, beta)
    p = round_rne(np.exp(S - mx).astype(np.float32), m)                     # (B, R, N)
    pv_exact = np.einsum("brn,bnd->brd", p.astype(np.float64), V.astype(np.float64))
    ell_exact = p.astype(np.float64).sum(axis=-1, keepdims=True)
    if accumulate == "sequential":
        ell = np.add.accumulate(p, axis=-1, dtype=np.float32)[..., -1:]      # (B, R, 1) FP32
        prod = p[..., :, None] * V[:, None, :, :]                            # (B, R, N, d), exact in FP32
        pv = np.add.accumulate(prod, axis=2, dtype=np.float32)[:, :, -1, :]  # sequential FP32 accumulation
    elif accumulate == "matmul":
        # the kernel's tiles: keys padded to a power of two, rows in blocks of 16, one (16 × N) @ (N × d) per block
        B, R, N = p.shape
        n_tile, r_tile = max(16, 1 << (N - 1).bit_length()), -(-R // 16) * 16
        p_pad = np.zeros((B, r_tile, n_tile), np.float32)
        p_pad[:, :R, :N] = p
        v_pad = np.zeros((B, n_tile, V.shape[2]), np.float32)
        v_pad[:, :N] = V
        ell = p_pad.sum(axis=-1, keepdims=True, dtype=np.float32)[:, :R]
        blocks = p_pad.reshape(B, r_tile // 16, 16, n_tile)
        pv = np.matmul(blocks, v_pad[:, None]).reshape(B, r_tile, -1)[:, :R]
    else:
        ell, pv = ell_exact.astype(np.float32), pv_exact.astype(np.float32)
    tied = (p == 1.0).astype(np.float64)
    tied_sum = np.einsum("brn,bnd->brd", tied, V.astype(np.float64))
    pv_lp = _round(pv, m, stochastic, rng)
    o_rtn = _round((pv_lp / ell).astype(np.float32), m, stochastic, rng)
    o_ntr = _round((pv / ell).astype(np.float32), m, stochastic, rng)
    return {"pv_lp": pv_lp, "o_rtn": o_rtn, "o_ntr": o_ntr, "pv_exact": pv_exact, "o_exact": pv_exact / ell_exact,
            "pv_fp32": pv, "ell_fp32": ell, "tied_sum": tied_sum, "n_tied": tied.sum(axis=-1)}


def _ulps(x, exact, m):
    return (np.asarray(x, dtype=np.float64) - exact) / ulp(exact, m)


def cluster_ci(per_output: np.ndarray) -> tuple[float, float]:
    """Mean and 95 % half-width over independent problems: per_output (n_problems, ...) -> (mean, half_width)."""
    per_problem = per_output.reshape(per_output.shape[0], -1).mean(axis=1)
    n = per_problem.size
    from scipy.stats import t as student_t
    hw = student_t.ppf(0.975, n - 1) * per_problem.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
    return float(per_problem.mean()), float(hw)


def summarize(out: dict, m: int = 7) -> dict:
    """Mean signed errors (ULPs, with 95 % CI half-widths) of P̄V and of O in both orders; relative errors too."""
    res = {}
    for key, x, ex in (("pv", out["pv_lp"], out["pv_exact"]), ("o_rtn", out["o_rtn"], out["o_exact"]),
                       ("o_ntr", out["o_ntr"], out["o_exact"])):
        res[key], res[key + "_ci"] = cluster_ci(_ulps(x, ex, m))
        res[key + "_rel"], res[key + "_rel_ci"] = cluster_ci((x - ex) / np.abs(ex))
    return res


def mc_cell(seed: int, k: int, gap: float, frac_neg: float = 1.0, n_keys: int = 256, m: int = 7,
            n_problems: int = 32, rows: int = 16, d: int = 16, beta: float = 2.0, spread: float = 4.0,
            with_theory: bool = True) -> dict:
    """One Monte Carlo cell: same inputs through plain RNE, the β shift and stochastic rounding.

    Returns {"rne": summary, "beta": summary, "sr": summary, "theory_pv": predicted mean P̄V error in ULPs from
    `lib.fp.theory` given each output's actual FP32 remainder (only when all tied V share one sign), "rho_mean":
    mean remainder in ULPs of the tied terms, "rho_lost": fraction of outputs whose remainder was lost in FP32}."""
    from lib.fp import theory
    rng = np.random.default_rng(seed)
    S, V = make_rows(rng, n_problems, rows, n_keys, d, k, gap, frac_neg, m, spread)
    out = {}
    base = emulate_rows(S, V, m)
    out["rne"] = summarize(base, m)
    out["beta"] = summarize(emulate_rows(S, V, m, beta=beta), m)
    out["sr"] = summarize(emulate_rows(S, V, m, stochastic=True, rng=np.random.default_rng(seed + 1)), m)
    r_exact = np.abs(base["pv_exact"] - base["tied_sum"]) * 2.0 ** m         # remainder, in q units
    r_fp32 = np.abs(base["pv_fp32"].astype(np.float64) - base["tied_sum"]) * 2.0 ** m
    out["rho_mean"] = float(r_exact.mean())
    out["rho_lost"] = float(((r_fp32 == 0) & (r_exact > 0)).mean())
    out["theory_pv"] = float("nan")
    if with_theory and frac_neg == 1.0 and k <= 8:
        # all V negative: the error is −(theory for positive terms) evaluated at each output's FP32 remainder
        rho = np.unique(r_fp32, return_inverse=True)
        pred = -theory.expected_error_float(k, rho[0], m)[rho[1].reshape(r_fp32.shape)]
        # + the FP32 accumulation error itself (exact decomposition: measured − exact = rounding of the FP32 value
        #   + (FP32 value − exact)); it is tiny except where FP32 swamps the remainder
        acc_err = _ulps(base["pv_fp32"], base["pv_exact"], m)
        out["theory_pv"] = float(pred.mean() + acc_err.mean())
    out["theory_o_ntr"] = float("nan")
    if with_theory and frac_neg == 1.0 and k in (1, 2, 4, 8):
        # normalise-then-round: O = Σ_tied/k + ρ'·q exactly scales the k-term problem by 1/k (k a power of two), so
        # the theory applies with the *signed* effective remainder k·ρ' (it can oppose the tied terms)
        o32 = (base["pv_fp32"] / base["ell_fp32"]).astype(np.float32).astype(np.float64)
        eff = -(o32 - base["tied_sum"] / k) * 2.0 ** m * k              # positive = same sign as the (negative) V
        rho = np.unique(eff, return_inverse=True)
        out["theory_o_ntr"] = float(-theory.expected_error_float(k, rho[0], m)[rho[1].reshape(eff.shape)].mean()
                                    + _ulps(o32, base["o_exact"], m).mean())
    return out


def mc_grid(seed: int, ks, gaps, frac_negs=(1.0,), n_keys_list=(256,), m: int = 7, progress: bool = False,
            **kw) -> list[dict]:
    """Run `mc_cell` over the product of ks × gaps × frac_negs × n_keys_list; one flat record per cell."""
    from itertools import product
    combos = list(product(ks, gaps, frac_negs, n_keys_list))
    it = combos
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(combos, desc="bias MC", leave=False)
    recs = []
    for i, (k, g, f, n) in enumerate(it):
        c = mc_cell(seed + 1000 * i, k, g, f, n, m, **kw)
        rec = {"k": k, "gap": g, "frac_neg": f, "n_keys": n, "m": m, "seed": seed + 1000 * i,
               "rho_mean": c["rho_mean"], "rho_lost": c["rho_lost"], "theory_pv": c["theory_pv"],
               "theory_o_ntr": c["theory_o_ntr"]}
        for meth in METHODS:
            for key, v in c[meth].items():
                rec[f"{meth}_{key}"] = v
        recs.append(rec)
    return recs


def restore_nonfinite(obj):
    """Undo `lib.book.results`' JSON encoding of non-finite floats ('nan', 'inf', '-inf' strings) in nested data."""
    if isinstance(obj, dict):
        return {k: restore_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [restore_nonfinite(v) for v in obj]
    if isinstance(obj, str) and obj in ("nan", "inf", "-inf"):
        return float(obj)
    return obj
