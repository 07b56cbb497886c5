"""The one training loop: `train(RunConfig(...), observers, step_hook) -> dict`, nanoGPT's loop with a census.

Every training run of the book goes through it — the byte-level proxy (`lib.training.train.run_config` maps the
proxy studies' `TrainConfig`, which nests the same `GPTConfig`, onto `RunConfig` and `LoopOptions`), GPT-2 124M on a
BPE token corpus, the positive control and the bias injection — read top to bottom: data, model, optimiser, then
`for step in range(...)`: learning rate, batch, census, the optimiser step (`lib.training.runtime.train_step`:
forward and backward under BF16 autocast, clip, the step hook, the step's own telemetry, update), the losses read
back, evaluation, limits, checkpoint. (`train_lm` is the
same function under the name the GPT-2 studies knew it by.)

* **Config**: `RunConfig` nests the model's `GPTConfig` (`model=GPTConfig(...)`), so the model's fields are declared
  once. `asdict(cfg)` is the record.
* **Data**: "bytes" (the pinned byte corpus, `lib.training.data`) or "tokens" (a GPT-2 BPE corpus directory built by
  `lib.training.token_corpus`; documents are split whole into train/val). `n_bos` BOS tokens (id `bos_id`) are put
  at the start of every window (their own targets are ignored), the lever of the positive control: with
  `pos="none"` they share one hidden state in every layer, so their keys tie exactly and their V rows are equal.
* **Optimiser**: AdamW (β = (0.9, 0.95), fused on CUDA) or Muon for the 2-D weight matrices of the blocks with AdamW
  for the rest (`optimizer="muon"`); linear warm-up, then constant or cosine (`lib.training.runtime.lr_at`).
* **Observers** (the census): every `census_every` steps the loop runs the eager model without gradient on the
  first `census_rows` windows of the step's batch, with capture on, and hands q, k, v of every layer to each
  observer's `observe(step, model) -> dict`. The default observer is the census of the bias's preconditions
  (`CensusObserver`: `lib.census.precondition_census` per layer and placement, and σ₁ of each head's W_Q). A
  `step_hook` with the old harness's interface (`before_forward(step, model)`, `after_backward(step, model, opt)`)
  sees the training step itself (the injection study measures Δδ and the dW_Q error there).
* **Speed**: `compile=True` wraps the model in `torch.compile` (observers use the eager module, which shares the
  parameters); TF32 off, so FP32 matmuls stay FP32.
* **The step's own telemetry** (`LoopOptions.telemetry_every`, the proxy studies'): that step's forward runs with capture on
  and `lib.training.telemetry.collect_telemetry` reads it after the clipping, before the update, into
  "telemetry". Losses are read back from the device every `LoopOptions.flush_every` steps and at the last, and at every census
  and telemetry step (`flush_every=0`: only there, as the proxy loop did); a non-finite loss stops the run at the
  read-back that sees it (`stop_on_nonfinite`), and one no read-back saw is still recorded as "stopped_at".
* **Length**: `steps`, and two machine limits recorded when they bind: `max_wall_s` (`truncated_at`) and
  `max_tokens`. `ckpt_path` + `ckpt_every_s`: a checkpoint (model, optimiser, result so far) on local disk every so
  many seconds and at the end; a run whose checkpoint exists resumes from it, so a run longer than one GPU call is
  continued by the next call on the same machine.
* **DDP** under torchrun as in `lib.training.train` (each rank its slice of every global batch; observers on rank 0).
  With `micro_batch` set, each rank runs its slice as `batch_size / (world × micro_batch)` forward/backward passes of
  `micro_batch` windows (gradient accumulation; DDP all-reduces after the last only), so the tokens per step stay
  `batch_size × seq_len` whatever the world size. Without it (0) a rank's slice is one pass, as before.

The result records measurements only (per-step loss, grad norm, lr, tokens seen; validation loss; the observers'
records as arrays); outcomes are judged when results are read (`lib.training.outcome.classify`).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from lib.training import data as data_mod
from lib.training.model import GPT, GPTConfig, build_lm
from lib.training.spec import record as spec_record
from lib.training import runtime
from lib.training.runtime import (agree, autocast_dtype, device_of, dist_info, lr_at, set_determinism, train_step,
                                  versions)
from lib.training.telemetry import collect_telemetry

OPTIMIZERS = ("adamw", "muon")


@dataclass
class RunConfig:
    """Everything that defines a run of `train_lm`. Lengths in tokens; `batch_size` is global (split over ranks)."""
    model: GPTConfig = field(default_factory=GPTConfig)
    data: str = "bytes"              # "bytes" | "tokens"
    corpus_dir: str = ""             # "tokens": a built token corpus directory (lib.training.token_corpus)
    n_bos: int = 0                   # BOS tokens at the start of every window
    bos_id: int = -1                 # their id (-1: the last id of the model's vocabulary)
    # optimisation
    steps: int = 1000
    batch_size: int = 32
    micro_batch: int = 0             # windows per forward/backward on a rank (0: the rank's whole slice at once)
    optimizer: str = "adamw"
    lr: float = 1e-3
    muon_lr: float = 0.02            # Muon's learning rate for the blocks' matrices (optimizer="muon")
    warmup: int = 200
    schedule: str = "constant"
    min_lr: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    # seeds, data split
    seed: int = 0
    data_seed: int = 0
    val_fraction: float = 0.05
    # device
    device: str = "auto"
    autocast: str = "auto"
    compile: bool = False
    # observers, evaluation
    census_every: int = 100          # 0: no census
    census_rows: int = 4             # windows of the step's batch the census reads
    census_placements: tuple = ("authors", "fa2")
    probe_every: int = 0             # chapters 4–5's measurements every N steps (lib.training.chain_probe; 0: off)
    probe_layers: tuple | None = None
    probe_rows: int = 4
    eval_every: int = 0
    eval_batches: int = 4
    # limits and checkpoints
    max_wall_s: float = 0.0
    max_tokens: int = 0
    ckpt_path: str = ""
    ckpt_every_s: float = 0.0
    label: str = ""

    def __post_init__(self):
        if isinstance(self.model, dict):
            self.model = GPTConfig(**self.model)
        if self.data not in ("bytes", "tokens"):
            raise ValueError(f"data must be 'bytes' or 'tokens', got {self.data!r}")
        if self.data == "tokens" and not self.corpus_dir:
            raise ValueError("data='tokens' needs corpus_dir")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine', got {self.schedule!r}")
        for name in ("steps", "batch_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.micro_batch < 0 or (self.micro_batch and self.batch_size % self.micro_batch):
            raise ValueError(f"micro_batch must be 0 or divide batch_size {self.batch_size}, got {self.micro_batch!r}")
        if not 0 <= self.n_bos < self.model.block_size:
            raise ValueError(f"n_bos must be in [0, block_size), got {self.n_bos}")
        if self.n_bos and self.bos_id >= self.model.vocab_size:
            raise ValueError(f"bos_id {self.bos_id} outside the vocabulary of {self.model.vocab_size}")
        self.census_placements = tuple(self.census_placements)
        if self.probe_layers is not None:
            self.probe_layers = tuple(int(l) for l in self.probe_layers)

    @property
    def seq_len(self) -> int:
        return self.model.block_size

    @property
    def bos(self) -> int:
        return self.model.vocab_size - 1 if self.bos_id < 0 else self.bos_id

    def grad_accum(self, world: int = 1) -> int:
        """Forward/backward passes per step on each of `world` ranks: batch_size / (world × micro_batch), or 1
        without `micro_batch`."""
        if not self.micro_batch:
            return 1
        n, rem = divmod(self.batch_size, world * self.micro_batch)
        if rem or not n:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of {world} ranks × micro_batch "
                             f"{self.micro_batch}")
        return n

    def record(self) -> dict:
        # micro_batch only when set: the records of runs made before it existed stay what they were.
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "micro_batch" or self.micro_batch}
        d["model"] = spec_record(self.model)      # asdict, with any layer spec's Fix kept flat as before
        d["census_placements"] = list(self.census_placements)
        d["probe_layers"] = None if self.probe_layers is None else list(self.probe_layers)
        return d


@dataclass
class LoopOptions:
    """What the proxy studies ask of the loop besides their run's config (`lib.training.train.run_config` sets them
    from a `TrainConfig`); the defaults are the loop as the GPT-2 studies run it. Kept apart from `RunConfig`, whose
    record the GPT-2 results carry."""
    build: str = "lm"                # "lm": `build_lm` (custom ops, the two-stage build's draws); "gpt": GPT(model)
    telemetry_every: int = 0         # the telemetry of the step itself (`lib.training.telemetry`) every N steps
    flush_every: int = 50            # losses read back (and checked) every N steps and at the last (0: only at
                                     # census and telemetry steps)
    stop_on_nonfinite: bool = True   # stop at the first read-back that sees a non-finite loss
    deterministic: str | None = None  # "warn", "strict" or "off" (`runtime.set_determinism`); None: as they are
    starts_path: str = ""            # replay a saved batch order (.npy, (steps, batch)) instead of drawing one
    out_dir: str = ""                # starts.npy, ckpt.pt at the end and ckpt_step<N>.pt every `ckpt_every` steps
    ckpt_every: int = 0
    resume: str = ""                 # a checkpoint to resume from (besides `ckpt_path`'s own)
    progress: bool = False           # a progress bar

    def __post_init__(self):
        if self.build not in ("lm", "gpt"):
            raise ValueError(f"build must be 'lm' or 'gpt', got {self.build!r}")
        for name in ("telemetry_every", "flush_every", "ckpt_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


# ----------------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------------
def load_data(cfg: RunConfig) -> tuple[np.ndarray, np.ndarray, dict]:
    """(train, val, info): 1-D integer arrays of token ids and what identifies them."""
    if cfg.data == "bytes":
        corpus = data_mod.load_corpus()
        train, val = data_mod.split(corpus, cfg.val_fraction)
        return train, val, dict(corpus="pystdlib bytes", sha256=data_mod.CORPUS_SHA256, n_tokens=int(len(corpus)))
    from lib.training import token_corpus
    tokens, manifest = token_corpus.load_token_corpus(cfg.corpus_dir)
    offsets = token_corpus.load_doc_offsets(cfg.corpus_dir)
    # One split for every run (seed 0, not the run's data seed), so validation losses compare across seeds.
    train, val = token_corpus.split_documents(tokens, offsets, cfg.val_fraction, 0)
    return train, val, dict(corpus="token corpus", manifest=manifest)


def get_batch(tokens: np.ndarray, starts: np.ndarray, cfg: RunConfig, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows (x, y), each (batch, seq_len) int64, starting at `starts`; with `n_bos` the first n_bos inputs are BOS
    and the window's tokens follow (the targets of the first n_bos − 1 positions are ignored: −100)."""
    n = cfg.n_bos
    x, y = data_mod.get_batch(tokens, starts, cfg.seq_len - n, device)
    if n:
        b = x.shape[0]
        x = torch.cat([torch.full((b, n), cfg.bos, dtype=x.dtype, device=x.device), x], dim=1)
        y = torch.cat([torch.full((b, n - 1), -100, dtype=y.dtype, device=y.device), x[:, n:n + 1], y], dim=1)
    return x, y


