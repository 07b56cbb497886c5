"""The headline's fix without its own rounding error: `paper+fix_split_sm32` at the headline's LR, seeds and steps.

Chapter 7 (`lib.fp.fix_error`) found that in the paper placement the fix's shifted exponent argument S − β·r_m is rounded
on a coarse BF16 grid, which adds an error of its own; `paper+fix_split_sm32` is the fix (also on maxima repeated
across key tiles) with the exponent arguments S − m kept in FP32. It ran inside the 13-run headline of 2026-11-23;
it runs here on its own so that the headline proper (the issue's arms: paper, paper+fix, fa2, SDPA, FP32 and a
repeat) fits in five minutes on one H100. With it: FP32 attention at the first seed (the stable control, and a
bit-for-bit repeat of the headline's FP32 run in another process pool) and the headline's usual repeat of the first
run.

LR and steps: those of the committed full `headline` result (its "lr" and "steps"), so the arms are judged on the
same horizon; $HEADLINE_LR / $HEADLINE_STEPS still win. Without that result: `headline.pick_lr` and 1500 steps.

* ``full`` (one H100): concurrent processes, capped by $EXPLOSION_BUDGET_S wall seconds per run.
* ``ci`` (CPU): the headline's tiny CI plan with these arms.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import headline

NAME = "headline_fix_sm32"
_HEADLINE = "results/full/headline.json"
DEPENDS = [d for d in headline.DEPENDS if not d.startswith("results/")] + ["lib/experiments/headline_fix_sm32.py",
                                                                           _HEADLINE]
ARMS = dict(HEADLINE_FIX_ARMS="paper+fix_split_sm32", HEADLINE_CONTRAST_ARMS="fp32")


def headline_lr_steps() -> dict:
    """{"HEADLINE_LR", "HEADLINE_STEPS"} (strings) of the committed full headline; {} without one."""
    from lib.book import results
    if not results.exists("headline", "full"):
        return {}
    d = results.load("headline", "full").data
    return dict(HEADLINE_LR=repr(float(d["lr"])), HEADLINE_STEPS=str(int(d["steps"])))


def run(scale: str) -> dict:
    extra = headline_lr_steps() if scale == "full" else {}
    with proxy.env_defaults(**ARMS, **extra):
        return headline.run(scale)
