"""The GPT-2 arms' telemetry at toy size on the CPU: the side chain probe leaves training bit-identical, captures the
training loss's dO, records the layers it chose; the telemetry cost read from the progress clock."""
import numpy as np
import pytest
import torch

from lib.book import registry
from lib.studies.gpt2 import arms
from lib.studies.gpt2.telemetry import SideProbe, telemetry_cost
from lib.training.lm import LM
from lib.training.loop import RunConfig, get_batch, load_data


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("telemetry")
    cfg = dict(registry.resolve("gpt2_arms", "ci"), corpus_dir=str(tmp / "corpus"))
    corpus_dir, _ = arms.build_corpus(cfg)
    return cfg, arms.arm_configs(cfg, corpus_dir)


def test_probe_leaves_training_bit_identical(toy):
    cfg, rcs = toy
    rc = rcs[0]
    plain = arms.train_lm(rc)
    probed = arms.train_arm(rc, cfg["probe"], progress_every=1)
    assert np.array_equal(np.asarray(plain["loss"]), np.asarray(probed["loss"]))
    assert np.array_equal(np.asarray(plain["grad_norm"]), np.asarray(probed["grad_norm"]))
    # events at 0, 2 and the last step (3); one layer each, chosen by its conjunction count
    recs = probed["probe"]
    assert [r["step"] for r in recs] == [0, 2, 3]
    L, H = rc.model.n_layer, rc.model.n_head
    for r in recs:
        assert r["layers"].shape == (1,) and r["conj_all"].shape == (L,)
        assert r["conj_all"][r["layers"][0]] == r["conj_all"].max()
        assert r["dg_norm"].shape == (1, H)
    assert len(probed["probe_s"]) == 3 and [s for s, _ in probed["step_times"]] == [1, 2, 3, 4]


def test_probe_captures_the_training_losss_do(toy):
    """The probe's dO on its rows equals the dO the full batch's loss gives those rows (FP32 on the CPU: equal to
    rounding; the scaling by rows / batch is what makes them equal at all)."""
    cfg, rcs = toy
    rc = rcs[0]
    torch.manual_seed(rc.seed)
    model = LM(rc.model)
    train = load_data(rc)[0]
    probe = SideProbe(rc, train, every=1, rows=1, top=rc.model.n_layer)
    got = {}
    real_measure = probe.measure

    def spy(l, attn, opt):
        got[l] = attn.captured["do"].clone()
        return real_measure(l, attn, opt)
    probe.measure = spy
    opt = torch.optim.AdamW(model.parameters())
    x, y = get_batch(train, probe.starts[0], rc, "cpu")
    for attn in model.attn_layers:
        attn.capture = True
    model(x, y)[1].backward()                       # the training step's backward, as train_lm runs it
    full = {l: attn.captured["do"][:1].clone() for l, attn in enumerate(model.attn_layers)}
    for attn in model.attn_layers:
        attn.capture, attn.captured = False, {}
    grads = [p.grad.clone() for p in model.parameters()]
    probe.after_backward(0, model, opt)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))   # no gradient touched
    for l in full:
        assert torch.allclose(got[l], full[l], rtol=1e-5, atol=1e-6 * float(full[l].abs().max()))
        assert float(full[l].abs().max()) > 0


def test_telemetry_cost_on_planted_times():
    """Windows of 50 steps at 5 s; the windows holding events at 200 and 400 take 1 s more: share 2 / (5 · 9)."""
    times, t = [], 0.0
    for s in range(50, 551, 50):
        t += 5.0 + (1.0 if s in (250, 450) else 0.0)
        times.append((s, t))
    c = telemetry_cost(times, [200, 400])
    assert c["clean_s"] == pytest.approx(5.0) and c["extra_s"] == pytest.approx(2.0)
    assert c["share"] == pytest.approx(2.0 / (5.0 * 10))
    # a restarted clock (a resumed process) is left out, not counted as a negative window
    c2 = telemetry_cost(times + [(600, 1.0), (650, 6.0)], [200, 400])
    assert c2["share"] == pytest.approx(2.0 / (5.0 * 11))


def test_run_records_the_telemetry(toy):
    cfg, _ = toy
    res = arms.run("ci", cfg)
    tel = res["data"]["telemetry"]
    assert set(tel) == {"fp32:s0", "paper:s0"}
    assert res["arrays"]["paper:s0__probe__layers"].shape == (3, 1)
    assert res["arrays"]["paper:s0__probe__dg_norm"].shape == (3, 1, 2)
