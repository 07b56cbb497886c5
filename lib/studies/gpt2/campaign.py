"""One GPU campaign on a multi-GPU machine, as calls of ≤ 10 minutes issued one after another on the same machine.

    python -m lib.studies.gpt2.campaign PHASE --out $OUT [--entry gpt2_arms [more entries]] [--wait S]
                                        [--beside NAME …] [--extra NAME …] [--skip-checks]
    python -m lib.studies.gpt2.campaign keep $OUT/arms_done.tar       (here, after a call)

The arms of the named entries go one per GPU, in order (entry after entry), so two entries of two arms fill a
4-GPU machine and one fills a 2-GPU machine.

* phase 1: refuse (exit 2, nothing started) when an arm's attention spec runs only on our kernel's emulated path
  (`emulated_arms`); build the token corpus (if absent); put the kept arms that may be reused into their workdirs (below);
  start the other arms (each in its own process session, so they outlive the call); run the GPU tests beside them,
  sharded over the GPUs no arm uses, or where every GPU has an arm over those of every arm but the first (the first
  entry's first arm — FP32 attention, the slowest — is not slowed; `--no-gpu-tests`: none, when the call ran `make gpu-tests` alone before phase 1, as on a one-GPU
  machine), log in $OUT; the smoke check: every training arm past step 50 with finite gradients, else stop the
  arms and exit 2 (the campaign ends early); the GPU tests' exit status, and on a failure likewise; then wait. On a
  one-GPU machine the suite runs beside the only arm, which it slows for its few minutes (`--no-gpu-tests` after the
  suite ran alone on the idle GPU keeps the arm's timing clean).
* phase 2: wait; capture one GPT-2 layer (q, k, v, dO of layer 2, 1-based) from the latest checkpoint (≥ 3,000 steps)
  of the SDPA arm, or of the paper arm where no entry has SDPA, and run the registered `gradient_checks` with it on
  GPU 1, then each result named by `--extra` on the last GPU, beside the arms; wait, saving each entry as soon as
  all its arms have finished (so a machine lost before phase 3 loses only the entries still training).
* phase 3: wait for the arms (their wall budget stops them in time) and save every entry that no earlier call saved
  (a marker in its workdir says so: its result came back with that call); then each result named by `--extra` with
  every GPU visible (the arms have stopped, so a benchmark finds its GPUs idle).

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

One arm of an entry at a time. `--arms LABEL …` trains only the named arms (their labels in the registry, without
the seed: `inject_1x`) of each entry, so that an entry of two arms can be done on a one-GPU machine in two holds
without the arms sharing the GPU (each at half speed): an entry left with fewer arms is *partial* — phase 3 waits for
its arms (within `--wait`) and never saves it, and every phase returns its finished arms in $OUT/arms_done.tar, to be
kept here (`keep`). The hold that trains the last arm names no `--arms`: phase 1 puts the kept arms into the workdir
as finished, only the missing arm trains, and the entry is saved with the kept arms reused. An entry with none of the
named arms is left out.

Results beside the arms. `--beside NAME …` (the same names in every phase) runs registered results on the GPUs no
training arm uses, from phase 1 on, and on an arm's GPU once every arm on it has finished (its result written, its
process gone). Right after the smoke check, phase 1 plans them — a result runs on one GPU unless its full
configuration names `gpus` (0: every GPU of the machine); one that needs more GPUs than the machine has gets a line
"BESIDE SKIPPED" and is not run — and starts a scheduler as a detached process (`run_beside`), which runs them in
the order named, each on the first idle GPUs, one result a GPU at a time, writing each with its
provenance as `save` would, into /tmp/campaign_beside/full/ on the machine's disk (log: <name>_run.log there; it
inherits the call's environment, such as $EXPLOSION_BUDGET_S, but no wait bound). Every phase waits for them as
for the arms, prints their progress in the table and, last (phase 3: after waiting for them within `--wait`, before
the `--extra` results), copies the finished ones not returned yet into $OUT/full/ (.json and .npz) with their
run logs in one $OUT/beside_logs.tar (unpack it into results/full/), while $OUT holds at most 8 files — counting
what is there and what the phase still writes; a result that does not fit waits for a later phase, with a note.
On a lost machine the beside results not returned are named in a MACHINE LOST line, nothing is started, and the
phase exits 3; a result that failed shows the tail of its log once. Note that phase 1's GPU tests share the free
GPUs with them while they run, and that phase 2's `--extra` results run on GPU min(2, n−1), which may be theirs.

`--skip-checks` leaves out phase 2's capture and gradient checks (when the committed checks are fresh). An `--extra`
entry whose full configuration names `gpt2_windows` (`kernel_bias_table`) gets its own capture of layer 2 with that
many windows, from the same arm's latest checkpoint once it is past 3,000 steps, in `$BOOK_GPT2_CAPTURE` (never from
a reused arm, which has no checkpoint, unless every arm is).

Every phase resumes what is on the machine's disk, writes the arms' progress into $OUT/arms.log and prints a
progress table; results are written with provenance under $OUT/full/ (fetch them into results/full/). `--wait`
bounds the waiting (default 540 s from the phase's start), so a call ends inside its 10 minutes. $OUT keeps at most
8 files a call: the GPU tests' per-shard logs stay on the machine (their output is in the combined log). Without
`--beside` no phase plans, starts, prints or returns anything beside the arms.
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


def select_arms(cfgs, labels) -> list[dict]:
    """`--arms`: each entry's config with only the arms labelled in `labels` (registry labels, without the seed),
    marked `_partial` where an arm was left out; entries with none of them are left out (one line each). Raises
    ValueError for a label no entry has."""
    unknown = set(labels) - {arm["label"] for cfg in cfgs for arm in cfg["arms"]}
    if unknown:
        raise ValueError(f"--arms: no entry has arm(s) {', '.join(sorted(unknown))}")
    out = []
    for cfg in cfgs:
        chosen = [arm for arm in cfg["arms"] if arm["label"] in labels]
        if not chosen:
            print(f"{cfg['_entry']}: none of its arms named by --arms; left out", flush=True)
            continue
        out.append(dict(cfg, arms=chosen, _partial=len(chosen) < len(cfg["arms"])))
    return out


def snapshot(out: Path, cfgs, beside=()) -> None:
    """The arms' logs, one after another, into $OUT/arms.log and one progress line per arm (and per `beside`
    result) on stdout."""
    with open(out / "arms.log", "w") as dst:
        for cfg, lab in _slots(cfgs):
            if _file(cfg, lab, "log").exists():
                dst.write(f"==> {cfg['_entry']} {lab} <==\n{_file(cfg, lab, 'log').read_text()}\n")
    for cfg, lab in _slots(cfgs):
        step, ok = _steps(cfg, lab)
        print(f"  {cfg['_entry']:18s} {lab:12s} step {step:6d} {'ok' if ok else 'NOT FINITE'} "
              f"{'done' if _file(cfg, lab, 'result').exists() else ''}", flush=True)
    beside_table(beside)


def emulated_arms(cfgs) -> list[str]:
    """The arms whose attention spec our kernel can only run on its emulated path (≈ 15× slower than the native
    one: `kernels.attention.native_allowed`, formats wider than BF16's mantissa), as "<entry> <arm>: <spec>" — such
    an arm cannot finish in a campaign (the P̄-and-ℓ-in-FP32 dial arm, emulated before its products had a native
    form, trained 300 steps in 511 s beside arms at 4,700)."""
    from kernels.attention import native_allowed
    from lib.fp.numerics import get_profile
    from lib.training.model import GPTConfig
    from lib.training.spec import AttnSpec
    out = []
    for cfg in cfgs:
        for arm in cfg["arms"]:
            specs = GPTConfig(**(dict(cfg["model"]) | {"attn": arm["attn"]})).layer_specs()
            if any(isinstance(sp, AttnSpec) and sp.backend == "ours" and not native_allowed(get_profile(sp.numerics))
                   for sp in specs):
                out.append(f"{cfg['_entry']} {arm['label']}: {arm['attn']}")
    return out


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


def _save_argv(name: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "lib.experiments", name, "--scale", "full", "--out", str(out)]


COMMIT_FILE = Path("/tmp/campaign_commit")  # on the machine's disk: the commit the campaign's first call was given


def remember_commit(phase: int, path: Path = COMMIT_FILE) -> str | None:
    """The commit every result of the campaign records (`lib.book.results.git_commit`). The machine's copy of the tree
    has no history of this session's commits — git there answers with an older base commit — so the call that starts
    a campaign sets ``BOOK_GIT_COMMIT``; phase 1 keeps it on the machine's disk (or forgets an older one), and a later
    phase that was not given it takes it from there (one result was recorded with the base commit so). The commit in
    force, or None."""
    commit = os.environ.get("BOOK_GIT_COMMIT")
    if commit:
        path.write_text(commit)
    elif phase == 1:
        path.unlink(missing_ok=True)
    elif path.exists():
        commit = path.read_text().strip()
        os.environ["BOOK_GIT_COMMIT"] = commit
    return commit or None


def save(name: str, out: Path, env=None) -> int:
    """`python -m lib.experiments NAME --scale full --out OUT` as a subprocess; its exit status."""
    return subprocess.call(_save_argv(name, out), cwd=ROOT, env=dict(os.environ, **(env or {})))


def save_finished(cfgs, out: Path, saved: dict) -> list[str]:
    """Save every entry whose arms have all finished and that is not in `saved` yet (then record its exit status
    there), so that a call that ends before phase 3 — or a machine lost between calls — already returns what is
    done. The entries saved."""
    done = [cfg for cfg in cfgs if cfg["_entry"] not in saved and not cfg.get("_partial")
            and all(_file(cfg, lab, "result").exists() for lab in _labels(cfg))]
    for cfg in done:
        os.environ["BOOK_WAIT_S"] = "0"
        saved[cfg["_entry"]] = rc = save(cfg["_entry"], out)
        print(f"{cfg['_entry']} saved as its arms finished: exit status {rc}", flush=True)
        if rc == 0:
            mark_saved(cfg)
            say_reused(cfg)
    return [cfg["_entry"] for cfg in done]


def _saved_marker(cfg) -> Path:
    return Path(cfg["workdir"]) / "saved.json"


def mark_saved(cfg) -> None:
    """Record on the machine's disk that the entry's result was written into a call's $OUT (which comes back with
    that call), so that a later phase does not save it again — a second save costs a minute of device time and
    returns a copy that differs only in its creation time."""
    _saved_marker(cfg).write_text(json.dumps({"entry": cfg["_entry"], "at": time.time()}))


def saved_earlier(cfgs) -> dict:
    """{entry: 0} for each entry an earlier call saved (`mark_saved`), to seed a phase's `saved`."""
    return {cfg["_entry"]: 0 for cfg in cfgs if _saved_marker(cfg).exists()}


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


