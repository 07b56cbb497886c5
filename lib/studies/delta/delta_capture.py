"""Train the proxy with one attention arm, capture the δ channel every N steps, and test links L3–L7 (chapters 4, 5).

For each seed: `lib.training.train.train` runs the proxy GPT (cfg: attn, lr, warmup, steps, shape, batch) with a
`lib.training.capture.CaptureHook` that copies, every `capture_every` steps, the attention inputs, outputs and
gradients of `capture_rows` batch rows (all layers, all heads) to host memory. After training each capture is
replayed offline (`lib.studies.delta.stats.capture_stats`, float64, on `replay_device`): ΔO against FP64
attention of the same q, k, v; Δδ = rowsum(dO∘ΔO), split by rows whose BF16 maximum repeats; the O error along
sign(V) in one-signed features; E_Q and E_K (the dW_Q / dW_K error Δδ causes), their rank-1 token terms, their
cosine with the true gradient of the same rows, and their component along W_Q's / W_K's top singular pair (raw and
Adam-scaled). Per head, across steps: sign tests, drift against random-walk scaling, and the coherence of E across
steps (`run_summary`). Every `replay_every`-th capture is also replayed through the emulator
(`lib.fp.reference.emulate_forward`) under the `variants` (other numerics / rounding tiles) on `replay_rows` rows.
Three captures per kept seed (`keep_steps`, subsampled to `keep_rows` rows of the layer and `keep_heads` heads with
the largest ‖W_Q^h‖₂ — the paper's selection rule, fixed before the data) are stored whole, so that the chapters
can replay them on the CPU.

Result: data {"runs": per seed (steps done, wall, capture overhead, ...), "steps": captured steps per seed,
"claims": verdicts of `delta_stats.claims`, "context", "keep_index": metas of the stored captures, "variants"};
arrays "st__<stat>" (S, N, L, H) per-step statistics (NaN-padded), "steps" (S, N), "sum__<stat>" (S, L, H) or
(S, L, H, N, N) per-head tests, "rv__<variant>__<stat>" (S, M, L, H) variant replays with "rv_steps" (S, M),
"keep<i>__L<l>__<name>" stored captures (`lib.training.capture.pack`), "loss", "grad_norm", "lr" (S, steps).
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# Per-step statistics whose cosine matrices across steps are stored (the figures' step × step heat maps).
COS_SIDES = ("q", "q_shuf")


REQUIRED = ("attn", "lr", "warmup", "steps", "seeds", "n_layer", "n_head", "n_embd", "seq_len", "batch_size",
            "capture_every", "capture_rows", "keep_steps", "keep_rows", "keep_heads", "keep_seeds", "replay_every",
            "replay_rows", "variants", "n_shuffle", "n_flip", "one_signed", "workers", "max_wall_s")


def _check(cfg: dict) -> None:
    missing = [k for k in REQUIRED if k not in cfg]
    if missing:
        raise ValueError(f"delta_capture cfg lacks {missing}; give every knob in the registry entry")
    if int(cfg["capture_every"]) <= 0:
        raise ValueError("capture_every must be a positive number of steps")
    for v in cfg["variants"]:
        if not (isinstance(v, (list, tuple)) and len(v) == 3):
            raise ValueError(f"each variant is [name, attention spec, block_n], got {v!r}")
    # a sign-flip p-value cannot go below 1/(n_flip + 1): it must resolve the Bonferroni level α/heads ten times over
    from lib.studies.delta.stats import ALPHA
    need = math.ceil(10 * cfg["n_layer"] * cfg["n_head"] / ALPHA) - 1
    if int(cfg["n_flip"]) < need:
        raise ValueError(f"n_flip {cfg['n_flip']} cannot resolve p < {ALPHA:g}/{cfg['n_layer'] * cfg['n_head']} heads; "
                         f"use n_flip ≥ {need}")


def train_config(cfg: dict, seed: int):
    from lib.training.train import TrainConfig
    return TrainConfig.flat(n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_embd=cfg["n_embd"], seq_len=cfg["seq_len"],
                            attn=cfg["attn"], steps=cfg["steps"], batch_size=cfg["batch_size"], lr=cfg["lr"],
                            warmup=cfg["warmup"], schedule=cfg.get("schedule", "constant"),
                            weight_decay=cfg.get("weight_decay", 0.0), grad_clip=cfg.get("grad_clip", 1.0),
                            seed=int(seed), data_seed=cfg.get("data_seed", 0),
                            telemetry_every=cfg.get("telemetry_every", 0), eval_batches=cfg.get("eval_batches", 0),
                            deterministic=cfg.get("deterministic", "warn"), max_wall_s=float(cfg["max_wall_s"]),
                            progress=False, label=f"delta_capture s{seed}")


def _nearest(steps: list[int], want: int) -> int:
    """Index of the captured step nearest to `want` (−1: the last)."""
    if want < 0:
        return len(steps) - 1
    return int(np.argmin([abs(s - want) for s in steps]))


def choose_keep(captures, keep_steps, keep_rows: int, keep_heads, keep_layers="top") -> list:
    """The captures stored whole: the captured steps nearest to `keep_steps` (−1: the last), each reduced to its
    first `keep_rows` rows, one layer and `keep_heads` heads. Layer "top": the layer holding the head with the
    largest ‖W_Q^h‖₂ at that step; heads: the `keep_heads` largest ‖W_Q^h‖₂ of that layer (the paper's rule: its
    outlier heads by spectral norm), or an explicit list."""
    if not captures:
        return []
    steps = [c.meta["step"] for c in captures]
    idx = sorted(set(_nearest(steps, int(s)) for s in keep_steps))
    out = []
    for i in idx:
        c = captures[i]
        sig = np.stack([c.get(l, "wq_s") for l in c.layers])            # (L, H)
        if keep_layers == "top":
            lay = c.layers[int(np.unravel_index(np.argmax(sig), sig.shape)[0])]
        else:
            lay = int(keep_layers[0])
        li = c.layers.index(lay)
        if isinstance(keep_heads, int):
            heads = sorted(np.argsort(-sig[li])[:keep_heads].tolist())
        else:
            heads = [int(h) for h in keep_heads]
        out.append(c.subsample(rows=list(range(min(keep_rows, len(c.meta["rows"])))), layers=[lay], heads=heads))
    return out


def worker_threads(workers: int) -> int:
    """CPU threads each of `workers` concurrent seed processes may use: the cores this process may run on, shared
    out (at least 1). Each library's default is every core, and three workers × 16 threads on 16 cores, beside
    other experiments, made the post-training phase crawl: threads of one parallel region wait on each other's
    time slices."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:          # no affinity on this platform
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, int(workers)))


