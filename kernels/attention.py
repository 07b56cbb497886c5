"""Public flash attention: `attention(q, k, v, *, causal, scale, numerics, fix, beta, tie_tol, path)`.

q, k, v: (batch, heads, seq, head_dim) tensors, the same shape, dtype and device; head_dim 16..128 (a non-power-of-two
head dim is zero-padded inside the kernel with masks). Non-contiguous inputs are copied with `.contiguous()`.
Returns O of the same shape and dtype (a BF16 O is the rounded O). Differentiable: the backward runs the δ pre-kernel
and the split dK/dV and dQ kernels of `kernels/flash_bwd.py`; gradients have the input dtype (rounded once, RNE).

Paths (`path=`):
* "emulated": every value in FP32, every rounding by the bit-exact helper of `kernels/rounding.py`, FP32 matmuls
  (`input_precision="ieee"`). BF16 inputs are widened exactly to FP32; FP32 inputs are used as they are (they are
  *not* rounded to BF16 first). The only path in the CPU interpreter. Tile sizes: `EMULATED_BLOCK` (fixed, so the
  numerics do not depend on the device).
* "native": GPU, BF16 inputs, BF16 tensor-core matmul operands with FP32 accumulation. Valid for numerics with
  mantissa_bits <= 7 (RNE or SR), which every profile and the precision dial satisfy: at 7 bits and RNE the
  roundings are hardware casts; otherwise our helper rounds and the cast to BF16 is exact. An operand the numerics
  keep in FP32 (P̄ without round_p, backward P without round_bwd_p, dS without round_ds: the `fp32` profile, the
  dial's P̄-in-FP32 arm) is not a BF16 operand: its product with the other, BF16, operand is an FP32 `ieee` matmul
  with the BF16 one widened exactly, as on the emulated path (FP32 FMAs, no tensor cores), or, with `WIDE_PRODUCT`
  = "bf16_split", three tensor-core matmuls of exact BF16 pieces of the FP32 operand (`kernels.flash_fwd.wide_dot`).
  The native path differs from "emulated" only in the matmuls (tensor-core FP32 accumulation instead of FP32 `ieee`
  products of FP32 operands), and, where O is kept in FP32 (round_o off), in the O that δ reads: BF16 here, the
  FP32 O in `kernels.attention_op`.
* None: native on CUDA for BF16 inputs when the numerics allow it, else emulated.

Rounding blocks (`numerics.round_block`, keys): 0 rounds P̄V, ℓ and the O accumulator and runs the fix's tie test per
key tile (64 keys), as before. A positive multiple of the tile width (e.g. 512, the authors' tile) or -1 (the whole
row) makes these per logical block instead: one block max and α rescale per block, the tie test over the whole
block, P̄V and ℓ summed in FP32 over the block's 64-key tiles and rounded once (the kernel walks each block twice:
a max pass, then the P̄V pass); with round_grad_acc the backward's lp gradient accumulators also take one rounded
sum per block (dQ: blocks of keys; dK, dV: blocks of queries). Both paths; the compute tile is unchanged, so
round_block is numerics, not a launch parameter. A positive round_block that is not a multiple of the tile width
raises ValueError.

`fix="beta"` is the β-scaled max of Qiu & Yao §4 in the forward (rows whose tile max occurs ≥ 2 times, or within
`tie_tol` below it, use β·max as their max if max > 0 and 0 if max < 0; the shift is capped at `max_shift`, our
underflow guard, unless max_shift=None); the backward is unchanged. Detection is per key tile, as in the paper's
Algorithm 1 (the authors' code uses 512-key tiles; ours are 64 wide), or per logical block with round_block (512:
the authors' detection). `fix="beta_split"` also fires when a tile's (block's) max equals the running max of the
earlier tiles (a max repeated across a boundary, which the per-tile test misses), so it acts on every row in which
two P̄ entries would be exactly 1.
"""
from __future__ import annotations

import math

import torch
import triton

from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL
from lib.fp.numerics import FP32, Numerics, get_profile, tiles_per_round_block
from kernels.flash_bwd import attn_bwd_dkdv_kernel, attn_bwd_dq_kernel, attn_delta_kernel
from kernels.flash_fwd import attn_fwd_kernel

