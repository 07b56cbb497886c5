"""lib/census.py on the GPU: the CPU's census on exact planted heads, the authors' S as their einsum forms it under
CUDA autocast, the placement's O against the authors' own algorithm (`lib/training/authors_fa.py`), and the
monitor's shape (4 sequences × 12 heads × 1024 tokens, head dim 64) within memory."""
import numpy as np
import pytest
import torch

import lib.book.setup  # noqa: F401
from benchmarks.bench_census import attention_shaped
from lib import census as cs
from lib.fp.bf16 import ulp
from lib.training.authors_fa import authors_attention
from tests.test_census import enumeration_heads, oracle_heads

COUNTS = ("n_rows", "n_tied", "n_window", "n_zero", "n_conj", "r_hist")


@pytest.mark.gpu
@pytest.mark.parametrize("placement", cs.PLACEMENTS)
@pytest.mark.parametrize("heads", [oracle_heads, lambda: enumeration_heads(13.0)], ids=["oracle", "enumeration"])
def test_gpu_census_equals_the_cpu_census_on_exact_heads(placement, heads):
    """Planted heads whose S is exact: the GPU's census counts are the CPU's, bit for bit; the error means measure the
    same bias, though not bit for bit. The devices sum in different orders (FP32 row sums of P̄ and ℓ, cuBLAS's P̄V,
    the FP64 matmuls of O_ref and of the remainder) and CUDA's exp is not the CPU's in the last bit. Two things then
    move a pair's error: (i) O next to a BF16 rounding boundary rounds the other way (the enumeration heads' tied sums
    are midpoints on purpose, and in the fa2 placement their O lies within a few FP32 ULPs of the boundary), and (ii)
    the theory's remainder ρ of a tied block whose other keys underflow in FP32 (the oracle heads' far keys, 200
    below) is the FP64 sum of ≈ e⁻¹⁹²·V terms, ±10⁻¹⁰⁰ of rounding noise around 0, where chapter 1's mean error
    jumps (an exact tie against a sticky bit; `lib.census`'s docstring, part (ii)). The CPU shows both when its exp
    is moved by one ULP and its sums and matmuls are reversed: in (i) up to 25 of a head's 96 pairs move (err_ulp), in
    (ii) 22 of 960 pairs' ρ (err_pred); the pooled means stay within 0.003 ULP. Allowed per head: err_ulp as if half
    its pairs moved by one ULP of O, err_pred and err_ell a tenth (at least two pairs each); pooled over the heads:
    0.01 ULP."""
    q, k, v = heads()
    cpu = cs.precondition_census(q, k, v, placement=placement, chunk=64)
    gpu = cs.precondition_census(*(t.cuda().bfloat16() for t in (q, k, v)), placement=placement, chunk=64)
    for key in COUNTS:
        np.testing.assert_array_equal(gpu[key], cpu[key], err_msg=key)
    np.testing.assert_array_equal(gpu["max_logit"], cpu["max_logit"])
    np.testing.assert_allclose(gpu["top1"], cpu["top1"], rtol=1e-6)
    n = cpu["n_conj"]
    for key, share in (("err_ulp", 0.5), ("err_pred", 0.1), ("err_ell", 0.1)):
        per_head = np.maximum(share * n, 2.0) / np.maximum(n, 1)
        assert (np.isnan(cpu[key]) == np.isnan(gpu[key])).all(), key
        diff = np.nan_to_num(gpu[key] - cpu[key])
        assert (np.abs(diff) <= per_head + 1e-9).all(), (key, np.abs(diff).max())
        pooled = (diff * n).sum() / max(n.sum(), 1)
        assert abs(pooled) <= 0.01, (key, pooled)


