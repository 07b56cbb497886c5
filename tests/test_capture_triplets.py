"""`top_triplets_gram` (FP64 Gram matrix + eigh) against `torch.linalg.svd` (`top_triplets`, what the capture hook used before it)."""
import pytest
import torch

from lib.training.capture import top_triplets_gram
from tests.precision import EPS32        # 2^-23, twice FP32's unit roundoff: rounding moves a value ≤ eps32/2 relative

GAP = 1.01          # vectors are compared where σ₁/σ₂ ≥ GAP (below it the top vector is ill-determined)
# Against an FP64 SVD: `top_triplets_gram` works in FP64 (its error ~1e-16·λ₁/(λ₁ − λ₂), as is the FP64 SVD's),
# then rounds u, σ, v to FP32: σ moves ≤ eps32/2 relative, u by a vector of norm ≤ eps32/2 (so u·u_ref ≥ 1 − eps32/2).
# One eps32 for both is twice the rounding, and no machine's FP64 LAPACK comes near it.
FP64_TOLS = (EPS32, EPS32)


def _fp32_tols(w: torch.Tensor) -> tuple[float, float]:
    """(σ relative, 1 − u·u_ref) tolerances against an FP32 `torch.linalg.svd` of `w` (…, m, n), from FP32's precision
    rather than from one machine's LAPACK (whose σ₁ was 6–9·eps32 off the FP64 one, depending on the machine).
    The FP32 SVD is backward stable: it is the exact SVD of W + E, ‖E‖₂ ≤ p·eps32·‖W‖₂, p a modest function of m, n
    (LAPACK Users' Guide §4.9); here p = m + n. Weyl: |σ̂₁ − σ₁| ≤ ‖E‖₂ ≤ p·eps32·σ₁. Wedin: its top vectors turn by
    sin θ ≤ ‖E‖₂ / (σ₁ − σ₂) ≤ p·eps32·GAP/(GAP − 1) where σ₁/σ₂ ≥ GAP, and are unit to p·eps32, so
    1 − u·u_ref ≤ p·eps32 + θ²/2, plus eps32 for our own FP32 rounding (see FP64_TOLS)."""
    pe = (w.shape[-2] + w.shape[-1]) * EPS32
    theta = pe * GAP / (GAP - 1)
    return pe + EPS32, pe + theta ** 2 / 2 + EPS32


def _ref(w: torch.Tensor, dtype=torch.float32):
    """torch.linalg.svd's top triplet, signed by the convention (largest-|entry| of u positive), plus σ₁/σ₂."""
    u, s, vh = torch.linalg.svd(w.to(dtype), full_matrices=False)
    u1, v1 = u[..., :, 0], vh[..., 0, :]
    sign = torch.sign(torch.gather(u1, -1, u1.abs().argmax(-1, keepdim=True)))
    gap = s[..., 0] / s[..., 1] if s.shape[-1] > 1 else torch.full_like(s[..., 0], float("inf"))
    return (u1 * sign).double(), s[..., 0].double(), (v1 * sign).double(), gap.double()


def _check(got, ref, tols) -> int:
    """Assert `got` = (u, σ, v) agrees with `ref` = (u, σ, v, gap) to `tols` = (σ relative, 1 − u·u_ref); returns how
    many heads had their vectors compared (σ₁/σ₂ ≥ GAP)."""
    s_rtol, dot_tol = tols
    u, s, v = (t.double() for t in got)
    ur, sr, vr, gap = ref
    assert torch.all((s - sr).abs() <= s_rtol * sr), f"σ: {s} vs {sr}"
    sel = gap >= GAP
    du, dv = (u * ur).sum(-1)[sel], (v * vr).sum(-1)[sel]
    assert torch.all(du >= 1 - dot_tol), f"u·u_ref = {du}"
    assert torch.all(dv >= 1 - dot_tol), f"v·v_ref = {dv}"
    return int(sel.sum())


def _assert_unit(*xs: torch.Tensor) -> None:
    """Each row unit: FP32 roundings (≤ eps32/2 each entry, relative) of FP64 unit vectors, the norm taken in FP64,
    so within eps32/2 of 1 (eps32 leaves the FP64 rounding room)."""
    for x in xs:
        assert torch.all((torch.linalg.vector_norm(x.double(), dim=-1) - 1).abs() <= EPS32), x


