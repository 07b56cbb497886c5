"""One GPU campaign on a multi-GPU machine, as calls of ≤ 10 minutes issued one after another on the same machine.

    python -m lib.studies.gpt2.campaign PHASE --out $OUT [--entry gpt2_arms [more entries]] [--wait S]

The arms of the named entries go one per GPU, in order (entry after entry), so two entries of two arms fill a
4-GPU machine and one fills a 2-GPU machine.

* phase 1: build the token corpus (if absent); start the arms (each in its own process session, so they outlive the
  call); run the GPU tests beside them, sharded over the GPUs of every arm but the first (the first entry's first
  arm — FP32 attention, the slowest — is not slowed), log in $OUT; the smoke check: every arm past step 50 with
  finite gradients, else stop the arms and exit 2 (the campaign ends early); then wait.
* phase 2: wait; capture one GPT-2 layer (q, k, v, dO of layer 2, 1-based) from the latest checkpoint (≥ 3,000 steps)
  of the SDPA arm, or of the paper arm where no entry has SDPA, and run the registered `gradient_checks` with it on
  GPU 1, then each result named by `--extra` on the last GPU, beside the arms; wait, saving each entry as soon as
  all its arms have finished (so a machine lost before phase 3 loses only the entries still training).
* phase 3: wait for the arms (their wall budget stops them in time) and save every entry; then each result named by
  `--extra` with every GPU visible (the arms have stopped, so a benchmark finds its GPUs idle).

`--skip-checks` leaves out phase 2's capture and gradient checks (when the committed checks are fresh). An `--extra`
entry whose full configuration names `gpt2_windows` (`kernel_bias_table`) gets its own capture of layer 2 with that
many windows, from the same arm's latest checkpoint once it is past 3,000 steps, in `$BOOK_GPT2_CAPTURE`.

Every phase resumes what is on the machine's disk, writes the arms' progress into $OUT/arms.log and prints a
progress table; results are written with provenance under $OUT/full/ (fetch them into results/full/). `--wait`
bounds the waiting (default 540 s from the phase's start), so a call ends inside its 10 minutes. $OUT keeps at most
8 files a call: the GPU tests' per-shard logs stay on the machine (their output is in the combined log).
"""
from __future__ import annotations

import argparse
import contextlib
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


def _slots(cfgs) -> list[tuple[dict, str]]:
    """(entry config, arm label) for every arm of every entry, in GPU order."""
    return [(cfg, lab) for cfg in cfgs for lab in _labels(cfg)]


def _file(cfg, label: str, ext: str) -> Path:
    return Path(cfg["workdir"]) / f"{label.replace(':', '_')}.{ext}"


def _steps(cfg, label: str) -> tuple[int, bool]:
    """(last step an arm's log reports, whether its gradients were finite there)."""
    log = _file(cfg, label, "log")
    hits = re.findall(r"step (\d+) t \d+ s grads (finite|NOT FINITE)", log.read_text()) if log.exists() else []
    return (int(hits[-1][0]), hits[-1][1] == "finite") if hits else (0, True)


def snapshot(out: Path, cfgs) -> None:
    """The arms' logs, one after another, into $OUT/arms.log and one progress line per arm on stdout."""
    with open(out / "arms.log", "w") as dst:
        for cfg, lab in _slots(cfgs):
            if _file(cfg, lab, "log").exists():
                dst.write(f"==> {cfg['_entry']} {lab} <==\n{_file(cfg, lab, 'log').read_text()}\n")
    for cfg, lab in _slots(cfgs):
        step, ok = _steps(cfg, lab)
        print(f"  {cfg['_entry']:18s} {lab:12s} step {step:6d} {'ok' if ok else 'NOT FINITE'} "
              f"{'done' if _file(cfg, lab, 'result').exists() else ''}", flush=True)


