"""The census of the bias's preconditions in training regimes that share one GPU: the proxy and its knobs.

`run(scale, cfg)`: for every regime of `cfg["regimes"]` (a label, its seeds and the fields it changes) and every
seed, one `lib.training.loop.train_lm` run of the proxy (`cfg["base"]`: 6 layers × 384 on the pinned byte corpus,
batch 32 × 512, AdamW, BF16 autocast) with the census of both placements every `census_every` steps; the runs go
as `cfg["workers"]` concurrent processes on the one GPU. A regime's fields are `RunConfig` fields (lr, optimizer,
batch_size, steps, n_bos, ...) or `LMConfig` fields (n_layer, n_embd, pos, qk_norm, qk_gain, attn, ...).
Measurements only; the reading (`lib.studies.census.reading`) applies the registry's rule.
"""
from __future__ import annotations

from dataclasses import fields

from lib.training.lm import LMConfig
from lib.training.loop import RunConfig, pack_runs, run_many

_MODEL = {f.name for f in fields(LMConfig)}
_RUN = {f.name for f in fields(RunConfig)} - {"model"}


def regime_configs(cfg: dict) -> list[RunConfig]:
    """One RunConfig per (regime, seed), labelled "<regime>:s<seed>"."""
    base = dict(cfg["base"])
    out = []
    for reg in cfg["regimes"]:
        change = {k: v for k, v in reg.items() if k not in ("label", "seeds")}
        unknown = set(change) - _MODEL - _RUN
        if unknown:
            raise ValueError(f"regime {reg['label']!r}: unknown fields {sorted(unknown)}")
        merged = base | change
        model = LMConfig(**{k: v for k, v in merged.items() if k in _MODEL})
        for s in reg["seeds"]:
            run_kw = {k: v for k, v in merged.items() if k in _RUN}
            out.append(RunConfig(model=model, seed=s, data_seed=s, label=f"{reg['label']}:s{s}", **run_kw))
    return out


def run(scale: str, cfg: dict) -> dict:
    cfgs = regime_configs(cfg)
    res = run_many(cfgs, workers=cfg.get("workers", 1))
    runs, arrays = pack_runs(res, [c.label for c in cfgs])
    return dict(data=dict(runs=runs, regimes=[r["label"] for r in cfg["regimes"]]), arrays=arrays,
                seeds=sorted({c.seed for c in cfgs}))
