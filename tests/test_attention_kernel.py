"""kernels/attention.py in the CPU interpreter: bit-exact against the oracle `lib/fp/reference.py`, error vs fp64,
autograd wiring, and bad-input errors. Small shapes (the interpreter costs ~0.1 ms per tl op)."""
import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import lib.book.setup  # noqa: F401  (interpreter before kernels)
from kernels import attention
from kernels.attention import attention_bwd, attention_fwd
from kernels.flash_fwd import wide_dot
from lib.fp.numerics import FP32, get_profile
from lib.fp.reference import attention_fp64, emulate_backward, emulate_delta, emulate_forward
from tests.precision import attention_rtol

BLOCK = (32, 32)


def _inputs(seed, N, D, ties=False):
    """BF16-valued FP32 q, k, v, dO of shape (1, 2, N, D). With `ties`, every other pair of keys is duplicated
    (exact score ties inside a tile) and half the query rows get a large negative score offset, so that repeated
    maxima occur with both signs and the fix's two branches run."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn((1, 2, N, D), generator=g).bfloat16().float() for _ in range(4))
    if ties:
        q = q * 2
        k[:, :, 1::4] = k[:, :, 0::4][:, :, : k[:, :, 1::4].shape[2]]
        k[..., 0] = 3.0
        q[:, :, ::2, 0] = -8.0
    return q, k, v, do


def _kernel(q, k, v, do, nm, causal, fix, beta=7.0, tie_tol=0.0, max_shift=64.0):
    scale = 1.0 / math.sqrt(q.shape[-1])
    kw = dict(causal=causal, scale=scale, path="emulated", block=BLOCK)
    fx = dict(fix=fix, beta=beta, tie_tol=tie_tol, max_shift=max_shift)
    o, lse, _ = attention_fwd(q, k, v, nm=nm, **fx, **kw)
    o_delta = o
    if nm.delta_source == "fp32_o":
        o_delta = attention_fwd(q, k, v, nm=FP32, **fx, **kw)[0]
    dq, dk, dv, delta = attention_bwd(do, q, k, v, o_delta, lse, nm=nm, **kw)
    return {"o": o, "lse": lse, "delta": delta, "dq": dq, "dk": dk, "dv": dv}


def _oracle(q, k, v, do, nm, causal, fix, beta=7.0, tie_tol=0.0, max_shift=64.0):
    kw = dict(causal=causal, block_m=BLOCK[0], block_n=BLOCK[1], fix=fix, beta=beta, tie_tol=tie_tol,
              max_shift=max_shift)
    f = emulate_forward(q, k, v, nm, **kw)
    b = emulate_backward(q, k, v, f.o, f.lse, do, nm, **kw)
    return {"o": f.o, "lse": f.lse, **b}


def _assert_bitwise(ours, ref, names=("o", "lse", "delta", "dq", "dk", "dv")):
    for name in names:
        a = ours[name].numpy()
        b = np.asarray(ref[name], dtype=np.float32).reshape(a.shape)
        same = (a.view(np.uint32) == b.view(np.uint32))
        assert same.all(), f"{name}: {int((~same).sum())} of {same.size} values differ, max |diff| " \
                           f"{np.nanmax(np.abs(a - b)):.3e}"


# profile x fix, each with its own seed / shape / causal flag so that odd lengths, both maskings and a padded head
# dim are all covered without a full cross product.
CASES = [("fp32", None, 0, 45, 16, True), ("fp32", "beta", 1, 70, 32, False),
         ("fa2", None, 2, 70, 48, True), ("fa2", "beta", 3, 45, 16, True),
         ("paper", None, 4, 45, 32, False), ("paper", "beta", 5, 67, 16, True),
         ("fp32", None, 11, 64, 16, True), ("fa2", "beta", 12, 33, 32, False), ("paper", "beta", 13, 70, 48, False)]


@pytest.mark.parametrize("profile,fix,seed,N,D,causal", CASES)
def test_bit_exact_against_oracle(profile, fix, seed, N, D, causal):
    q, k, v, do = _inputs(seed, N, D, ties=fix is not None)
    nm = get_profile(profile)
    _assert_bitwise(_kernel(q, k, v, do, nm, causal, fix), _oracle(q, k, v, do, nm, causal, fix))


@pytest.mark.parametrize("variant", ["dp_p", "dp_p_norm", "dp_p_norm_lp", "fp32_o", "m3", "sr", "tie_tol", "clamp",
                                     "paper_rule"])
def test_bit_exact_variants(variant):
    """δ sources (rowsum(dP∘P); the same divided by ΣP, also with δ rounded after the division in the paper
    placement at 3 mantissa bits; an FP32 O), the precision dial (3 mantissa bits, RNE and stochastic rounding: the
    oracle replays the kernels' Philox bits for seed 0), a tie tolerance, and large repeated maxima with the underflow guard (max_shift = 64:
    the shift is capped) and without it (the paper's rule: rows underflow), on one small causal shape."""
    q, k, v, do = _inputs(10, 40, 16, ties=True)
    nm, fix, fx = get_profile("fa2"), "beta", {}
    if variant in ("dp_p", "dp_p_norm", "fp32_o"):
        nm = nm.replace(delta_source=variant)
    elif variant == "dp_p_norm_lp":
        nm = get_profile("paper").replace(delta_source="dp_p_norm", round_delta=True, mantissa_bits=3)
    elif variant == "m3":
        nm = get_profile("paper").replace(mantissa_bits=3)
    elif variant == "sr":
        nm = get_profile("paper").replace(mantissa_bits=3, rounding="sr")
    elif variant == "tie_tol":
        fx = dict(tie_tol=0.05)
    else:
        q = q * 6          # tied maxima of ~10-40: (beta - 1)·max > 64
        fx = dict(max_shift=64.0 if variant == "clamp" else None)
    _assert_bitwise(_kernel(q, k, v, do, nm, True, fix, **fx), _oracle(q, k, v, do, nm, True, fix, **fx))


def test_fix_triggers_and_changes_only_rounding():
    """The tie inputs do trigger the fix (the forward differs from fa2 without it) while both stay within BF16
    rounding of the fp64 attention (softmax shift invariance)."""
    q, k, v, do = _inputs(3, 45, 16, ties=True)
    nm = get_profile("fa2")
    plain = attention_fwd(q, k, v, causal=True, scale=0.25, nm=nm, fix=None, beta=7.0, tie_tol=0.0,
                          path="emulated", block=BLOCK)[0]
    fixed = attention_fwd(q, k, v, causal=True, scale=0.25, nm=nm, fix="beta", beta=7.0, tie_tol=0.0,
                          path="emulated", block=BLOCK)[0]
    ref = torch.from_numpy(np.asarray(attention_fp64(q, k, v, causal=True, scale=0.25)["o"]))
    assert not torch.equal(plain, fixed)
    for o in (plain, fixed):                      # fa2 rounds P̄ and O to BF16: two roundings of ≤ 2^-8 each
        assert (o.double() - ref).abs().max().item() <= 2 ** -7 * ref.abs().max().item()


def test_underflow_guard():
    """Large tied maxima: the paper's rule (max_shift=None) underflows whole rows (O = 0); the guard keeps every row
    within BF16 rounding of fp64."""
    q, k, v, _ = _inputs(10, 40, 16, ties=True)
    q = q * 6
    ref = torch.as_tensor(np.asarray(attention_fp64(q, k, v, causal=True, scale=0.25)["o"]))
    kw = dict(causal=True, scale=0.25, nm=get_profile("fa2"), fix="beta", beta=7.0, tie_tol=0.0, path="emulated",
              block=BLOCK)
    paper = attention_fwd(q, k, v, max_shift=None, **kw)[0]
    guarded = attention_fwd(q, k, v, max_shift=64.0, **kw)[0]
    assert (paper == 0).all(-1).any() and not (ref == 0).all(-1).any()
    assert (guarded.double() - ref).abs().max().item() <= 2 ** -7 * ref.abs().max().item()   # P̄, O: 2 × 2^-8


def test_error_vs_fp64_and_autograd():
    """fp32 profile ≈ fp64 to FP32 accuracy; fa2 O within one BF16 rounding of fp64 (plus FP32 noise); autograd
    gradients equal the low-level backward; BF16 inputs give BF16 outputs."""
    q, k, v, do = _inputs(7, 50, 16)
    ref = attention_fp64(q, k, v, do, causal=True)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o32 = attention(qg, kg, vg, causal=True, numerics="fp32", block=BLOCK)
    o32.backward(do)
    for name, ours in (("o", o32), ("dq", qg.grad), ("dk", kg.grad), ("dv", vg.grad)):
        r = torch.as_tensor(np.asarray(ref[name]))
        err = (ours.detach().double() - r).abs().max().item()
        assert err <= attention_rtol(50, 16, backward=name != "o") * r.abs().max().item(), (name, err)
    o_fa2 = attention(q, k, v, causal=True, numerics="fa2", block=BLOCK)
    r = torch.as_tensor(np.asarray(ref["o"]))
    bf16_err = (r.bfloat16().double() - r).abs().max().item()      # P̄ and O rounded: 2 BF16 roundings + FP32's
    assert (o_fa2.double() - r).abs().max().item() <= 2 * bf16_err + attention_rtol(50, 16) * r.abs().max().item()
    lo = _kernel(q, k, v, do, FP32, True, None)
    assert torch.equal(o32.detach(), lo["o"]) and torch.equal(qg.grad, lo["dq"]) and torch.equal(vg.grad, lo["dv"])
    ob = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True, block=BLOCK)
    assert ob.dtype == torch.bfloat16 and torch.equal(ob.float(), o_fa2)


