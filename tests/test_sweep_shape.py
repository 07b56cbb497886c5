"""The LR sweep's window-or-cliff reading (`lib.studies.explosion.reading.window_lrs`, `sweep_shape`) on the
committed sweep with planted outcomes: a window needs every paper run failed and every contrast run stable."""
import copy

import pytest

from lib.book import results
from lib.studies.explosion import reading
from lib.training import horizon as hz

pytestmark = pytest.mark.skipif(not results.exists("lr_sweep", "full"), reason="no committed LR sweep")


def _planted(**outcomes):
    """The committed sweep judged at its horizon, with outcomes replaced: {"<arm>@<lr>": outcome}."""
    sw = results.load("lr_sweep", "full")
    _, judged = hz.judge_result(sw)
    judged = {k: dict(v) for k, v in judged.items()}
    for r in sw.data["runs"]:
        key = f"{r['arm']}@{r['lr']:g}"
        if key in outcomes:
            judged[r["id"]]["outcome"] = outcomes[key]
    return sw, judged


def test_a_window_needs_the_paper_failed_and_every_contrast_stable():
    lo, hi = sorted(results.load("lr_sweep", "full").data["lrs"])
    calm = {f"{a}@{x:g}": "stable" for a in ("fa2", "sdpa", "fp32", "paper+fix", "paper+fix_split") for x in (lo, hi)}
    sw, judged = _planted(**(calm | {f"paper@{lo:g}": "exploded", f"paper@{hi:g}": "exploded"}))
    assert reading.window_lrs(sw, judged) == [lo, hi]
    sw, judged = _planted(**(calm | {f"paper@{lo:g}": "stable", f"paper@{hi:g}": "exploded",
                                     f"fp32@{hi:g}": "degraded"}))
    assert reading.window_lrs(sw, judged) == []          # a degraded contrast arm is no window
    text, take = reading.sweep_shape(sw, judged, hi)
    assert "cliff, not a window" in text and "cliff rather than a window" in take and "FP32 attention" in take
    sw, judged = _planted(**(calm | {f"paper@{lo:g}": "degraded", f"paper@{hi:g}": "exploded"}))
    assert reading.window_lrs(sw, judged) == [hi]        # "degraded" is not a failure of the paper placement
    text, take = reading.sweep_shape(sw, judged, hi)
    assert f"at LR {hi:g} the paper placement failed" in text and "window in seed 0" in take


def test_the_tiling_reading_follows_where_each_fix_trained():
    """Chapter 7's reading of the sweep's fix arms: split-tie fix trained where the per-tile fix failed → the tiling
    can decide; neither trained → it does not explain the failure; both trained → no difference."""
    from lib.studies.fix.reading import tiling_words
    lo, hi = sorted(results.load("lr_sweep", "full").data["lrs"])
    failed = {f"paper@{lo:g}": "exploded", f"paper@{hi:g}": "exploded"}
    sw, judged = _planted(**(failed | {f"paper+fix@{x:g}": "exploded" for x in (lo, hi)}
                             | {f"paper+fix_split@{x:g}": "stable" for x in (lo, hi)}))
    assert "rescued training where the per-tile fix did not" in tiling_words(sw, judged)
    sw, judged = _planted(**(failed | {f"{a}@{x:g}": "degraded" for a in ("paper+fix", "paper+fix_split")
                                       for x in (lo, hi)}))
    assert "did not rescue training either" in tiling_words(sw, judged)
    sw, judged = _planted(**(failed | {f"{a}@{x:g}": "stable" for a in ("paper+fix", "paper+fix_split")
                                       for x in (lo, hi)}))
    assert "made no difference" in tiling_words(sw, judged)
    sw, judged = _planted(**{f"paper@{x:g}": "stable" for x in (lo, hi)})
    assert "cannot test the tiling" in tiling_words(sw, judged)


def test_a_seed_repeat_reads_on_its_own_and_counts_toward_the_window():
    """The sweep repeated at another seed (planted: the committed sweep's runs, outcomes replaced): no window when a
    contrast arm degraded at each LR, each named with its LR; a window otherwise; `sweep_shape` counts the seeds with
    a window."""
    lo, hi = sorted(results.load("lr_sweep", "full").data["lrs"])
    calm = {f"{a}@{x:g}": "stable" for a in ("fa2", "sdpa", "fp32", "paper+fix", "paper+fix_split") for x in (lo, hi)}
    boom = {f"paper@{x:g}": "exploded" for x in (lo, hi)}
    sw, judged = _planted(**(calm | boom))
    rep, rj = _planted(**(calm | boom | {f"sdpa@{lo:g}": "degraded", f"fp32@{hi:g}": "degraded"}))
    h = next(iter(rj.values()))["horizon"]
    text, win = reading.seed_repeat_words(rep, rj, h)
    assert not win and "no window" in text and f"degraded at {lo:g}" in text and "PyTorch" in text
    assert f"FP32 attention degraded at {hi:g}" in text and "FA2 placement trained at every LR" in text
    shape, take = reading.sweep_shape(sw, judged, hi, [(rep, rj, h)])
    assert "holds in 1 of 2 seeds" in shape and "1 of 2 seeds" in take
    rep, rj = _planted(**(calm | boom))
    text, win = reading.seed_repeat_words(rep, rj, h)
    assert win and f"window holds at LR {lo:g} and {hi:g}" in text
    assert "holds in 2 of 2 seeds" in reading.sweep_shape(sw, judged, hi, [(rep, rj, h)])[0]


def test_the_tiling_reading_over_seeds_says_whether_the_rescue_repeats():
    from lib.studies.fix.reading import tiling_words
    lo, hi = sorted(results.load("lr_sweep", "full").data["lrs"])
    failed = {f"paper@{lo:g}": "exploded", f"paper@{hi:g}": "exploded"}
    rescue = failed | {f"paper+fix@{x:g}": "exploded" for x in (lo, hi)} | {f"paper+fix_split@{x:g}": "stable"
                                                                              for x in (lo, hi)}
    none = failed | {f"{a}@{x:g}": "exploded" for a in ("paper+fix", "paper+fix_split") for x in (lo, hi)}
    sw, judged = _planted(**rescue)
    assert "not in seed 0" in tiling_words(sw, judged, [_planted(**none)])     # planted repeat: its seed is 0 too
    assert "in every seed" in tiling_words(sw, judged, [_planted(**rescue)])
    sw, judged = _planted(**none)
    assert "in no seed" in tiling_words(sw, judged, [_planted(**none)])


@pytest.mark.skipif(not results.exists("lr_sweep_s1", "full"), reason="no committed seed-1 sweep")
def test_later_words_name_a_fix_run_judged_stable_that_failed_later():
    """A fix run stable over the judged steps whose recorded whole-run outcome is not stable is named, with both;
    a sweep where none is gives ""."""
    from lib.studies.fix.reading import later_words
    res = results.load("lr_sweep_s1", "full")
    h, judged = hz.judge_result(res)
    late = [r for r in res.data["runs"] if r["arm"] in ("paper+fix", "paper+fix_split")
            and judged[r["id"]]["outcome"] == "stable" and r["outcome"] != "stable"]
    words = later_words([res])
    assert len(late) == words.count(" before its ")
    for r in late:
        assert f"at {r['lr']:g} in seed {r['seed']} (stable over its first {h:,} steps) {r['outcome']}" in words
    calm = copy.deepcopy(res)
    for r in calm.data["runs"]:
        r["outcome"] = judged[r["id"]]["outcome"]
    assert later_words([calm]) == ""