@pytest.mark.gpu
def test_authors_scores_are_their_einsum_under_autocast():
    """S of the authors' placement (FP32 product, one BF16 rounding) against their einsum under CUDA autocast. Both are
    one BF16 rounding of an FP32 dot product of D = 64 terms, summed in different orders (cuBLAS against our FP32
    matmul), so they differ by at most one BF16 ULP of the larger plus twice the FP32 summation bound γ_D·Σ|q_d k_d|
    (γ_D = D·u/(1 − D·u), u = 2⁻²⁴). Where S nearly cancels the second term is many BF16 ULPs of S (an H100 showed 14
    of 8.4 M scores more than one ULP apart, at most 20 ULPs, with reduced-precision BF16 reductions allowed or not)."""
    q, k, _ = attention_shaped(2, 4, 1024, 64, peaked=True, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        theirs = torch.einsum("...id,...jd->...ij", q, k) * 64 ** -0.5
    assert theirs.dtype == torch.bfloat16
    ours = cs.placement_scores(q.float(), k.float(), "authors", 64 ** -0.5, causal=False)
    D, u = q.shape[-1], 2.0 ** -24
    gamma = D * u / (1 - D * u)
    # Σ|q_d k_d|·scale in FP32 (its own rounding is < 1e-5 relative: the factor 1.01 covers it)
    mag = (q.float().abs() @ k.float().abs().transpose(-1, -2) * 64 ** -0.5).cpu().numpy() * 1.01
    ours, theirs = ours.cpu().numpy(), theirs.float().cpu().numpy()
    bound = ulp(np.maximum(np.abs(ours), np.abs(theirs))) + 2 * gamma * mag
    print(f"S equal on {(ours == theirs).mean():.6f}; more than one ULP apart: "
          f"{int((np.abs(ours - theirs) > ulp(theirs)).sum())} of {ours.size}")
    assert (np.abs(ours - theirs) <= bound).all()


@pytest.mark.gpu
def test_forward_rows_follows_the_authors_algorithm():
    """O of the authors' placement (paper profile, 512-key blocks) against their algorithm run under CUDA autocast
    on the same BF16 q, k, v. Which placement their code has is established bit for bit by chapter 2's placement
    experiment; here the two computations differ only in the FP32 order of their sums (cuBLAS against ours), and each
    differing order can move one BF16 rounding by one ULP. On the way to O there are at most 7 BF16 roundings per row
    (per 512-key tile: the tile's P̄V, the rescaled accumulator, the sum; then the division by ℓ), each of a value
    no larger than ℓ·max|V| before the division by ℓ, so |Δ O| ≤ 8 BF16 ULPs of max_j |V_jd| (feature d). An H100
    showed 97.3 % of O bit-identical on these peaked heads (printed)."""
    q, k, v = attention_shaped(2, 4, 1024, 64, peaked=True, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        theirs = authors_attention(q, k, v, causal=True, q_tile=512, k_tile=512).float()
    s = cs.placement_scores(q.float(), k.float(), "authors", 64 ** -0.5, causal=True)
    ours = cs.forward_rows(s, v.float(), cs.placement_numerics("authors"))
    vmax = v.float().abs().amax(dim=-2, keepdim=True).cpu().numpy()          # (B, H, 1, D)
    ours, theirs = ours.cpu().numpy(), theirs.cpu().numpy()
    print(f"O equal on {(ours == theirs).mean():.4f}")
    assert (ours == theirs).mean() > 0.5          # a different placement, not an order: chapter 2's experiment
    assert (np.abs(ours - theirs) <= 8 * ulp(vmax)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_census_at_the_monitors_shape(placement):
    q, k, v = attention_shaped(4, 12, 1024, 64, peaked=True, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    c = cs.precondition_census(q, k, v, placement=placement, chunk=8)
    peak_gb = (torch.cuda.max_memory_allocated() - base) / 2 ** 30
    assert peak_gb < 2.0, f"the census held {peak_gb:.2f} GiB at chunk 8"
    assert c["window_rate"].min() > 0.3 and np.isfinite(c["err_ulp"]).all() and np.isfinite(c["err_pred"]).all()
    assert (c["n_tied"] >= c["n_window"] + c["n_zero"]).all() and (c["r_hist"].sum(1) == c["n_tied"]).all()


@pytest.mark.gpu
def test_monitor_under_cuda_autocast_sees_bf16_and_matches_a_direct_census():
    from lib.monitor import PER_HEAD, AttentionMonitor
    from lib.training.model import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=4, n_embd=256, block_size=256, vocab_size=512, attn="sdpa")).cuda()
    x = torch.randint(0, 512, (6, 256), device="cuda")
    mon = AttentionMonitor(model, every=1, layers=[1], out=None, batch_rows=4)
    mon.step(0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = model(x, x)
    loss.backward()
    (rec,) = mon.collect(0)
    assert rec["qkv_dtype"] == "bfloat16" and rec["batch_rows"] == 4
    model.set_capture(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(x)
    cap = model.attn_layers[1].captured
    want = cs.precondition_census(cap["q"][:4], cap["k"][:4], cap["v"][:4], chunk=16)
    for key in PER_HEAD:
        got = np.array([np.nan if a is None else a for a in rec[key]])
        np.testing.assert_array_equal(got, want[key], err_msg=key)
    wq, _ = model.qk_weights(1)
    assert np.all(np.array(rec["sigma_wq"]) <= torch.linalg.matrix_norm(wq.detach().double(), 2).cpu().numpy()
                  * (1 + 1e-5))                     # a power-iteration estimate is a lower bound


@pytest.mark.gpu
def test_theory_error_on_the_gpu_is_the_cpus_bit_for_bit():
    """The census on CUDA evaluates the theory's mean where its pairs are: the same values as on the host."""
    g = torch.Generator().manual_seed(1)
    n = torch.randint(0, 20, (200000,), generator=g)
    rho = torch.randn(200000, generator=g, dtype=torch.float64) * 40
    rho[::7] = torch.round(rho[::7] * 2) / 2
    rho[::11], rho[3::17] = -0.0, float("nan")
    want = cs.theory_error(n.numpy(), rho.numpy())
    got = cs._theory_error_torch(n.cuda(), rho.cuda()).cpu().numpy()
    assert np.array_equal(want.view(np.int64), got.view(np.int64))
