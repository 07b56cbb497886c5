"""Training harness for the small byte-level GPT (`lib.training.model`) on the pinned corpus (`lib.training.data`).

`train(TrainConfig(...)) -> dict` runs AdamW (β = (0.9, 0.95), ε = 1e-8, weight decay 0 by default) with a linear
warm-up then a constant (or cosine) learning rate, global grad-norm clipping (1.0), BF16 autocast on CUDA with FP32
master weights (FP32 throughout on the CPU unless `autocast="bf16"`), optional checkpoints, a tqdm bar, and
telemetry every `telemetry_every` steps (see `collect_telemetry`). Under `torchrun` (WORLD_SIZE > 1) it runs
DistributedDataParallel (gloo on CPU, nccl on CUDA); each rank takes its slice of the recorded global batch order.

Reproducibility: `seed` seeds the model init (torch), `data_seed` the batch order (numpy), which is a recorded
array (`starts`, saved as `starts.npy` with a run and replayable via `starts_path`). Both seeds and the versions are
in the returned dict. On the CPU the same config gives a bit-identical loss curve. On CUDA, `deterministic="warn"`
(default) sets `torch.use_deterministic_algorithms(True, warn_only=True)`, cuDNN deterministic and
`CUBLAS_WORKSPACE_CONFIG`; an op without a deterministic CUDA implementation then warns instead of failing, and
every such warning is recorded in `result["nondeterminism_warnings"]`. Known case: SDPA's flash backward accumulates
dQ with atomics (nondeterministic) under warn_only and switches to its deterministic variant only under
`deterministic="strict"` (warn_only=False), which also turns any other nondeterministic op into an error. Our
Triton backward writes dQ and dK/dV from separate kernels without atomics. The headline experiment re-runs one
arm with the same seed and compares the curves bit for bit.

Command line: ``python -m lib.training.train --help`` (every TrainConfig field is a flag).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

# cuBLAS reads this when its first handle is made; it must be set before any CUDA matmul for deterministic GEMMs.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL  # noqa: E402
from lib.training import data as data_mod  # noqa: E402
from lib.training.metrics import bf16_row_ties, bf16_tile_ties, spectral_norm  # noqa: E402
from lib.training.model import GPT, GPTConfig, naive_attention  # noqa: E402
from lib.training import runtime  # noqa: E402
from lib.training.runtime import (agree, autocast_dtype, device_of, dist_info, forward_backward,  # noqa: E402,F401
                                  grad_norm, jsonable, lr_at, set_determinism, train_step, versions)
from lib.training.zero_rows import fix_row_stats  # noqa: E402

_SCHEDULES = ("constant", "cosine")
TIE_TILE = 64   # key-tile width of the tie telemetry: the native kernel's BLOCK_N (kernels.attention.NATIVE_CONFIGS)
_AUTOCAST = ("auto", "bf16", "none")
_DETERMINISM = ("warn", "strict", "off")


@dataclass
class TrainConfig:
    """Everything that defines a run. Batch size is global (split across DDP ranks); lengths in bytes (= tokens)."""
    # model
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    seq_len: int = 512
    attn: str = "sdpa"              # one spec for all layers, or comma-separated per layer (see lib.training.model)
    beta: float = BETA              # β of "+fix" specs
    tie_tol: float = TIE_TOL        # tie tolerance of "+fix" specs
    max_shift: float | None = MAX_SHIFT  # underflow guard of "+fix" specs (None: the paper's exact rule, may give NaN)
    zero_at: float | None = None    # level of "+zero_rows" specs (None: the backend's default; lib.training.zero_rows)
    qk_norm: bool = False           # LayerNorm on each head's q and k before attention (lib.training.model)
    # optimisation
    steps: int = 2000
    batch_size: int = 32
    lr: float = 5e-3
    warmup: int = 200               # linear warm-up steps: lr·(step+1)/warmup for step < warmup
    schedule: str = "constant"      # "constant" after warm-up, or "cosine" down to min_lr at `steps`
    min_lr: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0          # global grad-norm clip; 0 disables
    # precision / device
    device: str = "auto"            # "auto" (cuda if available), "cpu", "cuda"
    autocast: str = "auto"          # "auto" (BF16 on CUDA, none on CPU), "bf16", "none"
    deterministic: str = "warn"     # "warn": deterministic algorithms, warn (and record) where none exists;
                                    # "strict": raise there instead (also makes SDPA's flash backward
                                    # deterministic); "off"
    # seeds and data
    seed: int = 0                   # torch seed: model init
    data_seed: int = 0              # numpy seed: batch order
    val_fraction: float = 0.05
    starts_path: str = ""           # replay a saved batch order (.npy, (steps, batch)) instead of drawing one
    # telemetry, evaluation
    telemetry_every: int = 50       # 0 disables; step 0 and the last step are always included when enabled
    eval_every: int = 0             # validation loss every N steps (0: only at the end if eval_batches > 0)
    eval_batches: int = 4
    # output
    out_dir: str = ""               # save telemetry.json, starts.npy, ckpt.pt (final) here ("" = nowhere)
    ckpt_every: int = 0             # also save ckpt_step<N>.pt every N steps (0: only the final ckpt.pt)
    resume: str = ""                # checkpoint to resume from
    progress: bool = True
    stop_on_nonfinite: bool = True  # stop at the first telemetry step that sees a non-finite loss
    max_wall_s: float = 0.0         # stop once the loop has run this long (checked every 10 steps); 0 = no limit
    label: str = ""

    def __post_init__(self):
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {_SCHEDULES}, got {self.schedule!r}")
        if self.autocast not in _AUTOCAST:
            raise ValueError(f"autocast must be one of {_AUTOCAST}, got {self.autocast!r}")
        if self.deterministic not in _DETERMINISM:
            raise ValueError(f"deterministic must be one of {_DETERMINISM}, got {self.deterministic!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        for name in ("steps", "batch_size", "seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("lr", "warmup", "telemetry_every", "eval_every", "eval_batches", "ckpt_every", "grad_clip",
                     "weight_decay", "min_lr"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        self.model_config()  # validates the model fields and the attention specs

    def model_config(self) -> GPTConfig:
        return GPTConfig(n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd, block_size=self.seq_len,
                         attn=self.attn, beta=self.beta, tie_tol=self.tie_tol, max_shift=self.max_shift,
                         zero_at=self.zero_at, qk_norm=self.qk_norm)


# ----------------------------------------------------------------------------------------------------------------
# telemetry
# ----------------------------------------------------------------------------------------------------------------
def score_stats(q: torch.Tensor, k: torch.Tensor, scale: float, chunk_elems: int = 1 << 26,
                tile: int = TIE_TILE) -> dict:
    """Max causal attention logit and BF16 tie statistics from q, k of shape (B, H, T, D).

    S = scale·QKᵀ is formed in FP32 from the given q, k (the values the backend saw), causally masked; a query row
    "ties" when the maximum of its BF16-rounded scores occurs ≥ 2 times. Returns {"max_logit": float (max over
    B, H and valid (i, j)), "tie_rate": float (fraction of the B·H·T rows), "tie_rate_head": (H,) tensor,
    "tie_rate_tile": float (fraction of rows with two maxima inside one key tile of `tile` columns, the ties a
    per-tile fix detects)}.
    The batch is processed in chunks of at most `chunk_elems` scores to bound memory."""
    B, H, T, _ = q.shape
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    per = max(1, chunk_elems // (H * T * T))
    max_logit = -math.inf
    ties = torch.zeros(H, dtype=torch.float64, device=q.device)
    tile_ties = 0.0
    with torch.autocast(device_type=q.device.type, enabled=False):
        for b0 in range(0, B, per):
            s = torch.matmul(q[b0:b0 + per].float(), k[b0:b0 + per].float().transpose(-2, -1)) * scale
            s = s.masked_fill(~mask, float("-inf"))
            max_logit = max(max_logit, s.max().item())
            ties += bf16_row_ties(s).double().sum(dim=(0, 2))   # rows (b, H, T) -> per head
            tile_ties += bf16_tile_ties(s, tile).double().sum().item()
    tie_head = ties / (B * T)
    return dict(max_logit=max_logit, tie_rate=tie_head.mean().item(), tie_rate_head=tie_head.cpu(),
                tie_rate_tile=tile_ties / (B * H * T))


def delta_error(q, k, v, o_lp, do, scale: float) -> torch.Tensor:
    """Σ over batch rows and positions of δ_lp − δ_hp = rowsum(dO∘(O_lp − O_hp)) per head, shape (H,), FP64.

    O_lp: the backend's output; O_hp: FP32 attention of the same q, k, v; dO: the gradient reaching the output."""
    o_hp = naive_attention(q.float(), k.float(), v.float(), causal=True, scale=scale)
    with torch.autocast(device_type=q.device.type, enabled=False):
        dd = (do.float() * (o_lp.float() - o_hp)).sum(dim=-1)   # (B, H, T)
    return dd.double().sum(dim=(0, 2)).cpu()


