"""Chapter 7's live checks of the β fix on inputs with many tied row maxima (integer-valued q and k).

`fix_effect(...)` runs the numpy emulator of `lib.fp.reference` (bit-exact with the Triton kernel in the interpreter)
with and without the fix and reports, for (batch·heads, N, d) inputs with small-integer q and k (so scores are
multiples of the scale and ties are common):
  * how many (row, key tile) pairs had a repeated maximum (what the fix acts on),
  * the largest change of O in the FP32 profile (only rounding-level: softmax is shift-invariant),
  * the fraction of O entries the fix changes in the paper's BF16 placement (it is meant to change them).
"""
from __future__ import annotations

import numpy as np

from lib.fp.fix import BETA
from lib.fp.reference import attention_fp64, emulate_forward, fixed_row_max, padded_head_dim  # noqa: F401


def tied_inputs(seed: int, B: int = 2, N: int = 96, d: int = 32, lo: int = -2, hi: int = 2):
    """q, k small integers in [lo, hi]; v standard normal mostly negative (−|N(1, 0.5)|), float32, shape (B, N, d)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(lo, hi + 1, (B, N, d)).astype(np.float32)
    k = rng.integers(lo, hi + 1, (B, N, d)).astype(np.float32)
    v = (-np.abs(rng.normal(1.0, 0.5, (B, N, d)))).astype(np.float32)
    return q, k, v


def fix_effect(seed: int = 0, B: int = 2, N: int = 96, d: int = 32, block: int = 32, beta: float = BETA) -> dict:
    """See the module docstring. Scale = 1/sqrt(d); causal; tiles block × block."""
    q, k, v = tied_inputs(seed, B, N, d)
    scale = 1.0 / np.sqrt(d)
    s = np.einsum("bnd,bmd->bnm", q, k).astype(np.float32) * np.float32(scale)
    s = np.where(np.tril(np.ones((N, N), bool)), s, -np.inf).astype(np.float32)
    tiles = s.reshape(B, N, N // block, block) if N % block == 0 else None
    if tiles is None:
        raise ValueError(f"N={N} must be a multiple of block={block}")
    m_t = tiles.max(-1)
    repeated = (fixed_row_max(tiles, beta=beta) != m_t) & np.isfinite(m_t)
    kw = dict(causal=True, scale=scale, block_m=block, block_n=block)
    out = {"pairs": int(np.isfinite(m_t).sum()), "pairs_fixed": int(repeated.sum())}
    ref = attention_fp64(q, k, v, causal=True, scale=scale)["o"]
    for prof in ("fp32", "paper"):
        a = emulate_forward(q, k, v, prof, **kw).o
        b = emulate_forward(q, k, v, prof, fix="beta", beta=beta, **kw).o
        out[f"{prof}_max_abs_change"] = float(np.abs(a - b).max())
        out[f"{prof}_frac_changed"] = float((a != b).mean())
        out[f"{prof}_err_nofix"] = float(np.abs(a - ref).max())
        out[f"{prof}_err_fix"] = float(np.abs(b - ref).max())
        out[f"{prof}_mean_err_nofix"] = float((a - ref).mean())
        out[f"{prof}_mean_err_fix"] = float((b - ref).mean())
    return out
