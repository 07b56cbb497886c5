"""Is a training regime healthy? The rule that picks the learning rate of the healthy headline, fixed before any run.

The LR 8e-3 headline failed in every arm, FP32 attention included, with attention logits of 10³–10⁴: the generic
logit-growth failure (Wortsman et al. 2023), not the paper's mechanism, which needs a run that would otherwise train
(the paper's failed after ≈ 6.6k healthy steps at LR 1e-3). A regime is *healthy* at a horizon when the reference
arms — FP32 attention and PyTorch SDPA — train without failing and their largest attention logit stays moderate:

* every reference run's outcome over the horizon is "stable" (`lib.training.outcome.classify`);
* the largest attention logit (any layer, any head, any telemetry step) stays ≤ `MAX_LOGIT` = 100.

The pilot (`regime_sweep`) trains the reference arms at candidate LRs for `PILOT` steps, shorter than the headline's
horizon, so the logit must also *stay* below the bound when extrapolated: the largest logit's linear trend over the
pilot's last `TREND_STEPS` steps, continued to `HORIZON` steps, must be ≤ `MAX_LOGIT` as well. The chosen LR is the
largest candidate whose every pilot run passes. The rule above was committed before any pilot ran, with the paper's
LR (1e-3) as the only candidate; after that pilot failed it, the continuation was added (and committed before the
next pilot ran): when no candidate tried so far passes, the next one is half the smallest tried (each a registry entry `regime_sweep*`,
read together: `select_lr` takes the union of their runs). The healthy headline then runs at the chosen LR for `HORIZON` steps and its own
FP32 and SDPA arms (3 seeds) must pass the same test over the whole horizon (`health`), which is what the chapter
reports as "the regime is healthy".
"""
from __future__ import annotations

import numpy as np

__all__ = ["MAX_LOGIT", "HORIZON", "TREND_STEPS", "REFERENCE_ARMS", "run_health", "health", "select_lr", "union",
           "REGIME_RESULTS"]

REGIME_RESULTS = ("regime_sweep", "regime_sweep_5e4")   # the pilots so far, in the order they were run

MAX_LOGIT = 100.0          # largest attention logit (score units, scale·q·k) a healthy run may reach
HORIZON = 6000             # steps of the healthy headline
TREND_STEPS = 1000         # the pilot's last steps whose linear trend of the max logit is extrapolated to HORIZON
REFERENCE_ARMS = ("fp32", "sdpa")


def _max_logit_curve(arrays: dict, rid: str) -> tuple[np.ndarray, np.ndarray]:
    """(telemetry steps, largest logit over layers at each) of run `rid`."""
    steps = np.asarray(arrays[f"{rid}__step"], dtype=np.float64)
    ml = np.asarray(arrays[f"{rid}__max_logit"], dtype=np.float64)
    return steps, (ml.max(axis=1) if ml.ndim > 1 else ml)


def run_health(row: dict, arrays: dict, horizon: int | None = None) -> dict:
    """The health of one run: {"id", "arm", "seed", "outcome", "max_logit" (over the run), "extrapolated" (the
    last-`TREND_STEPS` linear trend of the max logit at `horizon`, or None without a horizon or enough telemetry),
    "healthy" (outcome stable, max logit ≤ MAX_LOGIT, and the extrapolation too when asked)}."""
    steps, ml = _max_logit_curve(arrays, row["id"])
    finite = np.isfinite(ml)
    peak = float(np.max(ml[finite])) if finite.any() else float("nan")
    extra = None
    if horizon is not None and finite.sum() >= 3:
        s, m = steps[finite], ml[finite]
        tail = s >= s[-1] - TREND_STEPS
        if tail.sum() >= 3:
            slope, icpt = np.polyfit(s[tail], m[tail], 1)
            extra = float(max(m[-1], slope * horizon + icpt))
    ok = row["outcome"] == "stable" and np.isfinite(peak) and peak <= MAX_LOGIT and \
        (extra is None or extra <= MAX_LOGIT) and (horizon is None or extra is not None)
    return dict(id=row["id"], arm=row["arm"], seed=row["seed"], lr=row["lr"], outcome=row["outcome"],
                steps=row["steps"], max_logit=peak, extrapolated=extra, healthy=bool(ok))


def health(data: dict, arrays: dict, arms=REFERENCE_ARMS, horizon: int | None = None) -> dict:
    """Per LR: the reference runs' health and whether all of them are healthy. `data`: a training result's data
    (its "runs"), `arrays`: its arrays. Returns {lr: {"runs": [run_health...], "healthy": bool}} over the LRs at which
    every arm of `arms` ran at least once (an LR missing an arm is not judged healthy)."""
    out = {}
    for lr in sorted({r["lr"] for r in data["runs"]}):
        rows = [r for r in data["runs"] if r["lr"] == lr and r["arm"] in arms and not r.get("tag")]
        hs = [run_health(r, arrays, horizon) for r in rows]
        complete = all(any(h["arm"] == a for h in hs) for a in arms)
        out[lr] = dict(runs=hs, healthy=bool(complete and hs and all(h["healthy"] for h in hs)))
    return out


def union(res_list) -> tuple[dict, dict]:
    """(data, arrays) with the runs and arrays of several training results (run ids carry the LR, so the regime
    sweeps' ids do not collide)."""
    runs, arrays = [], {}
    for r in res_list:
        runs += r.data["runs"]
        arrays.update(r.arrays)
    return dict(runs=runs), arrays


def select_lr(data: dict, arrays: dict) -> tuple[float | None, str]:
    """(the largest LR whose every reference run passes the pilot test, why); (None, why) when none does."""
    h = health(data, arrays, horizon=HORIZON)
    ok = [lr for lr, v in h.items() if v["healthy"]]
    if ok:
        return max(ok), (f"largest LR whose FP32 and SDPA pilot runs are stable with max logit ≤ {MAX_LOGIT:g}, "
                         f"extrapolated to ≤ {MAX_LOGIT:g} at {HORIZON} steps")
    return None, "no candidate LR passed the pilot test"
