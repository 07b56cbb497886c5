"""Logical rounding blocks (`Numerics.round_block`): the kernels in the CPU interpreter bit-exact against the oracle
(RNE and stochastic rounding) for blocks of 2 and 4 tiles and whole rows, the GPU's runtime-bound loop structure run in the interpreter, a planted
tie bias with a known sign, mutants that the bit-exact check must catch, validation, and the tie-bias measurement
of `lib.fp.round_block_bias` at CI scale. Small shapes: the interpreter costs ~0.1 ms per tl op."""
import math
import sys

import numpy as np
import pytest
import torch

import lib.book.setup  # noqa: F401  (interpreter before kernels)
from kernels import attention
from kernels.attention import attention_bwd, attention_fwd
from lib.fp.numerics import DESCRIPTIONS, FP32, Numerics, get_profile, rounding_point_table, tiles_per_round_block
from lib.fp.reference import attention_fp64, emulate_backward, emulate_forward

PAPER = get_profile("paper")
FA2 = get_profile("fa2")
_attn_mod = sys.modules["kernels.attention"]


def _inputs(seed, N, D, stride=16, big=1.0):
    """BF16-valued FP32 q, k, v, dO (1, 2, N, D). Every third key is copied `stride` keys further on, so many rows
    hold their maximum twice, `stride` keys apart: in two compute tiles of width `stride` that share a logical block,
    or straddle a block boundary. A shared key component makes the copies dominate; half the rows get a large
    negative max (the fix's other branch). `big` scales q (large maxima: the fix's shift cap)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn((1, 2, N, D), generator=g).bfloat16().float() for _ in range(4))
    src = torch.arange(0, N - stride, 3)
    k[:, :, src + stride] = k[:, :, src]
    k[..., 0] = 3.0
    q = q * 2 * big
    q[:, :, ::2, 0] = -8.0 * big
    return q, k, v, do


SEED = 1234      # the kernels' stochastic-rounding seed, replayed by the oracle


def _kernel(q, k, v, do, nm, causal, fix, block, **fx):
    kw = dict(causal=causal, scale=1.0 / math.sqrt(q.shape[-1]), path="emulated", block=block, seed=SEED)
    fx = dict(dict(beta=7.0, tie_tol=0.0, max_shift=64.0), **fx)
    o, lse, _ = attention_fwd(q, k, v, nm=nm, fix=fix, **fx, **kw)
    o_delta = o
    if nm.delta_source == "fp32_o":
        o_delta = attention_fwd(q, k, v, nm=FP32.replace(round_block=nm.round_block), fix=fix, **fx, **kw)[0]
    dq, dk, dv, delta = attention_bwd(do, q, k, v, o_delta, lse, nm=nm, **kw)
    return {"o": o.numpy(), "lse": lse.numpy(), "delta": delta.numpy(), "dq": dq.numpy(), "dk": dk.numpy(),
            "dv": dv.numpy()}


def _oracle(q, k, v, do, nm, causal, fix, block, **fx):
    kw = dict(causal=causal, block_m=block[0], block_n=block[1], fix=fix, seed=SEED, **fx)
    f = emulate_forward(q, k, v, nm, **kw)
    b = emulate_backward(q, k, v, f.o, f.lse, do, nm, **kw)
    return {"o": f.o, "lse": f.lse, **b}


def _assert_bitwise(ours, ref, names=("o", "lse", "delta", "dq", "dk", "dv")):
    for name in names:
        a = np.asarray(ours[name], np.float32)
        b = np.asarray(ref[name], dtype=np.float32).reshape(a.shape)
        same = a.view(np.uint32) == b.view(np.uint32)
        assert same.all(), f"{name}: {int((~same).sum())} of {same.size} values differ, max |diff| " \
                           f"{np.nanmax(np.abs(a - b)):.3e}"


# (numerics, fix, fix kwargs, round_block, N, D, causal, block, seed): every round_block kind (2 and 4 tiles, the
# row, 0 on these inputs), both maskings, head dims 16/32/64/48, N not a multiple of the block, 7, 5 and 3 mantissa
# bits, RNE and stochastic rounding, both fixes, tie_tol 0 and 1e-3, max_shift 64 and None, the δ sources,
# non-square tiles.
CASES = {
    "paper-2tiles-causal": (PAPER, None, {}, 32, 70, 16, True, (16, 16), 1),
    "paper-beta-4tiles": (PAPER, "beta", {}, 128, 90, 32, False, (32, 32), 2),
    "paper-split-row-d64": (PAPER, "beta_split", {}, -1, 70, 64, True, (32, 32), 3),
    "paper-beta-tol-d48": (PAPER, "beta", dict(tie_tol=1e-3), 64, 100, 48, True, (32, 32), 4),
    "paper-m5-rule-row": (PAPER.replace(mantissa_bits=5), "beta", dict(max_shift=None, big=4.0), -1, 45, 16, False,
                          (16, 16), 5),
    "fa2-beta-4tiles": (FA2, "beta", {}, 64, 70, 16, True, (16, 16), 6),
    "paper-split-0": (PAPER, "beta_split", {}, 0, 70, 32, True, (32, 32), 7),
    "paper-fp32o-2tiles": (PAPER.replace(delta_source="fp32_o"), "beta", {}, 32, 50, 16, True, (16, 16), 8),
    "paper-dpp-m5-row": (PAPER.replace(delta_source="dp_p", mantissa_bits=5), "beta", dict(tie_tol=1e-3), -1, 50,
                         16, False, (32, 32), 9),
    "paper-rect-tiles": (PAPER, "beta", {}, 64, 77, 16, True, (16, 32), 10),
    "paper-sr-m3-2tiles": (PAPER.replace(rounding="sr", mantissa_bits=3), "beta", {}, 32, 40, 16, True, (16, 16), 14),
    "fa2-sr-split-row": (FA2.replace(rounding="sr"), "beta_split", {}, -1, 40, 16, False, (16, 16), 15),
}


def _case(name):
    nm, fix, fx, rb, N, D, causal, block, seed = CASES[name]
    fx = dict(fx)
    q, k, v, do = _inputs(seed, N, D, stride=block[1], big=fx.pop("big", 1.0))
    return q, k, v, do, nm.replace(round_block=rb), causal, fix, block, fx


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_against_oracle(name):
    q, k, v, do, nm, causal, fix, block, fx = _case(name)
    ref = _oracle(q, k, v, do, nm, causal, fix, block, **fx)
    _assert_bitwise(_kernel(q, k, v, do, nm, causal, fix, block, **fx), ref)
    if nm.round_block != 0 and nm.round_l:
        # the case exercises the blocks: the oracle at round_block = 0 gives another O on these inputs
        tiled = _oracle(q, k, v, do, nm.replace(round_block=0), causal, fix, block, **fx)
        assert not np.array_equal(tiled["o"], ref["o"])


@pytest.fixture
def runtime_loops(monkeypatch):
    """Run the kernels with the compiled path's loop structure (runtime loop bounds, a mask-free first loop, blocks
    of rb_keys keys) in the interpreter: `_interpreting()` reads False for the launcher (STATIC_LOOPS=False,
    N_TILES=1), and tensor scalars convert to Python ints for `range` (numpy 2 refuses 1-element arrays)."""
    import triton.runtime.interpreter as interp
    orig = interp._patch_lang_tensor

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    monkeypatch.setattr(interp, "_patch_lang_tensor", patched)
    monkeypatch.setattr(_attn_mod, "_interpreting", lambda: False)


@pytest.mark.parametrize("name", ["paper-2tiles-causal", "paper-split-row-d64", "paper-rect-tiles", "paper-split-0"])
def test_runtime_loops_bit_exact(runtime_loops, name):
    """The GPU's loop code (what the native path compiles, apart from BF16 operands) is bit-exact as well."""
    q, k, v, do, nm, causal, fix, block, fx = _case(name)
    _assert_bitwise(_kernel(q, k, v, do, nm, causal, fix, block, **fx),
                    _oracle(q, k, v, do, nm, causal, fix, block, **fx))


