"""GPU checks of kernels/stable_attention.py (marked `gpu`; skipped without CUDA).

* FlashAttention's rule (Dao-AILab tests/test_flash_attn.py): the fast path's max error against FP64 is at most 2× that
  of PyTorch's BF16 attention `softmax(q·kᵀ·scale)·v` on the same inputs, for O, dQ, dK, dV; with and without the fix,
  causal and not, ragged T, head dim 64 and 128; FP16 once.
* Bit for bit where the arithmetic is the same: FP32 inputs run the EMULATE mode (FP32 `ieee` matmuls, natural exp,
  64-wide tiles, 4 warps), which must equal the research kernel's emulated path (`kernels.attention`, numerics
  "fa2", block (64, 64)) for O and all three gradients, with and without the fix. The fast path differs from the
  research kernel's native path in its exponent (exp2 of one FMA, FA2's form, vs exp(S − m)) and tiles, so there
  the two are held to FlashAttention's rule against each other: their difference at most 2× PyTorch BF16's error.
* The planted ties (below) against FP64 under the same rule, for the fast path and for both kernels' emulated paths.
* The fix on planted tied rows (even rows: four keys tied at the max inside one 64-key tile, the rest 14 below and
  tied among themselves; odd rows: no ties): in both kernels it changes the planted rows and no other, and the two
  fixed outputs agree as above.
"""
import math

import pytest
import torch

import lib.book.setup  # noqa: F401
from kernels import stable_attention
from kernels.attention import attention
from kernels.stable_attention import fwd_block_n
from tests.gpu.test_attention_gpu import _grads, _ref

pytestmark = pytest.mark.gpu


def _randn(shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(shape, device="cuda", dtype=dtype, generator=g) for _ in range(4)]


def _max_err(a, ref):
    return (a.double() - ref.double()).abs().max().item()


def _assert_fa_rule(fn, q, k, v, do, causal, scale, dtype, label=""):
    """O, dQ, dK, dV of `fn` (inputs converted to `dtype` by the caller) against FP64: error ≤ 2× PyTorch's in
    `dtype` (the reference's precision for FP32 inputs holding BF16 values: BF16)."""
    ref = _grads(lambda a, b, c: _ref(a, b, c, causal, scale, torch.float64), q, k, v, do.double())
    pt = _grads(lambda a, b, c: _ref(a, b, c, causal, scale, dtype), q, k, v, do.to(dtype))
    ours = _grads(fn, q, k, v, do)
    for name, r, p, o in zip(("O", "dQ", "dK", "dV"), ref, pt, ours):
        assert torch.isfinite(o).all(), name
        err, err_pt = _max_err(o, r), _max_err(p, r)
        assert err <= 2 * err_pt + 1e-5, f"{label}{name}: {err:.3e} > 2 x PyTorch {err_pt:.3e}"


@pytest.mark.parametrize("shape,causal,fix,dtype", [
    ((2, 3, 1000, 64), True, "beta", torch.bfloat16), ((2, 3, 1000, 64), False, None, torch.bfloat16),
    ((1, 2, 257, 128), True, None, torch.bfloat16), ((1, 2, 257, 128), False, "beta", torch.bfloat16),
    ((2, 4, 1024, 64), True, None, torch.float16)])
def test_error_at_most_twice_pytorch(shape, causal, fix, dtype):
    q, k, v, do = _randn(shape, dtype)
    out = stable_attention(q, k, v, is_causal=causal, fix=fix)
    assert out.dtype == dtype
    _assert_fa_rule(lambda a, b, c: stable_attention(a, b, c, is_causal=causal, fix=fix), q, k, v, do, causal,
                    1.0 / math.sqrt(shape[-1]), dtype)


