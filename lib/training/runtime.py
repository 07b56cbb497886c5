"""What every training loop needs of the machine and the run, and the step they share: the process group and the
device, the autocast dtype, determinism, the learning-rate schedule, the forward and backward of a step and its
gradient norm, the optimiser step built from them (`train_step`), several runs at once (`run_many`), the software versions a result records, and JSON-safe values. `lib.training.train` (the proxy studies' loop, `TrainConfig`) and `lib.training.loop` (the GPT-2 loop,
`RunConfig`) read the same fields of their configs here (device, autocast, deterministic, lr, min_lr, warmup,
schedule, steps), so one definition serves both; the lock-step driver of several runs (`lib.training.lockstep`) takes
its step from here too.
"""
from __future__ import annotations

import math
import os
import platform
import time

import numpy as np
import torch


def lr_at(cfg, step: int) -> float:
    """Learning rate of optimiser step `step` (0-based): linear warm-up over `cfg.warmup` steps, then constant or a
    cosine to `cfg.min_lr` at `cfg.steps` (`cfg.schedule`)."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup)
    frac = min(1.0, (step - cfg.warmup) / span)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * frac)) * (cfg.lr - cfg.min_lr)


def forward_backward(f, x, y, device: torch.device, amp_dtype, accum: int = 1, ddp=None) -> torch.Tensor:
    """One step's forward and backward of the windows x, y (batch, seq_len) through `f` (the model, or its compiled
    or DDP-wrapped form) under autocast to `amp_dtype` (None: none); returns the loss (a 0-d tensor, nats per token).
    With `accum` > 1 the windows go as that many micro-batches, each backward of loss/accum, and `ddp` (given under
    DDP) all-reduces the summed gradients after the last only; the loss is then the micro-batches' mean."""
    if accum == 1:
        with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32,
                            enabled=amp_dtype is not None):
            _, loss = f(x, y)
        loss.backward()
        return loss
    losses = []
    for xs, ys in zip(x.chunk(accum), y.chunk(accum)):
        if ddp is not None:     # as no_sync: DDP all-reduces after the last micro-batch only
            ddp.require_backward_grad_sync = len(losses) == accum - 1
        with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32,
                            enabled=amp_dtype is not None):
            _, loss = f(xs, ys)
        (loss / accum).backward()
        losses.append(loss.detach())
    return torch.stack(losses).mean()


def evaluate(model: torch.nn.Module, batches, device: torch.device, amp_dtype, micro_batch: int = 0) -> float:
    """Mean loss (nats per token) of `model` over `batches` (an iterable of windows x, y), without gradients, in eval
    mode (restored after), under autocast to `amp_dtype` (None: none); each batch in pieces of `micro_batch` windows
    (0: whole), its loss the pieces' mean."""
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.float32,
                                enabled=amp_dtype is not None):
                parts = [model(xs, ys)[1].item() for xs, ys in zip(x.split(micro_batch or len(x)),
                                                                  y.split(micro_batch or len(y)))]
                tot += sum(parts) / len(parts)
            n += 1
    model.train(was)
    return tot / n


def grad_norm(model: torch.nn.Module, grad_clip: float) -> torch.Tensor:
    """The global norm of `model`'s gradients before clipping (a 0-d tensor); with `grad_clip` > 0 the gradients are
    clipped to that norm."""
    if grad_clip > 0:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))


