"""The GPU certificate of the training loop: every distinct run the committed training results made, a few steps in
an old tree and in this one, compared bit for bit on the GPU.

The ci certificates (`lib.book.certify`) show that moving the training code into one loop changed no number at ci
scale on the CPU. What they cannot show is the GPU: BF16 autocast, tensor-core kernels, `torch.compile`, code taken
only on CUDA. This tool rebuilds the runs the committed results made from what they recorded, at their own size, and
trains each distinct one a few steps in both trees on one GPU:

* **plan** (CPU, no training): one run configuration per distinct combination, from the results named (default:
  every result under ``results/full/``) — a GPT-2-style result records each run's `RunConfig` (``runs[].config``); a
  proxy result records its base `TrainConfig` in ``meta["config"]`` and each run's spec, seeds and LR
  (``runs[].attn``, ``seed``, ``data_seed``, ``lr``, and ``beta``/``max_shift`` where a run sets them). Two runs are
  the same combination when they agree on everything but seeds, LR, length and limits (`KEY_DROP`); the plan
  keeps the first. A result that records neither form is listed as not covered (its ci certificate is what there
  is).
* **run** (GPU): each planned run `--steps` steps (the census, telemetry and probe schedules shortened to fit, wall
  limits and checkpoints off) in the tree that produced its result (the commit the result records, extracted with
  ``git archive``; ``--old-commit`` for one tree for all) and in this one, each in its own subprocess with that
  tree as its working directory and ``PYTHONPATH``; the per-step loss and gradient norm (and the census or telemetry
  records) compared bit for bit (`lib.book.certify.compare_arrays`). Progress is written after every run to
  ``OUT/loop_certificate.json`` and a later call resumes from it, so the certificate can span calls of ≤ 10
  minutes. The record names the device, both commits, every combination, its results, and whether it was
  bit-identical.

* **On a machine without the repository's history** (the GPU machine gets the working tree, not ``.git``): first,
  here, ``prepare --trees DIR`` writes each old tree's sources as ``DIR/<commit>.tar.gz`` (its ``data/`` only where
  it differs from this tree's, which every run then shares) and this tree's commit as ``DIR/HEAD``; there, ``run
  --trees DIR`` reads them instead of git (``DIR`` an ignored folder named in the call's carry). Where git no
  longer has a result's commit, a stand-in is its old tree if the result records one (`_stand_in`: a commit where
  a re-keying found the very fingerprint the result recorded for its code; the combination then names the commit it
  stands in for); a commit with neither is listed in ``DIR/missing.json`` and its combinations are recorded as
  errors.
* **Across machine holds.** A combination certified bit-identical in an earlier record (`carry`) is taken over,
  not trained again, when that record's tree ran the same code: the same old tree, steps, GPU model, torch and
  Triton, and the same fingerprint of everything the child reaches in the new tree (`tree_fingerprint`: the
  provenance index's fingerprints of the child's entry points — the loop and the config class it builds from the
  record —, `lib.book.setup` and the child script itself). The
  combination then says where it was carried from. Identical code under deterministic algorithms gives identical
  bits, so a certificate can be assembled over several holds while only unrelated code changed between them.
* **Run-to-run variation.** Both trees run with every op deterministic ("strict": `torch.use_deterministic_algorithms`
  without warn_only, which is what puts SDPA's flash and memory-efficient backwards on their deterministic paths)
  and cuBLAS's deterministic workspace; where an op has no deterministic form (strict raises), the combination runs
  again in both trees with warnings only ("warn"), and the record names the mode, the strict error and the
  warnings. The first GPU call ran in "warn" only: FP32 attention's GPT-2 combination (whose backward is SDPA's
  memory-efficient one) differed from itself within 100 steps. Where the two trees differ, this tree runs the combination once
  more: the record says whether it reproduced itself, with the largest per-step loss difference of each pair — a
  combination that differs between the trees but not from itself is a real difference; one that differs from
  itself as much as between the trees certifies nothing either way.

    python -m lib.training.loop_certificate plan [NAME ...]
    python -m lib.training.loop_certificate prepare --trees DIR [--old-commit C] [NAME ...]
    python -m lib.training.loop_certificate run --out DIR [--old-commit C] [--steps 100] [--max-s S] [--shard K/N]
                                                [--trees DIR] [--carry RECORD] [--jobs J] [NAME ...]

* **Several at once.** `--jobs J` (the registry's ``jobs``) runs J shards at once in threads, each one combination
  after another, and merges their records (`in_parallel`): J processes share the GPU, or on a machine of several
  GPUs each shard has its own. Only for runs whose every op is deterministic and chosen without timing — the proxy's
  eager runs — so that sharing a GPU can change no bit; the GPT-2 runs compile, and the compiler may time
  candidate kernels, so they run one at a time.

`--shrink` (tests, CPU) replaces each run's model and batch by a tiny one, so the plumbing runs in seconds; a
record made with it says so and certifies nothing about the GPU.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from lib.book import results
from lib.book.certify import compare_arrays
from lib.book.provenance import PACKAGES, code_fingerprint
from lib.book.rekey import old_tree

ROOT = results.ROOT
RECORD = "loop_certificate.json"
# What two runs may differ in and still be one combination: seeds, LR and schedule lengths, limits, paths, labels.
KEY_DROP = frozenset({"seed", "data_seed", "lr", "steps", "warmup", "max_wall_s", "max_tokens", "ckpt_path",
                      "ckpt_every_s", "corpus_dir", "label", "eval_every", "eval_batches", "min_lr", "muon_lr",
                      "out_dir", "progress", "resume", "starts_path", "ckpt_every", "workers", "lr_source", "plan"})
# The run-level fields a proxy result records that change its TrainConfig.
PROXY_RUN_FIELDS = ("attn", "seed", "data_seed", "lr", "beta", "max_shift")
SHRINK = dict(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=2)

# Run in a subprocess with cwd = PYTHONPATH = the tree; writes the run's per-step records (npz) and, beside them
# (OUT.warnings.json), the determinism warnings torch gave.
_CHILD = """
import json, sys, warnings
import numpy as np
import lib.book.setup
import torch
kind, cfg, out, mode = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
# Both trees alike. "strict": every op deterministic or an error — SDPA's flash and memory-efficient backwards take
# their deterministic paths only then (under warn_only they split over keys and add with atomics); "warn":
# deterministic where torch has it, a warning where it has not. The proxy's loop sets its own (`deterministic`).
torch.use_deterministic_algorithms(True, warn_only=mode == "warn")
torch.backends.cudnn.deterministic = True
arrays = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if kind == "proxy":
        from dataclasses import fields
        import lib.training.train as T
        cfg["deterministic"] = mode         # the proxy's loop applies its own setting: the same mode
        # The record is flat. A tree from before the model was nested in TrainConfig takes the flat keys as its own
        # fields; a later one through TrainConfig.flat, with the model's keys in MODEL_KEYS.
        keys = {f.name for f in fields(T.TrainConfig)} | set(getattr(T, "MODEL_KEYS", ()))
        r = T.train(getattr(T.TrainConfig, "flat", T.TrainConfig)(**{k: v for k, v in cfg.items() if k in keys}))
        for k, v in r["telemetry"].items():
            try:
                arrays["telemetry__" + k] = np.asarray(v, dtype=np.float64)
            except (TypeError, ValueError):
                pass
    else:
        from dataclasses import fields
        from lib.training.loop import RunConfig, census_arrays, train_lm
        r = train_lm(RunConfig(**{k: v for k, v in cfg.items() if k in {f.name for f in fields(RunConfig)}}))
        for k, v in census_arrays(r["census"]).items():
            arrays["census__" + k] = np.asarray(v)