def worker_env(n: int) -> dict:
    """The thread-count variables a worker starts with: OpenMP / MKL (torch) `n`; OpenBLAS (numpy) 1 — numpy's
    matrices here are the emulator's tiles and the sign-flip draws, too small to gain from threads, and its
    threads, spinning beside busy cores, made a replay under one variant 20× slower (measured on 2 cores)."""
    return {"OMP_NUM_THREADS": str(int(n)), "MKL_NUM_THREADS": str(int(n)), "OPENBLAS_NUM_THREADS": "1"}


@contextlib.contextmanager
def thread_env(n: int):
    """`worker_env(n)` set for the processes started inside the block (they read it when numpy and torch load,
    before any code of ours runs in a spawned worker); this process's values come back after."""
    env = worker_env(n)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def torch_threads(n: int):
    """torch's intra-op threads set to `n` inside the block (restored after). The per-head tests across steps and
    the emulator replays are many small operations: one thread is as fast, and cannot stall on threads that wait
    for one another's time slices when other processes share the cores (two threads took twice as long beside
    one busy core, up to 30× beside a book build, measured on 2 cores)."""
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _init_worker(threads: int) -> None:
    """Pool initializer: torch's intra-op threads of this worker (see `worker_threads`)."""
    import torch
    torch.set_num_threads(int(threads))


def map_jobs(fn, jobs: list, workers: int) -> list:
    """[fn(j) for j in jobs]: in this process when workers ≤ 1 or there is one job, else in a spawn Pool of
    min(workers, len(jobs)) processes, each limited to its share of the cores (`worker_threads`)."""
    if workers <= 1 or len(jobs) <= 1:
        return [fn(j) for j in jobs]
    import multiprocessing as mp
    n_proc = min(workers, len(jobs))
    threads = worker_threads(n_proc)
    print(f"[delta_capture] {n_proc} worker processes × {threads} CPU threads", flush=True)
    with thread_env(threads):      # the workers inherit the environment when they start, here
        pool = mp.get_context("spawn").Pool(processes=n_proc, initializer=_init_worker, initargs=(threads,))
    with pool:
        return pool.map(fn, jobs, chunksize=1)


