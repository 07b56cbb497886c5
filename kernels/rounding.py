"""Bit-exact rounding helpers for Triton kernels: FP32 -> BF16 (or m mantissa bits), RNE or stochastic.

Why not `x.to(tl.bfloat16)`? In Triton's CPU interpreter (TRITON_INTERPRET=1) that cast *truncates* (round
toward zero), and BF16 arithmetic there works on raw bit patterns. Truncation has the opposite sign bias from
the round-to-nearest-even + sticky-bit mechanism this book studies, so a kernel using the native cast would
"show" a wrong mechanism in CI without any error. These helpers are plain integer operations on the FP32 bit
pattern, so they are exact both in the interpreter and on the GPU; `results/full/rounding_exhaustive.json`
records that on the H100 they equal the native cast on all 2**32 FP32 patterns.

Device functions (`@triton.jit`, use inside kernels):
    rne_bf16(x)              fp32 -> bf16 tensor, RNE
    bf16_to_f32(x)           bf16 -> fp32, exact for all 65 536 patterns (subnormals included)
    rne_mantissa(x, M)       fp32 -> fp32 on the M-mantissa-bit grid (M constexpr, 1..23), RNE
    sr_mantissa(x, M, r)     fp32 -> fp32 on the M-bit grid, stochastic with random uint32 bits r

Host wrappers (torch tensors, any device; CUDA or interpreter):
    round_to_bf16(x) -> bfloat16,   round_mantissa(x, m) -> float32,   bf16_to_fp32(x) -> float32,
    stochastic_round(x, m, seed) -> float32
"""
import torch
import triton
import triton.language as tl

__all__ = ["rne_bf16", "bf16_to_f32", "rne_mantissa", "sr_mantissa",
           "round_to_bf16", "round_mantissa", "bf16_to_fp32", "stochastic_round", "native_to_bf16"]


@triton.jit
def rne_mantissa(x, M: tl.constexpr):
    """Round fp32 `x` to M mantissa bits (ties to even); result is fp32. NaN stays a quiet NaN."""
    SHIFT: tl.constexpr = 23 - M
    if SHIFT == 0:
        return x
    else:
        u = x.to(tl.uint32, bitcast=True)
        lsb = (u >> SHIFT) & 1
        # Adding (half − 1 + lsb) then truncating is RNE; the carry may propagate into the exponent, which is
        # exactly the "new binade" case (and overflows the largest finite value to Inf).
        r = ((u + ((1 << (SHIFT - 1)) - 1) + lsb) >> SHIFT) << SHIFT
        is_nan = (u & 0x7FFFFFFF) > 0x7F800000
        r = tl.where(is_nan, ((u >> SHIFT) << SHIFT) | 0x400000, r)
        return r.to(tl.float32, bitcast=True)


@triton.jit
def sr_mantissa(x, M: tl.constexpr, rand):
    """Stochastic rounding of fp32 `x` to M mantissa bits using random uint32 `rand` (only its low 23−M bits)."""
    SHIFT: tl.constexpr = 23 - M
    if SHIFT == 0:
        return x
    else:
        u = x.to(tl.uint32, bitcast=True)
        r = ((u + (rand.to(tl.uint32, bitcast=True) & ((1 << SHIFT) - 1))) >> SHIFT) << SHIFT
        mag = u & 0x7FFFFFFF
        r = tl.where(mag == 0x7F800000, u, r)                       # ±Inf stays
        r = tl.where(mag > 0x7F800000, ((u >> SHIFT) << SHIFT) | 0x400000, r)  # NaN stays quiet NaN
        return r.to(tl.float32, bitcast=True)


@triton.jit
def rne_bf16(x):
    """fp32 -> bf16 with round-to-nearest-even, correct in the interpreter and on the GPU."""
    r = rne_mantissa(x, 7).to(tl.uint32, bitcast=True) >> 16
    return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def bf16_to_f32(x):
    """bf16 -> fp32 by shifting the bit pattern (the interpreter's own cast is wrong for subnormals)."""
    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


# ----------------------------------------------------------------------------------------------- host side
_BLOCK = 1 << 14


@triton.jit
def _round_kernel(X, Y, n, M: tl.constexpr, TO_BF16: tl.constexpr, STOCHASTIC: tl.constexpr, seed,
                  BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0)
    if STOCHASTIC:
        y = sr_mantissa(x, M, tl.randint(seed, offs))
    else:
        y = rne_mantissa(x, M)
    if TO_BF16:
        y = (y.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    tl.store(Y + offs, y, mask=mask)


@triton.jit
def _widen_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, bf16_to_f32(tl.load(X + offs, mask=mask)), mask=mask)


@triton.jit
def _native_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask).to(tl.bfloat16), mask=mask)


def _check_tensor(x, dtype, name="x"):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {x.dtype}")
    return x.contiguous()


def _check_m(m):
    if isinstance(m, bool) or not isinstance(m, int):
        raise TypeError(f"m (mantissa bits) must be an int in [1, 23], got {type(m).__name__} {m!r}")
    if not 1 <= m <= 23:
        raise ValueError(f"m (mantissa bits) must be in [1, 23] (7 = BF16, 23 = FP32), got {m}")


def _launch_round(x, m, to_bf16, stochastic, seed):
    x = _check_tensor(x, torch.float32)
    y = torch.empty_like(x, dtype=torch.bfloat16 if to_bf16 else torch.float32)
    n = x.numel()
    if n:
        _round_kernel[(triton.cdiv(n, _BLOCK),)](x, y, n, M=m, TO_BF16=to_bf16, STOCHASTIC=stochastic,
                                                 seed=seed, BLOCK=_BLOCK)
    return y


def round_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """float32 tensor -> bfloat16 tensor, round-to-nearest-even (same shape, same device)."""
    return _launch_round(x, 7, True, False, 0)


def round_mantissa(x: torch.Tensor, m: int) -> torch.Tensor:
    """float32 tensor -> float32 tensor on the m-mantissa-bit grid (1 <= m <= 23), round-to-nearest-even."""
    _check_m(m)
    return _launch_round(x, m, False, False, 0)


def stochastic_round(x: torch.Tensor, m: int = 7, seed: int = 0) -> torch.Tensor:
    """float32 -> float32 on the m-bit grid, stochastic rounding driven by Philox(seed, element index)."""
    _check_m(m)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return _launch_round(x, m, False, True, seed)


def bf16_to_fp32(x: torch.Tensor) -> torch.Tensor:
    """bfloat16 tensor -> float32 tensor, exact."""
    x = _check_tensor(x, torch.bfloat16)
    y = torch.empty_like(x, dtype=torch.float32)
    if x.numel():
        _widen_kernel[(triton.cdiv(x.numel(), _BLOCK),)](x, y, x.numel(), BLOCK=_BLOCK)
    return y


def native_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """Triton's own `.to(tl.bfloat16)`: RNE on the GPU, *truncation* in the CPU interpreter. For comparison only."""
    x = _check_tensor(x, torch.float32)
    y = torch.empty_like(x, dtype=torch.bfloat16)
    if x.numel():
        _native_kernel[(triton.cdiv(x.numel(), _BLOCK),)](x, y, x.numel(), BLOCK=_BLOCK)
    return y
