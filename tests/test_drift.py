"""Tests of lib/studies/golden/drift.py (weight-drift metrics, recorder, claim rule), lib/training/lockstep.py and the
weight_drift experiment at a tiny scale."""
import copy

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from lib.studies.golden import drift
from lib.training import metrics
from lib.training.lockstep import train_lockstep
from lib.training.model import GPT, GPTConfig
from lib.training.train import TrainConfig, train


# ------------------------------------------------------------------------------------------------------ W1
@pytest.mark.parametrize("na, nb", [(1, 1), (7, 7), (500, 500), (300, 1000), (1, 9)])
def test_w1_against_scipy(na, nb):
    rng = np.random.default_rng(na * 31 + nb)
    for _ in range(5):
        a = rng.normal(0, 0.02, na).astype(np.float32)
        b = (rng.standard_t(3, nb) * 0.03 + 0.01).astype(np.float32)
        want = wasserstein_distance(a.astype(np.float64), b.astype(np.float64))
        got = drift.wasserstein_1d(torch.from_numpy(a), torch.from_numpy(b))
        # FP64 of the same FP32 samples, sums of ≤ 1,300 terms in other orders: ~1e-13 relative at worst
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert got == pytest.approx(metrics.wasserstein_1d(a, b), rel=1e-12, abs=1e-15)


def test_w1_properties():
    a = torch.randn(40, 30)
    assert drift.wasserstein_1d(a, a[torch.randperm(40)]) == 0.0           # sees distributions, not positions
    # a shift moves it by the shift (a + 0.25 rounded in FP32: ≤ eps32·|a| ≈ 5e-7 per entry, ≈ 2e-6 of 0.25)
    assert drift.wasserstein_1d(a, a + 0.25) == pytest.approx(0.25, rel=1e-5)
    assert drift.wasserstein_1d(a, -a) == drift.wasserstein_1d(-a, a)
    sa, sb = torch.sort(a.flatten())[0], torch.sort((a * 1.1).flatten())[0]
    assert float(drift.w1_sorted(sa, sb)) == pytest.approx(drift.wasserstein_1d(a, a * 1.1), rel=1e-12)
    for bad in ((torch.tensor([]), a), (a, torch.tensor([float("nan")]))):
        with pytest.raises(ValueError):
            drift.wasserstein_1d(*bad)


# ------------------------------------------------------------------------------------------------ matrices
def _model(seed=0, n_layer=2):
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_layer=n_layer, n_head=2, n_embd=16, block_size=8, attn="naive"))


def test_weight_matrices_are_views_of_the_parameters():
    m = _model()
    mats = drift.weight_matrices(m)
    assert len(mats) == 2 * len(drift.MATRIX_KINDS) + 2
    C = 16
    assert mats["h1.w_q"].shape == (C, C) and mats["h1.fc"].shape == (4 * C, C)
    w = m.transformer.h[1].attn.c_attn.weight
    assert mats["h1.w_k"].data_ptr() == w[C:2 * C].data_ptr()
    assert mats["wte"] is m.lm_head.weight                      # tied


def test_recorder_numbers():
    a = _model()
    b = copy.deepcopy(a)
    c = copy.deepcopy(a)
    with torch.no_grad():
        b.transformer.h[0].attn.c_attn.weight[3, 5] += 1e-3    # h0.w_q, one entry, small enough to keep its rank
        w = c.transformer.h[1].mlp.c_fc.weight
        w.copy_(w.flatten()[torch.randperm(w.numel())].view_as(w))   # h1.fc permuted
    rec = drift.DriftRecorder({"same": ("a", "a2"), "poke": ("a", "b"), "perm": ("a", "c")})
    rec(0, {"a": a, "a2": copy.deepcopy(a), "b": b, "c": c})
    arr = rec.arrays()
    names = rec.matrix_names
    P = {p: i for i, p in enumerate(rec.pair_names)}
    assert np.all(arr["max_abs"][P["same"]] == 0) and np.all(arr["w1"][P["same"]] == 0)
    i = names.index("h0.w_q")
    # w + 1e-3 in FP32 is ≤ eps32·|w| ≈ 1e-8 off 1e-3 (|w| ≲ 0.1): 1e-3 relative is ample
    assert arr["max_abs"][P["poke"], 0, i] == pytest.approx(1e-3, rel=1e-3)
    assert arr["w1"][P["poke"], 0, i] == pytest.approx(1e-3 / (16 * 16), rel=1e-3)   # one order statistic moved
    assert np.count_nonzero(arr["max_abs"][P["poke"], 0]) == 1
    j = names.index("h1.fc")
    assert arr["max_abs"][P["perm"], 0, j] > 0 and arr["w1"][P["perm"], 0, j] == 0
    assert arr["scale"].shape == (4, 1, len(names))


