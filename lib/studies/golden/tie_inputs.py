"""What the β fix meets on `fa_deviation`'s attention-shaped inputs: how many query rows have a tied maximum in
their first key tile, and how many of those get a shift that the fix's underflow guard caps.

Chapter 3 uses it to say which fix its `paper + β fix` rows measure. The fix (`lib.fp.reference.fixed_row_max`)
fires per key tile on a row whose tile maximum r_m occurs at least twice and shifts that row's maximum by
(β − 1)·r_m (r_m > 0); the guard caps the shift at `max_shift`. The attention-shaped inputs put identical "sink"
keys at positions 0, 1 and 2, so every row's first key tile has a tied maximum whenever a sink wins the row.

Reads only the inputs (the caller regenerates them from their seed with the experiment's own `make_inputs`); it runs
no kernel.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def first_tile_ties(q: torch.Tensor, k: torch.Tensor, *, block_n: int, beta: float, max_shift: float) -> dict:
    """Tied maxima in the first key tile (keys 0 … block_n − 1) of attention inputs q, k (H, N, d) — chapter 3
    passes `fa_deviation`'s attention-shaped inputs, `lib.studies.golden.fa_deviation.make_inputs` (the experiment's
    own inputs, not a copy; readings sit below experiments, so the caller builds them).

    Scores α·q·k with α = 1/√d in FP32 on the BF16-valued inputs. Returns {"rows": H·N, "tied": rows whose tile maximum occurs ≥ 2 times (exact equality),
    "capped": tied rows with r_m > 0 and (β − 1)·r_m > max_shift, "r_lo", "r_hi": min and max of r_m over the tied
    rows (score units; NaN if none)}."""
    H, N, d = q.shape
    s = torch.einsum("hnd,hkd->hnk", q, k[:, :block_n]) * (1.0 / math.sqrt(d))   # (H, N, block_n) FP32
    r_m = s.max(-1).values
    tied = (s == r_m[..., None]).sum(-1) >= 2
    capped = tied & (r_m > 0) & ((beta - 1.0) * r_m > max_shift)
    rt = r_m[tied]
    return {"rows": int(H * N), "tied": int(tied.sum()), "capped": int(capped.sum()),
            "r_lo": float(rt.min()) if rt.numel() else float("nan"),
            "r_hi": float(rt.max()) if rt.numel() else float("nan")}


def fix_bias_words(bias_paper: float, bias_fix: float) -> str:
    """Words for how the β fix changed the signed mean error (in ULPs) of the paper placement: 'shrinks' if |bias|
    fell to at most half, 'grows' if it at least doubled, else 'leaves about the same size'; with the factor."""
    a, b = abs(bias_paper), abs(bias_fix)
    if not (np.isfinite(a) and np.isfinite(b)) or a == 0:
        return "cannot be compared"
    f = b / a
    if f <= 0.5:
        return f"shrinks the bias {1 / f:.2g}-fold"
    if f >= 2:
        return f"makes the bias {f:.2g} times as large, not smaller"
    return f"leaves the bias about the same size (×{f:.2g})"
