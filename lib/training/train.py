"""The proxy studies' runs: the small byte-level GPT (`lib.training.model`) on the pinned corpus (`lib.training.data`).

`train(TrainConfig(...)) -> dict` runs the one training loop (`lib.training.loop.train`; `run_config` maps the
config onto its `RunConfig`). A `TrainConfig` nests its model (`GPTConfig`, byte-level: `byte_model`), as `RunConfig`
does; the proxy studies' registry entries, their results' records and the command line name the model's fields flat
(`n_layer`, `seq_len`, `attn`, `beta`, ...), mapped in one place (`TrainConfig.flat`, `TrainConfig.record`,
`MODEL_KEYS`). The run: AdamW (β = (0.9, 0.95), ε = 1e-8, weight decay 0 by default) with a linear warm-up then
a constant (or cosine) learning rate, global grad-norm clipping (1.0), BF16 autocast on CUDA with FP32 master weights
(FP32 throughout on the CPU unless `autocast="bf16"`), optional checkpoints, a tqdm bar, and telemetry of the step
itself every `telemetry_every` steps (`lib.training.telemetry.collect_telemetry`). Under `torchrun` (WORLD_SIZE > 1)
it runs DistributedDataParallel (gloo on CPU, nccl on CUDA); each rank takes its slice of the recorded global batch
order.

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

Command line: ``python -m lib.training.train --help`` (every flat key is a flag).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

# cuBLAS reads this when its first handle is made; it must be set before any CUDA matmul for deterministic GEMMs.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

from lib.training import loop, runtime  # noqa: E402
from lib.training.loop import _init_worker, progress_lines  # noqa: E402,F401  (progress_lines: read from here too)
from lib.training.model import GPTConfig  # noqa: E402
from lib.training.runtime import dist_info, jsonable, lr_at  # noqa: E402,F401  (lr_at: read from here too)
from lib.training.telemetry import collect_telemetry, delta_error, score_stats  # noqa: E402,F401  (read from here)

_SCHEDULES = ("constant", "cosine")
_AUTOCAST = ("auto", "bf16", "none")
_DETERMINISM = ("warn", "strict", "off")


# The proxy's model keys as its registry entries and command line name them (flat, as runs have always recorded
# them), and the `GPTConfig` field each one is: `TrainConfig.flat` / `TrainConfig.record` map between the two.
MODEL_KEYS = {"n_layer": "n_layer", "n_head": "n_head", "n_embd": "n_embd", "seq_len": "block_size", "attn": "attn",
              "beta": "beta", "tie_tol": "tie_tol", "max_shift": "max_shift", "zero_at": "zero_at",
              "qk_norm": "qk_norm"}
BYTES = 256    # the proxy's vocabulary: bytes


def byte_model(**kw) -> GPTConfig:
    """The proxy's model: GPTConfig's defaults (6 layers, 6 heads, width 384, 512 positions, SDPA) on bytes."""
    return GPTConfig(vocab_size=BYTES, **kw)


@dataclass
class TrainConfig:
    """Everything that defines a run: the model (`GPTConfig`, byte-level) and how it trains. Batch size is global
    (split across DDP ranks); lengths in bytes (= tokens). Registry entries and the command line name the model's
    fields flat (`TrainConfig.flat(n_layer=2, seq_len=64, attn="paper", ...)`, keys in `MODEL_KEYS`)."""
    model: GPTConfig = field(default_factory=byte_model)
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
        if isinstance(self.model, dict):
            self.model = GPTConfig(**self.model)
        if not isinstance(self.model, GPTConfig):
            raise TypeError(f"model must be a GPTConfig, got {type(self.model).__name__}")
        if self.model.vocab_size != BYTES:
            raise ValueError(f"the proxy trains on bytes: the model's vocab_size must be {BYTES}, "
                             f"got {self.model.vocab_size}")
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {_SCHEDULES}, got {self.schedule!r}")
        if self.autocast not in _AUTOCAST:
            raise ValueError(f"autocast must be one of {_AUTOCAST}, got {self.autocast!r}")
        if self.deterministic not in _DETERMINISM:
            raise ValueError(f"deterministic must be one of {_DETERMINISM}, got {self.deterministic!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        for name in ("steps", "batch_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("lr", "warmup", "telemetry_every", "eval_every", "eval_batches", "ckpt_every", "grad_clip",
                     "weight_decay", "min_lr"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    @classmethod
    def flat(cls, **kw) -> "TrainConfig":
        """A TrainConfig from flat keys, as registry entries, results' records and the command line write them: the
        keys of `MODEL_KEYS` build the model (`seq_len` is its block size), the others are this class's fields."""
        model = {MODEL_KEYS[k]: kw.pop(k) for k in list(kw) if k in MODEL_KEYS}
        return cls(model=byte_model(**model), **kw)

    def record(self) -> dict:
        """The flat record a result keeps of this config: the model's keys first, under their `MODEL_KEYS` names,
        then the training fields (the record runs have kept since before the model was nested)."""
        d = {k: getattr(self.model, f) for k, f in MODEL_KEYS.items()}
        d.update((f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "model")
        return d

    @property
    def name(self) -> str:
        """The run's label, or its attention spec."""
        return self.label or self.model.attn


# ----------------------------------------------------------------------------------------------------------------
# set-up helpers
# ----------------------------------------------------------------------------------------------------------------
def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # Fused AdamW on CUDA (as in the paper's code; elementwise, so deterministic, and few launches for a small,
    # launch-bound model); the default implementation on the CPU.
    fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps,
                             weight_decay=cfg.weight_decay, fused=fused or None)