@pytest.fixture(scope="module")
def mutant_base():
    """One kernel run (paper, fix "beta", blocks of two 16-key tiles, causal) for the mutant checks."""
    q, k, v, do = _inputs(11, 64, 16)
    nm = PAPER.replace(round_block=32)
    return (q, k, v, do), nm, _kernel(q, k, v, do, nm, True, "beta", (16, 16))


@pytest.mark.parametrize("mutant", ["per_tile", "whole_row", "round_pv", "round_l", "round_acc", "tie_per_tile",
                                    "bwd_per_tile"])
def test_bit_exact_check_catches_a_mutant(mutant_base, mutant):
    """Each check can fail: the oracle with one rounding point or one block rule changed must not match the kernel
    (the unmutated oracle does: test_bit_exact_against_oracle)."""
    (q, k, v, do), nm, ours = mutant_base
    block = (16, 16)
    ref = _oracle(q, k, v, do, nm, True, "beta", block)
    _assert_bitwise(ours, ref)
    names = ("o", "lse")
    if mutant == "per_tile":
        ref = _oracle(q, k, v, do, nm.replace(round_block=0), True, "beta", block)
    elif mutant == "whole_row":
        ref = _oracle(q, k, v, do, nm.replace(round_block=-1), True, "beta", block)
    elif mutant in ("round_pv", "round_l", "round_acc"):
        ref = _oracle(q, k, v, do, nm.replace(**{mutant: False}), True, "beta", block)
    elif mutant == "tie_per_tile":
        # the tie test per 16-key tile while everything else is per block: the fix's m differs on split ties
        f = emulate_forward(q, k, v, nm, causal=True, block_m=16, block_n=16, fix="beta")
        g = emulate_forward(q, k, v, nm, causal=True, block_m=16, block_n=16, fix=None)
        assert not np.array_equal(f.m, g.m)            # the block test fires on these inputs
        ref = {"o": g.o, "lse": g.lse}
    else:
        # the backward's lp accumulators per tile while the forward uses blocks
        f = emulate_forward(q, k, v, nm, causal=True, block_m=16, block_n=16, fix="beta")
        ref = emulate_backward(q, k, v, f.o, f.lse, do, nm.replace(round_block=0), causal=True, block_m=16,
                               block_n=16)
        names = ("dq", "dk", "dv")
    with pytest.raises(AssertionError):
        _assert_bitwise(ours, ref, names)


