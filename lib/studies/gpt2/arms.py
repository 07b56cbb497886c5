"""GPT-2 124M arms from one initialisation and batch order, one process per arm and GPU, resumable across calls.

`run(scale, cfg)` trains every arm of `cfg["arms"]` with `lib.training.loop.train_lm` on the token corpus of the
Python sources installed where it runs (built into `cfg["corpus_dir"]` if absent) and returns them packed
(`lib.training.loop.pack_runs`) with the corpus manifest. Every arm of one seed shares the initialisation
(`torch.manual_seed(seed)` before the model is built) and the batch order (`data_seed`); arms differ only in their
attention spec and compile mode.

At full scale each arm is its own process, started in its own process session (so it outlives the command that
started it) on GPU `i mod gpus`, checkpointing to `cfg["workdir"]` every `ckpt_every_s` and resuming from there. A
call starts the arms that are neither finished nor running, then waits up to `$BOOK_WAIT_S` seconds (a machine
limit: one command's time); if some arm is still training it raises `Pending` (the command line exits with status
3) and a later call picks up where this one left off. Progress of every arm is in `<workdir>/<label>.log`. At ci
scale the arms train one after another in this process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from lib.training import token_corpus
from lib.training.model import GPTConfig
from lib.training.loop import RunConfig, pack_runs, train_lm

ROOT = Path(__file__).resolve().parents[3]
RUN_KEYS = ("steps", "batch_size", "lr", "warmup", "census_every", "census_rows", "eval_every", "eval_batches",
            "max_wall_s", "ckpt_every_s", "beta1", "beta2", "weight_decay", "grad_clip")


class Pending(RuntimeError):
    """Some arms are still training; call `run` again (on the same machine) to wait for them."""


def build_corpus(cfg: dict) -> tuple[str, dict]:
    """(corpus directory, manifest) of `cfg["corpus_dir"]`, built first unless its manifest exists. ci: the
    repository's `cfg["roots"]`; full: this interpreter's standard library and site-packages."""
    out = Path(cfg["corpus_dir"])
    if not (out / "manifest.json").exists():
        roots = [str(ROOT / r) for r in cfg["roots"]] if cfg.get("roots") else None
        token_corpus.build_token_corpus(roots=roots, out_dir=out, max_files=cfg.get("max_files"))
    return str(out), json.loads((out / "manifest.json").read_text())


def arm_configs(cfg: dict, corpus_dir: str) -> list[RunConfig]:
    """One RunConfig per (arm, seed), labelled "<arm>:s<seed>", checkpointing under `cfg["workdir"]` (full)."""
    out = []
    for arm in cfg["arms"]:
        for seed in cfg["seeds"]:
            label = f"{arm['label']}:s{seed}"
            model = GPTConfig(**(dict(cfg["model"]) | {"attn": arm["attn"]}))
            ckpt = str(Path(cfg["workdir"]) / f"{label.replace(':', '_')}.pt") if cfg.get("workdir") else ""
            out.append(RunConfig(model=model, data="tokens", corpus_dir=corpus_dir, seed=seed, data_seed=seed,
                                 compile=bool(arm.get("compile", False)), ckpt_path=ckpt, label=label,
                                 **{k: cfg[k] for k in RUN_KEYS if k in cfg}))
    return out


def _paths(workdir: Path, label: str) -> dict:
    stem = label.replace(":", "_")
    return {k: workdir / f"{stem}.{k}" for k in ("result", "log", "pid", "cfg")}


def _alive(pid_file: Path) -> bool:
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def _start(rc: RunConfig, gpu: int, workdir: Path, probe: dict | None = None) -> None:
    """Start one arm in its own process session on GPU `gpu` (the worker below), output to its log."""
    p = _paths(workdir, rc.label)
    p["cfg"].write_text(json.dumps(dict(run=rc.record(), probe=probe)))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), PYTHONUNBUFFERED="1")
    with open(p["log"], "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", "lib.studies.gpt2.arms", str(p["cfg"])], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    p["pid"].write_text(str(proc.pid))


def train_arm(rc: RunConfig, probe: dict | None = None, progress_every: int = 50) -> dict:
    """`train_lm` with the progress clock and, when `probe` ({every, rows, top[, split]}) is given, the side chain probe
    (`lib.studies.gpt2.telemetry`); the result gains "step_times" and, with the probe, "probe" and "probe_s"."""
    from lib.studies.gpt2.telemetry import Clock, Hooks, SideProbe
    from lib.training.loop import load_data
    clock = Clock(rc.label, every=progress_every)
    side = SideProbe(rc, load_data(rc)[0], **probe) if probe else None
    res = train_lm(rc, step_hook=Hooks(side, clock))
    res.pop("model", None)
    res["step_times"] = clock.times
    if side is not None:
        res["probe"], res["probe_s"] = side.records, side.seconds
    return res


def worker(cfg_path: str) -> None:
    """Train one arm from its recorded RunConfig (resuming from its checkpoint) and save its result (torch.save)."""
    import lib.book.setup  # noqa: F401
    rec = json.loads(Path(cfg_path).read_text())
    rc = RunConfig(**rec["run"])
    res = train_arm(rc, rec.get("probe"))
    p = _paths(Path(cfg_path).parent, rc.label)
    torch.save(res, p["result"].with_suffix(".tmp"))
    p["result"].with_suffix(".tmp").replace(p["result"])
    print(f"[{rc.label}] done: {len(res['loss'])} steps, {res['tokens_per_s']:.0f} tokens/s", flush=True)


def progress(workdir: Path | str, labels) -> dict:
    """{label: the last progress line of its log} (what a waiting call prints)."""
    out = {}
    for lab in labels:
        log = _paths(Path(workdir), lab)["log"]
        lines = log.read_text().splitlines() if log.exists() else []
        out[lab] = lines[-1][-160:] if lines else "(no output yet)"
    return out


def _train_all_here(cfgs: list[RunConfig], probe: dict | None = None) -> list[dict]:
    res = []
    for rc in cfgs:
        if probe:
            r = train_arm(rc, probe, progress_every=1)
        else:
            r = train_lm(rc)
            r.pop("model", None)
        res.append(r)
    return res


def run(scale: str, cfg: dict) -> dict:
    """cfg: corpus_dir (+ roots, max_files at ci), model (GPTConfig fields but attn), arms [{label, attn, compile}],
    seeds, the RunConfig knobs of `RUN_KEYS`, and at full scale workdir and gpus (0: all visible)."""
    corpus_dir, manifest = build_corpus(cfg)
    cfgs = arm_configs(cfg, corpus_dir)
    if scale != "full":
        results = _train_all_here(cfgs, cfg.get("probe"))
    else:
        workdir = Path(cfg["workdir"])
        workdir.mkdir(parents=True, exist_ok=True)
        gpus = cfg.get("gpus") or max(1, torch.cuda.device_count())
        for i, rc in enumerate(cfgs):
            p = _paths(workdir, rc.label)
            if not p["result"].exists() and not _alive(p["pid"]):
                _start(rc, i % gpus, workdir, cfg.get("probe"))
        deadline = time.time() + float(os.environ.get("BOOK_WAIT_S", "1e9"))
        while True:
            done = [_paths(workdir, rc.label)["result"].exists() for rc in cfgs]
            dead = [rc.label for rc, d in zip(cfgs, done) if not d and not _alive(_paths(workdir, rc.label)["pid"])]
            if all(done):
                break
            if dead:
                raise RuntimeError(f"arms {dead} stopped without a result: see their logs in {workdir}")
            if time.time() > deadline:
                for lab, line in progress(workdir, [rc.label for rc in cfgs]).items():
                    print(f"  {lab}: {line}", flush=True)
                raise Pending(f"{sum(done)} of {len(cfgs)} arms finished")
            time.sleep(10)
        results = [torch.load(_paths(workdir, rc.label)["result"], weights_only=False) for rc in cfgs]
    runs, arrays = pack_runs(results, [rc.label for rc in cfgs])
    man = {k: v for k, v in manifest.items() if k != "distributions"}
    # A compiled arm whose compilation failed trains eagerly (train_lm says so): record it, the comparison needs it.
    compile_errors = {rc.label: r.get("compile_error") for rc, r in zip(cfgs, results) if r.get("compile_error")}
    data = dict(manifest=man, runs=runs, arms=cfg["arms"], compile_errors=compile_errors)
    if cfg.get("probe"):
        # The side probe's records (its layers change from event to event) and what the telemetry cost.
        from lib.studies.gpt2.telemetry import probe_arrays
        from lib.training.chain_probe import SPLIT_KEYS
        data["telemetry"] = {rc.label: dict(step_times=r.get("step_times", []), probe_s=r.get("probe_s", []))
                             for rc, r in zip(cfgs, results)}
        if cfg["probe"].get("placement", "authors") != "authors":
            # whose ties the probe measured on (results without it: "authors", the rows where BF16 scores tie)
            data["probe_placement"] = cfg["probe"]["placement"]
        for rc, r in zip(cfgs, results):
            for k, v in probe_arrays(r.get("probe") or []).items():
                if k in ("layers", "conj_all") + SPLIT_KEYS:
                    arrays[f"{rc.label}__probe__{k}"] = v
    return dict(data=data, arrays=arrays, seeds=list(cfg["seeds"]))


if __name__ == "__main__":   # one arm: python -m lib.studies.gpt2.arms <workdir>/<label>.cfg
    worker(sys.argv[1])
