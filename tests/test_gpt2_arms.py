"""The GPT-2 arms' machinery at toy size on the CPU: arms as detached processes that resume across calls (the full
scale path), the progress lines the campaign reads, and the GPT-2 capture for the gradient checks."""
import os
from pathlib import Path

import pytest
import torch

from lib.book import registry
from lib.studies.gpt2 import arms, campaign
from lib.studies.gpt2.reading import recipe


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("arms")
    cfg = dict(registry.resolve("kernel_fidelity", "ci"), workdir=str(tmp / "work"), gpus=1, ckpt_every_s=0.0,
               corpus_dir=str(tmp / "corpus"))
    cfg["arms"] = [dict(a, compile=False) for a in cfg["arms"]]
    return cfg


def test_full_path_starts_waits_and_packs(toy, monkeypatch):
    """The first call starts every arm in its own process and returns Pending; the next waits and packs them: the
    same initialisation (equal first losses: SDPA and our kernel agree to BF16-free FP32 rounding on the CPU). The
    wait polls every 0.2 s instead of every 10 s (a GPU run's cadence), so the test ends when the arms do."""
    import time
    import types
    monkeypatch.setattr(arms, "time", types.SimpleNamespace(time=time.time, sleep=lambda s: time.sleep(min(s, 0.2))))
    monkeypatch.setenv("BOOK_WAIT_S", "0")
    with pytest.raises(arms.Pending):
        arms.run("full", toy)
    labels = campaign._labels(toy)
    assert all((Path(toy["workdir"]) / f"{lab.replace(':', '_')}.pid").exists() for lab in labels)
    monkeypatch.setenv("BOOK_WAIT_S", "300")
    res = arms.run("full", toy)
    runs = {r["label"]: r for r in res["data"]["runs"]}
    assert set(runs) == set(labels) and all(r["steps"] == toy["steps"] for r in runs.values())
    a, b = (res["arrays"][f"{lab}__loss"] for lab in labels)
    # FP32 on the CPU: the two attentions differ by attention's FP32 bound (tests/precision.py: (64 + 16)·eps32 ≈ 5e-6
    # of the largest entry), carried through two layers and the cross-entropy; 1e-4 leaves a factor of 20. A different
    # initialisation or batch moves the first loss by ~1e-2.
    assert abs(float(a[0]) - float(b[0])) < 1e-4 * abs(float(a[0]))
    assert "__census__wq_sigma" in "".join(res["arrays"])
    # a third call finds the results and trains nothing
    assert arms.run("full", toy)["data"]["runs"][0]["steps"] == toy["steps"]


def test_progress_lines_are_what_the_campaign_reads(toy, capsys):
    from lib.studies.gpt2.telemetry import Clock
    hook = Clock("x:s1", every=2)
    model = torch.nn.Linear(2, 2)
    model(torch.ones(1, 2)).sum().backward()
    hook.after_backward(1, model, None)
    line = capsys.readouterr().out
    log = Path(toy["workdir"]) / "x_s1.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(line)
    assert campaign._steps(toy, "x:s1") == (2, True)


def test_capture_from_a_checkpoint(toy, tmp_path):
    """q, k, v, dO of one layer from an arm's checkpoint, in the form the gradient checks read."""
    toy = dict(toy)
    if not any(Path(toy["workdir"]).glob("*.pt")):
        pytest.skip("needs the checkpoints of the test above")
    rec = campaign.capture_gpt2(toy, "sdpa_eager:s1", tmp_path / "cap.pt", layer=1, rows=1)
    back = torch.load(tmp_path / "cap.pt", weights_only=False)
    assert back["q"].shape == back["do"].shape == (1, 2, 64, 16) and back["layer"] == 2 and back["step"] == 4
    assert rec["arm"] == "sdpa_eager:s1"