arrays["loss"] = np.asarray(r["loss"], dtype=np.float32)
arrays["grad_norm"] = np.asarray(r["grad_norm"], dtype=np.float32)
arrays["val"] = np.asarray(r["val"]["loss"], dtype=np.float64)
np.savez(out, **arrays)
with open(out + ".warnings.json", "w") as f:
    json.dump(sorted({str(w.message)[:300] for w in caught if "determinis" in str(w.message)}), f)
"""
# What the child reaches in the tree it runs in, by kind of run (`tree_fingerprint`): the loop and the config class it
# builds from the record (its defaults fill the fields an older record lacks, and it validates and converts them).
CHILD_ENTRIES = {"proxy": ("lib.training.train:train", "lib.training.train:TrainConfig"),
                 "lm": ("lib.training.loop:train_lm", "lib.training.loop:census_arrays",
                        "lib.training.loop:RunConfig")}
# Where run_in puts the child's determinism warnings in what it returns (not an array: left out of the comparison).
WARNINGS = "_determinism_warnings"
MODES = ("strict", "warn")
# The GPU a shard's thread gives its children (`in_parallel`); unset: the children see what this process sees.
_SHARD = threading.local()


def _stand_in(res: dict) -> dict:
    """{"stand_ins": [commit, …]} where the result records re-keyings (`lib.book.rekey`) that found, at a commit of
    this repository, the very fingerprint the result recorded for its code (``recorded_equal``): that commit's tree
    runs the result's code unchanged by provenance's own measure, so it can stand in for the result's own commit where
    git no longer has that one. Only while the recorded fingerprint is still the one the result's run recorded: the
    log is read in order up to its first entry that replaced the fingerprint (a certificate, a re-keying of unused
    code, a change of hashing: ``to_fingerprint``), since a later equality shows only equivalence to that replacement;
    and only for a result that records one code entry, which one re-keying covers. {} where there is none."""
    if len((res["meta"].get("provenance") or {}).get("code") or {}) != 1:
        return {}
    out = []
    for k in res["meta"].get("provenance_rekeys") or []:
        if "to_fingerprint" in k:
            break
        if k.get("recorded_equal") and k.get("old_commit") and k["old_commit"] not in out:
            out.append(k["old_commit"])
    return {"stand_ins": out} if out else {}


def _proxy_runs(name: str, res: dict) -> list[dict] | None:
    from lib.training.train import MODEL_KEYS, TrainConfig
    from dataclasses import fields
    base, runs = res["meta"].get("config") or {}, (res.get("data") or {}).get("runs")
    names = {f.name for f in fields(TrainConfig)} | set(MODEL_KEYS)
    if not isinstance(runs, list) or not {"n_layer", "attn"} <= set(base):
        return None
    out = []
    for r in runs:
        if isinstance(r, dict) and "attn" in r and "error" not in r:
            cfg = {k: v for k, v in base.items() if k in names} | {k: r[k] for k in PROXY_RUN_FIELDS if k in r}
            out.append(dict(kind="proxy", result=name, commit=res["meta"].get("git_commit"),
                            label=r.get("id") or r.get("tag") or r["attn"], cfg=cfg, **_stand_in(res)))
    return out or None


def _lm_runs(name: str, res: dict) -> list[dict] | None:
    runs = (res.get("data") or {}).get("runs")
    if not isinstance(runs, list):
        return None
    out = [dict(kind="lm", result=name, commit=res["meta"].get("git_commit"), label=r.get("label", ""),
                cfg=dict(r["config"]), **_stand_in(res)) for r in runs
           if isinstance(r, dict) and isinstance(r.get("config"), dict) and "model" in r["config"]]
    return out or None


def _key(run: dict) -> str:
    cfg = {k: v for k, v in run["cfg"].items() if k not in KEY_DROP}
    return json.dumps([run["kind"], cfg], sort_keys=True, default=str)


def plan(names=None, root: Path = ROOT) -> dict:
    """{"runs": one per distinct combination ({"kind": "proxy" | "lm", "result", "label", "cfg", "also": the other
    results with the same combination}), "not_covered": results that record no run configuration}."""
    paths = sorted((root / "results" / "full").glob("*.json"))
    if names:
        paths = [p for p in paths if p.stem in set(names)]
    seen, runs, not_covered = {}, [], []
    for path in paths:
        res = json.loads(path.read_text())
        got = _lm_runs(path.stem, res) or _proxy_runs(path.stem, res)
        if got is None:
            not_covered.append(path.stem)
            continue
        for run in got:
            key = _key(run)
            if key in seen:
                if run["result"] not in seen[key]["also"] and run["result"] != seen[key]["result"]:
                    seen[key]["also"].append(run["result"])
                continue
            seen[key] = dict(run, also=[])
            runs.append(seen[key])
    return dict(runs=runs, not_covered=not_covered)


def shortened(run: dict, steps: int, shrink: bool = False) -> dict:
    """The run's configuration for `steps` steps: limits, checkpoints and files off; every schedule (census,
    telemetry, probe, evaluation) at most every `steps` // 2 steps, so the shortened run still takes it; with
    `shrink`, a tiny model and batch (`SHRINK`)."""
    cfg = dict(run["cfg"], steps=steps, max_wall_s=0.0)
    half = max(1, steps // 2)
    for k in ("census_every", "telemetry_every", "probe_every", "eval_every"):
        if cfg.get(k):
            cfg[k] = min(int(cfg[k]), half)
    if run["kind"] == "proxy":
        cfg.update(out_dir="", ckpt_every=0, resume="", starts_path="", progress=False, eval_batches=1,
                   warmup=min(int(cfg.get("warmup", 0)), half))
        if shrink:
            cfg.update(SHRINK)
    else:
        cfg.update(max_tokens=0, ckpt_path="", ckpt_every_s=0.0, eval_batches=1,
                   warmup=min(int(cfg.get("warmup", 0)), half), census_rows=min(int(cfg.get("census_rows", 1)), 2))
        if shrink:
            model = dict(cfg["model"], n_layer=2, n_head=2, n_embd=32, block_size=32)
            cfg.update(model=model, batch_size=2, compile=False)
    return cfg


def run_in(tree: Path, run: dict, cfg: dict, out: Path, mode: str = "strict") -> dict:
    """Train `cfg` in `tree` (a subprocess) with deterministic algorithms in `mode` (`MODES`); its arrays, and under
    `WARNINGS` the determinism warnings it gave."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", CUBLAS_WORKSPACE_CONFIG=":4096:8")
    if getattr(_SHARD, "gpu", None) is not None:       # a shard of `in_parallel` on a machine of several GPUs
        env["CUDA_VISIBLE_DEVICES"] = str(_SHARD.gpu)
    p = subprocess.run([sys.executable, "-c", _CHILD, run["kind"], json.dumps(cfg), str(out), mode], cwd=tree,
                       env=env, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"the run in {tree} failed:\n{(p.stdout + p.stderr)[-3000:]}")
    with np.load(out) as z:
        got = {k: z[k] for k in z.files}
    w = Path(str(out) + ".warnings.json")
    got[WARNINGS] = json.loads(w.read_text()) if w.exists() else []
    return got


