"""Benchmark (a script, not a test): what the training loop's census costs beside a GPT-2 124M training step.

The step: `bench_train_step_gpt2`'s (forward under BF16 autocast, backward, grad-norm clip, fused AdamW, zero_grad on
one fixed batch of 32 × 1024 tokens) for each arm. The census event: what `lib.training.loop.train_lm` runs every
`census_every` steps — `run_observers` with the default `CensusObserver` (the census in each placement of
`placements` on every layer, and σ₁ of each head's W_Q): an eager forward of the model with capture on over the
first `rows` windows of the batch, then the census of each layer's q, k, v. The census's cost grows with the rows in
the sticky-bit window, so two inputs:

* "model": the q, k, v of the arm's model at its initialisation on the random batch (few tied rows);
* "peaked": every layer's q, k, v replaced, after the capture forward, by `bench_census.attention_shaped(peaked=True)`
  (keys 0 and 1 tied and far above the others: nearly every row tied and in the window — the census's worst case).

Timing, all in one process on one GPU: the step by `triton.testing.do_bench` medians over `rounds` interleaved rounds;
the event (hundreds of milliseconds to seconds, with host synchronisations inside) by the median of `event_reps`
wall-clock calls between CUDA synchronisations. The census's share of training at one event per `every` steps is
event / (every × step), per arm, rows and input; target ≤ `target` (5 %). On the CPU (ci) every time is a
wall-clock median.

    python -m lib.experiments census_cost --scale full [--out DIR]
"""
from __future__ import annotations

import statistics
import time

import torch

from benchmarks.bench_census import attention_shaped
from benchmarks.bench_train_step_gpt2 import train_step


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_ms(fn, device) -> float:
    """Milliseconds of one call of `fn`, between device synchronisations."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return 1e3 * (time.perf_counter() - t0)


def step_ms(step, device, rep_ms: float) -> float:
    """One step's time: a `do_bench` median on CUDA, one wall-clock call on the CPU."""
    if device.type == "cuda":
        import triton
        return float(triton.testing.do_bench(step, warmup=0, rep=rep_ms, return_mode="median"))
    return wall_ms(step, device)


def planted(model, rows: int, device) -> tuple:
    """Peaked q, k, v (rows, H, T, D) in BF16 for `model`'s attention shape (`bench_census.attention_shaped`)."""
    c = model.config
    return attention_shaped(rows, c.n_head, c.block_size, c.n_embd // c.n_head, peaked=True, device=device)


def plant(model, qkv) -> None:
    """Put q, k, v into every attention layer's capture, as if its forward had seen them."""
    for attn in model.attn_layers:
        attn.captured.update(q=qkv[0], k=qkv[1], v=qkv[2])


class Planted:
    """An observer that plants q, k, v into every layer's capture, then lets `inner` observe."""

    def __init__(self, inner, qkv):
        self.inner, self.qkv = inner, qkv

    def observe(self, step, model):
        plant(model, self.qkv)
        return self.inner.observe(step, model)


def time_arm(arm: dict, cfg: dict, device) -> dict:
    """The step and the census events of one arm: {label, attn, compile, step_ms (per round), step_ms_median,
    events: [{rows, input, window_rate, ms (per call), ms_median, share, meets}], compile_s}."""
    from lib.training.loop import CensusObserver, run_observers
    t0 = time.perf_counter()
    step, model, x = train_step(arm["attn"], arm.get("compile", False), cfg["model"], cfg["batch_size"], device)
    for _ in range(cfg["warmup_steps"]):          # the first compiles (and autotunes)
        step()
    sync(device)
    rec = dict(arm, step_ms=[], compile_s=round(time.perf_counter() - t0, 1))
    amp = torch.bfloat16 if device.type == "cuda" else None
    events = []
    for rows in cfg["rows"]:
        for inp in cfg["inputs"]:
            census = CensusObserver(cfg["placements"])
            obs = census if inp == "model" else Planted(census, planted(model, rows, device))
            fn = (lambda obs=obs, rows=rows: run_observers([obs], 0, model, x[:rows], amp))
            seen = fn()                            # (σ₁'s power vectors start; kernels load)
            # what the census saw: the mean share of rows in the sticky-bit window (first placement)
            window = float(seen[f"{cfg['placements'][0]}/window_rate"].mean())
            events.append(dict(rows=rows, input=inp, window_rate=window, fn=fn, ms=[]))
    for _ in range(cfg["rounds"]):
        rec["step_ms"].append(step_ms(step, device, cfg["rep_ms"]))
    for _ in range(cfg["event_reps"]):
        for ev in events:
            ev["ms"].append(wall_ms(ev["fn"], device))
    rec["step_ms_median"] = statistics.median(rec["step_ms"])
    for ev in events:
        ev.pop("fn")
        ev["ms_median"] = statistics.median(ev["ms"])
        ev["share"] = ev["ms_median"] / (cfg["every"] * rec["step_ms_median"])
        ev["meets"] = bool(ev["share"] <= cfg["target"])
    rec["events"] = events
    return rec


def run(scale: str, cfg: dict) -> dict:
    """cfg: model (GPTConfig fields but attn), batch_size, arms [{label, attn, compile}], placements, every, rows
    (list), inputs ("model", "peaked"), warmup_steps, rounds, rep_ms, event_reps, target. One process, one device."""
    t0 = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return summary([time_arm(a, cfg, device) for a in cfg["arms"]], cfg, device, t0)


def summary(arms: list[dict], cfg: dict, device, t0: float) -> dict:
    """The result of a cost benchmark: the timed arms, the worst share over their events against the target."""
    worst = max(ev["share"] for a in arms for ev in a["events"])
    return {"data": dict(arms=arms, every=cfg["every"], target=cfg["target"], worst_share=worst,
                         meets=bool(worst <= cfg["target"]),
                         batch_tokens=cfg["batch_size"] * cfg["model"]["block_size"],
                         device=torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                         torch=torch.__version__, wall_s=round(time.perf_counter() - t0, 1)), "seeds": [0]}
