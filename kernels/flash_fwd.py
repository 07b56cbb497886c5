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
  on BF16 tensor cores with FP32 accumulation. The elementwise steps are the same code.

The arithmetic (`.notes/arithmetic-contract.md`), per key tile j (rnd = round to `M` mantissa bits; bracketed
steps are Numerics switches):
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
"""
import triton
import triton.language as tl

from kernels.rounding import rne_mantissa, sr_mantissa

__all__ = ["attn_fwd_kernel", "round_point", "bf16_operand", "load_rows", "score_tile"]

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
def _fwd_step(acc, l_i, m_i, q, K_base, V_base, start_n, offs_m, offs_d, scale, beta, tie_tol, max_shift, N, seed,
              tile_id, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CLAMP_SHIFT: tl.constexpr,
              CAUSAL: tl.constexpr, MASK: tl.constexpr, CHECK_D: tl.constexpr, FIX: tl.constexpr, NATIVE: tl.constexpr, M_BITS: tl.constexpr,
              SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr,
              ROWSUM_ROUNDED_P: tl.constexpr, ROUND_L: tl.constexpr, ROUND_PV: tl.constexpr,
              ROUND_ACC: tl.constexpr):
    """One key tile of the online softmax: returns the updated (acc, l_i, m_i)."""
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
        # beta fix (Qiu & Yao, Alg. 1): rows whose tile max is repeated get a shifted max so that no P̄ equals 1.
        # With tie_tol = 0 the test is exact equality with the max. Rows with every score masked (m_t = -inf)
        # are left alone: they are not ties, and must not pull the running max up to 0.
        ties = tl.sum((s >= (m_t - tie_tol)[:, None]).to(tl.int32), 1)
        repeated = (ties >= 2) & (m_t > float("-inf"))
        if FIX == 2:
            # "beta_split": a tile max equal (within tie_tol) to the running max of the earlier tiles repeats the
            # row max across a tile boundary. The per-tile test cannot see it, and both entries would get P̄ = 1.
            # (A shifted running max never matches: its P̄ is already < 1.)
            repeated = repeated | ((m_t > float("-inf")) & (m_i > float("-inf")) & (tl.abs(m_t - m_i) <= tie_tol))
        scaled = beta * m_t
        m_fix = tl.where(repeated & (m_t > 0) & (scaled < float("inf")), scaled, m_t)
        m_fix = tl.where(repeated & (m_fix < 0), 0.0, m_fix)
        if CLAMP_SHIFT:
            # Underflow guard (LEAD-DECISIONS 1): never shift a repeated max by more than max_shift.
            d = tl.where(m_t > 0, (beta - 1.0) * m_t, -m_t)
            m_fix = tl.where(repeated & (m_t != 0) & (d > max_shift), m_t + max_shift, m_fix)
        m_t = m_fix
    m_new = tl.maximum(m_i, m_t)
    # Rows with every score masked so far keep m = -inf; shift them by 0 so that exp gives 0, not NaN.
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    e = m_i - m_use
    if ROUND_S_MINUS_M:
        e = round_point(e, M_BITS, SR, seed, SALT_SM, tile_id + 7919, tl.arange(0, BLOCK_M), NATIVE)
    alpha = tl.exp(e)
    x = s - m_use[:, None]
    if ROUND_S_MINUS_M:
        x = round_point(x, M_BITS, SR, seed, SALT_SM, tile_id, offs_el, NATIVE)
    p = tl.exp(x)
    if NATIVE:
        p_op = bf16_operand(p, M_BITS, SR, seed, SALT_P, tile_id, offs_el)   # native requires round_p
        p_val = p_op.to(tl.float32)
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
    l_i = l_i * alpha + l_t
    if ROUND_L:
        l_i = round_point(l_i, M_BITS, SR, seed, SALT_L, tile_id, tl.arange(0, BLOCK_M), NATIVE)
    acc = acc * alpha[:, None]
    if ROUND_ACC:
        acc = round_point(acc, M_BITS, SR, seed, SALT_ACC, tile_id, offs_acc, NATIVE)
    if NATIVE:
        pv = tl.dot(p_op, v)
    else:
        pv = tl.dot(p_op, v, input_precision="ieee")
    if ROUND_PV:
        pv = round_point(pv, M_BITS, SR, seed, SALT_PV, tile_id, offs_acc, NATIVE)
    acc = acc + pv
    if ROUND_ACC:
        acc = round_point(acc, M_BITS, SR, seed, SALT_ACC, tile_id + 7919, offs_acc, NATIVE)
    return acc, l_i, m_new


@triton.jit
def attn_fwd_kernel(Q, K, V, O, O32, LSE, scale, beta, tie_tol, max_shift, N, seed,
                    D: tl.constexpr, CLAMP_SHIFT: tl.constexpr, DP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    N_TILES: tl.constexpr, CAUSAL: tl.constexpr, FIX: tl.constexpr, NATIVE: tl.constexpr,
                    STATIC_LOOPS: tl.constexpr, STORE_O32: tl.constexpr, M_BITS: tl.constexpr,
                    SR: tl.constexpr, ROUND_S: tl.constexpr, ROUND_S_MINUS_M: tl.constexpr, ROUND_P: tl.constexpr,
                    ROWSUM_ROUNDED_P: tl.constexpr, ROUND_L: tl.constexpr, ROUND_PV: tl.constexpr,
                    ROUND_ACC: tl.constexpr, NORMALIZE_THEN_ROUND: tl.constexpr, ROUND_LSE: tl.constexpr,
                    ROUND_O: tl.constexpr):
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
    if STATIC_LOOPS:
        for j in range(0, N_TILES):
            if j * BLOCK_N < hi:
                acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K + base, V + base, j * BLOCK_N, offs_m, offs_d, scale,
                                          beta, tie_tol, max_shift, N, seed, tile0 + j, D, BLOCK_M, BLOCK_N,
                                          CLAMP_SHIFT, CAUSAL, True, CHECK_D,
                                          FIX, NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P,
                                          ROWSUM_ROUNDED_P, ROUND_L, ROUND_PV, ROUND_ACC)
    else:
        for start_n in range(0, lo, BLOCK_N):
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K + base, V + base, start_n, offs_m, offs_d, scale,
                                      beta, tie_tol, max_shift, N, seed, tile0 + start_n // BLOCK_N, D, BLOCK_M,
                                      BLOCK_N, CLAMP_SHIFT, CAUSAL,
                                      False, CHECK_D, FIX, NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P,
                                      ROWSUM_ROUNDED_P, ROUND_L, ROUND_PV, ROUND_ACC)
        for start_n in range(lo, hi, BLOCK_N):
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K + base, V + base, start_n, offs_m, offs_d, scale,
                                      beta, tie_tol, max_shift, N, seed, tile0 + start_n // BLOCK_N, D, BLOCK_M,
                                      BLOCK_N, CLAMP_SHIFT, CAUSAL,
                                      True, CHECK_D, FIX, NATIVE, M_BITS, SR, ROUND_S, ROUND_S_MINUS_M, ROUND_P,
                                      ROWSUM_ROUNDED_P, ROUND_L, ROUND_PV, ROUND_ACC)
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