def tree_fingerprint(kind: str, tree: Path = ROOT) -> str:
    """sha256 hex of what a child of `kind` ("proxy", "lm") runs in `tree`: the provenance fingerprints of its entry
    points (`CHILD_ENTRIES`: the loop and the config class the child builds, everything they reach, kernels included),
    `lib/book/setup.py` and the child script."""
    import hashlib
    parts = dict(code_fingerprint(CHILD_ENTRIES[kind], tree), setup=(Path(tree) / "lib/book/setup.py").read_text(),
                 child=_CHILD)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _versions() -> dict:
    """{"device", "torch", "triton"} of this machine (what a carried combination must share)."""
    import torch
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = None
    return dict(device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                torch=torch.__version__, triton=tv)


def carried(run: dict, carry: dict | None, fingerprint: str, versions: dict, steps: int, old: str,
            shrunk: bool = False) -> dict | None:
    """The combination of `carry` (an earlier record) that certifies `run` here without training it: done,
    bit-identical, the same combination (`_key`), old tree `old`, `steps`, shrinking, device, torch and Triton
    (`versions`) and new-tree `fingerprint`; None when there is none."""
    if not carry or carry.get("steps") != steps or bool(carry.get("shrunk")) != shrunk:
        return None
    if any((carry.get("versions") or {}).get(k) != v for k, v in versions.items()):
        return None
    for c in carry.get("runs", []):
        if (c.get("done") and c.get("bit_identical") and not c.get("error") and c.get("old") == old
                and c.get("new_fingerprint") == fingerprint and _key(c) == _key(run)):
            return c
    return None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def _blobs(repo: Path, commit: str) -> dict:
    """{path: blob} of `commit`'s data/ ({} where it has none)."""
    out = _git(repo, "ls-tree", "-r", commit, "data").stdout.split("\n")
    return {ln.split("\t")[1]: ln.split()[2] for ln in out if "\t" in ln}


