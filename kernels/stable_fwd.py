"""Forward of `stable_attention`: production FlashAttention-2 numerics with the β fix, fast on Hopper.

Adapted from the Triton tutorial `python/tutorials/06-fused-attention.py` (Triton 3.6, MIT licence; credits there:
OpenAI kernel team, Tri Dao's FlashAttention-2, Rabe & Staats). Layout: q, k, v, o contiguous (batch·heads, T,
head_dim) with head_dim 64 or 128; LSE FP32 (batch·heads, T). Grid: (cdiv(T, BLOCK_M), batch·heads); each program
owns BLOCK_M query rows and walks the key tiles left to right (causal: the tiles left of the diagonal without a
mask, then the diagonal tiles with one).

Arithmetic per key tile (production FA2, `lib.fp.numerics` profile "fa2"): FP32 scores, FP32 running max m and row
sum ℓ (of the FP32 P̄), P̄ cast to BF16 only as the P̄V operand, FP32 O accumulator, O = acc/ℓ cast once.
Two modes (constexpr EMULATE):
* native (BF16/FP16 tensor cores): t = q·kᵀ (FP32 accumulate), m = max(t), and P̄ = exp2((t − m)·c) with
  c = scale·log2(e): the max is subtracted before the scale (`exp_arg`), so the row max's P̄ is exactly 1, as in the
  oracle's exp(s − m) and in PyTorch's FA2 build (which computes the scaled score and subtracts with the FMA
  contraction turned off). m and LSE stay in the units of t (LSE_t = m + log2(ℓ)/c = LSE/scale); the backward's
  P = exp2((t − LSE_t)·c).
* EMULATE (FP32 tensors holding BF16 values; the CPU interpreter, whose own BF16 casts truncate): the oracle's order
  of operations, op for op (`lib/fp/reference.py`, `emulate_forward`, numerics "fa2"): s = (q·kᵀ)·scale,
  P̄ = exp(s − m) in natural units, FP32 `ieee` matmuls, and every BF16 rounding done by the bit-exact integer helper
  `kernels/rounding.py` (P̄ operand, final O). Bit for bit equal to the oracle with the same tiles.
The exponent's units are their own constexpr, BASE2 (native: always; EMULATE: natural by default), so that EMULATE
with BASE2 runs the native softmax arithmetic on EMULATE's operands, in the interpreter too.

The β fix (FIX, Qiu & Yao §4, Alg. 1): per key tile, a row whose tile max occurs at least twice (exact ties of the
FP32 scores the kernel takes its max over: s in EMULATE, the unscaled q·kᵀ natively) subtracts β·max (max > 0) or 0
(max < 0) instead of max; the shift (β−1)·max or −max is capped at `max_shift` (our underflow guard; +inf turns it
off). No floor on ℓ. This is `lib.fp.reference.fixed_row_max` with tie_tol = 0, and the research kernel's
`fix="beta"` with round_block = 0: tie detection is per key tile, so the detection tile is BLOCK_N keys (64 in
EMULATE and in the fallback config; the autotuned config in use is reported by `kernels.stable_attention`). Only
which max is subtracted changes: LSE = m + log ℓ absorbs it exactly, so the backward is the plain FA2 backward.

Changes from the Triton tutorial:
* head-dim 64/128, any T (ragged last tiles: masked loads, or TMA's zero fill and clipped stores);
* the β fix and its tie count (constexpr FIX); a natural-log EMULATE mode for the oracle (above);
* K is not pre-scaled on the host (that would round k·scale to BF16: not FA2's numerics); the scale multiplies the
  FP32 scores after the max is subtracted (the tutorial's exp2(t·c − m·c) is one FMA whose row max is not 0);
* TMA descriptors are made in the kernel per head (`tl.make_tensor_descriptor`, rows past T read as zero) when
  USE_TMA, plain pointers otherwise (the interpreter and pre-Hopper GPUs);
* causal query tiles are launched longest first (reversed program order), as FA2 does, to shorten the tail;
* STATIC_LOOPS (interpreter only): its `range` cannot take tensor bounds (numpy ≥ 2.4), so the tiles are walked with
  a constexpr count and a skip test; same tiles, same order;
* STORE_O32: the FP32 O = acc/ℓ before its final rounding is also written, to O32 (FP32, the layout of O), for the
  backward's δ (`stable_attention(..., delta="fp32_o")`); O is stored as without it. O32 goes through plain pointers
  even when USE_TMA, as every FP32 tile of these kernels does (EMULATE's: `_use_tma` in `kernels/stable_attention.py`).
"""
import triton
import triton.language as tl

from kernels.rounding import rne_mantissa