BACKEND_STATS = ("underflow_rows", "dose_inj_rms", "dose_dd_rms", "dose_dd_mean", "dose_dd_sum_head")


def backend_stats(stats: dict, n_head: int) -> dict:
    """The telemetry entries of one layer from its backend's counters (`lib.training.authors_backend`,
    `lib.training.dose_backend`, `model.ours_attention` for "+zero_rows"); NaN for what the backend did not count."""
    nan = float("nan")
    out = dict(underflow_rows=stats["underflow_n"] / stats["underflow_of"] if stats.get("underflow_of") else nan,
               dose_inj_rms=nan, dose_dd_rms=nan, dose_dd_mean=nan, dose_dd_sum_head=[nan] * n_head)
    n = stats.get("dose_n", 0)
    if n:
        out.update(dose_inj_rms=math.sqrt(stats["dose_inj_sq"] / n), dose_dd_rms=math.sqrt(stats["dose_dd_sq"] / n),
                   dose_dd_mean=stats["dose_dd_sum"] / n, dose_dd_sum_head=stats["dose_dd_sum_head"].tolist())
    return out


FIX_STATS = ("fix_rows", "fix_zero_rows", "fix_guard_rows")


@torch.no_grad()
def collect_telemetry(model: GPT) -> dict:
    """Per-layer / per-head telemetry of the step whose forward and backward just ran with capture on.

    Returns lists over layers: "wq_norm", "wk_norm" (per head ‖W_Q^h‖₂, ‖W_K^h‖₂, exact spectral norms of the
    (head_dim, n_embd) slices), "wq_norm_layer", "wk_norm_layer" (‖W_Q‖₂, ‖W_K‖₂ of the full (n_embd, n_embd)
    blocks), "max_logit", "tie_rate", "tie_rate_head", "tie_rate_tile" (`score_stats`), and "delta_err_sum" (Σ Δδ per head; NaN where dO was not
    captured). From the backends' counters (`backend_stats`; NaN where the layer's backend does not report them):
    "underflow_rows" (share of query rows whose ℓ sat at the clamp, authors' backend, or that a "+zero_rows"
    control zeroed), "dose_inj_rms", "dose_dd_rms", "dose_dd_mean" (RMS of the injected λ·c(Δδ), RMS and mean of
    Δδ over all rows) and "dose_dd_sum_head" (Σ Δδ per head) of the dose backend. For our kernel's β fix
    (`lib.training.zero_rows.fix_row_stats`; NaN for other layers): "fix_rows" (share of rows whose max it shifts),
    "fix_zero_rows" (rows the exact rule zeroes: ℓ underflows) and "fix_guard_rows" (rows whose shift the guard caps)."""
    cfg = model.config
    out = {k: [] for k in ("wq_norm", "wk_norm", "wq_norm_layer", "wk_norm_layer", "max_logit", "tie_rate",
                           "tie_rate_head", "tie_rate_tile", "delta_err_sum") + BACKEND_STATS + FIX_STATS}
    scale = 1.0 / math.sqrt(cfg.head_dim)
    for i, attn in enumerate(model.attn_layers):
        wq, wk = (w.detach().float() for w in model.qk_weights(i))
        out["wq_norm"].append(spectral_norm(wq).tolist())
        out["wk_norm"].append(spectral_norm(wk).tolist())
        out["wq_norm_layer"].append(spectral_norm(wq.reshape(-1, cfg.n_embd)).item())
        out["wk_norm_layer"].append(spectral_norm(wk.reshape(-1, cfg.n_embd)).item())
        c = attn.captured
        if not c:
            raise RuntimeError("collect_telemetry needs a forward with model.set_capture(True)")
        st = score_stats(c["q"], c["k"], scale)
        out["max_logit"].append(st["max_logit"])
        out["tie_rate"].append(st["tie_rate"])
        out["tie_rate_head"].append(st["tie_rate_head"].tolist())
        out["tie_rate_tile"].append(st["tie_rate_tile"])
        if "do" in c:
            out["delta_err_sum"].append(delta_error(c["q"], c["k"], c["v"], c["o"], c["do"], scale).tolist())
        else:
            out["delta_err_sum"].append([float("nan")] * cfg.n_head)
        for k_, v_ in backend_stats(c.get("stats") or {}, cfg.n_head).items():
            out[k_].append(v_)
        spec = attn.spec
        if spec.backend == "ours" and spec.fix in ("beta", "beta_split") and spec.heads is None:
            fs = fix_row_stats(c["q"], c["k"], numerics=spec.numerics, beta=spec.beta, tie_tol=spec.tie_tol,
                               max_shift=spec.max_shift, scale=scale)
        else:
            fs = dict.fromkeys(FIX_STATS, float("nan"))
        for k_ in FIX_STATS:
            out[k_].append(fs[k_])
    return out