def _assert_uwv(u: torch.Tensor, w: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> None:
    """uᵀ W v = σ, evaluated in FP64 from the FP32 outputs. In FP64 it holds to rounding for any u (v = Wᵀu/‖Wᵀu‖,
    σ = ‖Wᵀu‖); rounding u, v, σ to FP32 (≤ eps32/2 relative each entry) moves uᵀWv by ≤ eps32·|u|ᵀ|W||v| and σ by
    ≤ eps32/2·σ. The FP64 einsum's own error, ~(m + n)·eps64·|u|ᵀ|W||v|, is far inside."""
    u, w, v, s = (t.double() for t in (u, w, v, s))
    got = torch.einsum("...d,...dc,...c->...", u, w, v)
    mag = torch.einsum("...d,...dc,...c->...", u.abs(), w.abs(), v.abs())
    assert torch.all((got - s).abs() <= EPS32 * (mag + s)), (got, s)


def _convention(u: torch.Tensor) -> None:
    assert torch.all(torch.gather(u, -1, u.abs().argmax(-1, keepdim=True)) > 0)


def _spiked(gen, shape, spike: float, scale: float = 0.02) -> torch.Tensor:
    """Gaussian noise of std `scale` plus a planted rank-1 spike σ·a·bᵀ (unit a, b) per head."""
    H, D, C = shape
    a = torch.nn.functional.normalize(torch.randn(H, D, 1, generator=gen), dim=1)
    b = torch.nn.functional.normalize(torch.randn(H, 1, C, generator=gen), dim=2)
    return scale * torch.randn(shape, generator=gen) + spike * a * b


def test_output_contract():
    w = torch.randn(6, 64, 384, generator=torch.Generator().manual_seed(0)) * 0.02
    u, s, v = top_triplets_gram(w)
    assert (u.shape, s.shape, v.shape) == ((6, 64), (6,), (6, 384))
    assert u.dtype == s.dtype == v.dtype == torch.float32
    _convention(u)
    _assert_unit(u, v)
    _assert_uwv(u, w, v, s)
    u16, s16, v16 = top_triplets_gram(w.to(torch.bfloat16))                               # any float input -> FP32
    assert u16.dtype == s16.dtype == v16.dtype == torch.float32


@pytest.mark.parametrize("seed", range(5))
def test_random_capture_shape_matches_svd(seed):
    """Gaussian blocks of the capture's shape (H, D, C) = (6, 64, 384) at the init's scale (σ₁/σ₂ of such blocks
    is often only 1.01–1.05: the hard case for the vectors)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(6, 64, 384, generator=gen) * 0.02
    got = top_triplets_gram(w)
    _convention(got[0])
    _check(got, _ref(w), _fp32_tols(w))                                 # the FP32 SVD (the old implementation)
    _check(got, _ref(w, torch.float64), FP64_TOLS)                     # an FP64 SVD: tighter (FP32 outputs)


def test_random_blocks_compare_vectors_somewhere():
    """The vector comparison must not be vacuous: over the seeds above, enough heads have σ₁/σ₂ ≥ GAP."""
    n = 0
    for seed in range(5):
        w = torch.randn(6, 64, 384, generator=torch.Generator().manual_seed(seed)) * 0.02
        n += _check(top_triplets_gram(w), _ref(w), _fp32_tols(w))
    assert n >= 10, n


@pytest.mark.parametrize("spike", [0.4, 1.0, 5.0])   # the noise's own σ₁ ≈ 0.55
def test_planted_spike_matches_svd(spike):
    gen = torch.Generator().manual_seed(7)
    w = _spiked(gen, (6, 64, 384), spike)
    ref = _ref(w)
    assert torch.all(ref[3] >= GAP)                   # the spike makes the top well separated: all heads compared
    got = top_triplets_gram(w)
    _convention(got[0])
    assert _check(got, ref, _fp32_tols(w)) == 6
    _check(got, _ref(w, torch.float64), FP64_TOLS)


def test_tall_blocks_d_greater_than_c():
    gen = torch.Generator().manual_seed(3)
    for w in (torch.randn(4, 96, 24, generator=gen), _spiked(gen, (4, 96, 24), 1.0).float(), torch.randn(2, 5, 1)):
        got = top_triplets_gram(w)
        assert got[0].shape == w.shape[:-1] and got[2].shape == w.shape[::2][:1] + w.shape[-1:]
        _convention(got[0])
        _check(got, _ref(w), _fp32_tols(w))
        _assert_uwv(got[0], w, got[2], got[1])


def test_square_and_unbatched():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(3, 32, 32, generator=gen)
    _check(top_triplets_gram(w), _ref(w), _fp32_tols(w))
    w2 = torch.randn(16, 40, generator=gen)                                 # a single matrix (no head axis)
    u, s, v = top_triplets_gram(w2)
    assert u.shape == (16,) and s.shape == () and v.shape == (40,)
    _check((u[None], s[None], v[None]), tuple(t[None] for t in _ref(w2)), _fp32_tols(w2))


def test_zero_blocks_give_no_nan():
    gen = torch.Generator().manual_seed(5)
    for shape in ((6, 64, 384), (3, 20, 8)):
        w = torch.randn(shape, generator=gen)
        w[1] = 0
        u, s, v = top_triplets_gram(w)
        assert torch.isfinite(u).all() and torch.isfinite(s).all() and torch.isfinite(v).all()
        assert s[1] == 0
        _assert_unit(u, v)
        keep = torch.tensor([h != 1 for h in range(shape[0])])
        ref = _ref(w)
        _check((u[keep], s[keep], v[keep]), tuple(t[keep] for t in ref), _fp32_tols(w))
    u, s, v = top_triplets_gram(torch.zeros(2, 8, 12))
    assert torch.equal(s, torch.zeros(2)) and torch.isfinite(u).all() and torch.isfinite(v).all()


def test_non_finite_block_gives_nan_not_error():
    w = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(6))
    w[2, 0, 0] = float("inf")
    u, s, v = top_triplets_gram(w)
    assert torch.isnan(s[2]) and torch.isnan(u[2]).all() and torch.isnan(v[2]).all()
    _check((u[:2], s[:2], v[:2]), tuple(t[:2] for t in _ref(w[:2])), _fp32_tols(w))


def test_the_comparison_can_fail():
    """A wrong σ, a wrong vector, a flipped sign or a second singular vector each fail `_check`, against the FP32 SVD
    at its (wider) tolerances and against the FP64 SVD; errors inside the FP32 SVD's own bound fail the FP64 one."""
    gen = torch.Generator().manual_seed(8)
    w = _spiked(gen, (6, 64, 384), 1.0)
    refs = [(_ref(w), _fp32_tols(w)), (_ref(w, torch.float64), FP64_TOLS)]
    assert torch.all(refs[0][0][3] >= GAP)
    u, s, v = top_triplets_gram(w)
    for ref, tols in refs:
        _check((u, s, v), ref, tols)

    def noisy(x, e):
        return torch.nn.functional.normalize(x + e * torch.randn(x.shape, generator=gen), dim=-1)

    u2, _, vh = torch.linalg.svd(w, full_matrices=False)
    bad = [(u, s * (1 + 1e-3), v),                                    # σ off by 1e-3 relative
           (u, s, -v),                                                # sign of v flipped
           (-u, s, -v),                                               # the other sign convention
           (u2[..., :, 1], s, v),                                     # the second left singular vector
           (u, s, vh[..., 1, :]),                                     # the second right singular vector
           (noisy(u, 1e-2), s, v)]                                    # u turned by ≈ 0.08 rad
    for got in bad:
        for ref, tols in refs:
            with pytest.raises(AssertionError):
                _check(got, ref, tols)
    for got in [(u, s * (1 + 1e-5), v), (noisy(u, 2e-3), s, v)]:     # smaller: σ's is inside the FP32 SVD's bound
        with pytest.raises(AssertionError):
            _check(got, *refs[1])
    with pytest.raises(AssertionError):
        _assert_uwv(u, w, v, s * (1 + 1e-5))
    with pytest.raises(AssertionError):
        _assert_unit(u * (1 + 1e-6))
