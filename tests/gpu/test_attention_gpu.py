"""GPU checks of kernels/attention.py (marked `gpu`; skipped without CUDA).

* FA2 test rule (Dao-AILab tests/test_flash_attn.py): the native BF16 path's max error against an fp64 reference is
  at most 2x that of PyTorch's own BF16 attention `softmax(q @ kᵀ · scale) @ v` (same BF16 inputs), for O and for
  dQ, dK, dV; with and without the β fix.
* Emulated vs native bit for bit where the arithmetic is the same: the δ pre-kernel (same elementwise products and
  row sums; only the load dtype differs), and whole forward/backward passes on inputs where every matmul is exact
  (integer-valued q, k, v, dO with all scores of a row tied), so only the shared elementwise code and the
  BF16 roundings remain. Where tensor-core accumulation differs (random inputs) the benchmark script records the
  measured differences instead (benchmarks/bench_attention.py, "path_agreement").
* Logical rounding blocks (`round_block`): the same rules with blocks of 512 keys, whole rows (-1) and 128-key
  blocks, head dims 64, 128 and 48; one-tile blocks equal the per-tile kernels on the native path; the per-block
  fix sees a tie split across two 64-key tiles.
* Operands kept in FP32 (the fp32 profile; the dial's P̄-in-FP32 arm): the native path's FP32 products, in both
  forms, against the emulated path by the dial's rule, and for the fp32 profile also in FP32 before the last rounding.

Compile time (the file's cost; `tests/gpu/_launch.py`): the emulated kernels run with 16 warps here, which leaves every
check below as it is (exact inputs or error bounds, never bit for bit against another kernel's 4-warp forward) and
cuts their sm_90 compiles ≈ 3-6×; the tests share constexpr sets where they can (the dial's SR case runs non-causal
like the exact-input SR case). Estimated on the H100 host: ≈ 150 s, almost all of it compiles.
"""
import importlib
import math

import pytest
import torch

import lib.book.setup  # noqa: F401
from kernels.attention import attention, compute_delta
from lib.fp.numerics import get_profile
from tests.gpu._launch import emulated_warps

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _emulated_16_warps(monkeypatch):
    emulated_warps(monkeypatch, 16, kernels=("fwd", "bwd"))


