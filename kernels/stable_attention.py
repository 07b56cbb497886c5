"""`stable_attention(q, k, v, is_causal=False, scale=None, fix=None, beta=USER_BETA, max_shift=MAX_SHIFT, delta="o")`:
SDPA's call with production FlashAttention-2 numerics and the β fix of Qiu & Yao (arXiv 2510.04212, §4), forward
and backward.

q, k, v: (batch, heads, T, head_dim), one shape, dtype and device; head_dim 64 or 128. On CUDA, BF16 or FP16
tensors run the fast path (`kernels/stable_fwd.py`, `kernels/stable_bwd.py`: TMA on Hopper, autotuned tiles);
FP32 tensors run the EMULATE mode (FP32 matmuls, BF16 roundings by the bit-exact helper; slow, for checking), as do
all tensors in Triton's CPU interpreter (TRITON_INTERPRET=1; BF16 or FP32 CPU tensors). Non-contiguous inputs are
copied with `.contiguous()`. Returns O with q's shape and dtype; differentiable in q, k, v (the plain FA2
backward: a δ = rowsum(dO∘O) pre-kernel, then one dK/dV + dQ kernel).

fix=None: FA2. fix="beta": on each key tile, a row whose tile max occurs at least twice subtracts β·max (max > 0)
or 0 (max < 0) instead, the shift capped at `max_shift` (None: no cap, the paper's rule, which underflows whole rows
once (β−1)·max ≳ 88). Tie detection is per key tile: 64 keys in EMULATE and in the fallback config, the autotuned
BLOCK_N on the fast path (`fwd_block_n(q.shape, is_causal, fix)` says which, after a first call). β > 1; its
default `lib.fp.fix.USER_BETA` (2) is not the paper's 7 on purpose (see there), the cap's `MAX_SHIFT` (64).

delta="o" (default): the backward's δ = rowsum(dO∘O), (B, H, T) FP32, reads the returned O (q's dtype; in EMULATE
FP32 holding BF16 values), as FA2 does. delta="fp32_o": δ reads the FP32 O = acc/ℓ before its one rounding, which
the forward then also writes (`STORE_O32` in `kernels/stable_fwd.py`) when a backward can follow (grad enabled and
q, k or v requiring grad). Why: in the GPT-2 runs of chapter 2c (the research kernel, the paper's rounding
placement), δ from an FP32 O (there O′, `kernels/attention_op.py`) kept the loss from exploding at two seeds. The
returned O is the same bits with either value (the kernel rounds it as without the option, with the same tiles),
and delta="o" is the FA2 backward unchanged. Cost of "fp32_o": the backward saves the FP32 O, 4 bytes per element
of O (B·H·T·D), instead of the returned O, 2 bytes per element (BF16/FP16) that the caller usually keeps anyway
(e.g. as the next projection's input), so up to 4 bytes per element more until the backward; the forward writes
those 4 bytes per element more and δ reads 4 instead of 2 (`benchmarks/bench_stable_attention.py` times it).

Lower level: `forward(...)` and `backward(...)` launch the kernels with an explicit launch config or the autotuner
and return the raw outputs (LSE in the kernel's units: natural in EMULATE, LSE/scale on the fast path). Their
`base2=True` with emulate=True runs the fast path's softmax arithmetic (base-2 exponent of the unscaled scores) on
EMULATE's operands, so that the interpreter can check it. `forward(..., store_o32=True)` also returns the FP32 O
that delta="fp32_o" saves; `backward` takes either O (δ reads it as FP32).
"""
from __future__ import annotations

import math
import os

import torch
import triton

from kernels.stable_bwd import DELTA_BLOCK, attn_bwd_kernel, attn_bwd_tuned, attn_delta_kernel
from kernels.stable_fwd import EMULATE_BLOCK, attn_fwd_kernel, attn_fwd_tuned
from lib.fp.fix import MAX_SHIFT, USER_BETA

__all__ = ["stable_attention", "forward", "backward", "fwd_block_n", "LOG2E", "EMULATE_BWD_WARPS"]

