"""Re-key a result whose fingerprint moved only through code its run did not execute — checked, and logged.

A fingerprint covers all the code a result's `run` can reach, executed or not (`lib.book.provenance`). When the
reachable set includes code that the result's configuration never selects — a backend no layer of the run named —
an edit there marks the result stale although no number of it could change. This tool re-keys such a result after
checking it:

1. ``--outside`` names the code the run did not execute (modules "pkg.mod" or definitions "pkg.mod:name");
2. with that code treated as outside code, the fingerprint of the result's entry in the tree of ``--commit`` (the
   commit the result records) equals the one in the working tree: everything else the run reached is unchanged;
3. the base module's `code_entries(cfg)` for the recorded configuration names none of the outside code (the run did
   not select it). A study without `code_entries` cannot answer that, so the check then needs
   ``--not-selected-because REASON``: how a reader of its code established that the run never executes the outside
   code (logged with the re-keying). Without either the result is not re-keyed: this check once passed silently for
   studies without `code_entries`, and re-keyed runs that did execute the outside code.

Then the recorded fingerprint is replaced by the working tree's, and ``meta["provenance_rekeys"]`` logs the old and
new fingerprints, the commit, the outside code and the reason. The data (and the content hash that results reading
this one recorded) are untouched.

    python -m lib.book.rekey_unused gpt2_regime --commit 13ccf45 --outside kernels.stable_attention \\
        kernels.stable_fwd kernels.stable_bwd lib.training.model:stable_attend --reason "..." [--write]
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from pathlib import Path

from lib.book import provenance, registry, results
from lib.book.rekey import old_tree


def selection_problems(mod, cfg: dict, outside, not_selected_because: str = "") -> list[str]:
    """Check 3 for a study module `mod` and a run's recorded configuration `cfg`: [] when the run selected none of
    the `outside` code — by the module's `code_entries(cfg)`, or, for a module without it, by a reader's statement
    `not_selected_because`; else the reasons it fails."""
    if not hasattr(mod, "code_entries"):
        return [] if not_selected_because.strip() else [
            f"{mod.__name__} has no code_entries, so whether the run selected the outside code cannot be checked: "
            "read its code and pass --not-selected-because REASON"]
    selected = set(mod.code_entries(cfg))
    used = [o for o in outside if any(s == o or s.startswith(o.split(":")[0] + ":") and ":" not in o
                                      for s in selected)]
    return [f"the configuration selects {used}"] if used else []


def check(name: str, commit: str, outside, scale: str = "full", root: Path | None = None,
          not_selected_because: str = "") -> dict:
    """The three checks for result `name`; returns {"ok", "entry", "old", "new", "why"}."""
    path = (Path(root) if root else results.RESULTS_DIR) / scale / f"{name}.json"
    meta = json.loads(path.read_text())["meta"]
    prov = meta["provenance"]
    (entry, old_fp), = prov["code"].items() if len(prov["code"]) == 1 else (next(iter(prov["code"].items())),)
    with tempfile.TemporaryDirectory() as tmp:
        then = provenance.Index(old_tree(commit, Path(tmp)), outside=outside).fingerprint(entry)
    now_idx = provenance.Index(outside=outside)
    now = now_idx.fingerprint(entry)
    mod = importlib.import_module(registry.get(prov.get("registry", name)).module)
    why = []
    if then != now:
        why.append("code other than the outside code changed since the commit")
    why += selection_problems(mod, prov["cfg"], outside, not_selected_because)
    return dict(ok=not why, entry=entry, old=old_fp, new=provenance.code_fingerprint([entry])[entry], why=why)


def write(name: str, commit: str, outside, reason: str, scale: str = "full", root: Path | None = None,
          not_selected_because: str = "") -> dict:
    c = check(name, commit, outside, scale, root, not_selected_because)
    if not c["ok"]:
        raise SystemExit(f"{name}: not re-keyed: {'; '.join(c['why'])}")
    path = (Path(root) if root else results.RESULTS_DIR) / scale / f"{name}.json"
    before = results.content_hash(name, scale, root)
    blob = json.loads(path.read_text())
    blob["meta"]["provenance"]["code"][c["entry"]] = c["new"]
    blob["meta"].setdefault("provenance_rekeys", []).append(dict(
        kind="unused code", entry=c["entry"], from_fingerprint=c["old"], to_fingerprint=c["new"], commit=commit,
        outside=list(outside), reason=reason, **({"not_selected_because": not_selected_because}
                                                 if not_selected_because else {})))
    path.write_text(json.dumps(blob, indent=1, sort_keys=True))
    assert results.content_hash(name, scale, root) == before
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.book.rekey_unused", description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--outside", nargs="+", required=True)
    ap.add_argument("--reason", default="")
    ap.add_argument("--not-selected-because", default="",
                    help="for a study without code_entries: how its code shows the run never executes the outside code")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    c = (write(a.name, a.commit, a.outside, a.reason, not_selected_because=a.not_selected_because) if a.write
         else check(a.name, a.commit, a.outside, not_selected_because=a.not_selected_because))
    print(json.dumps(c, indent=1))
    return 0 if c["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
