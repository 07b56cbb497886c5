"""Several training runs stepped in lockstep in one process, on one batch order, with a hook between steps.

Why: comparing the weights of two runs step by step (the weight-drift study of Golden et al.) needs both runs'
weights at the same step in one place. Weights are too large to ship off the GPU at every step, so the runs train
side by side — every run takes optimiser step s before any run takes step s + 1 — and a callback sees all models
at the recording steps, where it can compute whatever it needs on the device.

`train_lockstep(arms, on_record, record_every)`: `arms` maps a name to a `lib.training.train.TrainConfig`; all arms
must agree on everything that defines the data (steps, batch size, sequence length, data seed, validation split)
and on the device. Each arm keeps its own model seed, attention spec, autocast and optimiser settings. The loop is
`lib.training.train.train`'s, without DDP, telemetry, evaluation or checkpoints: linear warm-up then `lr_at`,
forward under the arm's autocast, backward, global grad-norm clipping, fused AdamW (`make_optimizer`). An arm whose
loss turns non-finite is stopped at the next recording step (its later records see its last weights) and
reported in "stopped_at".
"""
from __future__ import annotations

import hashlib
import math
import time
import warnings

import numpy as np
import torch

from lib.training import data as data_mod
from lib.training.model import GPT
from lib.training.runtime import autocast_dtype, device_of, lr_at, set_determinism, train_step, versions
from lib.training.train import TrainConfig, make_optimizer

__all__ = ["train_lockstep", "SHARED_FIELDS"]

SHARED_FIELDS = ("steps", "batch_size", "seq_len", "data_seed", "val_fraction", "device", "deterministic")


def _check(arms: dict) -> TrainConfig:
    if not isinstance(arms, dict) or not arms:
        raise ValueError("arms must be a non-empty dict of name -> TrainConfig")
    cfgs = list(arms.values())
    if not all(isinstance(c, TrainConfig) for c in cfgs):
        raise TypeError("every arm must be a lib.training.train.TrainConfig")
    for f in SHARED_FIELDS:
        vals = {c.record()[f] for c in cfgs}
        if len(vals) > 1:
            raise ValueError(f"arms must share {f!r} (one batch order, one device), got {sorted(map(str, vals))}")
    return cfgs[0]


def train_lockstep(arms: dict, *, on_record=None, record_every: int = 50, max_wall_s: float = 0.0,
                   progress: bool = True) -> dict:
    """Train `arms` (name -> TrainConfig) in lockstep; call `on_record(step, models)` after step 0's forward-free
    start (step 0 = the initial weights), after every `record_every` optimiser steps and after the last one, with
    `models` = {name: GPT}. `max_wall_s` > 0 stops the loop (at a recording step) once that many seconds have
    passed. Returns {"loss", "grad_norm": {name: per-step floats}, "steps_done", "recorded_steps",
    "truncated_at", "stopped_at": {name: step or None}, "wall_s", "steps_per_s" (lockstep steps per second),
    "starts_sha256", "n_params", "versions", "nondeterminism_warnings", "device"}."""
    if isinstance(record_every, bool) or not isinstance(record_every, int) or record_every < 1:
        raise ValueError(f"record_every must be a positive int, got {record_every!r}")
    c0 = _check(arms)
    device = device_of(c0, 0)
    set_determinism(c0)
    train_bytes, _ = data_mod.split(data_mod.load_corpus(), c0.val_fraction)
    starts = data_mod.batch_starts(len(train_bytes), c0.model.block_size, c0.batch_size, c0.steps, c0.data_seed)
    runs = {}
    for name, cfg in arms.items():
        torch.manual_seed(cfg.seed)
        model = GPT(cfg.model).to(device)
        model.train()
        runs[name] = dict(cfg=cfg, model=model, opt=make_optimizer(model, cfg), amp=autocast_dtype(cfg, device),
                          loss=[], gn=[], pending=[], stopped=None)
    models = {n: r["model"] for n, r in runs.items()}
    out = dict(recorded_steps=[], truncated_at=None)

    def flush():
        for r in runs.values():
            if r["pending"]:
                vals = torch.stack([torch.stack(p) for p in r["pending"]]).float().cpu().tolist()
                r["loss"].extend(v[0] for v in vals)
                r["gn"].extend(v[1] for v in vals)
                r["pending"].clear()

    def record(step):
        flush()
        for r in runs.values():
            if r["stopped"] is None and r["loss"] and not math.isfinite(r["loss"][-1]):
                r["stopped"] = step
        if on_record is not None:
            with torch.no_grad():
                on_record(step, models)
        out["recorded_steps"].append(step)

    from tqdm.auto import tqdm
    bar = tqdm(total=c0.steps, disable=not progress, mininterval=2.0, desc="lockstep", dynamic_ncols=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record(0)
        for step in range(c0.steps):
            x, y = data_mod.get_batch(train_bytes, starts[step], c0.model.block_size, device)
            for r in runs.values():
                if r["stopped"] is not None:
                    continue
                cfg, model = r["cfg"], r["model"]
                loss, gn = train_step(model, model, [r["opt"]], x, y, lr_at(cfg, step), device, r["amp"],
                                      cfg.grad_clip)
                r["pending"].append((loss.detach(), gn.detach()))
            done = step + 1
            bar.update(1)
            if done % record_every == 0 or done == c0.steps:
                record(done)
                if max_wall_s and done < c0.steps and time.perf_counter() - t0 > max_wall_s:
                    out["truncated_at"] = done
                    break
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    bar.close()
    flush()
    done = out["recorded_steps"][-1]
    out.update(
        loss={n: r["loss"] for n, r in runs.items()}, grad_norm={n: r["gn"] for n, r in runs.items()},
        stopped_at={n: r["stopped"] for n, r in runs.items()}, steps_done=done, wall_s=wall,
        steps_per_s=done / wall if wall > 0 else float("nan"),
        starts_sha256=hashlib.sha256(np.ascontiguousarray(starts[:done]).tobytes()).hexdigest(),
        n_params=next(iter(models.values())).num_params(), versions=versions(), device=str(device),
        nondeterminism_warnings=sorted({str(w.message) for w in caught if "determinis" in str(w.message)}))
    return out
