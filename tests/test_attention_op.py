"""The custom-op path of our kernel (`kernels.attention_op`) in Triton's CPU interpreter: bit-identical to
`kernels.attention.attention` wherever δ's definition is unchanged, the corrected δ from an FP32 O keeps the
softmax's shift invariance (Σⱼ dKⱼ = 0) where the old one breaks it, O kept in FP32 is the emulator's bit for bit,
and `torch.compile` runs through it."""
import math

import pytest
import torch

from kernels.attention import attention
from kernels.attention_op import attention_op, fp32_o_numerics
from lib.fp.numerics import get_profile
from lib.fp.reference import emulate_attention, emulate_backward
from precision import attention_rtol

# The paper placement with O kept in FP32 (P̄V, accumulator, ℓ, normalisation and the returned and saved O
# unrounded; S, P̄, LSE and the backward as the paper's), as `lib.studies.explosion.ablations.FP32_O` writes it.
FP32_O = get_profile("paper").replace(round_pv=False, round_acc=False, round_l=False, normalize_then_round=True,
                                      round_o=False)


def _qkv(seed, B=1, H=2, N=128, D=32, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, N, D, generator=g) for _ in range(3))
    q = q * scale
    return [t.to(dtype).requires_grad_(True) for t in (q, k, v)]


def _grads(fn, q, k, v, do):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = fn(q, k, v)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad


CASES = [
    dict(numerics="fa2"),
    dict(numerics="paper"),
    dict(numerics="fp32"),
    dict(numerics=get_profile("paper").replace(round_block=128)),
    dict(numerics="paper", fix="beta", beta=2.0),
    dict(numerics="paper", fix="beta", beta=7.0, max_shift=None),
    dict(numerics="fa2", fix="beta_split", beta=2.0, tie_tol=1e-3),
    dict(numerics=get_profile("paper").replace(delta_source="dp_p")),
    dict(numerics=get_profile("fa2").replace(delta_source="dp_p")),
    dict(numerics=get_profile("fa2").replace(delta_source="dp_p_norm")),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(sorted((k, str(v)[:20]) for k, v in c.items())))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bit_identical_to_attention(case, dtype):
    """Same launches, same arguments: O, dQ, dK, dV equal bit for bit (FP32 and BF16 inputs, causal)."""
    q, k, v = _qkv(0, scale=3.0, dtype=dtype)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    old = _grads(lambda *t: attention(*t, causal=True, **case), q, k, v, do)
    new = _grads(lambda *t: attention_op(*t, causal=True, **case), q, k, v, do)
    for a, b, name in zip(old, new, "O dQ dK dV".split()):
        assert a.dtype == b.dtype == dtype, name
        assert torch.equal(a, b), f"{name} differs: max {(a.float() - b.float()).abs().max().item():.3g}"


def _dk_sum(fn, q, k, v, do):
    """‖Σⱼ dKⱼ‖ / ‖dK‖ per (batch, head), its largest value: 0 when each row of dS sums to zero."""
    _, _, dk, _ = _grads(fn, q, k, v, do)
    dk = dk.double()
    return (dk.sum(dim=2).norm(dim=-1) / dk.norm(dim=(2, 3))).max().item()


def test_o_kept_in_fp32_is_the_emulator_bit_for_bit():
    """O kept in FP32 on BF16 inputs, 128-key rounding blocks: the op returns the emulator's FP32 O rounded once to
    BF16, and its dQ, dK, dV are the emulator's backward with δ from that FP32 O, bit for bit (rounded to BF16 as the
    op returns them). δ from the BF16 O instead gives other gradients, so the test sees which O δ read."""
    nm = FP32_O.replace(round_block=128)
    q, k, v = _qkv(9, N=256, scale=3.0, dtype=torch.bfloat16)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(10)).to(torch.bfloat16)
    o, dq, dk, dv = _grads(lambda *t: attention_op(*t, causal=True, numerics=nm), q, k, v, do)
    a = [t.detach().float().numpy() for t in (q, k, v, do)]
    ref = emulate_attention(*a, numerics=nm, causal=True)
    assert torch.equal(o, torch.from_numpy(ref["o"]).to(torch.bfloat16))
    for got, name in ((dq, "dq"), (dk, "dk"), (dv, "dv")):
        assert got.dtype == torch.bfloat16 and torch.equal(got, torch.from_numpy(ref[name]).to(torch.bfloat16)), name
    o_bf16 = torch.from_numpy(ref["o"]).to(torch.bfloat16).float().numpy()
    other = emulate_backward(*a[:3], o_bf16, ref["lse"], a[3], nm, causal=True)
    assert not torch.equal(dq, torch.from_numpy(other["dq"]).to(torch.bfloat16))