def _write_tar(path: Path, files: dict) -> None:
    """{member name: bytes} into one tar file at `path`."""
    with tarfile.open(path, "w") as tar:
        for arc, blob in files.items():
            info = tarfile.TarInfo(arc)
            info.size, info.mtime = len(blob), int(time.time())
            tar.addfile(info, io.BytesIO(blob))


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
        _write_tar(Path(out) / TAR, files)
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


def seed_kept(cfgs, kept: Path | str | None = None) -> list[str]:
    """Phase 1: put every kept arm whose record equals `record` now (configuration and code fingerprints) into its
    entry's workdir as a finished arm — its result, its log with a line saying so, and its record as
    `<arm>.kept.json` — so that neither `start_arms` nor `arms.run` trains it again; any other kept arm trains again,
    and the line says why. `kept`: the folder `keep` unpacks into (default `KEPT`). The labels reused."""
    kept = KEPT if kept is None else kept
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
    from lib.training.model import build_lm
    from lib.training.loop import RunConfig, get_batch, load_data
    import numpy as np
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ck = torch.load(_file(cfg, label, "pt"), map_location=dev, weights_only=False)
    rc = RunConfig(**ck["config"])
    model = build_lm(rc.model).to(dev)
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


# ------------------------------------------------------------------------------------ results beside the arms
BESIDE_DIR = Path("/tmp/campaign_beside")   # on the machine's disk: plan, scheduler, each result's files and log
BESIDE_LOGS = "beside_logs.tar"             # the run logs of the beside results a call returns, in one file
OUT_FILES = 8                               # the most files a call returns from $OUT


