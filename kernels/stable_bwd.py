"""Backward of `stable_attention`: the δ pre-kernel and one kernel for dK, dV and dQ (FlashAttention-2, no atomics).

Adapted from the Triton tutorial `python/tutorials/06-fused-attention.py` (Triton 3.6, MIT licence), whose layout
it keeps: program i of head bh computes dK, dV for keys [i·BIG, (i+1)·BIG) (query tiles of STEP rows, causal: from
the diagonal down) and then dQ for queries [i·BIG, (i+1)·BIG) (key tiles of STEP keys, causal: up to the diagonal).
Under causal masking the two halves' work adds up to the same total in every program.
Layout as `kernels/stable_fwd.py`: q, k, v, dO, dQ, dK, dV contiguous (batch·heads, T, head_dim); LSE and δ FP32
(batch·heads, T). LSE is the forward's, in its units (those of the unscaled q·kᵀ natively, natural in EMULATE).

Per (query tile, key tile), FA2 numerics ("fa2" in `lib.fp.numerics`): P = exp(S − LSE) in FP32 from the recomputed
FP32 scores, dP = dO·Vᵀ in FP32, dS = P∘(dP − δ) in FP32, P and dS cast to BF16 only as matmul operands, FP32
accumulators, dQ and dK times the scale once at the end, each gradient cast once on store. δ = rowsum(dO∘O) in FP32
from the saved O: the returned (BF16) O, or with delta="fp32_o" the forward's FP32 O before its final rounding.
The β fix needs nothing here: it only chose the max that LSE = m + log ℓ absorbed.
EMULATE follows `lib.fp.reference.emulate_backward` op for op (natural exp, FP32 `ieee` matmuls, the bit-exact RNE
helper for the operands), with BIG = STEP = the oracle's tile.

Changes from the Triton tutorial:
* no pre-scaled K on the host (that rounds k·scale to BF16); the scores are scaled in FP32 as in the forward,
  after LSE is subtracted (natively P = exp2((t − LSE)·c): on a one-hot row exactly 1 at the max, as the forward's);
* any T (ragged tiles: masked keys, and padding query rows have LSE = +inf so P = 0) and causal or not;
* left-to-right order in both loops (the tutorial's dQ loop starts at the diagonal), as the oracle sums;
* the dK/dV scores are computed keys × queries natively (no register transposes before the dV, dK matmuls, as in the
  tutorial) but queries × keys in EMULATE, because numpy's matmul is not bit-symmetric under transposition;
* no diagonal sub-slicing (BLK_SLICE_FACTOR); tile sizes, warps and stages are autotuned;
* TMA descriptors (made in the kernel) for the loop's tiles when USE_TMA; STATIC_LOOPS as in the forward.
"""
import triton
import triton.language as tl

from kernels.stable_fwd import (exp_arg, exp_k, load_tile, logit_units, mask_scores, mm, operand, store_tile,
                                tile_source)

__all__ = ["attn_delta_kernel", "attn_bwd_kernel", "attn_bwd_tuned", "BWD_CONFIGS", "BWD_FALLBACK", "DELTA_BLOCK"]

DELTA_BLOCK = 64    # rows per program of the δ pre-kernel (the oracle's δ tile)


