"""The training harness (lib/training/train.py): schedule, reproducibility, resume/replay, telemetry quantities, CLI."""
import math

import numpy as np
import pytest
import torch

from lib.training import data
from lib.training.train import TrainConfig, _parser, delta_error, lr_at, score_stats, train
from tests.precision import EPS32

TINY = dict(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=4, lr=3e-3, warmup=3, progress=False,
            eval_batches=1)


def test_lr_schedule():
    c = TrainConfig.flat(**TINY, steps=20)
    assert [lr_at(c, s) for s in range(3)] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert lr_at(c, 3) == lr_at(c, 19) == 3e-3
    cc = TrainConfig.flat(**(TINY | dict(schedule="cosine", min_lr=1e-4)), steps=23)
    assert lr_at(cc, 3) == pytest.approx(3e-3) and lr_at(cc, 23) == pytest.approx(1e-4)
    assert lr_at(cc, 13) == pytest.approx(0.5 * (3e-3 + 1e-4))
    for bad in (dict(schedule="linear"), dict(autocast="fp16"), dict(deterministic="yes"), dict(steps=0), dict(lr=-1.0), dict(attn="x")):
        with pytest.raises(ValueError):
            TrainConfig.flat(**(TINY | bad))


def test_the_config_nests_the_model_and_records_flat_keys():
    """The model is a `GPTConfig` (one declaration of its fields); registry entries, records and the command line keep
    the flat keys, so a record written before the nesting reads the same config and a new one has the same keys."""
    import json
    from pathlib import Path
    from lib.training.model import GPTConfig
    c = TrainConfig.flat(**TINY, steps=5, attn="paper+fix", beta=3.0, max_shift=None, qk_norm=True)
    assert isinstance(c.model, GPTConfig) and c.model.vocab_size == 256
    assert (c.model.n_layer, c.model.block_size, c.model.attn, c.model.beta, c.model.max_shift, c.model.qk_norm) == \
        (2, 32, "paper+fix", 3.0, None, True)
    assert TrainConfig.flat(**c.record()) == c and c.name == "paper+fix"
    assert list(c.record())[:3] == ["n_layer", "n_head", "n_embd"] and c.record()["seq_len"] == 32
    # a committed proxy result's record: the keys a record has (besides the study's own two), and it reads back
    rec = json.loads((Path(__file__).parents[1] / "results" / "full" / "headline.json").read_text())["meta"]["config"]
    flat = {k: v for k, v in rec.items() if k not in ("lr_source", "workers")}
    assert set(TrainConfig().record()) == set(flat)
    assert TrainConfig.flat(**flat).record() == flat
    with pytest.raises(ValueError, match="vocab_size"):
        TrainConfig(model=GPTConfig(vocab_size=50304))       # a token model is not the proxy


def test_same_seed_bit_identical_and_seeds_matter():
    cfg = TrainConfig.flat(**TINY, steps=12, attn="sdpa", telemetry_every=4)
    a, b = train(cfg), train(cfg)
    assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]        # bit-identical on the CPU
    assert all(torch.equal(p, q) for p, q in zip(a["model"].parameters(), b["model"].parameters()))
    c = train(TrainConfig.flat(**(TINY | dict(seed=1)), steps=12, attn="sdpa", telemetry_every=4))
    d = train(TrainConfig.flat(**(TINY | dict(data_seed=1)), steps=12, attn="sdpa", telemetry_every=4))
    assert c["loss"][0] != a["loss"][0] and d["starts_sha256"] != a["starts_sha256"]
    assert c["starts_sha256"] == a["starts_sha256"]
    assert a["seeds"] == dict(torch=0, data=0) and "torch" in a["versions"]
    assert a["telemetry"]["step"] == [0, 4, 8, 11]
    assert len(a["loss"]) == len(a["lr"]) == 12


def test_learns_and_records_telemetry():
    r = train(TrainConfig.flat(**(TINY | dict(lr=1e-2, warmup=5)), steps=60, attn="naive", telemetry_every=20))
    first, last = np.mean(r["loss"][:5]), np.mean(r["loss"][-5:])
    assert last < first - 1.0, (first, last)          # from ~ln 256 = 5.5 nats/byte down
    t = r["telemetry"]
    L, H = 2, 2
    for key in ("wq_norm", "wk_norm", "tie_rate_head", "delta_err_sum"):
        assert np.asarray(t[key]).shape == (len(t["step"]), L, H), key
    for key in ("wq_norm_layer", "wk_norm_layer", "max_logit", "tie_rate"):
        assert np.asarray(t[key]).shape == (len(t["step"]), L), key
    tr = np.asarray(t["tie_rate"])
    assert ((tr >= 0) & (tr <= 1)).all()
    # per-layer ‖W_Q‖₂ bounds every head's and is at most the root-sum-square of the heads'
    wq, wql = np.asarray(t["wq_norm"]), np.asarray(t["wq_norm_layer"])
    # (each norm an FP32 SVD's σ₁, ≤ (m + n)·eps32 of it off: m + n = 2C = 64 for the layer's)
    tol = 64 * EPS32 * wql
    assert (wql >= wq.max(-1) - tol).all() and (wql <= np.sqrt((wq ** 2).sum(-1)) + tol).all()
    # FP32 naive attention *is* the FP32 reference: Σ Δδ is zero up to FP32 reassociation noise (the same function
    # on the same tensors: 0 here; 1e-6 leaves room for another order)
    assert np.abs(np.asarray(t["delta_err_sum"])).max() < 1e-6
    assert r["val"]["step"] == [60] and r["val"]["loss"][0] < 5.0
    assert r["stopped_at"] is None


