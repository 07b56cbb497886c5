"""lib/training/capture.py: exact storage, the hook's arrays against autograd and the optimiser, and a training run
that is bit-identical with and without the hook."""
import numpy as np
import pytest
import torch

from lib.studies.delta import stats as ds
from lib.training.capture import Capture, CaptureHook, decode, encode, pack, unpack
from lib.training.model import GPT, GPTConfig
from lib.training.train import TrainConfig, make_optimizer, train
from tests.precision import BF16, EPS32


def test_encode_decode_exact():
    t = torch.randn(3, 5).to(torch.bfloat16)
    a, enc = encode(t)
    assert enc == "bf16" and a.dtype == np.uint16
    assert np.array_equal(decode(a, enc), t.float().numpy())
    f = torch.randn(4)
    a, enc = encode(f)
    assert enc == "f32" and np.array_equal(decode(a, enc), f.numpy())
    a, enc = encode(f, round_to_bf16=True)
    assert enc == "bf16_rounded" and np.array_equal(decode(a, enc), f.to(torch.bfloat16).float().numpy())
    with pytest.raises(ValueError):
        decode(a, "fp8")
    with pytest.raises(TypeError):
        decode(np.zeros(2, np.float32), "bf16")


def _model(attn="naive", C=32, H=2, T=16):
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=2, n_head=H, n_embd=C, block_size=T, attn=attn))


def _one_step(model, hook, B=3, T=16, step=0):
    opt = make_optimizer(model, TrainConfig.flat(n_layer=2, n_head=2, n_embd=32, seq_len=T, lr=1e-3))
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 256, (B, T), generator=g)
    hook.before_forward(step, model)
    _, loss = model(idx, idx)
    loss.backward()
    hook.after_backward(step, model, opt)
    return opt


