"""Bit-level references for BF16 and reduced-mantissa rounding (numpy / torch, CPU).

These are the oracles for `kernels/rounding.py` and the building blocks of chapter 1.

Conventions
-----------
* A "format with m mantissa bits" keeps FP32's 8-bit exponent and its sign and stores `m` explicit fraction bits
  (BF16 is m = 7, FP32 is m = 23). Values are carried as FP32 numbers that lie on that format's grid.
* Rounding is round-to-nearest, ties-to-even (RNE) on the FP32 bit pattern, which is what IEEE-754 and the
  GPU's `cvt.rn.bf16.f32` do: overflow past the largest finite value goes to ±Inf, subnormals round on the
  same grid, −0 stays −0, NaN stays a (quiet) NaN.
* Stochastic rounding (SR) adds a uniform random integer in [0, 2**(23−m)) to the bit pattern and truncates, so
  E[SR(x)] = x exactly for finite x.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = [
    "MANTISSA_BF16", "check_mantissa_bits", "f32_bits", "bits_f32",
    "round_bits_rne", "round_rne", "round_stochastic", "to_bf16_bits", "bf16_bits_to_f32",
    "ulp", "bit_fields", "bit_string", "exact_round_rne", "philox_randint",
]

MANTISSA_BF16 = 7
_F32_FRAC = 23


def check_mantissa_bits(m) -> int:
    """Validate a mantissa width: an int in [1, 23]. Returns it as int; raises TypeError/ValueError otherwise."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
        raise TypeError(f"mantissa bits must be an int in [1, 23], got {type(m).__name__} {m!r}")
    if not 1 <= int(m) <= _F32_FRAC:
        raise ValueError(f"mantissa bits must be in [1, 23] (7 = BF16, 23 = FP32), got {m}")
    return int(m)


def _as_f32(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.float32:
        if a.dtype.kind not in "fiu":
            raise TypeError(f"expected a float32 array (or numbers), got dtype {a.dtype}")
        a = a.astype(np.float32)
    return a


def f32_bits(x) -> np.ndarray:
    """FP32 values -> their uint32 bit patterns (same shape)."""
    return np.ascontiguousarray(_as_f32(x)).view(np.uint32)


def bits_f32(u) -> np.ndarray:
    """uint32 bit patterns -> FP32 values (same shape)."""
    u = np.asarray(u)
    if u.dtype != np.uint32:
        raise TypeError(f"expected uint32 bit patterns, got dtype {u.dtype}")
    return np.ascontiguousarray(u).view(np.float32)


def round_bits_rne(u, m: int = MANTISSA_BF16) -> np.ndarray:
    """RNE of FP32 bit patterns `u` (uint32) to `m` mantissa bits; returns uint32 patterns with the low
    23 − m bits zero. NaN inputs come back as quiet NaNs with their sign and top payload bits."""
    m = check_mantissa_bits(m)
    u = np.asarray(u, dtype=np.uint32)
    shift = _F32_FRAC - m
    if shift == 0:
        return u.copy()
    u64 = u.astype(np.uint64)  # no wrap-around on the carry
    lsb = (u64 >> shift) & 1
    r = ((u64 + ((1 << (shift - 1)) - 1) + lsb) >> shift) << shift
    is_nan = (u64 & 0x7FFFFFFF) > 0x7F800000
    # Quiet the NaN: keep sign and the top payload bits, force the quiet bit (bit 22).
    nan_bits = ((u64 >> shift) << shift) | (1 << 22)
    return np.where(is_nan, nan_bits, r).astype(np.uint32)


def round_rne(x, m: int = MANTISSA_BF16) -> np.ndarray:
    """RNE of FP32 values to `m` mantissa bits, returned as FP32 values on that grid."""
    return bits_f32(round_bits_rne(f32_bits(x), m))


def round_stochastic(x, m: int = MANTISSA_BF16, rng: np.random.Generator | None = None,
                     random_bits=None) -> np.ndarray:
    """Stochastic rounding of FP32 values to `m` mantissa bits.

    `random_bits` (uint32, same shape) may be given to make the result reproducible against a kernel; only its
    low 23 − m bits are used. Otherwise they are drawn from `rng` (default: a fresh `np.random.default_rng()`)."""
    m = check_mantissa_bits(m)
    u = f32_bits(x).astype(np.uint64)
    shift = _F32_FRAC - m
    if random_bits is None:
        rng = rng or np.random.default_rng()
        random_bits = rng.integers(0, 2**32, size=u.shape, dtype=np.uint64)
    rb = np.asarray(random_bits).astype(np.uint64) & ((1 << shift) - 1)
    r = ((u + rb) >> shift) << shift
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    is_inf = (u & 0x7FFFFFFF) == 0x7F800000
    r = np.where(is_nan, ((u >> shift) << shift) | (1 << 22), r)
    r = np.where(is_inf, u, r)
    return bits_f32(r.astype(np.uint32))


def to_bf16_bits(x) -> np.ndarray:
    """FP32 values -> BF16 bit patterns (uint16), RNE."""
    return (round_bits_rne(f32_bits(x), MANTISSA_BF16) >> 16).astype(np.uint16)


def bf16_bits_to_f32(h) -> np.ndarray:
    """BF16 bit patterns (uint16) -> FP32 values; exact for all 65 536 patterns."""
    h = np.asarray(h)
    if h.dtype != np.uint16:
        raise TypeError(f"expected uint16 BF16 bit patterns, got dtype {h.dtype}")
    return bits_f32(h.astype(np.uint32) << 16)


def ulp(x, m: int = MANTISSA_BF16) -> np.ndarray:
    """Spacing of the m-bit grid at |x| (the ULP of the binade holding x), as float64.

    For |x| in [2**e, 2**(e+1)) this is 2**(e − m); in the subnormal range it is 2**(−126 − m)."""
    m = check_mantissa_bits(m)
    a = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, -126.0)
    return np.ldexp(1.0, (e - m).astype(int))


