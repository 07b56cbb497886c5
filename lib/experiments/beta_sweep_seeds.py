"""The β sweep's two ends at two more seeds: is β = 30 with the exact rule (no underflow guard) stable by chance?

`beta_sweep` at seed 0 found β = 30 exact stable over its budget while β = 7 exact and β = 30 guarded exploded, against
the theory's prediction (rows underflow, so non-finite values, once a tied row max exceeds 92.9/(β−1) ≈ 3.2 score
units). This repeats β = 7 and β = 30 (exact) and β = 30 guarded at seeds 1 and 2, with the same LR, steps and
batch order (data seed 0). Its $BETA_SWEEP* variables still override these defaults.

* ``full``: β in (7, 30) exact plus 30 guarded; seeds 1, 2.
* ``ci``: `beta_sweep`'s CI plan, proving the code path.
"""
from __future__ import annotations

from lib.training import outcome, proxy
from lib.experiments import beta_sweep

NAME = "beta_sweep_seeds"
DEPENDS = beta_sweep.DEPENDS + ["lib/experiments/beta_sweep_seeds.py"]


def run(scale: str) -> dict:
    with proxy.env_defaults(BETA_SWEEP="7,30", BETA_SWEEP_SEEDS="1,2"):
        return beta_sweep.run(scale)