LOG2E = 1.0 / math.log(2.0)
# Warps of the EMULATE backward on a GPU. Its FP32 `ieee` dots are unrolled FMAs, so the compile time grows with the
# work per thread: the causal sm_90 kernel took ≈ 30 s at 4 warps and ≈ 6 s at 16 (Triton 3.6, compiled on a CPU
# for sm_90). The backward has no reduction across threads (each FMA dot sums its K dimension in order inside one
# thread, everything else is elementwise), so the warp count does not enter its arithmetic; the GPU test against the
# research kernel (4 warps) checks that bit for bit. The EMULATE forward keeps 4 warps: its row sums ℓ are tree
# reductions whose order follows the layout, and they must match the research kernel's.
EMULATE_BWD_WARPS = 16
_HEAD_DIMS = (64, 128)
_FIXES = (None, "beta")
_DELTAS = ("o", "fp32_o")


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _use_tma(x: torch.Tensor, emulate: bool) -> bool:
    """TMA descriptors on Hopper and later for the BF16/FP16 path (EMULATE's FP32 rows are wider than one 128-byte
    TMA box: plain pointers there)."""
    return (not emulate and x.is_cuda and not _interpreting() and torch.cuda.get_device_capability(x.device)[0] >= 9)


def _tma_scratch():
    """Device-side TMA descriptors need a global scratch allocator (the tutorial's `alloc_fn`). Triton keeps it in a
    context variable, which autograd's backward thread does not inherit, so it is set before every launch."""
    triton.set_allocator(_alloc)


def _alloc(size: int, align: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _base2(emulate: bool, base2) -> bool:
    """The exponent's units: base 2 on the fast path (always); EMULATE natural by default (the oracle's), or base 2
    with base2=True, to run the fast path's softmax arithmetic with EMULATE's operands (e.g. in the interpreter)."""
    base2 = not emulate if base2 is None else bool(base2)
    if not (emulate or base2):
        raise ValueError("the fast path computes in base 2 only (base2=False needs emulate=True)")
    return base2


def forward(q, k, v, *, causal: bool, scale: float, fix=None, beta: float = USER_BETA, max_shift=MAX_SHIFT,
            emulate: bool = False, use_tma=None, config=None, base2=None, store_o32: bool = False):
    """Launch the forward on contiguous (B, H, T, D) q, k, v (FP32 for emulate, BF16/FP16 otherwise).
    Returns (o (B, H, T, D) like q, lse FP32 (B, H, T) in the kernel's units: natural log in EMULATE, in units of
    the unscaled q·kᵀ (LSE/scale) otherwise or with base2=True, `_base2`), and with store_o32 a third output, o32:
    FP32 (B, H, T, D), the O before its final rounding (o is unchanged by it). config: {"BLOCK_M", "BLOCK_N",
    "num_warps", "num_stages"} or None (autotuned; EMULATE: 64×64)."""
    if _interpreting() and not emulate:
        raise ValueError("the interpreter runs only the EMULATE mode (its BF16 casts truncate)")
    base2 = _base2(emulate, base2)
    B, H, T, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, T), device=q.device, dtype=torch.float32)
    # without store_o32 the FP32 LSE stands in for O32 (not written): the autotuner's key then stays the same
    o32 = torch.empty(q.shape, device=q.device, dtype=torch.float32) if store_o32 else lse
    use_tma = _use_tma(q, emulate) if use_tma is None else use_tma
    if use_tma and not _interpreting():
        _tma_scratch()
    units = LOG2E if base2 else 1.0              # the exponent's units per unit of scale·q·kᵀ
    # maxima, shifts and LSE in the scores' units: q·kᵀ unscaled in base 2, scale·q·kᵀ in natural units
    shift = math.inf if max_shift is None else float(max_shift) / (float(scale) if base2 else 1.0)
    args = (q, k, v, o, o32, lse, float(scale) * units, float(beta), shift, T)
    kw = dict(HEAD_DIM=D, CAUSAL=bool(causal), FIX=fix == "beta", EMULATE=emulate, BASE2=base2, USE_TMA=use_tma,
              STORE_O32=bool(store_o32))
    if config is None and not emulate:
        grid = lambda meta: (triton.cdiv(T, meta["BLOCK_M"]), B * H)  # noqa: E731
        attn_fwd_tuned[grid](*args, STATIC_LOOPS=False, N_TILES=1, **kw)
    else:
        cfg = {"BLOCK_M": EMULATE_BLOCK, "BLOCK_N": EMULATE_BLOCK, "num_warps": 4, **(config or {})}
        cfg.setdefault("WARP_SPECIALIZE", False)
        static = _interpreting()
        attn_fwd_kernel[(triton.cdiv(T, cfg["BLOCK_M"]), B * H)](
            *args, STATIC_LOOPS=static, N_TILES=triton.cdiv(T, cfg["BLOCK_N"]) if static else 1, **kw, **cfg)
    return (o, lse, o32) if store_o32 else (o, lse)


