"""A certificate instead of a re-run: a stale result re-keyed after its run gave bit-identical outputs before and after.

A fingerprint covers all the code a result's `run` can reach (`lib.book.provenance`), so an edit to a branch the
result's configuration never takes (a new backend of a dispatch the run passes through) marks it stale although none
of its numbers could change. `lib.book.rekey_unused` handles the case where the untaken code is a separate definition
that can be named; this tool handles the rest — new branches inside a function the run does execute — by running
the experiment on both sides of the edit:

1. the fingerprint of each code entry the result records, computed on the tree of ``--old-commit``, equals the
   recorded one: the old tree is the code that produced the result. A fingerprint recorded before its module moved
   (`lib.book.rekey` kept it, logging the move's "from" and "to" in ``meta["provenance_rekeys"]``) is the one of the
   entry's earlier name, so the old tree is asked for each name the log gives it, newest first; and one recorded
   before fingerprints stopped covering ``if __name__ == "__main__":`` blocks (`lib.book.rekey_main` re-keyed only
   the results that were fresh then) is matched under that hashing too (``provenance.Index(skip_main=False)``), as is
   one recorded before module-level statements entered every fingerprint of their module
   (`lib.experiments.rekey_init`).
   A fingerprint ignores names; the ``__main__`` hashing covers all the newer one does and those blocks besides,
   while the hashing before module statements identifies the code up to the top-level statements that do not reach
   back into their module (an ``os.environ.setdefault``). The report names the entry and the hashing that matched;
2. the registry entry's ``run(scale, cfg)`` runs twice, each in a subprocess with that tree as its working directory
   and ``PYTHONPATH``: once in the tree of ``--old-commit`` (extracted with ``git archive``), once in the working
   tree, each with the configuration its own registry resolves at ``--scale`` (default ci; the two must agree) and
   the same ``--set key=value`` overrides, the same environment (``PYTHONHASHSEED=0``; ``TRITON_INTERPRET=1``
   without CUDA, as `lib.book.setup` sets it) and so the same seeds;
3. the outputs are compared bit for bit: every array (same dtype, same shape, same bytes — so NaN equals a NaN of
   the same bits and -0 differs from +0) and every number, string, bool and None of ``data`` and ``seeds``,
   recursively (as `lib.book.results.save` would write them; floats by their exact ``repr``), except the values under
   the keys of `EXCLUDED`, which measure time or name the machine and differ from one run to the next of the same
   code: ``wall_s``, ``wall_s_all_runs``, ``tokens_per_s``, ``steps_per_s`` (a run's or a study's wall time and
   throughput), ``s_per_step``, ``replay_s``, ``capture_overhead``, ``capture_copy_s``, ``variant_s`` (a capture
   study's timings), ``probe_s``,
   ``step_times`` (a probe's seconds, a progress clock's (step, seconds) pairs), ``timing_s`` (the kernel bias
   table's seconds per kernel), ``seconds`` (a corpus build's timings), ``versions`` and ``device`` (the machine). Nothing else is excluded.

4. with ``--trace-calls``, what the edit could change is also compared where it happens: the definitions whose own
   text differs between the two trees (`lib.book.calltrace.changed_defs`) are traced in both runs — every call into
   them from unchanged code, with its arguments on entry and on return and its return value, and the values of the
   changed module-level assignments and classes' fields — and the two runs' records must be equal. This is the
   evidence for a run whose outputs are all timings (a benchmark), where step 3 compares nothing: the timed code is
   unchanged and received the same values. A run that compares nothing at all — every output excluded, no traced
   call — is refused ("nothing compared"). The record lists the changed definitions, their calls and the seconds
   spent inside them on each side. A benchmark records its timings under keys of its own (``ms``, ``compile_s``);
   with ``--trace-calls``, ``--exclude KEY`` leaves out each such key too (logged with the certificate).

With ``--write`` and identical outputs the recorded fingerprint is replaced by the working tree's (through
`lib.book.rekey.rewrite_meta`: the data and the content hash are untouched), ``meta["provenance_rekeys"]`` logs the
certificate (kind "certificate", scale, overrides, old and new commits, entry, fingerprints, what was compared,
reason), and a record is appended to `CERTIFICATES` (``results/certificates.json``, one record per certificate;
beside ``results/full/``, not in it, where every ``*.json`` is read as a result). ``--write`` refuses while
``lib/``, ``kernels/`` or ``benchmarks/`` differ from HEAD, so the new tree the log names is a commit. If anything
differs the first differences are printed, nothing is written and the exit status is 1.

Why a ci-scale certificate is evidence: the run executes the same code path as the result's configuration selects,
with the changed code in place — the same dispatch, the same branches for that configuration — so bit-identical
per-step numbers (losses, gradient norms, census arrays) at ci scale show that the edit did not change the
computation for that configuration. What it does not show: numerics that only a GPU exercises (a branch taken only
on CUDA, ``torch.compile``, BF16 autocast, tensor-core kernels), and code that only the full configuration selects
where the ci one does not (the certificate lists the configuration keys in which its run differs from the result's).
The stronger form is a GPU certificate: the same command on a GPU machine with ``--scale full`` and a step override
(``--set steps=100``), which runs the result's own configuration, shortened identically on both sides.

Inputs a run builds from its own tree must be shared, or the two runs read different data for a reason that is not
the edit: gpt2_regime's ci corpus is tokenised from the tree's ``lib/training`` sources. An override value may name
``{scratch}``, a temporary directory both runs see (the first run builds there, the second reads what it built):
``--set corpus_dir={scratch}/corpus``. The certificate records the overrides as given.

    python -m lib.book.certify gpt2_regime --old-commit d44b47b                     # check only
    python -m lib.book.certify gpt2_regime --old-commit d44b47b --set corpus_dir={scratch}/corpus --write
    python -m lib.book.certify train_step_gpt2 --old-commit 6d08e0f --trace-calls --exclude ms --exclude ms_median \
        --exclude compile_s --exclude ratio_to_baseline --reason "..." --write
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lib.book.setup  # noqa: F401  (TRITON_INTERPRET=1 without CUDA: both runs inherit it)
from lib.book import calltrace, provenance, registry, results
from lib.book.cli import _parse_set
from lib.book.rekey import old_tree, rewrite_meta

ROOT = results.ROOT
CERTIFICATES = Path("results") / "certificates.json"     # relative to the repository root
EXCLUDED = frozenset({"wall_s", "wall_s_all_runs", "tokens_per_s", "steps_per_s", "seconds", "versions", "device",
                      "s_per_step", "replay_s", "capture_overhead", "capture_copy_s", "variant_s", "probe_s",
                      "step_times", "timing_s"})
SCRATCH = "{scratch}"
MAX_SHOWN = 10

# Run in a subprocess with cwd = PYTHONPATH = the tree: the tree's registry resolves the entry, its module runs.
_CHILD = """
import importlib, json, pickle, sys, time
import lib
from lib.book import registry
name, scale, overrides, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
cfg = registry.resolve(name, scale, overrides)
mod = importlib.import_module(registry.get(name).module)
t0 = time.perf_counter()
res = mod.run(scale, cfg)
wall = time.perf_counter() - t0
with open(out, "wb") as f:
    pickle.dump(dict(lib=lib.__file__, cfg=cfg, wall_s=wall, data=res["data"], seeds=res.get("seeds", ()),
                     arrays=dict(res.get("arrays") or {})), f)
