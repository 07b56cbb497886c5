"""The precision dial's stochastic-rounding arm at two more seeds, at m = 5 and one bit finer (m = 6).

At m = 5 with seed 0 (`precision_dial_sr`) unbiased stochastic rounding exploded where round-to-nearest-even trained
in 3 of 3 seeds (`precision_dial_fine`, `precision_dial_seeds`): the opposite of what the paper's bias mechanism
predicts, on one SR seed. This repeats SR at m = 5 with seeds 1 and 2, and runs it at m = 6 with the same seeds (SR's
RMS error is √2 × RNE's, `lib.readings.dial_reading.sr_error_ratio`: SR at m = 6 is about as noisy as RNE at m = 5.5, so if
the failures follow the noise it should train there). `precision_dial_m6` holds RNE at m = 6, its baseline. Same LR
and batch order (data seed 0) as every dial run. SR runs ≈ 4× slower per step than RNE, so these four run alone; set
$DIAL_STEPS so they end on their step count. Its $DIAL_* variables still override these defaults.

* ``full``: m = 5, 6; the SR arm only; seeds 1, 2; no controls.
* ``ci``: `precision_dial`'s CI plan (m = 3, 3 steps), proving the code path.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import precision_dial

NAME = "precision_dial_sr_seeds"
DEPENDS = precision_dial.DEPENDS + ["lib/experiments/precision_dial_sr_seeds.py"]


def run(scale: str) -> dict:
    with proxy.env_defaults(DIAL_BITS="5,6", DIAL_ARMS="sr", DIAL_SEEDS="1,2", DIAL_CONTROLS="none"):
        return precision_dial.run(scale)