# ----------------------------------------------------------------------------------------------------------------
# set-up helpers
# ----------------------------------------------------------------------------------------------------------------
def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # Fused AdamW on CUDA (as in the paper's code; elementwise, so deterministic, and few launches for a small,
    # launch-bound model); the default implementation on the CPU.
    fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps,
                             weight_decay=cfg.weight_decay, fused=fused or None)


def _evaluate(model: GPT, val: np.ndarray, cfg: TrainConfig, device, amp_dtype) -> float:
    """Mean validation loss over `eval_batches` batches of `batch_size` windows (`runtime.evaluate`)."""
    starts = data_mod.batch_starts(len(val), cfg.seq_len, cfg.batch_size, cfg.eval_batches, cfg.data_seed + 1)
    return runtime.evaluate(model, (data_mod.get_batch(val, row, cfg.seq_len, device) for row in starts), device,
                            amp_dtype)


# ----------------------------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------------------------
def train(cfg: TrainConfig, step_hook=None) -> dict:
    """Run one training run; returns a dict:

    "config" (the TrainConfig as a dict), "model_config", "seeds" {"torch", "data"}, "versions", "world_size",
    "loss" (per-step training loss, nats/byte, float list; global mean under DDP), "grad_norm" (per-step global
    grad norm before clipping), "lr" (per step), "telemetry" (dict of lists, one entry per telemetry step: "step",
    "loss", "grad_norm", and the per-layer / per-head lists of `collect_telemetry`), "val" {"step", "loss"},
    "stopped_at" (step of a non-finite loss, or None), "truncated_at" (steps done when `max_wall_s` ran out, or
    None), "starts_sha256", "n_params", "wall_s", "steps_per_s",
    "nondeterminism_warnings".

    `step_hook` (optional, rank 0 only) is called at two points of every step: ``step_hook.before_forward(step,
    model)`` just before the forward, and ``step_hook.after_backward(step, model, optimizer)`` after the backward and
    the gradient clipping, before the optimizer step (`lib.training.capture.CaptureHook` copies activations and
    gradients there).
    """
    rank, world, local_rank = dist_info()
    device = device_of(cfg, local_rank)
    set_determinism(cfg)
    amp_dtype = autocast_dtype(cfg, device)

    corpus = data_mod.load_corpus()
    train_bytes, val_bytes = data_mod.split(corpus, cfg.val_fraction)
    if cfg.starts_path:
        starts = data_mod.load_starts(cfg.starts_path)
        if starts.shape[0] < cfg.steps or starts.shape[1] != cfg.batch_size:
            raise ValueError(f"{cfg.starts_path}: batch order {starts.shape} does not cover {cfg.steps} steps of "
                             f"batch {cfg.batch_size}")
    else:
        starts = data_mod.batch_starts(len(train_bytes), cfg.seq_len, cfg.batch_size, cfg.steps, cfg.data_seed)
    import hashlib
    starts_sha = hashlib.sha256(np.ascontiguousarray(starts[:cfg.steps]).tobytes()).hexdigest()
    my_starts = data_mod.rank_slice(starts[:cfg.steps], rank, world)

    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config()).to(device)
    opt = make_optimizer(model, cfg)
    result = dict(loss=[], grad_norm=[], lr=[], telemetry={}, val=dict(step=[], loss=[]), stopped_at=None,
                  truncated_at=None)
    step0 = 0
    if cfg.resume:
        ck = torch.load(cfg.resume, map_location=device, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        step0 = ck["step"]
        for key in ("loss", "grad_norm", "lr", "telemetry", "val"):
            result[key] = ck["result"][key]
    ddp = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)

    out_dir = Path(cfg.out_dir) if cfg.out_dir else None
    if out_dir is not None and rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        data_mod.save_starts(out_dir / "starts.npy", starts[:cfg.steps])

    tele = result["telemetry"]
    pending_loss, pending_gn = [], []

    def flush():
        if pending_loss:
            ls = torch.stack(pending_loss).float()
            gs = torch.stack(pending_gn).float()
            if world > 1:
                import torch.distributed as dist
                dist.all_reduce(ls)
                ls /= world
            result["loss"].extend(ls.cpu().tolist())
            result["grad_norm"].extend(gs.cpu().tolist())
            pending_loss.clear()
            pending_gn.clear()
            if _PROGRESS is not None and rank == 0:   # a parent process shows every run's progress (run_many)
                _PROGRESS[cfg.label or cfg.attn] = (len(result["loss"]), cfg.steps, result["loss"][-1],
                                                    time.perf_counter() - t0)

    def save_ckpt(step, name="ckpt.pt"):
        if out_dir is None or rank != 0:
            return
        torch.save(dict(model=model.state_dict(), optimizer=opt.state_dict(), step=step, config=asdict(cfg),
                        result=result), out_dir / name)

    from tqdm.auto import tqdm
    bar = tqdm(total=cfg.steps, initial=step0, disable=not cfg.progress or rank != 0, mininterval=1.0,
               desc=cfg.label or cfg.attn, dynamic_ncols=True)
    log_tele = bool(os.environ.get("TRAIN_LOG_TELEMETRY")) and not cfg.progress
    t0 = time.perf_counter()
    caught = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.train()
        for step in range(step0, cfg.steps):
            is_tele = cfg.telemetry_every > 0 and (step % cfg.telemetry_every == 0 or step == cfg.steps - 1)
            lr = lr_at(cfg, step)
            x, y = data_mod.get_batch(train_bytes, my_starts[step], cfg.seq_len, device)
            model.set_step(step, cfg.seed)
            model.set_capture(is_tele and rank == 0)
            tel = {}

            def read_telemetry():   # weights as used in this step's forward (before the update)
                tel.update(collect_telemetry(model))
                model.set_capture(False)

            loss, gn = train_step(ddp, model, [opt], x, y, lr, device, amp_dtype, cfg.grad_clip, step=step,
                                  hook=step_hook if rank == 0 else None,
                                  before_update=read_telemetry if is_tele and rank == 0 else None)
            pending_loss.append(loss.detach())
            pending_gn.append(gn.detach())
            result["lr"].append(lr)
            t = tel
            if is_tele:
                flush()
                if rank == 0:
                    tele.setdefault("step", []).append(step)
                    tele.setdefault("loss", []).append(result["loss"][-1])
                    tele.setdefault("grad_norm", []).append(result["grad_norm"][-1])
                    for k_, v_ in t.items():
                        tele.setdefault(k_, []).append(v_)
                    bar.set_postfix(loss=f"{result['loss'][-1]:.3f}", gn=f"{result['grad_norm'][-1]:.2g}",
                                    tie=f"{max(t['tie_rate']):.3f}", refresh=False)
                    if log_tele:   # one line per telemetry step for logs of concurrent runs (no progress bar)
                        print(f"[{cfg.label or cfg.attn}] step {step} loss {result['loss'][-1]:.4f} "
                              f"gn {result['grad_norm'][-1]:.3g} {time.perf_counter() - t0:.0f} s", flush=True)
                if not math.isfinite(result["loss"][-1]) and cfg.stop_on_nonfinite:
                    result["stopped_at"] = step
                    bar.update(1)
                    break
            # The wall budget is checked every 10 steps, not only at telemetry steps: a slow run (the emulated kernel
            # path, many runs sharing one GPU) could otherwise overrun it by a whole telemetry interval.
            if cfg.max_wall_s and (step + 1) % 10 == 0 \
                    and agree(time.perf_counter() - t0 > cfg.max_wall_s, world, device):
                result["truncated_at"] = step + 1
                bar.update(1)
                break
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and cfg.eval_batches:
                result["val"]["step"].append(step + 1)
                result["val"]["loss"].append(_evaluate(model, val_bytes, cfg, device, amp_dtype))
            if cfg.ckpt_every and (step + 1) % cfg.ckpt_every == 0:
                flush()
                save_ckpt(step + 1, f"ckpt_step{step + 1}.pt")
            bar.update(1)
        flush()
        if result["stopped_at"] is None:
            nonfinite = [i for i, v in enumerate(result["loss"]) if not math.isfinite(v)]
            if nonfinite and cfg.stop_on_nonfinite:
                result["stopped_at"] = nonfinite[0]
        if cfg.eval_batches and (not result["val"]["step"] or result["val"]["step"][-1] != len(result["loss"])):
            result["val"]["step"].append(len(result["loss"]))
            result["val"]["loss"].append(_evaluate(model, val_bytes, cfg, device, amp_dtype))
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    bar.close()
    model.set_capture(False)
    result.update(
        config=asdict(cfg), model_config=cfg.model_config().to_dict(), seeds=dict(torch=cfg.seed, data=cfg.data_seed),
        versions=versions(), world_size=world, starts_sha256=starts_sha, n_params=model.num_params(),
        wall_s=wall, steps_per_s=(len(result["loss"]) - step0) / wall if wall > 0 else float("nan"),
        nondeterminism_warnings=sorted({str(w.message) for w in caught if "determinis" in str(w.message)}),
        device=str(device), autocast=str(amp_dtype) if amp_dtype else "none")
    if out_dir is not None and rank == 0:
        save_ckpt(len(result["loss"]))
        (out_dir / "telemetry.json").write_text(json.dumps(jsonable(result)))
    result["model"] = model
    return result


