"""How many proxy runs one GPU carries: aggregate training steps per second of N concurrent proxy runs.

The proxy (6 layers × 384, batch 32 × 512) is launch-bound: one run keeps the H100 mostly idle, so a study runs its
arms as concurrent processes. This measures the aggregate rate for a few N, with the census on (every 100 steps) as
the studies run it, so the next GPU session can size its grids. With CUDA MPS running (`nvidia-cuda-mps-control -d`)
kernels of different processes may overlap; without it the GPU time-slices between processes.

    python -m benchmarks.bench_shared_gpu --n 1 4 8 12 --steps 300 [--attn sdpa]
"""
from __future__ import annotations

import argparse
import json
import time

from lib.training.model import GPTConfig
from lib.training.loop import RunConfig, run_many


def measure(n: int, steps: int, attn: str) -> dict:
    cfgs = [RunConfig(model=GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=512, attn=attn), steps=steps,
                      batch_size=32, lr=5e-4, warmup=50, census_every=100, eval_batches=1, seed=i, data_seed=i,
                      label=f"r{i}") for i in range(n)]
    t0 = time.perf_counter()
    res = run_many(cfgs, workers=n)
    wall = time.perf_counter() - t0
    rates = [r["steps_per_s"] for r in res if "error" not in r]
    return dict(n=n, steps=steps, attn=attn, wall_s=wall, per_run_steps_per_s=rates,
                aggregate_steps_per_s=float(sum(rates)), errors=[r["error"] for r in res if "error" in r])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--attn", default="sdpa")
    a = ap.parse_args(argv)
    for n in a.n:
        print(json.dumps(measure(n, a.steps, a.attn)), flush=True)


if __name__ == "__main__":
    main()