__all__ = ["attention", "attention_fwd", "attention_bwd", "compute_delta", "EMULATED_BLOCK", "NATIVE_CONFIGS",
           "native_config", "native_allowed", "resolve_path", "fwd_kernel_key", "bwd_kernel_key"]

EMULATED_BLOCK = (64, 64)        # (BLOCK_M, BLOCK_N) of the emulated path: part of its numerics
_FIXES = (None, "beta", "beta_split")
_FIX_CODE = {None: 0, "beta": 1, "beta_split": 2}   # the kernel's FIX constexpr
_PATHS = (None, "emulated", "native")
# The native path's product of an operand the numerics keep in FP32 with a BF16 one (`kernels.flash_fwd.wide_dot`):
# "ieee" (FP32 FMAs, the emulated path's arithmetic) or "bf16_split" (the FP32 operand as three exact BF16 pieces,
# three tensor-core matmuls). Both have exact products and FP32 sums. Read at each launch; not yet timed on a GPU.
WIDE_PRODUCT = "ieee"
_WIDE_PRODUCTS = ("ieee", "bf16_split")


def _interpreting() -> bool:
    import os
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# Hand-picked Hopper launch configs of the native path, keyed by (kernel, head_dim <= 64). The benchmark
# (benchmarks/bench_attention.py --tune) times a small list of alternatives and records which one won.
# Winners on the H100 (results/full/attention_bench.json, "tuned"): 64×64 tiles, 4 warps for every kernel.
# "fwd_rb" / "bwd_rb": the kernels with logical rounding blocks (round_block ≠ 0; the backward's only with
# round_grad_acc), which carry one more FP32 accumulator per output (P̄V; dK and dV, or dQ). Picked without a GPU
# from ptxas's register report for sm_90 (benchmarks/kernel_registers.py): at head dim 64 the dK/dV kernel spills at
# 4 warps with 2 stages and does not at 8 warps; at 128 the fewest spills are at 8 warps. Not yet timed.
# "bwd_wide" / "bwd_split": the per-tile backward with FP32 P or dS operands (`bwd_kernel_key`), their products FP32
# `ieee` FMAs or three BF16 tensor-core matmuls (WIDE_PRODUCT). One pipeline stage, as the emulated backward, whose
# `ieee` dots Triton compiled wrongly at 3 stages (`_blocks`); warps by ptxas's report for sm_90: the `ieee` dK/dV
# kernel spills at every config, least at 8 warps (head dim 64: 3.0 KB, 7.8 KB at 4 warps); the split one spills
# nothing at 4 warps at head dim 64 and least at 8 warps at 128. Not yet timed.
NATIVE_CONFIGS = {
    ("fwd", True): dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    ("fwd", False): dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    ("bwd", True): dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
    ("bwd", False): dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
    ("fwd_rb", True): dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    ("fwd_rb", False): dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2),
    ("bwd_rb", True): dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2),
    ("bwd_rb", False): dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=1),
    ("bwd_wide", True): dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=1),
    ("bwd_wide", False): dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=1),
    ("bwd_split", True): dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=1),
    ("bwd_split", False): dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=1),
}


def native_config(head_dim: int, kernel: str) -> dict:
    """Launch config of the native path for `kernel` in {"fwd", "bwd", "fwd_rb", "bwd_rb", "bwd_wide", "bwd_split"} (a
    copy of NATIVE_CONFIGS' entry)."""
    return dict(NATIVE_CONFIGS[(kernel, head_dim <= 64)])


def fwd_kernel_key(nm: Numerics) -> str:
    """The NATIVE_CONFIGS kernel name of the forward under `nm`: "fwd_rb" with logical rounding blocks."""
    return "fwd_rb" if nm.round_block != 0 else "fwd"


def bwd_kernel_key(nm: Numerics) -> str:
    """The NATIVE_CONFIGS kernel name of the dK/dV and dQ kernels: "bwd_rb" when their lp accumulators see blocks,
    else, when backward P or dS stays FP32 (round_bwd_p or round_ds off), "bwd_wide" or "bwd_split" (per
    WIDE_PRODUCT), else "bwd"."""
    if nm.round_block != 0 and nm.round_grad_acc:
        return "bwd_rb"
    if nm.round_bwd_p and nm.round_ds:
        return "bwd"
    return "bwd_split" if WIDE_PRODUCT == "bf16_split" else "bwd_wide"


