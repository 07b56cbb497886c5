"""The one-time move of committed results from whole-file provenance to code / configuration / input provenance.

Until commit 1adbaef a result recorded the sha256 of every file it depended on, so moving a module, or editing a
docstring, made it stale. The restructure into `lib/book`, `lib/fp`, `lib/training`, `lib/readings`,
`lib/figures` moved every file and rewrote every experiment to take its configuration from the registry. This
script shows, result by result, that none of that could have changed a number, and only then writes the new
provenance (`lib.book.results`: Merkle fingerprint of the code `run` reaches, resolved configuration, inputs):

1. **fresh before**: every file sha256 the result recorded equals that file at the old commit;
2. **same code**: every definition the new `run` reaches has the same syntax tree (docstrings, comments,
   annotations and imports dropped; references mapped from the old module names to the new ones) as its
   counterpart at the old commit — except the definitions in `REVIEWED`, each with the reason it cannot change a
   number (mostly: the run and plan functions rewritten to read the configuration instead of environment
   variables, which check 3 covers);
3. **same configuration**: for training results, the new plan from the registry's configuration gives exactly the
   recorded runs (arm, attention spec, seed, LR, tag, β and guard) and the recorded training configuration; for
   the others, the registry's configuration equals the recorded one on every key the run reads.

Results that pass get ``meta["provenance"]`` (computed on the current tree) and ``meta["provenance_migration"]``
(the old commit and what was checked). Run from the repository root with git available:

    python -m lib.experiments.migrate --old-commit 1adbaef [--write]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from lib.book import provenance, registry, results

ROOT = results.ROOT
PKG = {"book": ["setup", "scale", "results", "plotting", "htmlcheck"],
       "fp": ["bf16", "numerics", "reference", "theory", "beta_theory", "rounding_bias", "fix_error"],
       "training": ["data", "model", "metrics", "train"],
       "readings": ["horizon", "dial_reading", "beta_reading", "claims", "attention_checks", "fix_checks"],
       "figures": ["explosion_plots", "chain"]}
_MOVED = {f"lib.{m}": f"lib.{p}.{m}" for p, ms in PKG.items() for m in ms}
_OUTCOME = {"SMOOTH", "RISE_EXPLODED", "RISE_DEGRADED", "GN_SPIKE", "ONSET_RISE", "smooth", "classify"}
_DIAL = {"KIND_SUFFIX", "SR_BACKWARD_BUG", "sr_valid", "verdicts", "merged_table", "facts"}
_TOKEN = re.compile("\u27e6([^:\u27e7]+):([^\u27e7]+)\u27e7")

# Definitions whose syntax tree changed in the restructure, and why that cannot change a committed number.
_RUN_PLAN = ("rewritten to take the resolved configuration (cfg) instead of environment variables or scale.pick; "
             "check 3 shows the registry configuration reproduces the recorded runs / configuration")
REVIEWED = {
    "lib.training.data:ROOT": "the module moved one directory down: parents[2] names the same repository root as "
                              "parent.parent did (evaluated below)",
    "lib.training.data:_readme": "text of the corpus README (module paths in prose); the corpus itself is a pinned "
                                 "file whose sha256 is an input of every training result",
    "lib.training.train:_parser": "command-line help text (the program name in the usage line)",
    "lib.training.train:train": "one statement added at each loss flush: when a parent process asked for progress, "
                                "write (steps, last loss, seconds) into its shared dict; nothing it computes changes",
    "lib.training.train:run_many": "waits with map_async and prints one progress line per run instead of pool.map; "
                                   "the same workers run the same configs",
    "lib.training.train:_PROGRESS": "new: the shared progress dict of run_many's workers (None otherwise)",
    "lib.training.train:_init_worker": "new: sets _PROGRESS in each worker",
    "lib.training.train:progress_lines": "new: formats the progress lines",
    "lib.studies.explosion.headline:_arms": "new: validates the configured arm names (was _env_arms for env variables)",
    "lib.studies.explosion.headline:pick_lr": _RUN_PLAN,
    "lib.studies.dial.precision_dial:CONTROLS": "new: the control arms, formerly a literal inside plan()",
    **{f"lib.experiments.{b}:{f}": _RUN_PLAN for b in ("ablations", "beta_sweep", "headline", "lr_sweep",
                                                        "precision_dial") for f in ("plan", "run")},
    **{f"lib.experiments.{b}:run": _RUN_PLAN for b in ("bias_kernel", "bias_montecarlo", "paper_placement",
                                                        "rounding_exhaustive")},
}
# Results not migrated here: the benchmarks, whose scripts are re-registered with the kernel work that follows.
SKIP = {"attention_bench", "train_step_bench"}
_TRAIN_KEYS = ("n_layer", "n_head", "n_embd", "seq_len", "batch_size", "steps", "warmup", "schedule", "min_lr",
               "beta1", "beta2", "adam_eps", "weight_decay", "grad_clip", "autocast", "deterministic", "val_fraction",
               "telemetry_every", "eval_every", "eval_batches", "stop_on_nonfinite", "tie_tol")


def forward(mod: str, name: str) -> tuple[str, str]:
    """Where an old (module, name) lives now."""
    if mod == "lib.explosion":
        return ("lib.training.outcome" if name in _OUTCOME else "lib.training.proxy"), name
    if mod == "lib.studies.dial.precision_dial" and name in _DIAL:
        return "lib.studies.dial.table", "_facts" if name == "facts" else name
    return _MOVED.get(mod, mod), name


def _local_text(ix: provenance.Index, key, mapped: bool) -> str:
    """A definition's canonical text with references written by (new) name, plumbing references as outside ones."""
    def tok(m):
        mod, name = forward(m.group(1), m.group(2)) if mapped else (m.group(1), m.group(2))
        if mod == "lib.book" or mod.startswith("lib.book."):
            return f"@ext:{mod}.{name}"
        return f"\u27e6{mod}:{name}\u27e7"
    return _TOKEN.sub(tok, ix._canonical(key)[0])


