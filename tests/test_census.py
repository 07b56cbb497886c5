"""lib/census.py on planted inputs with known answers (CPU).

Planted heads: every query row holds the same per-class scores w (D = 16 features, scale ¼), and key j is 4·(the
indicator of its classes), so S_ij = Σ_{c ∈ classes(j)} w_c exactly in FP32 and in BF16. Class 0 holds the tied
keys (score 8), class 1 the other keys (score 8 − g): a causal row i ≥ the second tied key has n_max = 2 and
r = (number of other keys it sees)·e^−g.
"""
import math

import numpy as np
import pytest
import torch

from lib import census as cs
from lib.fp import theory
from lib.fp.reference import emulate_forward
from lib.fp.rounding_bias import worked_example

D = 16
TOP = 8.0


def planted(scores, classes, v):
    """q, k, v (1, H, T, D) float32 of planted heads: scores (H, C) class scores, classes (H, T, C) 0/1 key classes
    (C ≤ D), v (H, T, D). S_ij = Σ_c scores[h, c]·classes[h, j, c] with the default scale D^−½ = ¼."""
    scores, classes = np.asarray(scores, np.float32), np.asarray(classes, np.float32)
    H, T, C = classes.shape
    q = np.zeros((H, T, D), np.float32)
    q[:, :, :C] = scores[:, None, :]
    k = np.zeros((H, T, D), np.float32)
    k[:, :, :C] = 4.0 * classes
    return tuple(torch.from_numpy(np.ascontiguousarray(x))[None] for x in (q, k, np.asarray(v, np.float32)))


def tie_head(T=64, tied=(1, 2), g=10.0, v_tied=None, v_other=-1.0):
    """(scores, classes, v) of one head: keys `tied` in class 0 (score 8), every other key in class 1 (8 − g)."""
    classes = np.zeros((T, 2))
    classes[:, 1] = 1
    classes[list(tied)] = [1, 0]
    v = np.full((T, D), v_other, np.float32)
    if v_tied is not None:
        v[list(tied)] = v_tied
    return np.array([TOP, TOP - g]), classes, v


def stack(*heads):
    return planted(*(np.stack(parts) for parts in zip(*heads)))


def worked_v():
    """V of the two tied keys: the paper's worked example (−2.40625, −2.296875) in every feature."""
    w = worked_example()
    return np.array([[w["a"]] * D, [w["b"]] * D], np.float32)


# ------------------------------------------------------------------------------------------------ the window
@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_worked_example_rows_are_window_and_conjunction(placement):
    T, g = 64, 10.0
    q, k, v = stack(tie_head(T, g=g, v_tied=worked_v()))
    c = cs.precondition_census(q, k, v, placement=placement)
    # rows 2..T−1 see both tied keys; r/n = (i − 1)·e^−10 / 2 ∈ [2.3e-5, 1.4e-3]: inside [2^−22, 2^−8)
    assert c["n_rows"][0] == T and c["n_tied"][0] == T - 2 and c["n_window"][0] == T - 2
    assert c["n_zero"][0] == 0 and c["tie_rate"][0] == (T - 2) / T == c["window_rate"][0]
    assert c["one_signed"][0] == 1.0 and c["n_conj"][0] == (T - 2) * D
    assert c["conjunction"][0] == (T - 2) / T
    assert c["max_logit"][0] == TOP and c["sink_rate"][0] == 1 / T      # row 0 sees only key 0
    assert c["r_hist"][0].sum() == T - 2
    lo, hi = np.searchsorted(cs.R_EDGES, [-22, -8])
    assert c["r_hist"][0, lo:hi].sum() == c["n_window"][0]              # the window is whole bins


