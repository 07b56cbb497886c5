"""Our flash attention as PyTorch custom ops: `attention_op(q, k, v, ...)`, the path training takes.

`kernels.attention.attention` is an `autograd.Function`; `torch.compile` cannot trace into its Triton launches, so a
model that calls it trains eagerly or breaks its graph. Here the same launches (`attention_fwd`, `attention_bwd`)
are two `torch.library` custom ops with fake-tensor (shape) and autograd registrations, so `torch.compile(model)`
compiles everything around them into one graph and treats the kernels as opaque calls:

    book::flash_attn_fwd(q, k, v, ...) -> (o, lse, o_delta)
    book::flash_attn_bwd(do, q, k, v, o_for_delta, lse, ...) -> (dq, dk, dv)

Arguments are tensors and plain scalars (the numerics travel as their canonical JSON string, see `numerics_key`).
For every `delta_source` except "fp32_o" the outputs are bit-identical to `kernels.attention.attention` on the same
inputs: the same kernels with the same arguments (tests/test_attention_op.py).

**δ from an FP32 O (delta_source="fp32_o")** — corrected here. The backward differentiates the probabilities it
recomputes, P = exp(S − LSE) with S as the forward formed it (rounded to BF16 when the numerics round S, as the
paper placement does). δ must be rowsum(dO ∘ O′) for the O′ these P imply, O′ = Σⱼ Pⱼ Vⱼ; then each row of
dS = P∘(dP − δ) sums to zero, the softmax's shift invariance. `kernels.attention.attention` computes its "FP32 O"
from *unrounded* scores, a different softmax: at scores of 10² the BF16 grid of S is 0.5 wide and O′ can differ
from the P the backward uses by O(1), so the rows of dS no longer sum to zero and dQ, dK gain a systematic term
(Σⱼ dKⱼ ≠ 0). Here O′ is the forward recomputed with the scores rounded exactly as the forward rounded them (same
rounding point, same stochastic-rounding seed) and every later rounding off: the O of the backward's own P, in
FP32. In exact arithmetic δ = dO·O′ then equals rowsum(dP∘P) ("dp_p") up to the factor ℓ/ℓ_lp between the FP32
and the placement's row sum, which the shift-invariance argument absorbs. The old path keeps its definition for the
results computed with it. On the native path O′ is computed natively (its P̄ an FP32 operand,
`kernels.flash_fwd.wide_dot`, and its FP32 O taken before the last rounding); it differs from the emulated O′ only in
the order of FP32 sums and, where that order moves an unrounded score across a rounding boundary of S, in that
score's rounding.

**O kept in FP32 (round_o=False with delta_source="saved_o")** — `Numerics.round_o` says whether O "as returned
and saved for backward" is rounded. On the native path the forward stores O in BF16 whatever that flag says, so δ
would read a rounded O; here the forward also writes the FP32 O it normalised (the kernel's `STORE_O32`, the value
before its final rounding, which round_o=False leaves unrounded) and δ reads that. The O returned to the model is
that FP32 O rounded once to BF16 (RNE), as the model's next matmul under BF16 autocast would round an FP32 O. On the
emulated path the FP32 storage O already was that value, so nothing changes there (tests/test_attention_op.py
checks it bit for bit against the emulator); with round_o=True nothing changes on either path.

Stochastic rounding draws a fresh seed per call from torch's CPU generator (as `kernels.attention` does), outside
the op, so under `torch.compile` an SR spec breaks the graph once per call; RNE specs (every training arm so far)
compile into one graph.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math

import torch

from kernels.attention import (_FIXES, _blocks, _check_inputs, attention_bwd, attention_fwd, bwd_kernel_key,
                               fwd_kernel_key, resolve_path)
from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL
from lib.fp.numerics import FP32, Numerics, get_profile, tiles_per_round_block

__all__ = ["attention_op", "numerics_key", "fp32_o_numerics"]


def numerics_key(nm: Numerics) -> str:
    """The canonical string of a `Numerics` value (sorted JSON of its fields): what the ops take as an argument."""
    return json.dumps(nm.as_dict(), sort_keys=True)


@functools.lru_cache(maxsize=None)
def _numerics(key: str) -> Numerics:
    return Numerics(**json.loads(key))


_FIELDS = tuple(f.name for f in dataclasses.fields(Numerics))


def fp32_o_numerics(nm: Numerics) -> Numerics:
    """The numerics of O′ for delta_source="fp32_o": the scores rounded as `nm` rounds them (its format and rounding
    mode), every later rounding point off (module docstring)."""
    return FP32.replace(round_s=nm.round_s, mantissa_bits=nm.mantissa_bits, rounding=nm.rounding,
                        round_block=nm.round_block)


def _fix(fix: str):
    return fix or None


def _o32_for_delta(nm: Numerics) -> bool:
    """Whether δ reads the FP32 O the forward normalised (the kernel's O32 output): "saved_o" with round_o=False,
    O kept in FP32 (module docstring)."""
    return nm.delta_source == "saved_o" and not nm.round_o


def _keeps_o_delta(nm: Numerics, path: str, dtype) -> bool:
    """Whether the forward returns a separate O for δ: O′ for "fp32_o"; the FP32 O for O kept in FP32
    (`_o32_for_delta`); for "saved_o" the kernel's FP32 storage O when the emulated path ran on BF16 inputs (δ reads
    that O, as in `kernels.attention`, not its BF16 copy)."""
    return nm.delta_source == "fp32_o" or _o32_for_delta(nm) or (nm.delta_source == "saved_o" and path == "emulated"
                                                                 and dtype != torch.float32)


@torch.library.custom_op("book::flash_attn_fwd", mutates_args=())
def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, numerics: str, fix: str,
         beta: float, tie_tol: float, max_shift: float, path: str, seed: int
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(o in q's dtype, lse FP32 (B, H, N), o_delta: the FP32 O that δ reads where it is not o (`_keeps_o_delta`),
    else an empty tensor)."""
    nm = _numerics(numerics)
    shift = None if max_shift <= 0 else max_shift
    in_dtype = q.dtype
    if path == "emulated":
        q, k, v = (t.float().contiguous() for t in (q, k, v))   # BF16 -> FP32 is exact
    else:
        q, k, v = (t.contiguous() for t in (q, k, v))
    o, lse, o32 = attention_fwd(q, k, v, causal=causal, scale=scale, nm=nm, fix=_fix(fix), beta=beta,
                                tie_tol=tie_tol, max_shift=shift, path=path, seed=seed, store_o32=_o32_for_delta(nm))
    if _o32_for_delta(nm):
        o_delta = o32
    elif nm.delta_source == "fp32_o" and path == "native":
        # O′ on the native path: its P̄ is an FP32 operand (`wide_dot`), and δ reads the FP32 O before the kernel's
        # last rounding. The emulated O′ (below) cost a GPT-2 arm 2.3× the steps' time; the two differ only in the
        # order of FP32 sums (tests/gpu/test_attention_op_gpu.py).
        _, _, o_delta = attention_fwd(q, k, v, causal=causal, scale=scale, nm=fp32_o_numerics(nm), fix=_fix(fix),
                                      beta=beta, tie_tol=tie_tol, max_shift=shift, path="native", seed=seed,
                                      store_o32=True)
    elif nm.delta_source == "fp32_o":
        o_delta, _, _ = attention_fwd(q.float(), k.float(), v.float(), causal=causal, scale=scale,
                                      nm=fp32_o_numerics(nm), fix=_fix(fix), beta=beta, tie_tol=tie_tol,
                                      max_shift=shift, path="emulated", seed=seed)
    elif _keeps_o_delta(nm, path, in_dtype):
        o_delta = o
        o = o.to(in_dtype)
    else:
        o_delta = lse.new_empty(0)
    return o.to(in_dtype), lse, o_delta