def code_diff(new: provenance.Index, old: provenance.Index, entry: str) -> list[tuple[str, str]]:
    """(definition, 'new' | 'changed') for every definition `entry` reaches whose text differs from the old one."""
    counterpart = {}
    for m in old.modules.values():
        for n in list(m.defs) + (["<init>"] if m.init else []):
            counterpart[forward(m.name, n)] = (m.name, n)
    out = []
    for e in new.reachable(entry):
        key = tuple(e.split(":", 1))
        o = counterpart.get(key)
        if o is None:
            out.append((e, "new"))
        elif _local_text(old, o, True) != _local_text(new, key, False):
            out.append((e, "changed"))
    return out


def _old_fresh(meta: dict, old_commit: str) -> list[str]:
    bad = []
    for f, h in meta.get("depends_on", {}).items():
        blob = subprocess.run(["git", "show", f"{old_commit}:{f}"], cwd=ROOT, capture_output=True)
        if blob.returncode != 0 or hashlib.sha256(blob.stdout).hexdigest() != h:
            bad.append(f)
    return bad


def _run_key(arm, attn, seed, lr, tag, beta=None, max_shift=None):
    if not isinstance(attn, str):
        attn = [a.label if hasattr(a, "label") else str(a) for a in attn]
    return json.dumps([arm, attn, seed, float(lr), tag or "", beta, max_shift])


def config_check(name: str, res: results.Result) -> list[str]:
    """Differences between what the registry configuration runs and what the result recorded ([] if none)."""
    e = registry.get(name)
    cfg = registry.resolve(name, "full")
    mod = __import__(e.module, fromlist=["run"])
    rec, data = res.meta["config"], res.data
    if not hasattr(mod, "plan"):   # non-training experiments: the run reads cfg directly
        bad = []
        if name == "rounding_exhaustive":
            if cfg["exhaustive"] != (rec["patterns"] == "all 2**32"):
                bad.append("exhaustive")
        elif name == "bias_montecarlo":
            for k in ("n_problems", "ks", "gaps"):
                if cfg[k] != rec[k]:
                    bad.append(k)
            if sorted({r["n_keys"] for r in data["n_keys"]}) != sorted(cfg["n_keys_list"]):
                bad.append("n_keys_list")
            if [r["gap"] for r in data["accum"]] != cfg["accum_gaps"]:
                bad.append("accum_gaps")
        else:
            bad = [k for k in cfg if rec.get(k) != cfg[k]]
        return bad
    from lib.training import proxy
    p = mod.plan("full", cfg)
    if "runs" in p:
        planned = p["runs"]
    else:   # lr_sweep / ablations / precision_dial build their runs inside run()
        if e.base.rpartition(".")[2] == "lr_sweep":
            planned = [dict(arm=a, seed=s, lr=lr) for lr in p["lrs"] for a in p["arms"] for s in p["seeds"]]
        elif e.base.rpartition(".")[2] == "ablations":
            planned = [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["arms"]
                       for s in p["arm_seeds"][a]]
        else:
            planned = [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["dial_arms"]
                       for s in p["seeds"]]
            planned += [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["control_arms"]
                        for s in p["control_seeds"]]
    want = sorted(_run_key(r["arm"], r.get("attn") or proxy.ARMS[r["arm"]], r["seed"], r["lr"], r.get("tag", ""),
                           *((r["config"]["beta"], r["config"]["max_shift"]) if "config" in r else ()))
                  for r in planned)
    got = sorted(_run_key(r["arm"], r["attn"], r["seed"], r["lr"], r["tag"],
                          *((r["beta"], r["max_shift"]) if "beta" in r else ())) for r in data["runs"])
    bad = [] if want == got else [f"runs: planned {len(want)}, recorded {len(got)}; first difference "
                                  f"{next((w, g) for w, g in zip(want + [''], got + ['']) if w != g)}"]
    base = proxy.proxy_config("full", steps=p["steps"], **p.get("train", {})).record()
    bad += [f"train.{k}: {rec.get(k)!r} recorded, {base[k]!r} now" for k in _TRAIN_KEYS if rec.get(k) != base[k]]
    return bad


