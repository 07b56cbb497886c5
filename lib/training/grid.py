"""A grid of training runs — regimes × seeds — sharing one GPU: the base module of the new training experiments.

`run(scale, cfg)` (the experiment interface of `lib.book.runner`): for every regime of `cfg["regimes"]` (a label,
its seeds and the fields it changes) and every seed, one `lib.training.loop.train_lm` run of `cfg["base"]`
(`RunConfig` and `GPTConfig` fields together, `lib.training.loop.configs_from_regimes`), as `cfg["workers"]`
concurrent processes. Each run carries the census of the bias's preconditions (`census_every`) and, where asked,
the chain probe (`probe_every`). The result holds measurements only — per-step loss and grad norm, validation loss,
tokens seen, the census and probe arrays (`lib.training.loop.pack_runs`); the studies' readings judge them.
A registry entry is a variant of this grid: the census regimes, the positive control, the bias injection and the
paper's LR are entries whose `base` is this module.
"""
from __future__ import annotations

from lib.training.model import STABLE_KERNEL
from lib.training.loop import configs_from_regimes, pack_runs, run_many


def code_entries(cfg: dict) -> list[str]:
    """Code the configuration selects by name (`lib.book.runner` fingerprints it with `run`): the user kernel
    when a layer's spec is "stable"."""
    specs = [str(r.get("attn", cfg["base"].get("attn", ""))) for r in cfg["regimes"]]
    return [STABLE_KERNEL] if any("stable" in s for s in specs) else []


def run(scale: str, cfg: dict) -> dict:
    cfgs = configs_from_regimes(cfg["base"], cfg["regimes"])
    res = run_many(cfgs, workers=cfg.get("workers", 1))
    runs, arrays = pack_runs(res, [c.label for c in cfgs])
    return dict(data=dict(runs=runs, regimes=[r["label"] for r in cfg["regimes"]]), arrays=arrays,
                seeds=sorted({c.seed for c in cfgs}))
