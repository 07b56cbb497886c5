"""kernels/stable_attention.py in the CPU interpreter (EMULATE mode): forward O, LSE and backward δ, dQ, dK, dV bit
for bit against the oracle (`lib.fp.reference`, numerics "fa2", 64-wide tiles), with and without the β fix, causal
and not, ragged T, both load paths (pointers and in-kernel TMA descriptors); error against FP64; the fast path's
softmax arithmetic (base 2, `base2=True`) against FP64 as the logits grow; autograd wiring and a finite-difference
check of the gradients; δ from the FP32 O (delta="fp32_o"): the same O, the oracle's FP32 O and δ, its error against
FP64, `torch.compile` and the op registrations; argument checks. Shapes are tiny (the interpreter runs numpy per
op)."""
import math

import numpy as np
import pytest
import torch
import triton

import lib.book.setup  # noqa: F401  (interpreter before kernels)
from kernels import stable_attention
from kernels.stable_attention import backward, forward
from kernels.stable_bwd import BWD_CONFIGS, BWD_FALLBACK
from kernels.stable_bwd import _prune as bwd_prune
from kernels.stable_fwd import EMULATE_BLOCK, FWD_CONFIGS, FWD_FALLBACK, attn_fwd_tuned
from kernels.stable_fwd import _prune as fwd_prune
from lib.fp.inputs import attention_inputs
from lib.fp.numerics import get_profile
from lib.fp.reference import attention_fp64, emulate_backward, emulate_delta, emulate_forward
from lib.studies.kernel.gradient_checks import planted
from tests.precision import attention_rtol


