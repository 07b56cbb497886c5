"""`top_triplets_gram` (FP64 Gram matrix + eigh) against `torch.linalg.svd` (`top_triplets`, what the capture hook used before it)."""
import pytest
import torch

from lib.training.capture import top_triplets_gram

GAP = 1.01          # vectors are compared where σ₁/σ₂ ≥ GAP (below it the top vector is ill-determined)
S_RTOL = 1e-6       # σ, relative
DOT_TOL = 1e-6      # u·u_ref, v·v_ref ≥ 1 − DOT_TOL (signed: both sides follow the sign convention)


def _ref(w: torch.Tensor, dtype=torch.float32):
    """torch.linalg.svd's top triplet, signed by the convention (largest-|entry| of u positive), plus σ₁/σ₂."""
    u, s, vh = torch.linalg.svd(w.to(dtype), full_matrices=False)
    u1, v1 = u[..., :, 0], vh[..., 0, :]
    sign = torch.sign(torch.gather(u1, -1, u1.abs().argmax(-1, keepdim=True)))
    gap = s[..., 0] / s[..., 1] if s.shape[-1] > 1 else torch.full_like(s[..., 0], float("inf"))
    return (u1 * sign).double(), s[..., 0].double(), (v1 * sign).double(), gap.double()


def _check(got, ref, s_rtol=S_RTOL, dot_tol=DOT_TOL) -> int:
    """Assert `got` = (u, σ, v) agrees with `ref` = (u, σ, v, gap); returns how many heads had their vectors
    compared (σ₁/σ₂ ≥ GAP)."""
    u, s, v = (t.double() for t in got)
    ur, sr, vr, gap = ref
    assert torch.all((s - sr).abs() <= s_rtol * sr), f"σ: {s} vs {sr}"
    sel = gap >= GAP
    du, dv = (u * ur).sum(-1)[sel], (v * vr).sum(-1)[sel]
    assert torch.all(du >= 1 - dot_tol), f"u·u_ref = {du}"
    assert torch.all(dv >= 1 - dot_tol), f"v·v_ref = {dv}"
    return int(sel.sum())


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
    assert torch.allclose(u.norm(dim=-1), torch.ones(6)) and torch.allclose(v.norm(dim=-1), torch.ones(6))
    assert torch.allclose(torch.einsum("hd,hdc,hc->h", u, w, v), s, rtol=1e-6)     # uᵀ W v = σ
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
    _check(got, _ref(w))                                                   # the FP32 SVD (the old implementation)
    _check(got, _ref(w, torch.float64), s_rtol=2e-7, dot_tol=1e-7)       # an FP64 SVD: tighter (FP32 outputs)


def test_random_blocks_compare_vectors_somewhere():
    """The vector comparison must not be vacuous: over the seeds above, enough heads have σ₁/σ₂ ≥ GAP."""
    n = 0
    for seed in range(5):
        w = torch.randn(6, 64, 384, generator=torch.Generator().manual_seed(seed)) * 0.02
        n += _check(top_triplets_gram(w), _ref(w))
    assert n >= 10, n


@pytest.mark.parametrize("spike", [0.4, 1.0, 5.0])   # the noise's own σ₁ ≈ 0.55
def test_planted_spike_matches_svd(spike):
    gen = torch.Generator().manual_seed(7)
    w = _spiked(gen, (6, 64, 384), spike)
    ref = _ref(w)
    assert torch.all(ref[3] >= GAP)                   # the spike makes the top well separated: all heads compared
    got = top_triplets_gram(w)
    _convention(got[0])
    assert _check(got, ref) == 6
    _check(got, _ref(w, torch.float64), s_rtol=2e-7, dot_tol=1e-7)


def test_tall_blocks_d_greater_than_c():
    gen = torch.Generator().manual_seed(3)
    for w in (torch.randn(4, 96, 24, generator=gen), _spiked(gen, (4, 96, 24), 1.0).float(), torch.randn(2, 5, 1)):
        got = top_triplets_gram(w)
        assert got[0].shape == w.shape[:-1] and got[2].shape == w.shape[::2][:1] + w.shape[-1:]
        _convention(got[0])
        _check(got, _ref(w))
        assert torch.allclose(torch.einsum("hd,hdc,hc->h", got[0], w, got[2]), got[1], rtol=1e-5)


def test_square_and_unbatched():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(3, 32, 32, generator=gen)
    _check(top_triplets_gram(w), _ref(w))
    w2 = torch.randn(16, 40, generator=gen)                                 # a single matrix (no head axis)
    u, s, v = top_triplets_gram(w2)
    assert u.shape == (16,) and s.shape == () and v.shape == (40,)
    _check((u[None], s[None], v[None]), tuple(t[None] for t in _ref(w2)))


def test_zero_blocks_give_no_nan():
    gen = torch.Generator().manual_seed(5)
    for shape in ((6, 64, 384), (3, 20, 8)):
        w = torch.randn(shape, generator=gen)
        w[1] = 0
        u, s, v = top_triplets_gram(w)
        assert torch.isfinite(u).all() and torch.isfinite(s).all() and torch.isfinite(v).all()
        assert s[1] == 0
        assert torch.allclose(u.norm(dim=-1), torch.ones(shape[0])) and torch.allclose(v.norm(dim=-1),
                                                                                     torch.ones(shape[0]))
        keep = torch.tensor([h != 1 for h in range(shape[0])])
        ref = _ref(w)
        _check((u[keep], s[keep], v[keep]), tuple(t[keep] for t in ref))
    u, s, v = top_triplets_gram(torch.zeros(2, 8, 12))
    assert torch.equal(s, torch.zeros(2)) and torch.isfinite(u).all() and torch.isfinite(v).all()


def test_non_finite_block_gives_nan_not_error():
    w = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(6))
    w[2, 0, 0] = float("inf")
    u, s, v = top_triplets_gram(w)
    assert torch.isnan(s[2]) and torch.isnan(u[2]).all() and torch.isnan(v[2]).all()
    _check((u[:2], s[:2], v[:2]), tuple(t[:2] for t in _ref(w[:2])))


def test_the_comparison_can_fail():
    """A wrong σ, a wrong vector, a flipped sign or a second singular vector each fail `_check`."""
    gen = torch.Generator().manual_seed(8)
    w = _spiked(gen, (6, 64, 384), 1.0)
    ref = _ref(w)
    assert torch.all(ref[3] >= GAP)
    u, s, v = top_triplets_gram(w)
    _check((u, s, v), ref)
    u2, _, vh = torch.linalg.svd(w, full_matrices=False)
    bad = [(u, s * (1 + 1e-5), v),                                    # σ off by 1e-5 relative
           (u, s, -v),                                                # sign of v flipped
           (-u, s, -v),                                               # the other sign convention
           (u2[..., :, 1], s, v),                                     # the second left singular vector
           (u, s, vh[..., 1, :]),                                     # the second right singular vector
           (torch.nn.functional.normalize(u + 2e-3 * torch.randn(u.shape, generator=gen), dim=-1), s, v)]
    for got in bad:
        with pytest.raises(AssertionError):
            _check(got, ref)