def test_recorder_nan_and_bad_pairs():
    a, b = _model(), _model()
    with torch.no_grad():
        b.transformer.wpe.weight[0, 0] = float("nan")
    rec = drift.DriftRecorder({"p": ("a", "b")})
    rec(0, {"a": a, "b": b})
    arr = rec.arrays()
    k = rec.matrix_names.index("wpe")
    assert np.isnan(arr["w1"][0, 0, k]) and np.isnan(arr["max_abs"][0, 0, k])
    assert np.isfinite(np.delete(arr["w1"][0, 0], k)).all()
    with pytest.raises(ValueError):
        rec(1, {"a": a})
    with pytest.raises(ValueError):
        drift.DriftRecorder({"p": ("a", "a")})
    with pytest.raises(ValueError):
        drift.DriftRecorder({})


# ---------------------------------------------------------------------------------------------------- lockstep
def _cfg(**kw):
    base = dict(n_layer=2, n_head=1, n_embd=16, seq_len=16, batch_size=2, steps=5, lr=2e-3, warmup=2,
                device="cpu", telemetry_every=0, eval_batches=0, progress=False, attn="naive")
    return TrainConfig.flat(**(base | kw))


def test_lockstep_equals_train():
    """One arm in lockstep takes the same steps as `lib.training.train.train`: bit-identical losses on the CPU."""
    cfg = _cfg()
    ref = train(cfg)
    got = train_lockstep({"a": cfg}, record_every=2, progress=False)
    assert got["loss"]["a"] == ref["loss"]
    assert got["grad_norm"]["a"] == ref["grad_norm"]
    assert got["recorded_steps"] == [0, 2, 4, 5]
    assert got["starts_sha256"] == ref["starts_sha256"]


def test_lockstep_pairs_and_checks():
    seen = []
    rec = drift.DriftRecorder({"twin": ("a", "b"), "seed": ("a", "c")})

    def hook(step, models):
        seen.append(step)
        rec(step, models)

    out = train_lockstep({"a": _cfg(), "b": _cfg(), "c": _cfg(seed=1)}, on_record=hook, record_every=3,
                         progress=False)
    assert seen == [0, 3, 5]
    assert out["loss"]["a"] == out["loss"]["b"] and out["loss"]["a"] != out["loss"]["c"]
    arr = rec.arrays()
    assert np.all(arr["w1"][0] == 0) and np.all(arr["max_abs"][1] > 0)
    with pytest.raises(ValueError):
        train_lockstep({"a": _cfg(), "b": _cfg(steps=4)})
    with pytest.raises(ValueError):
        train_lockstep({"a": _cfg()}, record_every=0)


# ---------------------------------------------------------------------------------------------------- claim
def _fake(ratios_low_over_flash, seed_w1=1.0, placement=(0.5,)):
    """A result whose flash pair has W1 = 1 and low-precision pair W1 = the given ratios, at 2 records."""
    M = len(ratios_low_over_flash)
    mats = [f"h{i}.w_q" for i in range(M)]
    pairs = ["flash", "low", "seed"] + [f"pl{i}" for i in range(len(placement))]
    w1 = np.ones((len(pairs), 2, M))
    w1[1] = np.asarray(ratios_low_over_flash, float)
    w1[2] = seed_w1
    for i, r in enumerate(placement):
        w1[3 + i] = np.asarray(ratios_low_over_flash, float) / r
    data = {"pairs": pairs, "matrices": mats, "device": "test",
            "claim_setup": dict(flash_pair="flash", lowprec_pair="low", seed_pair="seed",
                                placement_pairs=[f"pl{i}" for i in range(len(placement))], focus_matrix="h1.w_q",
                                steps=10, seeds=[0, 1], regime="test")}
    arrays = {"steps": np.array([0, 10]), "w1": w1, "max_abs": w1.copy()}
    return data, arrays


