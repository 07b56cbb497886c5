"""The one training loop (`lib.training.loop`) on the CPU: it trains, resumes exactly, honours its limits, takes the
proxy studies' configs and records the step's own telemetry."""
import numpy as np
import pytest
import torch

from lib.training import loop
from lib.training.model import GPTConfig

TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=32)


def _cfg(**kw):
    base = dict(model=GPTConfig(**TINY), steps=12, batch_size=4, warmup=2, census_every=0, eval_batches=1)
    return loop.RunConfig(**(base | kw))


def test_trains_and_records():
    r = loop.train_lm(_cfg(steps=30, lr=3e-3), observers=[])
    assert len(r["loss"]) == len(r["grad_norm"]) == len(r["lr"]) == 30
    assert np.mean(r["loss"][-5:]) < np.mean(r["loss"][:5]) - 0.3
    assert r["tokens_per_step"] == 4 * 32 and r["val"]["step"] == [30] and r["n_params"] > 0
    assert r["config"]["model"]["n_layer"] == 2


def test_resume_from_checkpoint_is_exact(tmp_path):
    full = loop.train_lm(_cfg(), observers=[])
    ck = tmp_path / "ck.pt"
    part = loop.train_lm(_cfg(max_tokens=6 * 4 * 32, ckpt_path=str(ck)), observers=[])
    assert part["truncated_at"] == 10 and ck.exists()     # the token limit is checked every 10 steps
    rest = loop.train_lm(_cfg(ckpt_path=str(ck)), observers=[])
    assert rest["resumed_from"] == 10
    assert rest["loss"] == full["loss"]


def test_bos_tokens_lead_every_window_and_their_targets_are_ignored():
    cfg = _cfg(n_bos=3, bos_id=0, model=GPTConfig(**TINY, pos="none"))
    data = np.arange(100, dtype=np.uint16) % 250 + 5
    x, y = loop.get_batch(data, np.array([0, 10]), cfg, "cpu")
    assert x.shape == y.shape == (2, 32)
    assert (x[:, :3] == 0).all() and x[0, 3] == 5 and x[1, 3] == 15
    assert (y[:, :2] == -100).all() and y[0, 2] == 5 and y[0, 3] == 6
    r = loop.train_lm(cfg, observers=[])
    assert np.isfinite(r["loss"]).all()


def test_muon_and_validation():
    r = loop.train_lm(_cfg(optimizer="muon", muon_lr=0.02), observers=[])
    assert np.isfinite(r["loss"]).all()
    with pytest.raises(ValueError):
        _cfg(optimizer="sgd")
    with pytest.raises(ValueError):
        _cfg(data="tokens")
    with pytest.raises(ValueError):
        _cfg(n_bos=40)


class _Count:
    def __init__(self):
        self.steps = []

    def observe(self, step, model):
        self.steps.append(step)
        q = model.attn_layers[0].captured["q"]
        return {"q_rows": np.full((len(model.attn_layers), q.shape[1]), q.shape[0], dtype=float)}


def test_observers_see_captured_windows_at_their_steps():
    ob = _Count()
    r = loop.train_lm(_cfg(census_every=5, census_rows=2), observers=[ob])
    assert ob.steps == [0, 5, 10, 11] and r["census"]["step"] == [0, 5, 10, 11]
    arr = loop.census_arrays(r["census"])
    assert arr["q_rows"].shape == (4, 2, 2) and (arr["q_rows"] == 2).all()


def test_power_sigma_converges_to_the_spectral_norm():
    w = torch.randn(3, 8, 20, generator=torch.Generator().manual_seed(0))
    s, vec = loop.power_sigma(w, None, iters=3)
    for _ in range(30):
        s, vec = loop.power_sigma(w, vec, iters=3)
    # converged (93 iterations, FP32); the FP32 SVD's σ₁ is ≤ (m + n)·eps32 = 3.3e-6 off: 1e-4
    assert torch.allclose(s, torch.linalg.matrix_norm(w, ord=2), rtol=1e-4)


def test_pack_and_unpack_runs():
    ob = _Count()
    r = loop.train_lm(_cfg(census_every=6), observers=[ob])
    r.pop("model")
    runs, arrays = loop.pack_runs([r, dict(error="boom", config={})], ["a", "b"])
    assert runs[0]["steps"] == 12 and runs[0]["tokens"] == 12 * 128 and runs[1]["error"] == "boom"
    back = loop.unpack_run(arrays, "a")
    assert np.array_equal(back["loss"], np.asarray(r["loss"], dtype=np.float32))
    assert back["census"]["step"].tolist() == [0, 6, 11] and back["census"]["q_rows"].shape == (3, 2, 2)


