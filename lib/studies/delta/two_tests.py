"""Link 4 (Δδ > 0) read from both records of its sign, each with its power, and one status that follows from the two.

* The row-level test — the rule fixed before any full-scale run (`lib.studies.delta.verdicts`): per head, the sign
  of Σ Δδ over the captured rows at each captured step, an exact one-sided sign test at α / heads; per seed by
  `SEED_RULE`. `row_test(capture)` reads it from a `delta_capture` result.
* The whole-batch sign test: the training telemetry's Σ Δδ over the whole batch per head and telemetry step
  (`lib.studies.delta.reading.telemetry_sign`); each (head, seed) cell's share of positive steps lies above or below
  ½, and an exact one-sided sign test across the cells at α asks whether more lie above. `batch_test(reading, arm)`.
* Power: for each test, the smallest true share its sign test detects with 80 % power at its level
  (`lib.stats.detectable_share`), from its own n.
* `combine(row, batch)`: the status and a phrase, by a fixed table (`STATUS`); `verdict(capture, telemetry)`: both
  tests, the status and one evidence line, for the claims table and chapter 4.
"""
from __future__ import annotations

import math

import numpy as np

from lib import stats
from lib.studies.delta import verdicts as dv
from lib.studies.delta.stats import ALPHA

__all__ = ["POWER", "STATUS", "row_test", "batch_test", "combine", "verdict", "evidence", "p_text"]

POWER = 0.8          # the power at which each test's detectable share is stated

# (row-level direction, whole-batch direction, whether the row-level test was too weak for the whole batch's lean)
# → (status, phrase). Directions: "up" / "down" (the rule's support in most seeds, or the cells' split at α with
# every seed leaning that way), "some" (row-level support in fewer seeds than the rule's two thirds), "none".
STATUS = {
    ("up", "up"): ("reproduced", "positive in both tests"),
    ("up", "none"): ("partly", "positive in the captured rows' test only"),
    ("some", "none"): ("partly", "positive in some seeds' captured rows only"),
    ("some", "up"): ("partly", "positive over whole batches and in some seeds' captured rows"),
    ("none", "up", True): ("partly", "leans positive over whole batches; too weak a lean for the captured rows' "
                                     "test to see"),
    ("none", "up", False): ("inconclusive", "the tests disagree: the captured rows' test could have seen the whole "
                                            "batches' lean and did not"),
    ("none", "none"): ("not reproduced", "no lean in either test"),
    ("none", "down"): ("not reproduced", "leans negative over whole batches"),
    ("down", "none"): ("not reproduced", "leans negative in the captured rows"),
    ("down", "down"): ("not reproduced", "negative in both tests"),
}
_OPPOSED = ("inconclusive", "the two tests disagree in sign")


def _direction(plus: list[int], minus: list[int]) -> str:
    """The row-level direction from per-seed counts of heads passing up / down, by the rule across seeds."""
    up = [dv._seed_support(p, m) for p, m in zip(plus, minus)]
    down = [dv._seed_support(m, p) for p, m in zip(plus, minus)]
    need = math.ceil(2 * len(plus) / 3)
    if len(plus) >= 3 and sum(up) >= need:
        return "up"
    if len(plus) >= 3 and sum(down) >= need:
        return "down"
    return "some" if any(up) else "none"


def row_test(capture, alpha: float = ALPHA, power: float = POWER) -> dict:
    """The row-level test of a `delta_capture` result (anything with .arrays holding the per-seed summaries
    "sum__dd_step_*", "sum__norm_bias", (S, L, H)): cells (S·L·H), heads (L·H), seeds, steps (captured steps per
    head, median), alpha_head (α / heads), up / down (cells passing each way, the rule's test), up_line (per seed),
    direction, share_med (median share of positive steps), above / below (cells whose share is above / below ½),
    detectable (the per-head share of positive steps the test detects with `power`)."""
    a = capture.arrays
    pos = np.asarray(a["sum__dd_step_pos"], np.float64)
    n = np.asarray(a["sum__dd_step_n"], np.float64)
    pg, pl = np.asarray(a["sum__dd_step_p_greater"], np.float64), np.asarray(a["sum__dd_step_p_less"], np.float64)
    nb = np.asarray(a["sum__norm_bias"], np.float64)
    S, L, H = pos.shape
    thr = alpha / (L * H)
    with np.errstate(invalid="ignore"):
        plus = [int(((pg[s] < thr) & (nb[s] > 0)).sum()) for s in range(S)]
        minus = [int(((pl[s] < thr) & (nb[s] < 0)).sum()) for s in range(S)]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = pos / n
    steps = int(np.nanmedian(n))
    return dict(cells=S * L * H, heads=L * H, seeds=S, steps=steps, alpha=alpha, alpha_head=thr,
                up=sum(plus), down=sum(minus), up_line=", ".join(map(str, plus)),
                direction=_direction(plus, minus), share_med=float(np.nanmedian(share)),
                above=int((share > 0.5).sum()), below=int((share < 0.5).sum()),
                detectable=stats.detectable_share(steps, thr, power), power=power)