@_fwd.register_fake
def _fwd_fake(q, k, v, causal, scale, numerics, fix, beta, tie_tol, max_shift, path, seed):
    B, H, N, D = q.shape
    keep = _keeps_o_delta(_numerics(numerics), path, q.dtype)
    o_delta = q.new_empty(q.shape if keep else (0,), dtype=torch.float32)
    return q.new_empty(q.shape), q.new_empty((B, H, N), dtype=torch.float32), o_delta


@torch.library.custom_op("book::flash_attn_bwd", mutates_args=())
def _bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o_for_delta: torch.Tensor,
         lse: torch.Tensor, causal: bool, scale: float, numerics: str, path: str, seed: int
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in q's dtype."""
    nm = _numerics(numerics)
    in_dtype = q.dtype
    if path == "emulated":
        do, q, k, v, o_for_delta = (t.float().contiguous() for t in (do, q, k, v, o_for_delta))
    else:
        do, q, k, v, o_for_delta = (t.contiguous() for t in (do.to(torch.bfloat16), q, k, v, o_for_delta))
    dq, dk, dv, _ = attention_bwd(do, q, k, v, o_for_delta, lse.contiguous(), causal=causal, scale=scale, nm=nm,
                                  path=path, seed=seed)
    return dq.to(in_dtype), dk.to(in_dtype), dv.to(in_dtype)


