"""A rerun of one GPT-2 arm read in place of its truncated first run (`lib.studies.gpt2.reading.merge_seeds`,
`replaced_words`): the longer run and its own arrays are read, the replacement is named with both devices, and two
full runs of one label are still refused."""
import copy
import dataclasses

import numpy as np
import pytest

from lib.book import results
from lib.studies.gpt2 import reading as g2r

_COMMITTED = pytest.mark.skipif(not results.exists("gpt2_arms", "full"), reason="no committed GPT-2 comparison")


def _rerun(res, label: str, steps: int, device: str):
    """`res` reduced to the run `label`, planted as a rerun of `steps` steps on `device`, with its arrays marked."""
    data = copy.deepcopy(res.data)
    data["runs"] = [dict(r, steps=steps, truncated_at=None) for r in data["runs"] if r["label"] == label]
    data["telemetry"] = {label: data["telemetry"][label]}
    arrays = {k: np.asarray(v) + 1 for k, v in res.arrays.items() if k.split("__")[0] == label
              and np.issubdtype(np.asarray(v).dtype, np.number)}
    return dataclasses.replace(res, data=data, arrays=arrays, meta=dict(res.meta, device=device))


@_COMMITTED
def test_a_rerun_replaces_a_truncated_run_and_says_so():
    a = results.load("gpt2_arms", "full")
    paper = next(r for r in a.data["runs"] if r["label"] == "paper:s0")
    assert paper["truncated_at"] is not None           # the committed seed-0 paper run stopped on its budget
    re = _rerun(a, "paper:s0", paper["steps"] + 100, "GPU B")
    for order in ([a, re], [re, a]):
        m = g2r.merge_seeds(order)
        run = next(r for r in m.data["runs"] if r["label"] == "paper:s0")
        assert run["steps"] == paper["steps"] + 100 and len(m.data["runs"]) == len(a.data["runs"])
        key = next(k for k in re.arrays if k.startswith("paper:s0__"))
        assert np.array_equal(m.arrays[key], re.arrays[key], equal_nan=True)
        words = g2r.replaced_words(m)
        assert "read from its rerun" in words and "GPU B" in words and f"{paper['steps']:,} steps" in words
    assert g2r.replaced_words(g2r.merge_seeds([a])) == ""


@_COMMITTED
def test_two_full_runs_of_one_arm_are_refused():
    a = results.load("gpt2_arms", "full")
    sdpa = next(r for r in a.data["runs"] if r["label"] == "sdpa:s0")
    assert sdpa["truncated_at"] is None
    with pytest.raises(ValueError, match="appears twice"):
        g2r.merge_seeds([a, _rerun(a, "sdpa:s0", sdpa["steps"] + 100, "GPU B")])


class _Planted:
    """A one-seed result of two arms with planted losses (nats), as `merge_seeds` reads it."""
    def __init__(self, losses: dict, truncated: dict, device: str):
        rules = dict(failure_window=10, failure_rise=0.3, growth_steps=[10], reference="fp32")
        self.data = dict(runs=[dict(label=k, steps=len(v), truncated_at=truncated.get(k)) for k, v in losses.items()],
                         telemetry={})
        self.arrays = {f"{k}__loss": np.asarray(v, dtype=np.float32) for k, v in losses.items()}
        self.meta = dict(device=device, config=dict(rules=rules, seeds=[0], arms=[], steps=200))


def test_a_rerun_that_fails_where_its_first_run_did_not_is_read_as_run_to_run_variation():
    """Losses equal to step 4, then apart by 0.01 nats; the rerun steps up by 1 nat at step 100 (a failure) where the
    first run, cut at 150 steps, never did: the words give where they part, the median gap beside the arms' gap, and
    the lower bound on the failure step's spread (150 − the rerun's failure step)."""
    base = 3.0 + np.zeros(200)
    first = base[:150].copy()
    first[5:] += 0.01
    rerun = base.copy()
    rerun[100:] += 1.0
    other = base + 0.002                                    # a second arm of the seed, 0.002 from the rerun
    a = _Planted({"paper:s0": first, "sdpa:s0": other}, {"paper:s0": 150}, "GPU A")
    b = _Planted({"paper:s0": rerun}, {}, "GPU B")
    m = g2r.merge_seeds([a, b])
    rep = m.data["replaced"][0]
    fa = g2r.failure_step(rerun, 10, 0.3)
    assert 100 <= fa < 110                                  # the rule fires once the 10-step mean is 0.3 up
    assert (rep["first_diff"], rep["failed_at"], rep["set_aside_failed_at"], rep["upto"]) == (5, fa, None, fa)
    assert abs(rep["gap"] - 0.01) < 1e-5
    words = g2r.replaced_words(m)
    assert "agree bit for bit to step 4 and differ from step 5" in words
    assert "differ by 0.010 nats (median), where two different arms of that seed differ by 0.002–0.002" in words
    assert "variation is larger than the differences between arms" in words
    assert f"failed at step {fa}, where the first run had not failed by step 150" in words
    assert f"by {150 - fa} steps or more" in words


