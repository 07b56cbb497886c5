"""Benchmark (a script, not a test): `bench_train_step_gpt2`'s training steps where an arm may also change the model —
a ``model`` dict of GPTConfig fields merged into the group's (a capped QK-norm) — so that a remedy that changes the
model is timed as the attention remedies are: beside its unchanged arm and SDPA's compiled step, in one process on
one otherwise idle GPU, with the same warm-up, interleaved rounds and `triton.testing.do_bench` medians.

How. `bench_train_step_gpt2.time_group` builds each arm's step from its attention spec and the group's model; here
each arm's spec stands, for the duration of the timing, for a key that names the arm, and the step builder is
patched to build that arm's model. The groups run in this process one after another (one GPU); Dynamo's automatic
dynamic shapes are off, as in `bench_train_step_static`, so each arm is timed with the static graph its training
run compiles (one model per process, never recompiled). Each timed arm keeps its ``model`` change and records the
group's base model (``model_base``), so a reader can say what it changed.

    python -m lib.experiments train_step_qknorm --scale full [--out DIR]
"""
from __future__ import annotations

import time
from unittest import mock

import torch
import torch._dynamo.config

from benchmarks import bench_train_step_gpt2 as steps


def keyed_groups(groups: list[list[dict]]) -> tuple[list[list[dict]], dict]:
    """(groups with each arm's "attn" replaced by a key unique to the arm, {key: (attn, model change)})."""
    arms, out = {}, []
    for g in groups:
        keyed = []
        for arm in g:
            key = f"{arm['attn']}#arm{len(arms)}"
            arms[key] = (arm["attn"], dict(arm.get("model") or {}))
            keyed.append(dict(arm, attn=key))
        out.append(keyed)
    return out, arms


def run(scale: str, cfg: dict) -> dict:
    """cfg: as `bench_train_step_gpt2.run`'s, and an arm may carry ``model`` (GPTConfig fields that replace the
    group's `cfg["model"]` for that arm). Every group in this process on its device (at full scale, one GPU)."""
    t0 = time.perf_counter()
    groups, arms = keyed_groups(cfg["groups"])

    def step_fn(attn, compile_, model_kw, batch_size, device):
        spec, change = arms[attn]
        return steps.train_step(spec, compile_, dict(model_kw) | change, batch_size, device)[0]

    with mock.patch.object(steps, "_step_fn", step_fn), \
            mock.patch.object(torch._dynamo.config, "automatic_dynamic_shapes", False):
        timed = [steps.time_group(g, cfg) for g in groups]
    for g in timed:
        base = g[0]["ms_median"]
        for rec in g:
            rec["attn"] = arms[rec["attn"]][0]
            rec["model_base"] = dict(cfg["model"])
            rec["ratio_to_baseline"] = rec["ms_median"] / base
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"data": dict(groups=timed, device=device, batch_tokens=cfg["batch_size"] * cfg["model"]["block_size"],
                         torch=torch.__version__, automatic_dynamic_shapes=False,
                         wall_s=round(time.perf_counter() - t0, 1)), "seeds": [0]}