def test_delta_oracle_roundtrip():
    """δ from the kernel's saved O equals the oracle's δ of the same O (saved_o, paper rounding of products)."""
    q, k, v, do = _inputs(8, 33, 16)
    nm = get_profile("paper")
    ours = _kernel(q, k, v, do, nm, False, None)
    ref = emulate_delta(ours["o"].numpy(), do, nm, block_m=BLOCK[0], block_n=BLOCK[1])
    assert np.array_equal(ours["delta"].numpy().view(np.uint32), np.asarray(ref, np.float32).view(np.uint32))


def _sr_call(q, k, v, nm, torch_seed):
    torch.manual_seed(torch_seed)
    return attention(q, k, v, numerics=nm, block=BLOCK)


@pytest.mark.parametrize("profile", ["fa2", "paper"])
def test_stochastic_rounding_fresh_bits_per_call(profile):
    """Each call draws its Philox seed from torch's generator (the bit-exact SR check against the oracle, which
    replays the Philox bits of a given seed, is test_bit_exact_variants["sr"]): the same torch seed gives the same O, another seed other bits (a fixed seed would be a per-position
    systematic bias over training steps); O differs from RNE and stays within a few 3-bit ulps of fp64. "paper"
    rounds the (BLOCK_M, head dim) P̄V and accumulator tiles, whose element ids once had the wrong shape whenever
    the head dim differed from the key tile (here 16 vs 32)."""
    q, k, v, _ = _inputs(9, 40, 16)
    sr = get_profile(profile).replace(rounding="sr", mantissa_bits=3)
    a, b, c = _sr_call(q, k, v, sr, 0), _sr_call(q, k, v, sr, 0), _sr_call(q, k, v, sr, 1)
    rne = attention(q, k, v, numerics=sr.replace(rounding="rne"), block=BLOCK)
    ref = torch.as_tensor(np.asarray(attention_fp64(q, k, v, causal=True)["o"]))
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, rne)
    for o in (a, c):                              # 3 mantissa bits: a rounding moves ≤ 2^-3 (SR: ≤ 1 ulp); 4 of them
        assert (o.double() - ref).abs().max().item() <= 4 * 2 ** -3 * ref.abs().max().item()