def _stack(per: list[dict], names) -> dict:
    return {n: np.stack([p["stats"][n] for p in per]) for n in names}


def variant_replays(caps, cfg: dict, seed: int, tile: int) -> tuple[dict, list]:
    """`delta_stats.variant_stats` of every layer of every `replay_every`-th capture, on its first `replay_rows`
    rows, under each of `cfg["variants"]`: ({variant: {stat: (M, L, H)}}, the M replayed steps). Prints a line per
    replayed capture."""
    from lib.studies.delta import stats as ds
    t1 = time.perf_counter()
    rv, rv_steps = {}, []
    n_rv = len(range(0, len(caps), int(cfg["replay_every"])))
    for i, c in enumerate(caps):
        if i % int(cfg["replay_every"]):
            continue
        sub = c.subsample(rows=list(range(min(int(cfg["replay_rows"]), len(c.meta["rows"])))))
        rv_steps.append(c.meta["step"])
        for name, spec, bn in cfg["variants"]:
            lay = [ds.variant_stats(sub.layer(l), sub.meta["scale"], spec, block_n=int(bn), tile=tile,
                                    one_signed=cfg["one_signed"]) for l in sub.layers]
            st = {k: np.stack([x[k] for x in lay]) for k in lay[0]}
            rv.setdefault(name, []).append(st)
        print(f"[delta_capture] seed {seed}: {len(rv_steps)}/{n_rv} captures replayed under "
              f"{len(cfg['variants'])} variants, {time.perf_counter() - t1:.0f} s", flush=True)
    rv = {name: {k: np.stack([x[k] for x in lst]) for k in lst[0]} for name, lst in rv.items()}
    return rv, rv_steps


