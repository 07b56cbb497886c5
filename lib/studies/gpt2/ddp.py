"""GPT-2 124M at the authors' batch on several GPUs (DDP, one process per GPU), two attention arms one after the
other, and how the training step scales from one GPU to all of them.

The recipe: GPT-2 small's shape on the token corpus of the Python sources installed where it runs
(`lib.studies.gpt2.arms.build_corpus`), `batch_size` windows of 1,024 tokens a step (320: 327,680 tokens), each
rank's share taken in forward/backward passes of `micro_batch` windows — gradient accumulation of
batch_size / (micro_batch × GPUs) passes, 4 on 4 GPUs and 8 on 2 for a micro-batch of 20
(`lib.training.loop.RunConfig.micro_batch`) — LR `lr` after a linear warm-up of `warmup` steps, then constant,
AdamW (β1, β2) with weight decay and clipping as `gpt2_arms`, BF16 autocast, the census of both placements every
`census_every` steps on `census_rows` windows of rank 0's share (the other ranks wait at the next all-reduce),
validation loss every `eval_every` steps. Every arm starts from the same initialisation and batch order (`seed`).

The parts, in order:

* one per arm of `arms` (label "<arm>:s<seed>"): trains until `steps` or its wall budget `max_wall_s`;
* the scaling pair (`scaling`): its arm without census or evaluation on one GPU ("scaling_1:s<seed>", accumulation
  batch_size / micro_batch) and then on all of them ("scaling_all:s<seed>"), each for its own wall budget. Tokens
  per second are read from the progress clock (`lib.studies.gpt2.telemetry.Clock`, every `clock_every` steps) with
  the first window (compilation) left out (`steady_tokens_per_s`); the scaling efficiency is the all-GPU rate over
  the GPU count × the one-GPU rate (`scaling`, read against the registered rule `rules.scaling_min`).

Each part is one `torchrun` launch of this module (`part_command`):

    torchrun --standalone --nproc_per_node=<GPUs> -m lib.studies.gpt2.ddp part <workdir>/plan.json <label>

(`python -m lib.studies.gpt2.ddp plan [ENTRY]` builds the corpus, writes the plan and prints these launches.)
At full scale `run` builds the corpus, writes the plan (the resolved configuration and the corpus directory) into
`workdir`, and starts a driver in its own process session (`python -m lib.studies.gpt2.ddp drive <plan>`: it
outlives the call) that launches the parts one after another, skipping finished ones; the call waits up to
`$BOOK_WAIT_S` seconds and raises `lib.studies.gpt2.arms.Pending` while parts remain (call again on the same
machine). Progress is in `<workdir>/<label>.log`. At ci scale the parts run in this process, inside a gloo process
group of world size 1, as one rank of `torchrun` would run them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from lib.studies.gpt2 import arms
from lib.training.loop import RunConfig, pack_runs

ROOT = Path(__file__).resolve().parents[3]


# ----------------------------------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------------------------------
def labels(cfg: dict) -> list[str]:
    """The parts in the order they run: the arms, then the scaling pair."""
    s = cfg["seed"]
    return [f"{a['label']}:s{s}" for a in cfg["arms"]] + [f"scaling_1:s{s}", f"scaling_all:s{s}"]


def gpu_count(cfg: dict) -> int:
    """GPUs a multi-GPU part uses: `gpus`, or 0 for every visible one (1 without CUDA)."""
    return int(cfg.get("gpus") or max(1, torch.cuda.device_count()))


def part_config(cfg: dict, label: str, corpus_dir: str) -> RunConfig:
    """The RunConfig of part `label` (`gpt2_arms`'s fields through `arms.arm_configs`, plus the micro-batch)."""
    name = label.split(":")[0]
    if name.startswith("scaling_"):
        sc = cfg["scaling"]
        arm = dict(label=name, attn=sc["attn"], compile=sc.get("compile", False))
        change = dict(census_every=0, eval_every=0, eval_batches=0,
                      max_wall_s=sc["wall_s_one" if name == "scaling_1" else "wall_s_all"])
    else:
        arm, change = next(a for a in cfg["arms"] if a["label"] == name), {}
    one = dict(cfg, arms=[arm], seeds=[cfg["seed"]], workdir="") | change
    rc = arms.arm_configs(one, corpus_dir)[0]
    return replace(rc, micro_batch=int(cfg.get("micro_batch", 0)), label=label)


def part_command(plan: Path | str, label: str, nproc: int) -> list[str]:
    """The launch of one part: torchrun (as `python -m torch.distributed.run`) with `nproc` processes on this host."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "lib.studies.gpt2.ddp", "part", str(plan), label]


def write_plan(cfg: dict, corpus_dir: str) -> Path:
    """<workdir>/plan.json: what every part reads (the resolved configuration, the corpus, the GPU count)."""
    wd = Path(cfg["workdir"])
    wd.mkdir(parents=True, exist_ok=True)
    path = wd / "plan.json"
    path.write_text(json.dumps(dict(cfg=cfg, corpus_dir=corpus_dir, gpus=gpu_count(cfg)), indent=1))
    return path


# ----------------------------------------------------------------------------------------------------------------
# one part (one rank of it)
# ----------------------------------------------------------------------------------------------------------------
def train_part(plan: dict, label: str) -> dict:
    """Train part `label` as this process's rank (world size from torchrun's environment, 1 without it); the result
    of `train_lm` without the model, with the clock's "step_times"."""
    rc = part_config(plan["cfg"], label, plan["corpus_dir"])
    every = plan["cfg"]["scaling"]["clock_every"] if label.startswith("scaling_") else 50
    return arms.train_arm(rc, progress_every=every)


