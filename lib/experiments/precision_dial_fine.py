"""The precision dial one and two bits finer (m = 4, 5), with the arms that keep S − m in FP32.

The same experiment as `precision_dial` (same module, LR, controls and outcome rules) at m = 4 and 5, where RNE
fails at 4 and trains at 5 in the first result, with four arms: RNE, RNE + fix (`fix_split`), and both again with
the forward exponent arguments S − m in FP32 (`sm32`, `fixsm32`): chapter 7 measured that the fix's shifted argument,
rounded like S − m, carries a rounding error of its own; `fixsm32` is the fix without it, `sm32` its control. The SR
arms run apart (`precision_dial_sr`: they are ~5x slower per step, and the first result of this experiment had the
SR backward bug, `precision_dial.SR_BACKWARD_BUG`). $DIAL_BITS, $DIAL_ARMS and the other $DIAL_* variables of
`precision_dial` still override these defaults. The BF16 and FP32 controls repeat those of `precision_dial` at the
same seed: on the same GPU their loss curves should be bit-identical across the two results.

* ``full``: m = 4, 5; arms rne, fix, sm32, fixsm32; seed 0 (as `precision_dial` otherwise).
* ``ci``: `precision_dial`'s CI plan (m = 3, 3 steps), proving the code path.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import precision_dial

NAME = "precision_dial_fine"
DEPENDS = precision_dial.DEPENDS + ["lib/experiments/precision_dial_fine.py"]


def run(scale: str) -> dict:
    with proxy.env_defaults(DIAL_BITS="4,5", DIAL_ARMS="rne,fix,sm32,fixsm32"):
        return precision_dial.run(scale)
