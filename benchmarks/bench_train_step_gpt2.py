"""Benchmark (a script, not a test): a GPT-2 124M training step per attention arm and compile mode, each against
SDPA's compiled step on the same GPU.

The step is `lib.training.loop.train_lm`'s without observers: forward under BF16 autocast, backward, grad-norm clip,
fused AdamW step, zero_grad, on one fixed batch of 32 × 1024 tokens. Arms come in groups; each group runs in one
process on one otherwise idle GPU (several groups run at once on a machine with several GPUs, one per GPU), and
every group starts with the baseline, SDPA flash under `torch.compile`, so each ratio compares two steps timed in one
process on one GPU. Times are `triton.testing.do_bench` medians (ms) over interleaved rounds (all arms of a group
once per round); tokens/s = batch tokens / median. Targets (the issue that asked for it): our kernel's compiled step
≤ 1.15 × SDPA's, the FP32 reference ≤ 1.5 ×.

    python -m lib.experiments train_step_gpt2 --scale full [--out DIR]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _step_fn(attn: str, compile_: bool, model_kw: dict, batch_size: int, device):
    """A closure running one training step of GPT-2 (`model_kw`) with attention `attn` on a fixed random batch."""
    return train_step(attn, compile_, model_kw, batch_size, device)[0]


def train_step(attn: str, compile_: bool, model_kw: dict, batch_size: int, device):
    """(step, model, x): `step(before=None, after=None)` runs one training step of GPT-2 (`model_kw`) with attention
    `attn` (compiled if `compile_`) on a fixed random batch x (batch_size windows), calling `before()` before the
    forward and `after()` after the backward; `model` is the eager module the step trains."""
    from lib.training.model import GPTConfig, build_lm
    from lib.training.loop import RunConfig, make_optimizers
    torch.manual_seed(0)
    cfg = GPTConfig(**(dict(model_kw) | {"attn": attn}))
    model = build_lm(cfg).to(device)
    opts = make_optimizers(model, RunConfig(model=cfg, lr=1e-4, warmup=0))
    fwd = torch.compile(model) if compile_ else model
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (batch_size, cfg.block_size), generator=g).to(device)
    y = torch.randint(0, cfg.vocab_size, (batch_size, cfg.block_size), generator=g).to(device)
    amp = dict(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step(before=None, after=None):
        if before is not None:
            before()
        with torch.autocast(**amp):
            loss = fwd(x, y)[1]
        loss.backward()
        if after is not None:
            after()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=True)
    return step, model, x


def with_wide_product(fn, wide: str | None):
    """`fn` run with our kernel's products of an FP32 operand in form `wide` (`kernels.attention.WIDE_PRODUCT`,
    read at each launch; None: as set), restored after each call, so arms of one group can differ in it."""
    if wide is None:
        return fn
    import importlib
    ka = importlib.import_module("kernels.attention")     # the module (the package re-exports its function)

    def run():
        old, ka.WIDE_PRODUCT = ka.WIDE_PRODUCT, wide
        try:
            fn()
        finally:
            ka.WIDE_PRODUCT = old
    return run


def time_group(group: list[dict], cfg: dict) -> list[dict]:
    """Time the arms of one group in this process on its device: [{label, attn, compile, ms (per round), ms_median,
    tokens_per_s, compile_s}]."""
    import triton
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    steps, out = [], []
    for arm in group:
        t0 = time.perf_counter()
        fn = with_wide_product(_step_fn(arm["attn"], arm.get("compile", False), cfg["model"], cfg["batch_size"],
                                        device), arm.get("wide_product"))
        for _ in range(cfg["warmup_steps"]):     # the first compiles (and autotunes)
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        steps.append(fn)
        out.append(dict(arm, ms=[], compile_s=round(time.perf_counter() - t0, 1)))
    for _ in range(cfg["rounds"]):
        for fn, rec in zip(steps, out):
            if device.type == "cuda":
                rec["ms"].append(float(triton.testing.do_bench(fn, warmup=0, rep=cfg["rep_ms"],
                                                               return_mode="median")))
            else:
                t0 = time.perf_counter()
                fn()
                rec["ms"].append(1e3 * (time.perf_counter() - t0))
    tokens = cfg["batch_size"] * cfg["model"]["block_size"]
    for rec in out:
        rec["ms_median"] = float(sorted(rec["ms"])[len(rec["ms"]) // 2])
        rec["tokens_per_s"] = tokens / rec["ms_median"] * 1e3
    return out


def run(scale: str, cfg: dict) -> dict:
    """cfg: model (GPTConfig fields), batch_size, groups ([[{label, attn, compile[, wide_product]}, ...], ...]; each
    group's first arm is its baseline; wide_product: `with_wide_product`), warmup_steps, rounds, rep_ms. Full scale: one subprocess per group, group i on GPU i mod the
    GPU count; ci: the groups in turn in this process."""
    t0 = time.perf_counter()
    groups = cfg["groups"]
    if scale != "full":
        timed = [time_group(g, cfg) for g in groups]
        device = "cpu"
    else:
        n = max(1, torch.cuda.device_count())
        procs, timed = [], []
        for i, g in enumerate(groups):
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i % n), PYTHONUNBUFFERED="1")
            procs.append(subprocess.Popen([sys.executable, "-m", "benchmarks.bench_train_step_gpt2",
                                           json.dumps(dict(cfg, groups=[g]))], cwd=ROOT, env=env,
                                          stdout=subprocess.PIPE, text=True))
            if (i + 1) % n == 0 or i == len(groups) - 1:      # at most one group per GPU at a time
                for p in procs:
                    lines = p.communicate()[0].strip().splitlines()
                    if p.returncode:
                        raise RuntimeError(f"a benchmark group failed (exit {p.returncode}): {lines[-5:]}")
                    timed.append(json.loads(lines[-1]))
                procs = []
        device = torch.cuda.get_device_name(0)
    for g in timed:
        base = g[0]["ms_median"]
        for rec in g:
            rec["ratio_to_baseline"] = rec["ms_median"] / base
    return {"data": dict(groups=timed, device=device, batch_tokens=cfg["batch_size"] * cfg["model"]["block_size"],
                         torch=torch.__version__, wall_s=round(time.perf_counter() - t0, 1)), "seeds": [0]}


if __name__ == "__main__":   # one group: python -m benchmarks.bench_train_step_gpt2 '<cfg JSON with one group>'
    import lib.book.setup  # noqa: F401
    c = json.loads(sys.argv[1])
    print(json.dumps(time_group(c["groups"][0], c)))