def _bfile(name: str, ext: str) -> Path:
    return BESIDE_DIR / f"{name}.{ext}"


def _blog(name: str) -> Path:
    return BESIDE_DIR / f"{name}_run.log"


def _bresult(name: str) -> list[Path]:
    """What `save(name, BESIDE_DIR)` wrote: <name>.json and, when the result has arrays, <name>.npz."""
    js = BESIDE_DIR / "full" / f"{name}.json"
    return [f for f in (js, js.with_suffix(".npz")) if f.exists()]


def gpus_needed(name: str, n: int) -> int:
    """GPUs a registered result runs on: its full configuration's `gpus` (0: every GPU of the machine), else one
    (the proxy's concurrent runs all share the first visible GPU)."""
    g = registry.resolve(name, "full").get("gpus")
    return 1 if g is None else int(g) or n


def free_gpus(cfgs, n: int) -> list[int]:
    """The GPUs no training arm uses (arm i, over all entries, trains on GPU i mod n; a finished arm uses none)."""
    used = {i % n for i, (cfg, lab) in enumerate(_slots(cfgs)) if not _file(cfg, lab, "result").exists()}
    return [g for g in range(n) if g not in used]


def arms_on_gpus(cfgs, n: int) -> dict[int, list[list[str]]]:
    """{GPU: [[result file, pid file] of each unfinished arm on it]} (arm i, over all entries, trains on GPU i mod n)
    — what the scheduler waits for before it puts a beside result on that GPU."""
    on: dict = {}
    for i, (cfg, lab) in enumerate(_slots(cfgs)):
        if not _file(cfg, lab, "result").exists():
            on.setdefault(i % n, []).append([str(_file(cfg, lab, "result")), str(_file(cfg, lab, "pid"))])
    return on


