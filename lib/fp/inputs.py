"""Shared attention inputs: the attention-shaped rows with exactly tied maxima that chapters 1–3 test on.

`attention_inputs(kind, B, H, N, d, seed)` — the inputs on which the authors' placement was established (chapter 2,
`lib.studies.kernel.paper_placement`) and on which Golden et al.'s microbenchmark runs its "attention" rows
(chapter 3, `lib.studies.golden.fa_deviation`).
"""
from __future__ import annotations

import math

import torch

__all__ = ["attention_inputs"]


def attention_inputs(kind: str, B: int, H: int, N: int, d: int, seed: int):
    """BF16 (q, k, v, dO) of shape (B, H, N, d) on the CPU.

    * "random": N(0, 1) entries.
    * "attention": concentrated rows with exactly tied maxima, as in the paper's failing layer: a few "sink" keys
      are the same vector u (so their scores tie bit-for-bit), queries are aligned with u (scores ≈ 10–20 on the
      sinks, O(1) elsewhere), V is mostly negative (N(−2, 0.3)), dO mostly negative (sign-correlated with O)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        q, k, v, do = (torch.randn(B, H, N, d, generator=g) for _ in range(4))
    elif kind == "attention":
        u = torch.randn(B, H, 1, d, generator=g)
        u = u / u.norm(dim=-1, keepdim=True)
        k = 0.5 * torch.randn(B, H, N, d, generator=g)
        sinks = torch.tensor([0, 1, 2]) if N > 3 else torch.tensor([0])
        sinks = torch.unique(torch.cat([sinks, torch.randint(0, N, (max(1, N // 128),), generator=g)]))
        k[:, :, sinks, :] = u * 4.0
        gain = 2.5 + 2.5 * torch.rand(B, H, N, 1, generator=g)          # |q·u|·α·4 ≈ 10..20 on the sinks
        q = gain * u * math.sqrt(d) + 0.5 * torch.randn(B, H, N, d, generator=g)
        v = -2.0 + 0.3 * torch.randn(B, H, N, d, generator=g)
        do = -1.0 + 0.5 * torch.randn(B, H, N, d, generator=g)
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    return tuple(t.to(torch.bfloat16) for t in (q, k, v, do))
