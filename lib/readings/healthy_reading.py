"""Reading the healthy-regime training results and the authors'-code runs (chapters 6 and 7).

No experiment imports this module: it only reads committed results.

* `HEALTHY_RESULTS`: the healthy headline's two halves — `healthy_headline` (paper placement with 512-key rounding
  blocks, the fix at β = 7) and `healthy_headline_more` (the fix at the authors' current β = 2, production FA2
  numerics): same LR, steps, warm-up and batch order, so they are one headline. `WIDE_RESULTS`: the headline at
  width 768 (paper placement, FP32, SDPA), split in two results (seeds 0-1, seed 2) read as one.
* `merge(res_list)`: one `lib.book.results.Result` holding the runs and arrays of several training results that
  share LR, steps, warm-up and data seed (ValueError otherwise).
* `arm_summary(res)`: per arm, the runs judged at the result's common step horizon (`lib.readings.horizon`) and the
  ranges over seeds of best loss and of the fix / underflow telemetry.
* `best_within(res, h)`: {run id: best smoothed loss over the first h steps} (to compare results of unequal length).
* `step_bench(data)`: the training-step benchmark read against issue 15's target (≤ `STEP_TARGET` × the SDPA step).
"""
from __future__ import annotations

import numpy as np

from lib.book import results as _results
from lib.training import outcome

__all__ = ["HEALTHY_RESULTS", "WIDE_RESULTS", "AUTHORS_RESULTS", "STEP_TARGET", "merge", "arm_summary", "best_within", "telemetry",
           "step_bench", "span"]

HEALTHY_RESULTS = ("healthy_headline", "healthy_headline_more")
WIDE_RESULTS = ("healthy_headline_w768", "healthy_headline_w768_s2")   # width 768: seeds 0-1 and seed 2, one headline
AUTHORS_RESULTS = ("authors_code", "authors_code_8e3")
STEP_TARGET = 1.3          # issue 15: a training step with 512-key rounding blocks ≤ 1.3 × the SDPA step


def merge(res_list, name: str | None = None):
    """One Result with the runs and arrays of `res_list` (training results with "lr", "steps" and "runs" in their
    data and "warmup", "data_seed" in their meta config). Raises ValueError if they differ in LR, steps, warm-up or
    data seed (then they are not one headline) or if two share a run id. meta is the first result's; `stale` joins
    every result's staleness, each prefixed with its name."""
    res_list = list(res_list)
    if not res_list:
        raise ValueError("nothing to merge")
    key = [(r.data["lr"], r.data["steps"], r.meta["config"]["warmup"], r.meta["config"]["data_seed"])
           for r in res_list]
    if len(set(key)) != 1:
        raise ValueError(f"results differ in (lr, steps, warmup, data_seed): {key}")
    from collections import Counter
    from lib.readings.regime import union
    dup = [i for i, n in Counter(x["id"] for r in res_list for x in r.data["runs"]).items() if n > 1]
    if dup:
        raise ValueError(f"run ids in more than one result: {dup}")
    joined, arrays = union(res_list)
    data = dict(res_list[0].data, runs=joined["runs"])
    stale = [f"{r.name}: {s}" for r in res_list for s in r.stale]
    return _results.Result(name or "+".join(r.name for r in res_list), res_list[0].scale, dict(res_list[0].meta),
                           data, arrays, stale)


def telemetry(arrays: dict, rid: str, key: str) -> dict | None:
    """One run's telemetry `key` (array (telemetry steps, layers)): {"layer_mean": mean over steps of the most
    affected layer, "mean": mean over layers and steps, "max": the largest single value}; None when the run did not
    record it (missing or all NaN)."""
    a = arrays.get(f"{rid}__{key}")
    if a is None:
        return None
    a = np.asarray(a, dtype=np.float64)
    if not np.isfinite(a).any():
        return None
    return dict(layer_mean=float(np.nanmax(np.nanmean(a, axis=0))), mean=float(np.nanmean(a)),
                max=float(np.nanmax(a)))


def span(xs, fmt: str = "{:.3f}", sep: str = "–") -> str:
    """'lo–hi' of the finite values of xs ('lo' when equal, '—' when none)."""
    xs = [float(x) for x in xs if x is not None and np.isfinite(x)]
    if not xs:
        return "—"
    lo, hi = fmt.format(min(xs)), fmt.format(max(xs))
    return lo if lo == hi else f"{lo}{sep}{hi}"


TELEMETRY = ("fix_rows", "fix_zero_rows", "underflow_rows", "tie_rate")


def arm_summary(res) -> dict:
    """{arm: {"runs": run rows in seed order, "seeds", "outcomes" (judged at the common horizon), "onsets" (judged
    onsets, None where none), "failed", "stable" (counts, `lib.training.outcome`), "best" (whole-run best smoothed
    losses), "max_logit" (per run, largest over the run), and per `TELEMETRY` key a list over runs of `telemetry`
    dicts (None where not recorded)}}, plus "horizon" at the top level under the key None."""
    from lib.readings import horizon as hz
    h, judged = hz.judge_result(res)
    out = {None: {"horizon": h}}
    for arm in dict.fromkeys(r["arm"] for r in res.data["runs"] if not r.get("tag")):
        rs = sorted((r for r in res.data["runs"] if r["arm"] == arm and not r.get("tag")), key=lambda r: r["seed"])
        oc = [judged[r["id"]]["outcome"] for r in rs]
        s = dict(runs=rs, seeds=[r["seed"] for r in rs], outcomes=oc,
                 onsets=[judged[r["id"]]["onset"] if not outcome.stayed_stable(judged[r["id"]]["outcome"]) else None
                         for r in rs],
                 failed=sum(outcome.failed(o) for o in oc), stable=sum(outcome.stayed_stable(o) for o in oc),
                 best=[r["best"] for r in rs],
                 max_logit=[float(np.nanmax(res.arrays[f"{r['id']}__max_logit"])) for r in rs])
        for k in TELEMETRY:
            s[k] = [telemetry(res.arrays, r["id"], k) for r in rs]
        out[arm] = s
    return out


def best_within(res, h: int) -> dict:
    """{run id: best smoothed loss over the first `h` steps} for every run of `res` that ran at least h steps
    (`lib.training.outcome.classify` on the prefix, so the same smoothing as the verdicts)."""
    warm = int(res.meta["config"]["warmup"])
    out = {}
    for r in res.data["runs"]:
        loss = res.arrays[f"{r['id']}__loss"]
        if len(loss) >= h:
            out[r["id"]] = outcome.classify(loss[:h], res.arrays[f"{r['id']}__grad_norm"][:h], warm)["best"]
    return out


def step_bench(data: dict, arm: str = "paper_rb512") -> dict:
    """The training-step benchmark (`train_step_bench` data) for `arm` against SDPA: {"ratio" (the result's median
    over rounds), "rounds" (per-round ratios), "lo", "hi" (their range), "met" (ratio ≤ STEP_TARGET), "every_round"
    ("above" / "below" / "both": where the rounds lie against the target)}."""
    ratio = float(data["ratio_to_sdpa"][arm])
    rounds = [float(x) for x in (data.get("ratio_to_sdpa_rounds", {}).get(arm) or [ratio])]
    above = [x > STEP_TARGET for x in rounds]
    return dict(ratio=ratio, rounds=rounds, lo=min(rounds), hi=max(rounds), met=ratio <= STEP_TARGET,
                every_round="above" if all(above) else "below" if not any(above) else "both")
