"""The precision dial one bit finer than where it has been run: round-to-nearest-even at m = 6 (chapter 6).

RNE trained at m = 5 in 3 of 3 seeds, so m = 6 is expected to train too; it is the baseline of
`precision_dial_sr_seeds`, which runs stochastic rounding at m = 6 with the same seeds (1, 2). Same LR and batch order
(data seed 0) as every dial run. Its $DIAL_* variables still override these defaults.

* ``full``: m = 6; the RNE arm only; seeds 1, 2; no controls.
* ``ci``: `precision_dial`'s CI plan (m = 3, 3 steps), proving the code path.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import precision_dial

NAME = "precision_dial_m6"
DEPENDS = precision_dial.DEPENDS + ["lib/experiments/precision_dial_m6.py"]


def run(scale: str) -> dict:
    with proxy.env_defaults(DIAL_BITS="6", DIAL_ARMS="rne", DIAL_SEEDS="1,2", DIAL_CONTROLS="none"):
        return precision_dial.run(scale)
