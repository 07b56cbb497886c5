"""The proxy GPT's training runs: the attention arms, the proxy configuration, and running many arms at once.

* `proxy_config(scale, **overrides)`: the proxy run at full scale (6 layers, width 384, 6 heads, batch 32 × 512
  bytes, AdamW (0.9, 0.95), wd 0, clip 1.0, warm-up 200 then constant LR, BF16 autocast) and a tiny CPU version at
  ci scale. At full scale each run's training loop stops after $EXPLOSION_BUDGET_S seconds (default 420; recorded
  as "truncated_at") so that an experiment always saves its results within the device's 10-minute command limit.
* `ARMS`: arm name -> attention spec string (`lib.training.model`): the paper placement, the same with the β fix,
  the production FA2 placement of our kernel, PyTorch SDPA (flash backend on CUDA) and FP32 attention ("naive").
* `run_arms(...)`: run a list of (arm, seed, lr) and pack per-run summaries and telemetry arrays for
  `lib.book.results`; a run that raises is kept as outcome "error" with its message, so the other runs are still
  saved. Outcomes come from `lib.training.outcome.classify`.
"""
from __future__ import annotations

import os
import time

import numpy as np

from lib.training.outcome import classify
from lib.training.train import TrainConfig, run_many

ARMS = {
    "paper": "paper",            # our kernel, the authors' rounding placement (BF16 S, P̄, ℓ, P̄V, O, δ from BF16 O)
    "paper+fix": "paper+fix",    # the same plus the β-scaled max (β = 7) on rows with a max repeated in one key tile
    "paper+fix_split": "paper+fix_split",  # the same fix, also on a max repeated across key tiles
    "fa2": "fa2",                # our kernel, production FlashAttention-2 placement (FP32 accumulators, one O cast)
    "sdpa": "sdpa",              # torch SDPA pinned to its flash backend (CUDA)
    "fp32": "naive",             # FP32 softmax attention, autocast off inside attention
    # the paper's δ ablations (not run by default): δ = rowsum(dP∘P); δ from an FP32 recompute of O
    "paper-dPP-delta": "paper/delta_source=dp_p",
    "paper-fp32O-delta": "paper/delta_source=fp32_o",
    # the fix without its own rounding error (chapter 7, `lib.fp.fix_error`): S − m in FP32, with and without the fix
    "paper_sm32": "paper/round_s_minus_m=false",
    "paper+fix_split_sm32": "paper/round_s_minus_m=false+fix_split",
}
KERNEL_ARMS = ("paper", "paper+fix", "paper+fix_split", "fa2", "paper_sm32", "paper+fix_split_sm32")
CONTRAST_ARMS = ("fa2", "sdpa", "fp32")

def kernel_available() -> str | None:
    """None if `kernels.attention` imports, else the reason it does not."""
    try:
        import kernels.attention  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def proxy_config(scale: str, **overrides) -> TrainConfig:
    """The proxy TrainConfig at `scale` ("ci" | "full"), with field overrides."""
    if scale == "full":
        base = dict(n_layer=6, n_head=6, n_embd=384, seq_len=512, batch_size=32, steps=1500, warmup=200,
                    schedule="constant", telemetry_every=50, eval_batches=8, progress=False,
                    deterministic=os.environ.get("EXPLOSION_DETERMINISM", "warn"),
                    max_wall_s=float(os.environ.get("EXPLOSION_BUDGET_S", "420")))
    elif scale == "ci":
        # One layer and one head of 16 dims keep the Triton interpreter (our kernel on the CPU) at ~0.3 s a step.
        base = dict(n_layer=1, n_head=1, n_embd=16, seq_len=16, batch_size=2, steps=5, warmup=2,
                    schedule="constant", telemetry_every=2, eval_batches=1, progress=False)
    else:
        raise ValueError(f"unknown scale {scale!r}")
    return TrainConfig.flat(**(base | overrides))


def run_id(arm: str, seed: int, lr: float, tag: str = "") -> str:
    return f"{arm}_s{seed}_lr{lr:g}" + (f"_{tag}" if tag else "")


TELEMETRY_ARRAYS = ("step", "wq_norm", "wk_norm", "wq_norm_layer", "wk_norm_layer", "max_logit", "tie_rate",
                    "tie_rate_head", "tie_rate_tile", "delta_err_sum", "underflow_rows", "dose_inj_rms",
                    "dose_dd_rms", "dose_dd_mean", "dose_dd_sum_head", "fix_rows", "fix_zero_rows", "fix_guard_rows")