"""


class CertificateError(RuntimeError):
    """The certificate cannot be issued: the old tree is not the recorded code, or a run failed."""


def _git(repo: Path, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _substitute(x, scratch: str):
    if isinstance(x, dict):
        return {k: _substitute(v, scratch) for k, v in x.items()}
    if isinstance(x, list):
        return [_substitute(v, scratch) for v in x]
    return x.replace(SCRATCH, scratch) if isinstance(x, str) else x


def _drop_bytecode_caches(tree: Path) -> None:
    """Delete the tree's own `__pycache__` folders (not its virtual environment's).

    Python trusts a cached module when the source's size and whole-second mtime match, so a same-size edit made
    within a second of the last run (a changed constant) would run the old bytecode and certify the old code."""
    for top in Path(tree).iterdir():
        if top.is_dir() and not top.name.startswith((".", "_")) and top.name not in ("results", "node_modules"):
            for cache in top.rglob("__pycache__"):
                shutil.rmtree(cache, ignore_errors=True)


def run_in(tree: Path, name: str, scale: str, overrides: dict, out: Path, env_extra: dict | None = None) -> dict:
    """Run registry entry `name` at `scale` in `tree` (a subprocess) and return what it saved, plus "wall_total_s"
    (`env_extra`: the call tracer's variables, `lib.book.calltrace.tracer_env`)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0", **(env_extra or {})}
    t0 = time.perf_counter()
    _drop_bytecode_caches(tree)
    p = subprocess.run([sys.executable, "-c", _CHILD, name, scale, json.dumps(overrides), str(out)], cwd=tree,
                       env=env, capture_output=True, text=True)
    if p.returncode:
        raise CertificateError(f"the run in {tree} failed:\n{(p.stdout + p.stderr)[-4000:]}")
    with open(out, "rb") as f:
        got = pickle.load(f)
    if not Path(got["lib"]).resolve().is_relative_to(Path(tree).resolve()):
        raise CertificateError(f"the run in {tree} imported lib from {got['lib']}")
    got["wall_total_s"] = time.perf_counter() - t0
    return got


def compare_trees(old, new, where: str = "", counts: dict | None = None, diffs: list | None = None,
                  excluded=EXCLUDED):
    """Compare two JSON-like trees bit for bit, skipping the keys in `excluded`; returns (counts, diffs) with counts
    {"scalars", "excluded"} and diffs one line per difference."""
    counts = {"scalars": 0, "excluded": 0} if counts is None else counts
    diffs = [] if diffs is None else diffs
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if k in excluded:
                counts["excluded"] += 1
            elif k not in old or k not in new:
                diffs.append(f"{where}/{k}: only in the {'new' if k in new else 'old'} run")
            else:
                compare_trees(old[k], new[k], f"{where}/{k}", counts, diffs, excluded)
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            diffs.append(f"{where}: length {len(old)} != {len(new)}")
        for i, (a, b) in enumerate(zip(old, new)):
            compare_trees(a, b, f"{where}[{i}]", counts, diffs, excluded)
    else:
        counts["scalars"] += 1
        if type(old) is not type(new) or repr(old) != repr(new):
            diffs.append(f"{where or '/'}: {old!r} (old) != {new!r} (new)")
    return counts, diffs


def compare_arrays(old: dict, new: dict) -> tuple[dict, list]:
    """Same names, dtypes, shapes and bytes; returns ({"arrays", "array_elements"}, diffs)."""
    counts, diffs = {"arrays": 0, "array_elements": 0}, []
    for k in sorted(set(old) | set(new)):
        if k not in old or k not in new:
            diffs.append(f"array {k}: only in the {'new' if k in new else 'old'} run")
            continue
        a, b = np.asarray(old[k]), np.asarray(new[k])
        counts["arrays"] += 1
        counts["array_elements"] += int(a.size)
        if a.dtype != b.dtype or a.shape != b.shape:
            diffs.append(f"array {k}: {a.dtype}{a.shape} (old) != {b.dtype}{b.shape} (new)")
        elif a.dtype == object:
            if not np.array_equal(a, b):
                diffs.append(f"array {k}: values differ")
        else:
            ba, bb = (np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, x.itemsize) for x in (a, b))
            bad = np.flatnonzero((ba != bb).any(axis=1))
            if len(bad):
                i = int(bad[0])
                diffs.append(f"array {k}: {len(bad)} of {a.size} element(s) differ, the first at flat index {i}: "
                             f"{a.reshape(-1)[i]!r} (old) != {b.reshape(-1)[i]!r} (new)")
    return counts, diffs