# ----------------------------------------------------------------------------------------------------------------
# optimiser
# ----------------------------------------------------------------------------------------------------------------
def make_optimizers(model: torch.nn.Module, cfg: RunConfig) -> list[torch.optim.Optimizer]:
    """AdamW on everything, or Muon on the blocks' 2-D matrices (c_attn, c_proj, c_fc) and AdamW on the rest."""
    fused = next(model.parameters()).device.type == "cuda" or None
    adam = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay, fused=fused)
    if cfg.optimizer == "adamw":
        return [torch.optim.AdamW(model.parameters(), **adam)]
    mats = [p for n, p in model.named_parameters() if p.ndim == 2 and ".h." in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and ".h." in n)]
    return [torch.optim.Muon(mats, lr=cfg.muon_lr, weight_decay=cfg.weight_decay, adjust_lr_fn="match_rms_adamw"),
            torch.optim.AdamW(rest, **adam)]


# ----------------------------------------------------------------------------------------------------------------
# observers
# ----------------------------------------------------------------------------------------------------------------
def power_sigma(w: torch.Tensor, vec: torch.Tensor | None, iters: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """σ₁ of each matrix of w (H, D, C) by power iteration on WᵀW in FP32, warm-started from `vec` (H, C) (None: a
    fixed start); returns (σ₁ (H,), the new vectors (H, C)). A few iterations per call suffice when the vectors persist
    across calls and W changes slowly."""
    w = w.detach().float()
    x = torch.ones(w.shape[0], w.shape[2], device=w.device) if vec is None else vec
    for _ in range(iters):
        x = torch.einsum("hdc,hd->hc", w, torch.einsum("hdc,hc->hd", w, x))
        x = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return torch.einsum("hdc,hc->hd", w, x).norm(dim=-1), x


class CensusObserver:
    """The census of the bias's preconditions on every layer (or `layers`), for each placement, plus the largest
    logit and σ₁ of each head's W_Q (power iteration). `observe` returns {"<placement>/<key>": (L, H) array, ...,
    "wq_sigma": (L, H)}."""

    def __init__(self, placements=("authors", "fa2"), layers=None, sigma_iters: int = 4):
        self.placements, self.layers, self.iters = tuple(placements), layers, sigma_iters
        self._vec = {}

    @torch.no_grad()
    def observe(self, step: int, model) -> dict:
        from lib.census import precondition_census
        layers = range(len(model.attn_layers)) if self.layers is None else self.layers
        out: dict = {}
        for li in layers:
            cap = model.attn_layers[li].captured
            # The census is defined on BF16 q, k, v (what autocast gives on the GPU); an FP32 run (the CPU) is read
            # at its values rounded to BF16.
            q, k, v = (cap[n].to(torch.bfloat16) for n in ("q", "k", "v"))
            for p in self.placements:
                c = precondition_census(q, k, v, causal=True, placement=p)
                for key, val in c.items():
                    if np.ndim(val) >= 1 and np.shape(val)[0] == q.shape[1]:
                        out.setdefault(f"{p}/{key}", []).append(np.asarray(val, dtype=np.float64))
            wq, _ = model.qk_weights(li)
            s, self._vec[li] = power_sigma(wq, self._vec.get(li), self.iters)
            out.setdefault("wq_sigma", []).append(s.cpu().double().numpy())
        return {k: np.stack(v) for k, v in out.items()}


@torch.no_grad()
def run_observers(observers, step: int, model, x: torch.Tensor, amp_dtype) -> dict:
    """Eager forward of `model` on the windows x with capture on, then every observer's record (merged)."""
    was = model.training
    model.eval()
    model.set_capture(True)
    try:
        with torch.autocast(device_type=x.device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            model(x)
        rec = {}
        for ob in observers:
            rec.update(ob.observe(step, model))
    finally:
        model.set_capture(False)
        model.train(was)
    return rec


# ----------------------------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------------------------
def _evaluate(model, val, cfg: RunConfig, device, amp_dtype) -> float:
    """Mean validation loss over `eval_batches` batches of `batch_size` windows (in pieces of `micro_batch`;
    `runtime.evaluate`)."""
    starts = data_mod.batch_starts(len(val), cfg.seq_len, cfg.batch_size, cfg.eval_batches, cfg.data_seed + 1)
    return runtime.evaluate(model, (get_batch(val, row, cfg, device) for row in starts), device, amp_dtype,
                            cfg.micro_batch)


def every(n: int, step: int, steps: int) -> bool:
    """Whether `step` (0-based, of `steps`) is an event of a schedule every `n` steps: step 0, every n-th and the
    last; never when n = 0."""
    return bool(n) and (step % n == 0 or step == steps - 1)


_PROGRESS = None   # a shared dict {run label: (steps done, steps, last loss, seconds)} set in run_many's workers


def _init_worker(progress) -> None:
    global _PROGRESS
    _PROGRESS = progress


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


def _load_starts(cfg: RunConfig, n_train: int, starts_path: str = "") -> np.ndarray:
    """The run's batch order, (steps, batch_size) window starts: replayed from `starts_path` (.npy), or drawn."""
    if starts_path:
        starts = data_mod.load_starts(starts_path)
        if starts.shape[0] < cfg.steps or starts.shape[1] != cfg.batch_size:
            raise ValueError(f"{starts_path}: batch order {starts.shape} does not cover {cfg.steps} steps of "
                             f"batch {cfg.batch_size}")
        return starts[:cfg.steps]
    return data_mod.batch_starts(n_train, cfg.seq_len - cfg.n_bos, cfg.batch_size, cfg.steps, cfg.data_seed)


def train(cfg: RunConfig, observers=None, step_hook=None, options: LoopOptions | None = None) -> dict:
    """Run one training run (module docstring); returns the result dict: "config", "seeds", "versions", "n_params",
    "data" (what identifies the corpus), "loss", "grad_norm", "lr" (per step), "tokens_per_step", "val" {"step",
    "loss"}, "census" {"step": [...], key: (E, L, H) arrays}, "telemetry" {"step", "loss", "grad_norm", and per
    telemetry step the lists of `lib.training.telemetry.collect_telemetry`}, "stopped_at", "truncated_at",
    "wall_s", "tokens_per_s", "steps_per_s", "world_size", "resumed_from", "starts_sha256", "device", "autocast",
    and "grad_accum" when above 1 (a step hook then sees the step's last micro-batch). `options`: the proxy studies'
    ways (`LoopOptions`; None: the defaults)."""
    opt = LoopOptions() if options is None else options
    rank, world, local_rank = dist_info()
    device = device_of(cfg, local_rank)
    if opt.deterministic is not None:
        set_determinism(opt)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    amp_dtype = autocast_dtype(cfg, device)
    observers = [CensusObserver(cfg.census_placements)] if observers is None else list(observers)
    probe = None
    if step_hook is None and cfg.probe_every:
        from lib.training.chain_probe import ChainProbe
        probe = step_hook = ChainProbe(every=cfg.probe_every, layers=cfg.probe_layers, rows=cfg.probe_rows,
                                       steps=(cfg.steps - 1,))

    train_tok, val_tok, data_info = load_data(cfg)
    starts = _load_starts(cfg, len(train_tok), opt.starts_path)
    my_starts = data_mod.rank_slice(starts, rank, world)
    out_dir = Path(opt.out_dir) if opt.out_dir else None
    if out_dir is not None and rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        data_mod.save_starts(out_dir / "starts.npy", starts)

    torch.manual_seed(cfg.seed)
    model = (build_lm(cfg.model) if opt.build == "lm" else GPT(cfg.model)).to(device)
    opts = make_optimizers(model, cfg)
    res = dict(loss=[], grad_norm=[], lr=[], val=dict(step=[], loss=[]), census=dict(step=[]), telemetry={},
               probe=[], stopped_at=None, truncated_at=None, resumed_from=None)
    step0 = 0
    ckpt = Path(cfg.ckpt_path) if cfg.ckpt_path else None
    resume = Path(opt.resume) if opt.resume else ckpt if ckpt is not None and ckpt.exists() else None
    if resume is not None:
        ck = torch.load(resume, map_location=device, weights_only=False)
        model.load_state_dict(ck["model"])
        for o, st in zip(opts, ck["optimizers"]):
            o.load_state_dict(st)
        res, step0 = ck["result"], ck["step"]
        res.setdefault("telemetry", {})
        res["resumed_from"] = step0
        if probe is not None:
            probe.records = res["probe"]
    accum = cfg.grad_accum(world)
    fwd = ddp = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        fwd = ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    if cfg.compile:
        fwd = torch.compile(fwd)

    def save(step, path):
        if path is None or rank != 0:
            return
        if probe is not None:
            res["probe"] = probe.records
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(dict(model=model.state_dict(), optimizers=[o.state_dict() for o in opts], step=step,
                        config=cfg.record(), result=res), tmp)
        tmp.replace(path)

    tokens_per_step = cfg.batch_size * (cfg.seq_len - cfg.n_bos)
    # Only the dose and injection backends read the step (their random signs and rows); others never see it, and a
    # compiled graph would otherwise be guarded on an object that changes every step.
    needs_step = any(getattr(s, "backend", None) in ("inject", "dose") for s in cfg.model.layer_specs())
    pending = []
    tele = res["telemetry"]
    label = cfg.label or cfg.model.attn

    def flush():
        """The pending (loss, grad norm) pairs into the result; the loss as the mean over ranks (a collective: every
        rank flushes at the same steps)."""
        vals = torch.stack(pending)
        if world > 1:
            import torch.distributed as dist
            mean = vals[:, 0].contiguous()
            dist.all_reduce(mean)
            vals[:, 0] = mean / world
        vals = vals.cpu().tolist()
        res["loss"].extend(v[0] for v in vals)
        res["grad_norm"].extend(v[1] for v in vals)
        pending.clear()
        if _PROGRESS is not None and rank == 0:     # a parent process shows every run's progress (run_many)
            _PROGRESS[label] = (len(res["loss"]), cfg.steps, res["loss"][-1], time.perf_counter() - t0)

    def eager(e):           # a compiler failure at the first step: train eagerly, say so
        nonlocal fwd
        res["compile_error"] = f"{type(e).__name__}: {str(e)[:500]}"
        print(f"[{cfg.label}] torch.compile failed at the first step, training eagerly: {res['compile_error']}",
              flush=True)
        fwd = ddp
        return fwd

    from tqdm.auto import tqdm
    bar = tqdm(total=cfg.steps, initial=step0, disable=not opt.progress or rank != 0, mininterval=1.0, desc=label,
               dynamic_ncols=True)
    log_tele = bool(os.environ.get("TRAIN_LOG_TELEMETRY")) and not opt.progress
    t0 = last_ckpt = time.perf_counter()
    model.train()
    step = step0
    for step in range(step0, cfg.steps):
        lr = lr_at(cfg, step)
        lrs = [lr * (cfg.muon_lr / cfg.lr if isinstance(o, getattr(torch.optim, "Muon", ())) else 1.0) for o in opts]
        x, y = get_batch(train_tok, my_starts[step], cfg, device)
        census_step = every(cfg.census_every, step, cfg.steps)
        if census_step and rank == 0:
            rec = run_observers(observers, step, model, x[:cfg.census_rows], amp_dtype)
            res["census"]["step"].append(step)
            for k_, v_ in rec.items():
                res["census"].setdefault(k_, []).append(v_)
        if needs_step:
            model.set_step(step, cfg.seed)
        # The step's own telemetry: its forward captures q, k, v, O (and the backward dO), read after the clipping.
        tele_step = every(opt.telemetry_every, step, cfg.steps)
        if opt.telemetry_every:
            model.set_capture(tele_step and rank == 0)
        seen = {}

        def read_telemetry():   # weights as used in this step's forward (before the update)
            seen.update(collect_telemetry(model))
            model.set_capture(False)

        loss, gn = train_step(fwd, model, opts, x, y, lrs, device, amp_dtype, cfg.grad_clip, step=step,
                              hook=step_hook if rank == 0 else None, accum=accum, ddp=ddp if world > 1 else None,
                              fallback=eager if fwd is not ddp and step == step0 else None,
                              before_update=read_telemetry if tele_step and rank == 0 else None)
        pending.append(torch.stack([loss.detach().float(), gn.detach().float()]))
        res["lr"].append(lr)
        if census_step or tele_step or (opt.flush_every and (len(pending) >= opt.flush_every
                                                             or step == cfg.steps - 1)):
            flush()
            if tele_step and rank == 0:
                for k_, v_ in dict(step=step, loss=res["loss"][-1], grad_norm=res["grad_norm"][-1], **seen).items():
                    tele.setdefault(k_, []).append(v_)
                bar.set_postfix(loss=f"{res['loss'][-1]:.3f}", gn=f"{res['grad_norm'][-1]:.2g}",
                                tie=f"{max(seen['tie_rate']):.3f}", refresh=False)
                if log_tele:   # one line per telemetry step for logs of concurrent runs (no progress bar)
                    print(f"[{label}] step {step} loss {res['loss'][-1]:.4f} gn {res['grad_norm'][-1]:.3g} "
                          f"{time.perf_counter() - t0:.0f} s", flush=True)
            if opt.stop_on_nonfinite and not math.isfinite(res["loss"][-1]):
                res["stopped_at"] = step
                bar.update(1)
                break
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and cfg.eval_batches:
            res["val"]["step"].append(step + 1)
            res["val"]["loss"].append(_evaluate(model, val_tok, cfg, device, amp_dtype))
        bar.update(1)
        now = time.perf_counter()
        # The limits are checked every 10 steps, not only at telemetry steps: a slow run (the emulated kernel path,
        # many runs sharing one GPU) could otherwise overrun its wall budget by a whole telemetry interval.
        if (step + 1) % 10 == 0:
            if cfg.max_wall_s and agree(now - t0 > cfg.max_wall_s, world, device):
                res["truncated_at"] = step + 1
                break
            if cfg.max_tokens and (step + 1) * tokens_per_step >= cfg.max_tokens:
                res["truncated_at"] = step + 1
                break
            if cfg.ckpt_every_s and now - last_ckpt > cfg.ckpt_every_s:
                save(step + 1, ckpt)
                last_ckpt = now
        if opt.ckpt_every and (step + 1) % opt.ckpt_every == 0:
            flush()
            save(step + 1, None if out_dir is None else out_dir / f"ckpt_step{step + 1}.pt")
    if probe is not None:
        res["probe"] = probe.records
    if pending:
        flush()
    if res["stopped_at"] is None and opt.stop_on_nonfinite:     # a non-finite loss no read-back checked
        res["stopped_at"] = next((i for i, v in enumerate(res["loss"]) if not math.isfinite(v)), None)
    done = len(res["loss"])
    if cfg.eval_batches and (not res["val"]["step"] or res["val"]["step"][-1] != done):
        res["val"]["step"].append(done)
        res["val"]["loss"].append(_evaluate(model, val_tok, cfg, device, amp_dtype))
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    bar.close()
    model.set_capture(False)
    save(done, ckpt)
    save(done, None if out_dir is None else out_dir / "ckpt.pt")
    steps_run = done - step0
    res.update(config=cfg.record(), seeds=dict(torch=cfg.seed, data=cfg.data_seed), versions=versions(),
               n_params=model.num_params(), data=data_info, tokens_per_step=tokens_per_step, world_size=world,
               wall_s=wall, steps_per_s=steps_run / wall if wall > 0 else float("nan"),
               tokens_per_s=steps_run * tokens_per_step / wall if wall > 0 else float("nan"),
               starts_sha256=hashlib.sha256(np.ascontiguousarray(starts).tobytes()).hexdigest(), device=str(device),
               autocast=str(amp_dtype) if amp_dtype else "none")
    if accum > 1:
        res["grad_accum"] = accum
    res["model"] = model
    return res


train_lm = train    # the name its callers knew it by


def census_arrays(census: dict) -> dict:
    """The census record of a result as arrays: {"step": (E,), key: (E, L, H)} (events × layers × heads)."""
    out = {"step": np.asarray(census["step"], dtype=np.int64)}
    for k, v in census.items():
        if k != "step" and len(v):
            # FP32 keeps every count exact (< 2^24) and halves the result files (GPT-2: 12 layers × 12 heads × events)
            out[k] = np.stack([np.asarray(e) for e in v]).astype(np.float32)
    return out


# ----------------------------------------------------------------------------------------------------------------
# several runs at once (concurrent processes sharing one GPU)
# ----------------------------------------------------------------------------------------------------------------
def _worker(cfg: RunConfig) -> dict:
    import traceback
    import lib.book.setup  # noqa: F401  (interpreter mode for the kernels on CPU-only machines)
    try:
        res = train_lm(cfg)
    except Exception as e:  # noqa: BLE001  (one failing run must not lose the others')
        print(f"[run_many] {cfg.label}: FAILED {type(e).__name__}: {e}", flush=True)
        return dict(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(), config=cfg.record())
    res.pop("model", None)
    print(f"[run_many] {cfg.label}: {len(res['loss'])} steps, final loss {res['loss'][-1]:.4f}, "
          f"{res['tokens_per_s']:.0f} tokens/s, {res['wall_s']:.0f} s", flush=True)
    return res


def run_many(cfgs: list[RunConfig], workers: int = 1) -> list[dict]:
    """Run `cfgs` in order (workers = 1) or as that many concurrent spawned processes (one GPU shared); a run that
    raises gives {"error", "traceback", "config"}."""
    return runtime.run_many(_worker, cfgs, workers)


def save_json(res: dict, path: Path | str) -> Path:
    """The result without the model, as JSON (non-finite floats as strings)."""
    from lib.training.runtime import jsonable
    path = Path(path)
    path.write_text(json.dumps(jsonable({k: v for k, v in res.items() if k != "model"})))
    return path


if __name__ == "__main__":   # a quick CPU smoke run: python -m lib.training.loop
    os.environ.setdefault("TRITON_INTERPRET", "1")
    r = train_lm(RunConfig(model=GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32), steps=20, batch_size=4,
                           census_every=10, eval_batches=1))
    print(len(r["loss"]), r["loss"][-1], sorted(r["census"]))


def pack_runs(results: list[dict], labels: list[str]) -> tuple[list[dict], dict]:
    """Results of `train_lm` / `run_many` -> (runs, arrays) for `lib.book.results`: one JSON-able record per run
    (label, config, sizes, timings, validation curve, limits that bound, or the error) and the arrays
    "<label>__loss", "<label>__grad_norm" (per step, FP32) and "<label>__census__<key>" (events × layers × heads;
    "<label>__census__step" the event steps)."""
    runs, arrays = [], {}
    for lab, r in zip(labels, results):
        if "error" in r:
            runs.append(dict(label=lab, error=r["error"], config=r.get("config")))
            continue
        runs.append(dict(label=lab, config=r["config"], n_params=r["n_params"], data=r["data"],
                         tokens_per_step=r["tokens_per_step"], steps=len(r["loss"]),
                         tokens=len(r["loss"]) * r["tokens_per_step"], val=r["val"], wall_s=r["wall_s"],
                         tokens_per_s=r["tokens_per_s"], steps_per_s=r["steps_per_s"], stopped_at=r["stopped_at"],
                         truncated_at=r["truncated_at"], resumed_from=r["resumed_from"], versions=r["versions"],
                         world_size=r["world_size"]))
        arrays[f"{lab}__loss"] = np.asarray(r["loss"], dtype=np.float32)
        arrays[f"{lab}__grad_norm"] = np.asarray(r["grad_norm"], dtype=np.float32)
        for k, v in census_arrays(r["census"]).items():
            arrays[f"{lab}__census__{k}"] = v
        if r.get("probe"):
            from lib.training.chain_probe import records_arrays
            for k, v in records_arrays(r["probe"]).items():
                arrays[f"{lab}__probe__{k}"] = v
    return runs, arrays


def unpack_run(arrays: dict, label: str) -> dict:
    """The arrays of run `label` from `pack_runs`: {"loss", "grad_norm", "census": {key: array}, "probe": {...}}."""
    def part(name):
        pre = f"{label}__{name}__"
        return {k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)}
    return dict(loss=arrays[f"{label}__loss"], grad_norm=arrays[f"{label}__grad_norm"], census=part("census"),
                probe=part("probe"))


def configs_from_regimes(base: dict, regimes: list[dict]) -> list[RunConfig]:
    """One RunConfig per (regime, seed), labelled "<regime>:s<seed>". `base`: fields of RunConfig and GPTConfig
    together; each regime: {"label", "seeds", and the fields it changes}."""
    model_fields = {f.name for f in fields(GPTConfig)}
    run_fields = {f.name for f in fields(RunConfig)} - {"model"}
    out = []
    for reg in regimes:
        change = {k: v for k, v in reg.items() if k not in ("label", "seeds")}
        unknown = set(change) - model_fields - run_fields
        if unknown:
            raise ValueError(f"regime {reg['label']!r}: unknown fields {sorted(unknown)}")
        merged = dict(base) | change
        model = GPTConfig(**{k: v for k, v in merged.items() if k in model_fields})
        run_kw = {k: v for k, v in merged.items() if k in run_fields}
        for s in reg["seeds"]:
            out.append(RunConfig(**(run_kw | dict(model=model, seed=s, data_seed=s, label=f"{reg['label']}:s{s}"))))
    return out
