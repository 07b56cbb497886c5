"""Experiments: one module per figure family, each with

    NAME: str                     result name (results/<scale>/<NAME>.json)
    DEPENDS: list[str]            repo-relative files/globs whose sha256 define the result's freshness
    run(scale: str) -> dict       {"data": JSON-able, "arrays": {name: ndarray} (optional),
                                   "config": dict, "seeds": list}

Command line (plain Python, also on the GPU image, which has no Jupyter):

    python -m lib.experiments NAME|all --scale ci|full [--out DIR]

writes `DIR/<scale>/<NAME>.json` (+ `.npz`) with provenance (default DIR: ./results).
"""
from __future__ import annotations

import importlib
import time

# name -> module (relative to this package). Order = order of `all`.
REGISTRY = {
    "rounding_exhaustive": "rounding_exhaustive",
    "paper_placement": "paper_placement",  # chapter 2
    "bias_montecarlo": "bias_montecarlo", "bias_kernel": "bias_kernel",  # chapter 1
    "lr_sweep": "lr_sweep", "headline": "headline",  # chapter 6 (run lr_sweep before headline)
    "headline_fix_sm32": "headline_fix_sm32",  # chapters 6, 7: the fix with S − m in FP32 (reads the headline)
    "headline_cliff": "headline_cliff",  # chapter 6: the headline's arms at the sweep's failing LR
    "ablations": "ablations",  # chapter 6 (reads the headline result: run it after headline)
    "beta_sweep": "beta_sweep",  # chapter 7 (reads the headline result: run it after headline)
    "beta_sweep_seeds": "beta_sweep_seeds",  # chapter 7: β = 7, 30 exact and 30 guarded at seeds 1, 2
    "precision_dial": "precision_dial",  # chapter 6: the paper placement at m < 7 mantissa bits, RNE vs SR vs fix
    "precision_dial_fine": "precision_dial_fine",  # chapter 6: the same at m = 4, 5, plus S − m in FP32 arms
    "precision_dial_sr": "precision_dial_sr",  # chapter 6: the dial's SR arms after the SR backward fix
    "precision_dial_seeds": "precision_dial_seeds",  # chapters 6, 7: m = 5, RNE / fix / fix with S − m FP32, seeds 1, 2
    "precision_dial_sr_seeds": "precision_dial_sr_seeds",  # chapter 6: SR at m = 5, 6, seeds 1, 2
    "precision_dial_m6": "precision_dial_m6",  # chapter 6: RNE at m = 6, seeds 1, 2 (SR's baseline)
}


def get(name: str):
    if name not in REGISTRY:
        raise KeyError(f"unknown experiment {name!r}; known: {', '.join(REGISTRY)}")
    return importlib.import_module(f"lib.experiments.{REGISTRY[name]}")


def run_and_save(name: str, scale: str, out=None):
    """Run experiment `name` at `scale` and save it with provenance; returns the saved path."""
    from lib.book import results
    mod = get(name)
    t0 = time.perf_counter()
    res = mod.run(scale)
    wall = time.perf_counter() - t0
    return results.save(mod.NAME, scale, res["data"], arrays=res.get("arrays"), depends_on=mod.DEPENDS,
                        seeds=res.get("seeds", ()), wall_s=round(wall, 3), config=res.get("config"), root=out)