@pytest.mark.parametrize("placement, o_bf16", [("authors", -2.359375), ("fa2", -2.34375)])
def test_worked_example_error_is_half_an_ulp_with_the_placements_sign(placement, o_bf16):
    """The tied pair sums to −4.703125, a BF16 midpoint. The authors' order rounds P̄V first: the remainder sets the
    sticky bit and the sum goes away from zero, O = −4.71875/2. FA2 normalises first: O/ℓ's remainder
    (−r + 2.35·r)/2 points toward zero, O = −2.34375. Both are ½ ULP (2⁻⁷) from the midpoint, opposite ways."""
    T, g = 64, 10.0
    q, k, v = stack(tie_head(T, g=g, v_tied=worked_v()))
    c = cs.precondition_census(q, k, v, placement=placement)
    w = worked_example()
    i = np.arange(2, T)                                  # window rows; each sees i − 1 other keys with V = −1
    p = math.exp(-g)
    o_ref = (w["a"] + w["b"] - (i - 1) * p) / (2 + (i - 1) * p)
    assert abs(o_bf16 - (w["a"] + w["b"]) / 2) == 2.0 ** -7          # half a BF16 ULP (2⁻⁶ in [2, 4))
    want = np.mean((o_bf16 - o_ref) * -1 / 2.0 ** -6)   # along sign(V) = −1; o_ref also moves by ≈ r/n
    assert np.sign(want) == (1 if placement == "authors" else -1)
    assert c["err_ulp"][0] == pytest.approx(want, rel=1e-9)


def enumeration_heads(g, T=8, tied=(1, 2)):
    """Every pair (v1, v2) of BF16 values in (−2, −1] as the two tied keys' V, 16 384 pairs over 1024 heads × 16
    features; T keys, the other keys' V = −1."""
    grid = -(1 + np.arange(128) / 128)
    v1, v2 = (x.reshape(-1, D) for x in np.meshgrid(grid, grid, indexing="ij"))
    heads = [tie_head(T, tied=tied, g=g, v_tied=np.stack([a, b])) for a, b in zip(v1, v2)]
    return stack(*heads)


def pooled(c, key):
    return float((c[key] * c["n_conj"]).sum() / c["n_conj"].sum())


def test_theory_matches_the_authors_placement_over_every_tied_pair():
    """All 128² tied pairs of one binade, k = 2, a remainder low in the window (e^−13 per other key): the mean
    error over the pairs is the theory's 1/4 − ρ/2 ULP plus the normalisation by ℓ rounded to 2 (err_ell), exactly."""
    q, k, v = enumeration_heads(13.0)
    c = cs.precondition_census(q, k, v, placement="authors", chunk=256)
    assert c["n_window"].sum() == 1024 * 6 and c["one_signed"].min() == 1.0
    err, pred, ell = pooled(c, "err_ulp"), pooled(c, "err_pred"), pooled(c, "err_ell")
    assert 0.249 < pred < 0.25                           # 1/4 − ρ/2 with ρ ≤ 6·e^−13·2⁷ ≈ 0.0017
    assert 0 < ell < 256 * 6 * math.exp(-13.0) / 2       # |O|/ulp(O) < 256 times r/n (row 7's is the largest)
    assert err > 0 and abs(err - pred - ell) < 1e-6     # exact decomposition, in ULPs: FP64 means of 6,144 pairs


def test_ties_split_across_the_authors_rounding_blocks_carry_no_bias():
    """With 64-key rounding blocks the tied keys 1 and 65 sit in different blocks: each block's P̄V is rounded with
    its own remainder before the tied terms meet, so their sum is an exact tie (no sticky bit): the theory at ρ = 0
    predicts 0, and the error is the normalisation (err_ell) less the dropped remainder, r_V/2 per ULP of O
    (r_V ≤ 70·e^−13 here, ULP ≥ 2⁻⁷)."""
    q, k, v = enumeration_heads(13.0, T=72, tied=(1, 65))
    split = cs.precondition_census(q, k, v, placement="authors", round_block=64, chunk=256)
    assert split["n_window"].sum() == 1024 * 7                 # rows 65-71
    err, pred, ell = pooled(split, "err_ulp"), pooled(split, "err_pred"), pooled(split, "err_ell")
    assert pred == 0 and 0 < ell - err < 70 * math.exp(-13.0) / 2 * 2 ** 7


def test_theory_predicts_the_fa2_placements_opposite_sign():
    """The same pairs in normalise-then-round (e^−10 per other key): the effective remainder r(2 − |Σ|)/(2 + r)
    points toward zero, so the theory predicts a negative mean, and FA2's FP32 arithmetic follows it; its ℓ is FP32,
    so the normalisation adds next to nothing."""
    q, k, v = enumeration_heads(10.0)
    c = cs.precondition_census(q, k, v, placement="fa2", chunk=256)
    err, pred, ell = pooled(c, "err_ulp"), pooled(c, "err_pred"), pooled(c, "err_ell")
    assert -0.25 < pred < -0.24 and err < 0 and abs(ell) < 1e-4
    assert abs(err - pred - ell) < 1e-4                  # FA2's FP32 arithmetic: a few eps32 per entry, in ULPs


