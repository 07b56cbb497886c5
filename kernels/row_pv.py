"""Row-wise P̄V-then-round: the one matmul of attention where chapter 1's rounding bias lives.

For each problem b (rows of scores S[b] ∈ FP32^{R×N}, values V[b] ∈ R^{N×D}) the kernel computes

    m  = rowmax(S)              (optionally the paper's β shift: β·m for a repeated positive max, 0 for a negative one)
    P̄  = exp(S − m)              FP32, then rounded to M mantissa bits as the matmul operand
    ℓ  = rowsum(P̄)              FP32, of the rounded P̄ (so numerator and denominator see the same operands)
    Ō  = P̄ V                    accumulated in FP32 by `tl.dot`
    PV = round(Ō)               the unnormalised product, stored in M bits
    O_rtn = round(PV / ℓ)        "round then normalise" (the authors' PyTorch code)
    O_ntr = round(Ō / ℓ)         "normalise then round" (production FlashAttention-2)

Two paths through the same kernel (`NATIVE` constexpr):
* emulated (CPU interpreter and GPU): P̄ and V are FP32 values on the M-bit grid, `tl.dot(..., input_precision=
  "ieee")`, and every rounding goes through `kernels.rounding` (RNE or stochastic). Bit-exact in the interpreter.
* native (GPU only, M = 7): P̄ is cast with `.to(tl.bfloat16)`, V is a BF16 tensor, `tl.dot` runs on the tensor
  cores with an FP32 accumulator, and the outputs are cast with `.to(tl.bfloat16)`. This is what hardware does.
All outputs are returned as FP32 tensors holding values on the M-bit grid.
"""
import torch
import triton
import triton.language as tl

from kernels.rounding import rne_mantissa, sr_mantissa

__all__ = ["row_pv", "row_pv_kernel"]


@triton.jit
def _round_out(x, offs, seed, M: tl.constexpr, STOCHASTIC: tl.constexpr, NATIVE: tl.constexpr):
    """Round FP32 x to M bits: stochastic (Philox bits from (seed, offs)), native BF16 cast, or emulated RNE."""
    if STOCHASTIC:
        y = sr_mantissa(x, M, tl.randint(seed, offs))
    elif NATIVE:
        y = x.to(tl.bfloat16).to(tl.float32)
    else:
        y = rne_mantissa(x, M)
    return y


@triton.jit
def row_pv_kernel(S, V, P, PV, O_RTN, O_NTR, ACC, L, seed, beta, R, N,
                  stride_sb, stride_sr, stride_vb, stride_vn, stride_ob, stride_or,
                  D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, M: tl.constexpr,
                  USE_BETA: tl.constexpr, STOCHASTIC: tl.constexpr, NATIVE: tl.constexpr):
    b = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    keys = tl.arange(0, BLOCK_N)
    feats = tl.arange(0, D)
    row_ok = rows < R
    key_ok = keys < N
    s = tl.load(S + b * stride_sb + rows[:, None] * stride_sr + keys[None, :],
                mask=row_ok[:, None] & key_ok[None, :], other=float("-inf"))
    mx = tl.max(s, 1)
    if USE_BETA:  # the paper's fix: shift a repeated row max so that no entry of P̄ is exactly 1
        n_max = tl.sum((s == mx[:, None]).to(tl.int32), 1)
        mx = tl.where((n_max > 1) & (mx > 0), beta * mx, mx)
        mx = tl.where((n_max > 1) & (mx < 0), 0.0, mx)
    mx = tl.where(row_ok, mx, 0.0)  # padded rows: keep exp finite
    p = tl.exp(s - mx[:, None])
    v_ptrs = V + b * stride_vb + keys[:, None] * stride_vn + feats[None, :]
    if NATIVE:
        p_lp = p.to(tl.bfloat16)
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)          # a bfloat16 tensor
        acc = tl.dot(p_lp, v)                                         # tensor cores, FP32 accumulator
        ell = tl.sum(p_lp.to(tl.float32), 1)
    else:
        p_lp = rne_mantissa(p, M)
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)          # FP32 values on the M-bit grid
        acc = tl.dot(p_lp, v, input_precision="ieee")
        ell = tl.sum(p_lp, 1)
    ell = tl.where(row_ok, ell, 1.0)
    p_offs = b * stride_sb + rows[:, None] * stride_sr + keys[None, :]
    tl.store(P + p_offs, p_lp.to(tl.float32), mask=row_ok[:, None] & key_ok[None, :])
    o_offs = b * stride_ob + rows[:, None] * stride_or + feats[None, :]
    o_mask = row_ok[:, None]
    pv = _round_out(acc, o_offs, seed, M, STOCHASTIC, NATIVE)
    o_rtn = _round_out(pv / ell[:, None], o_offs, seed + 1, M, STOCHASTIC, NATIVE)
    o_ntr = _round_out(acc / ell[:, None], o_offs, seed + 2, M, STOCHASTIC, NATIVE)
    tl.store(PV + o_offs, pv, mask=o_mask)
    tl.store(O_RTN + o_offs, o_rtn, mask=o_mask)
    tl.store(O_NTR + o_offs, o_ntr, mask=o_mask)
    tl.store(ACC + o_offs, acc, mask=o_mask)
    tl.store(L + b * R + rows, ell, mask=row_ok)