def _qkv(shape=(1, 2, 8, 16), dtype=torch.float32):
    return [torch.randn(shape, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("kwargs,exc", [
    (dict(beta=1.0), ValueError), (dict(beta=0.5), ValueError), (dict(tie_tol=-1e-3), ValueError),
    (dict(numerics="bf16"), ValueError), (dict(numerics=7), TypeError), (dict(fix="gamma"), ValueError),
    (dict(path="native"), ValueError), (dict(path="cuda"), ValueError), (dict(max_shift=0.0), ValueError),
    (dict(scale=-1.0), ValueError), (dict(block=(24, 32)), ValueError)])
def test_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        attention(*_qkv(), **kwargs)


def test_bad_tensors():
    q, k, v = _qkv()
    with pytest.raises(TypeError):
        attention(q.half(), k.half(), v.half())
    with pytest.raises(TypeError):
        attention(q, k.bfloat16(), v)
    with pytest.raises(ValueError):
        attention(q[0], k[0], v[0])
    with pytest.raises(ValueError):
        attention(q, k[:, :, :5], v)
    with pytest.raises(ValueError):
        attention(*_qkv((1, 1, 8, 8)))
    with pytest.raises(ValueError):
        attention(*_qkv((1, 1, 8, 256)))
    with pytest.raises(TypeError):
        attention(q.numpy(), k, v)
    # non-contiguous inputs are made contiguous (documented), with the same result as contiguous ones
    qt = q.transpose(2, 3).contiguous().transpose(2, 3)
    assert not qt.is_contiguous()
    assert torch.equal(attention(qt, k, v, block=BLOCK), attention(q, k, v, block=BLOCK))


def _split_tie_inputs(seed=21, N=64, D=16):
    """Keys 5 and 37 are identical and dominate every score row (a shared component worth +2 after scaling; the
    other scores are O(0.5)), so each row that sees both has its maximum twice, once in each 32-key tile: a
    per-tile tie test never fires on it, a row test does. (Non-causal: every row; causal: rows ≥ 37.)"""
    q, k, v, do = _inputs(seed, N, D)
    k = k * 0.5
    k[..., 0] = 0.0
    k[:, :, 5, 0] = 4.0
    k[:, :, 37] = k[:, :, 5]
    q[..., 0] = 2.0
    return q, k, v, do


@pytest.mark.parametrize("profile,causal", [("paper", False), ("fa2", True)])
def test_split_fix_bit_exact_and_detects_cross_tile_ties(profile, causal):
    """fix="beta_split" is bit-exact against the oracle; on maxima repeated only across tiles it changes the
    forward while the per-tile fix ("beta") leaves it identical to no fix; all stay within BF16 rounding of fp64."""
    q, k, v, do = _split_tie_inputs()
    nm = get_profile(profile)
    split = _kernel(q, k, v, do, nm, causal, "beta_split")
    _assert_bitwise(split, _oracle(q, k, v, do, nm, causal, "beta_split"))
    plain = _kernel(q, k, v, do, nm, causal, None)
    tile = _kernel(q, k, v, do, nm, causal, "beta")
    assert torch.equal(plain["o"], tile["o"]), "the per-tile test fired on ties that are split across tiles"
    assert not torch.equal(plain["o"], split["o"])
    ref = torch.as_tensor(np.asarray(attention_fp64(q, k, v, causal=causal)["o"])).reshape(split["o"].shape)
    # fa2 rounds P̄ and O to BF16 (2 × 2^-8); paper also P̄V and the accumulator on both key tiles (6 × 2^-8 < 2^-5)
    tol = (2 ** -7 if profile == "fa2" else 2 ** -5) * ref.abs().max().item()
    assert (split["o"].double() - ref).abs().max().item() <= tol


def test_native_path_accepts_the_dial_sr_and_fp32_operands_but_not_wider_formats(monkeypatch):
    """The native path takes any numerics whose roundings fit BF16 (m <= 7, RNE or SR), with P̄, backward P and dS
    rounded as BF16 operands or kept in FP32 (the fp32 profile, the dial's P̄-in-FP32 arm: FP32 products); wider
    mantissas must go to the emulated path, and path=None picks it for them."""
    import importlib
    A = importlib.import_module("kernels.attention")     # the module (`kernels.attention` is also the function)
    native_allowed, resolve_path = A.native_allowed, A.resolve_path
    paper = get_profile("paper")
    assert native_allowed(paper) and native_allowed(get_profile("fa2"))
    assert native_allowed(paper.replace(mantissa_bits=3)) and native_allowed(paper.replace(rounding="sr"))
    assert native_allowed(paper.replace(mantissa_bits=3, rounding="sr"))
    assert native_allowed(get_profile("fp32"))
    assert native_allowed(paper.replace(round_block=512, round_p=False, round_l=False))
    assert native_allowed(paper.replace(round_ds=False)) and native_allowed(paper.replace(round_bwd_p=False))
    assert native_allowed(paper.replace(mantissa_bits=3, round_p=False))
    for m in (8, 10, 23):
        assert not native_allowed(paper.replace(mantissa_bits=m))
        assert not native_allowed(get_profile("fp32").replace(mantissa_bits=m))
    assert resolve_path(None, paper.replace(mantissa_bits=10), torch.bfloat16, torch.device("cpu")) == "emulated"
    monkeypatch.setattr(A, "_interpreting", lambda: False)       # as on a GPU: the numerics decide
    assert resolve_path("native", get_profile("fp32"), torch.bfloat16, torch.device("cuda")) == "native"
    with pytest.raises(ValueError, match="mantissa_bits <= 7"):
        resolve_path("native", paper.replace(mantissa_bits=10), torch.bfloat16, torch.device("cuda"))


@triton.jit
def _wide_dot_kernel(A, B, C, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    tl.store(C + r[:, None] * N + r[None, :], wide_dot(a, b, False))


def test_wide_dot_is_an_fp32_product_with_the_bf16_operand_widened():
    """The native path's product of an FP32 operand (P̄, P or dS kept in FP32) with a BF16 tile, in its default
    form (FP32 `ieee`; the interpreter's BF16 casts truncate, so the BF16-piece form is checked on the GPU): every
    product exact and summed in FP32, so within K·2⁻²⁴·(|a|·|b|) of the exact product, a bound the same product
    with `a` rounded to BF16 first exceeds."""
    g = torch.Generator().manual_seed(0)
    n = 16
    a = torch.rand(n, n, generator=g) * torch.exp(-4 * torch.rand(n, n, generator=g))    # full 24-bit mantissas
    b = torch.randint(-3, 4, (n, n), generator=g).to(torch.bfloat16)
    c = torch.empty(n, n)
    _wide_dot_kernel[(1,)](a, b, c, n)
    exact = a.double() @ b.double()
    bound = n * 2.0 ** -24 * (a.double().abs() @ b.double().abs())
    assert ((c.double() - exact).abs() <= bound).all()
    assert ((a.bfloat16().double() @ b.double() - exact).abs() > bound).any()


def test_native_backward_config_follows_the_fp32_operands(monkeypatch):
    """Backward launch configs: numerics with BF16 P and dS operands keep the per-tile ("bwd") or block ("bwd_rb")
    kernels' configs; FP32 P or dS take the one-stage configs of their products' form (FP32 FMAs or BF16 pieces)."""
    import importlib
    A = importlib.import_module("kernels.attention")
    paper, fa2, fp32 = (get_profile(p) for p in ("paper", "fa2", "fp32"))
    assert A.bwd_kernel_key(fa2) == A.bwd_kernel_key(paper) == "bwd"
    assert A.bwd_kernel_key(paper.replace(round_block=512)) == "bwd_rb"
    assert A.bwd_kernel_key(paper.replace(round_block=512, round_p=False, round_l=False)) == "bwd_rb"
    assert A.bwd_kernel_key(fp32) == A.bwd_kernel_key(fa2.replace(round_ds=False)) == "bwd_wide"
    assert all(A.native_config(d, "bwd_wide")["num_stages"] == 1 for d in (64, 128))
    monkeypatch.setattr(A, "WIDE_PRODUCT", "bf16_split")
    assert A.bwd_kernel_key(fp32) == "bwd_split" and A.bwd_kernel_key(fa2) == "bwd"
    assert A._wide_split("native") and not A._wide_split("emulated")
    monkeypatch.setattr(A, "WIDE_PRODUCT", "tf32")
    with pytest.raises(ValueError, match="WIDE_PRODUCT"):
        A._wide_split("native")


@pytest.mark.parametrize("impl", ["kernel", "emulator"])
def test_sr_backward_recomputes_the_forward_scores(impl):
    """The backward recomputes S = rnd(α·QKᵀ); under stochastic rounding it must draw the forward's bits, or P in
    the backward is a different random rounding than the P that made O (up to e^{ulp(S)} off: ~28% at m = 5 for
    logits near 10; SR training runs went non-finite within ~200 steps). With V = I (N = head dim) and only S rounded,
    O *is* the forward's P, so a consistent backward gives dV = Oᵀ·dO up to FP32 rounding."""
    from lib.fp.reference import emulate_attention
    nm = get_profile("fp32").replace(round_s=True, rounding="sr", mantissa_bits=3)
    g = torch.Generator().manual_seed(0)
    N = 16
    q, k = (torch.randn(1, 2, N, N, generator=g) * 2.0 for _ in range(2))
    v = torch.eye(N).expand(1, 2, N, N).contiguous()
    do = torch.randn(1, 2, N, N, generator=g)
    for call in range(3):                       # several SR draws (fresh seeds per call)
        if impl == "kernel":
            torch.manual_seed(call)
            qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
            o = attention(qg, kg, vg, causal=True, numerics=nm, block=BLOCK)
            dv = torch.autograd.grad(o, vg, do)[0]
            o, dv = o.detach().numpy(), dv.numpy()
        else:
            r = emulate_attention(q.numpy(), k.numpy(), v.numpy(), do.numpy(), nm, causal=True,
                                  block_m=BLOCK[0], block_n=BLOCK[1], seed=call)
            o, dv = r["o"], r["dv"]
        want = np.swapaxes(o, -1, -2) @ do.numpy()
        # both sides FP32 sums of N = 16 terms (≤ 16·eps32 = 2e-6 of Σ|O||dO|, any order): 1e-4 and 1e-5 cover it
        np.testing.assert_allclose(dv, want, rtol=1e-4, atol=1e-5)