def test_hook_arrays_match_autograd_and_weights():
    model = _model()
    hook = CaptureHook(every=1, rows=(0, 1, 2), adam=True)
    opt = _one_step(model, hook)
    (cap,) = hook.captures
    assert cap.layers == [0, 1] and cap.meta["rows"] == [0, 1, 2] and cap.meta["x_source"] in ("model", "c_attn_hook")
    C, H = 32, 2
    for l in cap.layers:
        a = cap.layer(l)
        t = {n: torch.from_numpy(a[n].astype(np.float64)) for n in ("q", "k", "v", "o", "do", "x", "dq", "dk")}
        p, o_ref = ds.reference(t["q"], t["k"], t["v"], cap.meta["scale"])
        # naive attention is FP32: ≤ (T + D)·eps32·max|V| ≈ 4e-6·max|V| (|V| < 1 here) against the FP64 reference
        assert torch.allclose(t["o"], o_ref, atol=1e-5)
        dq_ref, dk_ref = ds.reference_grads(p, t["q"], t["k"], t["v"], t["do"], o_ref, cap.meta["scale"])
        # its backward: ≤ 2·(T + D)·eps32 ≈ 8e-6 of max|dQ|, inside 1e-4 of it (1e-7 ≈ 0.5 % of max|dQ| ≈ 2e-5)
        assert torch.allclose(t["dq"], dq_ref, atol=1e-7 + 1e-4 * dq_ref.abs().max())
        assert torch.allclose(t["dk"], dk_ref, atol=1e-7 + 1e-4 * dk_ref.abs().max())
        # every batch row captured: Σ_rows dq_hᵀ X is the weight gradient of W_Q^h (no clipping here); autograd
        # sums the B·T = 48 tokens in FP32 (≤ 24·eps32 ≈ 3e-6 of Σ|dq||x|): 1e-4 relative, 1e-6 ≈ 1 % of max|G|
        w = model.transformer.h[l].attn.c_attn.weight
        gq = ds.true_grad(t["dq"], t["x"]).reshape(C, C)
        gk = ds.true_grad(t["dk"], t["x"]).reshape(C, C)
        assert torch.allclose(gq, w.grad[:C].double(), atol=1e-6, rtol=1e-4)
        assert torch.allclose(gk, w.grad[C:2 * C].double(), atol=1e-6, rtol=1e-4)
        wq, _ = model.qk_weights(l)
        # against the FP32 SVD's σ₁: ≤ (D + C)·eps32 = 5.7e-6 relative (see tests/test_capture_triplets.py)
        assert np.allclose(a["wq_s"], torch.linalg.matrix_norm(wq.detach(), ord=2).numpy(), rtol=1e-5)
        u, v = a["wq_u"][0].astype(np.float64), a["wq_v"][0].astype(np.float64)
        # in FP64: only u, v, σ's FP32 rounding, ≤ eps32·(|u|ᵀ|W||v| + σ) ≈ 3e-7 relative
        assert u @ wq[0].detach().double().numpy() @ v == pytest.approx(a["wq_s"][0], rel=1e-5)
    # Adam's denominator: the one the optimiser uses in this step
    opt.step()
    w = model.transformer.h[0].attn.c_attn.weight
    st = opt.state[w]
    beta2, eps = opt.param_groups[0]["betas"][1], opt.param_groups[0]["eps"]
    den = (torch.sqrt(st["exp_avg_sq"] / (1 - beta2 ** float(st["step"]))) + eps)[:C].reshape(H, C // H, C)
    # the capture rounds it to BF16 (≤ 2^-8 relative); the two FP32 evaluations of √v̂ + ε: ≤ 4 roundings each
    assert np.allclose(cap.get(0, "adam_q"), den.numpy(), rtol=BF16 + 4 * EPS32)
    # capture state restored
    assert all(not a.capture and a.captured == {} for a in model.attn_layers)


def test_hook_under_bf16_autocast_stores_bf16_exactly():
    model = _model()
    hook = CaptureHook(every=1, rows=(1,), layers=(1,), adam=False)
    opt = make_optimizer(model, TrainConfig.flat(n_layer=2, n_head=2, n_embd=32, seq_len=16))
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    hook.before_forward(0, model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(idx, idx)
    loss.backward()
    hook.after_backward(0, model, opt)
    (cap,) = hook.captures
    assert cap.layers == [1] and not cap.has(1, "adam_q")
    assert all(cap.meta["enc"][n] == "bf16" for n in ("q", "k", "v", "o", "do", "dq", "dk", "x"))
    assert cap.meta["x_rounding"] == "bf16"
    assert cap.get(1, "q").shape == (1, 2, 16, 16)


def test_hook_rejects_bad_rows_and_arguments():
    with pytest.raises(ValueError):
        CaptureHook(rows=())
    with pytest.raises(ValueError):
        CaptureHook(every=-1)
    with pytest.raises(ValueError):
        _one_step(_model(), CaptureHook(every=1, rows=(5,)), B=2)


def test_subsample_and_pack_roundtrip():
    model = _model()
    hook = CaptureHook(every=1, rows=(0, 2))
    _one_step(model, hook)
    cap = hook.captures[0]
    sub = cap.subsample(rows=[1], layers=[1], heads=[1])
    assert sub.meta["rows"] == [2] and sub.layers == [1] and sub.heads == [1]
    assert sub.get(1, "q").shape == (1, 1, 16, 16) and sub.get(1, "x").shape == (1, 16, 32)
    assert np.array_equal(sub.get(1, "do")[0, 0], cap.get(1, "do")[1, 1])
    assert np.array_equal(sub.get(1, "wq_v")[0], cap.get(1, "wq_v")[1])
    assert sub.nbytes < cap.nbytes
    index, arrays = pack([cap, sub], prefix="keep")
    back = unpack(index, arrays, prefix="keep")
    assert back[1].meta == sub.meta and set(back[0].arrays) == set(cap.arrays)
    assert all(np.array_equal(back[0].arrays[k], cap.arrays[k]) for k in cap.arrays)
    with pytest.raises(ValueError):
        cap.subsample(rows=[3])
    with pytest.raises(KeyError):
        Capture(dict(step=0, enc={}), {}).get(0, "q")


def test_training_is_bit_identical_with_and_without_the_hook():
    cfg = TrainConfig.flat(n_layer=2, n_head=2, n_embd=32, seq_len=16, batch_size=3, steps=5, warmup=2, lr=1e-2,
                      attn="naive", telemetry_every=2, eval_batches=0, progress=False)
    plain = train(cfg)
    hook = CaptureHook(every=2, steps=(3,), rows=(0, 2))
    hooked = train(cfg, step_hook=hook)
    assert plain["loss"] == hooked["loss"] and plain["grad_norm"] == hooked["grad_norm"]
    assert [c.meta["step"] for c in hook.captures] == [0, 2, 3, 4]
    assert hooked["telemetry"]["step"] == plain["telemetry"]["step"]      # the model's own telemetry still works
    assert hook.copy_s >= 0 and hook.captures[0].meta["lr"] == pytest.approx(1e-2 / 2)   # FP64 warm-up arithmetic