def prepare(trees: Path, names=None, old_commit: str | None = None, repo: Path = ROOT) -> dict:
    """For `run --trees` on a machine without git history: write `trees`/<commit>.tar.gz for each old tree the plan
    of `names` needs (`old_commit` for all, else each result's commit, or its stand-in where git lacks that one) —
    the sources provenance indexes, and data/ only where a file of it differs from this tree's (the runs otherwise
    share this tree's) —, `trees`/HEAD (this tree's commit) and `trees`/missing.json (commits git does not have).
    Returns {"trees": {commit: bytes}, "missing": [commit, …]}."""
    trees.mkdir(parents=True, exist_ok=True)
    head = _git(repo, "rev-parse", "HEAD").stdout.strip()
    head_data = _blobs(repo, "HEAD")
    commits = list(dict.fromkeys(old_tree_of(r, old_commit, None, repo) for r in plan(names, repo)["runs"]))
    out, missing = {}, []
    for c in commits:
        if not _have(c, None, repo):
            missing.append(c)
            continue
        data = _blobs(repo, c)
        paths = list(PACKAGES) + (["data"] if any(head_data.get(k) != v for k, v in data.items()) else [])
        tar = subprocess.run(["git", "archive", "--format=tar.gz", c, *paths], cwd=repo, capture_output=True,
                             check=True).stdout
        (trees / f"{c}.tar.gz").write_bytes(tar)
        out[c] = len(tar)
    (trees / "HEAD").write_text(head + "\n")
    (trees / "missing.json").write_text(json.dumps(missing))
    return dict(trees=out, missing=missing)