def _flags(nm: Numerics) -> dict:
    return dict(M_BITS=nm.mantissa_bits, SR=nm.rounding == "sr")


def _fwd_flags(nm: Numerics) -> dict:
    return dict(_flags(nm), ROUND_S=nm.round_s, ROUND_S_MINUS_M=nm.round_s_minus_m, ROUND_P=nm.round_p,
                ROWSUM_ROUNDED_P=nm.rowsum_rounded_p, ROUND_L=nm.round_l, ROUND_PV=nm.round_pv,
                ROUND_ACC=nm.round_acc, NORMALIZE_THEN_ROUND=nm.normalize_then_round, ROUND_LSE=nm.round_lse,
                ROUND_O=nm.round_o)


def _bwd_flags(nm: Numerics) -> dict:
    return dict(_flags(nm), ROUND_S=nm.round_s, ROUND_BWD_S_MINUS_LSE=nm.round_bwd_s_minus_lse, ROUND_DS=nm.round_ds,
                ROUND_DP=nm.round_dp, ROUND_DELTA=nm.round_delta, ROUND_GRAD_ACC=nm.round_grad_acc)


def native_allowed(nm: Numerics) -> bool:
    """True when `nm`'s rounding points can be the native BF16 casts/operands: mantissa_bits <= 7 (the native path
    rounds by casting to BF16). P̄, backward P and dS may be rounded or kept in FP32 (module docstring)."""
    return nm.mantissa_bits <= 7


def resolve_path(path, nm: Numerics, dtype, device) -> str:
    if path not in _PATHS:
        raise ValueError(f"path must be one of {_PATHS}, got {path!r}")
    if path is None:
        ok = device.type == "cuda" and dtype == torch.bfloat16 and not _interpreting() and native_allowed(nm)
        return "native" if ok else "emulated"
    if path == "native":
        if device.type != "cuda" or _interpreting():
            raise ValueError("path='native' needs CUDA tensors and a compiled Triton (not the CPU interpreter)")
        if dtype != torch.bfloat16:
            raise TypeError(f"path='native' needs bfloat16 inputs, got {dtype}")
        if not native_allowed(nm):
            raise ValueError(f"path='native' supports only numerics with mantissa_bits <= 7; got {nm}")
    return path


def _wide_split(path) -> bool:
    """The kernels' WIDE_SPLIT constexpr: the native path with WIDE_PRODUCT = "bf16_split"."""
    if WIDE_PRODUCT not in _WIDE_PRODUCTS:
        raise ValueError(f"WIDE_PRODUCT must be one of {_WIDE_PRODUCTS}, got {WIDE_PRODUCT!r}")
    return path == "native" and WIDE_PRODUCT == "bf16_split"


def _ntiles(n, block):
    """Tile count for the interpreter's static loops; 1 on the compiled path so a new N needs no recompile."""
    return triton.cdiv(n, block) if _interpreting() else 1


def _round_block(round_block, block_n, n):
    """(rb_keys, RB_TILES) of the kernels for `Numerics.round_block` with key tiles of `block_n`: the logical block's
    width in keys (a runtime loop step: the whole row, rounded up to tiles, for -1; 0 when off) and its tile count
    for the interpreter's static loops (1 on the compiled path for -1, whose width varies with N: no recompile)."""
    tiles = tiles_per_round_block(round_block, block_n, n)     # raises on a width that is not a multiple of tiles
    if round_block == 0:
        return 0, 1
    if round_block == -1 and not _interpreting():
        return tiles * block_n, 1
    return tiles * block_n, tiles


