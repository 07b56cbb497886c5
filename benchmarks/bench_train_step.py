"""Benchmark (a script, not a test): time of one training step of the proxy GPT per attention arm, GPU only.

The step is what `lib.training.train.train` does per step without telemetry: forward under BF16 autocast, backward, global
grad-norm clip, fused AdamW step, zero_grad. Proxy model of `lib.training.proxy.proxy_config("full")` (6 layers, width
384, 6 heads, batch 32 × 512 bytes). Times are `triton.testing.do_bench` medians (ms) of the same fixed batch, all
arms in one process on one GPU, so the ratios compare like with like. Reported: ms per arm, each arm / sdpa, and the
cost of the fix (paper+fix / paper), and of logical rounding blocks (`Numerics.round_block`: "paper_rb512" is the
paper placement rounding per 512-key block as the authors' code does, "paper_rb-1" per whole row, "paper+fix_rb512"
the same with the fix; each / paper). Target: the paper placement, with 64-key or 512-key rounding blocks, at most
1.3 × the SDPA step.

    python -m lib.experiments train_step_bench --scale full [--out DIR]    (or: python benchmarks/bench_train_step.py)

writes DIR/full/train_step_bench.json (default DIR: ./results) with provenance; the arms, rounds and repetition time
are the registry entry's (lib/experiments/registry.toml).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402

from lib.training import data as data_mod  # noqa: E402
from lib.training.proxy import ARMS, proxy_config  # noqa: E402
from lib.training.model import GPT  # noqa: E402
from lib.training.train import make_optimizer  # noqa: E402

# arm -> attention spec string (`lib.training.model`): the proxy's arms plus the rounding-block variants
SPECS = dict(ARMS, **{"paper_rb512": "paper/round_block=512", "paper_rb-1": "paper/round_block=-1",
                      "paper+fix_rb512": "paper/round_block=512+fix"})
ORDER = ("sdpa", "fa2", "paper", "paper+fix", "paper+fix_split", "fp32", "paper_rb512", "paper_rb-1",
         "paper+fix_rb512")


def step_fn(arm: str, batch_size: int, seq_len: int):
    """A closure running one training step of the proxy model with attention `arm` on a fixed batch."""
    cfg = proxy_config("full", attn=SPECS[arm], lr=1e-4, warmup=0, batch_size=batch_size, seq_len=seq_len)
    torch.manual_seed(0)
    model = GPT(cfg.model).cuda()
    opt = make_optimizer(model, cfg)
    corpus = data_mod.load_corpus()
    starts = data_mod.batch_starts(len(corpus), cfg.model.block_size, cfg.batch_size, 1, seed=0)[0]
    x, y = data_mod.get_batch(corpus, starts, cfg.model.block_size, "cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, cfg


def _gpu_ms(step, n: int) -> float:
    """CUDA time (ms) per call of `step`: the self device time of every kernel and copy that torch.profiler records
    over n calls, divided by n. Self times, so a kernel is not counted again under the op that launched it."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    us = sum((getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0)
             for e in prof.key_averages())
    return float(us) / n / 1e3


def run(scale: str, cfg: dict) -> dict:
    """cfg: arms (names of `SPECS`; must include sdpa), rounds (interleaved timing rounds), rep_ms (do_bench's
    repetition time per arm and round), gpu_steps (profiled steps per arm for the GPU-time diagnostic). GPU only."""
    order = tuple(cfg["arms"])
    bad = [x for x in order if x not in SPECS]
    if bad or "sdpa" not in order:
        raise ValueError(f"train_step_bench: arms must include sdpa and name arms from {sorted(SPECS)}; got {order}")
    if not torch.cuda.is_available():
        raise RuntimeError("train_step_bench needs a CUDA GPU")
    import triton
    rep, rounds = int(cfg["rep_ms"]), int(cfg["rounds"])
    steps = {}
    for arm in order:
        step, _ = step_fn(arm, 32, 512)
        for _ in range(3):          # compile the Triton kernels and warm the allocator
            step()
        steps[arm] = step
    torch.cuda.synchronize()
    # The step is partly CPU-bound (launch overhead), so the timings drift with the host's load: time the arms in
    # interleaved rounds and report each arm's median over rounds and the spread of the ratio to SDPA.
    per_round = {arm: [] for arm in order}
    for r in range(rounds):
        for arm in order:
            per_round[arm].append(triton.testing.do_bench(steps[arm], warmup=100, rep=rep, return_mode="median"))
            print(f"round {r}  {arm:10s} {per_round[arm][-1]:8.3f} ms/step", flush=True)
    ms = {arm: float(np.median(v)) for arm, v in per_round.items()}
    # The wall time of a launch-bound step drifts with the host (SDPA's rounds spread 15.6-20.8 ms in one earlier
    # run); the GPU time of its kernels does not. So also: CUDA kernel time per step (torch.profiler, self device
    # time summed over all kernels and copies, `gpu_steps` steps), a diagnostic beside the wall-time verdict.
    gpu_ms = {arm: _gpu_ms(steps[arm], int(cfg.get("gpu_steps", 5))) for arm in order}
    ratio_rounds = {arm: [a / b for a, b in zip(per_round[arm], per_round["sdpa"])] for arm in order}
    ratios = {arm: ms[arm] / ms["sdpa"] for arm in order}
    over_paper = lambda arm: ms[arm] / ms["paper"] if arm in ms and "paper" in ms else None  # noqa: E731
    data = dict(ms_per_step=ms, ratio_to_sdpa=ratios, fix_cost=over_paper("paper+fix"),
                fix_split_cost=over_paper("paper+fix_split"),
                round_block_cost={arm: over_paper(arm) for arm in order if "_rb" in arm},
                ms_per_step_rounds=per_round, ratio_to_sdpa_rounds=ratio_rounds, rounds=rounds,
                gpu_ms_per_step=gpu_ms, gpu_ratio_to_sdpa={arm: gpu_ms[arm] / gpu_ms["sdpa"] for arm in order},
                within_1p3_of_sdpa={arm: bool(ratios[arm] <= 1.3) for arm in order if arm.startswith("paper")},
                arms={arm: SPECS[arm] for arm in order},
                tokens_per_step=32 * 512, method="triton.testing.do_bench median per round, median over "
                                                  "interleaved rounds, one process, one GPU")
    if "paper" in ratios:
        data["paper_within_1p3_of_sdpa"] = bool(ratios["paper"] <= 1.3)
    print("GPU time / SDPA's:", {k: round(v, 3) for k, v in data["gpu_ratio_to_sdpa"].items()})
    print({k: round(v, 3) for k, v in ratios.items()}, "fix cost", data["fix_cost"],
          "round_block cost", data["round_block_cost"])
    # the proxy's run configuration as every record keeps it: flat keys (its model's fields among them), JSON-ready
    return {"data": data, "seeds": [0], "config": proxy_config("full").record()}


def main(argv=None) -> int:
    """The registry entry through `python -m lib.experiments` (``--quick``: one round of 200 ms per arm)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="results root (default ./results)")
    ap.add_argument("--quick", action="store_true", help="one round of rep=200 ms instead of rounds of 1000 ms")
    a = ap.parse_args(argv)
    from lib.book.cli import main as cli
    return cli(["train_step_bench", "--scale", "full"] + (["--out", a.out] if a.out else [])
               + (["--set", "rounds=1", "--set", "rep_ms=200"] if a.quick else []))


if __name__ == "__main__":
    raise SystemExit(main())
