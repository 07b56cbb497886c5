"""One GPU campaign on a 4-GPU machine, as calls of ≤ 10 minutes issued one after another on the same machine.

    python -m lib.studies.gpt2.campaign PHASE --out $OUT [--entry gpt2_arms] [--wait S]

* phase 1: build the token corpus (if absent); start the arms of the registry entry (one process per GPU, each in
  its own process session, so they outlive the call; arm i on GPU i); run the GPU tests sharded over the GPUs of
  every arm but the first (the slowest, FP32 attention, is not slowed), log in $OUT; the smoke check: every arm
  past step 50 with finite gradients, else stop the arms and exit 2 (the campaign ends early); then wait.
* phase 2: wait; capture one GPT-2 layer (q, k, v, dO of layer 2, 1-based) from the SDPA arm's latest checkpoint
  (≥ 3,000 steps) and run the registered `gradient_checks` with it on GPU 1, then each result named by `--extra` on
  GPU 2, beside the arms; wait.
* phase 3: wait for the arms (their wall budget stops them in time) and save the entry.

Every phase resumes what is on the machine's disk, writes the arms' progress into $OUT/arms.log and prints a
progress table; results are written with provenance under $OUT/full/ (fetch them into results/full/). `--wait`
bounds the waiting (default 540 s from the phase's start), so a call ends inside its 10 minutes. $OUT keeps at most
8 files a call: the GPU tests' per-shard logs stay on the machine (their output is in the combined log).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from lib.book import registry
from lib.studies.gpt2 import arms

ROOT = Path(__file__).resolve().parents[3]
ENTRY = "gpt2_arms"


def _labels(cfg) -> list[str]:
    return [f"{a['label']}:s{s}" for a in cfg["arms"] for s in cfg["seeds"]]


def _steps(workdir: Path, label: str) -> tuple[int, bool]:
    """(last step an arm's log reports, whether its gradients were finite there)."""
    log = workdir / f"{label.replace(':', '_')}.log"
    hits = re.findall(r"step (\d+) t \d+ s grads (finite|NOT FINITE)", log.read_text()) if log.exists() else []
    return (int(hits[-1][0]), hits[-1][1] == "finite") if hits else (0, True)


def snapshot(out: Path, cfg) -> None:
    """The arms' logs, one after another, into $OUT/arms.log and one progress line per arm on stdout."""
    wd = Path(cfg["workdir"])
    with open(out / "arms.log", "w") as dst:
        for lab in _labels(cfg):
            log = wd / f"{lab.replace(':', '_')}.log"
            if log.exists():
                dst.write(f"==> {lab} <==\n{log.read_text()}\n")
    for lab in _labels(cfg):
        step, ok = _steps(wd, lab)
        print(f"  {lab:22s} step {step:6d} {'ok' if ok else 'NOT FINITE'} "
              f"{'done' if (wd / (lab.replace(':', '_') + '.result')).exists() else ''}", flush=True)


def start_arms(cfg) -> None:
    os.environ["BOOK_WAIT_S"] = "0"
    try:
        arms.run("full", cfg)
    except arms.Pending:
        pass


def stop_arms(cfg) -> None:
    for lab in _labels(cfg):
        pid = Path(cfg["workdir"]) / f"{lab.replace(':', '_')}.pid"
        if pid.exists():
            try:
                os.killpg(int(pid.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def save(name: str, out: Path, env=None) -> int:
    """`python -m lib.experiments NAME --scale full --out OUT` as a subprocess; its exit status."""
    return subprocess.call([sys.executable, "-m", "lib.experiments", name, "--scale", "full", "--out", str(out)],
                           cwd=ROOT, env=dict(os.environ, **(env or {})))


def capture_gpt2(cfg, path: Path, layer: int = 1, rows: int = 2, arm: str = "sdpa") -> dict:
    """q, k, v, dO of `layer` (0-based) for `rows` training windows, from the latest checkpoint of `arm` (eager, BF16
    autocast on CUDA), saved to `path` with the arm, step and 1-based layer."""
    from lib.training.lm import LM, LMConfig
    from lib.training.loop import RunConfig, get_batch, load_data
    import numpy as np
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    label = next(lab for lab in _labels(cfg) if lab.split(":")[0] == arm)
    ck = torch.load(Path(cfg["workdir"]) / f"{label.replace(':', '_')}.pt", map_location=dev, weights_only=False)
    rc = RunConfig(**ck["config"])
    model = LM(rc.model).to(dev)
    model.load_state_dict(ck["model"])
    train, _, _ = load_data(rc)
    x, y = get_batch(train, np.arange(rows) * rc.seq_len, rc, dev)
    model.set_capture(True)
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        loss = model(x, y)[1]
    loss.backward()
    cap = model.attn_layers[layer].captured
    rec = dict(q=cap["q"].cpu(), k=cap["k"].cpu(), v=cap["v"].cpu(), do=cap["do"].cpu(), arm=label,
               step=int(ck["step"]), layer=layer + 1)
    torch.save(rec, path)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", type=int, choices=(1, 2, 3))
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--entry", default=ENTRY)
    ap.add_argument("--wait", type=float, default=540.0)
    ap.add_argument("--extra", nargs="*", default=[], help="registered results to run in phase 2 on GPU 2")
    a = ap.parse_args(argv)
    t0 = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = registry.resolve(a.entry, "full")
    wd = Path(cfg["workdir"])
    n = torch.cuda.device_count()
    print(f"phase {a.phase} of {a.entry}: {n} × {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    if a.phase == 1:
        arms.build_corpus(cfg)
        print(f"corpus ready after {time.time() - t0:.0f} s", flush=True)
        start_arms(cfg)
        scratch = Path("/tmp/gpu_tests")
        scratch.mkdir(exist_ok=True)
        test_gpus = ",".join(str(i) for i in range(1, n)) or "0"
        tests = subprocess.Popen([sys.executable, "tests/gpu/run_sharded.py", "--gpus", "0", "--log",
                                  str(scratch / "gpu_tests.log"), "--", "-rP"], cwd=ROOT,
                                 env=dict(os.environ, CUDA_VISIBLE_DEVICES=test_gpus))
        while min(_steps(wd, lab)[0] for lab in _labels(cfg)) < 50:
            dead = [lab for lab in _labels(cfg) if not arms._alive(wd / f"{lab.replace(':', '_')}.pid")]
            if dead or time.time() - t0 > 420:
                snapshot(out, cfg)
                print(f"SMOKE FAILED: arms {dead or 'too slow'} before step 50; stopping the arms", flush=True)
                stop_arms(cfg)
                tests.wait()
                shutil.copy(scratch / "gpu_tests.log", out / "gpu_tests.log")
                return 2
            time.sleep(5)
        bad = [lab for lab in _labels(cfg) if not _steps(wd, lab)[1]]
        print(f"smoke: every arm past step 50 after {time.time() - t0:.0f} s; non-finite: {bad or 'none'}",
              flush=True)
        rc = tests.wait()
        for f in ("gpu_tests.log", "gpu_tests_durations.json"):
            if (scratch / f).exists():
                shutil.copy(scratch / f, out / f)
        print(f"GPU tests exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    elif a.phase == 2:
        cap = wd / "gpt2_capture.pt"
        sdpa = next(lab for lab in _labels(cfg) if lab.startswith("sdpa:"))
        while not cap.exists() and time.time() - t0 < a.wait - 240:
            if (wd / f"{sdpa.replace(':', '_')}.pt").exists() and _steps(wd, sdpa)[0] >= 3000:
                rec = capture_gpt2(cfg, cap)
                print(f"captured layer {rec['layer']} of {rec['arm']} at step {rec['step']}", flush=True)
                break
            time.sleep(10)
        if cap.exists():
            rc = save("gradient_checks", out, {"BOOK_GPT2_CAPTURE": str(cap), "CUDA_VISIBLE_DEVICES": "1"})
            print(f"gradient_checks exit status {rc} after {time.time() - t0:.0f} s", flush=True)
        for name in a.extra:
            rc = save(name, out, {"CUDA_VISIBLE_DEVICES": "2"})
            print(f"{name} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    else:
        os.environ["BOOK_WAIT_S"] = str(max(0.0, a.wait - (time.time() - t0)))
        rc = save(a.entry, out)
        print(f"{a.entry} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    while a.phase != 3 and time.time() - t0 < a.wait:
        if all((wd / f"{lab.replace(':', '_')}.result").exists() for lab in _labels(cfg)):
            break
        time.sleep(15)
    snapshot(out, cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