def train_step(f, model: torch.nn.Module, opts: list, x, y, lr, device: torch.device, amp_dtype,
               grad_clip: float, *, step: int = 0, hook=None, accum: int = 1, ddp=None, fallback=None,
               before_update=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimiser step of every loop, in this order: the learning rate `lr` (one float, or one per optimiser of
    `opts`) into every parameter group; ``hook.before_forward(step, model)``; the forward and backward of the
    windows x, y (batch, seq_len) through `f` (`forward_backward`, with `accum` micro-batches and DDP's `ddp`);
    the gradient norm and clipping to `grad_clip` (`grad_norm`); ``hook.after_backward(step, model, opts[-1])``;
    `before_update()` (a reader of this step's captures, such as the proxy loop's telemetry); then each optimiser's
    step and ``zero_grad``. `fallback(error)`, given, is called when the forward and backward raise (a compiler
    failure): it returns the module to train with instead, and the step is redone through it from zeroed
    gradients (the hook is not called again). Returns (loss, gradient norm before clipping), 0-d tensors."""
    lrs = lr if isinstance(lr, (list, tuple)) else [lr] * len(opts)
    for o, lr_o in zip(opts, lrs):
        for g in o.param_groups:
            g["lr"] = lr_o
    if hook is not None:
        hook.before_forward(step, model)
    try:
        loss = forward_backward(f, x, y, device, amp_dtype, accum, ddp)
    except Exception as e:  # noqa: BLE001  (only with a fallback: a compiler failure, said by the caller)
        if fallback is None:
            raise
        f = fallback(e)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss = forward_backward(f, x, y, device, amp_dtype, accum, ddp)
    gn = grad_norm(model, grad_clip)
    if hook is not None:
        hook.after_backward(step, model, opts[-1])
    if before_update is not None:
        before_update()
    for o in opts:
        o.step()
        o.zero_grad(set_to_none=True)
    return loss, gn


def versions() -> dict:
    """Python, torch, numpy, CUDA and Triton versions and the device name, as a result records them."""
    v = dict(python=platform.python_version(), torch=torch.__version__, numpy=np.__version__,
             cuda=torch.version.cuda, device=(torch.cuda.get_device_name(0) if torch.cuda.is_available()
                                              else f"cpu ({platform.machine()})"))
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        pass
    return v


def dist_info():
    """(rank, world_size, local_rank), initialising the process group from torchrun's environment if needed."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    ws = int(os.environ.get("WORLD_SIZE", "1"))
    if ws > 1:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    return 0, 1, 0


def agree(flag: bool, world: int, device) -> bool:
    """Rank 0's `flag` on every rank (so all ranks stop at the same step)."""
    if world == 1:
        return bool(flag)
    import torch.distributed as dist
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def device_of(cfg, local_rank: int) -> torch.device:
    """The run's device from `cfg.device` ("cpu", "cuda" or "auto"); on CUDA this rank's GPU, made current."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but CUDA is not available")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def autocast_dtype(cfg, device: torch.device):
    """torch.bfloat16 when `cfg.autocast` asks for BF16 autocast ("bf16", or "auto" on CUDA), else None."""
    if cfg.autocast == "bf16" or (cfg.autocast == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def set_determinism(cfg):
    """Deterministic algorithms per `cfg.deterministic` ("on", "warn" or "off"); TF32 off either way."""
    on = cfg.deterministic != "off"
    torch.use_deterministic_algorithms(on, warn_only=cfg.deterministic == "warn")
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = False
    # TF32 off, as in the paper's code: FP32 matmuls (naive attention, telemetry) stay FP32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def jsonable(x):
    """`x` with numpy arrays and scalars as Python values and non-finite floats as strings ("nan", "inf")."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (np.floating, np.integer)):
        return jsonable(x.item())
    return x


def run_many(worker, cfgs: list, workers: int = 1, status_every_s: float = 0.0, labels=None, init=None,
             lines=None) -> list:
    """`worker(cfg)` for each of `cfgs`, results in order: one after another in this process (workers ≤ 1), or as
    that many concurrent spawned processes (on one GPU they share it). With `init` (a function of one shared dict,
    run in each process first, where the loop reports its progress) and `status_every_s` > 0, every so many seconds
    the parent prints `lines(progress, labels)`: one line per run."""
    if workers <= 1 or len(cfgs) <= 1:
        return [worker(c) for c in cfgs]
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    if init is None:
        with ctx.Pool(processes=min(workers, len(cfgs))) as pool:
            return pool.map(worker, cfgs, chunksize=1)
    with ctx.Manager() as manager:
        progress = manager.dict()
        with ctx.Pool(processes=min(workers, len(cfgs)), initializer=init, initargs=(progress,)) as pool:
            job = pool.map_async(worker, cfgs, chunksize=1)
            t0 = time.perf_counter()
            while not job.ready():
                job.wait(status_every_s)
                if not job.ready():
                    snap = dict(progress)
                    print("\n".join([f"[run_many] {time.perf_counter() - t0:.0f} s"] + lines(snap, labels)),
                          flush=True)
            return job.get()