def test_claim_rule():
    assert drift.claim_weight_drift_bounded(*_fake([3, 2.5, 4, 5]))["status"] == "reproduced"
    assert drift.claim_weight_drift_bounded(*_fake([3, 2.5, 4, 0.9]))["status"] == "partly"      # one matrix < 1
    assert drift.claim_weight_drift_bounded(*_fake([1.5, 1.2, 1.8, 1.1]))["status"] == "partly"
    assert drift.claim_weight_drift_bounded(*_fake([0.5, 0.8, 1.2, 0.3]))["status"] == "not reproduced"
    assert drift.bound_verdict([np.nan]) == "not yet tested"
    data, arrays = _fake([3, 2.5, 4, 5], placement=(0.5, 3.0))
    chk = drift.placement_check(data, arrays)
    assert chk["pl0"]["breaks"] and not chk["pl1"]["breaks"] and not chk["flash"]["breaks"]
    assert chk["pl0"]["r"] == pytest.approx(0.5)


def test_horizon_skips_non_finite_records():
    data, arrays = _fake([3, 2.5, 4, 5])
    arrays["w1"][0, 1, 2] = np.nan
    assert drift.horizon(data, arrays, ("flash", "low")) == 0
    assert drift.horizon(data, arrays, ("low", "seed")) == 1


# ----------------------------------------------------------------------------------------------- experiment
def test_weight_drift_experiment_tiny():
    from lib.studies.golden import weight_drift
    cfg = dict(device="cpu", n_layer=2, n_head=1, n_embd=16, seq_len=16, batch_size=2, steps=3, lr=2e-3, warmup=1,
               schedule="constant", grad_clip=1.0, seed=0, data_seed=0, deterministic="warn", autocast="bf16",
               record_every=1, max_wall_s=0.0,
               arms={"flash": {"attn": "sdpa"}, "naive": {"attn": "naive"}, "naive_seed1": {"attn": "naive", "seed": 1},
                     "naive_fp32": {"attn": "naive", "autocast": "none"}},
               pairs={"flash_vs_naive": ["flash", "naive"], "seed": ["naive", "naive_seed1"],
                      "bf16_vs_fp32": ["naive", "naive_fp32"]},
               flash_pair="flash_vs_naive", lowprec_pair="bf16_vs_fp32", seed_pair="seed", placement_pairs=[],
               focus_matrix="h1.w_q")
    res = weight_drift.run("ci", cfg)
    d, a = res["data"], res["arrays"]
    assert d["steps_done"] == 3 and list(a["steps"]) == [0, 1, 2, 3]
    assert a["w1"].shape == (3, 4, len(d["matrices"])) and a["loss"].shape == (4, 3)
    P = d["pairs"]
    assert np.all(a["w1"][P.index("flash_vs_naive"), 0] == 0)        # same seed: identical at step 0
    assert np.all(a["max_abs"][P.index("seed"), 0] > 0)              # different seeds: different from the start
    assert d["claims"]["weight_drift_bounded"]["status"] in ("reproduced", "partly", "not reproduced")
    lt = drift.layer_table(d, a, "bf16_vs_fp32", "flash_vs_naive")
    assert lt.shape == (2, len(drift.MATRIX_KINDS))
    with pytest.raises(ValueError):
        weight_drift.arm_configs(dict(cfg, pairs={"x": ["flash", "nope"]}))
    with pytest.raises(ValueError):
        weight_drift.arm_configs(dict(cfg, arms={"a": {"spec": "sdpa"}}))


def test_drift_figures_and_key_numbers():
    import matplotlib.pyplot as plt
    from lib.studies.golden import figures as dp
    data, arrays = _fake([3, 2.5, 4, 5, 2, 2.2, 1.5, 3, 3, 3, 3, 3, 3, 3])
    data["matrices"] = [f"h{i}.{k}" for i in range(2) for k in drift.MATRIX_KINDS] + ["wte", "wpe"]
    data["claim_setup"]["focus_matrix"] = "h1.w_q"
    data["pair_arms"] = {p: ("x", "y") for p in data["pairs"]}
    data["arms"] = ["x", "y"]
    arrays["scale"] = np.ones((2, 2, 14))
    kn = drift.key_numbers(data, arrays)
    assert kn["median"] == pytest.approx(3.0) and kn["n"] == 14 and kn["horizon"] == 10
    assert kn["focus_ratio"] == pytest.approx(1.5)          # the 7th matrix, h1.w_q
    for fig in (dp.drift_figure(data, arrays), dp.drift_ratio_figure(data, arrays)):
        assert fig.axes
        plt.close(fig)