def replay(caps, cfg: dict, seed: int, grad_norm, grad_clip: float) -> dict:
    """Everything after training, for one seed: `capture_stats` of every capture (on `replay_device`), the per-head
    tests across steps (`run_summary`), and the variant replays. grad_norm: the run's per-step gradient norms (for
    the clip factor of the pushes). Returns {"stats": {name: (N, L, H)}, "steps", "summary", "rv", "rv_steps",
    "replay_s" (capture stats and summary, s), "variant_s" (s)}, printing a line at each stage."""
    import torch

    from lib.studies.delta import stats as ds, verdicts as dv
    dev = cfg.get("replay_device", "auto")
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if dev == "auto" else dev
    tile = int(cfg.get("tile", 64))
    t0 = time.perf_counter()
    per, E = [], {}
    for i, c in enumerate(caps):
        r = ds.capture_stats(c, tile=tile, one_signed=cfg["one_signed"], n_shuffle=cfg["n_shuffle"],
                             seed=1000 * seed + i, device=dev)
        per.append(r)
        for side, e in r.pop("E").items():
            E.setdefault(side, []).append(e)
        if (i + 1) % 10 == 0 or i + 1 == len(caps):    # a long replay shows where it is
            print(f"[delta_capture] seed {seed}: {i + 1}/{len(caps)} captures replayed, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    names = sorted(per[0]["stats"]) if per else []
    stats = _stack(per, names)
    steps = [c.meta["step"] for c in caps]
    gn = np.asarray(grad_norm, dtype=np.float64)
    clip = grad_clip
    coef = [min(1.0, clip / (gn[s] + 1e-6)) if clip > 0 and s < len(gn) else 1.0 for s in steps]
    b = len(cfg["capture_rows"])
    per_step = dict(stats, step=np.asarray(steps),
                    push_scale=np.asarray([c.meta["lr"] * k * cfg["capture_every"] * cfg["batch_size"] / b
                                           for c, k in zip(caps, coef)]))
    if caps:
        per_step["wq_growth"] = stats["wq_sigma1"][-1] - stats["wq_sigma1"][0]
    E_steps = {s: np.stack(E[s]) for s in E}
    del E
    t_sum = time.perf_counter()
    print(f"[delta_capture] seed {seed}: run_summary (n_flip {cfg['n_flip']}) …", flush=True)
    with torch_threads(1):
        summary = dv.run_summary(per_step, E_steps, n_flip=cfg["n_flip"], seed=seed) if caps else {}
    for side in list(E_steps):
        if side not in COS_SIDES:
            summary.pop(f"steps_{side}_cos", None)
    del E_steps
    print(f"[delta_capture] seed {seed}: run_summary done, {time.perf_counter() - t_sum:.0f} s", flush=True)
    replay_s = time.perf_counter() - t0
    # the emulator under other numerics, on a few rows of every replay_every-th capture
    t1 = time.perf_counter()
    with torch_threads(1):
        rv, rv_steps = variant_replays(caps, cfg, seed, tile)
    return dict(stats=stats, steps=steps, summary=summary, rv=rv, rv_steps=rv_steps, replay_s=replay_s,
                variant_s=time.perf_counter() - t1)


def seed_run(cfg: dict, seed: int, keep: bool) -> dict:
    """Train one seed with captures, replay them, and summarise (runs in a worker process at full scale)."""
    import lib.book.setup  # noqa: F401  (interpreter mode for the kernel on CPU-only machines)
    import torch

    from lib.training.capture import CaptureHook, pack
    from lib.training.train import train

    tc = train_config(cfg, seed)
    hook = CaptureHook(every=int(cfg["capture_every"]), steps=cfg.get("capture_steps", ()),
                       rows=tuple(cfg["capture_rows"]), adam=True)
    t_train = time.perf_counter()
    res = train(tc, step_hook=hook)
    print(f"[delta_capture] seed {seed}: {len(res['loss'])} steps, {len(hook.captures)} captures, "
          f"{time.perf_counter() - t_train:.0f} s; replaying", flush=True)
    model = res.pop("model")
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    caps = hook.captures
    steps_done = len(res["loss"])
    s_per_step = res["wall_s"] / max(1, steps_done)
    t_post = time.perf_counter()
    rep = replay(caps, cfg, seed, res["grad_norm"], tc.grad_clip)
    kept = choose_keep(caps, cfg["keep_steps"], int(cfg["keep_rows"]), cfg["keep_heads"],
                       cfg.get("keep_layers", "top")) if keep else []
    keep_index, keep_arrays = pack(kept, prefix="keep")
    print(f"[delta_capture] seed {seed}: {len(kept)} captures kept; after training "
          f"{time.perf_counter() - t_post:.0f} s", flush=True)
    cap_bytes = int(np.mean([c.nbytes for c in caps])) if caps else 0
    run = dict(seed=int(seed), steps_done=steps_done, truncated_at=res["truncated_at"], stopped_at=res["stopped_at"],
               wall_s=round(res["wall_s"], 2), s_per_step=s_per_step, n_captures=len(caps),
               capture_bytes=cap_bytes, capture_copy_s=hook.copy_s,
               capture_overhead=(hook.copy_s / max(1, len(caps))) / (cfg["capture_every"] * s_per_step),
               replay_s=round(rep["replay_s"], 2), variant_s=round(rep["variant_s"], 2), device=res["device"],
               autocast=res["autocast"], final_loss=float(np.mean(res["loss"][-20:])) if res["loss"] else None,
               nondeterminism_warnings=res["nondeterminism_warnings"], versions=res["versions"],
               starts_sha256=res["starts_sha256"])
    return dict(run=run, steps=rep["steps"], stats=rep["stats"], summary=rep["summary"], rv=rep["rv"],
                rv_steps=rep["rv_steps"], keep_index=keep_index, keep_arrays=keep_arrays,
                curves=dict(loss=np.asarray(res["loss"], np.float32), grad_norm=np.asarray(res["grad_norm"], np.float32),
                            lr=np.asarray(res["lr"], np.float32)))


def _seed_worker(args):
    cfg, seed, keep = args
    return seed_run(cfg, seed, keep)


def _pad(arrs, fill=np.nan):
    """Stack arrays of equal rank, padding every axis to the largest size."""
    shape = tuple(max(a.shape[i] for a in arrs) for i in range(arrs[0].ndim))
    out = np.full((len(arrs), *shape), fill, dtype=np.float32 if fill is np.nan else np.asarray(arrs[0]).dtype)
    for j, a in enumerate(arrs):
        out[(j, *tuple(slice(0, s) for s in a.shape))] = a
    return out


def context(cfg: dict, steps_done: list[int], n_caps: list[int]) -> dict:
    """The regime, tile, seeds and horizon, for the claims' evidence lines."""
    from lib.training.spec import AttnSpec
    rb = None
    try:
        sp = AttnSpec.parse(cfg["attn"].split(",")[0])
        if sp.backend == "ours" and not isinstance(sp.numerics, str):
            rb = getattr(sp.numerics, "round_block", None)
    except ValueError:
        pass
    tile = f"{cfg.get('tile', 64)}-key compute tiles" + (f", rounding block {rb}" if rb is not None else "")
    pl = lambda n, w: f"{n} {w}" + ("s" if n != 1 else "")  # noqa: E731
    return dict(regime=f"arm {cfg['attn']}, LR {cfg['lr']:g}, warm-up {cfg['warmup']}, {pl(cfg['n_layer'], 'layer')} "
                       f"× {pl(cfg['n_head'], 'head')}, width {cfg['n_embd']}, batch {cfg['batch_size']} × "
                       f"{cfg['seq_len']}",
                tile=tile, seeds=list(cfg["seeds"]),
                horizon=f"steps 0–{max(steps_done) - 1 if steps_done else 0} ({'/'.join(map(str, n_caps))} captures "
                        f"of {len(cfg['capture_rows'])} rows every {cfg['capture_every']} steps)")


def run(scale: str, cfg: dict) -> dict:
    _check(cfg)
    from lib.training.regime import pick_lr
    lr, lr_source = pick_lr(scale, cfg["lr"])     # "from:regime_sweep": the healthy LR the pilots chose
    cfg = dict(cfg, lr=lr, lr_source=lr_source)
    seeds = [int(s) for s in cfg["seeds"]]
    keep_seeds = set(int(s) for s in cfg["keep_seeds"])
    jobs = [(cfg, s, s in keep_seeds) for s in seeds]
    outs = map_jobs(_seed_worker, jobs, int(cfg["workers"]))
    from lib.studies.delta import verdicts as dv
    arrays = {}
    names = sorted(set().union(*[o["stats"] for o in outs]))
    for n in names:
        arrays[f"st__{n}"] = _pad([o["stats"][n] for o in outs])
    arrays["steps"] = _pad([np.asarray(o["steps"], np.float64) for o in outs])
    snames = sorted(set().union(*[o["summary"] for o in outs]))
    for n in snames:
        arrays[f"sum__{n}"] = _pad([np.asarray(o["summary"][n], np.float64) for o in outs])
        if n.endswith("_cos"):   # step × step cosine matrices: figures only, 3 decimals are plenty
            arrays[f"sum__{n}"] = arrays[f"sum__{n}"].astype(np.float16)
    vnames = [v[0] for v in cfg["variants"]]
    for vn in vnames:
        keys = sorted(set().union(*[o["rv"].get(vn, {}) for o in outs]))
        for k in keys:
            arrays[f"rv__{vn}__{k}"] = _pad([o["rv"][vn][k] for o in outs])
    arrays["rv_steps"] = _pad([np.asarray(o["rv_steps"], np.float64) for o in outs])
    for c in ("loss", "grad_norm", "lr"):
        arrays[c] = _pad([o["curves"][c] for o in outs])
    keep_index = []
    for o in outs:
        base = len(keep_index)
        for i, meta in enumerate(o["keep_index"]):
            keep_index.append(dict(meta, seed=o["run"]["seed"]))
            pre = f"keep{i}__"
            for k, a in o["keep_arrays"].items():
                if k.startswith(pre):
                    arrays[f"keep{base + i}__{k[len(pre):]}"] = a
    ctx = context(cfg, [o["run"]["steps_done"] for o in outs], [o["run"]["n_captures"] for o in outs])
    summaries = [{k: np.asarray(v) for k, v in o["summary"].items()} for o in outs if o["summary"]]
    data = dict(config=dict(cfg), runs=[o["run"] for o in outs], steps=[o["steps"] for o in outs], seeds=seeds,
                keep_index=keep_index, variants=[list(v) for v in cfg["variants"]], context=ctx,
                claims=dv.claims_from_summaries(summaries, ctx), verdict_rules=dv.VERDICT_RULES,
                stat_names=names, summary_names=snames, scale=scale)
    return {"data": data, "arrays": arrays, "seeds": seeds}
