"""Benchmark (a script, not a test): ms per training step of the proxy GPT for the training study's backends, GPU only.

The step is `lib.training.train.train`'s step without telemetry (forward under BF16 autocast, backward, grad-norm
clip, fused AdamW, zero_grad) on one fixed batch of the full-scale proxy (6 layers, width 384, 6 heads, batch
32 × 512 bytes), every layer with the arm's backend. Per arm: the median over `--rounds` interleaved rounds of
`triton.testing.do_bench` medians, the ratio to SDPA, and the peak memory of a step. Also one telemetry step
(capture on + `collect_telemetry`) per arm, timed once, since the authors' ℓ probe and the dose counters run only
there.

    python benchmarks/bench_backends.py [--quick] [--arms sdpa,authors+fix,...]

Prints a table; writes nothing.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402

from lib.training import data as data_mod  # noqa: E402
from lib.training.model import GPT  # noqa: E402
from lib.training.proxy import proxy_config  # noqa: E402
from lib.training.train import collect_telemetry, make_optimizer  # noqa: E402

ARMS = ("sdpa", "naive", "paper", "sdpa|qk_norm", "paper+zero_rows", "authors", "authors+fix",
        "authors/tile=-1+fix", "authors+zero_rows", "dose/paper/c=true/lam=1", "dose/paper/c=random/lam=30",
        "dose/fa2/c=bias/lam=30")


def step_fn(arm: str):
    """(step(), telemetry_step()) closures for `arm` ("<spec>" or "<spec>|qk_norm") on a fixed batch."""
    attn, _, opt_flag = arm.partition("|")
    cfg = proxy_config("full", attn=attn, lr=1e-4, warmup=0, qk_norm=opt_flag == "qk_norm")
    torch.manual_seed(0)
    model = GPT(cfg.model).cuda()
    opt = make_optimizer(model, cfg)
    corpus = data_mod.load_corpus()
    starts = data_mod.batch_starts(len(corpus), cfg.model.block_size, cfg.batch_size, 1, seed=0)[0]
    x, y = data_mod.get_batch(corpus, starts, cfg.model.block_size, "cuda")

    def step(tele=False):
        model.set_capture(tele)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(x, y)
        loss.backward()
        if tele:
            collect_telemetry(model)
            model.set_capture(False)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round of rep=200 ms")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arms", default=",".join(ARMS),
                    help="comma-separated arms (spec strings; '|qk_norm' adds QK-norm)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_backends needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton
    torch.backends.cuda.matmul.allow_tf32 = False     # as train.py
    arms = [s for s in a.arms.split(",") if s]
    rep, rounds = (200, 1) if a.quick else (500, a.rounds)
    steps, peak, tele_ms = {}, {}, {}
    for arm in arms:
        step = step_fn(arm)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak[arm] = torch.cuda.max_memory_allocated() / 2 ** 30
        t0 = time.perf_counter()
        step(tele=True)
        torch.cuda.synchronize()
        tele_ms[arm] = 1e3 * (time.perf_counter() - t0)
        steps[arm] = step
    per_round = {arm: [] for arm in arms}
    for r in range(rounds):
        for arm in arms:
            per_round[arm].append(triton.testing.do_bench(steps[arm], warmup=50, rep=rep, return_mode="median"))
    ms = {arm: float(np.median(v)) for arm, v in per_round.items()}
    base = ms.get("sdpa", float("nan"))
    print(f"{'arm':32s} {'ms/step':>8s} {'/sdpa':>6s} {'peak GiB':>8s} {'tele ms':>8s}")
    for arm in arms:
        print(f"{arm:32s} {ms[arm]:8.2f} {ms[arm] / base:6.2f} {peak[arm]:8.2f} {tele_ms[arm]:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