def _blocks(path, d, kernel, block):
    if path == "native":
        cfg = native_config(d, kernel)
        if block is not None:
            cfg.update(BLOCK_M=block[0], BLOCK_N=block[1])
        return cfg
    bm, bn = block if block is not None else EMULATED_BLOCK
    if kernel.startswith("bwd"):
        # One pipeline stage: Triton 3.6's default (3 stages at 4 warps) compiles the emulated dQ kernel wrongly on
        # the H100 (causal planted ties: 203 rows of dQ up to 12.4 from the CPU oracle; 1 stage, or 8 or 16 warps:
        # 8 rows within 0.04, the GPU's exp against the CPU's). The interpreter ignores launch options, so the
        # emulated numerics (and their bit-exactness there) are unchanged.
        return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=1)
    return dict(BLOCK_M=bm, BLOCK_N=bn)


def attention_fwd(q, k, v, *, causal, scale, nm: Numerics, fix, beta, tie_tol, path, max_shift=MAX_SHIFT, seed=0,
                  block=None, store_o32=False):
    """Launch the forward on contiguous (B, H, N, D) q, k, v (FP32 for emulated, BF16 for native).
    Returns (o, lse, o32): o (B, H, N, D) in the kernel's storage dtype (FP32 emulated / BF16 native), lse FP32
    (B, H, N) (natural log), o32 FP32 O before its final rounding (or None)."""
    B, H, N, D = q.shape
    DP = max(16, triton.next_power_of_2(D))
    cfg = _blocks(path, D, fwd_kernel_key(nm), block)
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    o32 = torch.empty(q.shape, device=q.device, dtype=torch.float32) if store_o32 else lse
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
    rb_keys, rb_tiles = _round_block(nm.round_block, cfg["BLOCK_N"], N)
    attn_fwd_kernel[grid](q, k, v, o, o32, lse, float(scale), float(beta), float(tie_tol),
                          float(max_shift) if max_shift is not None else 0.0, N, seed, rb_keys,
                          CLAMP_SHIFT=max_shift is not None, D=D, DP=DP, N_TILES=_ntiles(N, cfg["BLOCK_N"]),
                          ROUND_BLOCK=nm.round_block != 0, RB_TILES=rb_tiles, CAUSAL=causal, FIX=_FIX_CODE[fix],
                          NATIVE=path == "native", STATIC_LOOPS=_interpreting(), STORE_O32=store_o32,
                          WIDE_SPLIT=_wide_split(path), **_fwd_flags(nm), **cfg)
    return o, lse, (o32 if store_o32 else None)


def compute_delta(o, do, q, k, v, lse, *, causal, scale, nm: Numerics, path, seed=0, block=None):
    """δ (B, H, N) FP32 per `nm.delta_source` ("saved_o"/"fp32_o": from the given `o`; "dp_p": rowsum(dP∘P);
    "dp_p_norm": rowsum(dP∘P) / rowsum(P), `kernels/flash_bwd.py`)."""
    B, H, N, D = q.shape
    DP = max(16, triton.next_power_of_2(D))
    delta = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    cfg = _blocks(path, D, "bwd", block)
    if nm.delta_source in ("dp_p", "dp_p_norm"):
        attn_bwd_dq_kernel[(triton.cdiv(N, cfg["BLOCK_M"]), B * H)](
            q, k, v, do, lse, delta, delta, float(scale), N, seed, 0, D=D, DP=DP,
            N_TILES=_ntiles(N, cfg["BLOCK_N"]), ROUND_BLOCK=False, RB_TILES=1, CAUSAL=causal, NATIVE=path == "native",
            STATIC_LOOPS=_interpreting(), DELTA_ONLY=True, NORM_DELTA=nm.delta_source == "dp_p_norm",
            **_bwd_flags(nm), **cfg)
    else:
        bm = cfg["BLOCK_M"]
        attn_delta_kernel[(triton.cdiv(N, bm), B * H)](o, do, delta, N, seed, D=D, DP=DP, BLOCK_M=bm,
                                                       ROUND_DELTA=nm.round_delta,
                                                       ROUND_DELTA_PRODUCTS=nm.round_delta_products, **_flags(nm))
    return delta


