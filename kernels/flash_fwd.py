"""Flash-attention forward (FA2 algorithm) with every rounding point of `lib.fp.numerics.Numerics` as a constexpr switch.

Layout: q, k, v, o are contiguous (batch·heads, seq, head_dim); LSE is FP32 (batch·heads, seq). Grid:
(cdiv(seq, BLOCK_M), batch·heads); each program owns BLOCK_M query rows and walks the key tiles left to right
(causal: only tiles that reach the diagonal). Plain pointer arithmetic, in the style of the Triton tutorial
`06-fused-attention.py`.

Two paths through the same code (the `NATIVE` constexpr):
* emulated (NATIVE=False): q, k, v are FP32 tensors; every rounding is `rne_mantissa` / `sr_mantissa` from
  `kernels/rounding.py`; matmuls are FP32 `tl.dot(..., input_precision="ieee")`. Bit-exact in the CPU interpreter
  against `lib/fp/reference.py`'s emulator (same tiles, same order of operations).
* native (NATIVE=True, GPU only, mantissa_bits <= 7, RNE or SR): q, k, v are BF16; the P̄V operand is rounded to
  M bits (`bf16_operand`: the hardware cast at M = 7 with RNE, else our helper and an exact cast) and QKᵀ / P̄V run
  on BF16 tensor cores with FP32 accumulation. The elementwise steps are the same code. Without round_p (P̄ kept in
  FP32) the P̄V product is `wide_dot` instead: the emulated path's FP32 `ieee` product, V widened exactly.

The arithmetic, per key tile j (rnd = round to `M` mantissa bits; bracketed steps are Numerics switches; the same
text, op by op, is the contract in `lib/fp/reference.py`'s docstring):
    s = (q @ kᵀ) * scale ; [round_s] rnd ; masked -> -inf
    m_t = rowmax(s) ; [fix "beta"] rows whose max appears >= 2 times (s >= m_t - tie_tol) get m_t = beta*m_t if
          m_t > 0 (unless beta*m_t overflows), 0 if m_t < 0; with max_shift, a shift (beta-1)*m_t or -m_t larger
          than max_shift becomes m_t + max_shift (underflow guard); [fix "beta_split"] also rows whose m_t equals
          the running max m_i within tie_tol (a max repeated across tiles)
    m_new = max(m_i, m_t) ; e = m_i - m_new [round_s_minus_m] ; alpha = exp(e)
    x = s - m_new [round_s_minus_m] ; p = exp(x) ; p_op = [round_p] rnd(p)
    l_i = l_i * alpha + rowsum([rowsum_rounded_p] p_op : p) [round_l: one rnd]
    acc = acc * alpha [round_acc: rnd] + (p_op @ v) [round_pv: rnd first] [round_acc: rnd]
finally o = acc / l_i  (normalize_then_round) or rnd(acc) / rnd(l_i), [round_o] rnd(o); lse = m_i + log(l_i) [round_lse].

Logical rounding blocks (`Numerics.round_block` = R ≠ 0; the authors' pure-PyTorch kernel rounds per 512-key tile,
ours computes on 64-key tiles). The rounding points that depend on tiling follow blocks of R keys (R a multiple of
BLOCK_N, aligned at multiples of R; R = -1: the whole row) instead of the compute tile, which stays BLOCK_N wide.
Per logical block B (its key tiles j ∈ B that reach the diagonal, in order):
    pass 1, each j ∈ B: s_j as above; m_B = max over B of rowmax(s_j); with the fix, the runner-up r_B (the second
          largest score of B counting multiplicity: a max held twice gives r_B = m_B), merged tile by tile
          (under RNE the rounding of S is applied to m_B and r_B instead of the tile: rounding is monotone)
    [fix "beta"] the tie test over all of B: r_B >= m_B - tie_tol (= "another score >= max - tie_tol"), then the
          same β rule as above on m_B; [fix "beta_split"] also |m_B - m_i| <= tie_tol (m_i: the running max)
    m_new = max(m_i, m_B) ; e = m_i - m_new [round_s_minus_m] ; alpha = exp(e)        (once per block)
    pass 2, each j ∈ B: s_j recomputed (bit-identical: same `score_tile`, same SR bits) ; x, p, p_op as above ;
          l_B += rowsum(p or p_op) ; pv_B += p_op @ v_j      (FP32 sums over the block's tiles, in order)
    l_i = l_i * alpha + l_B [round_l] ; acc = acc * alpha [round_acc] + pv_B [round_pv first] [round_acc]
So P̄V, ℓ and the O accumulator are rounded once per logical block, and the fix sees the whole block. No logical
block's S is ever held whole: the two passes walk 64-key tiles. R = 0 runs the per-tile code above (constexpr
ROUND_BLOCK=False), unchanged. Under SR a tile's own rounding points keep the tile's stream id, and the block's
points (e, ℓ, P̄V, accumulator) use the id of the block's first tile, so R = BLOCK_N is bit-identical to R = 0.

Changes from the Triton tutorial (`06-fused-attention.py`) and FlashAttention-2:
* every rounding point is a constexpr switch (above); the emulated path does FP32 `ieee` matmuls and rounds with
  integer bit operations (`kernels/rounding.py`), because the interpreter's BF16 casts truncate;
* natural-log `exp`/`log` of S − m instead of `exp2` of pre-scaled logits (the FMA in FA2's exp2 form changes the
  last FP32 bits of P̄, and the oracle must reproduce P̄ exactly);
* the β fix (and its underflow guard) on the tile or block max; logical rounding blocks (two passes per block);
* a padded head dim (any D in [16, 128], masked loads) and an optional FP32 copy of O before its final rounding;
* stochastic rounding with a Philox stream per rounding point, tile and element (salts below);
* no warp specialisation, TMA descriptors or FP8: plain pointers, one code path for every configuration.
"""
import triton
import triton.language as tl

