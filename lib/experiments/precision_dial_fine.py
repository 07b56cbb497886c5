"""The precision dial one and two bits finer (m = 4, 5): where coarse-but-unbiased rounding may still train.

At m = 3 (`precision_dial`) stochastic rounding failed as well as round-to-nearest-even, and earlier; we first read
that as m = 3 being too coarse to tell the bias from the coarseness, but those SR runs had the SR backward bug
(`precision_dial.SR_BACKWARD_BUG`), and so did this experiment's first result. This runs the same experiment (same module, arms, LR, controls and
outcome rules) at m = 4 and 5 with the RNE, SR and fix arms ($DIAL_BITS, $DIAL_ARMS and the other $DIAL_* variables
of `precision_dial` still override these defaults). The BF16 and FP32 controls repeat those of `precision_dial` at
the same seed: on the same GPU their loss curves should be bit-identical across the two results.

* ``full``: m = 4, 5; arms rne, sr, fix; seed 0 (as `precision_dial` otherwise).
* ``ci``: `precision_dial`'s CI plan (m = 3, 3 steps), proving the code path.
"""
from __future__ import annotations

from lib import explosion
from lib.experiments import precision_dial

NAME = "precision_dial_fine"
DEPENDS = precision_dial.DEPENDS + ["lib/experiments/precision_dial_fine.py"]


def run(scale: str) -> dict:
    with explosion.env_defaults(DIAL_BITS="4,5", DIAL_ARMS="rne,sr,fix"):
        return precision_dial.run(scale)