def batch_test(reading: dict, arm: str | None = None, power: float = POWER) -> dict:
    """The whole-batch sign test of one arm of a `telemetry_sign` reading (default: its first arm): cells, heads,
    seeds, steps (telemetry steps per head, fewest), alpha, above / below (cells whose share of positive steps lies
    above / below ½), p_greater / p_less (exact one-sided sign tests of that split), seeds_up / seeds_down (seeds
    whose heads split that way), direction ("up" / "down" at α with every seed leaning that way, else "none"),
    detectable (the share of cells above ½ the test detects with `power`), share_med (median share of positive
    steps), up / down (cells passing the per-head test at α / heads each way) and detectable_head (the per-head
    share of positive steps that test detects with `power`)."""
    arm = arm or next(iter(reading["arms"]))
    r = reading["arms"][arm]
    alpha = reading["alpha"]
    frac = np.asarray(r["frac"], np.float64)
    S, L, H = frac.shape
    above, below = int((frac > 0.5).sum()), int((frac < 0.5).sum())
    t = stats.sign_test(n_pos=above, n_neg=below)
    hp, hn = np.asarray(r["heads_pos"]), np.asarray(r["heads_neg"])
    s_up, s_down = int((hp > hn).sum()), int((hn > hp).sum())
    direction = ("up" if t["p_greater"] < alpha and s_up == S else
                 "down" if t["p_less"] < alpha and s_down == S else "none")
    steps = int(np.min(r["n"]))
    return dict(cells=S * L * H, heads=L * H, seeds=S, steps=steps, alpha=alpha, above=above, below=below,
                p_greater=t["p_greater"], p_less=t["p_less"], seeds_up=s_up, seeds_down=s_down,
                direction=direction, detectable=stats.detectable_share(above + below, alpha, power),
                share_med=float(np.nanmedian(frac)), up=int(np.sum(r["n_up"])), down=int(np.sum(r["n_down"])),
                detectable_head=stats.detectable_share(steps, alpha / (L * H), power), power=power)


def combine(row: dict, batch: dict) -> dict:
    """The status of link 4 from the two tests (`STATUS`): {"status", "phrase", "row_too_weak"}. The row-level test
    was too weak for the whole batch's lean when the per-head share it detects exceeds the whole batch's median share
    of positive steps (a sum over fewer rows leans less, so the captured rows' share is smaller still)."""
    weak = bool(row["detectable"] > batch["share_med"]) if np.isfinite(row["detectable"]) else True
    a, b = row["direction"], batch["direction"]
    if {a, b} in ({"up", "down"}, {"some", "down"}):
        status, phrase = _OPPOSED
    else:
        status, phrase = STATUS.get((a, b, weak)) or STATUS[(a, b)]
    return dict(status=status, phrase=phrase, row_too_weak=weak)


def p_text(p: float) -> str:
    """A p-value as the prose writes it: one significant digit below 0.001, else three decimals."""
    return f"{p:.1g}" if p < 0.001 else f"{p:.3f}"


def evidence(row: dict, batch: dict, c: dict) -> str:
    """One line for the claims table: the status's phrase, then each test with its power."""
    return (f"{c['phrase']}. Captured rows (the rule fixed in advance, {row['steps']} steps a head): "
            f"{row['up']} of {row['cells']} (head, seed) cells pass upward, {row['down']} downward, at p < "
            f"{row['alpha']:g}/{row['heads']}, a test that passes a head with {row['power']:.0%} power only if at "
            f"least {row['detectable']:.0%} of its steps are positive (median {row['share_med']:.0%}). "
            f"Whole batches (training telemetry, {batch['steps']} steps a head): {batch['above']} of "
            f"{batch['cells']} cells have more positive steps than negative, {batch['below']} fewer, in "
            f"{batch['seeds_up']} of {batch['seeds']} seeds mostly more (one-sided sign test p = "
            f"{p_text(batch['p_greater'])}; it detects a share of {batch['detectable']:.0%} or more at α = "
            f"{batch['alpha']:g} with {batch['power']:.0%} power; median share of positive steps "
            f"{batch['share_med']:.0%})")


PAPER_ARM = "paper_rb512"      # the healthy headline's paper-placement arm (its name in the explosion study too)


def verdict(capture, telemetry, arm: str | None = None) -> dict:
    """Link 4's verdict from a `delta_capture` result and a training result with telemetry (`healthy_headline`):
    {"status", "evidence", "phrase", "row", "batch"}; `arm` the training arm (default: the paper placement)."""
    from lib.studies.delta import reading
    ts = reading.telemetry_sign(telemetry, arms=[arm or PAPER_ARM])
    row, batch = row_test(capture), batch_test(ts)
    c = combine(row, batch)
    return dict(status=c["status"], phrase=c["phrase"], evidence=evidence(row, batch, c), row=row, batch=batch)