def migrate(old_commit: str, write: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "worktree", "add", "-q", "--detach", tmp, old_commit], cwd=ROOT, check=True)
        try:
            old, new = provenance.Index(tmp), provenance.index()
            roots_equal = (Path(tmp) / "lib" / "data.py").resolve().parent.parent == Path(tmp).resolve() and \
                (ROOT / "lib" / "training" / "data.py").resolve().parents[2] == ROOT.resolve()
            report = []
            for res in sorted(results.all_results(), key=lambda r: r.name):
                if res.name in SKIP or "provenance" in res.meta:
                    continue
                name = res.name
                e = registry.get(name)
                checks = dict(result=name, fresh_before=_old_fresh(res.meta, old_commit) == [])
                diffs = code_diff(new, old, e.code_entry)
                checks["unreviewed_code_changes"] = [d for d, _ in diffs if d not in REVIEWED]
                checks["reviewed_code_changes"] = {d: REVIEWED[d] for d, _ in diffs if d in REVIEWED}
                if "lib.training.data:ROOT" in checks["reviewed_code_changes"] and not roots_equal:
                    checks["unreviewed_code_changes"].append("lib.training.data:ROOT (roots differ)")
                checks["config_differences"] = config_check(name, res)
                ok = checks["fresh_before"] and not checks["unreviewed_code_changes"] and \
                    not checks["config_differences"]
                checks["ok"] = ok
                report.append(checks)
                if ok and write:
                    _write(res, e, old_commit, checks)
            return report
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tmp], cwd=ROOT, check=False)


def _write(res: results.Result, e: registry.Entry, old_commit: str, checks: dict) -> None:
    path = results.RESULTS_DIR / res.scale / f"{res.name}.json"
    blob = json.loads(path.read_text())
    cfg = registry.resolve(res.name, "full")
    read = [n for n in e.needs]
    blob["meta"]["provenance"] = dict(registry=res.name,
                                      code=provenance.code_fingerprint([e.code_entry]), cfg=cfg,
                                      inputs=results.input_hashes(e.inputs, read, "full"))
    blob["meta"]["provenance_migration"] = dict(
        from_commit=old_commit, method="lib/experiments/migrate.py",
        checked=["recorded file hashes equal the files at from_commit",
                 "every reachable definition has the same syntax tree at from_commit, except reviewed ones",
                 "the registry configuration reproduces the recorded runs and training configuration"],
        reviewed_code_changes=checks["reviewed_code_changes"])
    path.write_text(json.dumps(blob, indent=1, sort_keys=True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.experiments.migrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-commit", required=True)
    ap.add_argument("--write", action="store_true", help="write the provenance of the results that pass")
    a = ap.parse_args(argv)
    rep = migrate(a.old_commit, a.write)
    for r in rep:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['result']:26s} fresh_before={r['fresh_before']} "
              f"reviewed={len(r['reviewed_code_changes'])} unreviewed={r['unreviewed_code_changes']} "
              f"config={r['config_differences']}")
    return 0 if all(r["ok"] for r in rep) else 1


if __name__ == "__main__":
    sys.exit(main())