def test_an_extra_entry_gets_its_own_capture(toy, monkeypatch):
    """An --extra entry that names gpt2_windows gets layer 2 of the source arm's checkpoint with that many windows,
    once, when the checkpoint is past 3,000 steps; other entries get nothing."""
    if not any(Path(toy["workdir"]).glob("*.pt")):
        pytest.skip("needs the checkpoints of the test above")
    cfgs = [dict(toy, _entry="toy")]
    monkeypatch.setattr(campaign, "capture_source", lambda _: (toy, "sdpa_eager:s1"))
    assert campaign.extra_capture("gradient_checks", cfgs, 0) == {}
    assert campaign.extra_capture("kernel_bias_table", cfgs, 0) == {}          # the toy's step 4 < 3,000
    monkeypatch.setattr(campaign, "_steps", lambda cfg, lab: (3000, True))
    monkeypatch.setattr(campaign.registry, "resolve", lambda name, scale: {"gpt2_windows": 2})
    env = campaign.extra_capture("kernel_bias_table", cfgs, 0)
    back = torch.load(env["BOOK_GPT2_CAPTURE"], weights_only=False)
    assert back["q"].shape == (2, 2, 64, 16) and back["layer"] == 2
    stamp = Path(env["BOOK_GPT2_CAPTURE"]).stat().st_mtime_ns
    assert campaign.extra_capture("kernel_bias_table", cfgs, 0) == env
    assert Path(env["BOOK_GPT2_CAPTURE"]).stat().st_mtime_ns == stamp             # not captured again


def test_campaign_places_arms_of_several_entries_one_per_gpu():
    """Two entries of two arms fill four GPUs in order (a seed's reference entry first: FP32 attention on GPU 0, not
    slowed by the GPU tests); the capture comes from the SDPA arm, else the paper arm."""
    ref = dict(registry.resolve("gpt2_arms_s1", "full"), _entry="gpt2_arms_s1")
    fa2 = dict(registry.resolve("gpt2_arms_s1_fa2", "full"), _entry="gpt2_arms_s1_fa2")
    slots = campaign._slots([ref, fa2])
    assert [lab for _, lab in slots] == ["fp32:s1", "paper:s1", "sdpa:s1", "ours_fa2:s1"]
    assert campaign.capture_source([ref, fa2])[1] == "sdpa:s1"
    assert campaign.capture_source([ref])[1] == "paper:s1"
    assert ref["workdir"] != fa2["workdir"] and ref["seeds"] == fa2["seeds"] == [1]
    # the two entries of a seed are one gpt2_arms run: same recipe, horizon, telemetry and rules (the FA2 entry's
    # probe records the split of O's error besides, which changes nothing else)
    base = registry.resolve("gpt2_arms", "full")
    for cfg in (ref, fa2):
        assert recipe(cfg) == recipe(base)
    assert "split" not in ref["probe"] and fa2["probe"] == dict(base["probe"], split=True)
    assert sorted(a["label"] for c in (ref, fa2) for a in c["arms"]) == sorted(a["label"] for a in base["arms"])


def test_failure_rule():
    from lib.studies.gpt2.reading import failure_step
    flat = [3.0] * 300
    assert failure_step(flat, 100, 0.3) is None
    rising = [3.0] * 200 + [4.01] * 100
    assert failure_step(rising, 100, 0.3) == 229          # 30 steps of +1.01 lift the 100-step mean by 0.303
    assert failure_step([3.0] * 50 + [float("nan")], 100, 0.3) == 50
    assert failure_step([3.0] * 20, 100, 0.3) is None


def test_fidelity_rule_on_planted_series():
    """A pair whose gap is the spread's size is alike; ten times the spread is not; a failing arm is not."""
    import numpy as np
    from lib.studies.gpt2.reading import fidelity
    E, L, H = 5, 3, 2
    base = np.ones((E, L, H)) * np.arange(1, E + 1)[:, None, None]
    arrays, runs = {}, []
    for lab, f, loss in (("sdpa_eager", 1.0, 3.0), ("sdpa_compiled", 1.01, 3.0), ("fa2_eager", 1.012, 3.0),
                         ("fa2_compiled", 1.2, 3.0)):
        pre = f"{lab}:s1__census__"
        arrays[pre + "step"] = np.arange(E) * 10
        arrays[pre + "fa2/max_logit"] = base * f
        arrays[pre + "wq_sigma"] = base * f
        arrays[f"{lab}:s1__loss"] = np.full(50, loss)
        runs.append(dict(label=f"{lab}:s1"))
    rules = dict(failure_window=10, failure_rise=0.3, alike_factor=1.5, spread=["sdpa_eager", "sdpa_compiled"],
                 pairs=[["fa2_eager", "sdpa_eager"], ["fa2_compiled", "sdpa_compiled"]])
    fid = fidelity(arrays, runs, rules)
    eager, compiled = fid["pairs"]
    assert eager["alike"] and not compiled["alike"]
    assert abs(fid["spread"]["1"]["logit"] - np.log(1.01)) < 1e-12
    arrays["fa2_eager:s1__loss"] = np.concatenate([np.full(25, 3.0), np.full(25, 5.0)])
    assert not fidelity(arrays, runs, rules)["pairs"][0]["alike"]