def test_a_bit_identical_rerun_adds_no_variation_words():
    loss = 3.0 + np.zeros(200)
    a = _Planted({"paper:s0": loss[:150]}, {"paper:s0": 150}, "GPU A")
    m = g2r.merge_seeds([a, _Planted({"paper:s0": loss}, {}, "GPU A")])
    assert m.data["replaced"][0]["first_diff"] is None
    assert "one trajectory" not in g2r.replaced_words(m) and "read from its rerun" in g2r.replaced_words(m)


def test_a_rerun_with_a_longer_wall_budget_is_the_same_comparison():
    """The wall budget is a machine limit, not a rule: a rerun given a longer one still merges, and is read in place of
    the run the shorter one stopped; another rule does not merge."""
    loss = 3.0 + np.zeros(200)
    a = _Planted({"fp32:s0": loss[:150]}, {"fp32:s0": 150}, "GPU A")
    b = _Planted({"fp32:s0": loss}, {}, "GPU A")
    a.meta["config"]["max_wall_s"], b.meta["config"]["max_wall_s"] = 1320, 1620
    m = g2r.merge_seeds([a, b])
    assert m.data["runs"][0]["steps"] == 200 and m.data["replaced"][0]["set_aside"] == 150
    b.meta["config"]["rules"] = dict(b.meta["config"]["rules"], failure_rise=0.5)
    with pytest.raises(ValueError, match="different recipes"):
        g2r.merge_seeds([a, b])


def test_the_rerun_figure_draws_both_runs_and_the_other_arms():
    """Both runs of the rerun arm on top (first run dashed), each other arm of the seed thin; below, each one's
    difference from the rerun before either failed; no figure without a run set aside."""
    import matplotlib.pyplot as plt
    from lib.book import plotting
    from lib.studies.gpt2 import figures
    steps = np.arange(1200)
    base = 1.0 + 3.0 * np.exp(-steps / 200)
    rerun = base.copy()
    rerun[900:] += 1.0
    a = _Planted({"paper:s0": base[:1000] + 0.01, "fp32:s0": base + 0.005}, {"paper:s0": 1000}, "GPU A")
    b = _Planted({"paper:s0": rerun}, {}, "GPU A")
    m = g2r.merge_seeds([a, b])
    assert np.array_equal(m.set_aside["paper:s0"], np.asarray(base[:1000] + 0.01, np.float32))
    fig = figures.rerun_figure(m)
    top, bottom = fig.axes[:2] if len(fig.axes) == 2 else (fig.axes[0], fig.axes[1])
    labels = [ln.get_label() for ln in top.lines if not ln.get_label().startswith("_")]
    assert labels == ["FP32 attention", "our kernel, paper placement (512-key blocks), first run",
                      "our kernel, paper placement (512-key blocks), rerun"]
    assert len(bottom.lines) == 3                 # the other arm, the first run, the zero line
    upto = m.data["replaced"][0]["upto"]
    assert bottom.lines[1].get_xdata()[-1] == upto          # the differences stop where the first failure was
    assert plotting.check_figure(fig) == []
    plt.close(fig)
    assert figures.rerun_figure(g2r.merge_seeds([b])) is None


def test_rerun_words_say_which_run_failed_when():
    rep = dict(first_diff=3, gap=None, steps=200, set_aside=150)
    assert g2r.rerun_words(dict(rep, failed_at=90, set_aside_failed_at=120)).endswith(
        "They failed at steps 120 (first run) and 90 (rerun).")
    assert g2r.rerun_words(dict(rep, failed_at=170, set_aside_failed_at=None)).endswith(
        "The rerun failed at step 170, after the 150 steps of the first run.")
    assert g2r.rerun_words(dict(rep, failed_at=None, set_aside_failed_at=0)).endswith(
        "The first run failed at step 0; the rerun did not fail in its 200 steps.")
    assert g2r.rerun_words(dict(rep, failed_at=None, set_aside_failed_at=None)).endswith("GPU, and the two were made "
                                                                                         "by versions of the code "
                                                                                         "shown identical only on the "
                                                                                         "CPU).")
