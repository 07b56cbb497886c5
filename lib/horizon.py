"""Judging training runs of unequal length at a common step horizon.

Our GPU experiments stop each run at a wall-clock budget, and runs sharing the GPU with more (or slower) processes
reach fewer steps. A run that "trained" for 950 steps and one that "exploded" at step 1,100 are not comparable, so
readers of several runs re-judge each one on its first H steps, H = the fewest steps of any run that stayed finite,
with the same rule as the whole run (`lib.explosion.classify`).

* `common_horizon(rows)`: H over summary rows ({"steps", "outcome"}); None if every run went non-finite.
* `rejudge(row, loss, grad_norm, warmup, h)`: the row with "outcome"/"onset"/"steps"/"final" judged on the first h
  steps, the whole-run values kept as "full_outcome"/"full_steps"/"full_onset", and "horizon" = h.
* `judge_result(res)`: every run of one `lib.results.Result` re-judged at that result's common horizon.
"""
from __future__ import annotations

import numpy as np

from lib import explosion

__all__ = ["common_horizon", "judge_result", "rejudge"]


def common_horizon(rows) -> int | None:
    """The fewest steps (int) of the rows whose outcome is not "nonfinite"; None if there is no such row. A run
    stopped by non-finite values failed before any horizon, so it does not shorten the horizon of the others."""
    fin = [int(r["steps"]) for r in rows if r["outcome"] != "nonfinite"]
    return min(fin) if fin else None


def rejudge(row: dict, loss: np.ndarray, grad_norm: np.ndarray, warmup: int, h: int | None) -> dict:
    """A copy of summary `row` judged on the first `h` steps of its per-step `loss` (nats/byte) and pre-clip
    `grad_norm` arrays (shape (steps,)). A non-finite run, or h None, keeps its outcome (it failed before h)."""
    new = dict(row, full_outcome=row["outcome"], full_steps=row["steps"], full_onset=row.get("onset"), horizon=h)
    if h is None or row["outcome"] == "nonfinite":
        return new
    if h > len(loss):
        raise ValueError(f"horizon {h} is longer than run {row.get('id', '?')} ({len(loss)} steps)")
    c = explosion.classify(loss[:h], grad_norm[:h], warmup)
    new.update(outcome=c["outcome"], onset=c["onset"], steps=int(h), final=c["final"])
    return new


def judge_result(res) -> tuple[int | None, dict]:
    """(H, {run id: `rejudge` row}) for every run of `res` (a `lib.results.Result` with per-step "<id>__loss" and
    "<id>__grad_norm" arrays), H = `common_horizon` of all its runs."""
    runs = res.data["runs"]
    h = common_horizon(runs)
    warm = int(res.meta["config"]["warmup"])
    return h, {r["id"]: rejudge(r, res.arrays[f"{r['id']}__loss"], res.arrays[f"{r['id']}__grad_norm"], warm, h)
               for r in runs}