def run_config(cfg: TrainConfig) -> tuple[loop.RunConfig, loop.LoopOptions]:
    """The same run for the one training loop: its `RunConfig` (the model, the byte corpus, no census, the
    optimisation, seeds, device and limits) and `LoopOptions` (the model built directly, the step's own telemetry
    every `telemetry_every` steps, losses read back only at those steps, determinism, batch-order replay,
    checkpoints, the progress bar) — the flat keys of the proxy studies' registry entries mapped in one place. (The
    loop builds AdamW as `make_optimizer` does.)"""
    run = ("steps", "batch_size", "lr", "warmup", "schedule", "min_lr", "beta1", "beta2", "adam_eps", "weight_decay",
           "grad_clip", "device", "autocast", "seed", "data_seed", "val_fraction", "eval_every", "eval_batches",
           "max_wall_s")
    ways = ("telemetry_every", "stop_on_nonfinite", "deterministic", "starts_path", "out_dir", "ckpt_every", "resume",
            "progress")
    return (loop.RunConfig(model=cfg.model, data="bytes", census_every=0, label=cfg.name,
                           **{k: getattr(cfg, k) for k in run}),
            loop.LoopOptions(build="gpt", flush_every=0, **{k: getattr(cfg, k) for k in ways}))


# ----------------------------------------------------------------------------------------------------------------
# the run: the one training loop with this config
# ----------------------------------------------------------------------------------------------------------------
def train(cfg: TrainConfig, step_hook=None) -> dict:
    """Run one training run through the one training loop (`lib.training.loop.train`, with `run_config(cfg)`);
    returns a dict:

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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run, ways = run_config(cfg)
        r = loop.train(run, observers=[], step_hook=step_hook, options=ways)
    result = {k: r[k] for k in ("loss", "grad_norm", "lr", "telemetry", "val", "stopped_at", "truncated_at")}
    result.update(
        config=cfg.record(), model_config=cfg.model.to_dict(), seeds=r["seeds"], versions=r["versions"],
        world_size=r["world_size"], starts_sha256=r["starts_sha256"], n_params=r["n_params"], wall_s=r["wall_s"],
        steps_per_s=r["steps_per_s"],
        nondeterminism_warnings=sorted({str(w.message) for w in caught if "determinis" in str(w.message)}),
        device=r["device"], autocast=r["autocast"])
    if cfg.out_dir and dist_info()[0] == 0:
        (Path(cfg.out_dir) / "telemetry.json").write_text(json.dumps(jsonable(result)))
    result["model"] = r["model"]
    return result


# ----------------------------------------------------------------------------------------------------------------
# several runs (sequential in this process, or concurrent processes sharing one GPU)
# ----------------------------------------------------------------------------------------------------------------
def _worker(cfg: TrainConfig) -> dict:
    import traceback
    import lib.book.setup  # noqa: F401  (interpreter mode for the kernel on CPU-only machines)
    try:
        res = train(cfg)
    except Exception as e:  # noqa: BLE001  (one failing run must not lose the others' results)
        print(f"[run_many] {cfg.name}: FAILED {type(e).__name__}: {e}", flush=True)
        return dict(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(), config=cfg.record())
    res.pop("model", None)
    last = res["loss"][-1] if res["loss"] else float("nan")
    print(f"[run_many] {cfg.name}: {len(res['loss'])} steps, final loss {last:.4f}, "
          f"{res['steps_per_s']:.2f} steps/s, {res['wall_s']:.0f} s", flush=True)
    return res


def run_many(cfgs: list[TrainConfig], workers: int = 1, status_every_s: float = 60.0) -> list[dict]:
    """Run `cfgs` and return their results (without the model objects), in order. A run that raises gives
    {"error", "traceback", "config"} instead of a result.

    workers == 1: one after another in this process. workers > 1: that many concurrent processes (spawned; on one
    GPU they share it, which is what keeps a many-arm experiment within minutes for a small model); every
    `status_every_s` seconds the parent prints one line per run (steps done, last loss, steps/s), from the runs'
    loss flushes (every telemetry step, so it costs no extra GPU synchronisation)."""
    return runtime.run_many(_worker, cfgs, workers, status_every_s, [c.name for c in cfgs], _init_worker,
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


def _flags() -> list[tuple[str, str, object]]:
    """(name, annotated type, default) of every flat key: the model's (`MODEL_KEYS`), then the training fields."""
    model, types = byte_model(), {f.name: f.type for f in dataclasses.fields(GPTConfig)}
    return [(k, types[f], getattr(model, f)) for k, f in MODEL_KEYS.items()] + \
        [(f.name, f.type, f.default) for f in dataclasses.fields(TrainConfig) if f.name != "model"]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lib.training.train", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for name, typ, default in _flags():
        flag, help_ = "--" + name.replace("_", "-"), _HELP.get(name, name.replace("_", " "))
        if typ in ("bool", "bool | str"):
            ap.add_argument(flag, default=default, action=argparse.BooleanOptionalAction, help=help_)
        else:
            conv = {"int": int, "float": float, "str": str, "object": str,
                    "float | None": lambda v: None if v.lower() == "none" else float(v)}[typ]
            ap.add_argument(flag, type=conv, default=default, help=help_)
    return ap


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    import lib.book.setup  # noqa: F401
    cfg = TrainConfig.flat(**vars(a))
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