@triton.jit
def attn_delta_kernel(O, DO, DELTA, T, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """δ = rowsum(dO∘O) in FP32 for one (row tile, batch·head)."""
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    base = bh.to(tl.int64) * T * HEAD_DIM
    o = load_tile(O + base, tl.program_id(0) * BLOCK_M, T, BLOCK_M, HEAD_DIM, False).to(tl.float32)
    do = load_tile(DO + base, tl.program_id(0) * BLOCK_M, T, BLOCK_M, HEAD_DIM, False).to(tl.float32)
    tl.store(DELTA + bh.to(tl.int64) * T + rows, tl.sum(o * do, 1), mask=rows < T)


@triton.jit
def _p_ds(qk, dp, lse, delta, qk_scale, qpos, kpos, T, CAUSAL: tl.constexpr, MASK: tl.constexpr,
          EMULATE: tl.constexpr, BASE2: tl.constexpr):
    """P = exp(S − LSE) and dS = P∘(dP − δ) of one tile, FP32, in either orientation (lse, delta, qpos, kpos come
    as row or column vectors to match qk and dp)."""
    t, c = logit_units(qk, qk_scale, BASE2)
    if MASK:
        t = mask_scores(t, qpos, kpos, T, CAUSAL)
    p = exp_k(exp_arg(t, c, lse), BASE2)
    return p, p * (dp - delta)


@triton.jit
def _dkdv_step(dk, dv, k, v, q_src, do_src, LSE_bh, DELTA_bh, start_m, offs_n, qk_scale, T,
               HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
               EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr):
    """One query tile of the dK/dV loop: dV += Pᵀ·dO, dK += dSᵀ·Q (unscaled)."""
    offs_m = start_m + tl.arange(0, BLOCK_Q)
    q = load_tile(q_src, start_m, T, BLOCK_Q, HEAD_DIM, USE_TMA)
    do = load_tile(do_src, start_m, T, BLOCK_Q, HEAD_DIM, USE_TMA)
    lse = tl.load(LSE_bh + offs_m, mask=offs_m < T, other=float("inf"))
    delta = tl.load(DELTA_bh + offs_m, mask=offs_m < T, other=0.0)
    if EMULATE:
        p, ds = _p_ds(mm(q, k.T, None, EMULATE), mm(do, v.T, None, EMULATE), lse[:, None], delta[:, None], qk_scale,
                      offs_m[:, None], offs_n[None, :], T, CAUSAL, MASK, EMULATE, BASE2)
        p_t = operand(p, do.dtype, EMULATE).T
        ds_t = operand(ds, q.dtype, EMULATE).T
    else:
        p_t, ds_t = _p_ds(mm(k, q.T, None, EMULATE), mm(v, do.T, None, EMULATE), lse[None, :], delta[None, :],
                          qk_scale, offs_m[None, :], offs_n[:, None], T, CAUSAL, MASK, EMULATE, BASE2)
        p_t = operand(p_t, do.dtype, EMULATE)
        ds_t = operand(ds_t, q.dtype, EMULATE)
    dv = mm(p_t, do, dv, EMULATE)
    dk = mm(ds_t, q, dk, EMULATE)
    return dk, dv


@triton.jit
def _dkdv_steps(dk, dv, k, v, q_src, do_src, LSE_bh, DELTA_bh, lo, hi, offs_n, qk_scale, T,
                HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
                EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr, STATIC_LOOPS: tl.constexpr,
                N_STEPS: tl.constexpr):
    """The query tiles starting at lo, lo + BLOCK_Q, … below hi, in order."""
    if STATIC_LOOPS:
        for i in range(N_STEPS):
            if (i * BLOCK_Q >= lo) & (i * BLOCK_Q < hi):
                dk, dv = _dkdv_step(dk, dv, k, v, q_src, do_src, LSE_bh, DELTA_bh, i * BLOCK_Q, offs_n, qk_scale, T,
                                    HEAD_DIM, BLOCK_Q, CAUSAL, MASK, EMULATE, BASE2, USE_TMA)
    else:
        for start_m in tl.range(lo, hi, BLOCK_Q):
            start_m = tl.multiple_of(start_m, BLOCK_Q)
            dk, dv = _dkdv_step(dk, dv, k, v, q_src, do_src, LSE_bh, DELTA_bh, start_m, offs_n, qk_scale, T,
                                HEAD_DIM, BLOCK_Q, CAUSAL, MASK, EMULATE, BASE2, USE_TMA)
    return dk, dv


@triton.jit
def _dq_step(dq, q, do, lse, delta, k_src, v_src, start_n, offs_m, qk_scale, T,
             HEAD_DIM: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
             EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr):
    """One key tile of the dQ loop: dQ += dS·K (unscaled)."""
    k = load_tile(k_src, start_n, T, BLOCK_K, HEAD_DIM, USE_TMA)
    v = load_tile(v_src, start_n, T, BLOCK_K, HEAD_DIM, USE_TMA)
    p, ds = _p_ds(mm(q, k.T, None, EMULATE), mm(do, v.T, None, EMULATE), lse[:, None], delta[:, None], qk_scale,
                  offs_m[:, None], (start_n + tl.arange(0, BLOCK_K))[None, :], T, CAUSAL, MASK, EMULATE, BASE2)
    return mm(operand(ds, k.dtype, EMULATE), k, dq, EMULATE)


@triton.jit
def _dq_steps(dq, q, do, lse, delta, k_src, v_src, lo, hi, offs_m, qk_scale, T,
              HEAD_DIM: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
              EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr, STATIC_LOOPS: tl.constexpr,
              N_STEPS: tl.constexpr):
    """The key tiles starting at lo, lo + BLOCK_K, … below hi, in order."""
    if STATIC_LOOPS:
        for j in range(N_STEPS):
            if (j * BLOCK_K >= lo) & (j * BLOCK_K < hi):
                dq = _dq_step(dq, q, do, lse, delta, k_src, v_src, j * BLOCK_K, offs_m, qk_scale, T, HEAD_DIM,
                              BLOCK_K, CAUSAL, MASK, EMULATE, BASE2, USE_TMA)
    else:
        for start_n in tl.range(lo, hi, BLOCK_K):
            start_n = tl.multiple_of(start_n, BLOCK_K)
            dq = _dq_step(dq, q, do, lse, delta, k_src, v_src, start_n, offs_m, qk_scale, T, HEAD_DIM, BLOCK_K,
                          CAUSAL, MASK, EMULATE, BASE2, USE_TMA)
    return dq


@triton.jit
def attn_bwd_kernel(Q, K, V, DO, DQ, DK, DV, LSE, DELTA, qk_scale, scale, T,
                    HEAD_DIM: tl.constexpr, BLOCK_BIG: tl.constexpr, BLOCK_STEP: tl.constexpr,
                    CAUSAL: tl.constexpr, EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr,
                    STATIC_LOOPS: tl.constexpr, N_STEPS: tl.constexpr):
    """dK, dV of keys and dQ of queries [pid·BIG, (pid+1)·BIG) of one batch·head. qk_scale as in the forward
    (LSE in the forward's units; P = exp_k((t − LSE)·c)); `scale` multiplies dQ and dK at the end. BLOCK_BIG must
    be a multiple of BLOCK_STEP."""
    bh = tl.program_id(1)
    start = tl.program_id(0) * BLOCK_BIG
    base = bh.to(tl.int64) * T * HEAD_DIM
    lse_bh = LSE + bh.to(tl.int64) * T
    delta_bh = DELTA + bh.to(tl.int64) * T
    # The loops' (STEP, HEAD_DIM) tiles come through TMA; the program's own BIG tiles are loaded and stored once.
    q_src = tile_source(Q + base, T, BLOCK_STEP, HEAD_DIM, USE_TMA)
    do_src = tile_source(DO + base, T, BLOCK_STEP, HEAD_DIM, USE_TMA)
    k_src = tile_source(K + base, T, BLOCK_STEP, HEAD_DIM, USE_TMA)
    v_src = tile_source(V + base, T, BLOCK_STEP, HEAD_DIM, USE_TMA)
    end = tl.minimum(start + BLOCK_BIG, T)

    # ---- dK, dV of keys [start, start + BIG): query tiles top to bottom
    offs_n = start + tl.arange(0, BLOCK_BIG)
    k = load_tile(K + base, start, T, BLOCK_BIG, HEAD_DIM, False)
    v = load_tile(V + base, start, T, BLOCK_BIG, HEAD_DIM, False)
    dk = tl.zeros([BLOCK_BIG, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_BIG, HEAD_DIM], tl.float32)
    if CAUSAL:
        dk, dv = _dkdv_steps(dk, dv, k, v, q_src, do_src, lse_bh, delta_bh, start, end, offs_n, qk_scale, T,
                             HEAD_DIM, BLOCK_STEP, CAUSAL, True, EMULATE, BASE2, USE_TMA, STATIC_LOOPS, N_STEPS)
        dk, dv = _dkdv_steps(dk, dv, k, v, q_src, do_src, lse_bh, delta_bh, start + BLOCK_BIG, T, offs_n, qk_scale,
                             T, HEAD_DIM, BLOCK_STEP, CAUSAL, False, EMULATE, BASE2, USE_TMA, STATIC_LOOPS, N_STEPS)
    else:
        # padding query rows have LSE = +inf, so P = 0 there: no mask needed in this direction
        dk, dv = _dkdv_steps(dk, dv, k, v, q_src, do_src, lse_bh, delta_bh, 0, T, offs_n, qk_scale, T, HEAD_DIM,
                             BLOCK_STEP, CAUSAL, False, EMULATE, BASE2, USE_TMA, STATIC_LOOPS, N_STEPS)
    store_tile(DK + base, start, (dk * scale).to(DK.dtype.element_ty), T, BLOCK_BIG, HEAD_DIM, False)
    store_tile(DV + base, start, dv.to(DV.dtype.element_ty), T, BLOCK_BIG, HEAD_DIM, False)

    # ---- dQ of queries [start, start + BIG): key tiles left to right
    offs_m = start + tl.arange(0, BLOCK_BIG)
    q = load_tile(Q + base, start, T, BLOCK_BIG, HEAD_DIM, False)
    do = load_tile(DO + base, start, T, BLOCK_BIG, HEAD_DIM, False)
    lse = tl.load(lse_bh + offs_m, mask=offs_m < T, other=float("inf"))
    delta = tl.load(delta_bh + offs_m, mask=offs_m < T, other=0.0)
    dq = tl.zeros([BLOCK_BIG, HEAD_DIM], tl.float32)
    if CAUSAL:
        diag = start
    else:
        diag = T // BLOCK_STEP * BLOCK_STEP         # whole key tiles; the ragged last one needs the mask
        end = T
    dq = _dq_steps(dq, q, do, lse, delta, k_src, v_src, 0, diag, offs_m, qk_scale, T, HEAD_DIM, BLOCK_STEP,
                   CAUSAL, False, EMULATE, BASE2, USE_TMA, STATIC_LOOPS, N_STEPS)
    dq = _dq_steps(dq, q, do, lse, delta, k_src, v_src, diag, end, offs_m, qk_scale, T, HEAD_DIM, BLOCK_STEP,
                   CAUSAL, True, EMULATE, BASE2, USE_TMA, STATIC_LOOPS, N_STEPS)
    store_tile(DQ + base, start, (dq * scale).to(DQ.dtype.element_ty), T, BLOCK_BIG, HEAD_DIM, False)


# --------------------------------------------------------------------------------------------- launch configs
BWD_FALLBACK = triton.Config(dict(BLOCK_BIG=64, BLOCK_STEP=64), num_warps=4, num_stages=2)
BWD_CONFIGS = [BWD_FALLBACK] + [
    triton.Config(dict(BLOCK_BIG=big, BLOCK_STEP=step), num_warps=w, num_stages=s)
    for big, step, w, s in ((128, 32, 4, 5), (128, 32, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (64, 32, 4, 3),
                            (64, 64, 4, 3))]


def _prune(configs, named_args, **kwargs):
    T = {**named_args, **kwargs}["T"]
    return [c for c in configs if c.kwargs["BLOCK_BIG"] <= max(64, T)] or [BWD_FALLBACK]


attn_bwd_tuned = triton.autotune(configs=BWD_CONFIGS, key=["T", "HEAD_DIM", "CAUSAL"],
                                 prune_configs_by={"early_config_prune": _prune})(attn_bwd_kernel)