__all__ = ["attn_fwd_kernel", "attn_fwd_tuned", "FWD_CONFIGS", "FWD_FALLBACK", "EMULATE_BLOCK", "tile_source",
           "load_tile", "store_tile", "mm", "operand", "exp_k", "logit_units", "exp_arg",
           "mask_scores"]

EMULATE_BLOCK = 64      # tile of the EMULATE mode in both directions: part of its numerics (the oracle's block)


# ------------------------------------------------------------------------------ helpers shared with stable_bwd.py
@triton.jit
def tile_source(base, T, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr):
    """A (T, HEAD_DIM) row-major matrix at `base` read in (BLOCK, HEAD_DIM) tiles: a TMA descriptor made in the
    kernel (rows ≥ T load as zeros, stores to them are dropped) or, without TMA, the pointer itself."""
    if USE_TMA:
        return tl.make_tensor_descriptor(base, shape=[T, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK, HEAD_DIM])
    else:
        return base


@triton.jit
def load_tile(src, start, T, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr):
    """Rows start … start+BLOCK−1 of a `tile_source` as a (BLOCK, HEAD_DIM) tensor; rows ≥ T are zero."""
    if USE_TMA:
        return src.load([start, 0])
    else:
        rows = start + tl.arange(0, BLOCK)
        ptrs = src + rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
        return tl.load(ptrs, mask=rows[:, None] < T, other=0.0)


@triton.jit
def store_tile(dst, start, x, T, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr):
    """Store a (BLOCK, HEAD_DIM) tile at rows start…; rows ≥ T are not written."""
    if USE_TMA:
        dst.store([start, 0], x)
    else:
        rows = start + tl.arange(0, BLOCK)
        tl.store(dst + rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :], x, mask=rows[:, None] < T)


@triton.jit
def mm(a, b, acc, EMULATE: tl.constexpr):
    """acc + a·b in FP32 (acc None: a·b). Natively one tensor-core matmul accumulating into acc; EMULATE: FP32
    `ieee` products, then the add, as the oracle (`_dot`, then `+`) and the research kernel's emulated path (whose
    GPU sums therefore match ours bit for bit with the same tiles)."""
    if EMULATE:
        if acc is None:
            return tl.dot(a, b, input_precision="ieee")
        else:
            return acc + tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def operand(x, dtype: tl.constexpr, EMULATE: tl.constexpr):
    """FP32 `x` as a low-precision matmul operand: the hardware RNE cast, or (EMULATE) the bit-exact RNE to BF16
    kept in FP32, because the interpreter's cast truncates."""
    if EMULATE:
        return rne_mantissa(x, 7)
    else:
        return x.to(dtype)


@triton.jit
def exp_k(x, BASE2: tl.constexpr):
    """exp in the kernel's units: exp2 in base 2 (natively; log2 e is folded into the scale), exp in natural units."""
    if BASE2:
        return tl.math.exp2(x)
    else:
        return tl.exp(x)


@triton.jit
def logit_units(qk, qk_scale, BASE2: tl.constexpr):
    """(t, c): the scores the max, the tie test and LSE run on, and the factor to the exponent's units, so that
    P̄ = exp_k((t − m)·c) with m = max(t). Base 2 (native): t = q·kᵀ unscaled, c = scale·log2 e. Natural units:
    t = (q·kᵀ)·scale, the oracle's s, and c = 1 ((t − m)·1 = t − m exactly)."""
    if BASE2:
        return qk, qk_scale
    else:
        return qk * qk_scale, 1.0


@triton.jit
def exp_arg(t, c, m):
    """(t − m)·c, the exponent's argument, with t and m in the scores' units (`logit_units`). The max is subtracted
    before the scale, so the row maximum's argument is exactly 0 (P̄ = 1, as the oracle's exp(s − m)). Not
    t·c − m·c: the compiler contracts a product into a following subtraction (one FMA, exact product), and
    fma(t_max, c, −round(t_max·c)) is the product's rounding error, up to 2⁻⁷ at exponents ≈ 10⁵ (P̄ ≈ 1 ± 0.5 %,
    which moves O off the BF16 value of V and δ off dO·V). (t − m)·c has no product to contract, and t − m is
    exact wherever the weight is not negligible (Sterbenz)."""
    return (t - m) * c


@triton.jit
def mask_scores(t, qpos, kpos, T, CAUSAL: tl.constexpr):
    """−inf where a key is past T or (causal) after the query. qpos/kpos broadcast to t's shape in either orientation
    (queries × keys in the forward and dQ, keys × queries in dK/dV)."""
    keep = kpos < T
    if CAUSAL:
        keep = keep & (kpos <= qpos)
    return tl.where(keep, t, float("-inf"))