# ------------------------------------------------------------------------------------------- outside the window
@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_large_remainder_is_tied_but_not_window(placement):
    T = 64
    q, k, v = stack(tie_head(T, g=2.0))                  # r/n ≥ e^−2/2 ≈ 0.068 ≫ 2^−8
    c = cs.precondition_census(q, k, v, placement=placement)
    assert c["n_tied"][0] == T - 2 and c["n_window"][0] == 0 and c["n_zero"][0] == 0
    assert c["n_conj"][0] == 0 and c["conjunction"][0] == 0
    assert np.isnan(c["one_signed"][0]) and np.isnan(c["err_ulp"][0]) and np.isnan(c["err_pred"][0])
    first = np.searchsorted(cs.R_EDGES, math.floor(math.log2(math.exp(-2.0) / 2)))
    assert c["r_hist"][0, :first - 1].sum() == 0 and c["r_hist"][0].sum() == T - 2


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_remainder_below_the_window_is_zero_rate(placement):
    T = 64
    # g = 20: r/n ≤ 62·e^−20/2 ≈ 6.4e-8 < 2^−22; g = 200: every other P̄ underflows, r = 0 exactly
    q, k, v = stack(tie_head(T, g=20.0), tie_head(T, g=200.0))
    c = cs.precondition_census(q, k, v, placement=placement)
    assert list(c["n_zero"]) == [T - 2, T - 2] and list(c["n_window"]) == [0, 0]
    assert list(c["zero_rate"]) == [(T - 2) / T] * 2 and list(c["n_conj"]) == [0, 0]
    assert c["r_hist"][1, 0] == T - 2                     # r = 0: the (−inf, −48) bin


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_the_window_edges(placement):
    """Row i sees i − 1 other keys: r/n = (i − 1)·e^−g / 2. g = 8 crosses 2^−8 between rows 24 and 25
    (3.86e-3 | 4.02e-3); g = 15 crosses 2^−22 between rows 2 and 3 (1.5e-7 | 3.1e-7)."""
    T = 64
    q, k, v = stack(tie_head(T, g=8.0), tie_head(T, g=15.0))
    c = cs.precondition_census(q, k, v, placement=placement)
    assert list(c["n_tied"]) == [T - 2, T - 2]
    assert list(c["n_window"]) == [23, T - 3] and list(c["n_zero"]) == [0, 1]


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_no_ties_sink_and_top1(placement):
    T, g = 64, 3.0
    q, k, v = stack(tie_head(T, tied=(0,), g=g))        # one maximum, at key 0: every row sinks there
    c = cs.precondition_census(q, k, v, placement=placement)
    assert c["n_tied"][0] == 0 and c["tie_rate"][0] == 0 and c["r_hist"][0].sum() == 0
    assert c["sink_rate"][0] == 1.0 and c["max_logit"][0] == TOP
    i = np.arange(T)                                     # row i sees i other keys
    # the census's FP32 softmax against FP64 (≤ T·eps32/2 of the row sum ≈ 4e-6 worst case, ~1e-7 as a mean)
    assert c["top1"][0] == pytest.approx(np.mean(1 / (1 + i * math.exp(-g))), rel=1e-6)


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_causal_masking_hides_a_later_tie(placement):
    T = 64
    q, k, v = stack(tie_head(T, tied=(5, 40), g=10.0))
    causal = cs.precondition_census(q, k, v, placement=placement)
    full = cs.precondition_census(q, k, v, placement=placement, causal=False)
    # rows 1-4 see only other keys, equal to each other: tied with r = 0 (zero); rows ≥ 40 see both tied keys
    assert causal["n_tied"][0] == T - 40 + 4 and causal["n_window"][0] == T - 40 and causal["n_zero"][0] == 4
    assert full["n_tied"][0] == T and full["n_window"][0] == T   # r/n = 62·e^−10/2 ≈ 1.4e-3 < 2^−8
    assert causal["sink_rate"][0] == 5 / T and full["sink_rate"][0] == 0


