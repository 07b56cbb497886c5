"""The headline: the paper placement and the β fix at the same seeds and data order, with contrast arms.

Runs every arm of `fix_arms` at `seeds` and every arm of `contrast_arms` (production-FA2 numerics of our kernel,
PyTorch SDPA flash, FP32 attention, …) at `contrast_seeds`, all on one recorded batch order (data seed 0), plus one
repeat of the first run, to show that the same seed gives a bit-identical loss curve on this device. Arms are the
names of `lib.training.proxy.ARMS`.

cfg: lr (a number, "from:lr_sweep" — the LR that the committed full `lr_sweep` chose — or "from:regime_sweep", the
healthy LR of the pilots: `lib.training.regime.pick_lr`), steps, seeds, contrast_seeds, fix_arms, contrast_arms,
specs ({arm name: attention spec string} for arms not in `proxy.ARMS`), arm_train ({arm name: TrainConfig
overrides of that arm only}, e.g. QK-norm), repeat (true/false), train (TrainConfig overrides of every run, e.g.
{"n_embd": 768}). At full scale the runs share one GPU as concurrent processes, each capped by
$EXPLOSION_BUDGET_S wall seconds (a machine limit, recorded as "truncated_at"); set `steps` so that every run ends
on its step count. At ci scale: the tiny CPU proxy, kernel arms only when `kernels.attention` imports.
"""
from __future__ import annotations

import numpy as np

from lib.training import outcome, proxy
from lib.training.regime import pick_lr


def _arms(cfg: dict, key: str) -> tuple:
    arms = tuple(cfg[key])
    known = dict(proxy.ARMS) | dict(cfg.get("specs", {}))
    bad = [a for a in arms if a not in known]
    if bad:
        raise ValueError(f"headline: unknown arm(s) {bad} in {key}; known: {', '.join(known)} (or add it to specs)")
    return arms


def plan(scale: str, cfg: dict) -> dict:
    lr, lr_source = pick_lr(scale, cfg["lr"])
    seeds, cseeds, steps = tuple(cfg["seeds"]), tuple(cfg["contrast_seeds"]), int(cfg["steps"])
    fix_arms, contrasts = _arms(cfg, "fix_arms"), _arms(cfg, "contrast_arms")
    missing = proxy.kernel_available()
    if missing is not None and scale == "full":
        raise RuntimeError(f"the headline needs kernels.attention: {missing}")
    specs = dict(cfg.get("specs", {}))       # arms defined by the entry: {name: attention spec string}

    arm_train = dict(cfg.get("arm_train", {}))   # per-arm TrainConfig overrides, e.g. {"sdpa_qknorm": {"qk_norm": true}}

    def run(a, s, **kw):
        return dict(arm=a, seed=s, lr=lr, **({"attn": specs[a]} if a in specs else {}),
                    **({"config": dict(arm_train[a])} if a in arm_train else {}), **kw)

    def needs_kernel(a):
        return a in proxy.KERNEL_ARMS or (a in specs and specs[a] not in ("sdpa", "naive"))

    runs = []
    for a in fix_arms:
        if missing is None or not needs_kernel(a):
            runs += [run(a, s) for s in seeds]
    for a in contrasts:
        if missing is None or not needs_kernel(a):
            runs += [run(a, s) for s in cseeds]
    if runs and cfg.get("repeat", True):
        first = runs[0]
        runs.append(run(first["arm"], first["seed"], tag="repeat"))
    return dict(lr=lr, lr_source=lr_source, seeds=list(seeds), contrast_seeds=list(cseeds), steps=steps,
                fix_arms=list(fix_arms), contrast_arms=list(contrasts), runs=runs, kernel_missing=missing,
                train=dict(cfg.get("train", {})))


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


def run(scale: str, cfg: dict) -> dict:
    p = plan(scale, cfg)
    workers = proxy.default_workers(scale, len(p["runs"]))
    summaries, arrays, meta = proxy.run_arms(scale, p["runs"], workers, steps=p["steps"], **p["train"])
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
