"""One GPU campaign on a multi-GPU machine, as calls of ≤ 10 minutes issued one after another on the same machine.

    python -m lib.studies.gpt2.campaign PHASE --out $OUT [--entry gpt2_arms [more entries]] [--wait S]
    python -m lib.studies.gpt2.campaign keep $OUT/arms_done.tar       (here, after a call)

The arms of the named entries go one per GPU, in order (entry after entry), so two entries of two arms fill a
4-GPU machine and one fills a 2-GPU machine.

* phase 1: build the token corpus (if absent); put the kept arms that may be reused into their workdirs (below);
  start the other arms (each in its own process session, so they outlive the call); run the GPU tests beside them,
  sharded over the GPUs of every arm but the first (the first entry's first arm — FP32 attention, the slowest — is
  not slowed), log in $OUT; the smoke check: every training arm past step 50 with finite gradients, else stop the
  arms and exit 2 (the campaign ends early); then wait.
* phase 2: wait; capture one GPT-2 layer (q, k, v, dO of layer 2, 1-based) from the latest checkpoint (≥ 3,000 steps)
  of the SDPA arm, or of the paper arm where no entry has SDPA, and run the registered `gradient_checks` with it on
  GPU 1, then each result named by `--extra` on the last GPU, beside the arms; wait, saving each entry as soon as
  all its arms have finished (so a machine lost before phase 3 loses only the entries still training).
* phase 3: wait for the arms (their wall budget stops them in time) and save every entry; then each result named by
  `--extra` with every GPU visible (the arms have stopped, so a benchmark finds its GPUs idle).

A lost machine. The machine and its disk go back soon after a call; if they are lost between calls, the next phase
runs on a bare machine, where saving an entry would start its arms again from step 0 and wait for nothing. So
phases 2 and 3 first check that every arm of every entry is on the disk (its result, or the cfg, log and pid files
`arms._start` writes); an entry with an arm missing gets a line "MACHINE LOST: <entry> …; nothing restarted", is
neither started nor saved, and the phase exits 3 — at once when no entry is left, else after the entries that are.

Finished arms come back. An entry is saved only when all its arms have finished, so at the end of every phase (in
phase 3 before the `--extra` results) each finished arm of an entry not saved in that call goes into one file,
$OUT/arms_done.tar: the arm's result (gzip, ≈ 1.2 MB at 10,000 steps), its log and a record — entry, label, the
entry's resolved full configuration, the code fingerprints its result would record, commit, device and steps (an arm
that would take the file past the 16 MiB a call returns is left out with a note). `keep TAR` unpacks it into
results/arms/<entry>/<arm>_s<seed>.{result.gz,json,log} (outside results/full/, so no result reads it; commit it,
and delete it once the entry's result is committed). Phase 1 puts each kept arm whose configuration and code
fingerprints equal the current ones into its workdir as finished, so that neither `start_arms` nor `arms.run` trains
it again, and says from which commit and device; on any difference it says why, and the arm trains again. When an
entry is saved with a reused arm, a line names it, and the arm's log (kept with it) says so in $OUT/arms.log.

`--skip-checks` leaves out phase 2's capture and gradient checks (when the committed checks are fresh). An `--extra`
entry whose full configuration names `gpt2_windows` (`kernel_bias_table`) gets its own capture of layer 2 with that
many windows, from the same arm's latest checkpoint once it is past 3,000 steps, in `$BOOK_GPT2_CAPTURE` (never from
a reused arm, which has no checkpoint, unless every arm is).

Every phase resumes what is on the machine's disk, writes the arms' progress into $OUT/arms.log and prints a
progress table; results are written with provenance under $OUT/full/ (fetch them into results/full/). `--wait`
bounds the waiting (default 540 s from the phase's start), so a call ends inside its 10 minutes. $OUT keeps at most
8 files a call: the GPU tests' per-shard logs stay on the machine (their output is in the combined log).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import torch

from lib.book import provenance, registry, results, runner
from lib.studies.gpt2 import arms

ROOT = Path(__file__).resolve().parents[3]
ENTRY = "gpt2_arms"
KEPT = ROOT / "results" / "arms"     # finished arms kept here: <entry>/<arm>_s<seed>.{result.gz,json,log}
TAR = "arms_done.tar"
TAR_LIMIT = 16 * 2 ** 20             # the largest file a call returns


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


def save_finished(cfgs, out: Path, saved: dict) -> list[str]:
    """Save every entry whose arms have all finished and that is not in `saved` yet (then record its exit status
    there), so that a call that ends before phase 3 — or a machine lost between calls — already returns what is
    done. The entries saved."""
    done = [cfg for cfg in cfgs if cfg["_entry"] not in saved
            and all(_file(cfg, lab, "result").exists() for lab in _labels(cfg))]
    for cfg in done:
        os.environ["BOOK_WAIT_S"] = "0"
        saved[cfg["_entry"]] = rc = save(cfg["_entry"], out)
        print(f"{cfg['_entry']} saved as its arms finished: exit status {rc}", flush=True)
        if rc == 0:
            say_reused(cfg)
    return [cfg["_entry"] for cfg in done]


def missing_arms(cfg) -> list[str]:
    """The arms of an entry that have, in its workdir, neither a result nor the files `arms._start` writes when it
    starts one (cfg, log, pid): every arm on a fresh machine, which a later phase must not restart."""
    return [lab for lab in _labels(cfg) if not _file(cfg, lab, "result").exists()
            and not all(_file(cfg, lab, ext).exists() for ext in ("cfg", "log", "pid"))]


def intact(cfgs) -> list[dict]:
    """The entries whose arms are all on this disk; each other entry is named in a MACHINE LOST line."""
    keep = []
    for cfg in cfgs:
        miss = missing_arms(cfg)
        if not miss:
            keep.append(cfg)
        elif len(miss) == len(_labels(cfg)):
            print(f"MACHINE LOST: {cfg['_entry']} has no arms on this disk; nothing restarted", flush=True)
        else:
            print(f"MACHINE LOST: {cfg['_entry']} lacks arms {', '.join(miss)} on this disk; nothing restarted",
                  flush=True)
    return keep


def record(name: str) -> dict:
    """What a finished arm of entry `name` was trained under: the entry's resolved full configuration and the code
    fingerprints its saved result would record (as `lib.book.runner.run_and_save` computes them)."""
    e = registry.get(name)
    cfg = registry.resolve(name, "full")
    extra = list(getattr(runner.base_module(e), "code_entries", lambda c: [])(cfg))
    return dict(config=cfg, code=provenance.code_fingerprint([e.code_entry, *extra]))


def _stem(label: str) -> str:
    return label.replace(":", "_")


def _kept(cfg, label: str) -> dict | None:
    """The record of an arm that phase 1 seeded from a kept arm (None for an arm trained on this machine)."""
    f = _file(cfg, label, "kept.json")
    return json.loads(f.read_text()) if f.exists() else None


def say_reused(cfg) -> None:
    """One line naming the reused arms of an entry just saved (its arms log names them too)."""
    for lab in _labels(cfg):
        side = _kept(cfg, lab)
        if side:
            print(f"{cfg['_entry']} saved with {lab} reused: {side['steps']} steps trained at commit "
                  f"{side['git_commit'][:8]} on {side['device']}", flush=True)


def pack_finished(cfgs, out: Path, saved=()) -> list[str]:
    """Every finished arm of an entry not in `saved` (trained here, not reused) into one file $OUT/arms_done.tar:
    `<entry>/<arm>_s<seed>.result.gz` (the arm's result, gzip: ≈ 11 MB raw, ≈ 1.2 MB packed at 10,000 steps), its
    log and a `.json` record (entry, label, `record`, commit, device, steps, the result's sha256). An arm that would
    take the file past 16 MiB is left out with a note. The labels packed."""
    files, packed, size = {}, [], 1024
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    for cfg in cfgs:
        name, rec = cfg["_entry"], None
        if name in saved:
            continue
        for lab in _labels(cfg):
            if not _file(cfg, lab, "result").exists() or _kept(cfg, lab):
                continue
            raw = _file(cfg, lab, "result").read_bytes()
            res = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
            rec = rec or record(name)
            side = dict(entry=name, label=lab, **rec, git_commit=results.git_commit(), device=device,
                        steps=len(res["loss"]), truncated_at=res.get("truncated_at"),
                        stopped_at=res.get("stopped_at"), sha256=hashlib.sha256(raw).hexdigest(),
                        packed_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
            arm = {f"{name}/{_stem(lab)}.result.gz": gzip.compress(raw, mtime=0),
                   f"{name}/{_stem(lab)}.json": json.dumps(side, indent=1, sort_keys=True).encode()}
            if _file(cfg, lab, "log").exists():
                arm[f"{name}/{_stem(lab)}.log"] = _file(cfg, lab, "log").read_bytes()
            more = sum(512 + -(-len(b) // 512) * 512 for b in arm.values())
            if size + more > TAR_LIMIT:
                print(f"note: {lab} of {name} not packed: {TAR} would pass {TAR_LIMIT >> 20} MiB", flush=True)
                continue
            files.update(arm)
            size += more
            packed.append(f"{name} {lab}")
    if files:
        with tarfile.open(Path(out) / TAR, "w") as tar:
            for arc, blob in files.items():
                info = tarfile.TarInfo(arc)
                info.size, info.mtime = len(blob), int(time.time())
                tar.addfile(info, io.BytesIO(blob))
        print(f"packed into {TAR} ({size / 2 ** 20:.1f} MiB): {'; '.join(packed)}", flush=True)
    return packed


_MEMBER = re.compile(r"^([A-Za-z0-9_]+)/([A-Za-z0-9_]+)\.(result\.gz|json|log)$")


def keep(tar_path: Path | str, kept: Path | str = KEPT) -> list[Path]:
    """Unpack a returned arms_done.tar into `kept`/<entry>/ after checking each arm's result against its record.
    The records written."""
    arms_in: dict = {}
    with tarfile.open(tar_path) as tar:
        for m in tar.getmembers():
            hit = _MEMBER.match(m.name)
            if not (m.isfile() and hit):
                raise ValueError(f"{tar_path}: unexpected member {m.name!r}")
            arms_in.setdefault(hit.group(1, 2), {})[hit.group(3)] = tar.extractfile(m).read()
    written = []
    for (entry, stem), parts in sorted(arms_in.items()):
        side = json.loads(parts["json"])
        if hashlib.sha256(gzip.decompress(parts["result.gz"])).hexdigest() != side["sha256"]:
            raise ValueError(f"{tar_path}: {entry} {side['label']}: the result does not match its record")
        dst = Path(kept) / entry
        dst.mkdir(parents=True, exist_ok=True)
        for ext, blob in parts.items():
            (dst / f"{stem}.{ext}").write_bytes(blob)
        written.append(dst / f"{stem}.json")
        print(f"kept {side['label']} of {entry}: {side['steps']} steps, commit {side['git_commit'][:8]}, "
              f"{side['device']} -> {dst / stem}.*", flush=True)
    return written


def differences(side: dict, now: dict) -> list[str]:
    """Why a kept arm's record does not stand for what the current code and registry would train (empty: it does)."""
    why = []
    a, b = side.get("config", {}), now["config"]
    if registry.config_digest(a) != registry.config_digest(b):
        why.append("configuration differs: " + ", ".join(sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))))
    why += [f"code changed: {e}" for e in sorted(set(side.get("code", {})) | set(now["code"]))
            if side.get("code", {}).get(e) != now["code"].get(e)]
    return why