def earlier_names(meta: dict, entry: str) -> list[str]:
    """`entry` and the names it had before, newest first: the "from" of each module move (`lib.book.rekey`) that
    `meta["provenance_rekeys"]` logs, followed back from `entry`."""
    moves = {r["to"]: r["from"] for r in meta.get("provenance_rekeys", ()) if "from" in r and "to" in r}
    names = [entry]
    while names[-1] in moves and moves[names[-1]] not in names:
        names.append(moves[names[-1]])
    return names


HASHINGS = {"current": {}, "before module statements": dict(module_init=False),  # name -> provenance.Index options
            "with __main__ blocks": dict(skip_main=False, module_init=False)}


def old_fingerprint(tree: Path, names: list[str], recorded: str) -> dict:
    """Step 1 for one entry: {"old", "old_entry", "hashing"} of the first of `names` that `tree` defines and whose
    fingerprint under one of `HASHINGS` equals `recorded`; else the first name it defines under the current
    hashing, or "missing: ..." where it defines none."""
    indexes = {h: provenance.Index(tree, **opts) for h, opts in HASHINGS.items()}
    first, missing = None, []
    for name in names:
        for hashing, ix in indexes.items():
            try:
                fp = ix.fingerprint(name)
            except (KeyError, ValueError) as e:
                missing.append(str(e))
                break
            got = dict(old=fp, old_entry=name, hashing=hashing)
            if fp == recorded:
                return got
            first = first or got
    return first or dict(old="missing: " + "; ".join(missing), old_entry=None, hashing=None)