def _have(commit: str, trees: Path | None, repo: Path) -> bool:
    """Whether the tree of `commit` is to be had: from `prepare`'s archive in `trees`, else from git."""
    if trees is not None:
        return (trees / f"{commit}.tar.gz").exists()
    return not _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode


def old_tree_of(run: dict, old_commit: str | None, trees: Path | None, repo: Path) -> str:
    """The commit whose tree is `run`'s old tree: `old_commit` where given; else its result's commit, or, where that
    tree is not to be had, the first of the result's stand-ins (`_stand_in`) that is."""
    if old_commit or _have(run["commit"], trees, repo):
        return old_commit or run["commit"]
    return next((s for s in run.get("stand_ins") or () if _have(s, trees, repo)), run["commit"])


def _unpack(commit: str, dest: Path, trees: Path | None, repo: Path) -> Path:
    """The old tree of `commit` in `dest`: from git, or from `prepare`'s archive in `trees` (data/ this tree's where
    the archive has none)."""
    if trees is None:
        return old_tree(commit, dest, PACKAGES + ("data",), repo)
    arc = trees / f"{commit}.tar.gz"
    if not arc.exists():
        raise RuntimeError(f"no tree for commit {commit} in {trees}: prepare it where git has that commit")
    with tarfile.open(arc) as t:
        t.extractall(dest, filter="data")
    if not (dest / "data").exists():
        (dest / "data").symlink_to(Path(repo).resolve() / "data")
    return dest


def _loss_diff(a: dict, b: dict) -> float | None:
    """The largest |difference| of two runs' per-step losses (nats; NaN in both counts as equal), None without both."""
    if "loss" not in a or "loss" not in b or len(a["loss"]) != len(b["loss"]):
        return None
    x, y = np.asarray(a["loss"], np.float64), np.asarray(b["loss"], np.float64)
    d = np.abs(x - y)
    d[np.isnan(x) & np.isnan(y)] = 0.0
    return float(np.nanmax(d)) if np.isfinite(d).any() else float("nan")


def _corpus(cfg: dict, shrink: bool) -> None:
    """Build the token corpus a GPT-2-style run reads, where it is missing: the interpreter's standard library and
    site-packages (as the runs built it), or with `shrink` a few files of this repository."""
    from lib.training import token_corpus
    out = Path(cfg["corpus_dir"])
    if cfg.get("data") == "tokens" and not (out / "manifest.json").exists():
        token_corpus.build_token_corpus(roots=[str(ROOT / "lib" / "training")] if shrink else None, out_dir=out,
                                        max_files=20 if shrink else None)


def _pair(old: Path, new: Path, run: dict, cfg: dict, tmp: Path, mode: str) -> tuple[dict, dict]:
    """The combination trained in the old tree and in this one, both in determinism `mode`."""
    return run_in(old, run, cfg, tmp / "old.npz", mode), run_in(new, run, cfg, tmp / "new.npz", mode)


