"""The headline: the paper placement explodes and the β fix does not, at the same seeds and data order.

Arms: $HEADLINE_FIX_ARMS (default paper and paper+fix, the paper's per-tile tie test; paper+fix_split, the same fix
also on maxima repeated across key tiles, is in the LR sweep) at seeds $HEADLINE_SEEDS (default 0, 1, 2); contrast
arms $HEADLINE_CONTRAST_ARMS (default fa2, sdpa and fp32 = FP32 attention) at seeds $HEADLINE_CONTRAST_SEEDS (default
0); one repeat of paper at the first seed to show that the same seed gives a bit-identical loss curve on this
device (set $HEADLINE_STEPS so that every run ends on its step count, not on the wall budget $EXPLOSION_BUDGET_S). All runs use data seed 0 (one recorded batch order) and
the proxy config of `lib.proxy.proxy_config`.

LR: $HEADLINE_LR if set; else the LR chosen by the committed full LR sweep (`lr_sweep.choose_lr`) if that result
exists; else 5e-3 (the explosion recipe's lower window edge). The source is recorded in the result.

* ``full`` (one H100): $HEADLINE_STEPS steps (default 1500), runs as concurrent processes sharing the GPU.
* ``ci`` (CPU): a tiny model, 5 steps, LR 1e-2; kernel arms only when `kernels.attention` imports.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lib.training import outcome, proxy

NAME = "headline"
_SWEEP = "results/full/lr_sweep.json"
DEPENDS = ["lib/experiments/headline.py", "lib/experiments/lr_sweep.py", "lib/training/proxy.py", "lib/training/train.py",
           "lib/training/model.py", "lib/training/data.py", "data/corpus/pystdlib.txt.xz", "kernels/*.py", "lib/fp/numerics.py"] \
    + ([_SWEEP] if (Path(__file__).resolve().parents[2] / _SWEEP).exists() else [])
DEFAULT_LR = 5e-3


def pick_lr(scale: str) -> tuple[float, str]:
    if scale != "full":
        return 1e-2, "ci default"
    if os.environ.get("HEADLINE_LR"):
        return float(os.environ["HEADLINE_LR"]), "$HEADLINE_LR"
    try:
        from lib.book import results
        from lib.experiments.lr_sweep import choose_lr
        res = results.load("lr_sweep", "full")
        lr, why = choose_lr(res.data)
        if lr is not None:
            return lr, f"lr_sweep (full): {why}"
    except FileNotFoundError:
        pass
    return DEFAULT_LR, "default (no full lr_sweep result)"


FIX_ARMS = ("paper", "paper+fix")
CONTRASTS = ("fa2", "sdpa", "fp32")


def _env_arms(name: str, default: tuple) -> tuple:
    v = os.environ.get(name)
    if not v:
        return default
    arms = tuple(a.strip() for a in v.split(",") if a.strip())
    bad = [a for a in arms if a not in proxy.ARMS]
    if bad or not arms:
        raise ValueError(f"${name}: unknown arm(s) {bad or v!r}; known: {', '.join(proxy.ARMS)}")
    return arms


def plan(scale: str, lr: float | None = None, lr_source: str | None = None) -> dict:
    if scale == "full":
        seeds = proxy.env_ints("HEADLINE_SEEDS", (0, 1, 2))
        cseeds = proxy.env_ints("HEADLINE_CONTRAST_SEEDS", (0,))
        steps = int(os.environ.get("HEADLINE_STEPS", "1500"))
    else:
        seeds, cseeds, steps = (0, 1, 2), (0,), 5
    fix_arms = _env_arms("HEADLINE_FIX_ARMS", FIX_ARMS)
    contrasts = _env_arms("HEADLINE_CONTRAST_ARMS", CONTRASTS)
    if lr is None:
        lr, lr_source = pick_lr(scale)
    missing = proxy.kernel_available()
    if missing is not None and scale == "full":
        raise RuntimeError(f"the headline needs kernels.attention: {missing}")
    runs = []
    for a in fix_arms:
        if missing is None or a not in proxy.KERNEL_ARMS:
            runs += [dict(arm=a, seed=s, lr=lr) for s in seeds]
    for a in contrasts:
        if missing is None or a not in proxy.KERNEL_ARMS:
            runs += [dict(arm=a, seed=s, lr=lr) for s in cseeds]
    if runs:
        first = runs[0]
        runs.append(dict(arm=first["arm"], seed=first["seed"], lr=lr, tag="repeat"))
    return dict(lr=lr, lr_source=lr_source, seeds=list(seeds), contrast_seeds=list(cseeds), steps=steps,
                fix_arms=list(fix_arms), contrast_arms=list(contrasts), runs=runs, kernel_missing=missing)


def repeat_check(arrays: dict, summaries: list[dict]) -> dict | None:
    """Compare the repeat run with its original: bit-identical loss and grad-norm curves?"""
    rep = [s for s in summaries if s["tag"] == "repeat"]
    if not rep:
        return None
    r = rep[0]
    orig = next(s for s in summaries if s["arm"] == r["arm"] and s["seed"] == r["seed"] and not s["tag"])
    if "error" in r or "error" in orig:
        return dict(original=orig["id"], repeat=r["id"], error=r.get("error") or orig.get("error"))
    a, b = arrays[f"{orig['id']}__loss"], arrays[f"{r['id']}__loss"]
    ga, gb = arrays[f"{orig['id']}__grad_norm"], arrays[f"{r['id']}__grad_norm"]
    n = min(len(a), len(b))
    diff = np.abs(a[:n] - b[:n])
    first = np.nonzero(a[:n].view(np.int64) != b[:n].view(np.int64))[0]
    return dict(original=orig["id"], repeat=r["id"], same_length=len(a) == len(b),
                loss_bit_identical=bool(len(a) == len(b) and np.array_equal(a.view(np.int64), b.view(np.int64))),
                grad_norm_bit_identical=bool(len(ga) == len(gb) and np.array_equal(ga.view(np.int64),
                                                                                   gb.view(np.int64))),
                first_differing_step=int(first[0]) if len(first) else None, common_steps=int(n),
                prefix_bit_identical=bool(n > 0 and len(first) == 0),
                max_abs_loss_diff=float(np.nanmax(diff)) if n else float("nan"))


def run(scale: str, lr: float | None = None, lr_source: str | None = None) -> dict:
    p = plan(scale, lr, lr_source)
    workers = proxy.default_workers(scale, len(p["runs"]))
    summaries, arrays, meta = proxy.run_arms(scale, p["runs"], workers, steps=p["steps"])
    outcomes: dict[str, dict[str, int]] = {}
    for s in summaries:
        if not s["tag"]:
            outcomes.setdefault(s["arm"], {}).setdefault(s["outcome"], 0)
            outcomes[s["arm"]][s["outcome"]] += 1
    data = dict(runs=summaries, lr=p["lr"], lr_source=p["lr_source"], steps=p["steps"], seeds=p["seeds"],
                contrast_seeds=p["contrast_seeds"], fix_arms=p["fix_arms"], contrast_arms=p["contrast_arms"], outcomes=outcomes, repeat=repeat_check(arrays, summaries),
                kernel_missing=p["kernel_missing"], wall_s_all_runs=meta["wall_s"],
                thresholds=dict(smooth=outcome.SMOOTH, rise_exploded=outcome.RISE_EXPLODED,
                                rise_degraded=outcome.RISE_DEGRADED, gn_spike=outcome.GN_SPIKE,
                                onset_rise=outcome.ONSET_RISE))
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      lr_source=p["lr_source"], steps=p["steps"]),
                seeds=dict(torch=sorted(set(p["seeds"]) | set(p["contrast_seeds"])), data=[0]))