def seed_kept(cfgs, kept: Path | str = KEPT) -> list[str]:
    """Phase 1: put every kept arm whose record equals `record` now (configuration and code fingerprints) into its
    entry's workdir as a finished arm — its result, its log with a line saying so, and its record as
    `<arm>.kept.json` — so that neither `start_arms` nor `arms.run` trains it again; any other kept arm trains again,
    and the line says why. The labels reused."""
    reused = []
    for cfg in cfgs:
        name, now = cfg["_entry"], None
        for lab in _labels(cfg):
            src = {ext: Path(kept) / name / f"{_stem(lab)}.{ext}" for ext in ("json", "result.gz", "log")}
            if not src["json"].exists() or _file(cfg, lab, "result").exists():
                continue
            side = json.loads(src["json"].read_text())
            now = now or record(name)
            why = differences(side, now)
            raw = b"" if why else gzip.decompress(src["result.gz"].read_bytes())
            if not why and hashlib.sha256(raw).hexdigest() != side["sha256"]:
                why.append("its result does not match its record")
            if why:
                print(f"kept {lab} of {name} (commit {side['git_commit'][:8]}) not reused, it trains again: "
                      f"{'; '.join(why)}", flush=True)
                continue
            Path(cfg["workdir"]).mkdir(parents=True, exist_ok=True)
            line = (f"[{lab}] reused: {side['steps']} steps trained at commit {side['git_commit'][:8]} on "
                    f"{side['device']} on an earlier machine; not trained again here\n")
            old = src["log"].read_bytes() if src["log"].exists() else b""
            _file(cfg, lab, "log").write_bytes(old + line.encode())
            _file(cfg, lab, "kept.json").write_text(json.dumps(side))
            tmp = _file(cfg, lab, "result.tmp")
            tmp.write_bytes(raw)
            tmp.replace(_file(cfg, lab, "result"))
            print(line.strip(), flush=True)
            reused.append(f"{name} {lab}")
    return reused


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
    both), else the first arm; an arm reused from an earlier machine (no checkpoint) only when all are."""
    slots = [(cfg, lab) for cfg, lab in _slots(cfgs) if not _kept(cfg, lab)] or _slots(cfgs)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["keep"]:
        kp = argparse.ArgumentParser(prog="python -m lib.studies.gpt2.campaign keep",
                                     description="keep the finished arms a call returned, for phase 1 to reuse")
        kp.add_argument("tar", help=f"the {TAR} a call returned")
        kp.add_argument("--into", default=str(KEPT))
        k = kp.parse_args(argv[1:])
        keep(k.tar, k.into)
        return 0
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
    n = torch.cuda.device_count()
    print(f"phase {a.phase} of {', '.join(a.entry)}: {n} × {torch.cuda.get_device_name(0)}, torch {torch.__version__}",
          flush=True)
    if len(_slots(cfgs)) > n:
        print(f"note: {len(_slots(cfgs))} arms on {n} GPUs (arms share GPUs)", flush=True)
    status = 0
    if a.phase != 1:
        # A machine lost between calls comes back bare: its arms would start again from step 0. Go on with the
        # entries whose arms are all here; exit 3 (at once when none is).
        kept = intact(cfgs)
        status = 3 if len(kept) < len(cfgs) else 0
        if not kept:
            return 3
        cfgs = kept
    slots = _slots(cfgs)
    saved: dict = {}
    if a.phase == 1:
        arms.build_corpus(cfgs[0])
        print(f"corpus ready after {time.time() - t0:.0f} s", flush=True)
        os.environ["BOOK_WAIT_S"] = "0"
        seed_kept(cfgs)
        start_arms(cfgs, n)
        training = [(cfg, lab) for cfg, lab in slots if not _file(cfg, lab, "result").exists()]
        scratch = Path("/tmp/gpu_tests")
        scratch.mkdir(exist_ok=True)
        test_gpus = ",".join(str(i) for i in range(1, n)) or "0"
        # Compile-bound tests: several processes per GPU (the GPU image has no pytest-xdist).
        tests = subprocess.Popen([sys.executable, "tests/gpu/run_sharded.py", "--gpus", "0", "--jobs",
                                  str(max(4, n - 1)), "--costs", "tests/gpu/durations_h100.json", "--log", str(scratch / "gpu_tests.log"), "--", "-rP"], cwd=ROOT,
                                 env=dict(os.environ, CUDA_VISIBLE_DEVICES=test_gpus))
        while training and min(_steps(cfg, lab)[0] for cfg, lab in training) < 50:
            dead = [lab for cfg, lab in training if not arms._alive(_file(cfg, lab, "pid"))]
            if dead or time.time() - t0 > 420:
                snapshot(out, cfgs)
                print(f"SMOKE FAILED: arms {dead or 'too slow'} before step 50; stopping the arms", flush=True)
                stop_arms(cfgs)
                tests.wait()
                shutil.copy(scratch / "gpu_tests.log", out / "gpu_tests.log")
                pack_finished(cfgs, out)
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
        for cfg in cfgs:
            os.environ["BOOK_WAIT_S"] = str(max(0.0, a.wait - (time.time() - t0)))
            saved[cfg["_entry"]] = rc = save(cfg["_entry"], out)
            print(f"{cfg['_entry']} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
            if rc == 0:
                say_reused(cfg)
        # Before the benchmarks, which may run to the end of the call: the finished arms of unsaved entries.
        pack_finished(cfgs, out, {name for name, rc in saved.items() if rc == 0})
        for name in a.extra:
            rc = save(name, out, extra_capture(name, cfgs, 0))
            print(f"{name} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    while a.phase != 3 and time.time() - t0 < a.wait:
        if a.phase == 2:
            save_finished(cfgs, out, saved)
        if all(_file(cfg, lab, "result").exists() for cfg, lab in slots):
            break
        time.sleep(15)
    snapshot(out, cfgs)
    if a.phase != 3:
        pack_finished(cfgs, out, {name for name, rc in saved.items() if rc == 0})
    return status


if __name__ == "__main__":
    sys.exit(main())