def test_score_stats_against_brute_force():
    torch.manual_seed(0)
    B, H, T, D = 2, 3, 9, 4
    q, k = torch.randn(B, H, T, D), torch.randn(B, H, T, D)
    k[:, :, 2] = k[:, :, 1]             # identical keys: every row i >= 2 whose max is at key 1 ties with key 2
    scale = 0.7
    st = score_stats(q, k, scale, chunk_elems=H * T * T)   # one batch row per chunk: exercises chunking
    s = (q.double() @ k.double().transpose(-1, -2)).float() * scale
    max_logit, ties = -math.inf, np.zeros(H)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                row = torch.tensor([float(torch.tensor(s[b, h, i, j].item()).to(torch.bfloat16))
                                    for j in range(i + 1)])
                max_logit = max(max_logit, s[b, h, i, :i + 1].max().item())
                ties[h] += (row == row.max()).sum().item() >= 2
    # an FP32 D-term dot against FP64's rounded to FP32: ≤ D·eps32 of scale·Σ|q||k| (2γ_D) plus eps32 relative
    dot_tol = D * EPS32 * scale * (q.abs() @ k.abs().transpose(-1, -2)).max().item()
    assert st["max_logit"] == pytest.approx(max_logit, rel=EPS32, abs=dot_tol)
    # counts over B·T rows, as FP32 or FP64 ratios: ≤ eps32/2 relative
    np.testing.assert_allclose(st["tie_rate_head"].numpy(), ties / (B * T))
    assert st["tie_rate"] == pytest.approx(ties.sum() / (B * H * T))
    assert ties.sum() > 0


def test_delta_error_is_rowsum_of_do_times_output_error():
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, 2, 8, 16).unbind(0)
    from lib.training.model import naive_attention
    o_hp = naive_attention(q, k, v)
    err = torch.zeros_like(o_hp)
    err[0, 1, 3, 5] = 0.25                       # one planted output error in head 1
    do = torch.randn_like(o_hp)
    d = delta_error(q, k, v, o_hp + err, do, 1 / 4)
    assert d[0].item() == pytest.approx(0.0, abs=1e-6)       # no planted error in head 0: exactly 0
    # (O + 0.25) − O in FP32: ≤ eps32·|O| ≈ 4e-7 off 0.25, ≈ 2e-6 relative
    assert d[1].item() == pytest.approx(0.25 * do[0, 1, 3, 5].item(), rel=1e-5)


def test_resume_and_replay_reproduce_the_uninterrupted_run(tmp_path):
    base = dict(TINY, attn="sdpa", telemetry_every=0, eval_batches=0)
    full = train(TrainConfig.flat(**base, steps=10, out_dir=str(tmp_path), ckpt_every=5))
    starts = data.load_starts(tmp_path / "starts.npy")
    assert starts.shape == (10, 4) and (tmp_path / "ckpt_step5.pt").exists() and (tmp_path / "ckpt.pt").exists()
    # resume at step 5: the remaining steps replay the recorded batch order -> the same curve and weights
    resumed = train(TrainConfig.flat(**base, steps=10, starts_path=str(tmp_path / "starts.npy"),
                                resume=str(tmp_path / "ckpt_step5.pt")))
    assert resumed["loss"] == full["loss"]
    assert all(torch.equal(p, q) for p, q in zip(resumed["model"].parameters(), full["model"].parameters()))
    # a replayed order drives a fresh run the same way as the drawn one, whatever data_seed says
    replay = train(TrainConfig.flat(**(base | dict(data_seed=99)), steps=10, starts_path=str(tmp_path / "starts.npy")))
    assert replay["loss"] == full["loss"]
    with pytest.raises(ValueError, match="does not cover"):
        train(TrainConfig.flat(**base, steps=11, starts_path=str(tmp_path / "starts.npy")))


def test_cli_help_lists_every_field(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--attn", "--lr", "--data-seed", "--telemetry-every", "--deterministic", "--no-progress"):
        assert flag in out


def test_ours_backend_trains_and_has_nonzero_delta_error():
    from tests.test_model import _kernel_import_error
    reason = _kernel_import_error()
    if reason:
        pytest.skip(reason)
    r = train(TrainConfig.flat(n_layer=1, n_head=1, n_embd=16, seq_len=16, batch_size=2, lr=3e-3, warmup=1, steps=2,
                          attn="paper", telemetry_every=1, progress=False, eval_batches=0))
    d = np.asarray(r["telemetry"]["delta_err_sum"])
    assert d.shape == (2, 1, 1) and np.isfinite(d).all() and np.abs(d).max() > 0   # BF16-rounded O ≠ FP32 O
    assert all(math.isfinite(v) for v in r["loss"])


def test_wall_clock_budget_truncates_within_ten_steps():
    r = train(TrainConfig.flat(**TINY, steps=10_000, attn="sdpa", telemetry_every=7, max_wall_s=0.5))
    n = r["truncated_at"]
    assert n is not None and n < 10_000 and len(r["loss"]) == n and n % 10 == 0
    # the budget may end between telemetry steps: the last telemetry step is the last multiple of 7 before n
    assert r["wall_s"] >= 0.5 and r["stopped_at"] is None
    assert r["telemetry"]["step"][-1] == 7 * ((n - 1) // 7)
