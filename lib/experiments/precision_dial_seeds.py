"""The precision dial at m = 5, two more seeds: does the fix break runs that train without it, and does keeping
S − m in FP32 (the fix without its own rounding error, chapter 7) change that?

At m = 5 with seed 0 (`precision_dial_fine`) RNE trained, RNE + fix exploded and the fix with S − m in FP32 only
degraded late. One seed is an anecdote; this repeats those three arms at seeds 1 and 2 (other initial weights; the
same LR and the same batch order, data seed 0, as every run of `precision_dial`). No controls: `precision_dial` and `precision_dial_fine`
hold them (seed 0). `precision_dial.merged_table` reads it with the others. Its $DIAL_* variables still override
these defaults.

* ``full``: m = 5; arms rne, fix, fixsm32; seeds 1, 2; no controls.
* ``ci``: `precision_dial`'s CI plan (m = 3, 3 steps), proving the code path.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import precision_dial

NAME = "precision_dial_seeds"
DEPENDS = precision_dial.DEPENDS + ["lib/experiments/precision_dial_seeds.py"]


def run(scale: str) -> dict:
    with proxy.env_defaults(DIAL_BITS="5", DIAL_ARMS="rne,fix,fixsm32", DIAL_SEEDS="1,2", DIAL_CONTROLS="none"):
        return precision_dial.run(scale)
