"""The precision dial's stochastic-rounding arms, re-run after the SR backward fix (commit 8b8d26d).

Every SR arm of `precision_dial` and the first `precision_dial_fine` ran with the SR backward bug
(`precision_dial.SR_BACKWARD_BUG`), so the dial had not separated the bias of round-to-nearest-even from the
coarseness of m-bit rounding. SR runs ~5x slower per step than RNE on the native path (a Philox draw per element
and rounding point), so they run here on their own, few to the GPU, to reach step counts past the RNE arms' onsets.
Same LR, seed and batch order as the RNE arms of `precision_dial` (m = 3) and `precision_dial_fine` (m = 4, 5);
no controls (those results hold them). `precision_dial.merged_table` reads the three results together. Its
$DIAL_* variables still override these defaults.

* ``full``: m = 3, 4, 5; the SR arm only; seed 0; no controls.
* ``ci``: `precision_dial`'s CI plan (m = 3, 3 steps), proving the code path.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import precision_dial

NAME = "precision_dial_sr"
DEPENDS = precision_dial.DEPENDS + ["lib/experiments/precision_dial_sr.py"]


def run(scale: str) -> dict:
    with proxy.env_defaults(DIAL_BITS="3,4,5", DIAL_ARMS="sr", DIAL_CONTROLS="none"):
        return precision_dial.run(scale)