def attention_bwd(do, q, k, v, o_for_delta, lse, *, causal, scale, nm: Numerics, path, seed=0, block=None,
                  grad_dtype=None):
    """Backward. Returns (dq, dk, dv, delta): gradients in `grad_dtype` (FP32 emulated / BF16 native by default),
    δ FP32 (B, H, N)."""
    B, H, N, D = q.shape
    DP = max(16, triton.next_power_of_2(D))
    delta = compute_delta(o_for_delta, do, q, k, v, lse, causal=causal, scale=scale, nm=nm, path=path, seed=seed,
                          block=block)
    cfg = _blocks(path, D, bwd_kernel_key(nm), block)
    gdt = grad_dtype or q.dtype
    dq = torch.empty(q.shape, device=q.device, dtype=gdt)
    dk = torch.empty(q.shape, device=q.device, dtype=gdt)
    dv = torch.empty(q.shape, device=q.device, dtype=gdt)
    common = dict(D=D, DP=DP, CAUSAL=causal, NATIVE=path == "native", STATIC_LOOPS=_interpreting(), **_bwd_flags(nm),
                  WIDE_SPLIT=_wide_split(path), **cfg)
    # Logical rounding blocks reach the backward only through its lp gradient accumulators (round_grad_acc): key
    # blocks in the dQ loop, query blocks in the dK/dV loop. With FP32 accumulators they would only reorder sums.
    rb = nm.round_block if nm.round_grad_acc else 0
    rb_rows, rb_m_tiles = _round_block(rb, cfg["BLOCK_M"], N)
    rb_keys, rb_n_tiles = _round_block(rb, cfg["BLOCK_N"], N)
    attn_bwd_dkdv_kernel[(triton.cdiv(N, cfg["BLOCK_N"]), B * H)](
        q, k, v, do, lse, delta, dk, dv, float(scale), N, seed, rb_rows, M_TILES=_ntiles(N, cfg["BLOCK_M"]),
        ROUND_BLOCK=rb != 0, RB_TILES=rb_m_tiles, ROUND_BWD_P=nm.round_bwd_p, **common)
    attn_bwd_dq_kernel[(triton.cdiv(N, cfg["BLOCK_M"]), B * H)](
        q, k, v, do, lse, delta, dq, float(scale), N, seed, rb_keys, N_TILES=_ntiles(N, cfg["BLOCK_N"]),
        ROUND_BLOCK=rb != 0, RB_TILES=rb_n_tiles, DELTA_ONLY=False, **common)
    return dq, dk, dv, delta


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, nm, fix, beta, tie_tol, max_shift, path, block):
        in_dtype = q.dtype
        if path == "emulated":
            q, k, v = (t.float().contiguous() for t in (q, k, v))   # BF16 -> FP32 is exact
        else:
            q, k, v = (t.contiguous() for t in (q, k, v))
        # Stochastic rounding needs fresh random bits on every call: with one fixed seed each element position would
        # reuse its Philox draw u at every training step, and "round up iff fraction > u" is then a per-position
        # systematic bias, the very thing SR is meant to remove. The seed comes from torch's CPU generator, so a
        # seeded run stays reproducible; RNE never draws (the generator of RNE runs is untouched).
        seed = int(torch.randint(0, 2 ** 30, (1,)).item()) if nm.rounding == "sr" else 0
        o, lse, _ = attention_fwd(q, k, v, causal=causal, scale=scale, nm=nm, fix=fix, beta=beta, tie_tol=tie_tol,
                                  max_shift=max_shift, path=path, block=block, seed=seed)
        o_delta = o
        if nm.delta_source == "fp32_o":
            # The paper's "recompute O in FP32" ablation: O from the same inputs with every rounding off (FP32
            # matmuls on either path), same fix.
            o_delta, _, _ = attention_fwd(q.float(), k.float(), v.float(), causal=causal, scale=scale,
                                          nm=FP32.replace(round_block=nm.round_block),
                                          fix=fix, beta=beta, tie_tol=tie_tol, max_shift=max_shift, path="emulated",
                                          block=block if path == "emulated" else None)
        ctx.save_for_backward(q, k, v, o_delta, lse)
        ctx.cfg = (causal, scale, nm, path, block, in_dtype, seed)
        return o.to(in_dtype)

    @staticmethod
    def backward(ctx, do):
        q, k, v, o_delta, lse = ctx.saved_tensors
        causal, scale, nm, path, block, in_dtype, seed = ctx.cfg
        do = do.float().contiguous() if path == "emulated" else do.to(torch.bfloat16).contiguous()
        # The forward's seed: the backward recomputes S and, under SR, must draw the same bits for it (the
        # backward's own rounding points have their own salts in the kernels).
        dq, dk, dv, _ = attention_bwd(do, q, k, v, o_delta, lse, causal=causal, scale=scale, nm=nm, path=path,
                                      block=block, seed=seed)
        return (dq.to(in_dtype), dk.to(in_dtype), dv.to(in_dtype)) + (None,) * 9


