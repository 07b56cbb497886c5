"""Flash-attention backward: δ pre-kernel, dK/dV kernel and dQ kernel (no atomics), rounding points as constexprs.

Layout as in `kernels/flash_fwd.py`: q, k, v, o, dO, dQ, dK, dV are contiguous (batch·heads, seq, head_dim); LSE and
δ are FP32 (batch·heads, seq).

δ (the paper's channel, Qiu & Yao §3.2), `delta_source`:
* "saved_o" / "fp32_o": `attn_delta_kernel`, δ = rowsum(dO ∘ O [round_delta_products]) in FP32 from the O saved
  by the forward (rounded per the profile) or from an FP32 O (a second forward with every rounding off);
  [round_delta] rnd(δ).
* "dp_p": `attn_bwd_dq_kernel` with DELTA_ONLY=True, δ = Σ_tiles rowsum(dP ∘ P) with FP32 P = exp(S − LSE) and
  FP32 dP = dO Vᵀ, accumulated over key tiles left to right; [round_delta] rnd(δ).
* "dp_p_norm": the same pass with NORM_DELTA=True also sums ΣP = Σ_tiles rowsum(P) (FP32, the same P, the same
  tiles in the same order) and writes δ = Σ rowsum(dP ∘ P) / ΣP (a row with ΣP = 0, only padding, divides by 1);
  [round_delta] rnd(δ). Why divide: δ is the mean of dP under the softmax the backward differentiates, and the
  forward normalises O by its own row sum ℓ, so δ = rowsum(dO ∘ O) is that mean whatever ℓ is. The backward's
  P = exp(S − LSE) sums to 1 only up to the rounding of LSE (FP32: its grid is 2⁻⁷ wide near 10⁵), so
  rowsum(dP ∘ P) = ΣP · δ and dS = P ∘ (dP − δ) gains −(ΣP − 1)·δ·P, large wherever |δ| ≫ |dP − δ|. The δ consistent
  with the P the backward uses is the ΣP-weighted mean, rowsum(dP ∘ P) / ΣP: then every row of dS sums to zero (up
  to FP32 rounding), the softmax's shift invariance, whatever ΣP is.

Per (query tile, key tile) both kernels recompute, bit-identically (the contract in `lib/fp/reference.py`):
    s = (q @ kᵀ)·scale [round_s], masked -inf ; x = s − lse [round_bwd_s_minus_lse] ; p = exp(x)
    p_op = [round_bwd_p] rnd(p) ; dp = dO @ vᵀ [round_dp] ; t = dp − δ [round_dp and round_delta] ; ds = p ∘ t
    ds_op = [round_ds] rnd(ds)
dK/dV kernel (one key tile, query tiles in order): dv += p_opᵀ @ dO ; dk += ds_opᵀ @ q ; finally dk *= scale.
dQ kernel (one query tile, key tiles in order):   dq += ds_op @ k ; finally dq *= scale.
[round_grad_acc]: each tile's product and the accumulator after the add are rounded (`grad_acc`).
Native path: the matmul operands are BF16 (`bf16_operand`: p and ds rounded to M bits, then an exact cast), FP32
accumulation; a p or ds the numerics keep in FP32 (round_bwd_p, round_ds off) meets the other operand, widened, in an
FP32 `ieee` product (`wide_dot`, as on the emulated path).

Logical rounding blocks (`Numerics.round_block` = R ≠ 0, with round_grad_acc): the only backward rounding points
that depend on tiling are the lp gradient accumulators (P and dS are elementwise in S − LSE and need no block max).
They follow the forward's blocks, as in the authors' code, whose backward also walks 512 × 512 tiles: the dQ
kernel sums the products of the key tiles of each block of R keys in FP32 and meets the lp accumulator once per
block, dq = rnd(dq + rnd(Σ_{j∈B} ds_op_j @ k_j)); the dK/dV kernel does the same over blocks of R queries
(aligned at multiples of R). One extra FP32 accumulator per gradient (no second pass). Without round_grad_acc the
accumulators are FP32 and blocks would only reorder FP32 sums, so the kernels stay per tile.

Changes from the Triton tutorial (`06-fused-attention.py`) and FlashAttention-2:
* δ has three sources (above), and every rounding point is a constexpr switch;
* dQ has its own kernel looping over key tiles (no atomics, no dQ accumulation in FP32 global memory), so the
  order of dQ's sums is fixed and the interpreter can reproduce it;
* P is recomputed as exp(S − LSE) with a natural-log LSE (no exp2 and log2 pre-scaling), S by the forward's
  `score_tile` (same SR bits);
* gradients may be accumulated in lp (round_grad_acc) per tile or per logical rounding block;
* a padded head dim (masked loads) and no warp specialisation, TMA or FP8.
"""
import triton
import triton.language as tl

