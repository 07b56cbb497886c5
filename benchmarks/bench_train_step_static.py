"""Benchmark (a script, not a test): `bench_train_step_gpt2`'s training steps with Dynamo's automatic dynamic shapes
off — for a group whose arms differ in a float setting of the attention (the β fix at two β).

Why. One process compiles every arm of a group. When a recompile is triggered by a changed float attribute of the
model (the second fix arm's β, or a tie tolerance), Dynamo's automatic dynamic marks that attribute symbolic, and our
custom op's settings, which must be Python constants, then fail to trace (torch 2.11 on the H100: "SymNodeVariable()
is not a constant", at `kernels/attention_op.py`'s settings call). A training run compiles one model per process and
never recompiles that way, so with automatic dynamic off each arm is timed with the static graph its training
compiles. The groups run as `bench_train_step_gpt2.run` runs them: at full scale one subprocess a group, which
inherits TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES=0 (read by torch at import, 2.11 and later); at ci scale in this
process, with the flag patched for the call. The record says so ("automatic_dynamic_shapes": false).
"""
from __future__ import annotations

import os
from unittest import mock

import torch._dynamo.config

from benchmarks import bench_train_step_gpt2 as steps

ENV = "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES"


def run(scale: str, cfg: dict) -> dict:
    """`bench_train_step_gpt2.run(scale, cfg)` with automatic dynamic shapes off, in this process and in the group
    subprocesses; its record with "automatic_dynamic_shapes": False added to the data."""
    with mock.patch.dict(os.environ, {ENV: "0"}), \
            mock.patch.object(torch._dynamo.config, "automatic_dynamic_shapes", False):
        out = steps.run(scale, cfg)
    out["data"]["automatic_dynamic_shapes"] = False
    return out
