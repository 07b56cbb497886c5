"""The precisions the tests' tolerances are written in. A tolerance names the computation whose rounding it allows
for, never one machine's BLAS: matmuls, SVDs and sums over threads add in an order that differs between machines
and thread counts, so an FP32 result is only known to its error bound. A sum or dot product of n terms in any order
is off by at most γ_n·Σ|terms|, γ_n = n·u/(1 − n·u) ≈ n·eps/2 (u = eps/2 the unit roundoff; Higham, Accuracy and
Stability of Numerical Algorithms, §3.1)."""

EPS64 = 2.0 ** -52     # FP64 machine epsilon: one rounding moves a value by ≤ EPS64/2, relative
EPS32 = 2.0 ** -23     # FP32
BF16 = 2.0 ** -8       # BF16 keeps 8 significant bits: one rounding (RNE) moves a value by ≤ 2^-8, relative


def attention_rtol(n: int, d: int, backward: bool = False, eps: float = EPS32) -> float:
    """Bound on attention (length n, head dim d) computed in precision `eps` (FP32 by default) against an exact one,
    relative to the largest entry of the result (the sums' magnitude; random inputs keep them within a small factor):
    S = QKᵀ sums d terms, the softmax's row sum and PV ≤ n; each stage ≤ γ of its length, so (n + d)·eps (2γ: room
    for the exp and the scaling). The backward chains dP = dO·Vᵀ, dS = P∘(dP − δ) and dS·K (or dSᵀQ) on top of the
    forward's P: twice that."""
    return (2 if backward else 1) * (n + d) * eps