def bit_fields(x, m: int = MANTISSA_BF16) -> dict:
    """Split one FP32 value into sign, exponent, kept fraction (m bits) and dropped bits (23 − m) as strings."""
    m = check_mantissa_bits(m)
    u = int(f32_bits(np.float32(x)).item())
    s = f"{u:032b}"
    return {"sign": s[0], "exponent": s[1:9], "fraction": s[9:9 + m], "dropped": s[9 + m:], "value": float(np.float32(x))}


def bit_string(x, m: int = MANTISSA_BF16, sep: str = " ", drop_sep: str = " | ") -> str:
    """'s eeeeeeee fffffff | dddddddddddddddd' for one FP32 value: what RNE keeps, and what it drops."""
    f = bit_fields(x, m)
    return f"{f['sign']}{sep}{f['exponent']}{sep}{f['fraction']}{drop_sep}{f['dropped']}"


def exact_round_rne(q: Fraction, m: int) -> Fraction:
    """Independent reference: round an exact rational to the m-bit grid (normal range only), ties to even.

    Uses only integer arithmetic on Fractions, no floating point, so it cross-checks the bit-twiddling helpers."""
    m = check_mantissa_bits(m)
    q = Fraction(q)
    if q == 0:
        return Fraction(0)
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    if Fraction(2) ** (e + 1) <= a:
        e += 1
    spacing = Fraction(2) ** (e - m)
    k = a / spacing               # in [2**m, 2**(m+1))
    lo = k.numerator // k.denominator
    rem = k - lo
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return sign * lo * spacing


_PHILOX_ROUND = (0xD2511F53, 0xCD9E8D57)     # Triton's 32-bit Philox constants (triton/language/random.py)
_PHILOX_KEY = (0x9E3779B9, 0xBB67AE85)
_U32 = 0xFFFFFFFF


def philox_randint(seed: int, offsets, n_rounds: int = 10) -> np.ndarray:
    """Triton's `tl.randint(seed, offsets)` in numpy: Philox-4x32 with `n_rounds` rounds, key = the seed as a 64-bit
    unsigned integer (a negative int32 seed sign-extends, as in Triton), counter = (offset, 0, 0, 0) for int32
    offsets; returns the first output word (uint32, the shape of `offsets`). The kernels' stochastic rounding draws
    these bits, so the oracle can replay them."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    k0 = np.uint64(seed & _U32)
    k1 = np.uint64((seed >> 32) & _U32)
    c0 = np.asarray(offsets).astype(np.int64).astype(np.uint64) & np.uint64(_U32)
    c1 = np.zeros_like(c0)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    a, b = np.uint64(_PHILOX_ROUND[0]), np.uint64(_PHILOX_ROUND[1])
    m32, s32 = np.uint64(_U32), np.uint64(32)
    for _ in range(n_rounds):
        p0 = a * c0                      # < 2**64: exact in uint64
        p2 = b * c2
        c0, c2, c1, c3 = ((p2 >> s32) ^ c1 ^ k0) & m32, ((p0 >> s32) ^ c3 ^ k1) & m32, p2 & m32, p0 & m32
        k0 = (k0 + np.uint64(_PHILOX_KEY[0])) & m32
        k1 = (k1 + np.uint64(_PHILOX_KEY[1])) & m32
    return c0.astype(np.uint32)