def backward(do, q, k, v, o, lse, *, causal: bool, scale: float, emulate: bool = False, use_tma=None,
             config=None, base2=None):
    """Launch the δ pre-kernel and the dK/dV + dQ kernel. All tensors contiguous (B, H, T, D) (lse: the forward's,
    (B, H, T), from a forward with the same emulate and base2). o: the O that δ = rowsum(dO∘O) reads, as FP32: the
    forward's o, or its o32 (FP32, `forward(..., store_o32=True)`). Returns (dq, dk, dv, delta) with gradients in q's
    dtype and δ FP32 (B, H, T). config: {"BLOCK_BIG", "BLOCK_STEP", "num_warps", "num_stages"} or None (autotuned;
    EMULATE: 64 and 64, with EMULATE_BWD_WARPS warps)."""
    base2 = _base2(emulate, base2)
    B, H, T, D = q.shape
    delta = torch.empty((B, H, T), device=q.device, dtype=torch.float32)
    attn_delta_kernel[(triton.cdiv(T, DELTA_BLOCK), B * H)](o, do, delta, T, HEAD_DIM=D, BLOCK_M=DELTA_BLOCK)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    use_tma = _use_tma(q, emulate) if use_tma is None else use_tma
    if use_tma and not _interpreting():
        _tma_scratch()
    units = LOG2E if base2 else 1.0
    args = (q, k, v, do, dq, dk, dv, lse, delta, float(scale) * units, float(scale), T)
    kw = dict(HEAD_DIM=D, CAUSAL=bool(causal), EMULATE=emulate, BASE2=base2, USE_TMA=use_tma)
    if config is None and not emulate:
        grid = lambda meta: (triton.cdiv(T, meta["BLOCK_BIG"]), B * H)  # noqa: E731
        attn_bwd_tuned[grid](*args, STATIC_LOOPS=False, N_STEPS=1, **kw)
    else:
        warps = EMULATE_BWD_WARPS if emulate else 4
        cfg = {"BLOCK_BIG": EMULATE_BLOCK, "BLOCK_STEP": EMULATE_BLOCK, "num_warps": warps, **(config or {})}
        static = _interpreting()
        attn_bwd_kernel[(triton.cdiv(T, cfg["BLOCK_BIG"]), B * H)](
            *args, STATIC_LOOPS=static, N_STEPS=triton.cdiv(T, cfg["BLOCK_STEP"]) if static else 1, **kw, **cfg)
    return dq, dk, dv, delta


def fwd_block_n(shape, causal: bool, fix=None):
    """The key tile (= the fix's tie-detection width) the autotuner chose for a forward of this (B, H, T, D) shape,
    or None before the first call with it (EMULATE and explicit configs: their own BLOCK_N). With a single config
    in the autotuner's list (Triton then runs it without tuning or caching) that config's BLOCK_N."""
    B, H, T, D = shape
    if len(attn_fwd_tuned.configs) == 1:
        return attn_fwd_tuned.configs[0].kwargs["BLOCK_N"]
    for key, cfg in attn_fwd_tuned.cache.items():
        if tuple(key[:4]) == (T, D, bool(causal), fix == "beta"):
            return cfg.kwargs["BLOCK_N"]
    return None