from kernels.flash_fwd import (SALT_BP, SALT_BSM, SALT_DELTA, SALT_DS, SALT_GRAD, bf16_operand, load_rows, round_point,
                               score_tile, wide_dot)

__all__ = ["attn_delta_kernel", "attn_bwd_dq_kernel", "attn_bwd_dkdv_kernel"]


@triton.jit
def attn_delta_kernel(O, DO, DELTA, N, seed, D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr,
                      M_BITS: tl.constexpr, SR: tl.constexpr, ROUND_DELTA: tl.constexpr,
                      ROUND_DELTA_PRODUCTS: tl.constexpr):
    """δ = rowsum(dO ∘ O) in FP32 for one (query tile, batch·head); O and dO may be FP32 or BF16."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * N * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, DP)
    o = load_rows(O + base, offs_m, offs_d, N, D, True, DP != D).to(tl.float32)
    do = load_rows(DO + base, offs_m, offs_d, N, D, True, DP != D).to(tl.float32)
    t = o * do
    if ROUND_DELTA_PRODUCTS:
        t = round_point(t, M_BITS, SR, seed, SALT_DELTA, bh * 131 + start_m + 7919,
                        tl.arange(0, BLOCK_M)[:, None] * DP + offs_d[None, :], False)
    delta = tl.sum(t, 1)
    if ROUND_DELTA:
        delta = round_point(delta, M_BITS, SR, seed, SALT_DELTA, bh * 131 + start_m, tl.arange(0, BLOCK_M), False)
    tl.store(DELTA + bh.to(tl.int64) * N + offs_m, delta, mask=offs_m < N)


@triton.jit
def _bwd_tile(q, k, v, do, lse, delta, scale, offs_m, offs_n, N, seed, tile_id,
              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr, NATIVE: tl.constexpr,
              M_BITS: tl.constexpr, SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr,
              ROUND_BWD_P: tl.constexpr, ROUND_DS: tl.constexpr, ROUND_DP: tl.constexpr, ROUND_DELTA: tl.constexpr,
              NEED_P_OP: tl.constexpr, DELTA_ONLY: tl.constexpr):
    """Recompute P and dS of one (query tile, key tile). Returns (p_op, ds_op, p∘dp): the matmul operands (BF16 in
    the native path) and, for the dP∘P δ, the FP32 elementwise product (FP32 p and dp, never rounded)."""
    s = score_tile(q, k, scale, offs_m, offs_n, N, seed, tile_id, CAUSAL, MASK, ROUND_S, M_BITS, SR, NATIVE,
                   BLOCK_N)
    offs_el = (offs_m % 4096)[:, None] * BLOCK_N + (offs_n % BLOCK_N)[None, :]
    x = s - lse[:, None]
    if ROUND_BWD_S_MINUS_LSE:
        x = round_point(x, M_BITS, SR, seed, SALT_BSM, tile_id, offs_el, NATIVE)
    p = tl.exp(x)
    if NATIVE:
        dp = tl.dot(do, tl.trans(v))
    else:
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
    pdp = p * dp
    p_op = p
    ds_op = p
    if not DELTA_ONLY:
        if NEED_P_OP:
            if NATIVE:
                if ROUND_BWD_P:          # else p_op is the FP32 p (`wide_dot`)
                    p_op = bf16_operand(p, M_BITS, SR, seed, SALT_BP, tile_id, offs_el)
            else:
                if ROUND_BWD_P:
                    p_op = round_point(p, M_BITS, SR, seed, SALT_BP, tile_id, offs_el, NATIVE)
        if ROUND_DP:
            dp = round_point(dp, M_BITS, SR, seed, SALT_DS, tile_id + 7919, offs_el, NATIVE)
        t = dp - delta[:, None]
        if ROUND_DP:
            if ROUND_DELTA:      # lp − lp is lp (PyTorch BF16 tensors)
                t = round_point(t, M_BITS, SR, seed, SALT_DS, tile_id + 15485863, offs_el, NATIVE)
        ds = p * t
        if NATIVE:
            if ROUND_DS:
                ds_op = bf16_operand(ds, M_BITS, SR, seed, SALT_DS, tile_id, offs_el)
            else:                # FP32 dS (`wide_dot`)
                ds_op = ds
        else:
            if ROUND_DS:
                ds_op = round_point(ds, M_BITS, SR, seed, SALT_DS, tile_id, offs_el, NATIVE)
            else:
                ds_op = ds
    return p_op, ds_op, pdp


@triton.jit
def grad_acc(acc, g, M_BITS: tl.constexpr, SR: tl.constexpr, seed, tile_id, offs,
             ROUND_GRAD_ACC: tl.constexpr):
    """acc + g, or rnd(acc + rnd(g)) when the gradient accumulators are kept in lp (round_grad_acc)."""
    if ROUND_GRAD_ACC:
        g = round_point(g, M_BITS, SR, seed, SALT_GRAD, tile_id, offs, False)
        return round_point(acc + g, M_BITS, SR, seed, SALT_GRAD, tile_id + 7919, offs, False)
    else:
        return acc + g


@triton.jit
def _dq_step(dq, dsum, psum, q, do, lse, delta, K_base, V_base, start_n, offs_m, offs_d, scale, N, seed, tile_id,
             D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
             CHECK_D: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
             ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr, ROUND_DS: tl.constexpr,
             ROUND_DP: tl.constexpr, ROUND_DELTA: tl.constexpr, ROUND_GRAD_ACC: tl.constexpr,
             DELTA_ONLY: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_rows(K_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    v = load_rows(V_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    p_op, ds_op, pdp = _bwd_tile(q, k, v, do, lse, delta, scale, offs_m, offs_n, N, seed, tile_id, BLOCK_N,
                                 CAUSAL, MASK, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, False, ROUND_DS,
                                 ROUND_DP, ROUND_DELTA, False, DELTA_ONLY)
    if DELTA_ONLY:
        dsum = dsum + tl.sum(pdp, 1)
        psum = psum + tl.sum(p_op, 1)         # p_op is the FP32 P under DELTA_ONLY (never rounded)
    else:
        if NATIVE:
            if ROUND_DS:
                g = tl.dot(ds_op, k)
            else:
                g = wide_dot(ds_op, k, WIDE_SPLIT)
        else:
            g = tl.dot(ds_op, k, input_precision="ieee")
        dq = grad_acc(dq, g, M_BITS, SR, seed, tile_id, (offs_m % 4096)[:, None] * 128 + offs_d[None, :],
                      ROUND_GRAD_ACC)
    return dq, dsum, psum


@triton.jit
def _dq_block_step(g, q, do, lse, delta, K_base, V_base, start_n, offs_m, offs_d, scale, N, seed, tile_id,
                   D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
                   CHECK_D: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
                   ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr, ROUND_DS: tl.constexpr,
                   ROUND_DP: tl.constexpr, ROUND_DELTA: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """One key tile of a logical rounding block of the dQ loop: g += dS_op @ k in FP32 (the block's partial sum)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_rows(K_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    v = load_rows(V_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    p_op, ds_op, pdp = _bwd_tile(q, k, v, do, lse, delta, scale, offs_m, offs_n, N, seed, tile_id, BLOCK_N,
                                 CAUSAL, MASK, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, False, ROUND_DS,
                                 ROUND_DP, ROUND_DELTA, False, False)
    if NATIVE:
        if ROUND_DS:
            g = tl.dot(ds_op, k, g)
        else:
            g = g + wide_dot(ds_op, k, WIDE_SPLIT)
    else:
        g = g + tl.dot(ds_op, k, input_precision="ieee")
    return g


