"""Benchmark (a script, not a test): what telemetry and δ captures add to a proxy training step, GPU only.

`lib.training.train.train` runs the full proxy (6 layers, width 384, batch 32 × 512, BF16 autocast, the paper
placement with 512-key rounding blocks) for `steps` steps in three modes, interleaved `rounds` times in one
process on one GPU, on the same seed and batch order:

* plain: no telemetry, no hook;
* telemetry: the harness's telemetry (`collect_telemetry`) every `every` steps;
* telemetry+capture: the same plus delta_capture's `CaptureHook` every `every` steps (batch rows 0-3, every layer,
  Adam's denominators), which copies q, k, v, O, dO, dq, dk and X of those rows to host memory.

Reported, per mode: seconds per step (median over rounds), the overhead against plain, and the cost of one event
(ms: a telemetry step's extra wall time, and a capture's extra over the telemetry run). `overhead_at_every`
rescales the per-event costs to exactly one telemetry step and one capture per `every` steps (a run of `steps`
steps also has telemetry on its last step). `capture_parts_ms` times the capture's parts apart on the trained
model (`CaptureHook.after_backward` as a whole; its top singular triplets of W_Q and W_K; its Adam denominators). Target (issue 16): telemetry+capture every 50 steps within 10 % of the plain step.

    python -m lib.experiments capture_overhead_bench --scale full [--out DIR]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402

MODES = ("plain", "telemetry", "telemetry+capture")


def _one(mode: str, cfg: dict) -> dict:
    """One training run of `mode`; returns wall seconds, steps and events (telemetry steps, captures)."""
    from lib.training.capture import CaptureHook
    from lib.training.proxy import proxy_config
    from lib.training.train import train
    every = int(cfg["every"])
    tc = proxy_config("full", attn=cfg["attn"], lr=float(cfg["lr"]), warmup=int(cfg["warmup"]),
                      steps=int(cfg["steps"]), seed=0, data_seed=0, eval_batches=0, max_wall_s=0.0,
                      telemetry_every=0 if mode == "plain" else every)
    hook = CaptureHook(every=every, rows=tuple(cfg["rows"]), adam=True) if mode == "telemetry+capture" else None
    res = train(tc, step_hook=hook)
    del res["model"]
    n_tele = len(res["telemetry"].get("step", []))
    return dict(wall_s=float(res["wall_s"]), steps=len(res["loss"]), telemetry_events=n_tele,
                captures=len(hook.captures) if hook else 0, copy_s=hook.copy_s if hook else 0.0)


def _parts_ms(cfg: dict, reps: int = 5) -> dict:
    """Median ms of the capture's singular-triplet step (`top_triplets` of W_Q and W_K of every layer, as the hook
    calls it, on the GPU) and of the same on host copies (the CPU), on a fresh full-proxy model."""
    from lib.training.capture import top_triplets
    from lib.training.model import GPT
    from lib.training.proxy import proxy_config
    model = GPT(proxy_config("full", attn=cfg["attn"]).model_config()).cuda()
    ws = [w for l in range(len(model.attn_layers)) for w in model.qk_weights(l)]

    def timed(fn):
        out = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(1e3 * (time.perf_counter() - t))
        return float(np.median(out))
    return {"svd_gpu": timed(lambda: [top_triplets(w) for w in ws]),
            "svd_host": timed(lambda: [top_triplets(w.detach().float().cpu()) for w in ws])}


def run(scale: str, cfg: dict) -> dict:
    """cfg: attn (spec), lr, warmup, steps (per timed run), every (telemetry and capture interval), rows (captured
    batch rows), rounds (interleaved repetitions of the three modes). GPU only."""
    if not torch.cuda.is_available():
        raise RuntimeError("capture_overhead_bench needs a CUDA GPU")
    every, steps = int(cfg["every"]), int(cfg["steps"])
    if every < 1 or steps < 2 * every:
        raise ValueError(f"capture_overhead_bench: need every ≥ 1 and steps ≥ 2·every, got {every}, {steps}")
    warm = dict(cfg, steps=every + 2)
    for mode in MODES:                       # compile the kernels and warm the allocator in each mode
        _one(mode, warm)
    runs = {m: [] for m in MODES}
    for r in range(int(cfg["rounds"])):
        for mode in MODES:
            t = time.perf_counter()
            runs[mode].append(_one(mode, cfg))
            print(f"round {r}  {mode:18s} {1e3 * runs[mode][-1]['wall_s'] / steps:7.2f} ms/step "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
    s_step = {m: float(np.median([x["wall_s"] / x["steps"] for x in runs[m]])) for m in MODES}
    plain = s_step["plain"]
    data = dict(s_per_step=s_step, runs=runs, every=every, steps=steps, attn=cfg["attn"], rows=list(cfg["rows"]),
                overhead={m: s_step[m] / plain - 1.0 for m in MODES[1:]})
    # Per-event costs: the telemetry run's extra time over its telemetry steps; the capture's, the capture run's
    # extra time over the telemetry run's, over its captures (a run of `steps` steps also has telemetry on its last
    # step, which is not a capture step). Rescaled to one telemetry step and one capture per `every` steps.
    tc = runs["telemetry+capture"][0]
    extra_t = (s_step["telemetry"] - plain) * steps
    extra_c = (s_step["telemetry+capture"] - s_step["telemetry"]) * steps
    tele_ms, cap_ms = 1e3 * extra_t / tc["telemetry_events"], 1e3 * extra_c / max(1, tc["captures"])
    data["event_ms"] = {"telemetry": tele_ms, "capture": cap_ms}
    data["overhead_at_every"] = {"telemetry": tele_ms / 1e3 / every / plain,
                                 "capture": cap_ms / 1e3 / every / plain,
                                 "telemetry+capture": (tele_ms + cap_ms) / 1e3 / every / plain}
    data["capture_copy_ms"] = 1e3 * float(np.median([x["copy_s"] / max(1, x["captures"])
                                                      for x in runs["telemetry+capture"]]))
    data["capture_parts_ms"] = _parts_ms(cfg)
    data["within_10pct"] = bool(data["overhead_at_every"]["telemetry+capture"] <= 0.10)
    data["method"] = ("train() wall time per step, median over interleaved rounds of the three modes, one process, "
                      "one GPU")
    print({m: round(100 * v, 2) for m, v in data["overhead_at_every"].items()}, "% at one event per", every,
          "steps; event ms", {m: round(v, 1) for m, v in data["event_ms"].items()})
    return {"data": data, "seeds": [0], "config": dict(cfg)}


if __name__ == "__main__":
    from lib.experiments.__main__ import main as cli
    raise SystemExit(cli(["capture_overhead_bench", "--scale", "full"] + sys.argv[1:]))