def test_one_tile_blocks_equal_round_block_0_under_sr():
    """round_block = the tile width runs the two-pass block code with one tile per block; it must draw the same SR
    bits as the per-tile code (a tile's own points keep its stream, the block's points use its first tile's id)
    and so give the same O and gradients bit for bit, through the autograd entry point (the seed drawn per call)."""
    q, k, v, do = _inputs(12, 32, 16)
    sr = PAPER.replace(rounding="sr", mantissa_bits=3)
    outs = []
    for rb in (0, 16):
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        torch.manual_seed(3)
        o = attention(qg, kg, vg, numerics=sr.replace(round_block=rb), fix="beta", block=(16, 16))
        o.backward(do)
        outs.append([o.detach(), qg.grad, kg.grad, vg.grad])
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    # two-tile blocks round elsewhere, and stay within a few 3-bit ulps of fp64 (without the fix, whose own S − m
    # rounding at 3 bits is coarse: lib/fp/fix_error.py)
    o1, o2 = (attention(q, k, v, numerics=sr.replace(round_block=rb), block=(16, 16)) for rb in (0, 32))
    assert not torch.equal(o1, o2)
    ref = torch.as_tensor(np.asarray(attention_fp64(q, k, v, causal=True)["o"]))
    assert (o2.double() - ref).abs().max().item() <= 4 * 2 ** -3 * ref.abs().max().item()