def row_pv(S: torch.Tensor, V: torch.Tensor, m: int = 7, beta: float | None = None, stochastic: bool = False,
           seed: int = 0, native: bool = False, block_r: int = 16) -> dict:
    """Run the row-wise P̄V kernel.

    S: (B, R, N) float32 scores. V: (B, N, D) float32 values on the m-bit grid (converted to BF16 for the native
    path; D a power of two >= 16). Returns float32 tensors {"pv", "o_rtn", "o_ntr", "acc"} of shape (B, R, D) and
    {"ell"} of shape (B, R) and {"p"} (the rounded P̄ operand, as FP32) of shape (B, R, N); "acc" is the FP32
    accumulator before rounding.
    native=True needs a GPU and m = 7; stochastic rounding uses Philox(seed, element offset)."""
    from lib.book.setup import INTERPRET
    for name, t in (("S", S), ("V", V)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32 or t.dim() != 3:
            raise TypeError(f"{name} must be a 3-d float32 tensor, got {t.dtype} with shape {tuple(t.shape)}")
    B, R, N = S.shape
    if V.shape[0] != B or V.shape[1] != N:
        raise ValueError(f"V must have shape (B={B}, N={N}, D), got {tuple(V.shape)}")
    D = V.shape[2]
    if D < 16 or D & (D - 1):
        raise ValueError(f"D must be a power of two >= 16 (tl.dot), got {D}")
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 23:
        raise ValueError(f"m must be an int in [1, 23], got {m!r}")
    if beta is not None and not beta > 1:
        raise ValueError(f"beta must be > 1 (or None), got {beta}")
    if native and (m != 7 or INTERPRET):
        raise ValueError("the native path needs m = 7 (BF16) and a GPU (the interpreter's bfloat16 is wrong)")
    if N > 4096:
        raise ValueError(f"one key tile per row: N must be <= 4096, got {N}")
    S = S.contiguous()
    if native:
        V_bf = V.to(torch.bfloat16)
        if not torch.equal(V_bf.float(), V):
            raise ValueError("V must hold BF16-representable values for the native path (round it first)")
        V = V_bf
    V = V.contiguous()
    out = {k: torch.empty((B, R, D), dtype=torch.float32, device=S.device) for k in ("pv", "o_rtn", "o_ntr", "acc")}
    out["ell"] = torch.empty((B, R), dtype=torch.float32, device=S.device)
    out["p"] = torch.empty_like(S)
    block_n = max(16, triton.next_power_of_2(N))
    grid = (B, triton.cdiv(R, block_r))
    row_pv_kernel[grid](S, V, out["p"], out["pv"], out["o_rtn"], out["o_ntr"], out["acc"], out["ell"], seed,
                        float(beta) if beta is not None else 1.0, R, N,
                        S.stride(0), S.stride(1), V.stride(0), V.stride(1), out["pv"].stride(0), out["pv"].stride(1),
                        D=D, BLOCK_R=block_r, BLOCK_N=block_n, M=m, USE_BETA=beta is not None,
                        STOCHASTIC=stochastic, NATIVE=native)
    return out