def test_fidelity_numbers_and_figure_from_a_live_run():
    """The chapter's glue and figure from a ci-scale run of the registered experiment."""
    import matplotlib
    matplotlib.use("Agg")
    from lib.book.runner import live_result
    from lib.studies.gpt2 import figures, reading
    res = live_result("kernel_fidelity", "ci")
    n = reading.numbers(res)
    assert n["alike_eager"] in ("alike", "not alike") and n["sdpa_eager_steps"] == "4"
    assert n["alike_factor"] == "1.5"
    assert all(n[f"{a}_conj_{pl}"] == "none" or " % (layer " in n[f"{a}_conj_{pl}"]
               for a in ("sdpa_eager", "fa2_eager") for pl in ("authors", "fa2"))
    fig = figures.fidelity_figure(res)
    assert len(fig.axes) == 3 and len(fig.axes[1].lines) == 2
    assert n["focus_layer"] == reading.FOCUS_LAYER


def test_the_focus_layer_is_chapter_2bs():
    """The layer whose logits and ‖W_Q‖₂ chapter 2 compares is the one where GPT-2's census (chapter 2b) finds the
    preconditions most often, in the authors' placement."""
    import pytest
    from lib.book import results
    from lib.studies.census import reading as census
    from lib.studies.gpt2 import reading
    if not results.exists("gpt2_regime", "full"):
        pytest.skip("no committed GPT-2 census")
    assert census.gpt2_numbers(results.load("gpt2_regime", "full"))["authors_conj_layer"] == reading.FOCUS_LAYER


def test_recovery_after_a_spike_and_none_after_an_explosion():
    from lib.studies.gpt2.reading import recovery_steps
    spike = [3.0] * 200 + [4.01] * 40 + [3.0] * 300
    n = recovery_steps(spike, 100, 0.3)
    assert n is not None and 0 < n < 100                 # the 100-step mean falls back as the spike leaves it
    assert recovery_steps([3.0] * 200 + [4.01] * 300, 100, 0.3) is None
    assert recovery_steps([3.0] * 300, 100, 0.3) is None


def test_a_run_that_comes_back_and_fails_again_ends_failed():
    """Two failures: the first ends (the loss back within the margin), the second does not. `failure_episodes`
    lists both; `outcomes` calls the run unrecovered (it exploded), though `recovery_steps` reads the first."""
    from lib.studies.gpt2.reading import episode_words, failure_episodes, recovery_steps
    loss = [3.0] * 200 + [4.01] * 40 + [3.0] * 300 + [4.5] * 300
    ep = failure_episodes(loss, 100, 0.3)
    assert len(ep) == 2 and ep[0][1] is not None and ep[1][1] is None
    assert ep[0][0] < ep[0][1] < ep[1][0]
    assert recovery_steps(loss, 100, 0.3) == ep[0][1] - ep[0][0]
    assert "failed again at step" in episode_words(ep) and episode_words(ep).endswith("not back by the end of the run")
    assert failure_episodes([3.0] * 200 + [4.01] * 40 + [3.0] * 300, 100, 0.3)[-1][1] is not None
    assert failure_episodes([3.0] * 300, 100, 0.3) == []
    nan = failure_episodes([3.0] * 150 + [float("nan")], 100, 0.3)
    assert nan == [(150, None)]


def test_outcomes_count_a_second_failure_as_an_explosion():
    from types import SimpleNamespace

    import numpy as np

    from lib.studies.gpt2 import reading
    spike_then_up = np.array([3.0] * 200 + [4.01] * 40 + [3.0] * 300 + [4.5] * 300)
    spike = np.array([3.0] * 200 + [4.01] * 40 + [3.0] * 600)
    res = SimpleNamespace(cfg={"rules": {"failure_window": 100, "failure_rise": 0.3}},
                          data={"runs": [{"label": "paper:s0", "steps": 840}, {"label": "fp32:s0", "steps": 840}]},
                          arrays={"paper:s0__loss": spike_then_up, "fp32:s0__loss": spike})
    oc = reading.outcomes(res)
    assert oc["paper"][0][2] is not None and oc["paper"][0][3] is None
    assert oc["fp32"][0][3] is not None
