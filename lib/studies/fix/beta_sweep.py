"""β sweep (chapter 7): does training follow the β window of `lib.fp.beta_theory`?

Arm "paper+fix" at several β, with the paper's exact rule (no underflow guard: `max_shift=None`) and, for the
largest β, also with the default guard, on one recorded batch order (data seed 0).

Theory (`lib.fp.beta_theory`), for a tied row max r_m > 0 in score units:
* the fix is *ineffective* (the largest P̄ still rounds to 1 in BF16) when (β−1)·r_m ≤ x₁ ≈ 0.00196;
* the row *underflows* (ℓ = 0) when (β−1)·r_m ≥ 134·ln 2 ≈ 92.9 (BF16 P̄ and ℓ, the paper placement). In the paper's
  formula that row is 0/0; our kernel, like production kernels, divides by 1 where ℓ = 0 (it must, for fully masked
  rows), so such a row comes out as O = 0 with no gradient — the exact rule silently zeroes every row whose tied max
  exceeds 92.9/(β−1) (`lib.studies.fix.beta.underflow_rows`).

cfg: betas, seeds, lr, steps.
"""
from __future__ import annotations

from lib.fp import beta_theory
from lib.fp.fix import MAX_SHIFT
from lib.training import outcome, proxy

def plan(scale: str, cfg: dict) -> dict:
    betas, seeds, lr, steps = tuple(cfg["betas"]), tuple(cfg["seeds"]), float(cfg["lr"]), int(cfg["steps"])
    runs = [dict(arm="paper+fix", seed=s, lr=lr, tag=f"beta{b:g}_exact", config=dict(beta=b, max_shift=None))
            for b in betas for s in seeds]
    runs += [dict(arm="paper+fix", seed=s, lr=lr, tag=f"beta{max(betas):g}_guarded",
                  config=dict(beta=max(betas), max_shift=MAX_SHIFT)) for s in seeds]
    return dict(betas=list(betas), seeds=list(seeds), lr=lr, steps=steps, runs=runs)


def predictions(betas) -> list[dict]:
    """Per β: the r_m below which the fix is ineffective and above which a BF16 row underflows (score units)."""
    x1, xu = beta_theory.x_round_to_one(7), beta_theory.underflow_x("bf16")
    return [dict(beta=b, ineffective_below_r=x1 / (b - 1), underflow_above_r=xu / (b - 1)) for b in betas]


def run(scale: str, cfg: dict) -> dict:
    p = plan(scale, cfg)
    workers = proxy.default_workers(scale, len(p["runs"]))
    summaries, arrays, meta = proxy.run_arms(scale, p["runs"], workers, steps=p["steps"])
    for s, r in zip(summaries, p["runs"]):
        s["beta"], s["max_shift"] = r["config"]["beta"], r["config"]["max_shift"]
    data = dict(runs=summaries, betas=p["betas"], seeds=p["seeds"], lr=p["lr"], steps=p["steps"],
                predictions=predictions(p["betas"]))
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      steps=p["steps"]),
                seeds=dict(torch=p["seeds"], data=[0]))