def _ties(T=256, D=64, B=1, H=2, seed=0):
    """Planted ties, exact in BF16 and FP32 (scale 1/8). Key j: 16 in dim j // 4 (mod D−1), −12 in the other dims but
    the last, j/16 in the last. Even rows r: q = 4·e_d (d = r mod D−1), so they score 8 on keys 4d … 4d+3 (inside one
    64-key tile) and −6 on all others: tied maxima (and, in tiles without the group, tied negative maxima). Odd rows
    add 1 in the last dim: + j/128, every score distinct, no ties. V one-signed (BF16 values in [1, 2)), as in the
    paper's failure case; dO random. Returns FP32 (B, H, T, D) q, k, v, dO holding BF16 values."""
    j = torch.arange(T, device="cuda")
    k = torch.full((T, D), -12.0, device="cuda")
    k[j, (j // 4) % (D - 1)] = 16.0
    k[:, D - 1] = j / 16.0
    q = 4.0 * torch.nn.functional.one_hot(j % (D - 1), D).float()
    q[:, D - 1] = (j % 2).float()
    g = torch.Generator(device="cuda").manual_seed(seed)
    v = 1.0 + torch.rand((B, H, T, D), device="cuda", generator=g)
    do = torch.randn((B, H, T, D), device="cuda", generator=g)
    q, k = (x.expand(B, H, T, D) for x in (q, k))
    return [x.bfloat16().float().contiguous() for x in (q, k, v, do)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("fix", [None, "beta"])
@pytest.mark.parametrize("impl", ["stable_fast", "stable_emulated", "research_emulated"])
def test_planted_ties_within_fa_rule(impl, fix, causal):
    """The planted ties against FP64, gradients included: the fast path (BF16) and, with FP32 inputs, the EMULATE mode
    and the research kernel's emulated path: where those two differ (the bitwise test below), this says which one is
    wrong."""
    q, k, v, do = _ties()
    kw = dict(fix=fix, beta=2.0)
    if impl == "stable_fast":
        q, k, v, do = (x.bfloat16() for x in (q, k, v, do))
        fn = lambda a, b, c: stable_attention(a, b, c, is_causal=causal, scale=0.125, **kw)  # noqa: E731
    elif impl == "stable_emulated":
        fn = lambda a, b, c: stable_attention(a, b, c, is_causal=causal, scale=0.125, **kw)  # noqa: E731
    else:
        fn = lambda a, b, c: attention(a, b, c, causal=causal, scale=0.125, numerics="fa2",  # noqa: E731
                                       path="emulated", block=(64, 64), **kw)
    _assert_fa_rule(fn, q, k, v, do, causal, 0.125, torch.bfloat16, f"{impl}: ")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("fix", [None, "beta"])
@pytest.mark.parametrize("inputs", ["random", "ties"])
def test_emulate_equals_research_emulated_bitwise(inputs, causal, fix):
    if inputs == "ties":
        q, k, v, do = _ties()
    else:
        q, k, v, do = (x.bfloat16().float() for x in _randn((1, 3, 200, 64), torch.float32, seed=1))
    kw = dict(fix=fix, beta=2.0, max_shift=64.0)
    ours = _grads(lambda a, b, c: stable_attention(a, b, c, is_causal=causal, scale=0.125, **kw), q, k, v, do)
    theirs = _grads(lambda a, b, c: attention(a, b, c, causal=causal, scale=0.125, numerics="fa2", path="emulated",
                                              block=(64, 64), **kw), q, k, v, do)
    for name, a, b in zip(("O", "dQ", "dK", "dV"), ours, theirs):
        assert torch.equal(a, b), f"{name}: {(a != b).sum().item()} of {a.numel()} differ"


@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_agrees_with_research_native(causal):
    q, k, v, do = _randn((2, 4, 1000, 64), seed=2)
    ref = _grads(lambda a, b, c: _ref(a, b, c, causal, 0.125, torch.float64), q, k, v, do.double())
    pt = _grads(lambda a, b, c: _ref(a, b, c, causal, 0.125, torch.bfloat16), q, k, v, do)
    ours = _grads(lambda a, b, c: stable_attention(a, b, c, is_causal=causal), q, k, v, do)
    theirs = _grads(lambda a, b, c: attention(a, b, c, causal=causal, numerics="fa2", path="native"), q, k, v, do)
    for name, r, p, a, b in zip(("O", "dQ", "dK", "dV"), ref, pt, ours, theirs):
        assert _max_err(a, b) <= 2 * _max_err(p, r) + 1e-5, name


@pytest.mark.parametrize("causal", [True, False])
def test_fix_on_planted_ties_matches_research(causal):
    """Both kernels' fix (β = 2) changes the planted (even) rows, almost all of them, and never a row without ties;
    the fixed outputs agree within FlashAttention's rule (their difference at most 2× PyTorch BF16's error against
    FP64). Bit-for-bit equality of the fix on these inputs is the EMULATE test above."""
    q, k, v, _ = (x.bfloat16() for x in _ties())
    ours = {f: stable_attention(q, k, v, is_causal=causal, fix=f, beta=2.0) for f in (None, "beta")}
    theirs = {f: attention(q, k, v, causal=causal, numerics="fa2", path="native", fix=f, beta=2.0)
              for f in (None, "beta")}
    assert fwd_block_n(q.shape, causal, "beta") in (64, 128)      # the planted groups sit inside one tile either way
    planted = (torch.arange(q.shape[2], device="cuda") % 2 == 0).expand(q.shape[:3])
    for out in (ours, theirs):
        changed = (out[None] != out["beta"]).any(-1)
        assert not (changed & ~planted).any()
        assert changed[planted].float().mean().item() > 0.9
    ref = _ref(q, k, v, causal, 0.125, torch.float64)
    err_pt = _max_err(_ref(q, k, v, causal, 0.125, torch.bfloat16), ref)
    assert _max_err(ours["beta"], theirs["beta"]) <= 2 * err_pt + 1e-5