def certify(name: str, old_commit: str, scale: str = "ci", overrides: dict | None = None,
            result_scale: str = "full", repo: Path = ROOT, trace_calls: bool = False, exclude=()) -> dict:
    """Checks 1-3 for result `name` (results/<result_scale>/<name>.json of `repo`), and with `trace_calls` check 4;
    returns a report: {"ok", "fresh_already", "commit", "entries" {entry: {"recorded", "old", "new"}}, "counts",
    "diffs", "wall_s", "config_differs", "changed", "calls", "excluded", "why"}. `exclude`: more keys a timing
    run measures time under (``ms``), left out like `EXCLUDED` — only with `trace_calls`, whose calls are then the
    evidence."""
    if exclude and not trace_calls:
        raise CertificateError("--exclude needs --trace-calls: the calls into the changed code are then the "
                               "evidence")
    excluded = EXCLUDED | frozenset(exclude)
    repo = Path(repo)
    overrides = dict(overrides or {})
    path = repo / "results" / result_scale / f"{name}.json"
    meta = json.loads(path.read_text())["meta"]
    prov = meta["provenance"]
    commit = _git(repo, "rev-parse", old_commit)
    rep = dict(ok=False, fresh_already=False, commit=commit, path=str(path), registry=prov.get("registry", name),
               entries={}, counts={}, diffs=[], wall_s={}, config_differs=[], changed=[], calls={},
               excluded=sorted(excluded), why=[])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        then_tree = old_tree(commit, tmp / "old", paths=(), repo=repo)
        now_idx = provenance.Index(repo)
        for entry, recorded in prov["code"].items():
            try:
                new = now_idx.fingerprint(entry)
            except (KeyError, ValueError) as e:
                raise CertificateError(f"the working tree has no {entry}: {e}") from e
            rep["entries"][entry] = dict(recorded=recorded, new=new,
                                         **old_fingerprint(then_tree, earlier_names(meta, entry), recorded))
        if all(f["new"] == f["recorded"] for f in rep["entries"].values()):
            rep["fresh_already"] = True
            rep["why"].append("the working tree gives the recorded fingerprints: nothing to certify")
            return rep
        bad = [e for e, f in rep["entries"].items() if f["old"] != f["recorded"]]
        if bad:
            rep["why"].append(f"the tree of {commit[:12]} does not give the recorded fingerprint of {', '.join(bad)}")
            return rep
        (tmp / "scratch").mkdir()
        resolved = _substitute(overrides, str(tmp / "scratch"))
        envs = {"old": None, "new": None}
        if trace_calls:
            names = [n for e in rep["entries"] for n in earlier_names(meta, e)]
            rep["changed"] = calltrace.changed_defs(then_tree, repo, names)
            try:
                specs = dict(zip(("old", "new"), calltrace.specs_for(then_tree, repo, rep["changed"])))
            except ValueError as e:
                rep["why"].append(str(e))
                return rep
            for side, tree in (("old", then_tree), ("new", repo)):
                envs[side] = calltrace.tracer_env(tmp / f"tracer_{side}", tree, specs[side], tmp / f"calls_{side}")
        old = run_in(then_tree, rep["registry"], scale, resolved, tmp / "old.pkl", envs["old"])
        new = run_in(repo, rep["registry"], scale, resolved, tmp / "new.pkl", envs["new"])
        if trace_calls:
            rep["calls"], call_diffs = calltrace.compare(calltrace.read(tmp / "calls_old"),
                                                         calltrace.read(tmp / "calls_new"))
    rep["wall_s"] = {side: dict(run=round(r["wall_s"], 3), subprocess=round(r["wall_total_s"], 3))
                     for side, r in (("old", old), ("new", new))}
    if registry.config_digest(old["cfg"]) != registry.config_digest(new["cfg"]):
        rep["why"].append("the two registries resolve different configurations")
        rep["diffs"] = compare_trees(old["cfg"], new["cfg"], "cfg")[1]
        return rep
    recorded_cfg = prov.get("cfg", {})
    rep["config_differs"] = sorted(k for k in set(old["cfg"]) | set(recorded_cfg)
                                   if old["cfg"].get(k) != recorded_cfg.get(k))
    counts, diffs = compare_trees(*(results._jsonable(dict(data=r["data"], seeds=r["seeds"])) for r in (old, new)),
                                  excluded=excluded)
    a_counts, a_diffs = compare_arrays(old["arrays"], new["arrays"])
    rep["counts"] = {**a_counts, **counts}
    rep["diffs"] = a_diffs + diffs
    if trace_calls:
        rep["counts"].update(calls=rep["calls"]["calls"], values=rep["calls"]["values"])
        rep["diffs"] += [f"calls into the changed code: {d}" for d in call_diffs]
    if rep["diffs"]:
        rep["why"].append(f"{len(rep['diffs'])} difference(s) between the two runs")
    elif not (compare_trees(*(results._jsonable(r["data"]) for r in (old, new)), excluded=excluded)[0]["scalars"]
              or any(rep["counts"].get(k) for k in ("arrays", "calls", "values"))):
        # A run whose every output is a timing (a benchmark) compares nothing: that is no evidence.
        rep["why"].append("nothing compared: every output of the run is excluded (a timing)"
                          + ("" if trace_calls else "; --trace-calls compares what the changed code returned")
                          + (" and the run never called the changed code" if trace_calls else ""))
    rep["ok"] = not rep["why"]
    return rep