def test_configs_from_regimes_and_the_probe_in_the_loop():
    cfgs = loop.configs_from_regimes(
        dict(n_layer=2, n_head=2, n_embd=32, block_size=24, steps=6, batch_size=2, warmup=1, census_every=0,
             eval_batches=1, probe_every=3, probe_rows=2),
        [dict(label="inj", seeds=[0, 1], attn="naive,inject/r=1/heads=1"), dict(label="ref", seeds=[0], lr=3e-3)])
    assert [c.label for c in cfgs] == ["inj:s0", "inj:s1", "ref:s0"] and cfgs[2].lr == 3e-3
    with pytest.raises(ValueError):
        loop.configs_from_regimes({}, [dict(label="x", seeds=[0], nonsense=1)])
    import lib.training.chain_probe as cp
    cp_default = cp.default_classes
    cp.default_classes = lambda q, k, v: dict(tied=torch.ones(q.shape[:-1], dtype=torch.bool),
                                              window=torch.ones(q.shape[:-1], dtype=torch.bool),
                                              one_signed=torch.ones(q.shape, dtype=torch.bool))
    try:
        r = loop.train_lm(cfgs[0], observers=[])
    finally:
        cp.default_classes = cp_default
    r.pop("model")
    runs, arrays = loop.pack_runs([r], ["inj"])
    probe = loop.unpack_run(arrays, "inj")["probe"]
    assert probe["step"].tolist() == [0, 3, 5] and probe["dg_norm"].shape == (3, 2, 2)
    # layer 1 head 1 gets the injected error; layer 0 (FP32 attention) only FP32's own rounding against FP64
    assert (probe["dg_norm"][:, 1, 1] > 0).all() and (probe["dg_norm"][:, 0] < 1e-3 * probe["dg_norm"][:, 1, 1:]).all()


def test_the_proxy_config_maps_every_field_onto_the_one_loop():
    """`lib.training.train.run_config`: each of the proxy's flat fields reaches the loop (changing it changes the
    RunConfig, its model or the LoopOptions), with the proxy's build, corpus and read-back schedule; the loop's
    defaults are the GPT-2 studies' loop."""
    from lib.training.train import TrainConfig, run_config
    tc = TrainConfig.flat(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=4, steps=5, warmup=2)
    rc, ways = run_config(tc)
    assert (ways.build, rc.data, rc.census_every, ways.flush_every, rc.label) == ("gpt", "bytes", 0, 0, "sdpa")
    assert rc.model == tc.model and ways.deterministic == "warn"
    changed = dict(n_layer=3, n_head=4, n_embd=64, seq_len=16, attn="naive", beta=3.0, tie_tol=0.01, max_shift=None,
                   zero_at=5.0, qk_norm=True, steps=6, batch_size=8, lr=1e-3, warmup=3, schedule="cosine", min_lr=1e-5,
                   beta1=0.8, beta2=0.9, adam_eps=1e-6, weight_decay=0.1, grad_clip=0.5, device="cpu", autocast="bf16",
                   deterministic="off", seed=1, data_seed=2, val_fraction=0.1, starts_path="s.npy",
                   telemetry_every=3, eval_every=2, eval_batches=2, out_dir="o", ckpt_every=2, resume="r.pt",
                   progress=not tc.progress, stop_on_nonfinite=False, max_wall_s=9.0, label="x")
    assert set(changed) == set(tc.record())
    for name, value in changed.items():
        assert run_config(TrainConfig.flat(**(tc.record() | {name: value}))) != (rc, ways), name
    assert loop.LoopOptions() == loop.LoopOptions(build="lm", telemetry_every=0, flush_every=50, deterministic=None)
    with pytest.raises(ValueError, match="build"):
        loop.LoopOptions(build="other")


def test_telemetry_of_the_step_and_the_nonfinite_stop_at_its_read_backs():
    """`telemetry_every`: the step's own telemetry at step 0, every n-th and the last, with that step's loss; losses
    read back only there (flush_every = 0), so a non-finite loss stops the run at the next telemetry step, and one
    that no read-back checked is still recorded as stopped_at."""
    ways = loop.LoopOptions(telemetry_every=3, flush_every=0, build="gpt")
    r = loop.train(_cfg(steps=7, eval_batches=0), observers=[], options=ways)
    tel = r["telemetry"]
    assert tel["step"] == [0, 3, 6] and tel["loss"] == [r["loss"][s] for s in (0, 3, 6)]
    assert len(tel["max_logit"]) == 3 and len(tel["max_logit"][0]) == TINY["n_layer"]
    boom = loop.train(_cfg(steps=7, lr=1e6, warmup=0, grad_clip=0.0, eval_batches=0), observers=[], options=ways)
    bad = next(i for i, v in enumerate(boom["loss"]) if not np.isfinite(v))
    assert boom["stopped_at"] == min(s for s in (0, 3, 6) if s >= bad) and len(boom["loss"]) == boom["stopped_at"] + 1
    quiet = loop.train(_cfg(steps=7, lr=1e6, warmup=0, grad_clip=0.0, eval_batches=0), observers=[],
                       options=loop.LoopOptions(flush_every=0))
    assert len(quiet["loss"]) == 7 and quiet["stopped_at"] == next(
        i for i, v in enumerate(quiet["loss"]) if not np.isfinite(v))