def test_the_placements_define_ties_differently():
    """Head 0: scores 8 and 8 − 2⁻⁷ — equal once S is BF16 (authors), but exp(−2⁻⁷) rounds to 0.992 (not fa2).
    Head 1: 0.25 and 0.25 − 2⁻¹⁰ — distinct BF16 scores (not authors), but exp(−2⁻¹⁰) rounds to 1 (fa2)."""
    T = 32
    heads = []
    for top, d in ((TOP, 2.0 ** -7), (0.25, 2.0 ** -10)):
        classes = np.zeros((T, 3))
        classes[:, 2] = 1                                # other keys: class 2, far below
        classes[0] = [1, 0, 0]
        classes[4] = [1, 1, 0]                           # S = top − d through class 1's score −d
        heads.append((np.array([top, -d, top - 30]), classes, np.full((T, D), -1.0)))
    q, k, v = stack(*heads)
    a = cs.precondition_census(q, k, v, placement="authors")
    f = cs.precondition_census(q, k, v, placement="fa2")
    assert list(a["n_tied"]) == [T - 4, 0] and list(f["n_tied"]) == [0, T - 4]


# ------------------------------------------------------------------------------------------ the oracle, chunks
def oracle_heads(T=1100):
    """Planted heads over three 512-key rounding blocks in which every FP32 sum is exact but the BF16 roundings
    bite: tied V are full BF16 mantissas in (−2, −1] (their sums are often midpoints), the other keys' V small
    integers (up to 64, and 2¹⁴ for a lower maximum, in half the features, so that the roundings of P̄ and α show),
    the other keys 8 − 2⁻⁶ below the top (S − m = −7.984375 rounds to −8 in BF16), so that each P̄·V is a multiple of
    2⁻²⁰. Heads: ties inside one block; split across blocks (an exact tie, or a sticky bit without the
    per-block rounding of P̄V); an earlier lower maximum 9 − 2⁻⁷ below (the α rescale, with its exponent rounded);
    n_max = 4 after two lower maxima; three ties in three blocks, each block's remainder just under half an ULP of ℓ
    (the per-block rounding of ℓ)."""
    rng = np.random.default_rng(0)
    spread = [int(j) for j in rng.choice(T, 12, replace=False)]
    blocks = [*range(200, 210), *range(700, 710), *range(1060, 1070)]
    out = []
    for tied, lower, near in (((600, 700), (), spread), ((100, 900), (), spread), ((520, 530, 560), (10,), spread),
                              ((1030, 1040, 1050, 1060), (300, 520), spread), ((100, 600, 1050), (), blocks)):
        classes = np.zeros((T, 4))
        classes[:, 3] = 1                                # far keys: P̄ = 0
        classes[near] = [0, 0, 1, 0]
        classes[list(lower)] = [0, 1, 0, 0]
        classes[list(tied)] = [1, 0, 0, 0]
        v = rng.integers(-2, 3, (T, D)).astype(np.float32)
        v[near, :8] = rng.integers(-64, 65, (len(near), 8))     # remainders of an ULP or more: P̄'s roundings show
        v[list(lower), :8] = 2.0 ** 14                           # α·V of the earlier maximum ≈ the tied sum
        v[list(tied)] = -rng.integers(128, 256, (len(tied), D)) / 128.0
        out.append((np.array([TOP, TOP - 9 + 2 ** -7, TOP - 8 + 2 ** -6, TOP - 200]), classes, v))
    return stack(*out)


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_forward_rows_is_bit_exact_against_the_oracle(placement):
    q, k, v = oracle_heads()
    nm = cs.placement_numerics(placement)
    s = cs.placement_scores(q[0], k[0], placement, 0.25, True)
    ours = cs.forward_rows(s, v[0], nm).numpy()
    # 256-row query tiles: with round to nearest even a row's O does not depend on the query tiling (fewer loops)
    ref = emulate_forward(q[0], k[0], v[0], nm, causal=True, block_m=256).o
    assert np.array_equal(ours, ref)
    assert nm.round_block == (512 if placement == "authors" else 0)
    # the planted rows exercise what they should: the authors' tied rows are in the window
    c = cs.precondition_census(q, k, v, placement=placement)
    assert c["n_window"].min() > 0


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_chunk_size_does_not_change_the_census(placement):
    torch.manual_seed(1)
    q, k, v = stack(tie_head(64, g=10.0), tie_head(64, tied=(3, 9, 30), g=9.0), tie_head(64, g=20.0))
    q = torch.cat([q, (torch.randn_like(q) * 8).bfloat16().float()])       # a second batch row, random
    k = torch.cat([k, torch.randn_like(k).bfloat16().float()])
    v = torch.cat([v, torch.randn_like(v).bfloat16().float()])
    ref = cs.precondition_census(q, k, v, placement=placement, chunk=6)
    for chunk in (1, 4):
        got = cs.precondition_census(q, k, v, placement=placement, chunk=chunk)
        for key in ref:
            np.testing.assert_array_equal(got[key], ref[key], err_msg=key)