@_bwd.register_fake
def _bwd_fake(do, q, k, v, o_for_delta, lse, causal, scale, numerics, path, seed):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)   # contiguous, as the kernels write


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, numerics, fix, beta, tie_tol, max_shift, path, seed = inputs
    o, lse, o_delta = output
    # δ's O: o_delta where the forward kept one, else the returned O ("dp_p" reads none: o is a placeholder).
    keep = _keeps_o_delta(_numerics(numerics), path, q.dtype)
    ctx.save_for_backward(q, k, v, o_delta if keep else o, lse)
    ctx.cfg = (causal, scale, numerics, path, seed)


def _backward(ctx, do, _dlse, _do_delta):
    q, k, v, o_for_delta, lse = ctx.saved_tensors
    causal, scale, numerics, path, seed = ctx.cfg
    dq, dk, dv = _bwd(do, q, k, v, o_for_delta, lse, causal, scale, numerics, path, seed)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


_fwd.register_autograd(_backward, setup_context=_setup_context)


@torch.compiler.assume_constant_result
def _settings(numerics, fix, beta, tie_tol, max_shift, scale, path, shape, dtype, device) -> tuple:
    """The ops' scalar arguments from `attention_op`'s, checked: (numerics key, fix, β, tie tolerance, max shift
    (-1.0: none), scale, path, SR or not). A constant for `torch.compile`: evaluated once when the graph is traced
    (it reads no tensor data), so the checks and the JSON of the numerics stay out of the graph. The checks repeat
    `kernels.attention.attention`'s: that function is left as it is for the results computed through it."""
    nm = Numerics(**dict(zip(_FIELDS, numerics))) if isinstance(numerics, tuple) else get_profile(numerics)
    if fix not in _FIXES:
        raise ValueError(f"fix must be one of {_FIXES}, got {fix!r}")
    for name, x, ok, what in (("beta", beta, lambda b: b > 1, "> 1"), ("tie_tol", tie_tol, lambda t: t >= 0, ">= 0"),
                              ("max_shift", 1.0 if max_shift is None else max_shift, lambda m: m > 0, "> 0 or None"),
                              ("scale", 1.0 if scale is None else scale, lambda c: c > 0, "> 0")):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not ok(x):
            raise ValueError(f"{name} must be a finite number {what}, got {x!r}")
    scale = 1.0 / math.sqrt(shape[-1]) if scale is None else float(scale)
    path = resolve_path(path, nm, dtype, torch.device(device))
    if nm.round_block > 0:     # a logical block must be whole tiles, in the forward and in the backward's loops
        for kernel in (fwd_kernel_key(nm), bwd_kernel_key(nm)):
            cfg = _blocks(path, shape[-1], kernel, None)
            for width in ((cfg["BLOCK_N"],) if kernel.startswith("fwd") else (cfg["BLOCK_M"], cfg["BLOCK_N"])):
                tiles_per_round_block(nm.round_block, width, shape[2])
    return (numerics_key(nm), fix or "", float(beta), float(tie_tol), -1.0 if max_shift is None else float(max_shift),
            scale, path, nm.rounding == "sr")


def attention_op(q, k, v, *, causal=True, scale=None, numerics="fa2", fix=None, beta=BETA, tie_tol=TIE_TOL,
                 max_shift=MAX_SHIFT, path=None):
    """`kernels.attention.attention`'s call (same arguments, checks and defaults; no `block` override) through the
    custom ops, so it compiles with the model; δ from an FP32 O as the module docstring defines it. Returns O,
    shape and dtype of q."""
    _check_inputs(q, k, v)
    # A Numerics value enters the constant function as the tuple of its fields: torch.compile (2.11) can read a
    # frozen dataclass's attributes while tracing but cannot pass the instance itself as a constant.
    if isinstance(numerics, Numerics):
        numerics = tuple(getattr(numerics, f) for f in _FIELDS)
    *args, sr = _settings(numerics, fix, beta, tie_tol, max_shift, scale, path, tuple(q.shape), q.dtype,
                          str(q.device))
    key, fix_, beta_, tie_, shift, scale_, path_ = args
    # SR: fresh bits every call, from torch's CPU generator (kernels.attention says why); RNE never draws.
    seed = int(torch.randint(0, 2 ** 30, (1,)).item()) if sr else 0
    o, _, _ = _fwd(q, k, v, bool(causal), scale_, key, fix_, beta_, tie_, shift, path_, seed)
    return o