def _inputs(seed, T, D=64, ties=False, big=1.0):
    """BF16-valued FP32 q, k, v, dO of shape (1, 2, T, D). With `ties`, every fourth key repeats the one before it
    (exact score ties inside a 64-key tile), and half the query rows get a large negative score offset, so repeated
    maxima occur with both signs and both branches of the fix run; `big` scales q (large tied maxima: the guard)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn((1, 2, T, D), generator=g).bfloat16().float() for _ in range(4))
    if ties:
        q = q * 2 * big
        k[:, :, 1::4] = k[:, :, 0::4][:, :, : k[:, :, 1::4].shape[2]]
        k[..., 0] = 3.0
        q[:, :, ::2, 0] = -8.0 * big
    return q, k, v, do


def _ours(q, k, v, do, causal, fix, beta=7.0, max_shift=64.0, use_tma=False, base2=False):
    scale = 1.0 / math.sqrt(q.shape[-1])
    o, lse = forward(q, k, v, causal=causal, scale=scale, fix=fix, beta=beta, max_shift=max_shift, emulate=True,
                     use_tma=use_tma, base2=base2)
    dq, dk, dv, delta = backward(do, q, k, v, o, lse, causal=causal, scale=scale, emulate=True, use_tma=use_tma,
                                 base2=base2)
    return {"o": o, "lse": lse, "delta": delta, "dq": dq, "dk": dk, "dv": dv}


def _oracle(q, k, v, do, causal, fix, beta=7.0, max_shift=64.0):
    kw = dict(causal=causal, block_m=EMULATE_BLOCK, block_n=EMULATE_BLOCK, fix=fix, beta=beta, max_shift=max_shift)
    f = emulate_forward(q, k, v, "fa2", **kw)
    return {"o": f.o, "lse": f.lse, **emulate_backward(q, k, v, f.o, f.lse, do, "fa2", **kw)}


def _assert_bitwise(ours, ref):
    for name in ("o", "lse", "delta", "dq", "dk", "dv"):
        a = ours[name].numpy()
        b = np.asarray(ref[name], dtype=np.float32).reshape(a.shape)
        same = a.view(np.uint32) == b.view(np.uint32)
        assert same.all(), f"{name}: {int((~same).sum())} of {same.size} differ, max |diff| {np.nanmax(abs(a - b)):.3e}"


# (T, D, causal, fix, TMA descriptors): ragged and whole-tile lengths, both maskings, both load paths, head dim 128
CASES = [(130, 64, True, None, False), (130, 64, False, "beta", False), (100, 64, True, "beta", True),
         (64, 64, False, None, True), (70, 128, True, "beta", False)]


@pytest.mark.parametrize("T,D,causal,fix,use_tma", CASES)
def test_bit_exact_against_oracle(T, D, causal, fix, use_tma):
    q, k, v, do = _inputs(T + D, T, D, ties=fix is not None)
    _assert_bitwise(_ours(q, k, v, do, causal, fix, use_tma=use_tma), _oracle(q, k, v, do, causal, fix))


@pytest.mark.parametrize("max_shift", [64.0, None])
def test_bit_exact_guard_and_paper_rule(max_shift):
    """Tied maxima of ~10–40 with β = 7: the shift (β−1)·max exceeds 64, so the guard caps it (max_shift = 64) or,
    without it (None, the paper's rule), whole rows underflow: ℓ = 0 and O = 0 there, in both implementations."""
    q, k, v, do = _inputs(10, 80, ties=True, big=6.0)
    ours = _ours(q, k, v, do, True, "beta", max_shift=max_shift)
    _assert_bitwise(ours, _oracle(q, k, v, do, True, "beta", max_shift=max_shift))
    zero_rows = (ours["o"] == 0).all(-1).any().item()
    assert zero_rows == (max_shift is None)


def _fp64(q, k, v, do, causal):
    ref = attention_fp64(q, k, v, do, causal=causal)
    return {n: torch.as_tensor(np.asarray(ref[n])) for n in ("o", "dq", "dk", "dv")}


@pytest.mark.parametrize("causal", [True, False])
def test_fix_fires_and_both_stay_within_bf16_of_fp64(causal):
    """On tied rows the fix changes O (it subtracts another max) and both results stay within one BF16 rounding of
    the FP64 attention (twice the error of rounding the FP64 O itself, as FlashAttention's tests allow); the
    gradients within 2⁻⁶ of their largest FP64 magnitude (BF16 operands P and dS, FP32 sums)."""
    q, k, v, do = _inputs(3, 96, ties=True)
    ref = _fp64(q, k, v, do, causal)
    rounding = (ref["o"].bfloat16().double() - ref["o"]).abs().max().item()
    plain, fixed = _ours(q, k, v, do, causal, None), _ours(q, k, v, do, causal, "beta")
    assert not torch.equal(plain["o"], fixed["o"])
    for ours in (plain, fixed):
        fp32 = attention_rtol(96, 64) * ref["o"].abs().max().item()     # plus FP32's own error
        assert (ours["o"].double() - ref["o"]).abs().max().item() <= 2 * rounding + fp32
        for name in ("dq", "dk", "dv"):
            err = (ours[name].double() - ref[name]).abs().max().item()
            assert err <= 2 ** -6 * ref[name].abs().max().item(), (name, err)


@pytest.mark.parametrize("logit", [1e2, 1e5])
def test_fast_path_arithmetic_within_twice_the_oracles_error_as_logits_grow(logit):
    """The fast path's softmax arithmetic (base-2 exponent of the unscaled scores, `base2=True`; EMULATE's operands,
    so only that arithmetic differs) against FP64 on random causal rows whose largest score is ≈ `logit` (the
    gradient checks' planted inputs, at T = 128): O, dQ, dK, dV within twice the error of the natural-units path,
    which is the oracle's placement bit for bit (above), plus 2⁻²⁰ of the largest FP64 entry. At logits ≈ 10⁵ the
    rows are almost one-hot and the natural path's errors are tiny (P̄ of the row max is exactly 1, so O is V's row
    and δ is dO·V's); an exponent whose row max is not exactly 0 there puts O a BF16 step off V and dQ, dK off by
    units, as the GPU's gradient checks found on the fast path."""
    q, k, v, do = (x.float() for x in planted("random", logit, 1, 2, 128, 64, seed=0))
    ref = _fp64(q, k, v, do, True)
    natural, fast = _ours(q, k, v, do, True, None), _ours(q, k, v, do, True, None, base2=True)
    for name in ("o", "dq", "dk", "dv"):
        err_fast, err_nat = ((x[name].double() - ref[name]).abs().max().item() for x in (fast, natural))
        floor = 2 ** -20 * ref[name].abs().max().item()
        assert err_fast <= 2 * err_nat + floor, f"logit {logit:g}, {name}: {err_fast:.3g} > 2 × {err_nat:.3g}"


def test_fast_path_arithmetic_caps_the_fix_like_the_oracle():
    """With the fix and its guard firing (tied maxima of ~10–40, β = 7: the shift is capped at 64 in units of the
    scaled scores), the base-2 arithmetic gives the natural path's O within one BF16 rounding and its gradients
    within 2⁻¹⁰ of their largest entry: the guard's cap is converted to the base-2 kernel's units, not taken as
    is."""
    q, k, v, do = _inputs(10, 80, ties=True, big=6.0)
    natural = _ours(q, k, v, do, True, "beta")
    fast = _ours(q, k, v, do, True, "beta", base2=True)
    assert (fast["o"] - natural["o"]).abs().max().item() <= 2 ** -8 * natural["o"].abs().max().item()
    for name in ("dq", "dk", "dv"):
        assert (fast[name] - natural[name]).abs().max().item() <= 2 ** -10 * natural[name].abs().max().item(), name


def test_compiled_fast_path_takes_exp2_of_a_product_not_an_fma():
    """The interpreter rounds every op, so it cannot see a contraction; the compiled kernels can. In the user
    kernel's native forward (with the fix) and backward compiled for sm_90, every exp2 argument is a plain multiply
    ((t − m)·c), none an FMA from the score (t·c − m: the row max's argument is then the product's rounding error,
    not 0). The forward that also writes the FP32 O (delta="fp32_o"), with TMA descriptors, compiles too and keeps
    that form."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "tests" / "_ptx_exp2.py")], cwd=root, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ops = json.loads(r.stdout)
    for kernel in ("fwd", "bwd", "fwd_o32"):
        assert set(ops[kernel]) == {"mul.f32"} and ops[kernel]["mul.f32"] >= 64, (kernel, ops[kernel])


def test_autograd_matches_the_launchers_and_bf16_in_bf16_out():
    """stable_attention's autograd gives the launchers' O and gradients bit for bit; BF16 inputs give BF16 O and
    gradients equal to the FP32-emulated ones rounded; the defaults are SDPA's (non-causal, 1/sqrt(D))."""
    q, k, v, do = _inputs(5, 70)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = stable_attention(qg, kg, vg)
    dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), do)
    low = _ours(q, k, v, do, False, None)
    for a, b in ((o, low["o"]), (dq, low["dq"]), (dk, low["dk"]), (dv, low["dv"])):
        assert torch.equal(a.detach(), b)
    qb, kb, vb = (t.bfloat16().requires_grad_(True) for t in (q, k, v))
    ob = stable_attention(qb, kb, vb)
    grads = torch.autograd.grad(ob, (qb, kb, vb), do.bfloat16())
    assert ob.dtype == torch.bfloat16 and torch.equal(ob.float(), low["o"])
    for g, name in zip(grads, ("dq", "dk", "dv")):
        assert g.dtype == torch.bfloat16 and torch.equal(g, low[name].bfloat16())


