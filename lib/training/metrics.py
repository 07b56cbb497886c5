"""Weight and attention metrics of the loss-explosion chapters.

* `spectral_norm(w)`: ‖W‖₂ (largest singular value) of a matrix or a batch of matrices, exact to FP64 rounding.
* `bf16_row_ties(scores)`: per row, does the maximum of the BF16-rounded scores occur ≥ 2 times (masked entries
  −inf are ignored); `tie_rate(scores)`: the fraction of such rows. `bf16_tile_ties(scores, block_n)`: the same,
  but only where two of the maxima share one key tile of `block_n` columns (what a per-tile fix can see).
* `rank1_share(m)`: σ₁² / Σσ², how close a matrix is to rank 1; `rank1_similarity(a, b)`: |⟨u_a, u_b⟩|·|⟨v_a, v_b⟩|
  of the top singular pairs (1: the same rank-1 direction up to sign, 0: orthogonal); `pairwise_rank1_similarity`.
  These measure the paper's "low-rank similarity" of gradient-error matrices across tokens and steps.
* `wasserstein_1d(a, b)`: the 1-Wasserstein distance between the empirical distributions of two samples (Golden et
  al.'s weight-difference metric), in the samples' units.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["spectral_norm", "bf16_row_ties", "bf16_tile_ties", "tie_rate", "rank1_share", "rank1_similarity",
           "pairwise_rank1_similarity", "wasserstein_1d"]


def spectral_norm(w: torch.Tensor) -> torch.Tensor:
    """‖W‖₂ of w (..., m, n): the largest singular value, as sqrt(λ_max(G)) of the Gram matrix G = W·Wᵀ (or Wᵀ·W,
    whichever is smaller) formed and diagonalised in FP64; returns shape (...) in w's dtype (FP32 for lower ones).

    Why not an SVD: the telemetry takes ‖W_Q‖₂ and ‖W_K‖₂ of every head and layer, and batched SVDs of these small
    matrices on the GPU took ≈ 0.5 s per telemetry step (30 % of a training run's time at telemetry every 50 steps).
    The symmetric eigensolver on the FP64 Gram matrix is a few milliseconds; λ_max of G is σ₁² to FP64 relative
    accuracy (the top eigenvalue of a symmetric matrix is perfectly conditioned), so σ₁ is exact to ~1e-15."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() < 2:
        raise ValueError(f"w must have at least 2 dimensions, got shape {tuple(w.shape)}")
    out_dtype = torch.float64 if w.dtype == torch.float64 else torch.float32
    w = w.detach().to(torch.float64)
    finite = torch.isfinite(w).flatten(-2).all(-1)
    out = torch.full(w.shape[:-2], float("nan"), dtype=torch.float64, device=w.device)
    # A matrix holding NaN/inf has no meaningful norm (and an eigensolver can iterate for minutes on one): NaN.
    if bool(finite.any()):
        x = w[finite]
        g = x @ x.transpose(-2, -1) if x.shape[-2] <= x.shape[-1] else x.transpose(-2, -1) @ x
        out[finite] = torch.linalg.eigvalsh(g)[..., -1].clamp_min(0.0).sqrt()
    return out.to(out_dtype)


def bf16_row_ties(scores: torch.Tensor) -> torch.Tensor:
    """Bool (...,) over rows of scores (..., n): True where the row max of the BF16-rounded scores occurs ≥ 2 times.
    Entries set to −inf (masked) never count; a row with < 2 finite entries cannot tie."""
    if not isinstance(scores, torch.Tensor) or scores.dim() < 1:
        raise ValueError("scores must be a tensor with a last (key) dimension")
    sb = scores.detach().to(torch.bfloat16)
    rmax = sb.amax(dim=-1, keepdim=True)
    at_max = (sb == rmax) & torch.isfinite(sb)
    return at_max.sum(dim=-1) >= 2


def bf16_tile_ties(scores: torch.Tensor, block_n: int) -> torch.Tensor:
    """Bool (...,) over rows of scores (..., n): True where the row max of the BF16-rounded scores occurs ≥ 2 times
    inside one key tile [j·block_n, (j+1)·block_n). A row that ties (`bf16_row_ties`) but is False here has its
    maxima only in different tiles: a per-tile tie test, as in the paper's Algorithm 1, does not fire on it."""
    if not isinstance(scores, torch.Tensor) or scores.dim() < 1:
        raise ValueError("scores must be a tensor with a last (key) dimension")
    if isinstance(block_n, bool) or not isinstance(block_n, int) or block_n < 1:
        raise ValueError(f"block_n must be a positive int, got {block_n!r}")
    sb = scores.detach().to(torch.bfloat16)
    n = sb.shape[-1]
    at_max = (sb == sb.amax(dim=-1, keepdim=True)) & torch.isfinite(sb)
    pad = (-n) % block_n
    if pad:
        at_max = torch.nn.functional.pad(at_max, (0, pad))
    per_tile = at_max.reshape(*at_max.shape[:-1], -1, block_n).sum(dim=-1)
    return per_tile.amax(dim=-1) >= 2


def tie_rate(scores: torch.Tensor) -> float:
    """Fraction of the rows of scores (..., n) that tie (see `bf16_row_ties`)."""
    return bf16_row_ties(scores).double().mean().item()


def _top_pair(m: np.ndarray):
    u, s, vt = np.linalg.svd(np.asarray(m, dtype=np.float64), full_matrices=False)
    return u[:, 0], s, vt[0]


def rank1_share(m) -> float:
    """σ₁² / Σσ² of a 2-D matrix (1 for rank 1; 1/min(m, n) for a matrix with equal singular values)."""
    m = np.asarray(m, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {m.shape}")
    s = np.linalg.svd(m, compute_uv=False)
    tot = float((s ** 2).sum())
    if tot == 0.0:
        raise ValueError("the zero matrix has no rank-1 share")
    return float(s[0] ** 2 / tot)


def rank1_similarity(a, b) -> float:
    """|⟨u_a, u_b⟩|·|⟨v_a, v_b⟩| of the top singular vectors of two same-shape 2-D matrices, in [0, 1]."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"expected two 2-D matrices of one shape, got {a.shape} and {b.shape}")
    ua, _, va = _top_pair(a)
    ub, _, vb = _top_pair(b)
    return float(abs(ua @ ub) * abs(va @ vb))


def pairwise_rank1_similarity(mats) -> np.ndarray:
    """(k, k) matrix of `rank1_similarity` between k same-shape matrices (diagonal 1)."""
    pairs = [_top_pair(np.asarray(m, dtype=np.float64)) for m in mats]
    k = len(pairs)
    out = np.ones((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            out[i, j] = out[j, i] = abs(pairs[i][0] @ pairs[j][0]) * abs(pairs[i][2] @ pairs[j][2])
    return out


def wasserstein_1d(a, b) -> float:
    """W₁ between the empirical distributions of samples a and b (any sizes): ∫|F_a(x) − F_b(x)| dx."""
    a = np.sort(np.asarray(a, dtype=np.float64).ravel())
    b = np.sort(np.asarray(b, dtype=np.float64).ravel())
    if a.size == 0 or b.size == 0:
        raise ValueError("wasserstein_1d needs two non-empty samples")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("wasserstein_1d needs finite samples")
    if a.size == b.size:
        return float(np.abs(a - b).mean())
    xs = np.concatenate([a, b])
    xs.sort(kind="mergesort")
    dx = np.diff(xs)
    fa = np.searchsorted(a, xs[:-1], side="right") / a.size
    fb = np.searchsorted(b, xs[:-1], side="right") / b.size
    return float(np.sum(np.abs(fa - fb) * dx))