def certify_runs(old_commit: str | None, out: Path, steps: int = 100, names=None, max_s: float = 0.0,
                 shrink: bool = False, repo: Path = ROOT, shard: tuple[int, int] = (0, 1),
                 trees: Path | None = None, kinds=None, carry: Path | None = None) -> dict:
    """Train every planned combination `steps` steps in the tree that produced its result (its recorded commit; or
    `old_commit` for all) and in `repo`, compare, and write the record to OUT/loop_certificate.json after each
    (resuming the combinations it already holds); stop starting new ones after `max_s` seconds (0: no limit).
    `shard` (k, n): only the combinations k, k + n, k + 2n, … of the plan, recorded in OUT/loop_certificate.k.json
    (one process a GPU: `CUDA_VISIBLE_DEVICES` per shard). `kinds`: only the combinations of these kinds ("proxy",
    "lm"; None: all). `trees`: `prepare`'s folder, read instead of git. Where
    the two trees differ, `repo` runs the combination again: "reproducible" (whether it gave the same bits twice),
    "loss_diff" (old against new) and "self_loss_diff" (new against new), the largest per-step loss differences.
    `carry`: an earlier record (JSON) whose bit-identical combinations are taken over where `carried` allows
    ("carried_from": its new commit and date). Every combination records "new_fingerprint" (`tree_fingerprint` of
    `repo`). Returns the record."""
    import torch
    out.mkdir(parents=True, exist_ok=True)
    k, n = shard
    path = out / (RECORD if n == 1 else RECORD.replace(".json", f".{k}.json"))
    rec = json.loads(path.read_text()) if path.exists() else None
    new_commit = ((trees / "HEAD").read_text().strip() if trees is not None
                  else _git(repo, "rev-parse", "HEAD").stdout.strip())
    kinds = sorted(kinds) if kinds else None
    if (rec is None or rec.get("old_commit") != old_commit or rec.get("steps") != steps
            or rec.get("kinds") != kinds):
        p = plan(names, repo)
        p["runs"] = [r for r in p["runs"] if kinds is None or r["kind"] in kinds]
        rec = dict(old_commit=old_commit, new_commit=new_commit, steps=steps, shrunk=shrink, versions=_versions(),
                   device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                   date_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                   not_covered=p["not_covered"], shard=[k, n], kinds=kinds,
                   runs=[dict(r, done=False) for i, r in enumerate(p["runs"]) if i % n == k])
    t0 = time.perf_counter()
    unpacked = {}
    prior = json.loads(Path(carry).read_text()) if carry is not None and Path(carry).exists() else None
    versions = rec.get("versions") or _versions()
    prints = {}
    with tempfile.TemporaryDirectory(prefix="loopcert_") as tmp:
        for r in rec["runs"]:
            if r["done"]:
                continue
            if r["kind"] not in prints:
                prints[r["kind"]] = tree_fingerprint(r["kind"], repo)
            r["new_fingerprint"] = prints[r["kind"]]
            old = old_tree_of(r, old_commit, trees, repo)
            if old != r["commit"] and not old_commit:
                r["stand_in_for"] = r["commit"]         # said whether it is carried or trained
            c = carried(r, prior, r["new_fingerprint"], versions, steps, old, shrink)
            if c is not None:           # the same code certified before: taken over, not trained again
                r.update({k: c[k] for k in ("old", "determinism", "strict_error", "determinism_warnings",
                                            "bit_identical", "diffs", "compared", "error", "seconds") if k in c},
                         done=True, carried_from=dict(new_commit=prior.get("new_commit"),
                                                      date_utc=prior.get("date_utc")))
                path.write_text(json.dumps(rec, indent=1, default=str))
                print(f"{r['kind']:5s} {r['result']:28s} {r['label']:28s} {_verdict(r)} (carried from "
                      f"{str(prior.get('new_commit'))[:8]})", flush=True)
                continue
            if max_s and time.perf_counter() - t0 > max_s:
                break
            cfg = shortened(r, steps, shrink)
            if shrink and r["kind"] == "lm":
                cfg["corpus_dir"] = str(Path(tmp) / "corpus")
            t1 = time.perf_counter()
            try:
                r["old"] = commit = old
                if commit not in unpacked:
                    unpacked[commit] = _unpack(commit, Path(tmp) / f"old_{len(unpacked)}", trees, repo)
                if r["kind"] == "lm":
                    _corpus(cfg, shrink)
                try:        # strict first; where an op has no deterministic form, both trees again in "warn"
                    a, b = _pair(unpacked[commit], repo, r, cfg, Path(tmp), "strict")
                    r.update(determinism="strict", strict_error=None)
                except (RuntimeError, subprocess.CalledProcessError) as e:
                    r.update(determinism="warn", strict_error=str(e)[-600:])
                    a, b = _pair(unpacked[commit], repo, r, cfg, Path(tmp), "warn")
                r["determinism_warnings"] = sorted(set(a.pop(WARNINGS, [])) | set(b.pop(WARNINGS, [])))[:8]
                counts, diffs = compare_arrays(a, b)
                r.update(bit_identical=not diffs, diffs=diffs[:5], compared=counts, error=None)
                if diffs:        # a real difference, or does this tree differ from itself as well?
                    c = run_in(repo, r, cfg, Path(tmp) / "again.npz", r["determinism"])
                    c.pop(WARNINGS, None)
                    r.update(reproducible=not compare_arrays(b, c)[1], loss_diff=_loss_diff(a, b),
                             self_loss_diff=_loss_diff(b, c))
            except (RuntimeError, subprocess.CalledProcessError) as e:
                r.update(bit_identical=False, diffs=[], error=str(e)[-1500:])
            r.update(done=True, seconds=round(time.perf_counter() - t1, 1))
            path.write_text(json.dumps(rec, indent=1, default=str))
            print(f"{r['kind']:5s} {r['result']:28s} {r['label']:28s} {_verdict(r)} {r['seconds']:.0f} s", flush=True)
    path.write_text(json.dumps(rec, indent=1, default=str))
    return rec