def test_gradients_match_finite_differences():
    """gradcheck in spirit: the derivative of L = Σ O∘W along the backward's own gradient g (for q, k and v), by
    central differences of the forward kernel, equals ‖g‖·‖u‖ within 1 %. O is rounded to BF16, so the step cannot
    be tiny: along g the derivative is largest, and with step 2⁻⁶ the rounding noise is ~10⁻⁴ of it and the
    curvature term ~10⁻³. A gradient off by more than 1 % along itself, or with a wrong part of more than ~15 % of
    its size orthogonal to the true one, fails."""
    q, k, v, _ = _inputs(6, 70)
    w = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    qkv = [t.clone().requires_grad_(True) for t in (q, k, v)]
    grads = torch.autograd.grad((stable_attention(*qkv, is_causal=True) * w).sum(), qkv)
    h = 2.0 ** -6
    for i, g in enumerate(grads):
        u = g / g.norm() * math.sqrt(g.numel())         # unit RMS, along the gradient

        def loss(x):
            args = [t.detach() for t in qkv]
            args[i] = x
            return (stable_attention(*args, is_causal=True).double() * w).sum().item()

        fd = (loss(qkv[i].detach() + h * u) - loss(qkv[i].detach() - h * u)) / (2 * h)
        exact = (g.double() * u).sum().item()
        # central differences at h = 2^-6: truncation O(h²) ≈ 2^-12 of the curvature, FP32 outputs' rounding / h
        # ≈ 1e-5: 1 %
        assert abs(fd - exact) <= 0.01 * exact, ("qkv"[i], fd, exact)


