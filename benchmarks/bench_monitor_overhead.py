"""Benchmark (a script, not a test): what the attention monitor (`lib.monitor.AttentionMonitor`) adds to a GPT-2 124M
training step at one event per `every` steps.

The step: `bench_train_step_gpt2`'s (forward under BF16 autocast, backward, grad-norm clip, fused AdamW, zero_grad on
one fixed batch of 32 × 1024 tokens) for each arm, eager or compiled. The monitor as a user runs it:
`AttentionMonitor(model, every, placement, batch_rows, out=<a JSON-lines file>)` on every layer, `mon.step(step)`
before the forward and `mon.collect(step)` after the backward. An event step is a step the monitor is due at: its
forward captures q, k, v (and dO) of every layer, and `collect` runs the census on the first `batch_rows` windows
and σ₁ of each head's W_Q, and writes one JSON line per layer. Two inputs, as in `bench_census_cost`:

* "model": the q, k, v the step's forward captured (the arm's model at its initialisation: few tied rows);
* "peaked": every layer's captured q, k, v replaced before `collect` by `bench_census.attention_shaped(peaked=True)`
  (nearly every row tied and in the sticky-bit window: the census's worst case).

Timing, all in one process on one GPU: the plain step by `triton.testing.do_bench` medians over `rounds` rounds; the
event's extra time as the median of `event_reps` wall-clock event steps minus the median of as many wall-clock plain
steps, interleaved (both between CUDA synchronisations; the event has host synchronisations inside); the monitor's own
time from its records ("ms": census and σ₁, summed over layers). The monitor's share of training at one event per
`every` steps is extra / (every × step); target ≤ `target` (1 %). On the CPU (ci) every time is a wall-clock median.

    python -m lib.experiments monitor_overhead --scale full [--out DIR]
"""
from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from benchmarks.bench_census_cost import plant, planted, step_ms, summary, sync, wall_ms
from benchmarks.bench_train_step_gpt2 import train_step


def time_arm(arm: dict, cfg: dict, device, tmp: Path) -> dict:
    """The plain step and the monitor's event steps of one arm: {label, attn, compile, step_ms (per round),
    step_ms_median, events: [{input, window_rate, plain_ms, event_ms (per call), extra_ms, monitor_ms, share, meets}],
    compile_s}."""
    from lib.monitor import AttentionMonitor, MonitorWarning
    t0 = time.perf_counter()
    step, model, _ = train_step(arm["attn"], arm.get("compile", False), cfg["model"], cfg["batch_size"], device)
    events = []
    for inp in cfg["inputs"]:
        mon = AttentionMonitor(model, every=cfg["every"], placement=cfg["placement"], batch_rows=cfg["batch_rows"],
                               out=tmp / f"{arm['label']}_{inp}.jsonl")
        qkv = planted(model, cfg["batch_rows"], device) if inp == "peaked" else None
        after = (lambda mon=mon: mon.collect(0)) if qkv is None else \
            (lambda mon=mon, qkv=qkv: (plant(model, qkv), mon.collect(0)))
        # step 0 is due: every call is an event step
        events.append(dict(input=inp, mon=mon, fn=(lambda mon=mon, after=after: step(lambda: mon.step(0), after)),
                           plain_ms=[], event_ms=[]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonitorWarning)          # planted ties pass the thresholds by design
        for _ in range(cfg["warmup_steps"]):                      # the first compile (the event steps recompile once)
            step()
            for ev in events:
                ev["fn"]()
        sync(device)
        rec = dict(arm, step_ms=[], compile_s=round(time.perf_counter() - t0, 1))
        for ev in events:
            ev["mon"].records.clear()
        for _ in range(cfg["rounds"]):
            rec["step_ms"].append(step_ms(step, device, cfg["rep_ms"]))
        for _ in range(cfg["event_reps"]):
            for ev in events:
                ev["plain_ms"].append(wall_ms(step, device))
                ev["event_ms"].append(wall_ms(ev["fn"], device))
    rec["step_ms_median"] = statistics.median(rec["step_ms"])
    for ev in events:
        mon = ev.pop("mon")
        ev.pop("fn")
        n = len(mon.layers)
        ev["monitor_ms"] = statistics.median(sum(r["ms"] for r in mon.records[i:i + n])
                                             for i in range(0, len(mon.records), n))
        # what the census saw: the mean share of rows in the sticky-bit window, over layers and heads
        ev["window_rate"] = statistics.fmean(w for r in mon.records for w in r["window_rate"] if w is not None)
        ev["extra_ms"] = statistics.median(ev["event_ms"]) - statistics.median(ev["plain_ms"])
        ev["share"] = ev["extra_ms"] / (cfg["every"] * rec["step_ms_median"])
        ev["meets"] = bool(ev["share"] <= cfg["target"])
    rec["events"] = events
    return rec


def run(scale: str, cfg: dict) -> dict:
    """cfg: model (GPTConfig fields but attn), batch_size, arms [{label, attn, compile}], every, placement,
    batch_rows, inputs ("model", "peaked"), warmup_steps, rounds, rep_ms, event_reps, target. One process, one
    device."""
    t0 = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        arms = [time_arm(a, cfg, device, Path(tmp)) for a in cfg["arms"]]
    return summary(arms, cfg, device, t0)