def merge_shards(recs: list[dict]) -> dict:
    """One record from the records of shards 0 … n−1 of one plan (`certify_runs` with `shard=(k, n)`): the first
    shard's header, `jobs` = n, and the combinations back in plan order (shard k held plan entries k, k + n, …)."""
    n = len(recs)
    if [r["shard"] for r in recs] != [[k, n] for k in range(n)]:
        raise ValueError(f"need shards 0 … {n - 1} of {n}, got {[r['shard'] for r in recs]}")
    total = sum(len(r["runs"]) for r in recs)
    return dict(recs[0], shard=[0, 1], jobs=n, runs=[recs[i % n]["runs"][i // n] for i in range(total)])


def in_parallel(jobs: int, old_commit: str | None, out: Path, steps: int = 100, names=None, max_s: float = 0.0,
                shrink: bool = False, repo: Path = ROOT, trees: Path | None = None, kinds=None,
                carry: Path | None = None, gpus: int = 0) -> dict:
    """`certify_runs` as `jobs` shards at once (threads, each running its children one after another; each shard's
    record OUT/loop_certificate.k.json, resumed by the next call with the same `jobs`), merged (`merge_shards`).
    With `gpus` > 1 shard k's children see GPU k mod `gpus` only; otherwise every shard shares what this process
    sees. Sharing a GPU changes no bit of a run whose every op is deterministic and chosen without timing (eager
    PyTorch, our kernels, which are not autotuned): only the seconds a combination took."""
    def shard(k: int) -> dict:
        _SHARD.gpu = k % gpus if gpus > 1 else None
        return certify_runs(old_commit, out, steps, names, max_s, shrink, repo, shard=(k, jobs), trees=trees,
                            kinds=kinds, carry=carry)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return merge_shards(list(pool.map(shard, range(jobs))))


def _verdict(r: dict) -> str:
    """One combination's outcome: "bit-identical", "ERROR", "DIFFERS" (the new tree reproduced itself, so the trees
    differ) or "VARIES" (the new tree differed from itself too: run-to-run variation, certifying nothing)."""
    if r.get("error"):
        return "ERROR"
    if r["bit_identical"]:
        return "bit-identical"
    return "DIFFERS" if r.get("reproducible", True) else "VARIES"


def counts(rec: dict) -> dict:
    """{verdict: how many combinations done have it} (`_verdict`)."""
    done = [r for r in rec["runs"] if r["done"]]
    return {v: sum(_verdict(r) == v for r in done) for v in ("bit-identical", "DIFFERS", "VARIES", "ERROR")}


def summary(rec: dict) -> str:
    done = [r for r in rec["runs"] if r["done"]]
    n = counts(rec)
    strict = sum(r.get("determinism") == "strict" for r in done)
    took = sum(bool(r.get("carried_from")) for r in done)
    stood = sum(bool(r.get("stand_in_for")) for r in done)
    return (f"{n['bit-identical']} of {len(done)} combinations bit-identical, {n['DIFFERS']} differ between the trees, "
            f"{n['VARIES']} vary from run to run, {n['ERROR']} errors ({len(rec['runs']) - len(done)} not run yet; "
            f"{rec['steps']} steps each, {rec['device']}{', shrunk: certifies nothing' if rec['shrunk'] else ''}; "
            f"{strict} of {len(done)} with every op deterministic"
            + (f"; {took} carried from an earlier run of the same code" if took else "")
            + (f"; {stood} against a stand-in for a commit this repository lacks" if stood else "") + "); "
            f"results not covered: {', '.join(rec['not_covered']) or 'none'}")


def run(scale: str, cfg: dict) -> dict:
    """The certificate as a registered result (`python -m lib.experiments loop_certificate_gpt2 --scale full --out
    DIR`; its proxy half likewise), one call of ≤ 10 minutes after another on one machine. cfg: kinds (which
    combinations: "proxy", "lm"), steps (per combination), workdir (the record, resumed from the machine's disk by
    the next call), trees (`prepare`'s folder, relative to the repository; git where it is absent), max_s (start no
    new combination after this many seconds of the call), names (results; default every one), carry (an earlier
    record, relative to the repository, whose combinations `carried` allows taking over), jobs (combinations run at
    once, `in_parallel`; default 1 — keep it the same over the calls of one certificate). The result's data is
    the record so far — each combination with its verdict — and its `summary`; the last call's holds every
    combination."""
    trees = ROOT / cfg["trees"] if cfg.get("trees") and (ROOT / cfg["trees"]).is_dir() else None
    carry = ROOT / cfg["carry"] if cfg.get("carry") else None
    args = (None, Path(cfg["workdir"]), int(cfg["steps"]), cfg.get("names") or None, float(cfg.get("max_s", 0.0)))
    jobs = int(cfg.get("jobs", 1))
    if jobs > 1:
        import torch
        rec = in_parallel(jobs, *args, trees=trees, kinds=cfg.get("kinds"), carry=carry,
                          gpus=torch.cuda.device_count())
    else:
        rec = certify_runs(*args, trees=trees, kinds=cfg.get("kinds"), carry=carry)
    return {"data": dict(rec, summary=summary(rec), counts=counts(rec),
                         n_left=sum(not r["done"] for r in rec["runs"])), "seeds": []}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.training.loop_certificate", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("plan", "prepare", "run"))
    ap.add_argument("names", nargs="*", help="results (default: every result under results/full)")
    ap.add_argument("--old-commit", help="compare against this tree (default: each result's recorded commit)")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--max-s", type=float, default=0.0, help="start no new combination after this many seconds")
    ap.add_argument("--shrink", action="store_true", help="tiny models (tests): certifies nothing")
    ap.add_argument("--shard", default="0/1", help="K/N: only every N-th combination from the K-th (one per GPU)")
    ap.add_argument("--trees", type=Path, help="prepare: write the old trees here; run: read them from here")
    ap.add_argument("--carry", type=Path, help="run: an earlier record whose combinations of the same code carry over")
    ap.add_argument("--jobs", type=int, default=1, help="run: combinations at once (eager runs only; see in_parallel)")
    a = ap.parse_intermixed_args(argv)
    if a.what == "plan":
        p = plan(a.names or None)
        for r in p["runs"]:
            print(f"{r['kind']:5s} {r['result']:28s} {r['label']:28s} also: {', '.join(r['also']) or '-'}")
        print(f"{len(p['runs'])} combinations; not covered: {', '.join(p['not_covered']) or 'none'}")
        return 0
    if a.what == "prepare":
        if a.trees is None:
            ap.error("prepare needs --trees DIR")
        got = prepare(a.trees, a.names or None, a.old_commit)
        print(f"{len(got['trees'])} trees, {sum(got['trees'].values()) / 2**20:.1f} MiB in {a.trees}; "
              f"not in this repository: {', '.join(got['missing']) or 'none'}")
        return 0
    k, n = (int(x) for x in a.shard.split("/"))
    if a.jobs > 1:
        if n != 1:
            ap.error("--jobs runs every shard itself: give it without --shard")
        import torch
        rec = in_parallel(a.jobs, a.old_commit, a.out, a.steps, a.names or None, a.max_s, a.shrink, trees=a.trees,
                          carry=a.carry, gpus=torch.cuda.device_count())
    else:
        rec = certify_runs(a.old_commit, a.out, a.steps, a.names or None, a.max_s, a.shrink, shard=(k, n),
                           trees=a.trees, carry=a.carry)
    print(summary(rec))
    return 0 if all(r.get("bit_identical") for r in rec["runs"] if r["done"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