def test_non_contiguous_inputs():
    q, k, v, _ = _inputs(8, 64)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)      # (B, T, H, D) storage, as nanoGPT's view
    assert not qt.is_contiguous()
    assert torch.equal(stable_attention(qt, k, v, is_causal=True), stable_attention(q, k, v, is_causal=True))


# ---------------------------------------------------------------------------- δ from the FP32 O (delta="fp32_o")
def _bits(x):
    """The raw bit patterns of an FP32 or BF16 tensor (−0 and +0 differ there, unlike in torch.equal)."""
    return x.view({torch.float32: torch.int32, torch.bfloat16: torch.int16}[x.dtype])


def _same_bits(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _sinks(seed, T):
    """The planted tied maxima of the paper's failing layer (`lib.fp.inputs.attention_inputs("attention")`: a few
    identical "sink" keys scoring ≈ 10–20, one-signed V ≈ −2 and dO ≈ −1), (1, 2, T, 64) FP32 holding BF16 values.
    Rows that put almost all their weight on tied sinks have P̄ = 1 exactly there, so the FP32 O is nearly exact and
    O's one BF16 rounding is most of its error."""
    return [x.float() for x in attention_inputs("attention", 1, 2, T, 64, seed)]


def _delta_inputs(kind, T):
    return {"random": lambda: _inputs(21, T), "ties": lambda: _inputs(22, T, ties=True),
            "sinks": lambda: _sinks(23, T)}[kind]()


def _autograd(q, k, v, do, causal, delta, dtype=torch.float32):
    """(O, dQ, dK, dV) of stable_attention(delta=delta) through autograd, inputs and dO cast to `dtype`."""
    x = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
    o = stable_attention(*x, is_causal=causal, delta=delta)
    return (o.detach(), *torch.autograd.grad(o, x, do.to(dtype)))


@pytest.mark.parametrize("kind,T,causal", [("random", 100, False), ("ties", 128, True), ("sinks", 128, True),
                                           ("sinks", 64, False)])
def test_delta_fp32_o_keeps_o_and_reads_the_fp32_o(kind, T, causal):
    """delta="fp32_o" against delta="o", bit for bit: O the same (and the same as the launcher's without the FP32
    O); the FP32 O the oracle's O before its final rounding ("fa2" with round_o=False), and O its RNE rounding by
    torch (the kernel's bit-exact helper and torch's cast agree on these values); δ the oracle's FP32 row sum of
    dO∘O_fp32 (and within FP32's summation error of the exact sum of those FP32 products); dQ, dK, dV those of
    `backward` handed the FP32 O; dV the same as with delta="o" (δ does not enter it), dQ and dK not."""
    q, k, v, do = _delta_inputs(kind, T)
    plain, ours = (_autograd(q, k, v, do, causal, d) for d in ("o", "fp32_o"))
    o, lse, o32 = forward(q, k, v, causal=causal, scale=0.125, emulate=True, store_o32=True)
    o_alone, lse_alone = forward(q, k, v, causal=causal, scale=0.125, emulate=True)
    assert _same_bits(ours[0], plain[0]) and _same_bits(o, o_alone) and _same_bits(lse, lse_alone)
    assert _same_bits(o, plain[0])
    oracle = emulate_forward(q, k, v, get_profile("fa2").replace(round_o=False), causal=causal, scale=0.125,
                             block_m=EMULATE_BLOCK, block_n=EMULATE_BLOCK)
    assert _same_bits(o32, torch.as_tensor(np.asarray(oracle.o, dtype=np.float32)).reshape(o32.shape))
    assert _same_bits(o32.bfloat16().float(), o)
    dq, dk, dv, delta = backward(do, q, k, v, o32, lse, causal=causal, scale=0.125, emulate=True)
    for name, a, b in zip(("dq", "dk", "dv"), ours[1:], (dq, dk, dv)):
        assert _same_bits(a, b), name
    assert _same_bits(delta, torch.as_tensor(emulate_delta(o32, do, "fa2")))
    products = o32.double() * do.double()
    assert ((delta.double() - products.sum(-1)).abs() <= 64 * 2 ** -24 * products.abs().sum(-1)).all()
    assert _same_bits(ours[3], plain[3])
    assert not torch.equal(ours[1], plain[1]) and not torch.equal(ours[2], plain[2])


def test_delta_fp32_o_bf16_in_bf16_out():
    """BF16 tensors: the same BF16 O with either value; the gradients with delta="fp32_o" are the FP32-emulated ones
    rounded to BF16."""
    q, k, v, do = _sinks(24, 64)
    plain, ours = (_autograd(q, k, v, do, True, d, torch.bfloat16) for d in ("o", "fp32_o"))
    emulated = _autograd(q, k, v, do, True, "fp32_o")
    assert ours[0].dtype == torch.bfloat16 and _same_bits(ours[0], plain[0])
    for a, b in zip(ours[1:], emulated[1:]):
        assert _same_bits(a, b.bfloat16())


@pytest.mark.parametrize("causal", [True, False])
def test_delta_from_fp32_o_is_closer_to_fp64(causal):
    """On the planted sinks (tied maxima, one-signed V and dO), δ from the FP32 O is ≥ 100× closer to the FP64 δ
    (rowsum(dO∘O) with O from FP64 attention) than δ from the returned BF16 O, in the largest error. Measured in the
    interpreter at (1, 2, 128, 64), seeds 0 and 1: BF16 O 0.073–0.081, FP32 O 1.1e-4–1.5e-4 (505–738×), |δ| up to
    164. (On `_inputs(ties=True)`, ties with random V and dO, the factor is only 1.4–3: there the FP32 O keeps the
    error of P̄'s BF16 rounding in P̄V, of the size of O's own rounding.)"""
    q, k, v, do = _sinks(0, 128)
    o, lse, o32 = forward(q, k, v, causal=causal, scale=0.125, emulate=True, store_o32=True)
    ref = torch.as_tensor(attention_fp64(q, k, v, do, causal=causal)["delta"])
    err = {}
    for name, saved in (("bf16", o), ("fp32", o32)):
        delta = backward(do, q, k, v, saved, lse, causal=causal, scale=0.125, emulate=True)[3]
        err[name] = (delta.double() - ref).abs().max().item()
    assert err["fp32"] * 100 <= err["bf16"], err


def test_delta_fp32_o_writes_the_fp32_o_only_for_a_backward(monkeypatch):
    """The forward writes the FP32 O only with delta="fp32_o" and a backward to come (grad enabled, an input that
    requires grad); without grad the O is the same either way."""
    import importlib
    mod = importlib.import_module("kernels.stable_attention")
    seen = []
    original = mod.forward

    def spy(*args, **kwargs):
        seen.append(kwargs["store_o32"])
        return original(*args, **kwargs)

    monkeypatch.setattr(mod, "forward", spy)
    q, k, v, _ = _inputs(25, 64)
    with torch.no_grad():
        o_plain = stable_attention(q, k, v, delta="o")
        o_fp32 = stable_attention(q, k, v, delta="fp32_o")
    stable_attention(q, k, v, delta="fp32_o")
    stable_attention(q.requires_grad_(True), k, v, delta="fp32_o")
    stable_attention(q, k, v, delta="o")
    assert seen == [False, False, False, True, False]
    assert _same_bits(o_plain, o_fp32)


def test_delta_fp32_o_compiles_without_graph_break():
    """A function calling stable_attention(delta="fp32_o") compiles into one graph (fullgraph=True raises on a
    break), and the compiled O and gradients equal the eager ones bit for bit (the op is opaque: the same
    launches)."""
    torch._dynamo.reset()
    q, k, v, do = _sinks(26, 64)

    def f(a, b, c):
        return stable_attention(a, b, c, is_causal=True, delta="fp32_o") * 1.0

    eager = _grads_of(f, q, k, v, do)
    compiled = _grads_of(torch.compile(f, fullgraph=True, backend="aot_eager"), q, k, v, do)
    for a, b in zip(eager, compiled):
        assert _same_bits(a, b)


def _grads_of(fn, q, k, v, do):
    x = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fn(*x)
    return (o.detach(), *torch.autograd.grad(o, x, do))


@pytest.mark.parametrize("store_o32", [False, True])
def test_op_registrations(store_o32):
    """torch.library's own checks of the two custom ops (schema; fake tensors against the real outputs' shapes,
    dtypes and strides), with and without the FP32 O, on non-contiguous inputs as a model's head split makes them."""
    from kernels.stable_attention import _bwd_op, _fwd_op
    q, k, v, do = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in _inputs(27, 64))
    assert not q.is_contiguous()
    args = (q, k, v, True, 0.125, "", 2.0, 64.0, store_o32)
    torch.library.opcheck(_fwd_op, args, test_utils=("test_schema", "test_faketensor"))
    o, lse, o32 = _fwd_op(*args)
    assert o32.shape == (q.shape if store_o32 else (0,)) and o32.dtype == torch.float32
    bargs = (do, q, k, v, o32 if store_o32 else o, lse, True, 0.125)
    torch.library.opcheck(_bwd_op, bargs, test_utils=("test_schema", "test_faketensor"))


