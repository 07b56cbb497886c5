"""The tie bias against the rounding block: how much of it survives per-tile rounding (numpy, CPU).

The paper's mechanism needs two tied maxima (P̄ = 1 twice) inside one FP32 sum that is then rounded to BF16. Where
that sum is rounded depends on the tiling of the rounding points (`lib.fp.numerics.Numerics.round_block`): the
paper's analysis is untiled (round_block = −1), the authors' code rounds P̄V, ℓ and the O accumulator per 512-key
tile (round_block = 512), our kernels per 64-key compute tile (round_block = 0). Two maxima that fall into
different tiles are rounded apart, so finer tiles dilute the bias.

`o_error_by_round_block` measures it through the kernels' oracle `lib.fp.reference.emulate_forward` (bit-exact with
the Triton kernel in the CPU interpreter) on attention-shaped rows from `lib.fp.rounding_bias.make_rows`: per query
row k tied maxima s_max ~ U(1, 4) at random keys, the other scores s_max − gap − U(0, 4), V negative, every value
on the BF16 grid. The scores enter exactly (q = S, k = I, scale 1, head dim = number of keys), so only the
forward's rounding placement and its tiling act. Error convention as in `lib.fp.rounding_bias`: (O − O_fp64) in
ULPs of O_fp64's binade at `m` bits, mean over all outputs, 95 % Student-t interval over independent problems.

Prediction: the bias needs both maxima in one block, so with k = 2 maxima at uniformly random keys the mean error
is the untiled error times `same_block_probability` (for N keys in blocks of w: (w − 1)/(N − 1)).

`grad_error_by_round_block` measures the backward's side: with lp gradient accumulators (round_grad_acc, the paper
placement) the dQ/dK/dV accumulators take one rounded sum per tile or per logical block; fewer, larger sums mean
fewer roundings.

`tie_coverage` counts how many rows whose global maximum repeats have the repeat inside one rounding block, i.e.
how often a per-block tie test (the β fix's trigger) can see it at all.
"""
from __future__ import annotations

import numpy as np

from lib.fp.bf16 import ulp
from lib.fp.fix import TIE_TOL
from lib.fp.numerics import get_profile
from lib.fp.reference import attention_fp64, emulate_forward
from lib.fp.rounding_bias import cluster_ci, make_rows

__all__ = ["tied_attention_rows", "o_error_by_round_block", "tie_coverage", "round_block_label",
           "same_block_probability", "grad_error_by_round_block"]


def round_block_label(round_block: int, block_n: int = 64) -> str:
    """'64-key tiles' (0), '512-key blocks' (512), 'untiled' (−1): how a round_block reads in a table."""
    if round_block == 0:
        return f"{block_n}-key tiles"
    if round_block == -1:
        return "untiled"
    return f"{round_block}-key blocks"


def tied_attention_rows(seed: int, n_problems: int, n_keys: int, *, k: int = 2, gap: float = 14.0,
                        frac_neg: float = 1.0, m: int = 7):
    """(S, V) float32, both (n_problems, n_keys, n_keys): `n_keys` query rows per problem over `n_keys` keys
    (`make_rows` with rows = head dim = n_keys, so q = S, k = I reproduce S exactly), on the m-bit grid."""
    rng = np.random.default_rng(seed)
    return make_rows(rng, n_problems, n_keys, n_keys, n_keys, k, gap, frac_neg, m)


def o_error_by_round_block(seed: int = 0, n_problems: int = 8, n_keys: int = 256, round_blocks=(0, -1), *,
                           profile="paper", controls=("fa2",), k: int = 2, gap: float = 14.0, frac_neg: float = 1.0,
                           block: int = 64, fix=None, m: int = 7) -> dict:
    """Mean signed O error (ULPs) of `profile` (mantissa width `m`) per round_block, plus each profile in
    `controls` at round_block 0, on `tied_attention_rows(seed, n_problems, n_keys, ...)` with compute tiles of
    `block` × `block`. Returns {"config": {...}, "arms": [{"label", "profile", "round_block", "mean_ulps",
    "ci95", "n_outputs"}, ...]}. Seeds: one generator seeded `seed` draws every problem."""
    S, V = tied_attention_rows(seed, n_problems, n_keys, k=k, gap=gap, frac_neg=frac_neg, m=m)
    eye = np.broadcast_to(np.eye(n_keys, dtype=np.float32), S.shape).copy()
    exact = attention_fp64(S, eye, V, causal=False, scale=1.0)["o"]
    unit = ulp(exact, m)
    arms = [(profile, rb) for rb in round_blocks] + [(c, 0) for c in controls]
    rows = []
    for prof, rb in arms:
        nm = get_profile(prof).replace(round_block=rb, mantissa_bits=m)
        o = emulate_forward(S, eye, V, nm, causal=False, scale=1.0, block_m=block, block_n=block, fix=fix).o
        mean, hw = cluster_ci((o.astype(np.float64) - exact) / unit)
        name = prof if isinstance(prof, str) else "custom"
        rows.append({"label": f"{name}, {round_block_label(rb, block)}", "profile": name, "round_block": rb,
                     "mean_ulps": mean, "ci95": hw, "n_outputs": int(o.size)})
    return {"config": dict(seed=seed, n_problems=n_problems, n_keys=n_keys, k=k, gap=gap, frac_neg=frac_neg,
                           block=block, fix=fix, m=m, rows_per_problem=n_keys, outputs_per_row=n_keys),
            "arms": rows}