def _gpu_freed(plan: dict, g: int) -> bool:
    """Whether every arm planned on GPU g has finished: its result written and its process gone (an arm still
    writing its result would share the GPU with the next run)."""
    return all(Path(res).exists() and not arms._alive(Path(pid)) for res, pid in plan.get("after", {}).get(str(g), []))


def _detach(argv: list[str], log: Path, env: dict | None = None) -> int:
    """Start `argv` in its own process session (it outlives the call), output appended to `log`; its pid."""
    with open(log, "a") as f:
        return subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, **(env or {})), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True).pid


def start_beside(names, cfgs, n: int) -> list[str]:
    """Phase 1: plan the results named by `--beside` onto the GPUs no arm uses and, once their arms finish, the
    GPUs of the arms — a result that needs more GPUs than the machine has is skipped, with a line saying so — and
    start the scheduler (`run_beside`) as a detached process. The names planned."""
    BESIDE_DIR.mkdir(parents=True, exist_ok=True)
    if arms._alive(BESIDE_DIR / "scheduler.pid"):
        print("beside: the scheduler of an earlier phase 1 still runs; nothing started", flush=True)
        return [r["name"] for r in json.loads((BESIDE_DIR / "plan.json").read_text())["results"]]
    free, after = free_gpus(cfgs, n), arms_on_gpus(cfgs, n)
    plan, skipped = [], {}
    for name in names:
        k = gpus_needed(name, n)
        if _bfile(name, "rc").exists():
            plan.append(dict(name=name, gpus=k))          # ended on this machine before: not run again
        elif k > n:
            skipped[name] = f"needs {k} GPUs, the machine has {n}"
            print(f"BESIDE SKIPPED: {name} {skipped[name]}", flush=True)
        else:
            plan.append(dict(name=name, gpus=k))
    gpus = free + sorted(after)
    (BESIDE_DIR / "plan.json").write_text(json.dumps(dict(gpus=gpus, after={str(g): w for g, w in after.items()},
                                                          results=plan, skipped=skipped)))
    if any(not _bfile(r["name"], "rc").exists() for r in plan):
        pid = _detach([sys.executable, "-m", "lib.studies.gpt2.campaign", "beside-run", str(BESIDE_DIR)],
                      BESIDE_DIR / "scheduler.log")
        (BESIDE_DIR / "scheduler.pid").write_text(str(pid))
        where = [f"GPU {', '.join(map(str, free))}"] if free else []
        if after:
            where.append(f"GPU {', '.join(map(str, sorted(after)))} once their arms finish")
        print(f"beside: {', '.join(r['name'] for r in plan)} on {' and '.join(where)}, one result a GPU at a time, "
              f"in this order", flush=True)
    return [r["name"] for r in plan]