def test_pooling_two_batches_equals_the_census_of_both():
    torch.manual_seed(2)
    q, k, v = stack(tie_head(64, g=10.0), tie_head(64, tied=(3, 9), g=9.5))
    q2, k2, v2 = stack(tie_head(64, g=12.0), tie_head(64, g=2.0))
    both = cs.precondition_census(torch.cat([q, q2]), torch.cat([k, k2]), torch.cat([v, v2]))
    pool = cs.pool_census([cs.precondition_census(q, k, v), cs.precondition_census(q2, k2, v2)])
    for key in both:
        np.testing.assert_allclose(pool[key], both[key], rtol=1e-12, err_msg=key)   # counts and FP64 sums
    # head 1: rows ≥ 9 of batch row 0 in the window (rows 1, 2 tie among other keys, r = 0); batch row 1 tied only
    assert both["n_window"][1] == 55 and both["n_zero"][1] == 2 and both["n_tied"][1] == 57 + 62


def test_theory_error_is_lib_fp_theory():
    rng = np.random.default_rng(0)
    rho = np.concatenate([rng.uniform(-5, 5, 300), np.arange(-8, 9) / 2, [1e-9, -1e-9]])
    for k in (1, 2, 3, 4, 7):
        # FP64 both, the same formula in other arrangements (values ≤ 1 ULP): ~1e-16
        np.testing.assert_allclose(cs.theory_error(k, rho), theory.expected_error_float(k, rho), atol=1e-12)
    assert cs.theory_error(2, 0.0) == 0 and cs.theory_error(2, 0.25) == pytest.approx(0.25 - 0.125)
    assert cs.theory_error(17, 0.1) == 0 and cs.theory_error(2, -200.0) == 0      # outside the theory's range


def test_inputs_must_hold_bf16_values():
    q = torch.randn(1, 1, 8, D)
    with pytest.raises(ValueError, match="BF16"):
        cs.precondition_census(q, q, q)
    with pytest.raises(ValueError, match="placement"):
        cs.precondition_census(q.bfloat16(), q.bfloat16(), q.bfloat16(), placement="sdpa")


def test_the_benchmark_runs_in_smoke_mode():
    from benchmarks.bench_census import main
    rows = main(["--smoke"])
    assert [(r["inputs"], r["placement"]) for r in rows] == [(i, p) for i in ("diffuse", "peaked")
                                                             for p in cs.PLACEMENTS]
    peaked = [r for r in rows if r["inputs"] == "peaked"]
    assert all(r["window_rate"] > 0.3 and r["ms"] > 0 for r in peaked)      # the worst case is exercised


def test_theory_error_on_tensors_is_the_same_bit_for_bit():
    """The census's GPU path evaluates the theory's mean on tensors (`_theory_error_torch`); on the same pairs it
    gives `theory_error`'s values bit for bit: remainders inside half-intervals, on ½ℤ (0 and −0 among them), outside
    the theory's range, NaN, and tie counts outside 1–16."""
    g = torch.Generator().manual_seed(0)
    n = torch.randint(0, 20, (20000,), generator=g)
    rho = torch.randn(20000, generator=g, dtype=torch.float64) * 40
    rho[::7] = torch.round(rho[::7] * 2) / 2
    rho[::11], rho[5::13], rho[3::17], rho[4::19] = 0.0, -0.0, float("nan"), -1e6
    want = cs.theory_error(n.numpy(), rho.numpy())
    got = cs._theory_error_torch(n, rho).numpy()
    assert np.array_equal(want.view(np.int64), got.view(np.int64))
    assert (want != 0).sum() > 1000      # most pairs are inside the theory's range