def _planted(seed, N=128, heads=2, gap=14.0):
    """Scores (heads, N, N) on the BF16 grid: each row's max s_max ~ U(1, 4) at one key in [0, 64) and one in
    [64, 128), the others s_max − gap − U(0, 4); V uniform in −[1, 2) on the BF16 grid."""
    from lib.fp.bf16 import round_rne
    rng = np.random.default_rng(seed)
    smax = round_rne(rng.uniform(1, 4, (heads, N, 1)).astype(np.float32))
    s = round_rne((smax - gap - rng.uniform(0, 4, (heads, N, N))).astype(np.float32))
    for lo in (0, 64):
        np.put_along_axis(s, rng.integers(lo, lo + 64, (heads, N, 1)), smax, -1)
    v = -(1 + rng.integers(0, 128, (heads, N, N)) / 128).astype(np.float32)
    return s, v


def test_planted_tie_bias_needs_a_block_that_holds_both_maxima():
    """Two tied maxima per row, in different 64-key tiles of one 128-key block, V negative: with round_block = 128
    the paper placement sums both P̄ = 1 terms before one BF16 rounding, the tie bias (O error ≈ −1/4 ULP); with
    64-key tiles (round_block = 0) each max is rounded alone and the mean error is ~0. The per-block fix sees the
    tie and removes the bias; the per-tile fix does not fire at all. Kernel in the interpreter (q = S, k = I)."""
    from lib.fp.bf16 import ulp
    s, v = _planted(0)
    eye = np.broadcast_to(np.eye(128, dtype=np.float32), s.shape).copy()
    q, k, vt = (torch.from_numpy(x[None].copy()) for x in (s, eye, v))
    exact = attention_fp64(s, eye, v, causal=False, scale=1.0)["o"]

    def err(rb, fix):
        o = attention(q, k, vt, causal=False, scale=1.0, numerics=PAPER.replace(round_block=rb), fix=fix,
                      block=(64, 64))[0].numpy()
        return o, (o - exact) / ulp(exact, 7)

    o_tile, e_tile = err(0, None)
    o_blk, e_blk = err(128, None)
    o_tile_fix, _ = err(0, "beta")
    _, e_blk_fix = err(128, "beta")
    se = e_blk.std() / math.sqrt(e_blk.size / 128)           # rows share nothing but V: conservative
    assert e_blk.mean() < -0.2 and e_blk.mean() + 10 * se < 0
    assert abs(e_blk.mean()) > abs(e_tile.mean()) + 0.15
    assert abs(e_tile.mean()) < 0.05 and abs(e_blk_fix.mean()) < 0.05
    assert np.array_equal(o_tile, o_tile_fix)                 # the per-tile test never sees the split tie


def test_fa2_backward_ignores_round_block():
    """Without lp gradient accumulators (fa2) the backward has no tiling-dependent rounding: given the same forward
    outputs, round_block leaves dQ, dK, dV unchanged bit for bit (in the kernel and in the oracle)."""
    q, k, v, do = _inputs(13, 40, 16)
    kw = dict(causal=True, scale=0.25, path="emulated", block=(16, 16))
    o, lse, _ = attention_fwd(q, k, v, nm=FA2, fix=None, beta=7.0, tie_tol=0.0, **kw)
    a = attention_bwd(do, q, k, v, o, lse, nm=FA2, **kw)
    b = attention_bwd(do, q, k, v, o, lse, nm=FA2.replace(round_block=-1), **kw)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    p = attention_bwd(do, q, k, v, o, lse, nm=PAPER, **kw)
    r = attention_bwd(do, q, k, v, o, lse, nm=PAPER.replace(round_block=-1), **kw)
    assert not torch.equal(p[0], r[0]) and not torch.equal(p[1], r[1])   # lp accumulators do see the blocks


# ------------------------------------------------------------------------------------------ validation and specs
@pytest.mark.parametrize("bad", [-2, 8, 24, 1, True, 512.0, "512"])
def test_numerics_rejects_bad_round_block(bad):
    with pytest.raises(ValueError):
        Numerics(round_block=bad)