def part_main(plan_path: str, label: str) -> None:
    """The process torchrun starts: train the part; rank 0 saves the result next to the plan (torch.save)."""
    import lib.book.setup  # noqa: F401
    plan = json.loads(Path(plan_path).read_text())
    res = train_part(plan, label)
    if int(os.environ.get("RANK", "0")) == 0:
        out = arms._paths(Path(plan_path).parent, label)["result"]
        torch.save(res, out.with_suffix(".tmp"))
        out.with_suffix(".tmp").replace(out)
        print(f"[{label}] done: {len(res['loss'])} steps on {res['world_size']} rank(s), "
              f"{res['tokens_per_s']:.0f} tokens/s", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def drive(plan_path: str) -> None:
    """Launch the parts one after another (each with its log), skipping those with a result; stop at a failure
    (<label>.failed holds the exit status)."""
    wd = Path(plan_path).parent
    plan = json.loads(Path(plan_path).read_text())
    for label in labels(plan["cfg"]):
        p = arms._paths(wd, label)
        if p["result"].exists():
            continue
        nproc = 1 if label.startswith("scaling_1") else plan["gpus"]
        with open(p["log"], "a") as log:
            rc = subprocess.call(part_command(plan_path, label, nproc), cwd=ROOT, stdout=log,
                                 stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        if rc != 0 or not p["result"].exists():
            (wd / f"{label.replace(':', '_')}.failed").write_text(str(rc))
            return


# ----------------------------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------------------------
def steady_tokens_per_s(step_times, tokens_per_step: int) -> float:
    """Tokens per second from a progress clock's [(steps done, seconds)], the first window (compilation, start-up)
    left out; NaN with fewer than two windows after it."""
    t = [(s, x) for s, x in step_times]
    if len(t) < 3:
        return float("nan")
    (s0, t0), (s1, t1) = t[1], t[-1]
    return (s1 - s0) * tokens_per_step / (t1 - t0) if t1 > t0 else float("nan")


def scaling(data: dict, rules: dict) -> dict:
    """The scaling measurement of a result's data: {"one": tokens/s on one GPU, "all": on `gpus` GPUs, "gpus",
    "efficiency": all / (gpus × one), "min": the registered rule, "meets": efficiency ≥ min}."""
    s = data["scaling"]
    eff = s["all"] / (s["gpus"] * s["one"])
    return dict(one=s["one"], all=s["all"], gpus=s["gpus"], efficiency=eff, min=rules["scaling_min"],
                meets=bool(eff >= rules["scaling_min"]))


# ----------------------------------------------------------------------------------------------------------------
# run
# ----------------------------------------------------------------------------------------------------------------
def _here(plan: dict) -> list[dict]:
    """Every part in this process, as the one rank of a gloo group of world size 1."""
    import torch.distributed as dist
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        return [train_part(plan, label) for label in labels(plan["cfg"])]
    finally:
        if own:
            dist.destroy_process_group()


def _on_machine(plan_path: Path, cfg: dict) -> list[dict]:
    """Start the driver unless it runs or every part is done; wait up to $BOOK_WAIT_S; the parts' results."""
    wd = plan_path.parent
    labs = labels(cfg)
    driver = wd / "driver.pid"
    if not all(arms._paths(wd, lab)["result"].exists() for lab in labs) and not arms._alive(driver):
        for f in wd.glob("*.failed"):
            f.unlink()
        with open(wd / "driver.log", "a") as log:
            proc = subprocess.Popen([sys.executable, "-m", "lib.studies.gpt2.ddp", "drive", str(plan_path)], cwd=ROOT,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        driver.write_text(str(proc.pid))
    deadline = time.time() + float(os.environ.get("BOOK_WAIT_S", "1e9"))
    while True:
        done = [arms._paths(wd, lab)["result"].exists() for lab in labs]
        if all(done):
            return [torch.load(arms._paths(wd, lab)["result"], weights_only=False) for lab in labs]
        failed = sorted(f.name for f in wd.glob("*.failed"))
        if failed or not arms._alive(driver):
            why = failed or "the driver exited"
            raise RuntimeError(f"parts stopped without a result ({why}): see the logs in {wd}")
        if time.time() > deadline:
            for lab, line in arms.progress(wd, labs).items():
                print(f"  {lab}: {line}", flush=True)
            raise arms.Pending(f"{sum(done)} of {len(labs)} parts finished")
        time.sleep(10)


def run(scale: str, cfg: dict) -> dict:
    """cfg: corpus_dir (+ roots at ci), workdir, gpus (0: all), model (GPTConfig fields but attn), arms [{label, attn,
    compile}], seed, batch_size, micro_batch, the RunConfig knobs of `arms.RUN_KEYS`, scaling {attn, compile,
    wall_s_one, wall_s_all, clock_every}, rules {scaling_min}."""
    corpus_dir, manifest = arms.build_corpus(cfg)
    plan = dict(cfg=cfg, corpus_dir=corpus_dir, gpus=gpu_count(cfg))
    results = _here(plan) if scale != "full" else _on_machine(write_plan(cfg, corpus_dir), cfg)
    labs = labels(cfg)
    for r in results:
        r["steady_tokens_per_s"] = steady_tokens_per_s(r.get("step_times", []), r["tokens_per_step"])
    runs, arrays = pack_runs(results, labs)
    for run_, r in zip(runs, results):
        run_.update(grad_accum=r.get("grad_accum", 1), steady_tokens_per_s=r["steady_tokens_per_s"])
    one, every = results[-2], results[-1]
    man = {k: v for k, v in manifest.items() if k != "distributions"}
    data = dict(manifest=man, runs=runs, arms=cfg["arms"], gpus=plan["gpus"],
                device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                scaling=dict(one=one["steady_tokens_per_s"], all=every["steady_tokens_per_s"],
                             gpus=every["world_size"]),
                compile_errors={lab: r["compile_error"] for lab, r in zip(labs, results) if r.get("compile_error")},
                telemetry={lab: dict(step_times=r.get("step_times", [])) for lab, r in zip(labs, results)})
    return dict(data=data, arrays=arrays, seeds=[cfg["seed"]])


def plan_main(entry: str = "gpt2_ddp") -> None:
    """Build the corpus and write the plan of registry entry `entry` at full scale; print the parts' launches."""
    from lib.book import registry
    cfg = registry.resolve(entry, "full")
    path = write_plan(cfg, arms.build_corpus(cfg)[0])
    for label in labels(cfg):
        nproc = 1 if label.startswith("scaling_1") else gpu_count(cfg)
        print(" ".join(["torchrun"] + part_command(path, label, nproc)[3:]))


if __name__ == "__main__":   # plan [ENTRY] | part <plan.json> <label> (under torchrun) | drive <plan.json>
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "plan":
        plan_main(*args)
    elif cmd == "part":
        part_main(*args)
    elif cmd == "drive":
        drive(*args)
    else:
        raise SystemExit("usage: python -m lib.studies.gpt2.ddp plan [ENTRY] | part PLAN LABEL | drive PLAN")