def test_benchmark_implementations_run_in_the_interpreter():
    """benchmarks/bench_stable_attention.py's stable implementations through its own timer's steps (forward
    without grad, forward+backward), on a tiny BF16 CPU shape in the interpreter: the δ option gives plain stable's O
    and a different dQ; `extra_time` is the fraction of extra time."""
    from benchmarks import bench_stable_attention as bench
    impls = bench.implementations()
    assert set(bench.LABELS) == set(impls)
    q, k, v, do = (t.bfloat16() for t in _sinks(28, 64))
    outs = {}
    for name in ("stable", "stable_fix", "stable_delta_fp32_o"):
        fwd, _ = bench._timer(impls[name], "fwd", q, k, v, do)
        fwd()
        step, grads = bench._timer(impls[name], "fwd+bwd", q, k, v, do)
        step()
        outs[name] = (impls[name](q, k, v), grads[0].grad)
    assert _same_bits(outs["stable_delta_fp32_o"][0], outs["stable"][0])
    assert not torch.equal(outs["stable_delta_fp32_o"][1], outs["stable"][1])
    med = {("stable", "fwd"): 2.0, ("stable", "fwd+bwd"): 4.0, ("stable_delta_fp32_o", "fwd+bwd"): 4.1}
    assert bench.extra_time(med, "stable_delta_fp32_o") == pytest.approx({"fwd+bwd": 0.025})