from kernels.rounding import rne_mantissa, sr_mantissa

__all__ = ["attn_fwd_kernel", "round_point", "bf16_operand", "wide_dot", "load_rows", "score_tile"]

# Salts that give each rounding point its own random stream under stochastic rounding.
# The backward runs with the forward's seed: it recomputes S with SALT_S and must draw the forward's bits (else its P
# is another random rounding than the one that made O); its own rounding points have salts the forward never uses.
(SALT_S, SALT_SM, SALT_P, SALT_L, SALT_PV, SALT_ACC, SALT_O, SALT_LSE, SALT_DELTA, SALT_BP, SALT_DS,
 SALT_GRAD, SALT_BSM) = (tl.constexpr(i) for i in range(1, 14))


@triton.jit
def round_point(x, M: tl.constexpr, SR: tl.constexpr, seed, salt: tl.constexpr, tile_id, offs, HW: tl.constexpr):
    """Round FP32 `x` to M mantissa bits: nearest-even, or stochastic with Philox bits drawn from
    (seed + salt·1000003 + tile_id, offs) so that every rounding point, tile and element has its own bits.

    HW (the native path): BF16 RNE by the hardware cast (cvt.rn.bf16.f32) instead of our integer helper. The two are
    bit-identical on all 2³² FP32 patterns (NaN as a class; results/full/rounding_exhaustive.json), and the cast is a
    few instructions where the helper is a dozen integer ops per element, which made the paper placement's many
    elementwise rounding points (S, S−m, ℓ, P̄V, O) the native kernel's bottleneck. Never in the interpreter (its
    BF16 cast truncates): the native path is compiled-only."""
    if SR:
        return sr_mantissa(x, M, tl.randint(seed + salt * 1000003 + tile_id, offs))
    else:
        if HW and M == 7:
            return x.to(tl.bfloat16).to(tl.float32)
        else:
            return rne_mantissa(x, M)


@triton.jit
def bf16_operand(x, M: tl.constexpr, SR: tl.constexpr, seed, salt: tl.constexpr, tile_id, offs):
    """Native path: FP32 `x` rounded to M <= 7 mantissa bits, as a BF16 tensor-core operand.

    M = 7 with RNE: the hardware cast is the rounding. Otherwise (the precision dial, stochastic rounding) round with
    `round_point` first, with the same salt, tile id and element ids as the emulated path (so SR draws the same
    bits); the result has at most 7 mantissa bits and the same 8-bit exponent, so the cast to BF16 is exact. This
    keeps m < 7 and SR on the tensor cores: the emulated path's FP32 `ieee` matmuls made a training step ~17x
    slower (0.21 vs 3.59 steps/s for 10 concurrent runs on the H100,
    results/full/precision_dial_emulated_run.log)."""
    if M == 7 and not SR:
        return x.to(tl.bfloat16)
    else:
        return round_point(x, M, SR, seed, salt, tile_id, offs, True).to(tl.bfloat16)