def test_round_block_field_spec_and_table():
    from lib.training.spec import AttnSpec
    assert Numerics().round_block == 0 and PAPER.round_block == 0 and FA2.round_block == 0
    assert Numerics(round_block=-1).round_block == -1 and Numerics(round_block=512).round_block == 512
    s = AttnSpec.parse("paper/round_block=512")
    assert s.numerics == PAPER.replace(round_block=512) and s.fix.kind is None
    s = AttnSpec.parse("paper/round_block=-1+fix")
    assert s.numerics.round_block == -1 and s.fix.kind == "beta"
    with pytest.raises(ValueError):
        AttnSpec.parse("paper/round_block=100")
    assert "round_block" in DESCRIPTIONS
    assert [r for r in rounding_point_table() if r[0] == "round_block"][0][2:] == (0, 0, 0)
    assert tiles_per_round_block(0, 64, 1000) == 1 and tiles_per_round_block(-1, 64, 1000) == 16
    assert tiles_per_round_block(512, 64, 100) == 8
    with pytest.raises(ValueError):
        tiles_per_round_block(96, 64, 1000)


def test_round_block_not_a_multiple_of_the_tile_is_refused():
    q, k, v, _ = _inputs(0, 32, 16)
    nm = PAPER.replace(round_block=48)
    with pytest.raises(ValueError):
        attention(q, k, v, numerics=nm, block=(32, 32))
    with pytest.raises(ValueError):
        attention(q, k, v, numerics=nm)                    # the emulated path's 64-key tiles
    with pytest.raises(ValueError):
        emulate_forward(q, k, v, nm, block_m=32, block_n=32)
    attention(q, k, v, numerics=nm, block=(16, 16))          # 48 = three 16-key tiles: fine


# ------------------------------------------------------------------------------- the tie bias vs the rounding block
def test_o_error_by_round_block_follows_the_same_block_probability():
    """CI scale (3 problems, 256 keys): untiled ≈ −1/4 ULP (the two-tie theory), blocks of w keys ≈ the untiled error
    times P(both maxima in one block) = (w − 1)/(N − 1), FA2 ≈ 0; tie coverage of the same rows ≈ that
    probability."""
    from lib.fp.round_block_bias import (o_error_by_round_block, same_block_probability, tie_coverage,
                                         tied_attention_rows)
    r = o_error_by_round_block(seed=0, n_problems=3, n_keys=256, round_blocks=(0, 128, -1))
    arms = {(a["profile"], a["round_block"]): a for a in r["arms"]}
    untiled = arms[("paper", -1)]["mean_ulps"]
    assert -0.27 < untiled < -0.23
    for rb in (0, 128):
        a = arms[("paper", rb)]
        pred = untiled * same_block_probability(256, rb)
        assert abs(a["mean_ulps"] - pred) < 3 * a["ci95"] + 0.01, (rb, a, pred)
    assert arms[("paper", -1)]["mean_ulps"] < arms[("paper", 128)]["mean_ulps"] < arms[("paper", 0)]["mean_ulps"] < 0
    assert abs(arms[("fa2", 0)]["mean_ulps"]) < 0.02
    S, _ = tied_attention_rows(0, 3, 256)
    assert abs(tie_coverage(S, 0) - same_block_probability(256, 0)) < 0.05
    assert tie_coverage(S, -1) == 1.0
    assert same_block_probability(1024, 512) == pytest.approx(511 / 1023)


def test_grad_error_by_round_block_orders_the_accumulators():
    """CI scale (256 keys, head dim 32, 128-key blocks, seed 0): with lp gradient accumulators, one rounded sum per
    block gives smaller dK and dV errors than one per 64-key tile, and FP32 accumulators smaller still."""
    from lib.fp.round_block_bias import grad_error_by_round_block
    r = grad_error_by_round_block(seed=0, n=256, head_dim=32, round_block=128)["arms"]
    for key in ("dk", "dv"):
        assert r["FP32"][key] < r["per block"][key] < r["per tile"][key], (key, r)
    assert all(0 < x < 1e-2 for arm in r.values() for x in arm.values())
