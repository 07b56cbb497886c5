"""The explosion figures build from a CI-scale result and draw what they say they draw."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.training import outcome, proxy, regime
from lib.studies.explosion import figures as explosion_plots
from lib.book.results import Result


@pytest.fixture(scope="module")
def res():
    runs = [dict(arm=a, seed=s, lr=lr) for lr in (1e-3, 1e-2) for a in ("sdpa", "fp32") for s in (0,)]
    summ, arrays, meta = proxy.run_arms("ci", runs, workers=1, steps=4, n_layer=2, n_head=2, n_embd=32)
    data = dict(runs=summ, arms=["sdpa", "fp32"], thresholds=dict(rise_exploded=outcome.RISE_EXPLODED,
                                                                  rise_degraded=outcome.RISE_DEGRADED))
    data["chosen_lr"] = regime.choose_lr(data)[0]
    return Result("test", "ci", dict(scale="ci", device="cpu", git_commit="0" * 40), data, arrays)


def test_loss_curves(res):
    fig = explosion_plots.loss_curves(res)
    a0, a1 = fig.axes[:2]
    assert len(a0.lines) == len(res.data["runs"]) and len(a1.lines) == len(res.data["runs"]) + 1  # + clip line
    first = res.data["runs"][0]["id"]
    np.testing.assert_allclose(a1.lines[0].get_ydata(), res.arrays[f"{first}__grad_norm"])
    plt.close(fig)


def test_lr_sweep_figure(res):
    fig = explosion_plots.lr_sweep_figure(res)
    ax = fig.axes[0]
    assert len(ax.collections) == len(res.data["runs"])        # one marker per run
    assert not [ln for ln in ax.lines if len(ln.get_xdata()) > 1 and ln.get_linestyle() == "-"]   # no LR joined
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["PyTorch flash SDPA", "FP32 attention"]   # arms in words, in the result's order
    rises = sorted(float(c.get_offsets()[0][0]) for c in ax.collections)
    np.testing.assert_allclose(rises, sorted(r["rise"] for r in res.data["runs"]))
    plt.close(fig)


def test_telemetry_figures(res):
    ids = [r["id"] for r in res.data["runs"][:2]]
    fig = explosion_plots.qk_norm_figure(res, ids, layer=1)
    assert len(fig.axes[0].lines) == 2 * 2 and len(fig.axes[1].lines) == 2 * 2   # 2 runs × (2 layers | 2 heads)
    plt.close(fig)
    fig = explosion_plots.tie_rate_figure(res, ids)
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), res.arrays[f"{ids[0]}__tie_rate"][:, 1])
    plt.close(fig)
    fig = explosion_plots.delta_error_figure(res, ids, layer=0)
    d = res.arrays[f"{ids[0]}__delta_err_sum"][:, 0, 1]
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), np.cumsum(d))
    plt.close(fig)
    with pytest.raises(ValueError):
        explosion_plots.tie_rate_figure(res, ["nope"])


def test_max_logit_figure(res):
    ids = [r["id"] for r in res.data["runs"][:2]]
    fig = explosion_plots.max_logit_figure(res, ids)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and len(ax.lines) == 2
    np.testing.assert_allclose(ax.lines[0].get_ydata(), res.arrays[f"{ids[0]}__max_logit"].max(axis=1))
    plt.close(fig)
    fig = explosion_plots.max_logit_figure(res, ids, layer=1)
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), res.arrays[f"{ids[1]}__max_logit"][:, 1])
    plt.close(fig)


def test_max_logit_at_picks_the_first_telemetry_step_at_or_after():
    arrays = {"r__step": np.array([0, 50, 100]), "r__max_logit": np.array([[1.0, 2.0], [5.0, 3.0], [7.0, 9.0]])}
    assert explosion_plots.max_logit_at(arrays, "r", 0) == 2.0
    assert explosion_plots.max_logit_at(arrays, "r", 49) == 5.0
    assert explosion_plots.max_logit_at(arrays, "r", 1000) == 9.0   # run ended before: its last telemetry