@triton.jit
def wide_dot(a, b, SPLIT: tl.constexpr):
    """Native path, an operand the numerics keep in FP32 (P̄ without round_p; backward P and dS without round_bwd_p,
    round_ds): a @ b for FP32 `a` and the BF16 tile `b`, every product exact, summed in FP32.

    Default (SPLIT=False): as the emulated path computes it, an FP32 `ieee` product with `b` widened (exact); FP32
    FMAs, no tensor cores. SPLIT=True: `a` = a₁ + a₂ + a₃ exactly, three BF16 pieces (each the RNE cast of what the
    earlier ones leave: 8 + 8 + 8 significant bits cover FP32's 24; the remainders are exact in FP32), and
    a₃b + a₂b + a₁b on the BF16 tensor cores with FP32 accumulation (each aᵢ·b exact): three tensor-core matmuls
    instead of FMAs, and no register spills where the FMA form spills (the dK/dV kernel at head dim 64, ptxas for
    sm_90). It differs from the `ieee` form only in the order and grouping of the FP32 sums (as the other native
    matmuls do), and in pieces below BF16's smallest normal (|a| < 2⁻¹¹⁰, far below any P̄ or dS that reaches O)."""
    if SPLIT:
        a1 = a.to(tl.bfloat16)
        r = a - a1.to(tl.float32)
        a2 = r.to(tl.bfloat16)
        a3 = (r - a2.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(a3, b)
        acc = tl.dot(a2, b, acc)
        return tl.dot(a1, b, acc)
    else:
        return tl.dot(a, b.to(tl.float32), input_precision="ieee")


@triton.jit
def load_rows(base, rows, offs_d, N, D: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_D: tl.constexpr):
    """Load a (len(rows), len(offs_d)) tile of a row-major (N, D) matrix at `base`; zeros outside."""
    ptrs = base + rows[:, None] * D + offs_d[None, :]
    if CHECK_ROWS:
        if CHECK_D:
            return tl.load(ptrs, mask=(rows[:, None] < N) & (offs_d[None, :] < D), other=0.0)
        else:
            return tl.load(ptrs, mask=rows[:, None] < N, other=0.0)
    else:
        if CHECK_D:
            return tl.load(ptrs, mask=offs_d[None, :] < D, other=0.0)
        else:
            return tl.load(ptrs)


@triton.jit
def score_tile(q, k, scale, offs_m, offs_n, N, seed, tile_id,
               CAUSAL: tl.constexpr, MASK: tl.constexpr, ROUND_S: tl.constexpr, M_BITS: tl.constexpr,
               SR: tl.constexpr, NATIVE: tl.constexpr, BLOCK_N: tl.constexpr):
    """s = (q @ kᵀ)·scale, optionally rounded, masked entries -inf. Shared by forward and backward so that both
    compute bit-identical scores. q: (BLOCK_M, DP), k: (BLOCK_N, DP) -> s: (BLOCK_M, BLOCK_N) FP32."""
    if NATIVE:
        s = tl.dot(q, tl.trans(k))
    else:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    s = s * scale
    if ROUND_S:
        s = round_point(s, M_BITS, SR, seed, SALT_S, tile_id,
                        (offs_m % 4096)[:, None] * BLOCK_N + (offs_n % BLOCK_N)[None, :], NATIVE)
    if MASK:
        valid = offs_n[None, :] < N
        if CAUSAL:
            valid = valid & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, float("-inf"))
    return s


@triton.jit
def _fixed_max(m_t, repeated, m_i, beta, tie_tol, max_shift, FIX: tl.constexpr, CLAMP_SHIFT: tl.constexpr):
    """The β fix (Qiu & Yao, Alg. 1) on a (tile or logical block) row max `m_t` whose rows `repeated` hold it at
    least twice: β·m_t if m_t > 0 (unless β·m_t overflows), 0 if m_t < 0; with CLAMP_SHIFT a shift (β−1)·m_t or −m_t
    larger than max_shift becomes m_t + max_shift (underflow guard). FIX == 2 ("beta_split") also fixes rows whose
    m_t equals the running max m_i of the earlier tiles within tie_tol (a max repeated across a boundary; a shifted
    running max never matches, its P̄ is already < 1). Rows with every score masked (m_t = −inf) are left alone."""
    if FIX == 2:
        repeated = repeated | ((m_t > float("-inf")) & (m_i > float("-inf")) & (tl.abs(m_t - m_i) <= tie_tol))
    scaled = beta * m_t
    m_fix = tl.where(repeated & (m_t > 0) & (scaled < float("inf")), scaled, m_t)
    m_fix = tl.where(repeated & (m_fix < 0), 0.0, m_fix)
    if CLAMP_SHIFT:
        d = tl.where(m_t > 0, (beta - 1.0) * m_t, -m_t)
        m_fix = tl.where(repeated & (m_t != 0) & (d > max_shift), m_t + max_shift, m_fix)
    return m_fix


