"""The delta_capture experiment at ci scale (a tiny model, the paper kernel in the interpreter, a few steps), its
result format, its saved-and-reloaded claims, and every figure of lib/studies/delta/figures.py on it."""
import matplotlib
import numpy as np
import pytest

from lib.book import registry, results
from lib.studies.delta import delta_capture as dc
from lib.studies.delta import figures as dp
from lib.studies.delta import stats as ds
from lib.studies.delta import verdicts as dv
from lib.training.capture import unpack


@pytest.fixture(scope="module")
def ci(tmp_path_factory):
    cfg = registry.resolve("delta_capture", "ci")
    out = dc.run("ci", cfg)
    root = tmp_path_factory.mktemp("res")
    results.save("delta_capture", "ci", out["data"], arrays=out["arrays"], depends_on=["lib/studies/delta/delta_capture.py"],
                 seeds=out["seeds"], config=cfg, root=root)
    return cfg, out, results.load("delta_capture", "ci", root=root)


def test_registry_entries_resolve():
    full = registry.resolve("delta_capture", "full")
    assert full["attn"] == "paper/round_block=512" and full["lr"] == "from:regime_sweep" and full["warmup"] == 500
    assert (full["batch_size"], full["seq_len"], full["n_layer"], full["n_embd"]) == (32, 512, 6, 384)
    assert all(k in full for k in dc.REQUIRED) and all(k in registry.resolve("delta_capture", "ci") for k in dc.REQUIRED)
    fa2 = registry.resolve("delta_capture_fa2", "full")
    assert fa2["attn"] == "fa2" and fa2["lr"] == full["lr"] and fa2["keep_seeds"] == []
    with pytest.raises(registry.RegistryError):
        registry.resolve("no_such_entry", "ci")
    with pytest.raises(ValueError):
        dc.run("ci", {"attn": "paper"})
    with pytest.raises(ValueError, match="n_flip"):    # a permutation test that could never reach α / heads
        dc.run("ci", dict(registry.resolve("delta_capture", "ci"), n_flip=100))
    assert full["n_flip"] + 1 >= 10 * full["n_layer"] * full["n_head"] / ds.ALPHA


def test_result_shapes_and_replay_fidelity(ci):
    cfg, out, res = ci
    d, a = res.data, res.arrays
    S, N = len(cfg["seeds"]), len(d["steps"][0])
    assert d["steps"][0] == list(range(0, cfg["steps"], cfg["capture_every"]))
    assert a["st__sum_dd"].shape == (S, N, cfg["n_layer"], cfg["n_head"])
    assert a["sum__steps_q_cos"].shape == (S, cfg["n_layer"], cfg["n_head"], N, N)
    assert np.allclose(np.diagonal(a["sum__steps_q_cos"][0, 0, 0]), 1.0)
    # the emulator replays the training kernel's O bit for bit (both are the paper placement on the CPU)
    assert np.all(a["rv__paper__o_match"] == 1.0)
    assert np.all(a["rv__fa2__o_match"] < 1.0)
    r = d["runs"][0]
    assert r["n_captures"] == N and r["capture_bytes"] > 0 and 0 <= r["capture_overhead"] < 1.0
    assert set(d["claims"]) == set(dv.VERDICT_RULES)
    assert all(c["status"] in ("reproduced", "partly", "not reproduced", "not yet tested") for c in d["claims"].values())


def test_claims_recompute_from_the_saved_result(ci):
    _, out, res = ci
    assert dv.claims(res, ci_as_untested=False) == res.data["claims"]
    shown = dv.claims(res)                      # a ci result never counts for or against a claim
    assert all(v["status"] == "not yet tested" and v["evidence"].startswith("ci scale only") for v in shown.values())


def test_kept_captures_replay_on_the_cpu(ci):
    cfg, out, res = ci
    caps = unpack(res.data["keep_index"], res.arrays, prefix="keep")
    assert len(caps) == len(set(cfg["keep_steps"])) or len(caps) >= 2
    c = caps[0]
    assert len(c.meta["rows"]) == cfg["keep_rows"] and len(c.heads) == min(cfg["keep_heads"], cfg["n_head"])
    st = ds.capture_stats(c, n_shuffle=20, keep_matrices=False)["stats"]
    assert st["n_rows"].shape == (1, len(c.heads)) and np.all(st["n_rows"] == cfg["seq_len"])
    assert np.all(np.isfinite(st["eq_fro"]))


