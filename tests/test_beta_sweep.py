"""lib/studies/fix/beta_sweep.py: predictions follow lib.fp.beta_theory; the exact-rule arm can underflow, the guarded one not."""
import math

import numpy as np
import torch

from lib.fp.fix import Fix
from lib.fp import beta_theory
from lib.studies.fix import beta_sweep
from lib.book.runner import run_live
from lib.training.model import GPTConfig
from lib.training.spec import AttnSpec


def test_predictions_are_the_theory_thresholds():
    p = beta_sweep.predictions([2.0, 7.0])
    assert math.isclose(p[1]["underflow_above_r"], beta_theory.underflow_x("bf16") / 6)
    assert math.isclose(p[0]["ineffective_below_r"], beta_theory.x_round_to_one(7) / 1)


def test_max_shift_reaches_the_kernel_spec():
    cfg = GPTConfig(n_layer=1, n_head=1, n_embd=16, attn="paper+fix", beta=30.0, max_shift=None)
    spec = cfg.layer_specs()[0]
    assert spec.fix == Fix("beta", 30.0, max_shift=None)
    assert AttnSpec.parse("paper+fix").fix.max_shift == 64.0


def test_ci_run_exact_rule_vs_guard():
    r = run_live("beta_sweep", "ci")
    runs = {x["id"]: x for x in r["data"]["runs"]}
    assert {x["max_shift"] for x in runs.values()} == {None, 64.0}
    assert all(np.isfinite(r["arrays"][f"{i}__loss"]).all() or runs[i]["outcome"] == "nonfinite" for i in runs)
    guarded = [i for i in runs if i.endswith("guarded")]
    assert guarded and all(np.isfinite(r["arrays"][f"{i}__loss"]).all() for i in guarded)
