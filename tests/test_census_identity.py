"""`lib.census.precondition_census` returns the same bits as before its speed-up (CPU).

`old_precondition_census` below is a frozen copy of the census as it was at commit c4667b1 (before the fast path):
its helpers verbatim, renamed with an ``old`` prefix. The tests compare every returned array (np.array_equal and the
dtype) on small inputs: planted window rows (both placements, causal and not, several chunk sizes, the authors'
64-key rounding blocks), random heads and a mixture.
"""
import math

import numpy as np
import pytest
import torch

from lib import census as cs
from lib.census import _M, _MAX_K, R_EDGES, WINDOW_HI, WINDOW_LO, placement_numerics, PLACEMENTS
from lib.fp import theory
from lib.fp.numerics import Numerics, tiles_per_round_block


# ------------------------------------------------------------------------------ the frozen census (c4667b1)
def old_bf16(x: torch.Tensor) -> torch.Tensor:
    """Round to the BF16 grid (round to nearest even: torch's cast, on the CPU and the GPU), keeping x's dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


def old_ulp(x: torch.Tensor) -> torch.Tensor:
    """BF16 spacing at |x| (float64), as `lib.fp.bf16.ulp`: 2^(⌊log2|x|⌋ − 7), exponent floored at −126, 0 → 2⁻⁷."""
    a = x.abs().to(torch.float64)
    _, e = torch.frexp(torch.where(a > 0, a, torch.ones_like(a)))       # a = f·2^e, f ∈ [½, 1)
    return torch.ldexp(torch.ones_like(a), (e - 1).clamp_min(-126) - _M)


def old_placement_scores(q: torch.Tensor, k: torch.Tensor, placement: str, scale: float, causal: bool) -> torch.Tensor:
    """S (..., T, T) float32 of q, k (..., T, D) float32 (BF16 values) as the placement forms it (module docstring);
    causally masked entries are −inf."""
    s = torch.matmul(q, k.transpose(-2, -1))                # FP32 accumulation of exact BF16 products
    s32 = torch.tensor(scale, dtype=torch.float32).item()    # the scale as the FP32 opmath scalar it becomes
    s = old_bf16(old_bf16(s) * s32) if placement == "authors" else s * s32
    if causal:
        T = s.shape[-1]
        above = torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(above, float("-inf"))
    return s


def old_forward_rows(s: torch.Tensor, v: torch.Tensor, numerics: Numerics, block_n: int = 64,
                 return_l: bool = False):
    """O (..., R, D) float32 of FA2's forward on rows of scores, with the rounding points of `numerics` (and the
    final row sum ℓ (..., R) as the placement holds it, when `return_l`).

    s: (..., R, T) float32 scores as formed (already rounded if the placement rounds S; masked entries −inf; a row
    of −inf gives O = 0); v: (..., T, D) float32 holding BF16 values; keys are visited in logical rounding blocks of
    `tiles_per_round_block(numerics.round_block, block_n, T)·block_n` keys, in the order and with the roundings of
    `lib.fp.reference.emulate_forward` (its module docstring): one max, α rescale and rounding of ℓ, P̄V and the
    accumulator per block. Within a block P̄V is one FP32 matmul and ℓ one FP32 sum (the authors' einsum over their
    512-key tile; the emulator sums 64-key tiles, which is the same wherever FP32 arithmetic is exact). Round to
    nearest even with BF16's 7 mantissa bits only (torch's casts)."""
    nm = numerics
    if nm.mantissa_bits != _M or nm.rounding != "rne":
        raise ValueError(f"forward_rows emulates BF16 round-to-nearest-even only, got mantissa_bits="
                         f"{nm.mantissa_bits}, rounding={nm.rounding!r}")
    rnd = old_bf16
    T = s.shape[-1]
    width = tiles_per_round_block(nm.round_block, block_n, T) * block_n
    neg_inf = float("-inf")
    m = torch.full(s.shape[:-1], neg_inf, dtype=torch.float32, device=s.device)
    ell = torch.zeros_like(m)
    acc = torch.zeros((*s.shape[:-1], v.shape[-1]), dtype=torch.float32, device=s.device)
    for j0 in range(0, T, width):
        s_b = s[..., j0:j0 + width]
        m_new = torch.maximum(m, s_b.amax(-1))
        m_use = torch.where(m_new == neg_inf, torch.zeros_like(m_new), m_new)
        e = m - m_use
        alpha = torch.exp(rnd(e) if nm.round_s_minus_m else e)
        x = s_b - m_use[..., None]
        p = torch.exp(rnd(x) if nm.round_s_minus_m else x)
        p_op = rnd(p) if nm.round_p else p
        ell = ell * alpha + (p_op if nm.rowsum_rounded_p else p).sum(-1)
        if nm.round_l:
            ell = rnd(ell)
        acc = acc * alpha[..., None]
        if nm.round_acc:
            acc = rnd(acc)
        pv = torch.matmul(p_op, v[..., j0:j0 + width, :])
        acc = acc + (rnd(pv) if nm.round_pv else pv)
        if nm.round_acc:
            acc = rnd(acc)
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    if not nm.normalize_then_round:
        acc, ell = rnd(acc), rnd(ell)
    o = acc / ell[..., None]
    o = rnd(o) if nm.round_o else o
    return (o, ell) if return_l else o


def old_theory_error(n, rho) -> np.ndarray:
    """Chapter 1's exact mean error (ULPs of the sum) of rounding n same-sign tied BF16 terms plus a remainder rho
    (units of the terms' ULP; negative = against the terms), elementwise over arrays n (int) and rho (float64).

    The same values as `lib.fp.theory.expected_error_float(n, rho)`, evaluated cheaply for many pairs: that mean is
    linear in ρ between consecutive multiples of ½ (every rounding boundary and binade edge of S + ρ, S an integer,
    lies on ½ℤ), so each pair reads the line through two points of its half-interval, and a ρ exactly on ½ℤ (ρ = 0:
    no remainder) is evaluated there. 0 outside the theory's range: n > 16 or ρ ≤ −64·n (module docstring)."""
    n = np.asarray(n, dtype=np.int64)
    rho = np.asarray(rho, dtype=np.float64)
    n, rho = np.broadcast_arrays(n, rho)
    out = np.zeros(n.shape, dtype=np.float64)
    ok = (n >= 1) & (n <= _MAX_K) & (rho > -(2 ** (_M - 1)) * n) & np.isfinite(rho)
    for k in np.unique(n[ok]):
        sel = ok & (n == k)
        r = rho[sel]
        half = np.floor(2.0 * r)
        on_edge = half == 2.0 * r
        a = half / 2 + 0.125                      # two points inside the open half-interval (half/2, half/2 + ½)
        pts, inv = np.unique(np.concatenate([a, a + 0.25, r]), return_inverse=True)
        f = theory.expected_error_float(int(k), pts, _M)[inv].reshape(3, -1)
        out[sel] = np.where(on_edge, f[2], f[0] + (f[1] - f[0]) * (r - a) / 0.25)
    return out


def old_window_errors(s, at, win, v, placement, nm, block_n):
    """Per conjunction pair of one chunk, as 1-D tensors: chunk index, n_max, ρ, the factor from ULPs of the sum
    to ULPs of O, the error and its normalisation part (ULPs of O).

    s, at: (c, T, T) scores and tie mask; win: (c, T) window rows; v: (c, T, D) float32."""
    g, i = win.nonzero(as_tuple=True)                       # sorted by g, then i
    counts = torch.bincount(g, minlength=s.shape[0])
    r_max = int(counts.max())
    pos = torch.arange(g.numel(), device=s.device) - (torch.cumsum(counts, 0) - counts)[g]
    c, T = s.shape[:2]
    s_w = torch.full((c, r_max, T), float("-inf"), dtype=s.dtype, device=s.device)
    s_w[g, pos] = s[g, i]
    at_w = torch.zeros((c, r_max, T), dtype=torch.bool, device=s.device)
    at_w[g, pos] = at[g, i]
    valid = torch.zeros((c, r_max), dtype=torch.bool, device=s.device)
    valid[g, pos] = True
    o, ell = old_forward_rows(s_w, v, nm, block_n, return_l=True)
    o = o.to(torch.float64)
    # FP64 softmax·V on the same S
    s64, v64 = s_w.to(torch.float64), v.to(torch.float64)
    m64 = s64.amax(-1, keepdim=True)
    p64 = torch.exp(s64 - torch.where(torch.isfinite(m64), m64, torch.zeros_like(m64)))
    ell64 = p64.sum(-1, keepdim=True)
    o_ref = torch.matmul(p64, v64) / torch.where(ell64 > 0, ell64, torch.ones_like(ell64))
    at64 = at_w.to(torch.float64)
    tied_sum = torch.matmul(at64, v64)                      # Σ over the tied keys of V, exact in FP64
    n = at_w.sum(-1, keepdim=True)
    signs = torch.matmul(at_w.to(torch.float32), torch.cat([v > 0, v < 0], -1).to(torch.float32))  # exact counts
    n_pos, n_neg = signs.split(v.shape[-1], -1)
    one = valid[..., None] & ((n_pos == n) | (n_neg == n))
    sign = torch.where(n_pos == n, 1.0, -1.0).to(torch.float64)
    ulp_o = old_ulp(o_ref)
    err = (o - o_ref) * sign / ulp_o
    # what normalising by the placement's ℓ instead of the exact one does to O (BF16 ℓ ≈ n_max drops r: |O| grows)
    err_ell = o_ref * sign * (ell64 / ell.to(torch.float64)[..., None] - 1) / ulp_o
    if placement == "authors":
        # the remainder inside the tied keys' rounding block; none where the ties sit in different blocks
        width = tiles_per_round_block(nm.round_block, block_n, T) * block_n
        keys = torch.arange(T, device=s.device)
        first = torch.where(at_w, keys, T).amin(-1)
        last = torch.where(at_w, keys, -1).amax(-1)
        same = (first // width) == (last // width)
        in_blk = (keys // width == (first // width)[..., None]) & same[..., None] & ~at_w
        rem = torch.matmul(p64 * in_blk, v64)
    else:
        rem = n * o_ref - tied_sum                          # the effective remainder of O/ℓ (normalise then round)
    q_unit = old_ulp(tied_sum / n.clamp_min(1))
    rho = rem * sign / q_unit
    factor = old_ulp(tied_sum + rem) / (n.clamp_min(1) * old_ulp(o_ref))   # ULPs of the sum → ULPs of O
    gi, ri, fi = one.nonzero(as_tuple=True)
    return gi, n[gi, ri, 0], rho[gi, ri, fi], factor[gi, ri, fi], err[gi, ri, fi], err_ell[gi, ri, fi]


def old_classify(s: torch.Tensor, placement: str) -> tuple:
    """(row max, FP32 P̄, tie mask (..., T, T), r/n_max (FP64), tied rows, window rows) of scores s (..., T, T)."""
    mx = s.amax(-1, keepdim=True)
    p = torch.exp(s - mx)                                # FP32 P̄ (masked keys: 0)
    at = (s == mx) if placement == "authors" else (old_bf16(p) == 1)
    n = at.sum(-1)
    ratio = p.masked_fill(at, 0).sum(-1).to(torch.float64) / n
    tied = n >= 2
    win = tied & (ratio >= WINDOW_LO) & (ratio < WINDOW_HI)
    return mx, p, at, ratio, tied, win


@torch.no_grad()
def old_precondition_census(q, k, v, *, causal: bool = True, placement: str = "authors", scale=None,
                        round_block: int = 512, block_n: int = 64, chunk: int = 8) -> dict:
    """The census of the tie bias's preconditions per head (module docstring: definitions and returned keys).

    q, k, v: (B, H, T, D) BF16, or float32 holding BF16 values (CPU); every computation runs in torch on q's
    device. scale: default D^−½. round_block: the authors' rounding block in keys (512 as in their model; 0 = the
    64-key compute tile, −1 = the whole row); block_n: the compute tile width (keys). chunk: (b, h) matrices per
    pass (memory ≲ 50·chunk·T² bytes, most of it only when every row is in the window); results do not depend
    on it."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if not (q.dim() == 4 and q.shape == k.shape and q.shape[:3] == v.shape[:3]):
        raise ValueError(f"q, k, v must be (B, H, T, D) with one shape for q and k, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    xs = []
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"{name} must be bfloat16 or float32 holding BF16 values, got {t.dtype}")
        t = t.detach().to(torch.float32)
        if not torch.equal(old_bf16(t), t):
            raise ValueError(f"{name} holds values that are not BF16 values (round it to BF16 first)")
        xs.append(t)
    nm = placement_numerics(placement, round_block)
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q3, k3, v3 = (t.reshape(B * H, T, t.shape[-1]) for t in xs)
    dev = q.device
    heads = torch.arange(B * H, device=dev) % H
    f64 = dict(dtype=torch.float64, device=dev)
    acc = {name: torch.zeros(H, **f64) for name in ("n_tied", "n_window", "n_zero", "sink", "top1")}
    max_logit = torch.full((H,), float("-inf"), **f64)
    inner = torch.tensor(R_EDGES[1:-1], **f64)
    n_bins = len(R_EDGES) - 1
    hist = torch.zeros(H * n_bins, **f64)
    pairs = []
    for c0 in range(0, B * H, chunk):
        sl = slice(c0, c0 + chunk)
        h = heads[sl]
        s = old_placement_scores(q3[sl], k3[sl], placement, scale, causal)
        mx, p, at, ratio, tied, win = old_classify(s, placement)
        for name, x in (("n_tied", tied), ("n_window", win), ("n_zero", tied & (ratio < WINDOW_LO)),
                        ("sink", s[..., 0] == mx[..., 0]), ("top1", 1.0 / p.sum(-1).to(torch.float64))):
            acc[name].index_add_(0, h, x.to(torch.float64).sum(-1))
        max_logit.scatter_reduce_(0, h, s.amax((-2, -1)).to(torch.float64), reduce="amax")
        bins = torch.bucketize(torch.log2(ratio), inner, right=True)     # [lo, hi) bins
        hist.index_add_(0, (h[:, None] * n_bins + bins)[tied], torch.ones_like(ratio)[tied])
        if bool(win.any()):
            gi, *rest = old_window_errors(s, at, win, v3[sl], placement, nm, block_n)
            pairs.append((h[gi], *rest))
    n_rows = np.full(H, float(B * T))
    out = {key: acc[key].cpu().numpy() for key in ("n_tied", "n_window", "n_zero")}
    out.update(n_rows=n_rows, tie_rate=out["n_tied"] / n_rows, window_rate=out["n_window"] / n_rows,
               zero_rate=out["n_zero"] / n_rows, sink_rate=acc["sink"].cpu().numpy() / n_rows,
               top1=acc["top1"].cpu().numpy() / n_rows, max_logit=max_logit.cpu().numpy(),
               r_hist=hist.reshape(H, n_bins).cpu().numpy(), r_edges=R_EDGES.copy())
    n_conj = np.zeros(H)
    sums = dict(err_ulp=np.zeros(H), err_pred=np.zeros(H), err_ell=np.zeros(H))
    if pairs:
        hp, nk, rho, fac, err, ell = (torch.cat(cols).cpu().numpy() for cols in zip(*pairs))
        n_conj = np.bincount(hp, minlength=H).astype(np.float64)
        for key, x in (("err_ulp", err), ("err_pred", old_theory_error(nk, rho) * fac), ("err_ell", ell)):
            sums[key] = np.bincount(hp, weights=x, minlength=H)
    with np.errstate(invalid="ignore", divide="ignore"):
        out.update(n_conj=n_conj, conjunction=n_conj / (n_rows * D), one_signed=n_conj / (out["n_window"] * D),
                   **{key: x / n_conj for key, x in sums.items()})
    return out



# ------------------------------------------------------------------------------------------------ the inputs
def _oracle():
    from tests.test_census import oracle_heads
    return oracle_heads()


def _split_ties():
    from tests.test_census import enumeration_heads
    return enumeration_heads(13.0, T=72, tied=(1, 65))


def _planted(frac=0.7, seed=0, B=2, H=4, T=256):
    from benchmarks.bench_census_sections import planted_heads
    return planted_heads(B, H, T, 64, frac=frac, seed=seed)


def _shaped(peaked, seed, shape=(2, 3, 300, 32)):
    from benchmarks.bench_census import attention_shaped
    return attention_shaped(*shape, peaked=peaked, device="cpu", seed=seed)


CASES = {
    "oracle": (_oracle, [dict(causal=True, chunk=2), dict(causal=False, chunk=8)]),
    "split-ties": (_split_ties, [dict(round_block=64, chunk=256)]),
    "planted": (_planted, [dict(causal=True, chunk=3), dict(causal=False, chunk=8),
                           dict(causal=True, round_block=-1, chunk=8), dict(causal=True, round_block=0, block_n=32)]),
    "peaked": (lambda: _shaped(True, 5), [dict(causal=True, chunk=2), dict(causal=False, chunk=4)]),
    "random": (lambda: _shaped(False, 6), [dict(causal=True), dict(causal=False, chunk=1)]),
    "mixed": (lambda: tuple(torch.cat([a, b], 1) for a, b in zip(_planted(0.9, 3, H=2, T=300), _shaped(False, 7, (2, 3, 300, 64)))),
              [dict(causal=True, chunk=3)]),
}


def assert_same_census(new, old):
    assert new.keys() == old.keys()
    for key in old:
        a, b = np.asarray(new[key]), np.asarray(old[key])
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert np.array_equal(a, b, equal_nan=True), key
        assert np.array_equal(np.signbit(a), np.signbit(b)), key     # zeros' signs too


# --------------------------------------------------------------------------------------------- bit identity
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_census_returns_the_bits_of_the_frozen_copy(case, placement):
    make, kwargs = CASES[case]
    q, k, v = make()
    for kw in kwargs:
        new = cs.precondition_census(q, k, v, placement=placement, **kw)
        old = old_precondition_census(q, k, v, placement=placement, **kw)
        assert_same_census(new, old)
        if case in ("oracle", "split-ties", "planted", "peaked") and placement == "authors" or case == "planted":
            assert new["n_conj"].sum() > 0               # the error path is exercised


def test_theory_error_returns_the_bits_of_the_frozen_copy():
    rng = np.random.default_rng(0)
    m = 20000
    n = rng.choice([0, 1, 2, 3, 4, 5, 8, 16, 17], m)
    rho = np.concatenate([rng.uniform(-70, 70, m // 2) * rng.choice([1e-3, 1, 10], m // 2),
                          np.floor(rng.uniform(-300, 300, m // 2)) / 2])           # half of them on ½ℤ
    rho[:40] = [-0.0, 0.0, np.nan, np.inf, -np.inf, -128.0, -127.5, -256.0, 1e300, -1e-300] * 4
    rho = rng.permutation(rho)
    a, b = cs.theory_error(n, rho), old_theory_error(n, rho)
    assert a.dtype == b.dtype and np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))
    for k_, r_ in ((2, 0.25), (2, 0.0), (3, -0.5), (17, 0.1)):
        assert np.array_equal(cs.theory_error(k_, r_), old_theory_error(k_, r_))


@pytest.mark.parametrize("x", [[3.0, -0.0, 0.0, 5.0, 3.0, -7.0], [], [2.0 ** 60, 1.0, 1.0], [1e300, -1e300, 0.0],
                               list(np.floor(np.random.default_rng(0).uniform(-50, 50, 1000)))])
def test_distinct_integers_is_np_unique(x):
    """By counting (short spans) or by sorting (long ones): np.unique's values (−0 as 0) and inverse."""
    x = np.asarray(x, dtype=np.float64)
    vals, inv = cs._distinct_integers(x)
    want, want_inv = np.unique(x, return_inverse=True)
    assert vals.dtype == np.float64 and np.array_equal(vals, want) and np.array_equal(inv, want_inv)
    assert np.array_equal(vals[inv], x)


@pytest.mark.parametrize("scale", [0.125, 0.25, 0.1, 1 / math.sqrt(12), 2.0 ** -130])
def test_the_authors_scores_round_as_before(scale):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 64, 16, generator=g).mul(4).bfloat16().float() for _ in range(2))
    q[0, :4] *= 2.0 ** 100                                 # FP32 overflow of the products: ±inf, NaN
    for placement in PLACEMENTS:
        for causal in (True, False):
            new = cs.placement_scores(q, k, placement, scale, causal)
            old = old_placement_scores(q, k, placement, scale, causal)
            assert torch.equal(new.isnan(), old.isnan())
            assert torch.equal(new.nan_to_num(0.0).view(torch.int32), old.nan_to_num(0.0).view(torch.int32))


def test_the_fa2_tie_test_is_a_threshold():
    """bf16(P̄) == 1 ⇔ P̄ ≥ 1 − 2⁻⁹ on every FP32 value of [1 − 2⁻⁶, 1 + 2⁻⁸] (the midpoint 1 − 2⁻⁹ rounds to even,
    1.0) and on random values of [0, 1]."""
    lo, hi = (torch.tensor(x, dtype=torch.float32).view(torch.int32).item() for x in (1 - 2 ** -6, 1 + 2 ** -8))
    p = torch.cat([torch.arange(lo, hi + 1, dtype=torch.int32).view(torch.float32), torch.rand(100000),
                   torch.tensor([0.0, -0.0, float("nan")])])
    assert torch.equal(old_bf16(p) == 1, p >= 1.0 - 2.0 ** -9)


# ------------------------------------------------------------------------------------------ the fast paths
def test_theory_error_evaluates_the_mean_at_few_points(monkeypatch):
    """The exact mean is evaluated at the distinct points read (two per half-interval, the ρ on ½ℤ), not three
    per pair as before."""
    q, k, v = _planted(1.0, 1, B=1, H=4, T=512)
    calls = []
    real = theory.expected_error_float
    monkeypatch.setattr(theory, "expected_error_float", lambda k_, pts, m=7: calls.append(np.size(pts)) or
                        real(k_, pts, m))
    c = cs.precondition_census(q, k, v, placement="fa2")
    new_points = sum(calls)
    calls.clear()
    old = old_precondition_census(q, k, v, placement="fa2")
    assert_same_census(c, old)
    pairs = c["n_conj"].sum()
    assert pairs > 10000 and sum(calls) > pairs             # before: every distinct ρ (and the two points)
    assert new_points < pairs / 20


def _fp64_blocks(fn, *args, **kwargs):
    """How many FP64 tensors of ≥ 2¹⁸ elements `fn`'s torch ops allocate (in-place results and views excluded)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for t in tree_leaves(out):
                if (isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel() >= 2 ** 18
                        and t.untyped_storage().data_ptr() not in seen):
                    Count.n += 1
            return out

    with Count():
        fn(*args, **kwargs)
    return Count.n


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_the_window_rows_fp64_block_is_made_once_per_chunk(placement, monkeypatch):
    """The (c, r_max, T) FP64 block of the window rows' exact softmax is one buffer, reused in place for P̄, the
    authors' in-block P̄ and the tie mask (before: a fresh block for S, S − m, P̄, the tie mask and the masked P̄)."""
    q, k, v = _planted(1.0, 2, B=1, H=8, T=256)            # one chunk of 8 heads, ≈ 240 window rows each
    zeros = lambda n, rho: np.zeros(np.shape(rho))          # noqa: E731  (numpy: not counted, and slow before)
    monkeypatch.setattr(cs, "theory_error", zeros)
    monkeypatch.setitem(globals(), "old_theory_error", zeros)
    new = _fp64_blocks(cs.precondition_census, q, k, v, placement=placement)
    old = _fp64_blocks(old_precondition_census, q, k, v, placement=placement)
    assert new == 1 and old == (5 if placement == "authors" else 4)


def test_the_sections_benchmark_runs_in_smoke_mode():
    from benchmarks.bench_census_sections import main
    rows = main(["--smoke", "--reps", "1", "--inputs", "peaked", "random", "--op-model"])
    assert len(rows) == 4 and all(r["identical"] for r in rows)
    assert all(r[t]["model"]["ops"] > 0 and r[t]["model"]["est_ms"] > 0 for r in rows for t in ("old", "new"))
    assert all(r["new"]["total"] > 0 and r["old"]["total"] > 0 for r in rows)