def run_arms(scale: str, runs: list[dict], workers: int, **overrides) -> tuple[list[dict], dict, dict]:
    """Run `runs` (dicts with "arm", "seed", "lr", optional "tag", optional "attn" — a spec string used instead of
    ARMS[arm], for ablation arms — and optional "config" — per-run TrainConfig overrides such as beta) on the proxy
    config at `scale`; all share `data_seed` 0 (the same recorded batch order). Returns (summaries, arrays, meta):
    one JSON-able summary per run, the per-run arrays under keys "<run id>__<quantity>", and {"wall_s", "workers",
    "versions", "base_config"}."""
    cfgs = []
    for r in runs:
        cfgs.append(proxy_config(scale, attn=r.get("attn") or ARMS[r["arm"]], seed=r["seed"], data_seed=0,
                                 lr=r["lr"], label=run_id(r["arm"], r["seed"], r["lr"], r.get("tag", "")),
                                 **(overrides | r.get("config", {}))))
    t0 = time.perf_counter()
    results = run_many(cfgs, workers=workers)
    wall = time.perf_counter() - t0
    summaries, arrays = [], {}
    for r, cfg, res in zip(runs, cfgs, results):
        rid = cfg.label
        if "error" in res:
            summaries.append(dict(id=rid, arm=r["arm"], attn=cfg.model.attn, seed=r["seed"], data_seed=cfg.data_seed,
                                  lr=r["lr"], tag=r.get("tag", ""), steps=0, outcome="error", error=res["error"],
                                  best=float("nan"), final=float("nan"), rise=float("nan"),
                                  max_grad_norm=float("nan"), onset=None, steps_per_s=float("nan")))
            continue
        cl = classify(res["loss"], res["grad_norm"], cfg.warmup)
        summaries.append(dict(id=rid, arm=r["arm"], attn=cfg.model.attn, seed=r["seed"], data_seed=cfg.data_seed,
                              lr=r["lr"], tag=r.get("tag", ""), steps=len(res["loss"]), **cl,
                              val_loss=res["val"]["loss"][-1] if res["val"]["loss"] else None,
                              stopped_at=res["stopped_at"], truncated_at=res["truncated_at"],
                              steps_per_s=res["steps_per_s"], wall_s=res["wall_s"],
                              starts_sha256=res["starts_sha256"],
                              nondeterminism_warnings=res["nondeterminism_warnings"]))
        arrays[f"{rid}__loss"] = np.asarray(res["loss"], dtype=np.float64)
        arrays[f"{rid}__grad_norm"] = np.asarray(res["grad_norm"], dtype=np.float64)
        for key in TELEMETRY_ARRAYS:
            if key in res["telemetry"]:
                arrays[f"{rid}__{key}"] = np.asarray(res["telemetry"][key], dtype=np.float64)
    print(summary_table(summaries), flush=True)
    # The one recorded batch order every run used (int64 (steps, batch) window starts into the train split):
    # replay it with TrainConfig(starts_path=...) after np.save.
    from lib.training import data as data_mod
    if cfgs:
        c0 = cfgs[0]
        train_bytes, _ = data_mod.split(data_mod.load_corpus(), c0.val_fraction)
        arrays["starts"] = data_mod.batch_starts(len(train_bytes), c0.model.block_size, c0.batch_size, c0.steps,
                                                 c0.data_seed)
    ok = [res for res in results if "error" not in res]
    meta = dict(wall_s=wall, workers=workers, versions=ok[0]["versions"] if ok else {},
                base_config=proxy_config(scale).record() | overrides)
    return summaries, arrays, meta


def summary_table(summaries: list[dict]) -> str:
    """A plain-text table of run summaries (for logs)."""
    head = f"{'run':34s} {'outcome':9s} {'steps':>6s} {'best':>7s} {'final':>7s} {'rise':>7s} {'maxgn':>8s} " \
           f"{'onset':>6s} {'steps/s':>8s}"
    rows = [head]
    for r in summaries:
        trunc = "*" if r.get("truncated_at") else ""
        rows.append(f"{r['id']:34s} {r['outcome']:9s} {r['steps']:>5d}{trunc:1s} {r['best']:7.3f} {r['final']:7.3f} "
                    f"{r['rise']:7.3f} {r['max_grad_norm']:8.3g} {str(r['onset']):>6s} {r['steps_per_s']:8.2f}")
    return "\n".join(rows) + "\n(* = stopped by the wall-clock budget)"


def default_workers(scale: str, n_runs: int) -> int:
    """Concurrent processes: all runs at once on the GPU (small models leave it mostly idle; one CPU core each, and
    the GPU machine has 16), capped by $EXPLOSION_WORKERS (default 16); one at a time on the CPU. With fewer
    workers than runs, runs queue and the experiment's wall time is a multiple of the per-run budget."""
    if scale != "full":
        return 1
    return max(1, min(n_runs, int(os.environ.get("EXPLOSION_WORKERS", "16"))))