# Forward and backward as custom ops (fake-tensor and autograd registrations), so `torch.compile(model)` compiles the
# model around the kernels without a graph break; the kernels themselves are opaque calls, as in eager mode.
@torch.library.custom_op("book::stable_attn_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, fix: str, beta: float,
            max_shift: float, store_o32: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O in q's dtype, LSE FP32 (B, H, T) in the kernel's units, O32: with store_o32 the FP32 O before its final
    rounding (B, H, T, D), else an empty FP32 tensor); max_shift < 0: no cap."""
    in_dtype = q.dtype
    emulate = q.dtype == torch.float32 or _interpreting()
    q, k, v = ((t.float() if emulate else t).contiguous() for t in (q, k, v))   # BF16 → FP32 is exact
    o, lse, *o32 = forward(q, k, v, causal=causal, scale=scale, fix=fix or None, beta=beta,
                           max_shift=None if max_shift < 0 else max_shift, emulate=emulate, store_o32=store_o32)
    return o.to(in_dtype), lse, o32[0] if store_o32 else lse.new_empty(0)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, causal, scale, fix, beta, max_shift, store_o32):
    o32 = q.new_empty(q.shape if store_o32 else (0,), dtype=torch.float32)
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32), o32   # contiguous, as written


@torch.library.custom_op("book::stable_attn_bwd", mutates_args=())
def _bwd_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
            causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    in_dtype = q.dtype
    emulate = q.dtype == torch.float32 or _interpreting()
    # EMULATE reads FP32 operands. The saved O is O rounded to q's dtype, as the FA2 backward's δ reads it
    # (delta="o"), or the FP32 O before that rounding (delta="fp32_o"), kept FP32 on the fast path too.
    do, q, k, v, o = ((t.float() if emulate else t).contiguous() for t in (do.to(in_dtype), q, k, v, o))
    dq, dk, dv, _ = backward(do, q, k, v, o, lse.contiguous(), causal=causal, scale=scale, emulate=emulate)
    return dq.to(in_dtype), dk.to(in_dtype), dv.to(in_dtype)


@_bwd_op.register_fake
def _bwd_fake(do, q, k, v, o, lse, causal, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)   # contiguous, as the kernels write


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, *_, store_o32 = inputs
    o, lse, o32 = output
    ctx.save_for_backward(q, k, v, o32 if store_o32 else o, lse)       # the O that δ reads
    ctx.cfg = (causal, scale)


def _backward(ctx, do, _dlse, _do32):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _bwd_op(do, q, k, v, o, lse, *ctx.cfg)
    return dq, dk, dv, None, None, None, None, None, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _real(name, x, ok, what):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not ok(x):
        raise ValueError(f"{name} must be {what}, got {x!r}")


def _check(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dim() != 4 or not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have one shape (batch, heads, T, head_dim), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.shape[-1] not in _HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {_HEAD_DIMS}, got {q.shape[-1]}")
    if 0 in q.shape:
        raise ValueError(f"batch, heads and T must be positive, got {tuple(q.shape)}")
    if _interpreting():
        if q.device.type != "cpu" or q.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"Triton's CPU interpreter runs the EMULATE mode on BF16 or FP32 CPU tensors, got "
                            f"{q.dtype} on {q.device}")
    elif q.device.type != "cuda" or q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"stable_attention needs BF16, FP16 or FP32 CUDA tensors, got {q.dtype} on {q.device}")


def stable_attention(q, k, v, is_causal: bool = False, scale=None, fix=None, beta: float = USER_BETA,
                     max_shift=MAX_SHIFT, delta: str = "o"):
    """softmax(scale·q·kᵀ (+ causal mask))·v with FA2 numerics and, with fix="beta", the β-shifted max on tied rows.

    q, k, v: (batch, heads, T, head_dim) BF16/FP16 CUDA (FP32 or the interpreter: EMULATE mode), head_dim 64 or
    128. is_causal: mask keys after the query. scale: default 1/sqrt(head_dim). fix: None or "beta". beta: finite,
    > 1. max_shift: finite > 0 (the cap on a fixed row's shift, in units of the scaled scores) or None (no cap).
    delta: the O the backward's δ = rowsum(dO∘O) ((batch, heads, T), FP32) reads: "o", the returned O (FA2), or
    "fp32_o", the FP32 O before its final rounding; that saves an FP32 (batch, heads, T, head_dim) O for the
    backward, 4 bytes per element instead of the returned O's 2 (module docstring). O is the same bits either way.
    Returns O, shape and dtype of q; differentiable (module docstring)."""
    _check(q, k, v)
    if fix not in _FIXES:
        raise ValueError(f"fix must be one of {_FIXES}, got {fix!r}")
    _real("beta", beta, lambda b: b > 1, "a finite number > 1")
    if max_shift is not None:
        _real("max_shift", max_shift, lambda s: s > 0, "a finite number > 0 or None")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    _real("scale", scale, lambda s: s > 0, "a finite number > 0 or None")
    if not (isinstance(delta, str) and delta in _DELTAS):
        raise ValueError(f"delta must be one of {_DELTAS}, got {delta!r}")
    # the FP32 O serves only the backward: without one to follow, the forward does not write it (O is the same)
    store_o32 = delta == "fp32_o" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    o, _, _ = _fwd_op(q, k, v, bool(is_causal), float(scale), fix or "", float(beta),
                      -1.0 if max_shift is None else float(max_shift), store_o32)
    return o
