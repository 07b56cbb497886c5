"""Golden et al.'s weight-drift study on the proxy GPT: how far apart do the weights of paired training runs move?

Runs (`arms`: name -> {"attn": attention spec, optional "seed", "autocast"}) train in lockstep in one process on
one batch order (`lib.training.lockstep`), with the proxy's model and optimiser (`lib.training.model`,
`lib.training.train.make_optimizer`: AdamW (0.9, 0.95), weight decay 0, grad clip `grad_clip`, linear warm-up
`warmup` then a constant `lr`: a number or "from:regime_sweep", `lib.training.regime.pick_lr`). Every `record_every` steps `lib.studies.golden.drift.DriftRecorder` computes on the device,
for every pair of runs (`pairs`: name -> [arm a, arm b]) and every weight matrix (W_Q, W_K, W_V, attention output,
MLP in and out of each layer; token and position embeddings): max |W_a − W_b| and the 1-D Wasserstein-1 distance
between the two matrices' entries, and per run mean |W|. Default pairs: flash vs FP32 "naive" attention (SDPA's
flash backend; our kernel's fa2 and paper placements), seed 0 vs seed 1 (same attention), BF16 autocast vs FP32,
and the paper vs the fa2 placement.

Result data: "arms", "pairs", "pair_arms", "matrices", "steps_done", "truncated_at" (if the `max_wall_s` budget
stopped the loop), "stopped_at" (per arm: a non-finite loss), "final_loss" (mean of each run's last 50 losses),
"claims" (`weight_drift_bounded`), "placement" (`lib.studies.golden.drift.placement_check`), versions, wall time. Arrays:
"steps" (R,), "max_abs" and "w1" (pairs, R, matrices), "scale" (arms, R, matrices: mean |W|), "loss" and
"grad_norm" (arms, steps).
"""
from __future__ import annotations

import numpy as np

from lib.training.regime import pick_lr
from lib.studies.golden.drift import DriftRecorder, claim_weight_drift_bounded, placement_check
from lib.training.lockstep import train_lockstep
from lib.training.train import TrainConfig

_TRAIN_KEYS = ("n_layer", "n_head", "n_embd", "seq_len", "batch_size", "steps", "lr", "warmup", "schedule",
               "grad_clip", "data_seed", "device", "deterministic", "autocast", "seed")
_ARM_KEYS = ("attn", "seed", "autocast")


def arm_configs(cfg: dict) -> dict:
    """name -> TrainConfig of every arm: the shared keys of `cfg`, then the arm's own attn / seed / autocast."""
    base = {k: cfg[k] for k in _TRAIN_KEYS}
    out = {}
    for name, arm in cfg["arms"].items():
        bad = set(arm) - set(_ARM_KEYS)
        if bad or "attn" not in arm:
            raise ValueError(f"arm {name!r} must give 'attn' and optionally 'seed', 'autocast'; got {sorted(arm)}")
        out[name] = TrainConfig.flat(**(base | dict(arm)), telemetry_every=0, eval_batches=0, progress=False,
                                     label=name)
    for pair, ab in cfg["pairs"].items():
        missing = [a for a in ab if a not in out]
        if missing:
            raise ValueError(f"pair {pair!r} names unknown arms {missing}; arms: {sorted(out)}")
    return out


def run(scale: str, cfg: dict) -> dict:
    lr, lr_source = pick_lr(scale, cfg["lr"])     # "from:regime_sweep": the healthy LR the pilots chose
    cfg = dict(cfg, lr=lr)
    arms = arm_configs(cfg)
    rec = DriftRecorder({k: tuple(v) for k, v in cfg["pairs"].items()})
    res = train_lockstep(arms, on_record=rec, record_every=int(cfg["record_every"]),
                         max_wall_s=float(cfg["max_wall_s"]), progress=False)
    arrays = rec.arrays()
    names = list(arms)
    n = res["steps_done"]
    arrays["loss"] = np.array([np.pad(np.asarray(res["loss"][a], float), (0, n - len(res["loss"][a])),
                                      constant_values=np.nan) for a in names])
    arrays["grad_norm"] = np.array([np.pad(np.asarray(res["grad_norm"][a], float),
                                           (0, n - len(res["grad_norm"][a])), constant_values=np.nan)
                                    for a in names])
    data = {
        "arms": rec.arm_names, "loss_arms": names, "pairs": rec.pair_names, "pair_arms": rec.pairs,
        "matrices": rec.matrix_names, "arm_specs": {a: cfg["arms"][a] for a in names},
        "steps_done": n, "truncated_at": res["truncated_at"], "stopped_at": res["stopped_at"],
        "final_loss": {a: float(np.nanmean(arrays["loss"][i, -50:])) for i, a in enumerate(names)},
        "lr": lr, "lr_source": lr_source, "wall_s": res["wall_s"], "steps_per_s": res["steps_per_s"],
        "n_params": res["n_params"],
        "starts_sha256": res["starts_sha256"], "versions": res["versions"], "device": res["versions"]["device"],
        "nondeterminism_warnings": res["nondeterminism_warnings"],
        "claim_setup": {
            "flash_pair": cfg["flash_pair"], "lowprec_pair": cfg["lowprec_pair"], "seed_pair": cfg["seed_pair"],
            "placement_pairs": list(cfg["placement_pairs"]), "focus_matrix": cfg["focus_matrix"],
            "steps": cfg["steps"], "seeds": sorted({c.seed for c in arms.values()}),
            "regime": (f"{cfg['n_layer']} layers × {cfg['n_embd']}, batch {cfg['batch_size']} × {cfg['seq_len']}, "
                       f"LR {cfg['lr']:g}, warm-up {cfg['warmup']}"),
        },
    }
    data["claims"] = {"weight_drift_bounded": claim_weight_drift_bounded(data, arrays)}
    data["placement"] = placement_check(data, arrays)
    seeds = {"model": {a: c.seed for a, c in arms.items()}, "data": cfg["data_seed"]}
    return {"data": data, "arrays": arrays, "seeds": seeds}