def _ref(q, k, v, causal, scale, dtype):
    q, k, v = (t.to(dtype) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _grads(fn, q, k, v, do):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = fn(q, k, v)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    return o, dq, dk, dv


# Every fix with both maskings at head dim 64; head dims 128 (the other native config) and 48 (padded to 64, masked
# loads) with two (fix, masking) pairs each: 10 cases, 10 forward and 6 backward compiles (was 18 cases).
_FA_RULE_CASES = [pytest.param(shape, causal, fix, id=f"d{shape[-1]}-{'causal' if causal else 'full'}-{fix}")
                  for shape, causal, fix in
                  [((2, 3, 1000, 64), c, f) for f in (None, "beta", "beta_split") for c in (True, False)]
                  + [((1, 2, 257, 128), False, None), ((1, 2, 257, 128), True, "beta_split"),
                     ((1, 4, 300, 48), True, None), ((1, 4, 300, 48), False, "beta")]]


@pytest.mark.parametrize("shape,causal,fix", _FA_RULE_CASES)
def test_native_error_at_most_twice_pytorch_bf16(shape, causal, fix):
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(shape[-1])
    ref = _grads(lambda a, b, c: _ref(a, b, c, causal, scale, torch.float64), q, k, v, do.double())
    pt = _grads(lambda a, b, c: _ref(a, b, c, causal, scale, torch.bfloat16), q, k, v, do)
    ours = _grads(lambda a, b, c: attention(a, b, c, causal=causal, numerics="fa2", fix=fix, path="native"),
                  q, k, v, do)
    for name, r, p, o in zip(("O", "dQ", "dK", "dV"), ref, pt, ours):
        assert o.dtype == torch.bfloat16 and torch.isfinite(o).all(), name
        err = (o.double() - r).abs().max().item()
        err_pt = (p.double() - r).abs().max().item()
        assert err <= 2 * err_pt + 1e-5, f"{name}: ours {err:.3e} > 2 x PyTorch bf16 {err_pt:.3e}"


@pytest.mark.parametrize("profile", ["fa2", "paper"])
def test_delta_kernel_native_equals_emulated(profile):
    """δ pre-kernel, native (BF16 loads) vs emulated (FP32 loads of the same values). The elementwise products are
    exact in FP32 on both paths, but the row sum's order follows the register layout, which depends on the load
    dtype: so bitwise equality is asserted on small-integer inputs (every partial sum exact), and on random inputs
    the difference is bounded by a few FP32 ulps of Σ|O∘dO| (reduction order only)."""
    nm = get_profile(profile)
    shape = (2, 3, 333, 64)
    g = torch.Generator(device="cpu").manual_seed(1)
    lse = torch.zeros(shape[:3], device="cuda")

    def both(o, do):
        d_nat = compute_delta(o, do, o, o, o, lse, causal=True, scale=0.125, nm=nm, path="native", block=(64, 64))
        d_emu = compute_delta(o.float(), do.float(), o.float(), o.float(), o.float(), lse, causal=True, scale=0.125,
                              nm=nm, path="emulated", block=(64, 64))
        return d_nat, d_emu

    o, do = (torch.randint(-8, 9, shape, generator=g).to("cuda", torch.bfloat16) for _ in range(2))
    d_nat, d_emu = both(o, do)
    assert torch.equal(d_nat, d_emu)
    o, do = (torch.randn(shape, generator=g).to("cuda", torch.bfloat16) for _ in range(2))
    d_nat, d_emu = both(o, do)
    bound = 8 * 2.0 ** -23 * (o.float() * do.float()).abs().sum(-1)
    if nm.round_delta:
        bound = bound + d_emu.abs() * 2.0 ** -7
    assert ((d_nat - d_emu).abs() <= bound).all()


_DIAL3 = get_profile("paper").replace(mantissa_bits=3)


@pytest.mark.parametrize("profile,causal", [("fa2", True), ("paper", False), (_DIAL3, True),
                                            (_DIAL3.replace(rounding="sr"), False)])
def test_exact_matmul_inputs_native_equals_emulated_bitwise(profile, causal):
    """Tied rows (every key equal within a head: P̄ = 1 everywhere, the paper's ties) and small-integer values:
    every matmul of both paths is exact (for dV: BF16 P̄ ≥ 1/100 times small integers, sums within 24 bits), so O
    and dV must agree bit for bit; only the shared elementwise code and the BF16 roundings remain. (With the fix
    P̄ = exp(−(β−1)m) has a full FP32 mantissa and row sums depend on the reduction order, so no bitwise claim.)"""
    g = torch.Generator(device="cpu").manual_seed(2)
    B, H, N, D = 1, 2, 100, 64
    q = torch.randint(-2, 3, (B, H, N, D), generator=g).float()
    k = torch.randint(-2, 3, (B, H, 1, D), generator=g).float().expand(B, H, N, D).contiguous()
    v = torch.randint(-3, 4, (B, H, N, D), generator=g).float()
    do = torch.randint(-2, 3, (B, H, N, D), generator=g).float()
    q, k, v, do = (t.to("cuda", torch.bfloat16) for t in (q, k, v, do))
    cfg = dict(causal=causal, scale=0.125, numerics=profile)
    blk = dict(block=(64, 64))          # same tiles on both paths (the tiling is part of the arithmetic)

    def run(path):
        def fn(a, b, c):
            torch.manual_seed(5)     # an SR call draws its seed from torch's generator: the same draw on both paths
            return attention(a, b, c, path=path, **blk, **cfg)
        return _grads(fn, q, k, v, do)

    nat, emu = run("native"), run("emulated")
    assert torch.equal(nat[0], emu[0]), "O differs"
    assert torch.equal(nat[3], emu[3]), "dV differs"


@pytest.mark.parametrize("rounding,causal", [("rne", True), ("sr", False)])   # the exact-input cases' kernels
def test_dial_native_matches_emulated_on_random_inputs(rounding, causal):
    """The precision dial (paper placement at m = 3 bits), native path (what training uses) vs emulated path (the
    oracle's arithmetic) on random inputs. They differ only in the matmuls (tensor-core FP32 accumulation vs FP32
    `ieee` products), far below a 3-bit ulp: the kernel rule applies (native error against fp64 at most 2x the
    emulated path's, for O, dQ, dK, dV), and most of O is bit-identical (a difference needs an FP32 sum next to a
    3-bit rounding boundary; SR draws the same bits on both paths)."""
    torch.manual_seed(0)
    shape = (2, 3, 300, 64)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cfg = dict(causal=causal, numerics=_DIAL3.replace(rounding=rounding), block=(64, 64))

    def run(path):
        def fn(a, b, c):
            torch.manual_seed(7)
            return attention(a, b, c, path=path, **cfg)
        return _grads(fn, q, k, v, do)

    nat, emu = run("native"), run("emulated")
    ref = _grads(lambda a, b, c: _ref(a, b, c, causal, 0.125, torch.float64), q, k, v, do.double())
    for name, n_, e_, r_ in zip(("O", "dQ", "dK", "dV"), nat, emu, ref):
        err_n = (n_.double() - r_).abs().max().item()
        err_e = (e_.double() - r_).abs().max().item()
        assert err_n <= 2 * err_e + 1e-6, f"{name}: native {err_n:.3e} > 2 x emulated {err_e:.3e}"
    same = (nat[0] == emu[0]).float().mean().item()
    print(f"dial m=3 {rounding}: O bit-identical on {same:.4f} of elements")
    assert same >= 0.9


@pytest.mark.parametrize("fix", ["beta", "beta_split"])
def test_fix_native_detects_like_emulated_on_split_ties(fix):
    """A row max repeated across two key tiles (keys 10 and 70 with 64-key tiles; integer inputs, exact scores):
    the native and emulated paths must agree on whether the fix fires (O changes from the unfixed O for
    beta_split, not for the per-tile beta) and give the same O within one BF16 ulp (P̄ = exp(−(β−1)m) has a full
    mantissa, so the P̄V sums depend on the tensor-core order: no bitwise claim)."""
    B, H, N, D = 1, 1, 128, 64
    g = torch.Generator(device="cpu").manual_seed(3)
    q = torch.zeros(B, H, N, D)
    q[..., 0] = 1.0
    k = torch.randint(-2, 2, (B, H, N, D), generator=g).float()
    k[..., 0] = torch.randint(-3, 2, (B, H, N), generator=g).float()
    k[:, :, [10, 70], 0] = 4.0                                   # the row max (4·scale), once per tile
    v = torch.randint(1, 4, (B, H, N, D), generator=g).float()   # one sign, as in the paper's argument
    q, k, v = (t.to("cuda", torch.bfloat16) for t in (q, k, v))
    cfg = dict(causal=False, scale=1.0, numerics="paper", block=(64, 64))
    nat = attention(q, k, v, path="native", fix=fix, **cfg).float()
    emu = attention(q, k, v, path="emulated", fix=fix, **cfg).float()
    nofix = attention(q, k, v, path="native", fix=None, **cfg).float()
    ulp = 2.0 ** (torch.floor(torch.log2(emu.abs().clamp_min(1e-30))) - 7)
    assert ((nat - emu).abs() <= ulp).all()
    changed = not torch.equal(nat, nofix)
    assert changed == (fix == "beta_split"), f"fix {fix}: native O {'changed' if changed else 'unchanged'}"


# ------------------------------------------------------------------------------ logical rounding blocks (round_block)
_PAPER = get_profile("paper")


# Each distinct set of constexprs compiles four kernels (~5 s each on the H100 host): the cases below are few and
# chosen to cover head dims 64/128/48, both maskings, both fixes, RNE and SR, blocks of 128/512 keys and whole rows.
@pytest.mark.parametrize("shape,causal,rb,fix", [((2, 3, 1000, 64), True, 512, "beta"),
                                                 ((1, 2, 1100, 128), False, -1, None),
                                                 ((1, 4, 700, 48), True, 512, "beta_split")])
def test_native_round_block_error_at_most_twice_pytorch_bf16(shape, causal, rb, fix):
    """fa2 numerics with logical rounding blocks (block max, tie test and ℓ per block; FP32 accumulators), native
    path, head dims 64, 128 and 48 (both native configs): the FA2 test rule as above, O and gradients."""
    torch.manual_seed(1)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = 1.0 / math.sqrt(shape[-1])
    ref = _grads(lambda a, b, c: _ref(a, b, c, causal, scale, torch.float64), q, k, v, do.double())
    pt = _grads(lambda a, b, c: _ref(a, b, c, causal, scale, torch.bfloat16), q, k, v, do)
    nm = get_profile("fa2").replace(round_block=rb)
    ours = _grads(lambda a, b, c: attention(a, b, c, causal=causal, numerics=nm, fix=fix, path="native"), q, k, v,
                  do)
    for name, r, p, o in zip(("O", "dQ", "dK", "dV"), ref, pt, ours):
        assert o.dtype == torch.bfloat16 and torch.isfinite(o).all(), name
        err = (o.double() - r).abs().max().item()
        err_pt = (p.double() - r).abs().max().item()
        assert err <= 2 * err_pt + 1e-5, f"{name}: ours {err:.3e} > 2 x PyTorch bf16 {err_pt:.3e}"


# The whole-row case (head dim 128) is `slow` (≈ 20 s of emulated compiles for itself alone) and redundant: the native
# whole-row kernels at head dim 128 are held to FlashAttention's rule against FP64 above
# (test_native_round_block_error_at_most_twice_pytorch_bf16, second case), and the native-vs-emulated comparison of
# the block kernels is the 512-key case here.
# The two precision-dial arms of the GPT-2 dial entries (S in FP32; P̄ and ℓ in FP32) are checked the same way; in
# the second the native P̄V is an FP32 product (`kernels.flash_fwd.wide_dot`, its default FP32 `ieee` form).
@pytest.mark.parametrize("nm,D", [(_PAPER.replace(round_block=512), 64),
                                  (_PAPER.replace(round_block=512, round_s=False), 64),
                                  (_PAPER.replace(round_block=512, round_p=False, round_l=False), 64),
                                  pytest.param(_PAPER.replace(round_block=-1), 128, marks=pytest.mark.slow)])
def test_round_block_native_matches_emulated_on_random_inputs(nm, D):
    """The paper placement with logical rounding blocks, native vs emulated on random inputs with the same tiles,
    head dims 64 and 128 (the block backward kernels of both native configs): they differ only in the matmuls, so the native error against fp64 is at most 2x the
    emulated path's for O, dQ, dK, dV (the rule of the dial test above). Prints the bit-identical share of O."""
    torch.manual_seed(0)
    shape = (2, 3, 1100, D)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    # no fix: where tensor-core and FP32 `ieee` sums give S one BF16 step apart, a tie (and so the fix) can differ
    # between the paths; that detection is checked on exact inputs below
    cfg = dict(causal=True, numerics=nm, block=(64, 64))

    def run(path):
        def fn(a, b, c):
            torch.manual_seed(7)
            return attention(a, b, c, path=path, **cfg)
        return _grads(fn, q, k, v, do)

    nat, emu = run("native"), run("emulated")
    ref = _grads(lambda a, b, c: _ref(a, b, c, True, 1.0 / math.sqrt(D), torch.float64), q, k, v, do.double())
    for name, n_, e_, r_ in zip(("O", "dQ", "dK", "dV"), nat, emu, ref):
        assert torch.isfinite(n_).all(), name
        err_n = (n_.double() - r_).abs().max().item()
        err_e = (e_.double() - r_).abs().max().item()
        assert err_n <= 2 * err_e + 1e-6, f"{name}: native {err_n:.3e} > 2 x emulated {err_e:.3e}"
    print(f"round_block={nm.round_block} m={nm.mantissa_bits} {nm.rounding}: O bit-identical on "
          f"{(nat[0] == emu[0]).float().mean().item():.4f} of elements")


_FP32 = get_profile("fp32")


# Each case compiles the native forward and backward once (the emulated fp32 kernels are shared); the P̄-in-FP32 dial
# arm's backward is the paper placement's (BF16 P and dS), so only its forward is new with the BF16-piece products.
@pytest.mark.parametrize("nm,wide,N", [pytest.param(_FP32, "ieee", 300, id="fp32-ieee"),
                                       pytest.param(_FP32, "bf16_split", 300, id="fp32-bf16_split"),
                                       pytest.param(_PAPER.replace(round_block=512, round_p=False, round_l=False),
                                                    "bf16_split", 1100, id="paper_pl32-bf16_split")])
def test_fp32_operands_native_matches_emulated_on_random_inputs(monkeypatch, nm, wide, N):
    """Numerics that keep P̄ (the dial's P̄-and-ℓ-in-FP32 arm) or P̄, backward P and dS (the fp32 profile) in FP32:
    on the native path those products are FP32 (`ieee` FMAs, or three exact BF16 pieces on the tensor cores:
    `kernels.attention.WIDE_PRODUCT`). Against the emulated path on random inputs, same tiles: the rule of the dial
    test above (native error against fp64 at most 2x the emulated path's, O, dQ, dK, dV as returned, BF16). For the
    fp32 profile also before that last rounding: the forward's FP32 O and FP32 gradients (δ from each path's FP32 O)
    agree within 2⁻¹⁶ of their largest entry (FP32 sums in another order; a P̄, P or dS rounded to BF16 would be
    ~2⁻⁹-class)."""
    from kernels.attention import attention_bwd, attention_fwd
    monkeypatch.setattr(importlib.import_module("kernels.attention"), "WIDE_PRODUCT", wide)
    torch.manual_seed(0)
    shape = (2, 3, N, 64)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cfg = dict(causal=True, numerics=nm, block=(64, 64))

    def run(path):
        return _grads(lambda a, b, c: attention(a, b, c, path=path, **cfg), q, k, v, do)

    nat, emu = run("native"), run("emulated")
    # The reference's gradients stay in FP64 (FP64 leaves). Gradients taken with respect to BF16 leaves come back
    # rounded to BF16, and every error against such a reference is a whole number of BF16 ulps: for the fp32
    # profile, whose paths are each within about an ulp of the truth, "2× the emulated error" then compares one
    # rounding with another. On the H200 the native dQ missed that rule by one ulp at [1, 2) (2⁻⁷ against 2⁻¹¹);
    # the CPU emulator gives the same pair when only δ differs — δ from the BF16 O, which the native path of
    # `attention` reads (kernels.attention's docstring), against δ from the FP32 O.
    ref = _grads(lambda a, b, c: _ref(a, b, c, True, 0.125, torch.float64), q.double(), k.double(), v.double(),
                 do.double())
    for name, n_, e_, r_ in zip(("O", "dQ", "dK", "dV"), nat, emu, ref):
        assert torch.isfinite(n_).all(), name
        err_n = (n_.double() - r_).abs().max().item()
        err_e = (e_.double() - r_).abs().max().item()
        assert err_n <= 2 * err_e + 1e-6, f"{name}: native {err_n:.3e} > 2 x emulated {err_e:.3e}"
    if nm != _FP32:
        return

    def run32(path, x):
        a, b, c, g = x
        kw = dict(causal=True, scale=0.125, nm=nm, path=path, block=(64, 64))
        _, lse, o32 = attention_fwd(a, b, c, fix=None, beta=2.0, tie_tol=0.0, store_o32=True, **kw)
        dq, dk, dv, _ = attention_bwd(g, a, b, c, o32, lse, grad_dtype=torch.float32, **kw)
        return o32, dq, dk, dv

    nat32 = run32("native", (q, k, v, do))
    emu32 = run32("emulated", tuple(t.float() for t in (q, k, v, do)))
    for name, n_, e_ in zip(("O", "dQ", "dK", "dV"), nat32, emu32):
        diff = (n_ - e_).abs().max().item()
        assert diff <= 2.0 ** -16 * e_.abs().max().item(), f"{name} (FP32): native - emulated {diff:.3e}"


@pytest.mark.parametrize("profile,causal,rb", [("paper", True, 512), (_DIAL3.replace(rounding="sr"), False, 128)])
def test_round_block_exact_matmul_inputs_native_equals_emulated_bitwise(profile, causal, rb):
    """As test_exact_matmul_inputs_native_equals_emulated_bitwise, with logical blocks of several 64-key tiles (N =
    600: blocks of 512 and 88 keys; 128-key blocks with SR at m = 3): every matmul exact, so O and dV agree bit for
    bit and the two passes, the block sums and the block roundings are the same arithmetic on both paths."""
    g = torch.Generator(device="cpu").manual_seed(4)
    B, H, N, D = 1, 2, 600, 64
    q = torch.randint(-2, 3, (B, H, N, D), generator=g).float()
    k = torch.randint(-2, 3, (B, H, 1, D), generator=g).float().expand(B, H, N, D).contiguous()
    v = torch.randint(-3, 4, (B, H, N, D), generator=g).float()
    do = torch.randint(-2, 3, (B, H, N, D), generator=g).float()
    q, k, v, do = (t.to("cuda", torch.bfloat16) for t in (q, k, v, do))
    nm = get_profile(profile).replace(round_block=rb)

    def run(path):
        def fn(a, b, c):
            torch.manual_seed(5)
            return attention(a, b, c, path=path, causal=causal, scale=0.125, numerics=nm, block=(64, 64))
        return _grads(fn, q, k, v, do)

    nat, emu = run("native"), run("emulated")
    assert torch.equal(nat[0], emu[0]), "O differs"
    assert torch.equal(nat[3], emu[3]), "dV differs"


@pytest.mark.parametrize("nm,fix", [(_PAPER, "beta")])
def test_native_one_tile_blocks_equal_round_block_0(monkeypatch, nm, fix):
    """round_block = 64 (the native tile) runs the two-pass block kernels with one tile per block; with the launch
    configs forced equal to the per-tile kernels' (so only the code differs), O and the gradients must equal
    round_block = 0's: pass 1's scores are pass 2's bit for bit, and the block's FP32 sums of one tile are the tile's.
    A failure here means the native two-pass code is not the per-tile arithmetic (e.g. the compiler fused an FMA
    differently, or pass 1's QKᵀ differs from pass 2's)."""
    from kernels.attention import NATIVE_CONFIGS
    for d64 in (True, False):
        monkeypatch.setitem(NATIVE_CONFIGS, ("fwd_rb", d64), NATIVE_CONFIGS[("fwd", d64)])
        monkeypatch.setitem(NATIVE_CONFIGS, ("bwd_rb", d64), NATIVE_CONFIGS[("bwd", d64)])
    torch.manual_seed(2)
    shape = (2, 3, 700, 64)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    k[:, :, 1::7] = k[:, :, 0::7][:, :, : k[:, :, 1::7].shape[2]]      # repeated maxima: the fix fires

    def run(rb):
        def fn(a, b, c):
            torch.manual_seed(9)
            return attention(a, b, c, causal=True, numerics=nm.replace(round_block=rb), fix=fix, path="native")
        return _grads(fn, q, k, v, do)

    for name, a, b in zip(("O", "dQ", "dK", "dV"), run(0), run(64)):
        assert torch.equal(a, b), f"{name}: round_block=64 differs from 0 on the native path"


@pytest.mark.parametrize("rb", [0, 128])
def test_native_round_block_fix_sees_ties_split_across_tiles(rb):
    """A row max repeated in two 64-key tiles of one 128-key block (keys 10 and 70; integer inputs, exact scores):
    the per-block fix fires with round_block 128 and not with 0 (64-key tiles), on the native and emulated paths
    alike, whose O agree within one BF16 ulp."""
    B, H, N, D = 1, 1, 128, 64
    g = torch.Generator(device="cpu").manual_seed(3)
    q = torch.zeros(B, H, N, D)
    q[..., 0] = 1.0
    k = torch.randint(-2, 2, (B, H, N, D), generator=g).float()
    k[..., 0] = torch.randint(-3, 2, (B, H, N), generator=g).float()
    k[:, :, [10, 70], 0] = 4.0
    v = torch.randint(1, 4, (B, H, N, D), generator=g).float()
    q, k, v = (t.to("cuda", torch.bfloat16) for t in (q, k, v))
    cfg = dict(causal=False, scale=1.0, numerics=_PAPER.replace(round_block=rb), block=(64, 64))
    nat = attention(q, k, v, path="native", fix="beta", **cfg).float()
    emu = attention(q, k, v, path="emulated", fix="beta", **cfg).float()
    nofix = attention(q, k, v, path="native", fix=None, **cfg).float()
    ulp = 2.0 ** (torch.floor(torch.log2(emu.abs().clamp_min(1e-30))) - 7)
    assert ((nat - emu).abs() <= ulp).all()
    changed = not torch.equal(nat, nofix)
    assert changed == (rb != 0), f"round_block {rb}: native O {'changed' if changed else 'unchanged'} by the fix"
