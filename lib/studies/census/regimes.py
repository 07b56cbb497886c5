"""The census of the bias's preconditions in training regimes that share one GPU: the proxy and its knobs.

`run(scale, cfg)`: for every regime of `cfg["regimes"]` (a label, its seeds and the fields it changes) and every
seed, one `lib.training.loop.train_lm` run of the proxy (`cfg["base"]`: 6 layers × 384 on the pinned byte corpus,
batch 32 × 512, AdamW, BF16 autocast) with the census of both placements every `census_every` steps; the runs go
as `cfg["workers"]` concurrent processes on the one GPU. A regime's fields are `RunConfig` fields (lr, optimizer,
batch_size, steps, n_bos, ...) or `LMConfig` fields (n_layer, n_embd, pos, qk_norm, qk_gain, attn, ...).
Measurements only; the reading (`lib.studies.census.reading`) applies the registry's rule.
"""
from __future__ import annotations

from lib.training.loop import configs_from_regimes, pack_runs, run_many


def run(scale: str, cfg: dict) -> dict:
    cfgs = configs_from_regimes(cfg["base"], cfg["regimes"])
    res = run_many(cfgs, workers=cfg.get("workers", 1))
    runs, arrays = pack_runs(res, [c.label for c in cfgs])
    return dict(data=dict(runs=runs, regimes=[r["label"] for r in cfg["regimes"]]), arrays=arrays,
                seeds=sorted({c.seed for c in cfgs}))
