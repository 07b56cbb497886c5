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
model (`_parts_ms`: the singular triplets by SVD and by the Gram matrix, the telemetry and its parts). Target (issue
16): the capture every 50 steps within 10 % of a training step that has telemetry every 50 steps
(`capture_within_10pct`); `within_10pct` also counts the telemetry itself against the plain step.

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
    """Median ms (CUDA-synchronised, `reps` repetitions) of the event parts, timed apart on a fresh full-proxy model
    after one BF16 forward and backward with the attention capture on (what a telemetry step sees):

    * "svd_gpu", "svd_host": `top_triplets` (FP32 `torch.linalg.svd`, what the hook used before) of W_Q and W_K of
      every layer, on the GPU and on host copies; "gram": `top_triplets_gram` (what the hook uses now);
    * "telemetry": `collect_telemetry(model)` as a whole; "tele_spectral_norms": its `spectral_norm` calls (per head
      and per layer, W_Q and W_K of every layer); "tele_score_stats": its `score_stats`; "tele_delta_error": its
      `delta_error` (the FP32 attention reference)."""
    from lib.training.capture import top_triplets, top_triplets_gram
    from lib.training.metrics import spectral_norm
    from lib.training.model import GPT
    from lib.training.proxy import proxy_config
    from lib.training.train import collect_telemetry, delta_error, score_stats
    tc = proxy_config("full", attn=cfg["attn"])
    model = GPT(tc.model).cuda()
    ws = [w for l in range(len(model.attn_layers)) for w in model.qk_weights(l)]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(0, model.config.vocab_size, (tc.batch_size, tc.model.block_size), device="cuda", generator=g)
    model.set_capture(True)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        _, loss = model(x, x)
    loss.backward()
    H, C = model.config.n_head, model.config.n_embd
    scale = 1.0 / float(np.sqrt(model.config.head_dim))
    caps = [a.captured for a in model.attn_layers]

    def timed(fn):
        out = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(1e3 * (time.perf_counter() - t))
        return float(np.median(out))

    def norms():
        for w in ws:
            spectral_norm(w.detach().float()).tolist()
            spectral_norm(w.detach().float().reshape(-1, C)).item()
    return {"svd_gpu": timed(lambda: [top_triplets(w) for w in ws]),
            "svd_host": timed(lambda: [top_triplets(w.detach().float().cpu()) for w in ws]),
            "gram": timed(lambda: [top_triplets_gram(w) for w in ws]),
            "telemetry": timed(lambda: collect_telemetry(model)),
            "tele_spectral_norms": timed(norms),
            "tele_score_stats": timed(lambda: [score_stats(c["q"], c["k"], scale) for c in caps]),
            "tele_delta_error": timed(lambda: [delta_error(c["q"], c["k"], c["v"], c["o"], c["do"], scale)
                                               for c in caps]),
            "n_head": H}


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
    # Two readings of issue 16's target (≤ 10 % of a training step with telemetry every 50 steps): the capture's
    # own cost on top of a run that already has its telemetry, and telemetry and capture together against the
    # plain step. Both are reported; the chapter states which one is met.
    data["capture_within_10pct"] = bool(data["overhead_at_every"]["capture"] <= 0.10)
    data["within_10pct"] = bool(data["overhead_at_every"]["telemetry+capture"] <= 0.10)
    data["method"] = ("train() wall time per step, median over interleaved rounds of the three modes, one process, "
                      "one GPU")
    print({m: round(100 * v, 2) for m, v in data["overhead_at_every"].items()}, "% at one event per", every,
          "steps; event ms", {m: round(v, 1) for m, v in data["event_ms"].items()})
    return {"data": data, "seeds": [0], "config": dict(cfg)}


if __name__ == "__main__":
    from lib.book.cli import main as cli
    raise SystemExit(cli(["capture_overhead_bench", "--scale", "full"] + sys.argv[1:]))