def tie_coverage(S, round_block: int, block_n: int = 64, tie_tol: float = TIE_TOL) -> float:
    """Of the rows of S (..., N) whose maximum occurs at least twice (within tie_tol), the fraction in which some
    rounding block (`round_block` keys, 0 = tiles of `block_n`, −1 = the row) holds two of those maxima, i.e. in
    which a per-block tie test fires on the row's global maximum. NaN when no row repeats its maximum."""
    S = np.asarray(S)
    N = S.shape[-1]
    width = block_n if round_block == 0 else (N if round_block == -1 else round_block)
    if width < 1:
        raise ValueError(f"round_block must be 0, -1 or positive, got {round_block}")
    near = S >= (S.max(axis=-1, keepdims=True) - tie_tol)
    repeated = near.sum(axis=-1) >= 2
    if not repeated.any():
        return float("nan")
    pad = -N % width
    per_block = np.pad(near, [(0, 0)] * (S.ndim - 1) + [(0, pad)]).reshape(*S.shape[:-1], -1, width).sum(-1)
    seen = (per_block >= 2).any(axis=-1)
    return float(seen[repeated].mean())


def same_block_probability(n_keys: int, round_block: int, block_n: int = 64) -> float:
    """Probability that two distinct keys drawn uniformly from `n_keys` fall into one rounding block (blocks of
    `round_block` keys aligned at 0, the last one partial; 0 = tiles of `block_n`, −1 = the whole row)."""
    if n_keys < 2:
        raise ValueError(f"need n_keys >= 2, got {n_keys}")
    width = block_n if round_block == 0 else (n_keys if round_block == -1 else round_block)
    sizes = [min(width, n_keys - start) for start in range(0, n_keys, width)]
    return sum(w * (w - 1) for w in sizes) / (n_keys * (n_keys - 1))


def grad_error_by_round_block(seed: int = 0, n: int = 1024, head_dim: int = 64, heads: int = 2, round_block: int = 512,
                              block: int = 64, profile="paper") -> dict:
    """Relative RMS error of dQ, dK, dV against FP64 (causal, BF16-valued N(0, 1) q, k, v, dO from torch seed
    `seed`), with the forward of `profile` at `round_block` and three backwards on its O and LSE: lp accumulators
    rounded per `block`-wide tile ("per tile": round_block 0 in the backward), per logical block ("per block": the
    kernels' semantics) and FP32 accumulators ("FP32": round_grad_acc off). Returns {"config", "arms": {name:
    {"dq", "dk", "dv"}}}; each value is ‖g − g_fp64‖₂ / ‖g_fp64‖₂ over the whole tensor."""
    import torch
    from lib.fp.reference import emulate_backward
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(1, heads, n, head_dim, generator=g).bfloat16().float().numpy() for _ in range(4))
    nm = get_profile(profile).replace(round_block=round_block)
    ref = attention_fp64(q, k, v, do, causal=True)
    fwd = emulate_forward(q, k, v, nm, causal=True, block_m=block, block_n=block)
    arms = {"per tile": nm.replace(round_block=0), "per block": nm, "FP32": nm.replace(round_grad_acc=False)}
    out = {}
    for name, bnm in arms.items():
        b = emulate_backward(q, k, v, fwd.o, fwd.lse, do, bnm, causal=True, block_m=block, block_n=block)
        out[name] = {key: float(np.linalg.norm(b[key] - ref[key]) / np.linalg.norm(ref[key]))
                     for key in ("dq", "dk", "dv")}
    return {"config": dict(seed=seed, n=n, head_dim=head_dim, heads=heads, round_block=round_block, block=block,
                           profile=profile if isinstance(profile, str) else "custom", causal=True),
            "arms": out}
