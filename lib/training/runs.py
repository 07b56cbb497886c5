"""Reading training results: merging several into one, per-arm summaries at a common horizon, telemetry ranges,
smoothed curves, and the words outcomes are written in. No experiment's result depends on the reading helpers here
except `union` (the regime pilots read together, `lib.training.regime.pick_lr`).

* `union(res_list)`: (data, arrays) with the runs and arrays of several results (run ids must not collide).
* `merge(res_list)`: one `lib.book.results.Result` holding the runs and arrays of several training results that
  share LR, steps, warm-up and data seed (ValueError otherwise): e.g. the healthy headline's two halves.
* `result_arrays(res_list)`: {(result name, array key): array} where run ids may repeat across results.
* `repeats(res_list)`: the same arm and seed run in two results — are their loss curves bit-identical?
* `arm_summary(res)`: per arm, the runs judged at the result's common step horizon (`lib.training.horizon`) and the
  ranges over seeds of best loss and of the fix / underflow telemetry.
* `best_within(res, h)`: {run id: best smoothed loss over the first h steps} (to compare results of unequal length).
* `smoothed_loss(loss, window)`: the moving-average loss curve every training figure draws.
* `span(xs)`: a range of values as the prose writes it (outcomes: `lib.training.outcome.words`);
  `arm_label(res, arm)`: an arm in words (`spec_words`: an attention spec, or one per layer, in words); `outcome_table(res)`: the run summaries as a Markdown table (with
  `tokens_seen`, `val_loss`);
  `labelled(res_list)`: results named by their titles, with their provenance in words.
"""
from __future__ import annotations

import numpy as np

from lib.book import results as _results
from lib.training import outcome

__all__ = ["union", "merge", "result_arrays", "repeats", "arm_label", "outcome_table", "labelled", "arm_summary",
           "tokens_seen", "tokens_words", "val_loss", "spec_words",
           "best_within", "telemetry", "smoothed_loss", "span",
           "TELEMETRY"]


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


def repeats(res_list, skip=None) -> list[dict]:
    """Runs with the same arm, seed and LR in two of the results `res_list` (a repeat across results; `skip(res, row)`
    leaves runs out): [{"arm", "seed", "lr", "results": (name_a, name_b), "commits": (git commit a, b), "steps":
    steps both ran, "identical": loss curves bit-identical over those steps, "first_diff": first differing step or
    None}]."""
    from itertools import combinations
    arr = result_arrays(res_list)
    seen = {}
    for res in res_list:
        for r in res.data["runs"]:
            if skip is None or not skip(res, r):
                seen.setdefault((r["arm"], r["seed"], r["lr"]), []).append((res, r))
    out = []
    for (arm, seed, lr), rs in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        for (ra, a), (rb, b) in combinations(rs, 2):
            la, lb = arr[(ra.name, f"{a['id']}__loss")], arr[(rb.name, f"{b['id']}__loss")]
            n = min(len(la), len(lb))
            diff = np.nonzero(la[:n] != lb[:n])[0]
            out.append(dict(arm=arm, seed=seed, lr=lr, results=(ra.name, rb.name),
                            commits=(ra.meta.get("git_commit"), rb.meta.get("git_commit")), steps=int(n),
                            identical=len(diff) == 0, first_diff=int(diff[0]) if len(diff) else None))
    return out


def arm_label(res, arm: str) -> str:
    """The readable label of `arm` in training result `res`: its attention spec in words
    (`lib.training.spec.describe`, with the run's β, tie tolerance and cap), plus ", QK-norm" where the entry trained
    the arm with QK-norm. The label tables and legends show in place of the arm's name."""
    row = next(r for r in res.data["runs"] if r["arm"] == arm)
    cfg = res.meta.get("config", {})
    fix = {k: cfg[k] for k in ("beta", "tie_tol", "max_shift") if k in cfg}
    label = spec_words(row["attn"], fix)
    extra = (res.meta.get("provenance", {}).get("cfg", {}).get("arm_train", {}) or {}).get(arm, {})
    return label + (", QK-norm" if extra.get("qk_norm") else "")


def spec_words(attn, fix: dict | None = None) -> str:
    """An arm's attention in words: one spec (`lib.training.spec.describe`), or one spec per layer (a list, or a
    comma-separated string) as "<spec> in layer 2, <other> elsewhere"; a layer spec "paper[heads 0,1: <spec>]"
    reads "<paper>, heads 0, 1: <spec>"."""
    import re
    from lib.training.spec import describe
    fix = fix or {}

    def one(spec: str) -> str:
        m = re.fullmatch(r"(.+?)\[heads ([\d,]+): (.+)\]", spec)
        if m:
            return f"{describe(m.group(1), **fix)}, heads {m.group(2).replace(',', ', ')}: {describe(m.group(3), **fix)}"
        return describe(spec, **fix)
    layers = list(attn) if isinstance(attn, (list, tuple)) else str(attn).split(",") if "," in str(attn) and \
        "[" not in str(attn) else [str(attn)]
    if len(set(layers)) == 1:
        return one(layers[0])
    common = max(set(layers), key=layers.count)
    odd = {}
    for i, sp in enumerate(layers):
        if sp != common:
            odd.setdefault(sp, []).append(i)
    parts = [f"{one(sp)} in layer{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix))}" for sp, ix in odd.items()]
    return "; ".join(parts) + f"; {one(common)} elsewhere"


