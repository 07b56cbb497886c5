"""The δ channel dosed (chapter 5): FP32 attention whose backward gets δ = δ_FP32 + λ·c(Δδ).

Δδ is the placement's δ error on that very step (`lib.training.dose_backend`), c a component of it (the true error,
its per-head bias only, its noise only, random or flipped signs) and λ ≥ 0 a dose. Every run shares the proxy's
model, optimiser and batch order (data seed 0); the FP32-attention arm is the λ = 0 reference.

cfg: lr (a number or "from:regime_sweep", `lib.training.regime.pick_lr`), steps, train (TrainConfig overrides
of every run, e.g. {"warmup": 500}), placement (the spec whose Δδ is dosed), grid ({component: [λ, ...]}: stage 1,
run at `seeds`) or grid = "from:delta_dose" (stage 2: the runs `lib.studies.dose.reading.stage2_runs` derives from
the committed stage-1 result, each at its own seeds), seeds, contrast_arms / contrast_seeds (reference arms of
`lib.training.proxy.ARMS`). Result: headline-style data ("runs", "outcomes", "lr", "steps") plus "plan" (the
(component, λ, seeds) cells) and "thresholds_rule"; `lib.studies.dose.reading` reads the thresholds.
"""
from __future__ import annotations

from lib.training.regime import pick_lr
from lib.studies.dose import reading as dose_reading
from lib.training import outcome, proxy


def cells(scale: str, cfg: dict) -> list[tuple[str, float, tuple]]:
    """[(component, λ, seeds)] this entry runs."""
    grid = cfg["grid"]
    if grid == "from:delta_dose":
        from lib.book import results
        if results.exists("delta_dose", scale):
            stage1 = results.load("delta_dose", scale)
        elif scale == "ci":     # no saved ci results: stage 1 runs live (seconds), so the code path is the full one
            from lib.book.runner import live_result
            stage1 = live_result("delta_dose", "ci")
        else:
            raise ValueError(f"delta_dose stage 2 needs the {scale} delta_dose (stage 1) result")
        return dose_reading.stage2_runs(dose_reading.outcomes([stage1]))
    if not isinstance(grid, dict) or not grid:
        raise ValueError(f"grid must be {{component: [λ, ...]}} or 'from:delta_dose', got {grid!r}")
    seeds = tuple(int(s) for s in cfg["seeds"])
    out = []
    for comp, lams in grid.items():
        if comp not in dose_reading.COMPONENTS:
            raise ValueError(f"unknown dose component {comp!r}; known: {dose_reading.COMPONENTS}")
        out += [(comp, float(lam), seeds) for lam in lams]
    return out


def plan(scale: str, cfg: dict) -> dict:
    lr, lr_source = pick_lr(scale, cfg["lr"])
    missing = proxy.kernel_available()
    if missing is not None and scale == "full":
        raise RuntimeError(f"the dose backend needs kernels.attention: {missing}")
    todo = cells(scale, cfg)
    runs = [dict(arm=dose_reading.arm_name(c, lam), attn=dose_reading.dose_spec(cfg["placement"], c, lam), seed=s,
                 lr=lr) for c, lam, seeds in todo for s in seeds]
    runs += [dict(arm=a, seed=int(s), lr=lr) for a in cfg.get("contrast_arms", []) for s in cfg["contrast_seeds"]]
    return dict(lr=lr, lr_source=lr_source, steps=int(cfg["steps"]), runs=runs,
                cells=[[c, lam, list(seeds)] for c, lam, seeds in todo], train=dict(cfg.get("train", {})))


def run(scale: str, cfg: dict) -> dict:
    p = plan(scale, cfg)
    workers = proxy.default_workers(scale, len(p["runs"]))
    summaries, arrays, meta = proxy.run_arms(scale, p["runs"], workers, steps=p["steps"], **p["train"])
    outcomes: dict[str, dict[str, int]] = {}
    for s in summaries:
        outcomes.setdefault(s["arm"], {}).setdefault(s["outcome"], 0)
        outcomes[s["arm"]][s["outcome"]] += 1
    seeds = sorted({r["seed"] for r in p["runs"]})
    data = dict(runs=summaries, lr=p["lr"], lr_source=p["lr_source"], steps=p["steps"], placement=cfg["placement"],
                plan=p["cells"], outcomes=outcomes, seeds=seeds, wall_s_all_runs=meta["wall_s"],
                thresholds_rule=dict(failed=sorted(outcome.FAILED), majority="strict majority of seeds",
                                     seeds_more=list(dose_reading.SEEDS_MORE), extend=dose_reading.EXTEND))
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      lr_source=p["lr_source"], steps=p["steps"]),
                seeds=dict(torch=seeds, data=[0]))