# ---------------------------------------------------------------------------------------------------- the forward
@triton.jit
def _beta_max(t, m_t, beta, max_shift):
    """The β fix on one key tile: rows whose max m_t of `t` occurs ≥ 2 times get β·m_t (m_t > 0, unless it overflows)
    or 0 (m_t < 0) as their max, with the shift (β−1)·m_t or −m_t capped at max_shift (then m_t + max_shift). Rows
    with every key masked (m_t = −inf) and m_t = 0 are left alone. All in the scores' units (`logit_units`)."""
    repeated = (tl.sum(tl.where(t == m_t[:, None], 1.0, 0.0), 1) >= 2.0) & (m_t > float("-inf"))
    scaled = beta * m_t
    m_fix = tl.where(repeated & (m_t > 0) & (scaled < float("inf")), scaled, m_t)
    m_fix = tl.where(repeated & (m_fix < 0), 0.0, m_fix)
    shift = tl.where(m_t > 0, (beta - 1.0) * m_t, -m_t)
    return tl.where(repeated & (m_t != 0) & (shift > max_shift), m_t + max_shift, m_fix)


@triton.jit
def _fwd_tile(acc, l_i, m_i, q, k_src, v_src, start_n, offs_m, qk_scale, beta, max_shift, T,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
              FIX: tl.constexpr, EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr):
    """One key tile of the online softmax; returns the updated (acc, l_i, m_i)."""
    k = load_tile(k_src, start_n, T, BLOCK_N, HEAD_DIM, USE_TMA)
    t, c = logit_units(mm(q, k.T, None, EMULATE), qk_scale, BASE2)
    if MASK:
        t = mask_scores(t, offs_m[:, None], (start_n + tl.arange(0, BLOCK_N))[None, :], T, CAUSAL)
    m_t = tl.max(t, 1)
    if FIX:
        m_t = _beta_max(t, m_t, beta, max_shift)
    m_new = tl.maximum(m_i, m_t)
    p = exp_k(exp_arg(t, c, m_new[:, None]), BASE2)
    alpha = exp_k(exp_arg(m_i, c, m_new), BASE2)
    l_t = tl.sum(p, 1)
    v = load_tile(v_src, start_n, T, BLOCK_N, HEAD_DIM, USE_TMA)
    acc = mm(operand(p, v.dtype, EMULATE), v, acc * alpha[:, None], EMULATE)
    l_i = l_i * alpha + l_t
    return acc, l_i, m_new


@triton.jit
def _fwd_tiles(acc, l_i, m_i, q, k_src, v_src, lo, hi, offs_m, qk_scale, beta, max_shift, T,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
               FIX: tl.constexpr, EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr,
               WARP_SPECIALIZE: tl.constexpr, STATIC_LOOPS: tl.constexpr, N_TILES: tl.constexpr):
    """The key tiles starting at lo, lo + BLOCK_N, … below hi, in order."""
    if STATIC_LOOPS:
        for j in range(N_TILES):
            if (j * BLOCK_N >= lo) & (j * BLOCK_N < hi):
                acc, l_i, m_i = _fwd_tile(acc, l_i, m_i, q, k_src, v_src, j * BLOCK_N, offs_m, qk_scale, beta,
                                          max_shift, T, HEAD_DIM, BLOCK_N, CAUSAL, MASK, FIX, EMULATE, BASE2,
                                          USE_TMA)
    else:
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _fwd_tile(acc, l_i, m_i, q, k_src, v_src, start_n, offs_m, qk_scale, beta, max_shift,
                                      T, HEAD_DIM, BLOCK_N, CAUSAL, MASK, FIX, EMULATE, BASE2, USE_TMA)
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(Q, K, V, O, O32, LSE, qk_scale, beta, max_shift, T,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                    FIX: tl.constexpr, EMULATE: tl.constexpr, BASE2: tl.constexpr, USE_TMA: tl.constexpr,
                    WARP_SPECIALIZE: tl.constexpr, STATIC_LOOPS: tl.constexpr, N_TILES: tl.constexpr,
                    STORE_O32: tl.constexpr):
    """O and LSE for one (query tile, batch·head), and with STORE_O32 the FP32 O before its final rounding in O32
    (FP32, O's layout; without STORE_O32 not touched). qk_scale: scale·log2 e in base 2 (natively), scale in natural
    units; max_shift and LSE in the scores' units (`logit_units`: q·kᵀ in base 2, scale·q·kᵀ in natural units;
    max_shift +inf: no cap). BLOCK_M must be a multiple of BLOCK_N (the diagonal is whole key tiles)."""
    bh = tl.program_id(1)
    start_m = tl.program_id(0)
    if CAUSAL:      # longest rows first
        start_m = tl.num_programs(0) - 1 - start_m
    base = bh.to(tl.int64) * T * HEAD_DIM
    q_src = tile_source(Q + base, T, BLOCK_M, HEAD_DIM, USE_TMA)
    k_src = tile_source(K + base, T, BLOCK_N, HEAD_DIM, USE_TMA)
    v_src = tile_source(V + base, T, BLOCK_N, HEAD_DIM, USE_TMA)
    o_src = tile_source(O + base, T, BLOCK_M, HEAD_DIM, USE_TMA)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    q = load_tile(q_src, start_m * BLOCK_M, T, BLOCK_M, HEAD_DIM, USE_TMA)
    if CAUSAL:
        lo = start_m * BLOCK_M                      # keys left of the query tile: every row sees them
        hi = tl.minimum(lo + BLOCK_M, T)
    else:
        lo = T // BLOCK_N * BLOCK_N                 # whole key tiles; the ragged last one needs the mask
        hi = T
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_src, v_src, 0, lo, offs_m, qk_scale, beta, max_shift, T,
                               HEAD_DIM, BLOCK_N, CAUSAL, False, FIX, EMULATE, BASE2, USE_TMA, WARP_SPECIALIZE,
                               STATIC_LOOPS, N_TILES)
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_src, v_src, lo, hi, offs_m, qk_scale, beta, max_shift, T,
                               HEAD_DIM, BLOCK_N, CAUSAL, True, FIX, EMULATE, BASE2, USE_TMA, False,
                               STATIC_LOOPS, N_TILES)
    # ℓ = 0 only when a fixed row's every weight underflows (no cap): O = 0 there, as in the oracle, not 0/0
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    if STORE_O32:       # δ's O, before the rounding below; plain pointers (TMA carries the BF16/FP16 tiles only)
        store_tile(O32 + base, start_m * BLOCK_M, o, T, BLOCK_M, HEAD_DIM, False)
    if EMULATE:
        o = rne_mantissa(o, 7)
    if BASE2:
        lse = m_i + tl.math.log2(l_safe) / qk_scale      # in the scores' units, as m: natural LSE / scale
    else:
        lse = m_i + tl.log(l_safe)
    store_tile(o_src, start_m * BLOCK_M, o.to(O.dtype.element_ty), T, BLOCK_M, HEAD_DIM, USE_TMA)
    tl.store(LSE + bh.to(tl.int64) * T + offs_m, lse, mask=offs_m < T)


