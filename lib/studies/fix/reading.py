"""The numbers chapter 7 glues: the fix in theory, its own rounding error, the fix in training, the authors' code,
the β sweep, and what it costs.

* `STEP_TARGET`, `step_bench(data, arm)`: the training-step benchmark read against issue 15's target.
"""
from __future__ import annotations

STEP_TARGET = 1.3          # issue 15: a training step with 512-key rounding blocks ≤ 1.3 × the SDPA step


def step_bench(data: dict, arm: str = "paper_rb512") -> dict:
    """The training-step benchmark (`train_step_bench` data) for `arm` against SDPA: {"ratio" (the result's median
    over rounds), "rounds" (per-round ratios), "lo", "hi" (their range), "met" (ratio ≤ STEP_TARGET), "every_round"
    ("above" / "below" / "both": where the rounds lie against the target)}."""
    ratio = float(data["ratio_to_sdpa"][arm])
    rounds = [float(x) for x in (data.get("ratio_to_sdpa_rounds", {}).get(arm) or [ratio])]
    above = [x > STEP_TARGET for x in rounds]
    return dict(ratio=ratio, rounds=rounds, lo=min(rounds), hi=max(rounds), met=ratio <= STEP_TARGET,
                every_round="above" if all(above) else "below" if not any(above) else "both")