def _check_inputs(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"{name} must be bfloat16 or float32, got {t.dtype}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (batch, heads, seq, head_dim), got {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have the same shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    B, H, N, D = q.shape
    if not 16 <= D <= 128:
        raise ValueError(f"head_dim must be in [16, 128], got {D}")
    if B == 0 or H == 0 or N == 0:
        raise ValueError(f"batch, heads and seq must be positive, got {tuple(q.shape)}")


def attention(q, k, v, *, causal=True, scale=None, numerics="fa2", fix=None, beta=BETA, tie_tol=TIE_TOL,
              max_shift=MAX_SHIFT, path=None, block=None):
    """Flash attention O = softmax(scale·QKᵀ (+ causal mask)) V with the rounding placement `numerics`.

    q, k, v: (batch, heads, seq, head_dim), bfloat16 or float32, same device; head_dim in [16, 128].
    causal: mask keys after the query (top-left aligned). scale: softmax scale, default 1/sqrt(head_dim).
    numerics: "fp32" | "fa2" | "paper" or a `lib.fp.numerics.Numerics` (its `round_block` sets the logical
    rounding block: module docstring). fix: None, "beta" (per-tile detection, the
    paper's Algorithm 1) or "beta_split" (also a max repeated across tiles). beta > 1: the β of the
    fix (default the paper's, `lib.fp.fix.BETA`). tie_tol >= 0: a row's tile max counts as repeated when another
    score is >= max − tie_tol (0: exact ties).
    max_shift > 0 or None: underflow guard of the fix — a repeated max is never shifted by more than max_shift
    (None: the paper's exact rule, which underflows whole rows once (β−1)·max ≳ 88).
    path: None | "emulated" | "native" (module docstring). block: (BLOCK_M, BLOCK_N) override (powers of two ≥ 16;
    part of the numerics: the emulator must use the same tiles). Returns O, shape and dtype of q.
    """
    _check_inputs(q, k, v)
    nm = get_profile(numerics)
    if fix not in _FIXES:
        raise ValueError(f"fix must be one of {_FIXES}, got {fix!r}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 1:
        raise ValueError(f"beta must be a finite number > 1, got {beta!r}")
    if isinstance(tie_tol, bool) or not isinstance(tie_tol, (int, float)) or not math.isfinite(tie_tol) \
            or tie_tol < 0:
        raise ValueError(f"tie_tol must be a finite number >= 0, got {tie_tol!r}")
    if max_shift is not None and (isinstance(max_shift, bool) or not isinstance(max_shift, (int, float))
                                  or not math.isfinite(max_shift) or max_shift <= 0):
        raise ValueError(f"max_shift must be a finite number > 0 or None, got {max_shift!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if block is not None:
        if len(block) != 2 or any(not isinstance(b, int) or b < 16 or b & (b - 1) for b in block):
            raise ValueError(f"block must be (BLOCK_M, BLOCK_N), powers of two >= 16, got {block!r}")
    path = resolve_path(path, nm, q.dtype, q.device)
    if nm.round_block > 0:     # a logical block must be whole tiles, in the forward and in the backward's loops
        for kernel in (fwd_kernel_key(nm), bwd_kernel_key(nm)):
            cfg = _blocks(path, q.shape[-1], kernel, block)
            for width in ((cfg["BLOCK_N"],) if kernel.startswith("fwd") else (cfg["BLOCK_M"], cfg["BLOCK_N"])):
                tiles_per_round_block(nm.round_block, width, q.shape[2])
    return _FlashAttention.apply(q, k, v, bool(causal), float(scale), nm, fix, float(beta), float(tie_tol),
                                 None if max_shift is None else float(max_shift), path,
                                 tuple(block) if block is not None else None)
