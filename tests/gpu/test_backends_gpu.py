"""GPU checks of the training study's backends (marked `gpu`; skipped without CUDA).

* "authors": under CUDA BF16 autocast the authors' eager backward outside autocast stops with a dtype error; the
  backend's backward (run under the forward's autocast) works and is bit-identical to their algorithm with the
  backward called inside autocast (the placement `paper_placement` matched); a short training run is reproducible
  and reports the share of rows whose ℓ sat at the clamp.
* "+zero_rows": on planted tied rows the control zeroes the rows the exact rule zeroes, for the native kernel and
  for the authors' algorithm in BF16.
* "dose": Δδ is that of the native placement's O; λ = 0 gives the same gradients whatever the placement and
  component; a short run is finite, reproducible and logs the dose telemetry.
* QK-norm under autocast: the backend still gets BF16 q, k (the kernel's native path).
"""
import math

import numpy as np
import pytest
import torch

import lib.book.setup  # noqa: F401
from lib.training import dose_backend
from lib.training.authors_fa import authors_attention
from lib.training.model import AttnCall, naive_attention, run_backend
from lib.training.spec import AttnSpec
from lib.training.train import TrainConfig, train
from tests.test_backends import HOT, ZEROED, planted

pytestmark = pytest.mark.gpu
SMALL = dict(n_layer=2, n_head=2, n_embd=128, seq_len=256, batch_size=8, steps=20, lr=5e-3, warmup=5,
             telemetry_every=10, eval_batches=0, progress=False)


def _bf16_inputs(B=2, H=2, N=1024, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, d, generator=g).to("cuda", torch.bfloat16) for _ in range(4)]


def _run(fn, q, k, v, do, backward_in_autocast=False):
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        o = fn(qq, kk, vv)
        if backward_in_autocast:
            o.backward(do)
    if not backward_in_autocast:
        o.backward(do)
    return o.detach(), qq.grad, kk.grad, vv.grad


def test_authors_backend_backward_under_autocast_is_the_authors_placement():
    q, k, v, do = _bf16_inputs()
    theirs = lambda a, b, c: authors_attention(a, b, c, q_tile=512, k_tile=512, stable=True, beta=2.0,   # noqa
                                               tie_tol=1e-3)
    with pytest.raises(RuntimeError):           # their eager backward outside autocast: dtype mismatch
        _run(theirs, q, k, v, do)
    ref = _run(theirs, q, k, v, do, backward_in_autocast=True)
    spec = AttnSpec.parse("authors/tile=512/beta=2/tie_tol=1e-3+fix")
    ours = _run(lambda a, b, c: run_backend(spec, a, b, c), q, k, v, do)
    assert all(x.dtype == torch.bfloat16 for x in ours)
    assert all(torch.equal(x, y) for x, y in zip(ours, ref))


def test_authors_training_reproducible_with_underflow_telemetry():
    cfg = TrainConfig.flat(**SMALL, attn="authors/tile=128+fix,authors+zero_rows", beta=7.0, deterministic="warn")
    a, b = train(cfg), train(cfg)
    assert a["autocast"] == "torch.bfloat16" and np.isfinite(a["loss"]).all()
    assert a["loss"] == b["loss"]
    uf = np.asarray(a["telemetry"]["underflow_rows"])
    assert uf.shape == (len(a["telemetry"]["step"]), 2) and ((uf >= 0) & (uf <= 1)).all()
    print("underflow_rows", uf.tolist())


@pytest.mark.parametrize("fix,ctl", [("paper+fix", "paper+zero_rows"),
                                     ("authors/tile=-1+fix", "authors/tile=-1+zero_rows"),
                                     ("authors/tile=128+fix", "authors/tile=128+zero_rows")])
def test_zero_rows_match_the_exact_rule_in_bf16(fix, ctl):
    q, k, v, do = (t.to("cuda", torch.bfloat16) for t in planted(n=256, d=64, hot=HOT))
    a = _run(lambda x, y, z: run_backend(AttnSpec.parse(fix, beta=7.0, max_shift=None), x, y, z), q, k, v, do)
    stats = {}
    b = _run(lambda x, y, z: run_backend(AttnSpec.parse(ctl, beta=7.0), x, y, z, call=AttnCall(stats=stats)),
             q, k, v, do)
    zero = lambda o: o.eq(0).all(-1)                                                      # noqa: E731
    assert torch.equal(zero(a[0]), zero(b[0])) and zero(b[0])[:, :, ZEROED].all()
    assert stats["underflow_n"] == 2 * len(ZEROED)
    assert a[1][:, :, ZEROED].eq(0).all() and b[1][:, :, ZEROED].eq(0).all()


def test_dose_uses_the_native_placements_error():
    from kernels.attention import attention
    q, k, v, do = _bf16_inputs(N=512)
    spec = AttnSpec.parse("dose/paper/c=true/lam=0")
    stats = {}
    qq = q.clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        o = run_backend(spec, qq, k, v, call=AttnCall(stats=stats))
    o.backward(do)
    o_lp = attention(q, k, v, numerics="paper")                     # native path: BF16 inputs on CUDA
    o_fp = naive_attention(q.float(), k.float(), v.float())
    dd = (do.float() * (o_lp.float() - o_fp)).sum(-1)
    assert stats["dose_n"] == dd.numel()
    np.testing.assert_allclose(stats["dose_dd_sq"], dd.double().square().sum().item(), rtol=1e-4)
    np.testing.assert_allclose(stats["dose_dd_sum"], dd.double().sum().item(), rtol=1e-3,
                               atol=1e-6 * math.sqrt(stats["dose_dd_sq"] * dd.numel()))
    grads = {}
    for s in ("dose/paper/c=true/lam=0", "dose/fa2/c=random/lam=0", "dose/paper/c=bias/lam=0+fix"):
        grads[s] = _run(lambda a, b, c: run_backend(AttnSpec.parse(s), a, b, c, call=AttnCall()), q, k, v, do)
    first = next(iter(grads.values()))
    assert all(all(torch.equal(x, y) for x, y in zip(first, g)) for g in grads.values())


def test_dose_training_on_gpu():
    cfg = TrainConfig.flat(**SMALL, attn="dose/paper/c=random/lam=30,dose/paper/c=bias/lam=30")
    a, b = train(cfg), train(cfg)
    assert np.isfinite(a["loss"]).all() and a["loss"] == b["loss"]
    t = a["telemetry"]
    inj, dd = np.asarray(t["dose_inj_rms"]), np.asarray(t["dose_dd_rms"])
    assert np.isfinite(inj).all() and (dd > 0).all()
    np.testing.assert_allclose(inj[:, 0], 30 * dd[:, 0], rtol=1e-5)          # random sign keeps |Δδ|
    assert (inj[:, 1] <= 30 * dd[:, 1] * (1 + 1e-6)).all()                   # the per-head mean is smaller
    print("dose_dd_rms", dd.tolist(), "dose_dd_mean", t["dose_dd_mean"])


def test_qk_norm_keeps_bf16_operands_under_autocast():
    r = train(TrainConfig.flat(**(SMALL | dict(steps=3, telemetry_every=1)), attn="paper", qk_norm=True))
    m = r["model"]
    m.set_capture(True)
    x = torch.randint(0, 256, (2, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        m(x)
    c = m.attn_layers[0].captured
    assert c["q"].dtype == c["k"].dtype == c["v"].dtype == torch.bfloat16 and np.isfinite(r["loss"]).all()
