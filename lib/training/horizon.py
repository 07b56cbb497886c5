"""Judging training runs of unequal length at a common step horizon.

Our GPU experiments stop each run at a wall-clock budget, and runs sharing the GPU with more (or slower) processes
reach fewer steps. A run that "trained" for 950 steps and one that "exploded" at step 1,100 are not comparable, so
readers of several runs re-judge each one on its first H steps, H = the fewest steps of any run that stayed finite,
with the same rule as the whole run (`lib.training.outcome.classify`).

* `common_horizon(rows)`: H over summary rows ({"steps", "outcome"}); None if every run went non-finite.
* `rejudge(row, loss, grad_norm, warmup, h)`: the row with "outcome"/"onset"/"steps"/"final" judged on the first h
  steps, the whole-run values kept as "full_outcome"/"full_steps"/"full_onset", and "horizon" = h.
* `judge_result(res)`: every run of one `lib.book.results.Result` re-judged at that result's common horizon.
* `arm_words(runs, judged, arm)`: "exploded (647), stable, …" — one arm's judged outcomes in seed order (prose).
* `stable_arms(runs, judged)`: the arms whose every run stayed stable.
"""
from __future__ import annotations

import numpy as np

from lib.training import outcome, proxy

__all__ = ["arm_words", "common_horizon", "judge_result", "rejudge", "stable_arms"]


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
    c = outcome.classify(loss[:h], grad_norm[:h], warmup)
    new.update(outcome=c["outcome"], onset=c["onset"], steps=int(h), final=c["final"])
    return new


def judge_result(res) -> tuple[int | None, dict]:
    """(H, {run id: `rejudge` row}) for every run of `res` (a `lib.book.results.Result` with per-step "<id>__loss" and
    "<id>__grad_norm" arrays), H = `common_horizon` of all its runs."""
    runs = res.data["runs"]
    h = common_horizon(runs)
    warm = int(res.meta["config"]["warmup"])
    return h, {r["id"]: rejudge(r, res.arrays[f"{r['id']}__loss"], res.arrays[f"{r['id']}__grad_norm"], warm, h)
               for r in runs}


def _arm_runs(runs, arm):
    """The runs of `arm` without a tag (a repeat is not another seed), in seed order."""
    return sorted((r for r in runs if r["arm"] == arm and not r.get("tag")), key=lambda r: r["seed"])


def arm_words(runs, judged: dict, arm: str, onsets: bool = True) -> str:
    """The outcomes of `arm`'s runs (summary rows with "id", "arm", "seed", "tag") as judged in `judged` ({run id:
    `rejudge` row}), in seed order: "exploded (647), stable, degraded (1136)", the onset step in brackets for a run
    that did not stay stable (onsets=False: outcomes only). Empty string if the arm has no run."""
    js = [judged[r["id"]] for r in _arm_runs(runs, arm)]
    return outcome.words([j["outcome"] for j in js],
                         [j["onset"] if onsets and j["outcome"] != "stable" else None for j in js])


def stable_arms(runs, judged: dict) -> list[str]:
    """The arms (in order of first appearance) whose every untagged run is "stable" in `judged`."""
    arms = dict.fromkeys(r["arm"] for r in runs if not r.get("tag"))
    return [a for a in arms if all(judged[r["id"]]["outcome"] == "stable" for r in _arm_runs(runs, a))]