# ----------------------------------------------------------------------------------------------------------------
# several runs (sequential in this process, or concurrent processes sharing one GPU)
# ----------------------------------------------------------------------------------------------------------------
_PROGRESS = None   # a shared dict {run label: (steps done, steps, last loss, seconds)} set in run_many's workers


def _init_worker(progress) -> None:
    global _PROGRESS
    _PROGRESS = progress


def _worker(cfg: TrainConfig) -> dict:
    import traceback
    import lib.book.setup  # noqa: F401  (interpreter mode for the kernel on CPU-only machines)
    try:
        res = train(cfg)
    except Exception as e:  # noqa: BLE001  (one failing run must not lose the others' results)
        print(f"[run_many] {cfg.label or cfg.attn}: FAILED {type(e).__name__}: {e}", flush=True)
        return dict(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(), config=asdict(cfg))
    res.pop("model", None)
    last = res["loss"][-1] if res["loss"] else float("nan")
    print(f"[run_many] {cfg.label or cfg.attn}: {len(res['loss'])} steps, final loss {last:.4f}, "
          f"{res['steps_per_s']:.2f} steps/s, {res['wall_s']:.0f} s", flush=True)
    return res


def progress_lines(progress: dict, labels: list[str]) -> list[str]:
    """One line per run: label, steps done / steps, last loss, steps/s (runs not started yet say so)."""
    out = []
    for lab in labels:
        if lab in progress:
            done, total, loss, secs = progress[lab]
            rate = done / secs if secs > 0 else float("nan")
            out.append(f"  {lab:40s} {done:6d}/{total:<6d} loss {loss:7.4f}  {rate:6.2f} steps/s")
        else:
            out.append(f"  {lab:40s} waiting")
    return out