def run_words(run: dict) -> str:
    """One run of a result's data in words: its attention in words and its seed ("paper placement, seed 0"); a run
    that recorded no spec (older data) by its id, as code."""
    if "attn" in run and "seed" in run:
        return f"{spec_words(run['attn'])}, seed {run['seed']}"
    return f"`{run['id']}`"


def tokens_seen(res, run: dict) -> int | None:
    """Tokens a training run saw: its steps × batch size × sequence length (the result's meta config); None when the
    config does not say."""
    cfg = (getattr(res, "meta", {}) or {}).get("config", {})
    if not cfg.get("batch_size") or not cfg.get("seq_len"):
        return None
    return int(run["steps"]) * int(cfg["batch_size"]) * int(cfg["seq_len"])


def tokens_words(n) -> str:
    """A token count as a table shows it: "98.3 M" ("—" for None)."""
    return "—" if n is None else f"{n / 1e6:.1f} M"


def val_loss(run: dict) -> float | None:
    """A run's validation loss at its end (nats per byte), None when it recorded none."""
    v = run.get("val_loss")
    return float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None


def outcome_table(res, judged: dict | None = None) -> str:
    """A Markdown table of a training result's run summaries, one row per run: the run (its arm in words, its seed,
    and its LR where the runs differ in LR), outcome, tokens seen, best and final training loss, validation loss, largest pre-clip grad norm; with
    `judged` ({run id: `lib.training.horizon.rejudge` row}) the outcome at the common horizon, onset in brackets,
    in place of the whole-run outcome. `res`: a Result (or, for a live run without meta, its data dict: runs are
    then named by `run_words`)."""
    data = res.data if hasattr(res, "data") else res
    hz = bool(judged)
    head = f"at step {next(iter(judged.values()))['horizon']:,} (onset)" if hz else "outcome (onset)"
    rows = [f"| run | {head} | tokens | best / final loss | val loss | max grad norm |",
            "|---|---|---|---|---|---|"]
    lrs = {r.get("lr") for r in data["runs"]}     # a sweep's runs differ in LR: name it in each row
    for r in data["runs"]:
        name = (f"{arm_label(res, r['arm'])}, seed {r['seed']}" if hasattr(res, "data") else run_words(r)) \
            + (f", LR {r['lr']:g}" if len(lrs) > 1 and r.get("lr") is not None and hasattr(res, "data") else "") \
            + (" (repeat)" if r.get("tag") else "")
        oc, on = (judged[r["id"]]["outcome"], judged[r["id"]]["onset"]) if hz else (r["outcome"], r["onset"])
        v = val_loss(r)
        rows.append(f"| {name} | {oc}" + (f" ({on})" if on is not None else "") + f" | "
                    f"{tokens_words(tokens_seen(res, r))} | {r['best']:.3f} / {r['final']:.3f} | "
                    f"{'—' if v is None else f'{v:.3f}'} | {r['max_grad_norm']:.3g} |")
    return "\n".join(rows)


def labelled(res_list, mark_stale: bool = True) -> str:
    """Each result by its title and provenance in words, "stale" where it is (unless `mark_stale` is False: in a
    section that says so once), joined by "; " (captions and prose: `lib.book.catalogue.cite`; the appendix pairs
    each title with the result's name and command)."""
    from lib.book import catalogue
    return catalogue.cite(list(res_list), mark_stale=mark_stale)


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
    from lib.training import horizon as hz
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


def result_arrays(res_list) -> dict:
    """{(result name, array key): array} over several results (their run ids may repeat across results)."""
    return {(res.name, k): v for res in res_list for k, v in res.arrays.items()}


def union(res_list) -> tuple[dict, dict]:
    """(data, arrays) with the runs and arrays of several training results (run ids carry the LR, so the regime
    sweeps' ids do not collide)."""
    runs, arrays = [], {}
    for r in res_list:
        runs += r.data["runs"]
        arrays.update(r.arrays)
    return dict(runs=runs), arrays


def smoothed_loss(loss: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, moving-average loss) of a per-step loss curve, with the window shortened to a tenth of a short run
    (`lib.training.outcome.smooth`, the smoothing of the verdicts)."""
    return np.arange(len(loss)), outcome.smooth(loss, max(1, min(window, len(loss) // 10 or 1)))
