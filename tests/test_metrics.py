"""lib/training/metrics.py against independent references (numpy SVD, scipy, hand-built cases)."""
import numpy as np
import pytest
import torch
from scipy.stats import ortho_group, wasserstein_distance

from lib.training import metrics


def test_spectral_norm_known_and_batched():
    rng = np.random.default_rng(0)
    u, v = ortho_group.rvs(5, random_state=1), ortho_group.rvs(4, random_state=2)
    m = u[:, :4] @ np.diag([3.0, 2.0, 1.0, 0.5]) @ v.T
    assert metrics.spectral_norm(torch.tensor(m)).item() == pytest.approx(3.0, rel=1e-12)   # FP64: ~9·eps64
    w = torch.tensor(rng.standard_normal((3, 6, 8)), dtype=torch.float32)
    ref = np.linalg.svd(w.double().numpy(), compute_uv=False)[:, 0]
    np.testing.assert_allclose(metrics.spectral_norm(w).numpy(), ref, rtol=1e-5)   # FP32: ≤ (6 + 8)·eps32 = 1.7e-6
    with pytest.raises(ValueError):
        metrics.spectral_norm(torch.ones(3))
    with pytest.raises(TypeError):
        metrics.spectral_norm(np.ones((2, 2)))


def test_bf16_ties_come_from_rounding():
    s = torch.tensor([[10.0, 10.01, 3.0],          # 10.01 rounds to 10.0 in BF16 (spacing 0.0625): tie
                      [10.0, 10.1, 3.0],           # 10.1 -> 10.125: no tie
                      [1.0, float("-inf"), float("-inf")],   # one finite key: no tie
                      [float("-inf"), float("-inf"), float("-inf")],
                      [-2.0, -2.0, -9.0]])         # exact tie of a negative max
    assert metrics.bf16_row_ties(s).tolist() == [True, False, False, False, True]
    assert metrics.tie_rate(s) == pytest.approx(2 / 5)


def test_rank1_measures():
    rng = np.random.default_rng(3)
    u, v = rng.standard_normal(6), rng.standard_normal(5)
    r1 = np.outer(u, v)
    assert metrics.rank1_share(r1) == pytest.approx(1.0)
    assert metrics.rank1_share(np.eye(4)) == pytest.approx(0.25)
    assert metrics.rank1_similarity(r1, -3 * r1) == pytest.approx(1.0)
    e = np.zeros((6, 5))
    e[0, 0] = 1.0
    f = np.zeros((6, 5))
    f[1, 0] = 1.0
    assert metrics.rank1_similarity(e, f) == pytest.approx(0.0)
    noisy = r1 + 0.01 * rng.standard_normal(r1.shape)
    p = metrics.pairwise_rank1_similarity([r1, noisy, e])
    assert p.shape == (3, 3) and np.allclose(np.diag(p), 1) and np.allclose(p, p.T)
    assert p[0, 1] > 0.99 and p[0, 2] < p[0, 1]
    with pytest.raises(ValueError):
        metrics.rank1_share(np.zeros((2, 2)))
    with pytest.raises(ValueError):
        metrics.rank1_similarity(np.ones((2, 3)), np.ones((3, 2)))


def test_wasserstein_against_scipy():
    rng = np.random.default_rng(4)
    for na, nb in ((100, 100), (37, 91), (1, 5)):
        a, b = rng.standard_normal(na), 0.5 + 2 * rng.standard_normal(nb)
        # both FP64, sums of ≤ 191 terms in other orders: ~1e-14 relative
        assert metrics.wasserstein_1d(a, b) == pytest.approx(wasserstein_distance(a, b), rel=1e-10, abs=1e-12)
    a = rng.standard_normal(50)
    assert metrics.wasserstein_1d(a, a + 0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        metrics.wasserstein_1d([], [1.0])
    with pytest.raises(ValueError):
        metrics.wasserstein_1d([np.nan], [1.0])


def test_bf16_tile_ties_separates_split_maxima():
    """Row 0: max twice in one 4-key tile; row 1: max twice in different tiles; row 2: single max; row 3: masked
    entries at the max are ignored."""
    inf = float("inf")
    s = torch.tensor([[5.0, 5.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                      [5.0, 1.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0],
                      [5.0, 1.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0],
                      [2.0, -inf, 2.0, 0.0, 0.0, 0.0, 0.0, -inf]])
    assert metrics.bf16_row_ties(s).tolist() == [True, True, False, True]
    assert metrics.bf16_tile_ties(s, 4).tolist() == [True, False, False, True]
    assert metrics.bf16_tile_ties(s, 8).tolist() == metrics.bf16_row_ties(s).tolist()
    assert metrics.bf16_tile_ties(s[:, :7], 4).tolist() == [True, False, False, True]   # ragged last tile
    with pytest.raises(ValueError):
        metrics.bf16_tile_ties(s, 0)


def test_spectral_norm_of_nonfinite_matrices_is_nan_without_an_svd():
    w = torch.stack([torch.eye(3) * 2, torch.full((3, 3), float("nan")), torch.eye(3)])
    w[2, 0, 1] = float("inf")
    out = metrics.spectral_norm(w)
    assert out[0].item() == pytest.approx(2.0) and torch.isnan(out[1:]).all()
    assert torch.isnan(metrics.spectral_norm(torch.full((4, 5), float("nan")))).item()