@triton.jit
def _probs(s, m_use, seed, tile_id, offs_el, NATIVE: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
           ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr, ROWSUM_ROUNDED_P: tl.constexpr):
    """P̄ of one key tile: x = s − m_use [round_s_minus_m], p = exp(x), the P̄V operand p_op [round_p] (BF16 on the
    native path) and the tile's row sum of p (or of the rounded p: rowsum_rounded_p). Returns (p_op, l_t)."""
    x = s - m_use[:, None]
    if ROUND_S_MINUS_M:
        x = round_point(x, M_BITS, SR, seed, SALT_SM, tile_id, offs_el, NATIVE)
    p = tl.exp(x)
    if NATIVE:
        if ROUND_P:
            p_op = bf16_operand(p, M_BITS, SR, seed, SALT_P, tile_id, offs_el)
            p_val = p_op.to(tl.float32)
        else:            # P̄ stays FP32: the P̄V product is `wide_dot`'s
            p_op = p
            p_val = p
    else:
        if ROUND_P:
            p_op = round_point(p, M_BITS, SR, seed, SALT_P, tile_id, offs_el, NATIVE)
        else:
            p_op = p
        p_val = p_op
    if ROWSUM_ROUNDED_P:
        l_t = tl.sum(p_val, 1)
    else:
        l_t = tl.sum(p, 1)
    return p_op, l_t


@triton.jit
def _rescale_add(acc, l_i, alpha, l_t, pv, seed, tile_id, offs_acc, NATIVE: tl.constexpr, M_BITS: tl.constexpr,
                 SR: tl.constexpr, BLOCK_M: tl.constexpr, ROUND_L: tl.constexpr, ROUND_PV: tl.constexpr,
                 ROUND_ACC: tl.constexpr):
    """ℓ = ℓ·α + ℓ_t [round_l]; acc = acc·α [round_acc] + pv [round_pv first] [round_acc]. Once per key tile, or
    once per logical rounding block (then l_t and pv are the block's FP32 sums)."""
    l_i = l_i * alpha + l_t
    if ROUND_L:
        l_i = round_point(l_i, M_BITS, SR, seed, SALT_L, tile_id, tl.arange(0, BLOCK_M), NATIVE)
    acc = acc * alpha[:, None]
    if ROUND_ACC:
        acc = round_point(acc, M_BITS, SR, seed, SALT_ACC, tile_id, offs_acc, NATIVE)
    if ROUND_PV:
        pv = round_point(pv, M_BITS, SR, seed, SALT_PV, tile_id, offs_acc, NATIVE)
    acc = acc + pv
    if ROUND_ACC:
        acc = round_point(acc, M_BITS, SR, seed, SALT_ACC, tile_id + 7919, offs_acc, NATIVE)
    return acc, l_i


@triton.jit
def _alpha(m_i, m_t, seed, tile_id, NATIVE: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
           BLOCK_M: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr):
    """m_new = max(m_i, m_t), the shift m_use (0 for rows masked so far, so exp gives 0, not NaN) and the rescale
    α = exp(m_i − m_use [round_s_minus_m]). Returns (m_new, m_use, alpha)."""
    m_new = tl.maximum(m_i, m_t)
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    e = m_i - m_use
    if ROUND_S_MINUS_M:
        e = round_point(e, M_BITS, SR, seed, SALT_SM, tile_id + 7919, tl.arange(0, BLOCK_M), NATIVE)
    return m_new, m_use, tl.exp(e)


