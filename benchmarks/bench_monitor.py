"""Benchmark (a script, not a test): what `lib.monitor.AttentionMonitor` adds to a GPT-2-124M training step.

The step: `lib.training.model.GPT` with n_layer 12, n_head 12, n_embd 768, block_size 1024, vocab 50304, the SDPA
backend (flash on CUDA), BF16 autocast, batch 16 × 1024 tokens (fixed random tokens: timing only), AdamW, forward +
backward + optimizer step. Two arms, interleaved `--rounds` times in one process on one GPU after a warm-up:

* plain: the step alone;
* monitor: the same with `AttentionMonitor(model, every=--every, placement=--placement)` on every layer
  (`mon.step` before the forward, `mon.collect` after the backward), events at the steps with step % every == 0.

Each round runs `--steps` steps per arm (default 300: three events at every = 100). Printed: per arm the median over
rounds of the seconds per step; their ratio; the monitor's own event time (its records' "ms", summed over layers,
median over events); and that event time per `every` plain steps — the overhead at one event per `every` steps
(target ≤ 1 %). The ratio is the end-to-end number; the event time is the part that does not drown in the
rounds' spread.

    python -m benchmarks.bench_monitor [--steps 300] [--rounds 3] [--every 100] [--placement authors]
    python -m benchmarks.bench_monitor --smoke          # tiny shapes on any device (the CPU included)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import torch  # noqa: E402

from lib.monitor import AttentionMonitor  # noqa: E402
from lib.training.model import GPT, GPTConfig  # noqa: E402

FULL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, batch=16)
SMOKE = dict(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=256, batch=4)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run(model, opt, x, y, steps: int, step0: int, mon, device) -> float:
    """Seconds for `steps` training steps (numbered from step0, so that events fall on the same steps each round)."""
    amp = device.type == "cuda"
    _sync(device)
    t0 = time.perf_counter()
    for step in range(step0, step0 + steps):
        if mon is not None:
            mon.step(step)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            _, loss = model(x, y)
        loss.backward()
        if mon is not None:
            mon.collect(step)
        opt.step()
        opt.zero_grad(set_to_none=True)
    _sync(device)
    return time.perf_counter() - t0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="steps per arm per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--placement", default="authors", choices=("authors", "fa2"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device (checks the script)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.rounds, args.every, args.warmup = 10, 1, 5, 1
    shape = SMOKE if args.smoke else FULL
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    cfg = GPTConfig(**{k: shape[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")},
                    attn="sdpa")
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (shape["batch"], cfg.block_size), generator=g).to(device)
    y = torch.roll(x, -1, 1)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"GPT {cfg.n_layer}×{cfg.n_embd}, {cfg.n_head} heads, batch {shape['batch']} × {cfg.block_size}, SDPA, "
          f"{'BF16 autocast' if device.type == 'cuda' else 'FP32'}, on {name}; {args.steps} steps per arm, "
          f"{args.rounds} rounds, monitor every {args.every} ({args.placement})")
    with tempfile.TemporaryDirectory() as tmp:
        mon = AttentionMonitor(model, every=args.every, placement=args.placement, out=Path(tmp) / "monitor.jsonl")
        _run(model, opt, x, y, args.warmup, 1, None, device)                       # no event in the warm-up
        times = {"plain": [], "monitor": []}
        for r in range(args.rounds):
            for arm in ("plain", "monitor"):
                s = _run(model, opt, x, y, args.steps, 0, mon if arm == "monitor" else None, device)
                times[arm].append(s / args.steps)
                print(f"  round {r}: {arm:8s} {1e3 * s / args.steps:8.2f} ms/step")
    per_step = {arm: statistics.median(t) for arm, t in times.items()}
    event_ms = [sum(r["ms"] for r in mon.records[i:i + len(mon.layers)])
                for i in range(0, len(mon.records), len(mon.layers))]
    ev = statistics.median(event_ms)
    out = dict(plain_ms=1e3 * per_step["plain"], monitor_ms=1e3 * per_step["monitor"],
               ratio=per_step["monitor"] / per_step["plain"], event_ms=ev, n_events=len(event_ms),
               overhead_at_every=ev / (args.every * 1e3 * per_step["plain"]))
    print(f"median ms/step: plain {out['plain_ms']:.2f}, with the monitor {out['monitor_ms']:.2f} "
          f"(ratio {out['ratio']:.4f})")
    print(f"event (all {len(mon.layers)} layers): median {ev:.1f} ms over {len(event_ms)} events = "
          f"{100 * out['overhead_at_every']:.2f} % of {args.every} plain steps (target ≤ 1 %)")
    return out


if __name__ == "__main__":
    main()