@triton.jit
def attn_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, N, seed, rb_keys,
                       D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       N_TILES: tl.constexpr, ROUND_BLOCK: tl.constexpr, RB_TILES: tl.constexpr,
                       CAUSAL: tl.constexpr, NATIVE: tl.constexpr,
                       STATIC_LOOPS: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
                       ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr, ROUND_DS: tl.constexpr,
                       ROUND_DP: tl.constexpr, ROUND_DELTA: tl.constexpr, ROUND_GRAD_ACC: tl.constexpr,
                       DELTA_ONLY: tl.constexpr, NORM_DELTA: tl.constexpr = False,
                       WIDE_SPLIT: tl.constexpr = False):
    """dQ for one (query tile, batch·head), looping over key tiles; with DELTA_ONLY it instead writes
    δ = Σ rowsum(dP ∘ P) into DELTA, divided by Σ rowsum(P) with NORM_DELTA ("dp_p_norm", module docstring). Loop
    structure as in `attn_fwd_kernel`. ROUND_BLOCK (lp accumulator with a logical rounding block, never with
    DELTA_ONLY): the key tiles of each block of rb_keys keys (RB_TILES tiles in the interpreter's static loops) sum
    their products in FP32; the block's sum meets the lp accumulator once."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * N * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, DP)
    CHECK_D: tl.constexpr = DP != D
    q = load_rows(Q + base, offs_m, offs_d, N, D, True, CHECK_D)
    do = load_rows(DO + base, offs_m, offs_d, N, D, True, CHECK_D)
    lse = tl.load(LSE + bh.to(tl.int64) * N + offs_m, mask=offs_m < N, other=float("inf"))
    if DELTA_ONLY:
        delta = tl.zeros([BLOCK_M], tl.float32)
    else:
        delta = tl.load(DELTA + bh.to(tl.int64) * N + offs_m, mask=offs_m < N, other=0.0)
    dq = tl.zeros([BLOCK_M, DP], tl.float32)
    dsum = tl.zeros([BLOCK_M], tl.float32)
    psum = tl.zeros([BLOCK_M], tl.float32)
    if CAUSAL:
        hi = tl.minimum(N, (start_m + 1) * BLOCK_M)
        lo = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
    else:
        hi = N
        lo = N // BLOCK_N * BLOCK_N
    tile0 = (bh * 131 + start_m) * 1031
    offs_acc = (offs_m % 4096)[:, None] * 128 + offs_d[None, :]
    if ROUND_BLOCK:
        if STATIC_LOOPS:
            for b in range(0, (N_TILES + RB_TILES - 1) // RB_TILES):
                if b * RB_TILES * BLOCK_N < hi:
                    g = tl.zeros([BLOCK_M, DP], tl.float32)
                    for t in range(0, RB_TILES):
                        if (b * RB_TILES + t) * BLOCK_N < hi:
                            g = _dq_block_step(g, q, do, lse, delta, K + base, V + base, (b * RB_TILES + t) * BLOCK_N,
                                               offs_m, offs_d, scale, N, seed, tile0 + b * RB_TILES + t, D, BLOCK_N,
                                               CAUSAL, True, CHECK_D, NATIVE, M_BITS, SR, ROUND_S,
                                               ROUND_BWD_S_MINUS_LSE, ROUND_DS, ROUND_DP, ROUND_DELTA, WIDE_SPLIT)
                    dq = grad_acc(dq, g, M_BITS, SR, seed, tile0 + b * RB_TILES, offs_acc, ROUND_GRAD_ACC)
        else:
            for b0 in range(0, hi, rb_keys):
                g = tl.zeros([BLOCK_M, DP], tl.float32)
                for start_n in range(b0, tl.minimum(b0 + rb_keys, lo), BLOCK_N):
                    g = _dq_block_step(g, q, do, lse, delta, K + base, V + base, start_n, offs_m, offs_d, scale, N,
                                       seed, tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL, False, CHECK_D, NATIVE,
                                       M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, ROUND_DS, ROUND_DP, ROUND_DELTA,
                                       WIDE_SPLIT)
                for start_n in range(tl.maximum(b0, lo), tl.minimum(b0 + rb_keys, hi), BLOCK_N):
                    g = _dq_block_step(g, q, do, lse, delta, K + base, V + base, start_n, offs_m, offs_d, scale, N,
                                       seed, tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL, True, CHECK_D, NATIVE,
                                       M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, ROUND_DS, ROUND_DP, ROUND_DELTA,
                                       WIDE_SPLIT)
                dq = grad_acc(dq, g, M_BITS, SR, seed, tile0 + b0 // BLOCK_N, offs_acc, ROUND_GRAD_ACC)
    else:
        if STATIC_LOOPS:
            for j in range(0, N_TILES):
                if j * BLOCK_N < hi:
                    dq, dsum, psum = _dq_step(dq, dsum, psum, q, do, lse, delta, K + base, V + base, j * BLOCK_N,
                                              offs_m, offs_d, scale, N, seed, tile0 + j, D, BLOCK_N, CAUSAL, True,
                                              CHECK_D, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, ROUND_DS,
                                              ROUND_DP, ROUND_DELTA, ROUND_GRAD_ACC, DELTA_ONLY, WIDE_SPLIT)
        else:
            for start_n in range(0, lo, BLOCK_N):
                dq, dsum, psum = _dq_step(dq, dsum, psum, q, do, lse, delta, K + base, V + base, start_n, offs_m,
                                          offs_d, scale, N, seed, tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL,
                                          False, CHECK_D, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE,
                                          ROUND_DS, ROUND_DP, ROUND_DELTA, ROUND_GRAD_ACC, DELTA_ONLY, WIDE_SPLIT)
            for start_n in range(lo, hi, BLOCK_N):
                dq, dsum, psum = _dq_step(dq, dsum, psum, q, do, lse, delta, K + base, V + base, start_n, offs_m,
                                          offs_d, scale, N, seed, tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL,
                                          True, CHECK_D, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE,
                                          ROUND_DS, ROUND_DP, ROUND_DELTA, ROUND_GRAD_ACC, DELTA_ONLY, WIDE_SPLIT)
    if DELTA_ONLY:
        if NORM_DELTA:
            dsum = dsum / tl.where(psum > 0, psum, 1.0)
        if ROUND_DELTA:
            dsum = round_point(dsum, M_BITS, SR, seed, SALT_DELTA, bh * 131 + start_m, tl.arange(0, BLOCK_M), NATIVE)
        tl.store(DELTA + bh.to(tl.int64) * N + offs_m, dsum, mask=offs_m < N)
    else:
        dq = dq * scale
        tl.store(DQ + base + offs_m[:, None] * D + offs_d[None, :], dq.to(DQ.dtype.element_ty),
                 mask=(offs_m[:, None] < N) & (offs_d[None, :] < D))


@triton.jit
def _dkdv_step(dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, start_m, offs_n, offs_d, scale, N, seed,
               tile_id, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
               MASK: tl.constexpr, CHECK_D: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr,
               SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr,
               ROUND_BWD_P: tl.constexpr, ROUND_DS: tl.constexpr, ROUND_DP: tl.constexpr, ROUND_DELTA: tl.constexpr,
               ROUND_GRAD_ACC: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_rows(Q_base, offs_m, offs_d, N, D, True, CHECK_D)
    do = load_rows(DO_base, offs_m, offs_d, N, D, True, CHECK_D)
    lse = tl.load(LSE_base + offs_m, mask=offs_m < N, other=float("inf"))
    delta = tl.load(DELTA_base + offs_m, mask=offs_m < N, other=0.0)
    p_op, ds_op, pdp = _bwd_tile(q, k, v, do, lse, delta, scale, offs_m, offs_n, N, seed, tile_id, BLOCK_N,
                                 CAUSAL, MASK, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, ROUND_BWD_P,
                                 ROUND_DS, ROUND_DP, ROUND_DELTA, True, False)
    if NATIVE:
        if ROUND_BWD_P:
            gv = tl.dot(tl.trans(p_op), do)
        else:
            gv = wide_dot(tl.trans(p_op), do, WIDE_SPLIT)
        if ROUND_DS:
            gk = tl.dot(tl.trans(ds_op), q)
        else:
            gk = wide_dot(tl.trans(ds_op), q, WIDE_SPLIT)
    else:
        gv = tl.dot(tl.trans(p_op), do, input_precision="ieee")
        gk = tl.dot(tl.trans(ds_op), q, input_precision="ieee")
    offs = (offs_n % 4096)[:, None] * 128 + offs_d[None, :]
    dv = grad_acc(dv, gv, M_BITS, SR, seed, tile_id, offs, ROUND_GRAD_ACC)
    dk = grad_acc(dk, gk, M_BITS, SR, seed, tile_id + 104729, offs, ROUND_GRAD_ACC)
    return dk, dv


@triton.jit
def _dkdv_block_step(gk, gv, k, v, Q_base, DO_base, LSE_base, DELTA_base, start_m, offs_n, offs_d, scale, N, seed,
                     tile_id, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                     MASK: tl.constexpr, CHECK_D: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr,
                     SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr,
                     ROUND_BWD_P: tl.constexpr, ROUND_DS: tl.constexpr, ROUND_DP: tl.constexpr,
                     ROUND_DELTA: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """One query tile of a logical rounding block of the dK/dV loop: gv += P_opᵀ @ dO, gk += dS_opᵀ @ q in FP32."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_rows(Q_base, offs_m, offs_d, N, D, True, CHECK_D)
    do = load_rows(DO_base, offs_m, offs_d, N, D, True, CHECK_D)
    lse = tl.load(LSE_base + offs_m, mask=offs_m < N, other=float("inf"))
    delta = tl.load(DELTA_base + offs_m, mask=offs_m < N, other=0.0)
    p_op, ds_op, pdp = _bwd_tile(q, k, v, do, lse, delta, scale, offs_m, offs_n, N, seed, tile_id, BLOCK_N,
                                 CAUSAL, MASK, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE, ROUND_BWD_P,
                                 ROUND_DS, ROUND_DP, ROUND_DELTA, True, False)
    if NATIVE:
        if ROUND_BWD_P:
            gv = tl.dot(tl.trans(p_op), do, gv)
        else:
            gv = gv + wide_dot(tl.trans(p_op), do, WIDE_SPLIT)
        if ROUND_DS:
            gk = tl.dot(tl.trans(ds_op), q, gk)
        else:
            gk = gk + wide_dot(tl.trans(ds_op), q, WIDE_SPLIT)
    else:
        gv = gv + tl.dot(tl.trans(p_op), do, input_precision="ieee")
        gk = gk + tl.dot(tl.trans(ds_op), q, input_precision="ieee")
    return gk, gv


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, scale, N, seed, rb_rows,
                         D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         M_TILES: tl.constexpr, ROUND_BLOCK: tl.constexpr, RB_TILES: tl.constexpr,
                         CAUSAL: tl.constexpr, NATIVE: tl.constexpr,
                         STATIC_LOOPS: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
                         ROUND_S: tl.constexpr, ROUND_BWD_S_MINUS_LSE: tl.constexpr, ROUND_BWD_P: tl.constexpr,
                         ROUND_DS: tl.constexpr, ROUND_DP: tl.constexpr, ROUND_DELTA: tl.constexpr,
                         ROUND_GRAD_ACC: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """dK, dV for one (key tile, batch·head), looping over query tiles top to bottom (causal: from the diagonal).
    Grid: (cdiv(N, BLOCK_N), batch·heads). The score tile is computed as (q @ kᵀ), in the same orientation as the
    forward and the dQ kernel, so P and dS are bit-identical across the three kernels. ROUND_BLOCK (lp accumulators
    with a logical rounding block): the query tiles of each block of rb_rows queries (aligned at multiples of it;
    RB_TILES tiles in the interpreter) sum their products in FP32, and each block's sums meet the lp dK, dV once."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * N * D
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    CHECK_D: tl.constexpr = DP != D
    k = load_rows(K + base, offs_n, offs_d, N, D, True, CHECK_D)
    v = load_rows(V + base, offs_n, offs_d, N, D, True, CHECK_D)
    dk = tl.zeros([BLOCK_N, DP], tl.float32)
    dv = tl.zeros([BLOCK_N, DP], tl.float32)
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M                   # first query tile with a row >= start_n
        mid = tl.minimum(N, (start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M * BLOCK_M)  # tiles from here: no mask
    else:
        lo = 0
        mid = 0
    lse_base = LSE + bh.to(tl.int64) * N
    delta_base = DELTA + bh.to(tl.int64) * N
    offs_acc = (offs_n % 4096)[:, None] * 128 + offs_d[None, :]
    if ROUND_BLOCK:
        if NATIVE:
            # Between blocks dK and dV only hold lp values (M <= 7 mantissa bits, BF16's exponent): exact in BF16,
            # and half the registers next to the block's two FP32 partial sums (no spills at 4 warps, head dim 64).
            dk = dk.to(tl.bfloat16)
            dv = dv.to(tl.bfloat16)
        if STATIC_LOOPS:
            for b in range(0, (M_TILES + RB_TILES - 1) // RB_TILES):
                if ((b + 1) * RB_TILES * BLOCK_M > lo) & (b * RB_TILES * BLOCK_M < N):
                    gk = tl.zeros([BLOCK_N, DP], tl.float32)
                    gv = tl.zeros([BLOCK_N, DP], tl.float32)
                    for t in range(0, RB_TILES):
                        i = b * RB_TILES + t
                        if (i * BLOCK_M >= lo) & (i * BLOCK_M < N):
                            gk, gv = _dkdv_block_step(gk, gv, k, v, Q + base, DO + base, lse_base, delta_base,
                                                      i * BLOCK_M, offs_n, offs_d, scale, N, seed,
                                                      (bh * 131 + i) * 1031 + pid_n, D, BLOCK_M, BLOCK_N, CAUSAL,
                                                      True, CHECK_D, NATIVE, M_BITS, SR, ROUND_S,
                                                      ROUND_BWD_S_MINUS_LSE, ROUND_BWD_P, ROUND_DS, ROUND_DP,
                                                      ROUND_DELTA, WIDE_SPLIT)
                    tid = (bh * 131 + b * RB_TILES) * 1031 + pid_n
                    dv = grad_acc(dv, gv, M_BITS, SR, seed, tid, offs_acc, ROUND_GRAD_ACC)
                    dk = grad_acc(dk, gk, M_BITS, SR, seed, tid + 104729, offs_acc, ROUND_GRAD_ACC)
        else:
            for b0 in range(lo // rb_rows * rb_rows, N, rb_rows):
                gk = tl.zeros([BLOCK_N, DP], tl.float32)
                gv = tl.zeros([BLOCK_N, DP], tl.float32)
                for start_m in range(tl.maximum(b0, lo), tl.minimum(b0 + rb_rows, mid), BLOCK_M):
                    gk, gv = _dkdv_block_step(gk, gv, k, v, Q + base, DO + base, lse_base, delta_base, start_m,
                                              offs_n, offs_d, scale, N, seed,
                                              (bh * 131 + start_m // BLOCK_M) * 1031 + pid_n, D, BLOCK_M, BLOCK_N,
                                              CAUSAL, True, CHECK_D, NATIVE, M_BITS, SR, ROUND_S,
                                              ROUND_BWD_S_MINUS_LSE, ROUND_BWD_P, ROUND_DS, ROUND_DP, ROUND_DELTA,
                                              WIDE_SPLIT)
                for start_m in range(tl.maximum(b0, mid), tl.minimum(b0 + rb_rows, N), BLOCK_M):
                    gk, gv = _dkdv_block_step(gk, gv, k, v, Q + base, DO + base, lse_base, delta_base, start_m,
                                              offs_n, offs_d, scale, N, seed,
                                              (bh * 131 + start_m // BLOCK_M) * 1031 + pid_n, D, BLOCK_M, BLOCK_N,
                                              CAUSAL, False, CHECK_D, NATIVE, M_BITS, SR, ROUND_S,
                                              ROUND_BWD_S_MINUS_LSE, ROUND_BWD_P, ROUND_DS, ROUND_DP, ROUND_DELTA,
                                              WIDE_SPLIT)
                tid = (bh * 131 + b0 // BLOCK_M) * 1031 + pid_n
                dv = grad_acc(dv.to(tl.float32), gv, M_BITS, SR, seed, tid, offs_acc, ROUND_GRAD_ACC).to(dv.dtype)
                dk = grad_acc(dk.to(tl.float32), gk, M_BITS, SR, seed, tid + 104729, offs_acc,
                              ROUND_GRAD_ACC).to(dk.dtype)
    else:
        if STATIC_LOOPS:
            for i in range(0, M_TILES):
                if i * BLOCK_M >= lo:
                    dk, dv = _dkdv_step(dk, dv, k, v, Q + base, DO + base, lse_base, delta_base, i * BLOCK_M, offs_n,
                                        offs_d, scale, N, seed, (bh * 131 + i) * 1031 + pid_n, D, BLOCK_M, BLOCK_N,
                                        CAUSAL, True, CHECK_D, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE,
                                        ROUND_BWD_P, ROUND_DS, ROUND_DP, ROUND_DELTA, ROUND_GRAD_ACC, WIDE_SPLIT)
        else:
            for start_m in range(lo, mid, BLOCK_M):
                dk, dv = _dkdv_step(dk, dv, k, v, Q + base, DO + base, lse_base, delta_base, start_m, offs_n, offs_d,
                                    scale, N, seed, (bh * 131 + start_m // BLOCK_M) * 1031 + pid_n, D, BLOCK_M,
                                    BLOCK_N, CAUSAL, True, CHECK_D, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE,
                                    ROUND_BWD_P, ROUND_DS, ROUND_DP, ROUND_DELTA, ROUND_GRAD_ACC, WIDE_SPLIT)
            # Below the diagonal every score is visible; padded key columns only feed dk/dv rows that are not stored.
            for start_m in range(mid, N, BLOCK_M):
                dk, dv = _dkdv_step(dk, dv, k, v, Q + base, DO + base, lse_base, delta_base, start_m, offs_n, offs_d,
                                    scale, N, seed, (bh * 131 + start_m // BLOCK_M) * 1031 + pid_n, D, BLOCK_M,
                                    BLOCK_N, CAUSAL, False, CHECK_D, NATIVE, M_BITS, SR, ROUND_S, ROUND_BWD_S_MINUS_LSE,
                                    ROUND_BWD_P, ROUND_DS, ROUND_DP, ROUND_DELTA, ROUND_GRAD_ACC, WIDE_SPLIT)
    dk = dk.to(tl.float32) * scale
    out = base + offs_n[:, None] * D + offs_d[None, :]
    mask = (offs_n[:, None] < N) & (offs_d[None, :] < D)
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=mask)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=mask)