@triton.jit
def _fwd_step(acc, l_i, m_i, q, K_base, V_base, start_n, offs_m, offs_d, scale, beta, tie_tol, max_shift, N, seed,
              tile_id, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CLAMP_SHIFT: tl.constexpr,
              CAUSAL: tl.constexpr, MASK: tl.constexpr, CHECK_D: tl.constexpr, FIX: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr,
              SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr,
              ROWSUM_ROUNDED_P: tl.constexpr, ROUND_L: tl.constexpr, ROUND_PV: tl.constexpr,
              ROUND_ACC: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """One key tile of the online softmax (round_block = 0): returns the updated (acc, l_i, m_i)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_el = (offs_m % 4096)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]   # SR offsets (element id)
    # The P̄V product and the O accumulator are (BLOCK_M, head dim) tiles, not (BLOCK_M, BLOCK_N): their own element
    # ids, with stride 128 ≥ any padded head dim (as the dQ accumulator in flash_bwd.py).
    offs_acc = (offs_m % 4096)[:, None] * 128 + offs_d[None, :]
    k = load_rows(K_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    v = load_rows(V_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    s = score_tile(q, k, scale, offs_m, offs_n, N, seed, tile_id, CAUSAL, MASK, ROUND_S, M_BITS, SR, NATIVE,
                   BLOCK_N)
    m_t = tl.max(s, 1)
    if FIX:
        # The per-tile test: the tile max occurs ≥ 2 times (s >= m_t − tie_tol; tie_tol = 0 is exact equality).
        ties = tl.sum((s >= (m_t - tie_tol)[:, None]).to(tl.int32), 1)
        m_t = _fixed_max(m_t, (ties >= 2) & (m_t > float("-inf")), m_i, beta, tie_tol, max_shift, FIX, CLAMP_SHIFT)
    m_new, m_use, alpha = _alpha(m_i, m_t, seed, tile_id, NATIVE, M_BITS, SR, BLOCK_M, ROUND_S_MINUS_M)
    p_op, l_t = _probs(s, m_use, seed, tile_id, offs_el, NATIVE, M_BITS, SR, ROUND_S_MINUS_M, ROUND_P,
                       ROWSUM_ROUNDED_P)
    if NATIVE:
        if ROUND_P:
            pv = tl.dot(p_op, v)
        else:
            pv = wide_dot(p_op, v, WIDE_SPLIT)
    else:
        pv = tl.dot(p_op, v, input_precision="ieee")
    acc, l_i = _rescale_add(acc, l_i, alpha, l_t, pv, seed, tile_id, offs_acc, NATIVE, M_BITS, SR, BLOCK_M, ROUND_L,
                            ROUND_PV, ROUND_ACC)
    return acc, l_i, m_new


# ------------------------------------------------------------------------------- logical rounding blocks (round_block)
@triton.jit
def _block_max_step(m1, m2, q, K_base, start_n, offs_m, offs_d, scale, N, seed, tile_id, D: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr, CHECK_D: tl.constexpr,
                    FIX: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
                    ROUND_S: tl.constexpr):
    """Pass 1 over one key tile of a logical block: merge the tile's scores into the running top two of each row,
    m1 ≥ m2 (m2 counts multiplicity: a max held twice gives m2 = m1; tracked only with the fix). S is the same
    `score_tile` (same tile id, so the same SR bits) that pass 2 recomputes, so the block max is P̄'s max exactly.
    ROUND_S here is only passed for stochastic rounding: RNE is monotone, so the top two of rnd(S) are rnd of the
    top two of S (multiplicity included) and the caller rounds the two row vectors instead of the tile."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_rows(K_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    s = score_tile(q, k, scale, offs_m, offs_n, N, seed, tile_id, CAUSAL, MASK, ROUND_S, M_BITS, SR, NATIVE,
                   BLOCK_N)
    t1 = tl.max(s, 1)
    if FIX:
        top = s == t1[:, None]
        t2 = tl.max(tl.where(top, float("-inf"), s), 1)
        t2 = tl.where(tl.sum(top.to(tl.int32), 1) >= 2, t1, t2)
        m2 = tl.maximum(tl.minimum(m1, t1), tl.maximum(m2, t2))
    m1 = tl.maximum(m1, t1)
    return m1, m2