def write(rep: dict, scale: str, overrides: dict, reason: str = "", repo: Path = ROOT) -> dict:
    """Re-key the result and append its certificate record (only for a report with "ok"); returns the record."""
    if not rep["ok"]:
        raise CertificateError("; ".join(rep["why"]) or "not certified")
    repo = Path(repo)
    new_commit = _git(repo, "rev-parse", "HEAD")
    compared = dict(rep["counts"], excluded_keys=rep.get("excluded", sorted(EXCLUDED)))
    if rep.get("calls"):
        compared.update(changed_definitions=rep["changed"], calls_per_definition=rep["calls"]["per_key"])
    reason = reason or (f"the run at {scale} scale gave bit-identical data and arrays in the tree of "
                        f"{rep['commit'][:12]} and in {new_commit[:12]}")

    def edit(meta):
        for entry, f in rep["entries"].items():
            meta["provenance"]["code"][entry] = f["new"]
            meta.setdefault("provenance_rekeys", []).append(dict(
                kind="certificate", entry=entry, from_fingerprint=f["recorded"], to_fingerprint=f["new"],
                old_entry=f["old_entry"], old_hashing=f["hashing"], commit=rep["commit"], new_commit=new_commit,
                scale=scale, overrides=overrides, compared=compared, reason=reason))
    rewrite_meta(Path(rep["path"]), edit)
    env = results.environment()
    record = dict(result=Path(rep["path"]).stem, result_scale=Path(rep["path"]).parent.name, old_commit=rep["commit"],
                  new_commit=new_commit, scale=scale, overrides=overrides, entries=rep["entries"], compared=compared,
                  config_differs=rep["config_differs"], wall_s=rep["wall_s"], bit_identical=True, reason=reason,
                  date_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  **{k: env.get(k) for k in ("python", "torch", "numpy", "device", "triton_interpret")})
    cert = repo / CERTIFICATES
    cert.parent.mkdir(parents=True, exist_ok=True)
    # Several certificates may run at once: read, append and write under an exclusive lock, or one record is lost.
    import fcntl
    with open(cert.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = json.loads(cert.read_text()) if cert.exists() else []
        cert.write_text(json.dumps(records + [record], indent=1, sort_keys=True) + "\n")
    return record


def main(argv=None, repo: Path = ROOT) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.book.certify", description=__doc__.split("\n")[0])
    ap.add_argument("name", help="the result (results/<result-scale>/NAME.json)")
    ap.add_argument("--old-commit", required=True, help="the commit whose tree produced the result")
    ap.add_argument("--scale", default="ci", help="the scale both runs use (default ci)")
    ap.add_argument("--result-scale", default="full", help="where the result is (default full)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override one configuration key in both runs (JSON value; {scratch}: a shared temp dir)")
    ap.add_argument("--reason", default="", help="why the edit cannot have changed the result (logged)")
    ap.add_argument("--trace-calls", action="store_true",
                    help="also record every call into the definitions the edit changed, in both runs, and compare "
                         "arguments, return values and changed values (lib.book.calltrace): the evidence for a "
                         "run whose outputs are timings")
    ap.add_argument("--exclude", action="append", default=[], metavar="KEY",
                    help="with --trace-calls: one more key under which the run records a timing (e.g. ms), left out "
                         "of the comparison (logged)")
    ap.add_argument("--write", action="store_true", help="re-key the result and record the certificate")
    a = ap.parse_args(argv)
    if a.write and _git(repo, "status", "--porcelain", "--", *provenance.PACKAGES):
        print("the sources differ from HEAD; commit them first (the certificate names the commit checked)")
        return 1
    overrides = _parse_set(a.set)
    try:
        rep = certify(a.name, a.old_commit, a.scale, overrides, a.result_scale, repo, a.trace_calls, a.exclude)
    except CertificateError as e:
        print(f"not certified: {e}")
        return 1
    for entry, f in rep["entries"].items():
        how = "" if (f["old_entry"], f["hashing"]) == (entry, "current") else \
            f" (as {f['old_entry']}, {f['hashing']} hashing)" if f["old_entry"] else ""
        print(f"{entry}: recorded {f['recorded'][:12]}, old tree {f['old'][:12]}{how}, working tree {f['new'][:12]}")
    for side, w in rep["wall_s"].items():
        print(f"{side} run: {w['run']:.1f} s in run(), {w['subprocess']:.1f} s in all")
    if rep["changed"]:
        print(f"changed definitions: {', '.join(rep['changed'])}")
    for key, c in (rep["calls"] or {}).get("per_key", {}).items():
        print(f"  {key}: {c['calls']} call(s), {c['values']} value(s); {c['old_s']:.4f} s inside (old run), "
              f"{c['new_s']:.4f} s (new run)")
    if rep["counts"]:
        print("compared: " + ", ".join(f"{v} {k}" for k, v in rep["counts"].items()))
    if rep["config_differs"]:
        print(f"configuration keys of this run that differ from the result's: {', '.join(rep['config_differs'])}")
    for d in rep["diffs"][:MAX_SHOWN]:
        print(f"  {d}")
    if len(rep["diffs"]) > MAX_SHOWN:
        print(f"  ... and {len(rep['diffs']) - MAX_SHOWN} more")
    if not rep["ok"]:
        print(f"not certified: {'; '.join(rep['why'])}")
        return 0 if rep["fresh_already"] else 1
    print("bit-identical")
    if a.write:
        write(rep, a.scale, overrides, a.reason, repo)
        print(f"re-keyed {Path(rep['path']).relative_to(repo)}; certificate appended to {CERTIFICATES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
