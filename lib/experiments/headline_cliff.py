"""The headline's arms at the LR cliff: is the paper placement the first to fail, or does everything fail at once?

The LR sweep found no LR at which the paper placement fails while the contrast arms are stable: at 6.5e-3 every arm
trained, at 7e-3 every arm failed at seed 0. This experiment repeats 7e-3 ($CLIFF_LR) with several seeds for the
paper placement, the fix and the two contrasts that matter most for the paper's claim (SDPA flash, FP32 attention),
so that "everything fails at the cliff" rests on more than one seed. Same machinery and outcome thresholds as
`headline` (`lib.training.proxy`); arms $HEADLINE_FIX_ARMS at seeds $HEADLINE_SEEDS and $HEADLINE_CONTRAST_ARMS at
$HEADLINE_CONTRAST_SEEDS, which default here to paper, paper+fix / sdpa, fp32 at seeds 0, 1, 2.

* ``full`` (one H100): concurrent processes, $HEADLINE_STEPS steps capped by $EXPLOSION_BUDGET_S wall seconds per run.
* ``ci`` (CPU): the headline's tiny CI plan at LR 1e-2.
"""
from __future__ import annotations

import os

from lib.training import outcome, proxy
from lib.experiments import headline

NAME = "headline_cliff"
DEPENDS = [d for d in headline.DEPENDS if not d.startswith("results/")] + ["lib/experiments/headline_cliff.py"]
DEFAULT_LR = 7e-3


def run(scale: str) -> dict:
    with proxy.env_defaults(HEADLINE_CONTRAST_ARMS="sdpa,fp32", HEADLINE_CONTRAST_SEEDS="0,1,2"):
        if scale == "full":
            lr, src = float(os.environ.get("CLIFF_LR", DEFAULT_LR)), "$CLIFF_LR" if "CLIFF_LR" in os.environ \
                else "default 7e-3 (the sweep's failing LR)"
        else:
            lr, src = 1e-2, "ci default"
        return headline.run(scale, lr=lr, lr_source=src)
