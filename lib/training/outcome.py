"""Judging one training run from its loss curve: stable, degraded, exploded, non-finite or short.

The thresholds are definitions (nats/byte of the training loss smoothed over `SMOOTH` steps), fixed before the runs
they judge; `classify` is the only place that applies them. `lib.training.horizon` re-applies it at a common step
horizon when runs of unequal length are compared. `words` writes outcomes as the prose does (the one formatter).
"""
from __future__ import annotations

import math

import numpy as np

# Outcome thresholds (definitions, in nats/byte of the training loss smoothed over SMOOTH steps).
SMOOTH = 50                 # steps in the moving average (shortened for short runs)
RISE_EXPLODED = 0.5         # final smoothed loss − best smoothed loss ≥ this: "exploded"
RISE_DEGRADED = 0.1         # ≥ this (or a post-warm-up grad-norm spike > GN_SPIKE): "degraded"
GN_SPIKE = 10.0             # pre-clip global grad norm (clipping is at 1.0)
ONSET_RISE = 0.25           # onset: first step whose smoothed loss exceeds the running best by this



# How every reader counts outcomes (one definition for all claims, tables and chapters): a run *failed* when it
# exploded or went non-finite; it *stayed stable* only when "stable"; "degraded" is neither — it did not fail, and it
# did not stay stable — so a claim that something "stabilises" needs "stable", and a claim that something "fails"
# needs a failure.
FAILED = frozenset({"exploded", "nonfinite"})


def failed(outcome: str) -> bool:
    return outcome in FAILED


def stayed_stable(outcome: str) -> bool:
    return outcome == "stable"


def smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (NaN-propagating), same length as x."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) == 0:
        return x
    w = max(1, min(window, len(x)))
    c = np.cumsum(np.insert(x, 0, 0.0))
    out = np.empty_like(x)
    for i in range(len(x)):
        lo = max(0, i + 1 - w)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def classify(loss, grad_norm, warmup: int) -> dict:
    """Outcome of one run from its per-step loss and pre-clip grad norm.

    A finite run that never left warm-up (len(loss) <= warmup, e.g. cut by the wall budget) is "short": it cannot be
    judged (a loss curve still falling from its initial value and the initial grad norms are not a verdict).

    Returns {"outcome": "nonfinite" | "exploded" | "degraded" | "stable" | "short", "best": min smoothed loss, "final": last
    smoothed loss, "rise": final − best, "max_grad_norm": max pre-clip grad norm after warm-up, "onset": first
    step whose smoothed loss exceeds the running best by ONSET_RISE (None if never)}."""
    loss = np.asarray(loss, dtype=np.float64)
    gn = np.asarray(grad_norm, dtype=np.float64)
    if len(loss) == 0:
        raise ValueError("empty loss curve")
    if not np.isfinite(loss).all():
        first = int(np.argmax(~np.isfinite(loss)))
        return dict(outcome="nonfinite", best=float(np.nanmin(loss)), final=float("nan"), rise=float("nan"),
                    max_grad_norm=float(np.nanmax(gn)) if len(gn) else float("nan"), onset=first)
    sm = smooth(loss, min(SMOOTH, max(1, len(loss) // 10)))
    run_best = np.minimum.accumulate(sm)
    above = np.nonzero(sm - run_best > ONSET_RISE)[0]
    best, final = float(sm.min()), float(sm[-1])
    rise = final - best
    post = gn[warmup:]
    max_gn = float(post.max()) if len(post) else float("nan")
    if len(loss) <= warmup:
        outcome = "short"
    elif rise >= RISE_EXPLODED:
        outcome = "exploded"
    elif rise >= RISE_DEGRADED or (math.isfinite(max_gn) and max_gn > GN_SPIKE):
        outcome = "degraded"
    else:
        outcome = "stable"
    return dict(outcome=outcome, best=best, final=final, rise=rise, max_grad_norm=max_gn,
                onset=int(above[0]) if len(above) else None)


def words(outcomes, onsets=None, compact: bool = False) -> str:
    """Outcomes of runs (in seed order) as the prose writes them: "exploded (647), stable, degraded (1136)", with
    the onset step in brackets where `onsets` (a list beside `outcomes`) has one (None: no bracket), or, with
    `compact` and every run alike, "3 × stable". '' for no runs. The one formatter of outcome words."""
    outcomes = list(outcomes)
    onsets = list(onsets) if onsets is not None else [None] * len(outcomes)
    if compact and outcomes and len(set(outcomes)) == 1 and all(o is None for o in onsets):
        return f"{len(outcomes)} × {outcomes[0]}"
    return ", ".join(o + (f" ({n})" if n is not None else "") for o, n in zip(outcomes, onsets))
