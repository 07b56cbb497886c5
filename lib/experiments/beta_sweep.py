"""β sweep (chapter 7): does training follow the β window of `lib.fp.beta_theory`?

Arm "paper+fix" at several β, with the paper's exact rule (no underflow guard: `max_shift=None`) and, for the
largest β, also with the default guard. Same LR, steps and batch order as the headline (seed 0 by default).

Theory (`lib.fp.beta_theory`), for a tied row max r_m > 0 in score units:
* the fix is *ineffective* (the largest P̄ still rounds to 1 in BF16) when (β−1)·r_m ≤ x₁ ≈ 0.00196;
* the row *underflows* (ℓ = 0, O = 0/0) when (β−1)·r_m ≥ 134·ln 2 ≈ 92.9 (BF16 P̄ and ℓ, the paper placement).
So for the logits of a training run (max logit telemetry), a tiny β behaves like no fix (expected to explode like
the paper arm) and a huge β produces non-finite values as soon as a tied max exceeds 92.9/(β−1).

* ``full``: β in $BETA_SWEEP (default 1.0001, 1.01, 2, 7, 30), seeds $BETA_SWEEP_SEEDS (default 0).
* ``ci``: β in (1.0001, 7, 1000) on the tiny CPU proxy, 3 steps (proves the code path; no verdict).
"""
from __future__ import annotations

import os

from lib.fp import beta_theory
from lib.training import outcome, proxy

NAME = "beta_sweep"
DEPENDS = ["lib/experiments/beta_sweep.py", "lib/experiments/headline.py", "lib/fp/beta_theory.py", "lib/training/proxy.py",
           "lib/training/train.py", "lib/training/model.py", "lib/training/data.py", "data/corpus/pystdlib.txt.xz", "kernels/*.py",
           "lib/fp/numerics.py"]


def plan(scale: str) -> dict:
    from lib.book import results
    from lib.experiments import headline
    if scale == "full":
        betas = proxy.env_floats("BETA_SWEEP", (1.0001, 1.01, 2.0, 7.0, 30.0))
        seeds = proxy.env_ints("BETA_SWEEP_SEEDS", (0,))
        if results.exists("headline", "full"):
            hl = results.load("headline", "full").data
            lr, steps = hl["lr"], hl["steps"]
        else:
            lr, steps = headline.pick_lr(scale)[0], int(os.environ.get("HEADLINE_STEPS", "1500"))
    else:
        betas, seeds, lr, steps = (1.0001, 7.0, 1000.0), (0,), 1e-2, 3
    runs = [dict(arm="paper+fix", seed=s, lr=lr, tag=f"beta{b:g}_exact", config=dict(beta=b, max_shift=None))
            for b in betas for s in seeds]
    runs += [dict(arm="paper+fix", seed=s, lr=lr, tag=f"beta{max(betas):g}_guarded",
                  config=dict(beta=max(betas), max_shift=64.0)) for s in seeds]
    return dict(betas=list(betas), seeds=list(seeds), lr=lr, steps=steps, runs=runs)


def predictions(betas) -> list[dict]:
    """Per β: the r_m below which the fix is ineffective and above which a BF16 row underflows (score units)."""
    x1, xu = beta_theory.x_round_to_one(7), beta_theory.underflow_x("bf16")
    return [dict(beta=b, ineffective_below_r=x1 / (b - 1), underflow_above_r=xu / (b - 1)) for b in betas]


def run(scale: str) -> dict:
    p = plan(scale)
    workers = proxy.default_workers(scale, len(p["runs"]))
    summaries, arrays, meta = proxy.run_arms(scale, p["runs"], workers, steps=p["steps"])
    for s, r in zip(summaries, p["runs"]):
        s["beta"], s["max_shift"] = r["config"]["beta"], r["config"]["max_shift"]
    data = dict(runs=summaries, betas=p["betas"], seeds=p["seeds"], lr=p["lr"], steps=p["steps"],
                predictions=predictions(p["betas"]))
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      steps=p["steps"]),
                seeds=dict(torch=p["seeds"], data=[0]))
