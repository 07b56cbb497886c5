"""δ = rowsum(dP∘P) / ΣP (`delta_source="dp_p_norm"`): the normalised estimator that the explanation of δ =
rowsum(dP∘P)'s excess (tests/test_dp_p_delta.py) computed by hand, now a δ source of the kernel. On the gradient
checks' tied rows at logits 10⁵ (their full shape and seed) it is the explanation's normalised δ bit for bit, and it
puts dK inside FlashAttention's rule where rowsum(dP∘P) is outside it; in the CPU interpreter it restores the
softmax's shift invariance (Σ over keys of dK = 0) that rowsum(dP∘P) breaks. Bit-exactness of the interpreter against
the oracle: tests/test_attention_kernel.py (`test_bit_exact_variants`)."""
import math

import numpy as np
import pytest
import torch

import lib.book.setup  # noqa: F401  (interpreter before kernels)
from kernels.attention import attention
from lib.book import registry, results
from lib.fp.bf16 import ulp
from lib.fp.numerics import get_profile
from lib.fp.reference import emulate_backward, emulate_forward
from lib.studies.kernel import gradient_checks as gc

FULL = registry.resolve("gradient_checks", "full")      # the recorded run's shape and seed
FA2 = get_profile("fa2")
LOGIT = max(FULL["logits"])                               # 10⁵


@pytest.fixture(scope="module")
def ties():
    """Errors against FP64 of the FA2 placement with δ = rowsum(dP∘P) and with it divided by ΣP (the numpy oracle,
    bit-exact against the emulated kernel), and the half BF16 spacing at each reference gradient's largest entry."""
    q, k, v, do = gc.planted("ties", LOGIT, FULL["B"], FULL["H"], FULL["N"], FULL["d"], FULL["seed"])
    ref = gc.reference(q, k, v, do)
    fwd = emulate_forward(q, k, v, FA2)
    err = {}
    for src in ("dp_p", "dp_p_norm"):
        b = emulate_backward(q, k, v, fwd.o, fwd.lse, do, FA2.replace(delta_source=src))
        out = {t: torch.from_numpy(np.asarray(b[t])) for t in ("dq", "dk", "dv")}
        err[src] = gc.errors(dict(out, o=torch.from_numpy(np.asarray(fwd.o))), ref)
    grid = {t: float(ulp(float(ref[t].abs().max()))) / 2 for t in gc.TENSORS}
    return dict(input=f"ties, logits {LOGIT:g}", err=err, grid=grid)


def test_is_the_explanations_normalised_delta(ties):
    """The kernel's estimator (ΣP summed beside rowsum(dP∘P) in the same pass) gives exactly the gradients of the
    explanation's δ / ΣP (ΣP from a second pass with dP = 1): same P, same tiles, same order, one FP32 division."""
    assert ties["err"]["dp_p_norm"] == gc.dp_p_normalisation(FULL)["err"]["dp_p_normalised"]


def test_within_the_fa2_rule_where_dp_p_is_not(ties):
    """FlashAttention's rule against the recorded flash SDPA errors on the same input (GPU, BF16 gradients): the CPU
    oracle returns FP32 gradients, so each error gets BF16's last rounding (half a spacing at the largest |X₆₄|)."""
    data = results.load("gradient_checks", "full").data
    sdpa = next(r for r in data["rows"] if r["variant"] == gc.DP_P and r["input"] == ties["input"])["sdpa"]
    e, g = ties["err"], ties["grid"]
    assert e["dp_p"]["dk_max"] > 2 * sdpa["dk_max"]                      # rowsum(dP∘P): outside (2.14·10⁵)
    for t in gc.TENSORS:
        assert e["dp_p_norm"][f"{t}_max"] + g[t] <= 2 * sdpa[f"{t}_max"], t   # divided by ΣP: inside
    assert e["dp_p_norm"]["dk_max"] < e["dp_p"]["dk_max"] / 10
    assert e["dp_p_norm"]["dq_max"] < e["dp_p"]["dq_max"] / 10          # dQ carries the same term


def test_interpreter_restores_shift_invariance():
    """In the CPU interpreter (emulated path, 64-key tiles), tied rows at logits 10⁵ (the ci shape): every row of
    dS = P∘(dP − δ) should sum to zero, so Σ over keys of dK = scale·Σᵢ (Σⱼ dSᵢⱼ) qᵢ vanishes in exact arithmetic.
    With δ = rowsum(dP∘P) each row keeps −(ΣP − 1)·δ; divided by ΣP, what remains is FP32 rounding."""
    ci = registry.resolve("gradient_checks", "ci")
    q, k, v, do = (t.float() for t in gc.planted("ties", LOGIT, ci["B"], ci["H"], ci["N"], ci["d"], ci["seed"]))
    dk_sum, dk_max = {}, {}
    for src in ("dp_p", "dp_p_norm"):
        q_, k_, v_ = (t.clone().requires_grad_(True) for t in (q, k, v))
        o = attention(q_, k_, v_, causal=True, numerics=FA2.replace(delta_source=src), path="emulated")
        dk, = torch.autograd.grad(o, (k_,), do)
        dk_sum[src] = float(dk.double().sum(-2).abs().max())
        dk_max[src] = float(dk.abs().max())
    ref = float(gc.reference(q, k, v, do)["dk"].abs().max())
    assert dk_sum["dp_p"] > 0.1 * ref                # broken: 1.6·10⁵ against the largest |dK₆₄|, 3.5·10⁵
    assert dk_sum["dp_p_norm"] < dk_sum["dp_p"] / 1000                   # 23 against 1.6·10⁵
    assert math.isfinite(dk_max["dp_p_norm"])


def test_spec_and_label():
    """The training grammar names it, readers see a label (no code id), and the op path is the same as the autograd
    path (tests/test_attention_op.py)."""
    from lib.training.spec import AttnSpec, describe
    s = AttnSpec.parse("fa2/delta_source=dp_p_norm")
    assert s.numerics == FA2.replace(delta_source="dp_p_norm")
    assert describe("fa2/delta_source=dp_p_norm") == "FA2 placement, δ = rowsum(dP∘P) / ΣP"
    assert describe("fa2/delta_source=dp_p") == "FA2 placement, δ = rowsum(dP∘P)"


def test_the_delta_channel_arm_is_the_normalised_estimator():
    """The GPT-2 δ-channel entries' FA2 arm takes δ = rowsum(dP∘P) / ΣP (an exact δ), never the unnormalised sum."""
    es = registry.entries()
    for name in ("gpt2_delta", "gpt2_delta_s1", "gpt2_delta_s2"):
        for scale in ("ci", "full"):
            cfg = es[name].configs[scale]
            arm = next((a for a in cfg["arms"] if a["attn"].startswith("fa2/")), None)
            if arm is None:                 # seed 2 runs only the paper arm (the one that decides)
                assert name == "gpt2_delta_s2" and scale == "full" and len(cfg["arms"]) == 1
                continue
            assert arm == dict(arm, label="fa2_delta_dp_p_norm", attn="fa2/delta_source=dp_p_norm"), (name, scale)
            assert cfg["rules"]["baseline"]["fa2_delta_dp_p_norm"] == "ours_fa2"