def _launch(name: str, gpus: list[int]):
    """One beside result: `save(name, BESIDE_DIR)`'s command on `gpus`, output to <name>_run.log (no wait bound:
    it runs to its end)."""
    env = {k: v for k, v in os.environ.items() if k != "BOOK_WAIT_S"}
    env.update(CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)), PYTHONUNBUFFERED="1")
    with open(_blog(name), "a") as log:
        return subprocess.Popen(_save_argv(name, BESIDE_DIR), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def run_beside(launch=_launch, poll_s: float = 5.0, sleep=time.sleep) -> None:
    """The scheduler (`python -m lib.studies.gpt2.campaign beside-run DIR`): the results of plan.json in order,
    each on the first `gpus` idle GPUs of the plan (a later result fills a GPU an earlier one cannot use yet), one
    result a GPU at a time; a GPU that had arms is idle once they have all finished (`_gpu_freed`); <name>.pid and
    <name>.gpus when it starts, <name>.rc when it ends."""
    plan = json.loads((BESIDE_DIR / "plan.json").read_text())
    queue = [(r["name"], r["gpus"]) for r in plan["results"] if not _bfile(r["name"], "rc").exists()]
    running: dict = {}
    while queue or running:
        for name, (proc, _) in list(running.items()):
            if proc.poll() is not None:
                _bfile(name, "rc").write_text(str(proc.poll()))
                print(f"{name} exit status {proc.poll()}", flush=True)
                del running[name]
        busy = {g for _, gs in running.values() for g in gs}
        for name, k in list(queue):
            idle = [g for g in plan["gpus"] if g not in busy and _gpu_freed(plan, g)]
            if k <= len(idle):
                proc = launch(name, idle[:k])
                running[name] = (proc, idle[:k])
                busy |= set(idle[:k])
                queue.remove((name, k))
                _bfile(name, "gpus").write_text(json.dumps(idle[:k]))
                _bfile(name, "pid").write_text(str(proc.pid))
                print(f"{name} started on GPU {','.join(map(str, idle[:k]))}", flush=True)
        if queue or running:
            sleep(poll_s)


def beside_state(name: str) -> str:
    """queued, running, done (its result is on the disk), returned (by an earlier call), failed (exit k), or
    stopped (its process or the scheduler ended without an exit status)."""
    if _bfile(name, "returned").exists():
        return "returned"
    if _bfile(name, "rc").exists():
        rc = int(_bfile(name, "rc").read_text())
        return "done" if rc == 0 and _bresult(name) else f"failed (exit {rc})"
    alive = arms._alive(BESIDE_DIR / "scheduler.pid")
    if _bfile(name, "pid").exists():
        return "running" if alive or arms._alive(_bfile(name, "pid")) else "stopped"
    return "queued" if alive else "stopped"


def beside_pending(names) -> list[str]:
    return [n for n in names if beside_state(n) in ("queued", "running")]


def beside_lost(names) -> list[str]:
    """Phases 2 and 3: the beside results that are not on this disk (a machine lost between calls: its plan is
    gone), each in a MACHINE LOST line, and those phase 1 skipped; neither is started. The names lost."""
    if not names:
        return []
    if not (BESIDE_DIR / "plan.json").exists():
        print(f"MACHINE LOST: beside results {', '.join(names)} are not on this disk (any returned by an earlier call "
              f"came back); nothing restarted", flush=True)
        return list(names)
    plan = json.loads((BESIDE_DIR / "plan.json").read_text())
    planned = {r["name"] for r in plan["results"]}
    for name in names:
        if name not in planned:
            why = plan["skipped"].get(name, "not named in phase 1")
            print(f"beside: {name} is not run: {why}", flush=True)
    return []


_RUN_LINE = re.compile(r"^\s+\S+\s+(\d+)/(\d+)\s+loss", re.M)


def _progress(name: str) -> str:
    """The slowest run's step of the last progress block `run_many` printed, else the log's last line."""
    text = _blog(name).read_text(errors="replace") if _blog(name).exists() else ""
    block = text.rsplit("[run_many] ", 1)[-1]
    steps = [(int(a), int(b)) for a, b in _RUN_LINE.findall(block)]
    if steps:
        return f"slowest run at step {min(steps)[0]} of {min(steps)[1]} ({len(steps)} runs started)"
    lines = text.strip().splitlines()
    return lines[-1][-80:] if lines else ""


def beside_table(names) -> None:
    """One progress line per beside result (the table `snapshot` prints)."""
    for name in names:
        state = beside_state(name)
        gpus = json.loads(_bfile(name, "gpus").read_text()) if _bfile(name, "gpus").exists() else []
        where = f"GPU {','.join(map(str, gpus))}" if gpus else ""
        print(f"  beside {name:18s} {where:8s} {state} {_progress(name) if state == 'running' else ''}".rstrip(),
              flush=True)
        if state.startswith("failed") and not _bfile(name, "told").exists():
            _bfile(name, "told").write_text("")
            tail = _blog(name).read_text(errors="replace").splitlines()[-15:] if _blog(name).exists() else []
            print("\n".join(f"    | {line}" for line in tail), flush=True)


def return_beside(names, out: Path, reserve: int = 0) -> list[str]:
    """Copy every finished beside result not returned yet into $OUT/full/ (its .json and .npz, as `save` writes
    them), their run logs into one $OUT/beside_logs.tar, while $OUT holds at most `OUT_FILES` files — counting the
    files already there and `reserve` more that this call will still write; a result that does not fit stays on the
    machine for a later phase, with a note. The names returned."""
    have = sum(1 for f in Path(out).rglob("*") if f.is_file()) + reserve
    sent, logs = [], {}
    for name in names:
        if beside_state(name) != "done":
            continue
        files = _bresult(name)
        if have + len(files) + (not logs) > OUT_FILES:
            print(f"note: beside result {name} is not returned by this call ($OUT keeps {OUT_FILES} files); a later "
                  f"phase returns it", flush=True)
            continue
        (Path(out) / "full").mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy(f, Path(out) / "full" / f.name)
        have += len(files) + (not logs)
        logs[f"{name}_run.log"] = _blog(name).read_bytes() if _blog(name).exists() else b""
        sent.append(name)
    if logs:
        _write_tar(Path(out) / BESIDE_LOGS, logs)
        for name in sent:
            _bfile(name, "returned").write_text("")
        print(f"beside results returned: {', '.join(sent)} (their run logs in {BESIDE_LOGS})", flush=True)
    return sent


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
    if argv[:1] == ["beside-run"]:        # the detached scheduler phase 1 starts: python -m ... beside-run DIR
        global BESIDE_DIR
        BESIDE_DIR = Path(argv[1])
        run_beside()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", type=int, choices=(1, 2, 3))
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--entry", nargs="+", default=[ENTRY], help="registry entries whose arms train, in GPU order")
    ap.add_argument("--arms", nargs="+", default=None, metavar="LABEL",
                    help="train only these arms of the entries (registry labels); an entry left with fewer arms is "
                         "not saved, its finished arms come back in arms_done.tar")
    ap.add_argument("--wait", type=float, default=540.0)
    ap.add_argument("--extra", nargs="*", default=[],
                    help="registered results to run in phase 2 on GPU 2 beside the arms, or in phase 3 after them")
    ap.add_argument("--skip-checks", action="store_true", help="phase 2 without the capture and gradient checks")
    ap.add_argument("--no-gpu-tests", action="store_true",
                    help="phase 1 without the GPU tests beside the arms (they ran alone earlier in the call)")
    ap.add_argument("--beside", nargs="*", default=[], metavar="NAME",
                    help="registered results to run from phase 1 on the GPUs no arm uses, one a GPU at a time; "
                         "every phase returns the finished ones")
    a = ap.parse_args(argv)
    unknown = [name for name in a.beside if name not in registry.entries()]
    if unknown:
        ap.error(f"--beside: unknown result(s) {', '.join(unknown)}")
    t0 = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"commit recorded with the results: {remember_commit(a.phase) or 'none given (git answers)'}", flush=True)
    cfgs = [dict(registry.resolve(name, "full"), _entry=name) for name in a.entry]
    if a.arms:
        try:
            cfgs = select_arms(cfgs, a.arms)
        except ValueError as e:
            ap.error(str(e))
        if not cfgs:
            return 2
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
        lost = beside_lost(a.beside)
        status = 3 if len(kept) < len(cfgs) or lost else 0
        if not kept:
            return 3
        cfgs = kept
        a.beside = [name for name in a.beside if name not in lost]
    slots = _slots(cfgs)
    saved: dict = saved_earlier(cfgs) if a.phase != 1 else {}
    for name in saved:
        print(f"{name} was saved in an earlier call (its result came back with it); not saved again", flush=True)
    if a.phase == 1 and emulated_arms(cfgs):
        print("NOT NATIVE (no arm started): our kernel runs these arms only on its emulated path, far too slow to "
              "train in a campaign: " + "; ".join(emulated_arms(cfgs)), flush=True)
        return 2
    if a.phase == 1:
        arms.build_corpus(cfgs[0])
        print(f"corpus ready after {time.time() - t0:.0f} s", flush=True)
        os.environ["BOOK_WAIT_S"] = "0"
        seed_kept(cfgs)
        start_arms(cfgs, n)
        training = [(cfg, lab) for cfg, lab in slots if not _file(cfg, lab, "result").exists()]
        scratch = Path("/tmp/gpu_tests")
        scratch.mkdir(exist_ok=True)
        # The GPUs no arm trains on; on a machine full of arms, every GPU but the first (whose arm — FP32 attention
        # in the comparison, the slowest — is not slowed); on one GPU, that GPU.
        test_gpus = (",".join(map(str, free_gpus(cfgs, n))) or ",".join(str(i) for i in range(1, n)) or "0")
        # Compile-bound tests: several processes per GPU (the GPU image has no pytest-xdist). With --no-gpu-tests
        # (the suite ran alone on the idle machine earlier in the call, as on a one-GPU machine, where running it
        # beside the only arm would time neither) nothing is started and no log is copied.
        tests = None if a.no_gpu_tests else subprocess.Popen(
            [sys.executable, "tests/gpu/run_sharded.py", "--gpus", "0", "--jobs", str(max(4, n - 1)), "--costs",
             "tests/gpu/durations_h100.json", "--log", str(scratch / "gpu_tests.log"), "--", "-rP"], cwd=ROOT,
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=test_gpus))
        while training and min(_steps(cfg, lab)[0] for cfg, lab in training) < 50:
            dead = [lab for cfg, lab in training if not arms._alive(_file(cfg, lab, "pid"))]
            if dead or time.time() - t0 > 420:
                snapshot(out, cfgs)
                print(f"SMOKE FAILED: arms {dead or 'too slow'} before step 50; stopping the arms", flush=True)
                stop_arms(cfgs)
                if tests is not None:
                    tests.wait()
                    shutil.copy(scratch / "gpu_tests.log", out / "gpu_tests.log")
                pack_finished(cfgs, out)
                return 2
            time.sleep(5)
        bad = [lab for cfg, lab in slots if not _steps(cfg, lab)[1]]
        print(f"smoke: every arm past step 50 after {time.time() - t0:.0f} s; non-finite: {bad or 'none'}",
              flush=True)
        if a.beside:
            a.beside = start_beside(a.beside, cfgs, n)
        if tests is not None:
            rc = tests.wait()
            for f in ("gpu_tests.log", "gpu_tests_durations.json"):
                if (scratch / f).exists():
                    shutil.copy(scratch / f, out / f)
            print(f"GPU tests exit status {rc} after {time.time() - t0:.0f} s", flush=True)
            if rc != 0:       # the instrument failed: the campaign ends here, before the budget is spent
                print("GPU TESTS FAILED: stopping the arms", flush=True)
                stop_arms(cfgs)
                pack_finished(cfgs, out)
                return 2
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
            if cfg["_entry"] in saved:
                continue
            if cfg.get("_partial"):
                # Not saved here (its other arms train in a later hold): wait for its arms, which then come back
                # in arms_done.tar.
                while (not all(_file(cfg, lab, "result").exists() for lab in _labels(cfg))
                       and time.time() - t0 < a.wait):
                    time.sleep(15)
                print(f"{cfg['_entry']} not saved: only its arms {', '.join(_labels(cfg))} train here", flush=True)
                continue
            os.environ["BOOK_WAIT_S"] = str(max(0.0, a.wait - (time.time() - t0)))
            saved[cfg["_entry"]] = rc = save(cfg["_entry"], out)
            print(f"{cfg['_entry']} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
            if rc == 0:
                mark_saved(cfg)
                say_reused(cfg)
        # Before the benchmarks, which may run to the end of the call: the finished arms of unsaved entries.
        pack_finished(cfgs, out, {name for name, rc in saved.items() if rc == 0})
        if a.beside:
            # Like the arms, the beside results end before the benchmarks (which find their GPUs idle then).
            while beside_pending(a.beside) and time.time() - t0 < a.wait:
                time.sleep(15)
            if beside_pending(a.beside):
                print(f"beside results still running: {', '.join(beside_pending(a.beside))}", flush=True)
            # what the benchmarks and the arms log will still write: a .json and an .npz each, arms.log
            return_beside(a.beside, out, 2 * len(a.extra) + (not (out / "arms.log").exists()))
        for name in a.extra:
            rc = save(name, out, extra_capture(name, cfgs, 0))
            print(f"{name} exit status {rc} after {time.time() - t0:.0f} s", flush=True)
    while a.phase != 3 and time.time() - t0 < a.wait:
        if a.phase == 2:
            save_finished(cfgs, out, saved)
        if all(_file(cfg, lab, "result").exists() for cfg, lab in slots) and not beside_pending(a.beside):
            break
        time.sleep(15)
    snapshot(out, cfgs, a.beside)
    if a.phase != 3:
        pack_finished(cfgs, out, {name for name, rc in saved.items() if rc == 0})
        return_beside(a.beside, out)
    return status


if __name__ == "__main__":
    sys.exit(main())
