"""LR sweep of the proxy GPT: where do the paper placement, the fix and the contrast arms train stably?

Arms (`lib.training.proxy.ARMS`): paper, paper+fix, paper+fix_split, fa2, sdpa, fp32 — one seed (0), the same recorded batch order
(data seed 0), each LR. Outcome per run by `lib.training.outcome.classify` (fixed thresholds on the smoothed loss rise and
the pre-clip grad norm). `headline` picks its LR from this result (`lib.training.regime.choose_lr`): the largest swept LR at which every
contrast arm is stable and the paper arm is not; failing that, the largest LR at which every contrast arm is stable.

The `regime_sweep` entry runs the same base with the reference arms only and another rule: the largest LR whose
FP32 and SDPA runs are healthy (`lib.training.regime.select_lr`), which the healthy headline then trains at.

cfg: lrs, steps, arms, seeds, rule ("window": `lib.training.regime.choose_lr`; "healthy": `lib.training.regime.select_lr`), train
(TrainConfig overrides of the proxy, e.g. {"warmup": 500}). At full scale all runs share one GPU as concurrent processes, each capped by
$EXPLOSION_BUDGET_S wall seconds; at ci scale the tiny CPU proxy, the kernel arms only when `kernels.attention`
imports.
"""
from __future__ import annotations

from lib.training import outcome, proxy, regime


def plan(scale: str, cfg: dict) -> dict:
    lrs, steps, arms = tuple(cfg["lrs"]), int(cfg["steps"]), list(cfg["arms"])
    missing = proxy.kernel_available()
    if missing is not None:
        if scale == "full":
            raise RuntimeError(f"the full LR sweep needs kernels.attention: {missing}")
        arms = [a for a in arms if a not in proxy.KERNEL_ARMS]
    return dict(lrs=list(lrs), steps=steps, arms=arms, seeds=list(cfg["seeds"]), kernel_missing=missing,
                rule=cfg.get("rule", "window"), train=dict(cfg.get("train", {})))


def run(scale: str, cfg: dict) -> dict:
    p = plan(scale, cfg)
    runs = [dict(arm=a, seed=s, lr=lr) for lr in p["lrs"] for a in p["arms"] for s in p["seeds"]]
    workers = proxy.default_workers(scale, len(runs))
    summaries, arrays, meta = proxy.run_arms(scale, runs, workers, steps=p["steps"], **p["train"])
    data = dict(runs=summaries, lrs=p["lrs"], arms=p["arms"], steps=p["steps"],
                kernel_missing=p["kernel_missing"],
                thresholds=dict(smooth=outcome.SMOOTH, rise_exploded=outcome.RISE_EXPLODED,
                                rise_degraded=outcome.RISE_DEGRADED, gn_spike=outcome.GN_SPIKE,
                                onset_rise=outcome.ONSET_RISE))
    if p["rule"] == "healthy":
        lr, why = regime.select_lr(data, arrays)
    elif p["rule"] == "window":
        lr, why = regime.choose_lr(data)
    else:
        raise ValueError(f"lr_sweep: rule must be 'window' or 'healthy', got {p['rule']!r}")
    data["chosen_lr"], data["chosen_lr_reason"] = lr, why
    data["wall_s_all_runs"] = meta["wall_s"]
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, plan=p),
                seeds=dict(torch=p["seeds"], data=[0]))