def start_arms(cfgs, n_gpus: int) -> None:
    """Start every arm that is neither finished nor running, arm i (over all entries) on GPU i mod n_gpus."""
    i = 0
    for cfg in cfgs:
        corpus_dir, _ = arms.build_corpus(cfg)
        Path(cfg["workdir"]).mkdir(parents=True, exist_ok=True)
        for rc in arms.arm_configs(cfg, corpus_dir):
            if not _file(cfg, rc.label, "result").exists() and not arms._alive(_file(cfg, rc.label, "pid")):
                arms._start(rc, i % n_gpus, Path(cfg["workdir"]), cfg.get("probe"))
            i += 1


def stop_arms(cfgs) -> None:
    for cfg, lab in _slots(cfgs):
        try:
            os.killpg(int(_file(cfg, lab, "pid").read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def save(name: str, out: Path, env=None) -> int:
    """`python -m lib.experiments NAME --scale full --out OUT` as a subprocess; its exit status."""
    return subprocess.call([sys.executable, "-m", "lib.experiments", name, "--scale", "full", "--out", str(out)],
                           cwd=ROOT, env=dict(os.environ, **(env or {})))


def save_finished(cfgs, out: Path, saved: set) -> list[str]:
    """Save every entry whose arms have all finished and that is not in `saved` yet (then add it), so that a call
    that ends before phase 3 — or a machine lost between calls — already returns what is done. The entries saved."""
    done = [cfg["_entry"] for cfg in cfgs if cfg["_entry"] not in saved
            and all(_file(cfg, lab, "result").exists() for lab in _labels(cfg))]
    for name in done:
        os.environ["BOOK_WAIT_S"] = "0"
        rc = save(name, out)
        print(f"{name} saved as its arms finished: exit status {rc}", flush=True)
        saved.add(name)
    return done


def capture_gpt2(cfg, label: str, path: Path, layer: int = 1, rows: int = 2) -> dict:
    """q, k, v, dO of `layer` (0-based) for `rows` training windows, from the latest checkpoint of the arm `label`
    (eager, BF16 autocast on CUDA), saved to `path` with the arm, step and 1-based layer."""
    from lib.training.lm import LM
    from lib.training.loop import RunConfig, get_batch, load_data
    import numpy as np
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ck = torch.load(_file(cfg, label, "pt"), map_location=dev, weights_only=False)
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


def capture_source(cfgs) -> tuple[dict, str]:
    """The arm whose checkpoint gives the GPT-2 capture: the SDPA arm, else the paper arm (large layer-2 logits in
    both), else the first arm."""
    slots = _slots(cfgs)
    for arm in ("sdpa", "paper"):
        for cfg, lab in slots:
            if lab.split(":")[0] == arm:
                return cfg, lab
    return slots[0]


def extra_capture(name: str, cfgs, gpu: int) -> dict:
    """{"BOOK_GPT2_CAPTURE": path} for an entry whose full configuration names `gpt2_windows` (else {}): layer 2 of
    `capture_source`'s latest checkpoint with that many windows, captured on `gpu` (once; the file stays in the
    arm's workdir), when the checkpoint is past 3,000 steps."""
    windows = registry.resolve(name, "full").get("gpt2_windows")
    src_cfg, src = capture_source(cfgs)
    if not windows or not _file(src_cfg, src, "pt").exists() or _steps(src_cfg, src)[0] < 3000:
        return {}
    path = Path(src_cfg["workdir"]) / f"gpt2_capture_{windows}w.pt"
    if not path.exists():
        with torch.cuda.device(gpu) if torch.cuda.is_available() else contextlib.nullcontext():
            rec = capture_gpt2(src_cfg, src, path, rows=int(windows))
        print(f"captured layer {rec['layer']} of {rec['arm']} at step {rec['step']}, {windows} windows", flush=True)
    return {"BOOK_GPT2_CAPTURE": str(path)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", type=int, choices=(1, 2, 3))
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--entry", nargs="+", default=[ENTRY], help="registry entries whose arms train, in GPU order")
    ap.add_argument("--wait", type=float, default=540.0)
    ap.add_argument("--extra", nargs="*", default=[],
                    help="registered results to run in phase 2 on GPU 2 beside the arms, or in phase 3 after them")
    ap.add_argument("--skip-checks", action="store_true", help="phase 2 without the capture and gradient checks")
    a = ap.parse_args(argv)
    t0 = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfgs = [dict(registry.resolve(name, "full"), _entry=name) for name in a.entry]
    slots = _slots(cfgs)
    n = torch.cuda.device_count()
    print(f"phase {a.phase} of {', '.join(a.entry)}: {n} × {torch.cuda.get_device_name(0)}, torch {torch.__version__}",
          flush=True)
    if len(slots) > n:
        print(f"note: {len(slots)} arms on {n} GPUs (arms share GPUs)", flush=True)
    if a.phase == 1:
        arms.build_corpus(cfgs[0])
        print(f"corpus ready after {time.time() - t0:.0f} s", flush=True)
        os.environ["BOOK_WAIT_S"] = "0"
        start_arms(cfgs, n)
        scratch = Path("/tmp/gpu_tests")
        scratch.mkdir(exist_ok=True)
        test_gpus = ",".join(str(i) for i in range(1, n)) or "0"
        # Compile-bound tests: several processes per GPU (the GPU image has no pytest-xdist).
        tests = subprocess.Popen([sys.executable, "tests/gpu/run_sharded.py", "--gpus", "0", "--jobs",
                                  str(max(4, n - 1)), "--costs", "tests/gpu/durations_h100.json", "--log", str(scratch / "gpu_tests.log"), "--", "-rP"], cwd=ROOT,
                                 env=dict(os.environ, CUDA_VISIBLE_DEVICES=test_gpus))
        while min(_steps(cfg, lab)[0] for cfg, lab in slots) < 50:
            dead = [lab for cfg, lab in slots if not arms._alive(_file(cfg, lab, "pid"))]
            if dead or time.time() - t0 > 420:
                snapshot(out, cfgs)
                print(f"SMOKE FAILED: arms {dead or 'too slow'} before step 50; stopping the arms", flush=True)
                stop_arms(cfgs)
                tests.wait()
                shutil.copy(scratch / "gpu_tests.log", out / "gpu_tests.log")
                return 2
            time.sleep(5)
        bad = [lab for cfg, lab in slots if not _steps(cfg, lab)[1]]
        print(f"smoke: every arm past step 50 after {time.time() - t0:.0f} s; non-finite: {bad or 'none'}",
              flush=True)
        rc = tests.wait()
        for f in ("gpu_tests.log", "gpu_tests_durations.json"):
            if (scratch / f).exists():
                shutil.copy(scratch / f, out / f)
        print(f"GPU tests exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    elif a.phase == 2:
        src_cfg, src = capture_source(cfgs)
        cap = Path(src_cfg["workdir"]) / "gpt2_capture.pt"
        while not a.skip_checks and not cap.exists() and time.time() - t0 < a.wait - 240:
            if _file(src_cfg, src, "pt").exists() and _steps(src_cfg, src)[0] >= 3000:
                rec = capture_gpt2(src_cfg, src, cap)
                print(f"captured layer {rec['layer']} of {rec['arm']} at step {rec['step']}", flush=True)
                break
            time.sleep(10)
        if cap.exists() and not a.skip_checks:
            rc = save("gradient_checks", out, {"BOOK_GPT2_CAPTURE": str(cap), "CUDA_VISIBLE_DEVICES": str(min(1, n - 1))})
            print(f"gradient_checks exit status {rc} after {time.time() - t0:.0f} s", flush=True)
        for name in a.extra:
            rc = save(name, out, {"CUDA_VISIBLE_DEVICES": str(min(2, n - 1)), **extra_capture(name, cfgs, min(2, n - 1))})
            print(f"{name} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    else:
        for name in a.entry:
            os.environ["BOOK_WAIT_S"] = str(max(0.0, a.wait - (time.time() - t0)))
            rc = save(name, out)
            print(f"{name} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
        for name in a.extra:
            rc = save(name, out, extra_capture(name, cfgs, 0))
            print(f"{name} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    saved = set()
    while a.phase != 3 and time.time() - t0 < a.wait:
        if a.phase == 2:
            save_finished(cfgs, out, saved)
        if all(_file(cfg, lab, "result").exists() for cfg, lab in slots):
            break
        time.sleep(15)
    snapshot(out, cfgs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