def test_fp32_o_delta_keeps_shift_invariance():
    """Scores large enough that the paper placement's BF16 S is coarse (|S| ~ 10²: its grid is 0.5 wide), the
    paper's forward and a backward in FP32 (so that only δ's definition is tested): δ from an O of the *unrounded*
    scores (the old path) breaks Σⱼ dKⱼ = 0 by 10⁴× more than δ from the O of the backward's own P (the op), which
    keeps it to FP32 rounding. With the paper's own backward roundings the op's δ is no worse than the saved O's."""
    q, k, v = _qkv(3, N=128, D=32, scale=40.0)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(4))
    paper = get_profile("paper")
    fp32_bwd = paper.replace(round_dp=False, round_ds=False, round_grad_acc=False, round_bwd_p=False,
                             round_delta_products=False)
    nm = fp32_bwd.replace(delta_source="fp32_o")
    old = _dk_sum(lambda *t: attention(*t, causal=True, numerics=nm), q, k, v, do)
    new = _dk_sum(lambda *t: attention_op(*t, causal=True, numerics=nm), q, k, v, do)
    # FP32: each dK entry sums ≤ N = 128 products, each Σⱼ another N: (2N)·2^-24 ≈ 1.5e-5 relative bounds the floor.
    assert new < 256 * 2 ** -24, new
    assert old > 1e4 * new, (old, new)
    full_new = _dk_sum(lambda *t: attention_op(*t, numerics=paper.replace(delta_source="fp32_o")), q, k, v, do)
    full_saved = _dk_sum(lambda *t: attention_op(*t, numerics=paper), q, k, v, do)
    assert full_new <= full_saved, (full_new, full_saved)


def test_fp32_o_equals_dp_p_delta_in_fp32():
    """Without rounded scores (FA2 placement) O′ is the FP32 O of the inputs and δ = dO·O′ equals rowsum(dP∘P) up to
    FP32 summation order: the two δ sources give the same gradients to ~1e-5 relative."""
    q, k, v = _qkv(5, scale=2.0)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(6))
    a = _grads(lambda *t: attention_op(*t, numerics=get_profile("fa2").replace(delta_source="fp32_o")), q, k, v, do)
    b = _grads(lambda *t: attention_op(*t, numerics=get_profile("fa2").replace(delta_source="dp_p")), q, k, v, do)
    for x, y in zip(a[1:], b[1:]):
        # Two FP32 evaluations of the same backward, each within attention's backward bound of the exact one
        # (tests/precision.py: 2(N + D)·eps32 of the largest entry), so within twice that of each other.
        assert (x - y).abs().max() <= 2 * attention_rtol(128, 32, backward=True) * y.abs().max()


def test_fp32_o_numerics_keeps_the_score_rounding():
    nm = fp32_o_numerics(get_profile("paper").replace(rounding="sr", mantissa_bits=5, round_block=512))
    assert nm.round_s and nm.mantissa_bits == 5 and nm.rounding == "sr" and nm.round_block == 512
    assert not (nm.round_p or nm.round_o or nm.round_l or nm.round_pv or nm.round_acc)
    assert not fp32_o_numerics(get_profile("fa2")).round_s


def test_opcheck():
    """torch.library's own consistency checks of the registrations (schema, fake tensors against the real
    outputs' shapes and strides), on non-contiguous inputs as a model's head split makes them."""
    from kernels import attention_op as mod
    from kernels.attention_op import numerics_key
    q, k, v = (t.detach().transpose(1, 2).contiguous().transpose(1, 2) for t in _qkv(7, N=64, D=16))
    assert not q.is_contiguous()
    for nm in (get_profile("fa2"), get_profile("paper").replace(delta_source="fp32_o"), FP32_O):
        args = (q, k, v, True, 0.25, numerics_key(nm), "", 7.0, 0.0, 64.0, "emulated", 0)
        torch.library.opcheck(mod._fwd, args, test_utils=("test_schema", "test_faketensor"))
        o, lse, o_delta = mod._fwd(*args)
        bargs = (torch.randn_like(o), q, k, v, o_delta if o_delta.numel() else o, lse, True, 0.25, numerics_key(nm),
                 "emulated", 0)
        torch.library.opcheck(mod._bwd, bargs, test_utils=("test_schema", "test_faketensor"))


def test_compiles_without_graph_break():
    """A module that calls the op compiles into one graph (fullgraph=True raises on a break), and the compiled
    forward and backward equal the eager ones bit for bit (the op is opaque: the same launches)."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(16, 48, bias=False)

    def f(x):
        q, k, v = lin(x).view(1, 64, 3, 1, 16).permute(2, 0, 3, 1, 4)
        return (attention_op(q, k, v, numerics="paper", fix="beta", beta=2.0) * 1.5).sum()

    x = torch.randn(1, 64, 16, generator=torch.Generator().manual_seed(8))
    loss_e = f(x)
    loss_e.backward()
    g_e = lin.weight.grad.clone()
    lin.weight.grad = None
    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    loss_c = cf(x)
    loss_c.backward()
    assert torch.equal(loss_e, loss_c) and torch.equal(g_e, lin.weight.grad)
    assert math.isfinite(loss_c.item())