def run_many(cfgs: list[TrainConfig], workers: int = 1, status_every_s: float = 60.0) -> list[dict]:
    """Run `cfgs` and return their results (without the model objects), in order. A run that raises gives
    {"error", "traceback", "config"} instead of a result.

    workers == 1: one after another in this process. workers > 1: that many concurrent processes (spawned; on one
    GPU they share it, which is what keeps a many-arm experiment within minutes for a small model); every
    `status_every_s` seconds the parent prints one line per run (steps done, last loss, steps/s), from the runs'
    loss flushes (every telemetry step, so it costs no extra GPU synchronisation)."""
    return runtime.run_many(_worker, cfgs, workers, status_every_s, [c.label or c.attn for c in cfgs], _init_worker,
                            progress_lines)


# ----------------------------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------------------------
_HELP = {
    "attn": "attention per layer: one spec or a comma-separated list of n_layer specs; a spec is 'sdpa', 'naive' "
            "(FP32), '<fp32|fa2|paper>[/<Numerics field>=<value>...][+fix|+fix_split|+zero_rows]' for our kernel, "
            "'authors[/tile=N][/beta=B][/tie_tol=T][/floor=F][/zero_at=X][+fix|+zero_rows]' for the authors' "
            "PyTorch FA2, or 'dose/<placement>[/c=true|random|flip|bias|noise][/lam=L]' (see lib.training.model)",
    "zero_at": "shift above which '+zero_rows' zeroes a row (none: the backend's default)",
    "qk_norm": "LayerNorm on each head's q and k before attention",
    "batch_size": "global batch (windows per step), split evenly across DDP ranks",
    "seq_len": "window length in bytes (= tokens; also the model's block size)",
    "warmup": "linear warm-up steps",
    "schedule": "'constant' after warm-up, or 'cosine' to --min-lr at --steps",
    "autocast": "'auto' (BF16 on CUDA, none on CPU), 'bf16' or 'none'",
    "deterministic": "'warn' (record nondeterministic ops), 'strict' (raise on them) or 'off'",
    "seed": "torch seed of the model init", "data_seed": "numpy seed of the batch order",
    "starts_path": "replay a saved batch order (.npy of window starts, (steps, batch))",
    "telemetry_every": "telemetry every N steps (0: off)",
    "out_dir": "write telemetry.json, starts.npy and checkpoints here",
    "max_wall_s": "stop within 10 steps after this many seconds of training (0: no limit)",
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lib.training.train", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, default=f.default, action=argparse.BooleanOptionalAction,
                            help=_HELP.get(f.name, f.name.replace("_", " ")))
        else:
            typ = {"int": int, "float": float, "str": str,
                   "float | None": lambda v: None if v.lower() == "none" else float(v)}[f.type]
            ap.add_argument(flag, type=typ, default=f.default, help=_HELP.get(f.name, f.name.replace("_", " ")))
    return ap


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    import lib.book.setup  # noqa: F401
    cfg = TrainConfig(**vars(a))
    res = train(cfg)
    if res["world_size"] == 1 or int(os.environ.get("RANK", "0")) == 0:
        last = res["loss"][-1] if res["loss"] else float("nan")
        print(json.dumps(dict(final_loss=last, val=res["val"], stopped_at=res["stopped_at"],
                              steps_per_s=round(res["steps_per_s"], 3), out_dir=cfg.out_dir or None)))
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
