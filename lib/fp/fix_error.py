"""The β fix's own rounding error in the paper placement (chapter 7).

In the authors' code the exponent argument S − m is a BF16 difference (S and m are BF16 tensors; `round_s_minus_m` of
the `paper` profile). The fix replaces m = r_m by m = β·r_m on rows with a repeated maximum (our kernel caps the shift
at `max_shift`), so every argument of the row has |S − m| ≥ (β − 1)·r_m, where the BF16 spacing is coarse: 0.25 on
[32, 64), 0.5 on [64, 128). exp turns that absolute rounding error into a relative error of P̄ of up to
e^{spacing/2} − 1 per entry (13% and 28%), independently for entries with different scores. Without the fix the
arguments near the maximum are small and fine-grained. The distorted weights enter O (which normalises by the same
distorted ℓ) and the log-sum-exp LSE = m + log ℓ, so the backward's P = exp(S − LSE), recomputed from the unshifted
scores, no longer sums to 1 over a row: its row sum is ℓ_exact/ℓ_computed, and rowsum(dS) ≠ 0.

`fix_error_profile(...)` measures this through `lib.fp.reference.emulate_forward` (bit-exact with the Triton kernel in
the CPU interpreter) on attention-shaped rows: each query row has its maximum r_m at two random keys (the fix's
trigger) and the other scores r_m − g with gaps g ~ Exponential(mean `gap`), so a few near-max competitors carry
weight (rounding the scores to BF16 turns the smallest gaps into further ties, as it does in training); V is mostly negative (−|N(1, 0.5)|, as in the paper's Fig. 6), all values on the BF16 grid. S is produced
exactly by q = S, k = I, scale 1 (head dim = number of keys = one key tile). Per r_m and variant it reports, against
FP64 attention: the mean and RMS relative error of O, and the mean |Σ_j exp(S_j − LSE) − 1| of the backward P.
"""
from __future__ import annotations

import numpy as np

from lib.fp.bf16 import round_rne
from lib.fp.fix import BETA, MAX_SHIFT
from lib.fp.numerics import get_profile
from lib.fp.reference import attention_fp64, emulate_forward

__all__ = ["VARIANTS", "tied_rows", "fix_error_profile", "shift_spacing"]

# name -> (numerics, fix): the paper placement without and with the fix, the fix with S − m in FP32 (its rounding
# point removed, everything else as the paper), and the fix in production FA2 numerics (FP32 S − m, ℓ and LSE).
VARIANTS = {
    "paper": ("paper", None),
    "paper+fix": ("paper", "beta"),
    "paper+fix, S−m FP32": (get_profile("paper").replace(round_s_minus_m=False), "beta"),
    "fa2+fix": ("fa2", "beta"),
}


def tied_rows(r_m: float, heads: int, n: int = 64, gap: float = 1.5, seed: int = 0):
    """(S, V): float32 (heads, n, n) scores on the BF16 grid with each row's maximum r_m at two random keys (or more:
    a gap below half a BF16 spacing rounds to r_m) and the other scores bf16(r_m − Exponential(gap)); V (heads, n, n)
    = −|N(1, 0.5)| on the BF16 grid."""
    if n < 2 or heads < 1 or gap <= 0:
        raise ValueError(f"need n >= 2, heads >= 1, gap > 0; got n={n}, heads={heads}, gap={gap}")
    rng = np.random.default_rng(seed)
    s = r_m - rng.exponential(gap, (heads, n, n))
    two = np.argsort(rng.random((heads, n, n)), axis=-1)[..., :2]        # two distinct random keys per row
    np.put_along_axis(s, two, r_m, axis=-1)
    s = round_rne(s.astype(np.float32), 7)
    np.put_along_axis(s, two, np.float32(r_m), axis=-1)   # r_m itself must be a BF16 value (the caller's choice)
    v = round_rne((-np.abs(rng.normal(1.0, 0.5, (heads, n, n)))).astype(np.float32), 7)
    return s, v


def shift_spacing(r_m, beta: float = BETA, max_shift: float | None = MAX_SHIFT):
    """BF16 spacing (ulp) at the fix's shift (β − 1)·r_m (capped at max_shift): the grid of the largest arguments."""
    d = np.asarray((beta - 1.0) * np.asarray(r_m, dtype=np.float64))
    if max_shift is not None:
        d = np.minimum(d, max_shift)
    return 2.0 ** (np.floor(np.log2(d)) - 7)


def fix_error_profile(r_values=(1, 2, 4, 8, 16, 32, 64), heads: int = 16, n: int = 64, gap: float = 1.5,
                      beta: float = BETA, max_shift: float | None = MAX_SHIFT, seed: int = 0, variants=None) -> dict:
    """See the module docstring. r_values: tied maxima in score units (BF16 values > 0). Returns
    {"r": [...], "config": {...}, "variants": {name: {"o_bias", "o_rms", "psum_err", "psum_bias": [...]}}}:
    o_bias = mean of (O − O_fp64)/|O_fp64|, o_rms = its root mean square, psum_err = mean over rows of
    |Σ_j exp(S_j − LSE) − 1| (LSE from the emulated forward, in FP64 arithmetic), psum_bias = the signed mean."""
    variants = VARIANTS if variants is None else {k: VARIANTS[k] for k in variants}
    r_values = [float(r) for r in r_values]
    bad = [r for r in r_values if not r > 0 or float(round_rne(np.array([r], np.float32), 7)[0]) != r]
    if bad:
        raise ValueError(f"r_values must be positive BF16 values, got {bad}")
    out = {name: dict(o_bias=[], o_rms=[], psum_err=[], psum_bias=[]) for name in variants}
    for i, r in enumerate(r_values):
        s, v = tied_rows(r, heads, n, gap, seed + i)
        k = np.broadcast_to(np.eye(n, dtype=np.float32), s.shape).copy()
        ref = attention_fp64(s, k, v, causal=False, scale=1.0)["o"]
        for name, (nm, fix) in variants.items():
            f = emulate_forward(s, k, v, nm, causal=False, scale=1.0, block_m=n, block_n=n, fix=fix, beta=beta,
                                max_shift=max_shift)
            rel = (f.o.astype(np.float64) - ref) / np.abs(ref)
            psum = np.exp(s.astype(np.float64) - f.lse[..., None].astype(np.float64)).sum(-1) - 1.0
            out[name]["o_bias"].append(float(rel.mean()))
            out[name]["o_rms"].append(float(np.sqrt((rel ** 2).mean())))
            out[name]["psum_err"].append(float(np.abs(psum).mean()))
            out[name]["psum_bias"].append(float(psum.mean()))
    return dict(r=r_values, variants=out,
                config=dict(heads=heads, n=n, gap=gap, beta=beta, max_shift=max_shift, seed=seed,
                            rows_per_r=heads * n, v="-|N(1, 0.5)|", min_ties_per_row=2))
