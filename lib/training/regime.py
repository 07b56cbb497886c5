"""Which learning rate to train at: the rule that picks the healthy regime's LR (fixed before any run), the LR
sweep's older "window" rule, and `pick_lr`, which every training experiment calls on its configured `lr`.

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

from lib.training.runs import union

__all__ = ["MAX_LOGIT", "HORIZON", "TREND_STEPS", "REFERENCE_ARMS", "run_health", "health", "select_lr",
           "REGIME_RESULTS", "choose_lr", "pick_lr", "max_logit_curve"]

REGIME_RESULTS = ("regime_sweep", "regime_sweep_5e4")   # the pilots so far, in the order they were run

MAX_LOGIT = 100.0          # largest attention logit (score units, scale·q·k) a healthy run may reach
HORIZON = 6000             # steps of the healthy headline
TREND_STEPS = 1000         # the pilot's last steps whose linear trend of the max logit is extrapolated to HORIZON
REFERENCE_ARMS = ("fp32", "sdpa")


def max_logit_curve(arrays: dict, rid: str) -> tuple[np.ndarray, np.ndarray]:
    """(telemetry steps, largest logit over layers at each) of run `rid`."""
    steps = np.asarray(arrays[f"{rid}__step"], dtype=np.float64)
    ml = np.asarray(arrays[f"{rid}__max_logit"], dtype=np.float64)
    return steps, (ml.max(axis=1) if ml.ndim > 1 else ml)


def run_health(row: dict, arrays: dict, horizon: int | None = None) -> dict:
    """The health of one run: {"id", "arm", "seed", "outcome", "max_logit" (over the run), "extrapolated" (the
    last-`TREND_STEPS` linear trend of the max logit at `horizon`, or None without a horizon or enough telemetry),
    "healthy" (outcome stable, max logit ≤ MAX_LOGIT, and the extrapolation too when asked)}."""
    steps, ml = max_logit_curve(arrays, row["id"])
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


def select_lr(data: dict, arrays: dict) -> tuple[float | None, str]:
    """(the largest LR whose every reference run passes the pilot test, why); (None, why) when none does."""
    h = health(data, arrays, horizon=HORIZON)
    ok = [lr for lr, v in h.items() if v["healthy"]]
    if ok:
        return max(ok), (f"largest LR whose FP32 and SDPA pilot runs are stable with max logit ≤ {MAX_LOGIT:g}, "
                         f"extrapolated to ≤ {MAX_LOGIT:g} at {HORIZON} steps")
    return None, "no candidate LR passed the pilot test"


def choose_lr(data: dict) -> tuple[float | None, str]:
    """The LR sweep's "window" rule: (lr, reason) from a sweep's data — the largest swept LR at which every contrast
    arm (`lib.training.proxy.CONTRAST_ARMS`) is stable and the paper arm is not; failing that, the largest LR at which
    every contrast arm is stable. (None, reason) when no LR qualifies."""
    from lib.training import proxy
    by_lr: dict[float, dict[str, list[str]]] = {}
    for r in data["runs"]:
        by_lr.setdefault(r["lr"], {}).setdefault(r["arm"], []).append(r["outcome"])
    contrast_ok = [lr for lr, arms in by_lr.items()
                   if all(a in arms and all(o == "stable" for o in arms[a]) for a in proxy.CONTRAST_ARMS)]
    window = [lr for lr in contrast_ok if any(o != "stable" for o in by_lr[lr].get("paper", ["stable"]))]
    if window:
        return max(window), "largest LR with every contrast arm stable and the paper arm not"
    if contrast_ok:
        return max(contrast_ok), "no LR where paper failed with stable contrasts; largest LR with stable contrasts"
    return None, "no swept LR had every contrast arm stable"


def pick_lr(scale: str, lr) -> tuple[float, str]:
    """(lr, where it came from) for cfg value `lr`: a number, "from:lr_sweep" (the committed full sweep's choice;
    5e-3 without that result) or "from:regime_sweep" (the committed pilot's healthy LR,
    `lib.training.regime.select_lr`; an error without one: a healthy run needs a chosen regime)."""
    if not (isinstance(lr, str) and lr.startswith("from:")):
        return float(lr), "registry"
    from lib.book import results
    if lr == "from:regime_sweep":
        if scale != "full":
            return 2e-3, "ci: no pilot at ci scale"
        have = [n for n in REGIME_RESULTS if results.exists(n, "full")]
        if not have:
            raise ValueError("headline: lr 'from:regime_sweep' needs the full regime_sweep result")
        chosen, why = select_lr(*union([results.load(n, "full") for n in have]))
        if chosen is None:
            raise ValueError(f"headline: regime_sweep chose no LR ({why})")
        return chosen, f"regime_sweep (full): {why}"
    if lr != "from:lr_sweep":
        raise ValueError(f"headline: lr must be a number, 'from:lr_sweep' or 'from:regime_sweep', got {lr!r}")
    if scale == "full" and results.exists("lr_sweep", "full"):
        chosen, why = choose_lr(results.load("lr_sweep", "full").data)
        if chosen is not None:
            return chosen, f"lr_sweep (full): {why}"
    return 5e-3, "default 5e-3 (no full lr_sweep result, or it chose none)"
