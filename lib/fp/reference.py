"""The oracle for the flash-attention kernels: an FP64 reference and a numpy emulator of any `Numerics` value.

Two things live here.

1. `attention_fp64(q, k, v, do=None, causal=, scale=)`: softmax attention in float64 on the whole matrix (no
   tiles), forward O and LSE and, given dO, the gradients dQ, dK, dV. This is the accuracy yardstick.

2. `emulate_forward`, `emulate_delta`, `emulate_backward` (and `emulate_attention` for both): the FlashAttention-2
   algorithm on BLOCK_M × BLOCK_N tiles with every rounding point of a `lib.fp.numerics.Numerics` value, written so that
   Triton's CPU interpreter running `kernels/flash_fwd.py` / `kernels/flash_bwd.py` on the emulated path gives
   **bit-identical** results, under round-to-nearest-even and under stochastic rounding (the kernels' Philox bits
   are replayed: `lib.fp.bf16.philox_randint`), given the kernels' `seed` and the same tiles.

Arithmetic (the contract the kernels follow)
---------------------------------------------
Everything is float32 numpy. ``rnd(x)`` is `lib.fp.bf16.round_rne(x, mantissa_bits)`, or under SR
`round_stochastic(x, random_bits=Philox(seed + salt·1000003 + tile id, element ids))` as in the kernels'
`round_point`: each rounding point has its salt, each tile (query tile i, key tile j of head bh) the id
(bh·131 + i)·1031 + j (a logical block: its first tile's), each element its id; the backward recomputes S with the
forward's salt and ids, so it draws the forward's bits.
What the interpreter does, and therefore what this module does, op by op (triton 3.6 ``runtime/interpreter.py``):
``tl.dot(a, b)`` is ``np.matmul(a, b, dtype=float32) + 0`` on the zero-padded tile shapes (BM, DP) @ (DP, BN) etc.,
with a transposed *view* where the kernel writes ``tl.trans``; ``tl.sum(x, 1)`` is ``np.sum(x, axis=1)`` on the
padded tile (numpy's pairwise summation, so the padding is part of the grouping); ``tl.max`` is ``np.nanmax``;
``tl.exp``/``tl.log`` are ``np.exp``/``np.log``; ``/`` is ``np.divide``. DP = max(16, next power of two ≥ head_dim).

Masking: valid(r, c) = c < N and (not causal or c ≤ r). Masked scores are −inf (set after the optional rounding of
S). Tiles entirely above the causal diagonal are skipped, as FA2 does; rows are never fully masked in causal
self-attention, but a row *within a tile* can be, and the padding rows of the last query tile are computed and
dropped. The scale α multiplies the FP32 product: ``s = dot(q, kᵀ) * α`` (one FP32 multiply), then ``[round_s]``.

Forward, one query tile, key tiles j = 0, 1, … in increasing order (m = −inf, ℓ = 0, acc = 0)::

    s   = dot(q, kᵀ)·α ; [round_s] rnd ; masked → −inf
    m_t = max(s, 1) ; [fix="beta"] m_t = fixed_row_max(s, m_t, β, tie_tol)
    m_new = max(m, m_t) ; m_use = 0 where m_new = −inf else m_new
    e = m − m_use ; [round_s_minus_m] rnd ; α_j = exp(e)
    x = s − m_use ; [round_s_minus_m] rnd ; p = exp(x) ; p_op = [round_p] rnd(p)
    ℓ_t = sum(p_op if rowsum_rounded_p else p, 1) ; ℓ = ℓ·α_j + ℓ_t ; [round_l] rnd
    acc = acc·α_j ; [round_acc] rnd ; pv = dot(p_op, v) ; [round_pv] rnd ; acc = acc + pv ; [round_acc] rnd
    m = m_new
  end: ℓ_safe = 1 where ℓ = 0; O = acc/ℓ_safe (normalize_then_round) or rnd(acc)/rnd(ℓ_safe); [round_o] rnd
       LSE = (0 if m = −inf else m) + log(ℓ_safe) ; [round_lse] rnd

Logical rounding blocks (`Numerics.round_block` = R ≠ 0): the key tiles are grouped into blocks of R keys (R/BLOCK_N
tiles, aligned at multiples of R; R = −1: all of the row's tiles), and the per-tile steps above become per-block
steps. For each block B (its tiles j that reach the diagonal, in increasing order)::

    s_j as above for every j ∈ B ; s_B = the tiles side by side (BM, |B|·BN)
    m_t = max(s_B, 1) ; [fix] m_t = fixed_row_max(s_B, m_t, …): the tie test over the whole block
    m_new, m_use, e, α as above (once per block)
    ℓ_B = 0 ; pv_B = 0 ; for j ∈ B in order: x = s_j − m_use [round_s_minus_m] ; p = exp(x) ; p_op = [round_p] rnd(p)
                                             ℓ_B = ℓ_B + sum(p_op or p, 1) ; pv_B = pv_B + dot(p_op, v_j)
    ℓ = ℓ·α + ℓ_B ; [round_l] rnd ; acc = acc·α ; [round_acc] rnd ; [round_pv] pv_B = rnd(pv_B) ;
    acc = acc + pv_B ; [round_acc] rnd ; m = m_new

R = 0 is the same code with one tile per block (ℓ_B = 0 + sum and pv_B = 0 + dot are exact, so nothing changes).
The kernel finds m_B and the tie in a first pass over the block's tiles (a running top two: the tie test
"another score ≥ max − tie_tol" is "runner-up ≥ max − tie_tol") and recomputes S in a second; the result is the
same. The backward uses the blocks only with round_grad_acc (below).

δ: "saved_o"/"fp32_o": t = O∘dO on the (BM, DP) tile ; [round_delta_products] rnd ; δ = sum(t, 1) with O the saved
O, or the O of an all-FP32 forward (same tiles and fix). "dp_p": δ = Σ_j sum(p∘dp, 1) over the key tiles of the
dQ loop with FP32 p and FP32 dp. "dp_p_norm": the same, and ΣP = Σ_j sum(p, 1) beside it (same p, same order);
δ = δ / ΣP (ΣP = 0, a padding row: / 1). Then [round_delta] rnd.

Backward, per (query tile, key tile), identical in the dQ loop (key tiles in order) and the dK/dV loop (query tiles
in order); padding query rows have LSE = +inf and δ = 0::

    s as forward ; x = s − LSE ; [round_bwd_s_minus_lse] rnd ; p = exp(x) ; p_op = [round_bwd_p] rnd(p)
    dp = dot(dO, vᵀ) ; [round_dp] rnd ; t = dp − δ ; [round_dp and round_delta] rnd ; ds = p∘t ; ds_op = [round_ds] rnd
    dQ: g = dot(ds_op, k) ; dK: g = dot(ds_opᵀ, q) ; dV: g = dot(p_opᵀ, dO) ;
        each: [round_grad_acc] g = rnd(g) ; acc = acc + g ; [round_grad_acc] rnd
    end: dQ·α, dK·α (FP32)

With round_grad_acc and round_block = R ≠ 0, g is a logical block's FP32 sum instead of one tile's product: in the
dQ loop g = 0 + dot(ds_op_j, k_j) + … over the key tiles of a block of R keys (in order), in the dK/dV loop over the
query tiles of a block of R queries; then g = rnd(g) ; acc = rnd(acc + g) once per block. (With FP32 accumulators
the blocks would only reorder FP32 sums, so the backward stays per tile.)

The β fix (Qiu & Yao §4, per tile): see `fixed_row_max` (with the underflow guard `max_shift`, default 64). It is the only code that decides the fix, and the property
tests (`tests/test_fix_property.py`) exercise it directly.

Known differences from production FA2 (documented, not emulated): FA2 writes ``exp2(s·log2e − m·log2e)`` with an FMA,
which changes the last FP32 bits of P̄; tensor-core accumulation order differs from ``np.matmul``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lib.fp.bf16 import philox_randint, round_rne, round_stochastic
from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL
from lib.fp.numerics import FP32, Numerics, get_profile, tiles_per_round_block

__all__ = ["attention_fp64", "fixed_row_max", "check_fix_args", "check_max_shift", "online_softmax_rows", "emulate_forward", "emulate_delta",
           "emulate_backward", "emulate_attention", "ForwardResult", "padded_head_dim", "FIXES"]

FIXES = (None, "beta", "beta_split")
_F32 = np.float32
_NEG_INF = _F32(-np.inf)


# ----------------------------------------------------------------------------------------------- input handling
def _to_numpy(x, name: str, dtype) -> np.ndarray:
    """torch tensor (any float dtype, CPU or CUDA) or numpy array -> numpy array of `dtype` (exact widening)."""
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu", torch.float64 if dtype == np.float64 else torch.float32).numpy()
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    return np.ascontiguousarray(x, dtype=dtype)


def _qkv(q, k, v, dtype):
    """Validate q, k, v (same shape, ≥2-D: (..., N, d)) and return them as (BH, N, d) arrays plus the lead shape."""
    q, k, v = (_to_numpy(t, n, dtype) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    if q.ndim < 2:
        raise ValueError(f"q, k, v must have shape (..., seq, head_dim), got q.shape={q.shape}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have the same shape, got {q.shape}, {k.shape}, {v.shape}")
    N, d = q.shape[-2:]
    if N < 1 or d < 1:
        raise ValueError(f"seq and head_dim must be ≥ 1, got shape {q.shape}")
    lead = q.shape[:-2]
    return q.reshape(-1, N, d), k.reshape(-1, N, d), v.reshape(-1, N, d), lead


def _scale(scale, d) -> float:
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not np.isfinite(scale) \
            or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return float(scale)


def _blocks(block_m, block_n):
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 or (b & (b - 1)):
            raise ValueError(f"{name} must be a positive power of two, got {b!r}")
    return int(block_m), int(block_n)


def check_fix_args(fix, beta, tie_tol):
    """Validate the fix arguments; returns (fix, beta, tie_tol). β must be > 1 (finite), tie_tol ≥ 0 (finite)."""
    if fix not in FIXES:
        raise ValueError(f"fix must be one of {FIXES}, got {fix!r}")
    for name, val in (("beta", beta), ("tie_tol", tie_tol)):
        if isinstance(val, bool) or not isinstance(val, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name} must be a real number, got {type(val).__name__}")
        if not np.isfinite(val):
            raise ValueError(f"{name} must be finite, got {val!r}")
    if not beta > 1:
        raise ValueError(f"beta must be > 1 (the fix lowers P̄'s maximum below 1 only then), got {beta!r}")
    if tie_tol < 0:
        raise ValueError(f"tie_tol must be ≥ 0, got {tie_tol!r}")
    return fix, float(beta), float(tie_tol)


def padded_head_dim(d: int) -> int:
    """DP: the head dim the kernels compute on (max(16, next power of two ≥ d)); zero padding beyond d."""
    return max(16, 1 << (int(d) - 1).bit_length())


# ------------------------------------------------------------------------------------------------ FP64 reference
def attention_fp64(q, k, v, do=None, *, causal: bool = True, scale=None) -> dict:
    """Softmax attention in float64, untiled. q, k, v (and dO): (..., N, d).

    Returns {"o": (..., N, d), "lse": (..., N) natural-log LSE of the scaled scores} and, when `do` is given,
    {"dq", "dk", "dv"} (..., N, d) and "delta" (..., N) = rowsum(dO∘O). All float64 numpy."""
    q3, k3, v3, lead = _qkv(q, k, v, np.float64)
    N, d = q3.shape[1:]
    a = _scale(scale, d)
    s = a * np.einsum("bid,bjd->bij", q3, k3)
    if causal:
        s = np.where(np.tril(np.ones((N, N), bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    l = e.sum(-1, keepdims=True)
    p = e / l
    o = p @ v3
    out = {"o": o.reshape(*lead, N, d), "lse": (m + np.log(l))[..., 0].reshape(*lead, N)}
    if do is not None:
        do3 = _to_numpy(do, "do", np.float64)
        if do3.shape != (*lead, N, d):
            raise ValueError(f"do must have the shape of q {(*lead, N, d)}, got {do3.shape}")
        do3 = do3.reshape(-1, N, d)
        dv = np.einsum("bij,bid->bjd", p, do3)
        dp = do3 @ v3.transpose(0, 2, 1)
        delta = (do3 * o).sum(-1, keepdims=True)
        ds = p * (dp - delta)
        out.update(dq=(a * ds @ k3).reshape(*lead, N, d),
                   dk=(a * np.einsum("bij,bid->bjd", ds, q3)).reshape(*lead, N, d),
                   dv=dv.reshape(*lead, N, d), delta=delta[..., 0].reshape(*lead, N))
    return out


# ------------------------------------------------------------------------------------------------------ the fix
def check_max_shift(max_shift):
    """Validate the fix's underflow guard: None (the paper's exact rule) or a finite number > 0. Returns it."""
    if max_shift is None:
        return None
    if isinstance(max_shift, bool) or not isinstance(max_shift, (int, float, np.floating, np.integer)):
        raise TypeError(f"max_shift must be a positive number or None, got {type(max_shift).__name__}")
    if not np.isfinite(max_shift) or max_shift <= 0:
        raise ValueError(f"max_shift must be finite and > 0 (or None), got {max_shift!r}")
    return float(max_shift)


def fixed_row_max(s, m_t=None, *, beta: float = BETA, tie_tol: float = TIE_TOL, max_shift=MAX_SHIFT,
                  m_prev=None) -> np.ndarray:
    """The β fix of Qiu & Yao (§4, Alg. 1) for one tile: the adjusted row maxima.

    s: (..., BN) scores of the tile (masked entries −inf), float32 (or float64 for exact-arithmetic checks).
    m_t: (...,) the rows' maxima (default: ``np.nanmax(s, -1)``). Returns an array like m_t:
      * a row whose maximum occurs at least twice — ``s ≥ m_t − tie_tol`` counted, so tie_tol = 0 is exact
        equality — gets β·m_t if m_t > 0 and 0 if m_t < 0;
      * with `m_prev` (the running max of the earlier tiles, fix "beta_split"), a row whose m_t equals m_prev
        within tie_tol (|m_t − m_prev| ≤ tie_tol, both finite) also counts as repeated: its max recurs across a
        tile boundary;
      * m_t = 0, a single maximum, or a fully masked row (m_t = −inf) are left unchanged;
      * where β·m_t overflows to +inf the row is left unchanged (m stays finite);
      * underflow guard (ours; `max_shift=None` gives the paper's exact rule): the shift
        d = (β−1)·m_t (m_t > 0) or −m_t (m_t < 0) of a repeated max is capped: where d > max_shift the max becomes
        m_t + max_shift, so the row's largest weight stays ≥ e^−max_shift (a normal FP32/BF16 number for 64).
    Arithmetic in the dtype of `s` (β, tie_tol, max_shift converted to it first), in exactly the kernel's order."""
    s = np.asarray(s)
    if s.dtype.kind != "f":
        raise TypeError(f"s must be a floating array, got {s.dtype}")
    dt = s.dtype.type
    check_fix_args("beta", beta, tie_tol)
    max_shift = check_max_shift(max_shift)
    m_t = np.nanmax(s, axis=-1) if m_t is None else np.asarray(m_t, dtype=s.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        ties = np.sum(s >= (m_t - dt(tie_tol))[..., None], axis=-1)
        repeated = (ties >= 2) & (m_t > dt(-np.inf))
        if m_prev is not None:
            m_prev = np.asarray(m_prev, dtype=s.dtype)
            repeated = repeated | ((m_t > dt(-np.inf)) & (m_prev > dt(-np.inf)) & (np.abs(m_t - m_prev) <= dt(tie_tol)))
        scaled = dt(beta) * m_t
    out = np.where(repeated & (m_t > 0) & np.isfinite(scaled), scaled, m_t)
    out = np.where(repeated & (out < 0), dt(0), out)
    if max_shift is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            d = np.where(m_t > 0, (dt(beta) - dt(1.0)) * m_t, -m_t)
            out = np.where(repeated & (m_t != 0) & (d > dt(max_shift)), m_t + dt(max_shift), out)
    return out.astype(s.dtype, copy=False)


def online_softmax_rows(s, *, block_n: int, fix=None, beta: float = BETA, tie_tol: float = TIE_TOL,
                        max_shift=MAX_SHIFT):
    """Softmax weights of many independent rows by the FA2 online recurrence, vectorised over rows.

    s: (R, N) scores (masked entries −inf), float32 or float64; the arithmetic stays in that dtype (no rounding to
    lp: this is the exact-arithmetic side of the fix, used by the property tests). Key tiles of `block_n` columns
    are visited left to right with the forward's recurrence (m_use for rows masked so far, ℓ_safe at the end), the
    tile max going through `fixed_row_max` when fix is "beta" or "beta_split". Returns (w (R, N), m (R,), l (R,)) with
    w = exp(s − m)/ℓ_safe, i.e. what O = w·V would weight V with."""
    s = np.asarray(s)
    if s.ndim != 2 or s.dtype.kind != "f":
        raise ValueError(f"s must be a 2-D float array (rows, keys), got shape {s.shape} dtype {s.dtype}")
    fix, beta, tie_tol = check_fix_args(fix, beta, tie_tol)
    dt = s.dtype.type
    R, N = s.shape
    m = np.full(R, -np.inf, s.dtype)
    l = np.zeros(R, s.dtype)
    with np.errstate(over="ignore", invalid="raise"):
        for j in range(0, N, block_n):
            st = s[:, j:j + block_n]
            m_t = np.max(st, axis=1)
            if fix is not None:
                m_t = fixed_row_max(st, m_t, beta=beta, tie_tol=tie_tol, max_shift=max_shift,
                                    m_prev=m if fix == "beta_split" else None)
            m_new = np.maximum(m, m_t)
            m_use = np.where(m_new == -np.inf, dt(0), m_new)
            l = l * np.exp(m - m_use) + np.sum(np.exp(st - m_use[:, None]), axis=1)
            m = m_new
        m_fin = np.where(m == -np.inf, dt(0), m)
        l_safe = np.where(l == 0, dt(1), l)
        w = np.exp(s - m_fin[:, None]) / l_safe[:, None]
    return w, m, l


# --------------------------------------------------------------------------------------------------- emulator
class _Rounder:
    """rnd(x, salt, tile_id, offs) of one Numerics value: RNE to `mantissa_bits`, or stochastic rounding with the
    kernels' random bits, Philox(seed + salt·1000003 + tile_id, offs) in int32 arithmetic
    (`kernels.flash_fwd.round_point`), so that SR replays the kernels bit for bit. `offs` broadcasts to x's shape."""

    def __init__(self, nm: Numerics, seed: int):
        self.m = nm.mantissa_bits
        self.sr = nm.rounding == "sr"
        self.seed = int(seed)

    def __call__(self, x, salt: int, tile_id: int, offs):
        x = np.asarray(x, dtype=_F32)
        if not self.sr:
            return round_rne(x, self.m)
        key = (self.seed + salt * 1000003 + int(tile_id) + 2 ** 31) % 2 ** 32 - 2 ** 31    # int32 wrap-around
        bits = philox_randint(key, np.broadcast_to(np.asarray(offs, np.int64), x.shape))
        return round_stochastic(x, self.m, random_bits=bits)


# The kernels' salts (kernels/flash_fwd.py): one random stream per rounding point.
(SALT_S, SALT_SM, SALT_P, SALT_L, SALT_PV, SALT_ACC, SALT_O, SALT_LSE, SALT_DELTA, SALT_BP, SALT_DS, SALT_GRAD,
 SALT_BSM) = range(1, 14)


def _tile_id(bh: int, i: int, j: int) -> int:
    """The kernels' id of (head bh, query tile i, key tile j): (bh·131 + i)·1031 + j."""
    return (bh * 131 + i) * 1031 + j


def _el(offs_m, width):
    """Element ids of a (len(offs_m), width) tile: (row mod 4096)·width + column."""
    return (np.asarray(offs_m) % 4096)[:, None] * width + np.arange(width)[None, :]


def _acc_el(offs, DP):
    """Element ids of a (len(offs), DP) accumulator tile: (row mod 4096)·128 + column (stride 128 ≥ any DP)."""
    return (np.asarray(offs) % 4096)[:, None] * 128 + np.arange(DP)[None, :]


def _dot(a, b):
    """`tl.dot(a, b)` of the interpreter: float32 matmul plus a zero accumulator."""
    return np.matmul(a, b, dtype=_F32) + np.zeros((a.shape[0], b.shape[1]), _F32)


def _tile(x3, bh, start, rows, DP):
    """Zero-padded (rows, DP) float32 tile of x3[bh] starting at row `start`."""
    N, d = x3.shape[1:]
    t = np.zeros((rows, DP), _F32)
    stop = min(N, start + rows)
    if stop > start:
        t[:stop - start, :d] = x3[bh, start:stop]
    return t


def _vec(x2, bh, start, rows, fill):
    N = x2.shape[1]
    t = np.full(rows, fill, _F32)
    stop = min(N, start + rows)
    if stop > start:
        t[:stop - start] = x2[bh, start:stop]
    return t


def _scores(q_t, k_t, scale, offs_m, offs_n, N, causal, nm, rnd, tile_id):
    s = _dot(q_t, k_t.T) * _F32(scale)
    if nm.round_s:
        s = rnd(s, SALT_S, tile_id, _el(offs_m, len(offs_n)))
    valid = offs_n[None, :] < N
    if causal:
        valid = valid & (offs_n[None, :] <= offs_m[:, None])
    return np.where(valid, s, _NEG_INF)


@dataclass
class ForwardResult:
    """Emulated forward. o: (..., N, d) float32 (on the lp grid if round_o); lse: (..., N) float32 natural log;
    o32: O before its final rounding; m, l: (..., N) the final running max and row sum of each row."""
    o: np.ndarray
    lse: np.ndarray
    o32: np.ndarray
    m: np.ndarray
    l: np.ndarray


def _prep(q, k, v, numerics, causal, scale, block_m, block_n, fix, beta, tie_tol, max_shift=MAX_SHIFT):
    nm = get_profile(numerics)
    check_max_shift(max_shift)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    fix, beta, tie_tol = check_fix_args(fix, beta, tie_tol)
    bm, bn = _blocks(block_m, block_n)
    q3, k3, v3, lead = _qkv(q, k, v, _F32)
    return nm, fix, beta, tie_tol, bm, bn, q3, k3, v3, lead, _scale(scale, q3.shape[2])


def emulate_forward(q, k, v, numerics="fa2", *, causal: bool = True, scale=None, block_m: int = 64,
                    block_n: int = 64, fix=None, beta: float = BETA, tie_tol: float = TIE_TOL, max_shift=MAX_SHIFT,
                    seed: int = 0) -> ForwardResult:
    """FA2 forward under `numerics` on BLOCK_M × BLOCK_N tiles (module docstring: the exact order).

    q, k, v: (..., N, d), any float dtype (converted exactly to float32; BF16 values stay BF16 values).
    `seed` only drives stochastic rounding (the kernels' seed); `max_shift` is the fix's underflow guard (None: the
    paper's rule); `numerics.round_block` groups the key tiles into logical rounding blocks (module docstring; a
    positive value must be a multiple of block_n). Returns a `ForwardResult`."""
    nm, fix, beta, tie_tol, bm, bn, q3, k3, v3, lead, a = _prep(q, k, v, numerics, causal, scale, block_m,
                                                                  block_n, fix, beta, tie_tol, max_shift)
    rnd = _Rounder(nm, seed)
    BH, N, d = q3.shape
    DP = padded_head_dim(d)
    o = np.zeros((BH, N, d), _F32)
    o32 = np.zeros((BH, N, d), _F32)
    lse = np.zeros((BH, N), _F32)
    m_out = np.zeros((BH, N), _F32)
    l_out = np.zeros((BH, N), _F32)
    n_tiles = -(-N // bn)
    per_block = tiles_per_round_block(nm.round_block, bn, N)
    for bh in range(BH):
        for i in range(-(-N // bm)):
            offs_m = i * bm + np.arange(bm)
            q_t = _tile(q3, bh, i * bm, bm, DP)
            m_i = np.full(bm, _NEG_INF, _F32)
            l_i = np.zeros(bm, _F32)
            acc = np.zeros((bm, DP), _F32)
            hi = min(N, (i + 1) * bm) if causal else N
            for j0 in range(0, n_tiles, per_block):
                # one logical rounding block: its key tiles j0 … j0 + per_block − 1 that reach the diagonal (FA2
                # skips the tiles entirely above it)
                subs = [j for j in range(j0, min(j0 + per_block, n_tiles)) if j * bn < hi]
                if not subs:
                    continue
                s_all, v_all = [], []
                for j in subs:
                    k_t = _tile(k3, bh, j * bn, bn, DP)
                    v_all.append(_tile(v3, bh, j * bn, bn, DP))
                    s_all.append(_scores(q_t, k_t, a, offs_m, j * bn + np.arange(bn), N, causal, nm, rnd,
                                         _tile_id(bh, i, j)))
                bid = _tile_id(bh, i, j0)        # the block's SR id: its first tile's
                s_blk = np.concatenate(s_all, axis=1)
                m_t = np.nanmax(s_blk, axis=1)
                if fix is not None:   # the tie test over the whole logical block
                    m_t = fixed_row_max(s_blk, m_t, beta=beta, tie_tol=tie_tol, max_shift=max_shift,
                                        m_prev=m_i if fix == "beta_split" else None)
                m_new = np.maximum(m_i, m_t)
                m_use = np.where(m_new == _NEG_INF, _F32(0), m_new)
                e = m_i - m_use
                if nm.round_s_minus_m:
                    e = rnd(e, SALT_SM, bid + 7919, np.arange(bm))
                alpha = np.exp(e)
                l_t = np.zeros(bm, _F32)
                pv = np.zeros((bm, DP), _F32)
                el = _el(offs_m, bn)
                for j, s, v_t in zip(subs, s_all, v_all):       # the block's key tiles in order, FP32 partial sums
                    x = s - m_use[:, None]
                    if nm.round_s_minus_m:
                        x = rnd(x, SALT_SM, _tile_id(bh, i, j), el)
                    p = np.exp(x)
                    p_op = rnd(p, SALT_P, _tile_id(bh, i, j), el) if nm.round_p else p
                    l_t = l_t + np.sum(p_op if nm.rowsum_rounded_p else p, axis=1)
                    pv = pv + _dot(p_op, v_t)
                l_i = l_i * alpha + l_t
                if nm.round_l:
                    l_i = rnd(l_i, SALT_L, bid, np.arange(bm))
                acc = acc * alpha[:, None]
                acc_el = _acc_el(offs_m, DP)
                if nm.round_acc:
                    acc = rnd(acc, SALT_ACC, bid, acc_el)
                if nm.round_pv:
                    pv = rnd(pv, SALT_PV, bid, acc_el)
                acc = acc + pv
                if nm.round_acc:
                    acc = rnd(acc, SALT_ACC, bid + 7919, acc_el)
                m_i = m_new
            l_safe = np.where(l_i == 0, _F32(1), l_i)
            tile0 = _tile_id(bh, i, 0)
            if nm.normalize_then_round:
                o_t = acc / l_safe[:, None]
            else:
                o_t = rnd(acc, SALT_O, tile0, _el(offs_m, DP)) / \
                    rnd(l_safe, SALT_L, tile0, offs_m % 4096 + 12288)[:, None]
            o_pre = o_t
            if nm.round_o:
                o_t = rnd(o_t, SALT_O, tile0 + 1, _el(offs_m, DP))
            lse_t = np.where(m_i == _NEG_INF, _F32(0), m_i) + np.log(l_safe)
            if nm.round_lse:
                lse_t = rnd(lse_t, SALT_LSE, tile0, offs_m % 4096)
            rows = slice(i * bm, min(N, (i + 1) * bm))
            nr = rows.stop - rows.start
            o[bh, rows] = o_t[:nr, :d]
            o32[bh, rows] = o_pre[:nr, :d]
            lse[bh, rows] = lse_t[:nr]
            m_out[bh, rows] = m_i[:nr]
            l_out[bh, rows] = l_i[:nr]
    shp = lambda x: x.reshape(*lead, *x.shape[1:])  # noqa: E731
    return ForwardResult(shp(o), shp(lse), shp(o32), shp(m_out), shp(l_out))


def _bwd_tile(q_t, k_t, v_t, do_t, lse_t, delta_t, a, offs_m, offs_n, N, causal, nm, rnd, tile_id):
    """(p, p_op, ds_op, dp_fp32) of one (query tile, key tile), per the contract; `tile_id` keys the SR streams
    (S draws the forward's bits)."""
    s = _scores(q_t, k_t, a, offs_m, offs_n, N, causal, nm, rnd, tile_id)
    el = _el(offs_m, len(offs_n))
    x = s - lse_t[:, None]
    if nm.round_bwd_s_minus_lse:
        x = rnd(x, SALT_BSM, tile_id, el)
    p = np.exp(x)
    p_op = rnd(p, SALT_BP, tile_id, el) if nm.round_bwd_p else p
    dp32 = _dot(do_t, v_t.T)
    dp = rnd(dp32, SALT_DS, tile_id + 7919, el) if nm.round_dp else dp32
    t = dp - delta_t[:, None]
    if nm.round_dp and nm.round_delta:
        t = rnd(t, SALT_DS, tile_id + 15485863, el)
    ds = p * t
    ds_op = rnd(ds, SALT_DS, tile_id, el) if nm.round_ds else ds
    return p, p_op, ds_op, dp32


def _acc_add(acc, g, nm, rnd, tile_id, offs):
    if nm.round_grad_acc:
        return rnd(acc + rnd(g, SALT_GRAD, tile_id, offs), SALT_GRAD, tile_id + 7919, offs)
    return acc + g


def emulate_delta(o, do, numerics="fa2", *, q=None, k=None, v=None, lse=None, causal: bool = True, scale=None,
                  block_m: int = 64, block_n: int = 64, fix=None, beta: float = BETA, tie_tol: float = TIE_TOL,
                  max_shift=MAX_SHIFT, seed: int = 0) -> np.ndarray:
    """δ (..., N) float32 per `numerics.delta_source` (module docstring). `o` is the saved O for "saved_o"; "fp32_o"
    needs q, k, v (it reruns an all-FP32 forward with the same tiles and fix); "dp_p" and "dp_p_norm" need q, k, v
    and lse."""
    nm = get_profile(numerics)
    rnd = _Rounder(nm, seed)
    do_a = _to_numpy(do, "do", _F32)
    N, d = do_a.shape[-2:]
    lead = do_a.shape[:-2]
    do3 = do_a.reshape(-1, N, d)
    DP = padded_head_dim(d)
    if nm.delta_source in ("saved_o", "fp32_o"):
        if nm.delta_source == "fp32_o":
            if q is None or k is None or v is None:
                raise ValueError("delta_source='fp32_o' needs q, k, v")
            o = emulate_forward(q, k, v, FP32.replace(round_block=nm.round_block), causal=causal, scale=scale,
                                block_m=block_m, block_n=block_n, fix=fix, beta=beta, tie_tol=tie_tol,
                                max_shift=max_shift).o
        o3 = _to_numpy(o, "o", _F32)
        if o3.shape != do_a.shape:
            raise ValueError(f"o and do must have the same shape, got {o3.shape} and {do_a.shape}")
        o3 = o3.reshape(-1, N, d)
        delta = np.zeros(o3.shape[:2], _F32)
        bm = _blocks(block_m, block_n)[0]
        for bh in range(o3.shape[0]):
            for i in range(-(-N // bm)):
                t = _tile(o3, bh, i * bm, bm, DP) * _tile(do3, bh, i * bm, bm, DP)
                if nm.round_delta_products:
                    t = rnd(t, SALT_DELTA, bh * 131 + i + 7919, np.arange(bm)[:, None] * DP + np.arange(DP))
                dl = np.sum(t, axis=1)
                if nm.round_delta:
                    dl = rnd(dl, SALT_DELTA, bh * 131 + i, np.arange(bm))
                rows = slice(i * bm, min(N, (i + 1) * bm))
                delta[bh, rows] = dl[:rows.stop - rows.start]
        return delta.reshape(*lead, N)
    # dp_p: rowsum(dP ∘ P) over the key tiles of the dQ loop, FP32 P and dP; dp_p_norm: divided by rowsum(P)
    if q is None or k is None or v is None or lse is None:
        raise ValueError(f"delta_source={nm.delta_source!r} needs q, k, v and lse")
    _, _, _, _, bm, bn, q3, k3, v3, _, a = _prep(q, k, v, nm, causal, scale, block_m, block_n, fix, beta, tie_tol)
    lse2 = _to_numpy(lse, "lse", _F32).reshape(-1, N)
    delta = np.zeros((q3.shape[0], N), _F32)
    for bh in range(q3.shape[0]):
        for i in range(-(-N // bm)):
            offs_m = i * bm + np.arange(bm)
            q_t, do_t = _tile(q3, bh, i * bm, bm, DP), _tile(do3, bh, i * bm, bm, DP)
            lse_t = _vec(lse2, bh, i * bm, bm, np.inf)
            dsum = np.zeros(bm, _F32)
            psum = np.zeros(bm, _F32)
            hi = min(N, (i + 1) * bm) if causal else N
            for j in range(-(-N // bn)):
                if not j * bn < hi:
                    continue
                offs_n = j * bn + np.arange(bn)
                k_t, v_t = _tile(k3, bh, j * bn, bn, DP), _tile(v3, bh, j * bn, bn, DP)
                p, _, _, dp32 = _bwd_tile(q_t, k_t, v_t, do_t, lse_t, np.zeros(bm, _F32), a, offs_m, offs_n, N,
                                          causal, nm, rnd, _tile_id(bh, i, j))
                dsum = dsum + np.sum(p * dp32, axis=1)
                psum = psum + np.sum(p, axis=1)
            if nm.delta_source == "dp_p_norm":
                dsum = dsum / np.where(psum > 0, psum, _F32(1.0))
            if nm.round_delta:
                dsum = rnd(dsum, SALT_DELTA, bh * 131 + i, np.arange(bm))
            rows = slice(i * bm, min(N, (i + 1) * bm))
            delta[bh, rows] = dsum[:rows.stop - rows.start]
    return delta.reshape(*lead, N)


def emulate_backward(q, k, v, o, lse, do, numerics="fa2", *, causal: bool = True, scale=None, block_m: int = 64,
                     block_n: int = 64, fix=None, beta: float = BETA, tie_tol: float = TIE_TOL, max_shift=MAX_SHIFT,
                     seed: int = 0, delta=None) -> dict:
    """FA2 backward under `numerics`: {"delta": (..., N), "dq", "dk", "dv": (..., N, d)} float32.

    o, lse: the (emulated) forward's outputs; do: dL/dO (..., N, d). `delta` overrides the δ pre-kernel. The fix
    arguments only matter for delta_source="fp32_o" (the backward itself is unchanged by the fix)."""
    nm, fix, beta, tie_tol, bm, bn, q3, k3, v3, lead, a = _prep(q, k, v, numerics, causal, scale, block_m,
                                                                  block_n, fix, beta, tie_tol, max_shift)
    BH, N, d = q3.shape
    DP = padded_head_dim(d)
    do3 = _to_numpy(do, "do", _F32)
    if do3.shape != (*lead, N, d):
        raise ValueError(f"do must have the shape of q {(*lead, N, d)}, got {do3.shape}")
    do3 = do3.reshape(BH, N, d)
    lse2 = _to_numpy(lse, "lse", _F32).reshape(BH, N)
    if delta is None:
        delta = emulate_delta(o, do, nm, q=q, k=k, v=v, lse=lse, causal=causal, scale=scale, block_m=bm,
                              block_n=bn, fix=fix, beta=beta, tie_tol=tie_tol, max_shift=max_shift, seed=seed)
    delta2 = _to_numpy(delta, "delta", _F32).reshape(BH, N)
    rnd = _Rounder(nm, seed)
    dq = np.zeros((BH, N, d), _F32)
    dk = np.zeros((BH, N, d), _F32)
    dv = np.zeros((BH, N, d), _F32)
    n_m, n_n = -(-N // bm), -(-N // bn)
    # Logical rounding blocks of the backward: only the lp gradient accumulators (round_grad_acc) see them; with FP32
    # accumulators the grouping would only reorder FP32 sums, so the backward then stays per tile.
    rb = nm.round_block if nm.round_grad_acc else 0
    per_k = tiles_per_round_block(rb, bn, N)          # key tiles per block (dQ loop)
    per_q = tiles_per_round_block(rb, bm, N)          # query tiles per block (dK/dV loop)
    for bh in range(BH):
        qs = [_tile(q3, bh, i * bm, bm, DP) for i in range(n_m)]
        dos = [_tile(do3, bh, i * bm, bm, DP) for i in range(n_m)]
        lses = [_vec(lse2, bh, i * bm, bm, np.inf) for i in range(n_m)]
        dls = [_vec(delta2, bh, i * bm, bm, 0.0) for i in range(n_m)]
        ks = [_tile(k3, bh, j * bn, bn, DP) for j in range(n_n)]
        vs = [_tile(v3, bh, j * bn, bn, DP) for j in range(n_n)]

        def tile(i, j):
            # Per-tile streams: the dK/dV and dQ loops see the same P and dS of a tile (as the two kernels do).
            return _bwd_tile(qs[i], ks[j], vs[j], dos[i], lses[i], dls[i], a, i * bm + np.arange(bm),
                             j * bn + np.arange(bn), N, causal, nm, rnd, _tile_id(bh, i, j))

        # dK/dV kernel: one key tile, query tiles in increasing order (causal: from the first that reaches it);
        # with lp accumulators, each logical block's FP32 partial sum is rounded and added once (`_acc_add`)
        for j in range(n_n):
            lo = (j * bn) // bm * bm if causal else 0
            dk_t = np.zeros((bn, DP), _F32)
            dv_t = np.zeros((bn, DP), _F32)
            for i0 in range(0, n_m, per_q):
                subs = [i for i in range(i0, min(i0 + per_q, n_m)) if i * bm >= lo]
                if not subs:
                    continue
                gv = np.zeros((bn, DP), _F32)
                gk = np.zeros((bn, DP), _F32)
                for i in subs:
                    _, p_op, ds_op, _ = tile(i, j)
                    gv = gv + _dot(p_op.T, dos[i])
                    gk = gk + _dot(ds_op.T, qs[i])
                kv_el = _acc_el(j * bn + np.arange(bn), DP)
                dv_t = _acc_add(dv_t, gv, nm, rnd, _tile_id(bh, i0, j), kv_el)
                dk_t = _acc_add(dk_t, gk, nm, rnd, _tile_id(bh, i0, j) + 104729, kv_el)
            dk_t = dk_t * _F32(a)
            rows = slice(j * bn, min(N, (j + 1) * bn))
            dk[bh, rows] = dk_t[:rows.stop - rows.start, :d]
            dv[bh, rows] = dv_t[:rows.stop - rows.start, :d]
        # dQ kernel: one query tile, key tiles in increasing order (causal: up to the diagonal), blocks as above
        for i in range(n_m):
            hi = min(N, (i + 1) * bm) if causal else N
            dq_t = np.zeros((bm, DP), _F32)
            for j0 in range(0, n_n, per_k):
                subs = [j for j in range(j0, min(j0 + per_k, n_n)) if j * bn < hi]
                if not subs:
                    continue
                g = np.zeros((bm, DP), _F32)
                for j in subs:
                    _, _, ds_op, _ = tile(i, j)
                    g = g + _dot(ds_op, ks[j])
                dq_t = _acc_add(dq_t, g, nm, rnd, _tile_id(bh, i, j0), _acc_el(i * bm + np.arange(bm), DP))
            dq_t = dq_t * _F32(a)
            rows = slice(i * bm, min(N, (i + 1) * bm))
            dq[bh, rows] = dq_t[:rows.stop - rows.start, :d]
    shp = lambda x: x.reshape(*lead, *x.shape[1:])  # noqa: E731
    return {"delta": delta2.reshape(*lead, N), "dq": shp(dq), "dk": shp(dk), "dv": shp(dv)}


def emulate_attention(q, k, v, do=None, numerics="fa2", **kw) -> dict:
    """Forward (and backward when `do` is given) of the emulator. Keyword arguments as `emulate_forward`.
    Returns {"o", "lse", "o32", "m", "l"} plus {"delta", "dq", "dk", "dv"} with `do`."""
    fwd = emulate_forward(q, k, v, numerics, **kw)
    out = {"o": fwd.o, "lse": fwd.lse, "o32": fwd.o32, "m": fwd.m, "l": fwd.l}
    if do is not None:
        out.update(emulate_backward(q, k, v, fwd.o, fwd.lse, do, numerics, **kw))
    return out