def test_figures(ci):
    cfg, out, res = ci
    c = unpack(res.data["keep_index"], res.arrays, prefix="keep")[-1]
    lay = c.layer(c.layers[0])
    figs = [dp.token_errors(lay, c.meta["scale"], head=0), dp.term_heatmaps(lay, c.meta["scale"], head=0, top=16),
            dp.term_heatmaps(lay, c.meta["scale"], head=0, side="k", top=16), dp.sign_strip(res),
            dp.cumulative_delta(res), dp.o_error_by_v_sign(res), dp.step_heatmaps(res), dp.push_figure(res),
            dp.variant_strip(res)]
    for f in figs:
        assert isinstance(f, matplotlib.figure.Figure)
        f.canvas.draw()
        for t in f.findobj(matplotlib.text.Text):
            if t.get_text() and " · " not in t.get_text():   # the provenance stamp is lib.book.plotting's (7 pt)
                assert t.get_fontsize() >= 8, (t.get_text(), t.get_fontsize())
        matplotlib.pyplot.close(f)
    with pytest.raises(ValueError):
        dp.term_heatmaps(lay, c.meta["scale"], side="v")


def test_chapter_numbers(ci):
    from lib.studies.delta import reading as dr
    cfg, out, res = ci
    n4, n5 = dr.numbers_ch4(res), dr.numbers_ch5(res)
    assert n4["n_heads"] == cfg["n_layer"] * cfg["n_head"] and n4["var_self_key"] == "paper"
    assert n4["var_self"] == "paper placement, 64-key blocks"              # variants in words, names kept apart
    assert n4["var_self_match"] == 1.0 and "paper placement, 512-key blocks" in n4["var_line"]
    assert "paper_untiled" not in n4["var_line"]
    assert 0 <= n4["rows_lo"] <= n4["rows_hi"] <= 1 and -1 <= n4["nb_lo"] <= n4["nb_hi"] <= 1
    assert n4["claim_delta_bias"] == "not yet tested" and "the rules gave" in n4["claim_delta_bias_ev"]
    assert np.isfinite(n5["tok_rho2_med"]) and np.isfinite(n5["steps_rho2_med"]) and n5["push_sig"] >= 0
    rows = dr.variant_table(res)
    n_keep = len(res.data["keep_index"])
    assert len(rows) == n_keep * len(cfg["variants"]) * cfg["keep_heads"]
    assert all(r["o_match"] == 1.0 for r in rows if r["variant"] == "paper")
    assert "live CI-scale" in dr.shown_text(res, False) and "full-scale" in dr.shown_text(res, True)
    dc_ = dr.derivation_check()
    assert dc_["q"] < 1e-3 and dc_["k"] < 1e-3
    assert dr.marchenko_pastur_srank(16, 24) == pytest.approx(16 * 24 / (4 + 24 ** 0.5) ** 2)


def test_worker_threads_and_thread_env(monkeypatch):
    monkeypatch.setattr(dc.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert dc.worker_threads(3) == 5 and dc.worker_threads(1) == 16 and dc.worker_threads(40) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with dc.thread_env(2):
        assert dc.os.environ["OMP_NUM_THREADS"] == dc.os.environ["MKL_NUM_THREADS"] == "2"
        assert dc.os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert dc.os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in dc.os.environ
    import torch
    n = torch.get_num_threads()
    with dc.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == n


def test_workers_start_with_their_share_of_the_cores():
    import os
    env = dc.worker_env(dc.worker_threads(2))
    before = {k: os.environ.get(k) for k in env}
    got = dc.map_jobs(os.getenv, list(env), workers=2)                 # os.getenv runs in the spawned workers
    assert got == list(env.values())
    assert {k: os.environ.get(k) for k in env} == before
    assert dc.map_jobs(abs, [-1, 2], workers=1) == [1, 2]