def _qkv(shape=(1, 1, 8, 64), dtype=torch.float32):
    return [torch.randn(shape, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("kwargs,exc", [
    (dict(beta=1.0), ValueError), (dict(beta=float("nan")), ValueError), (dict(fix="beta_split"), ValueError),
    (dict(max_shift=0.0), ValueError), (dict(max_shift=True), ValueError), (dict(scale=-1.0), ValueError),
    (dict(delta="fp32"), ValueError), (dict(delta=None), ValueError), (dict(delta=("o",)), ValueError)])
def test_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        stable_attention(*_qkv(), **kwargs)


def test_bad_delta_names_the_allowed_values():
    with pytest.raises(ValueError, match=r"delta must be one of \('o', 'fp32_o'\), got 'O'"):
        stable_attention(*_qkv(), delta="O")


def test_bad_tensors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="head_dim"):
        stable_attention(*_qkv((1, 1, 8, 48)))
    with pytest.raises(TypeError):
        stable_attention(q.half(), k.half(), v.half())        # the interpreter emulates BF16 only
    with pytest.raises(TypeError):
        stable_attention(q, k.bfloat16(), v)
    with pytest.raises(ValueError):
        stable_attention(q, k[:, :, :5], v)
    with pytest.raises(ValueError):
        stable_attention(q[0], k[0], v[0])
    with pytest.raises(TypeError):
        stable_attention(q.numpy(), k, v)


def test_launch_configs():
    """Every config keeps the diagonal whole key tiles (BLOCK_M a multiple of BLOCK_N; BIG of STEP), the pruners
    keep the fallback for short sequences and never give warp specialisation to a causal forward. The forward's
    autotuner key leaves STORE_O32 out (delta="fp32_o" must run the plain forward's tiles to give its O)."""
    assert FWD_FALLBACK in FWD_CONFIGS and BWD_FALLBACK in BWD_CONFIGS
    assert attn_fwd_tuned.keys == ["T", "HEAD_DIM", "CAUSAL", "FIX"]
    assert all(c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0 for c in FWD_CONFIGS)
    assert all(c.kwargs["BLOCK_BIG"] % c.kwargs["BLOCK_STEP"] == 0 for c in BWD_CONFIGS)
    short = fwd_prune(FWD_CONFIGS, {"T": 40}, CAUSAL=False)
    assert FWD_FALLBACK in short and all(c.kwargs["BLOCK_M"] == 64 for c in short)
    ws = triton.Config(dict(BLOCK_M=128, BLOCK_N=128, WARP_SPECIALIZE=True), num_warps=8, num_stages=3)
    assert ws not in fwd_prune(FWD_CONFIGS + [ws], {"T": 4096}, CAUSAL=True)
    assert bwd_prune(BWD_CONFIGS, {"T": 40}) and all(c.kwargs["BLOCK_BIG"] == 64
                                                     for c in bwd_prune(BWD_CONFIGS, {"T": 40}))


def test_benchmark_matmul_ceiling_and_fractions_of_it():
    """The benchmark's measured ceiling on the CPU (a small matmul timed by do_bench's CPU path is not a GPU figure;
    the test checks the record's arithmetic): 2·n³ FLOPs over the median time, and every timed implementation of a
    shape record gets its TFLOP/s as a fraction of the ceiling."""
    from benchmarks import bench_stable_attention as bench
    rec = {"shape": [1, 1, 8, 8], "errors": {}, "stable fwd": {"ms": 1.0, "tflops": 50.0, "fraction_of_peak": 0.05},
           "ratios": {"stable over sdpa_cudnn fwd (speed-up)": 1.0}}
    bench.of_ceiling([rec], 200.0)
    assert rec["stable fwd"]["fraction_of_matmul"] == pytest.approx(0.25) and "fraction_of_matmul" not in rec["ratios"]
    if torch.cuda.is_available():
        c = bench.matmul_ceiling(1, size=256)
        assert c["tflops"] == pytest.approx(2 * 256 ** 3 / c["ms"] * 1e-9)