@triton.jit
def _block_pv_step(l_b, pv, q, K_base, V_base, start_n, m_use, offs_m, offs_d, scale, N, seed, tile_id,
                   D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK: tl.constexpr,
                   CHECK_D: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr, SR: tl.constexpr,
                   ROUND_S: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr,
                   ROWSUM_ROUNDED_P: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """Pass 2 over one key tile of a logical block: recompute S, P̄ = exp(S − m_use) as in a plain tile, and add the
    tile's row sum and P̄V product to the block's FP32 sums (l_b, pv)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_el = (offs_m % 4096)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    k = load_rows(K_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    v = load_rows(V_base, offs_n, offs_d, N, D, MASK, CHECK_D)
    s = score_tile(q, k, scale, offs_m, offs_n, N, seed, tile_id, CAUSAL, MASK, ROUND_S, M_BITS, SR, NATIVE,
                   BLOCK_N)
    p_op, l_t = _probs(s, m_use, seed, tile_id, offs_el, NATIVE, M_BITS, SR, ROUND_S_MINUS_M, ROUND_P,
                       ROWSUM_ROUNDED_P)
    l_b = l_b + l_t
    if NATIVE:
        if ROUND_P:
            pv = tl.dot(p_op, v, pv)          # the tensor-core accumulator is the block's FP32 sum
        else:
            pv = pv + wide_dot(p_op, v, WIDE_SPLIT)
    else:
        pv = pv + tl.dot(p_op, v, input_precision="ieee")
    return l_b, pv


@triton.jit
def _fwd_block(acc, l_i, m_i, q, K_base, V_base, b0, b1, lo, tile0, offs_m, offs_d, scale, beta, tie_tol, max_shift,
               N, seed, D: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               RB_TILES: tl.constexpr, STATIC_LOOPS: tl.constexpr, CLAMP_SHIFT: tl.constexpr, CAUSAL: tl.constexpr,
               CHECK_D: tl.constexpr, FIX: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr,
               SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr,
               ROWSUM_ROUNDED_P: tl.constexpr, ROUND_L: tl.constexpr, ROUND_PV: tl.constexpr,
               ROUND_ACC: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """One logical rounding block: the key tiles starting at b0, b0 + BLOCK_N, … below b1 (b1 ≤ the row's last
    visible key; b0 a multiple of the block width). Keys below `lo` need no mask. STATIC_LOOPS (interpreter): the
    block's RB_TILES tiles with a skip test instead of runtime loop bounds. Returns the updated (acc, l_i, m_i)."""
    bid = tile0 + b0 // BLOCK_N           # the block's SR stream id: its first tile's
    m1 = tl.full([BLOCK_M], float("-inf"), tl.float32)
    m2 = tl.full([BLOCK_M], float("-inf"), tl.float32)
    # pass 1: the block's row max (and, with the fix, the runner-up) over all its key tiles
    if STATIC_LOOPS:
        for t in range(0, RB_TILES):
            if b0 + t * BLOCK_N < b1:
                m1, m2 = _block_max_step(m1, m2, q, K_base, b0 + t * BLOCK_N, offs_m, offs_d, scale, N, seed,
                                         bid + t, D, BLOCK_N, CAUSAL, True, CHECK_D, FIX, NATIVE, M_BITS, SR,
                                         ROUND_S and SR)
    else:
        for start_n in range(b0, tl.minimum(b1, lo), BLOCK_N):
            m1, m2 = _block_max_step(m1, m2, q, K_base, start_n, offs_m, offs_d, scale, N, seed,
                                     tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL, False, CHECK_D, FIX, NATIVE,
                                     M_BITS, SR, ROUND_S and SR)
        for start_n in range(tl.maximum(b0, lo), b1, BLOCK_N):
            m1, m2 = _block_max_step(m1, m2, q, K_base, start_n, offs_m, offs_d, scale, N, seed,
                                     tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL, True, CHECK_D, FIX, NATIVE,
                                     M_BITS, SR, ROUND_S and SR)
    if ROUND_S and not SR:
        # monotone RNE: the rounded tile's top two are the rounded top two (no seed or stream is used)
        m1 = round_point(m1, M_BITS, False, seed, SALT_S, bid, tl.arange(0, BLOCK_M), NATIVE)
        if FIX:
            m2 = round_point(m2, M_BITS, False, seed, SALT_S, bid, tl.arange(0, BLOCK_M), NATIVE)
    m_t = m1
    if FIX:
        # The tie test over the whole block: "another score >= max − tie_tol" is "runner-up >= max − tie_tol".
        m_t = _fixed_max(m1, (m2 >= m1 - tie_tol) & (m1 > float("-inf")), m_i, beta, tie_tol, max_shift, FIX,
                         CLAMP_SHIFT)
    m_new, m_use, alpha = _alpha(m_i, m_t, seed, bid, NATIVE, M_BITS, SR, BLOCK_M, ROUND_S_MINUS_M)
    # pass 2: P̄ with the block's max, the row sum and P̄V summed in FP32 over the block's tiles
    l_b = tl.zeros([BLOCK_M], tl.float32)
    pv = tl.zeros([BLOCK_M, DP], tl.float32)
    if STATIC_LOOPS:
        for t in range(0, RB_TILES):
            if b0 + t * BLOCK_N < b1:
                l_b, pv = _block_pv_step(l_b, pv, q, K_base, V_base, b0 + t * BLOCK_N, m_use, offs_m, offs_d, scale,
                                         N, seed, bid + t, D, BLOCK_N, CAUSAL, True, CHECK_D, NATIVE, M_BITS, SR,
                                         ROUND_S, ROUND_S_MINUS_M, ROUND_P, ROWSUM_ROUNDED_P, WIDE_SPLIT)
    else:
        for start_n in range(b0, tl.minimum(b1, lo), BLOCK_N):
            l_b, pv = _block_pv_step(l_b, pv, q, K_base, V_base, start_n, m_use, offs_m, offs_d, scale, N, seed,
                                     tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL, False, CHECK_D, NATIVE, M_BITS,
                                     SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P, ROWSUM_ROUNDED_P, WIDE_SPLIT)
        for start_n in range(tl.maximum(b0, lo), b1, BLOCK_N):
            l_b, pv = _block_pv_step(l_b, pv, q, K_base, V_base, start_n, m_use, offs_m, offs_d, scale, N, seed,
                                     tile0 + start_n // BLOCK_N, D, BLOCK_N, CAUSAL, True, CHECK_D, NATIVE, M_BITS,
                                     SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P, ROWSUM_ROUNDED_P, WIDE_SPLIT)
    offs_acc = (offs_m % 4096)[:, None] * 128 + offs_d[None, :]
    acc, l_i = _rescale_add(acc, l_i, alpha, l_b, pv, seed, bid, offs_acc, NATIVE, M_BITS, SR, BLOCK_M, ROUND_L,
                            ROUND_PV, ROUND_ACC)
    return acc, l_i, m_new


@triton.jit
def attn_fwd_kernel(Q, K, V, O, O32, LSE, scale, beta, tie_tol, max_shift, N, seed, rb_keys,
                    D: tl.constexpr, CLAMP_SHIFT: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    N_TILES: tl.constexpr, ROUND_BLOCK: tl.constexpr, RB_TILES: tl.constexpr, CAUSAL: tl.constexpr, FIX: tl.constexpr, NATIVE: tl.constexpr,
                    STATIC_LOOPS: tl.constexpr, STORE_O32: tl.constexpr, M_BITS: tl.constexpr,
                    SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr,
                    ROWSUM_ROUNDED_P: tl.constexpr, ROUND_L: tl.constexpr, ROUND_PV: tl.constexpr,
                    ROUND_ACC: tl.constexpr, NORMALIZE_THEN_ROUND: tl.constexpr, ROUND_LSE: tl.constexpr,
                    ROUND_O: tl.constexpr, WIDE_SPLIT: tl.constexpr = False):
    """Forward for one (query tile, batch·head). Q/K/V/O: (BH, N, D) row-major; LSE: (BH, N) FP32; O32 (FP32 O
    before the final rounding, written when STORE_O32). STATIC_LOOPS walks all N_TILES key tiles with a skip test
    (the CPU interpreter cannot take runtime loop bounds); otherwise the loop bounds are runtime values and the
    tiles that need no mask run in a first, mask-free loop. Both visit the same tiles in the same order."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * N * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, DP)
    CHECK_D: tl.constexpr = DP != D
    q = load_rows(Q + base, offs_m, offs_d, N, D, True, CHECK_D)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DP], tl.float32)
    if CAUSAL:
        hi = tl.minimum(N, (start_m + 1) * BLOCK_M)
        lo = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N      # tiles left of `lo` are fully visible to every row
    else:
        hi = N
        lo = N // BLOCK_N * BLOCK_N
    tile0 = (bh * 131 + start_m) * 1031
    if ROUND_BLOCK:
        # logical rounding blocks of rb_keys keys (a multiple of BLOCK_N; the whole row for round_block = -1)
        if STATIC_LOOPS:
            for b in range(0, (N_TILES + RB_TILES - 1) // RB_TILES):
                if b * RB_TILES * BLOCK_N < hi:
                    acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, K + base, V + base, b * RB_TILES * BLOCK_N,
                                               tl.minimum((b + 1) * RB_TILES * BLOCK_N, hi), lo, tile0, offs_m,
                                               offs_d, scale, beta, tie_tol, max_shift, N, seed, D, DP, BLOCK_M,
                                               BLOCK_N, RB_TILES, True, CLAMP_SHIFT, CAUSAL, CHECK_D, FIX, NATIVE,
                                               M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P, ROWSUM_ROUNDED_P,
                                               ROUND_L, ROUND_PV, ROUND_ACC, WIDE_SPLIT)
        else:
            for b0 in range(0, hi, rb_keys):
                acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, K + base, V + base, b0, tl.minimum(b0 + rb_keys, hi), lo,
                                           tile0, offs_m, offs_d, scale, beta, tie_tol, max_shift, N, seed, D, DP,
                                           BLOCK_M, BLOCK_N, RB_TILES, False, CLAMP_SHIFT, CAUSAL, CHECK_D, FIX,
                                           NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P, ROWSUM_ROUNDED_P,
                                           ROUND_L, ROUND_PV, ROUND_ACC, WIDE_SPLIT)
    else:
        if STATIC_LOOPS:
            for j in range(0, N_TILES):
                if j * BLOCK_N < hi:
                    acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K + base, V + base, j * BLOCK_N, offs_m, offs_d, scale,
                                              beta, tie_tol, max_shift, N, seed, tile0 + j, D, BLOCK_M, BLOCK_N,
                                              CLAMP_SHIFT, CAUSAL, True, CHECK_D,
                                              FIX, NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P,
                                              ROWSUM_ROUNDED_P, ROUND_L, ROUND_PV, ROUND_ACC, WIDE_SPLIT)
        else:
            for start_n in range(0, lo, BLOCK_N):
                acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K + base, V + base, start_n, offs_m, offs_d, scale,
                                          beta, tie_tol, max_shift, N, seed, tile0 + start_n // BLOCK_N, D, BLOCK_M,
                                          BLOCK_N, CLAMP_SHIFT, CAUSAL,
                                          False, CHECK_D, FIX, NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P,
                                          ROWSUM_ROUNDED_P, ROUND_L, ROUND_PV, ROUND_ACC, WIDE_SPLIT)
            for start_n in range(lo, hi, BLOCK_N):
                acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K + base, V + base, start_n, offs_m, offs_d, scale,
                                          beta, tie_tol, max_shift, N, seed, tile0 + start_n // BLOCK_N, D, BLOCK_M,
                                          BLOCK_N, CLAMP_SHIFT, CAUSAL,
                                          True, CHECK_D, FIX, NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P,
                                          ROWSUM_ROUNDED_P, ROUND_L, ROUND_PV, ROUND_ACC, WIDE_SPLIT)
    # Padding rows (offs_m >= N) are never stored; keep their arithmetic finite anyway.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    offs_el = (offs_m % 4096)[:, None] * DP + offs_d[None, :]
    if NORMALIZE_THEN_ROUND:
        o = acc / l_safe[:, None]
    else:
        o = round_point(acc, M_BITS, SR, seed, SALT_O, tile0, offs_el, NATIVE) / \
            round_point(l_safe, M_BITS, SR, seed, SALT_L, tile0, offs_m % 4096 + 12288, NATIVE)[:, None]
    o_ptrs = base + offs_m[:, None] * D + offs_d[None, :]
    o_mask = (offs_m[:, None] < N) & (offs_d[None, :] < D)
    if STORE_O32:
        tl.store(O32 + o_ptrs, o, mask=o_mask)
    if ROUND_O:
        o = round_point(o, M_BITS, SR, seed, SALT_O, tile0 + 1, offs_el, NATIVE)
    tl.store(O + o_ptrs, o.to(O.dtype.element_ty), mask=o_mask)
    m_fin = tl.where(m_i == float("-inf"), 0.0, m_i)
    lse = m_fin + tl.log(l_safe)
    if ROUND_LSE:
        lse = round_point(lse, M_BITS, SR, seed, SALT_LSE, tile0, offs_m % 4096, NATIVE)
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