# --------------------------------------------------------------------------------------------- launch configs
def _keep(conf):
    """The tutorial's Hopper filter: 8 warps only for 128×128 tiles."""
    return not (conf.num_warps == 8 and conf.kwargs["BLOCK_M"] * conf.kwargs["BLOCK_N"] < 128 * 128)


FWD_FALLBACK = triton.Config(dict(BLOCK_M=64, BLOCK_N=64, WARP_SPECIALIZE=False), num_warps=4, num_stages=2)
# Warp specialisation stays out of the default list: on sm_90 with Triton 3.6 this kernel's specialised loop fails to
# compile at 4 warps (NVGPUWarpSpecialization pass error, which the autotuner does not catch) and at 8 warps it was
# no faster than the best unspecialised config. A config with WARP_SPECIALIZE=True can still be passed explicitly.
FWD_CONFIGS = [FWD_FALLBACK] + [
    triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn, WARP_SPECIALIZE=False), num_warps=w, num_stages=s)
    for bm in (64, 128) for bn in (64, 128) for w in (4, 8) for s in (3, 4)
    if bm % bn == 0 and _keep(triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn), num_warps=w))]


def _prune(configs, named_args, **kwargs):
    """Drop tiles taller than the sequence (but keep 64) and warp specialisation for causal attention or before
    Hopper (the tutorial enables it on Hopper only for the non-causal forward); the fallback always stays."""
    args = {**named_args, **kwargs}
    T, causal = args["T"], args["CAUSAL"]
    out = [c for c in configs if c.kwargs["BLOCK_M"] <= max(64, T)
           and not (c.kwargs["WARP_SPECIALIZE"] and (causal or not _ws_supported()))]
    return out or [FWD_FALLBACK]


def _ws_supported():
    import torch
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


# STORE_O32 stays out of the key on purpose: a forward that also writes O32 (delta="fp32_o") must run the tiles of the
# one that does not, or its O would not be the same bits (other tiles, other FP32 sums, and with the fix another
# tie-detection width). Triton adds every tensor argument's dtype to the key, so the launcher passes the FP32 LSE as
# O32's placeholder when it is not written: both forwards then share one key and one config.
attn_fwd_tuned = triton.autotune(configs=FWD_CONFIGS, key=["T", "HEAD_DIM", "CAUSAL", "FIX"],
                                 prune_configs_by={"early_config_prune": _prune})(attn_fwd_kernel)
