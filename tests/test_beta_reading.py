"""lib/studies/fix/beta.py (and its figure): β-sweep runs judged at a common horizon, the theory's underflow level
against the logits reached, and the kernel emulator's zeroed rows when a tied max is shifted past underflow."""
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.studies.fix import beta as br
from lib.fp import beta_theory
from lib.training import outcome, proxy
from lib.studies.fix import figures as fix_figures

WARM = 20


def _run(beta, max_shift, seed, n, blow_at=None, logit=(1.0, 50.0)):
    rid = f"paper+fix_s{seed}_lr0.008_beta{beta:g}_{'guarded' if max_shift else 'exact'}"
    loss = (3.0 * np.exp(-np.arange(n) / 50.0) + 1.0).astype(np.float32)
    if blow_at is not None:
        loss[blow_at:] += np.linspace(0, 3, n - blow_at, dtype=np.float32)
    gn = np.full(n, 0.5, np.float32)
    st = np.arange(0, n, 50)
    ml = np.repeat(np.geomspace(*logit, len(st))[:, None], 2, axis=1)      # (telemetry steps, layers)
    c = outcome.classify(loss, gn, WARM)
    summ = dict(id=rid, arm="paper+fix", seed=seed, lr=0.008, beta=beta, max_shift=max_shift, steps=n,
                outcome=c["outcome"], onset=c["onset"], final=c["final"])
    return summ, {f"{rid}__loss": loss, f"{rid}__grad_norm": gn, f"{rid}__step": st, f"{rid}__max_logit": ml}


def _result(name, runs):
    data, arrays = [], {}
    for r in runs:
        s, a = _run(**r)
        data.append(s)
        arrays.update(a)
    return SimpleNamespace(name=name, meta=dict(scale="full", device="test", git_commit="abc1234",
                                                config=dict(warmup=WARM)), data=dict(runs=data), arrays=arrays)


def _results():
    a = _result("beta_sweep", [dict(beta=7.0, max_shift=None, seed=0, n=600, blow_at=450),
                               dict(beta=30.0, max_shift=None, seed=0, n=600),
                               dict(beta=30.0, max_shift=64.0, seed=0, n=600, blow_at=200)])
    b = _result("beta_sweep_seeds", [dict(beta=7.0, max_shift=None, seed=1, n=900, blow_at=800)])
    return [a, b]


def test_table_judges_at_the_common_horizon_and_groups_by_beta_and_guard():
    t = br.table(_results())
    assert t["horizon"] == 600 and t["lr"] == [0.008]
    late = next(r for r in t["rows"] if r["seed"] == 1)
    assert late["full_outcome"] == "exploded" and late["outcome"] == "stable"       # blew up after the horizon
    g = {(x["beta"], x["guarded"]): x for x in t["groups"]}
    assert [(x["beta"], x["guarded"]) for x in t["groups"]] == [(7.0, False), (30.0, False), (30.0, True)]
    assert g[(7.0, False)]["outcomes"] == ["exploded", "stable"] and g[(7.0, False)]["failed"] == 1
    assert g[(30.0, True)]["failed"] == 1 and g[(30.0, False)]["failed"] == 0


def test_underflow_level_and_first_step_above_it():
    t = br.table(_results())
    r30 = next(r for r in t["rows"] if r["beta"] == 30.0 and not r["guarded"])
    assert r30["underflow_r"] == pytest.approx(beta_theory.underflow_x("bf16") / 29)
    st = np.arange(0, 600, 50)                                 # the fake run's telemetry steps and logits
    expect = int(st[np.argmax(np.geomspace(1.0, 50.0, len(st)) > r30["underflow_r"])])
    assert 0 < expect < 550 and r30["first_above"] == expect
    r7 = next(r for r in t["rows"] if r["beta"] == 7.0 and r["seed"] == 0)
    assert r7["first_above"] is not None and r7["first_above"] > r30["first_above"]
    guarded = next(r for r in t["rows"] if r["guarded"])
    assert guarded["underflow_r"] is None and guarded["first_above"] is None
    with pytest.raises(ValueError):
        br.table([])


def test_emulator_zeroes_underflowed_rows_unless_guarded():
    exact = br.underflow_rows(30.0, None)
    guarded = br.underflow_rows(30.0, 64.0)
    assert exact["max_r"] * 29 > beta_theory.underflow_x("bf16")         # the inputs do reach the limit
    assert exact["zero_rows"] > 0.1 and exact["nan_rows"] == 0.0 and exact["fp64_zero_rows"] == 0.0
    assert guarded["zero_rows"] == 0.0 and guarded["nan_rows"] == 0.0
    assert br.underflow_rows(2.0, None)["zero_rows"] < exact["zero_rows"]


def test_beta_sweep_figure_draws_every_run_and_the_levels():
    fig = fix_figures.beta_sweep_figure(_results())
    ax, bx = fig.axes[:2]
    assert len(ax.lines) == 4 + 1                           # runs + the horizon
    assert len(bx.lines) == 4 + 2                           # runs + one level per exact β
    plt.close(fig)


def test_signed_shares_read_as_a_reader_writes_them():
    """A small negative overhead keeps its sign and a decimal ("−0.2 %", not "-0%"); large ones are whole percents."""
    from lib.studies.fix import reading as fr
    assert fr._pct(-0.0021) == "−0.2 %" and fr._pct(0.26) == "26 %" and fr._pct(0.046) == "4.6 %"
