"""Re-key committed results after code moves: the entry point a result records follows its module, its hash does not.

A result's provenance records its code as ``{"pkg.module:run": fingerprint}`` (`lib.book.results`). Fingerprints
ignore paths (`lib.book.provenance`), so moving an experiment module into its study folder changes no hash, only
the key: the registry now names the module at its new path, and the result still names the old one, which no
longer exists ("code entry gone"). This script rewrites that key, and only after checking that nothing else moved:

1. the entry the registry names now (`lib.book.registry.Entry.code_entry`) differs from the one recorded;
2. the fingerprint of the *recorded* entry in the tree of ``--old-commit`` (where it still exists) equals the
   fingerprint of the *new* entry in the working tree — the same code, moved;
3. the result's data round-trips: the file is rewritten with the same JSON settings `lib.book.results.save` uses,
   and its content hash (data and arrays: what results that read it recorded) is unchanged.

The recorded fingerprint itself is kept: a result that was fresh stays fresh, one that was stale stays stale for the
same reason ("code changed"), now under the new key. Each re-keying is logged in ``meta["provenance_rekeys"]``
(from, to, the old commit, the fingerprint, whether the recorded one equals it). A result whose check 2 fails is
not touched, and the script exits 1. Run from the repository root, with git available, after the moves and before
committing them:

    python -m lib.book.rekey --old-commit HEAD            # report what would change
    python -m lib.book.rekey --old-commit HEAD --write    # rewrite the metadata
"""
from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from lib.book import provenance, registry, results

ROOT = results.ROOT


def old_tree(commit: str, dest: Path, paths=provenance.PACKAGES, repo: Path = ROOT) -> Path:
    """Extract `paths` (default: the sources provenance indexes, `provenance.PACKAGES`; () for the whole tree) of
    the git repository `repo` at `commit` into `dest`; returns `dest`."""
    tar = subprocess.run(["git", "archive", "--format=tar", commit, *paths], cwd=repo,
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(dest, filter="data")
    return dest


def plan(old_index: provenance.Index, new_index: provenance.Index, root: Path | None = None) -> list[dict]:
    """One row per committed result whose recorded code entry differs from its registry entry's:
    {"file", "name", "from", "to", "recorded", "old", "new", "ok"} with "ok" = the fingerprints agree (check 2)."""
    rows = []
    entries = registry.entries()
    for path in sorted((Path(root) if root else results.RESULTS_DIR).glob("*/*.json")):
        meta = json.loads(path.read_text())["meta"]
        prov = meta.get("provenance")
        if not prov or prov.get("registry") not in entries:
            continue
        new_entry = entries[prov["registry"]].code_entry
        for old_entry, recorded in prov.get("code", {}).items():
            if old_entry == new_entry:
                continue
            try:
                old = old_index.fingerprint(old_entry)
            except (KeyError, ValueError) as e:
                old = f"missing: {e}"
            try:
                new = new_index.fingerprint(new_entry)
            except (KeyError, ValueError) as e:
                new = f"missing: {e}"
            rows.append({"file": str(path), "name": prov["registry"], "from": old_entry, "to": new_entry,
                         "recorded": recorded, "old": old, "new": new, "ok": old == new})
    return rows


def rewrite_meta(path: Path, edit) -> None:
    """Apply `edit(meta)` to one result file, which must be in the format `lib.book.results.save` writes (and is
    rewritten in it); its content hash (data and arrays: what results that read it recorded) must not change."""
    path = Path(path)
    text = path.read_text()
    blob = json.loads(text)
    if json.dumps(blob, indent=1, sort_keys=True) != text:
        raise ValueError(f"{path}: not in the format results.save writes; refusing to rewrite it")
    name, scale = path.stem, path.parent.name
    before = results.content_hash(name, scale, path.parent.parent)
    edit(blob["meta"])
    path.write_text(json.dumps(blob, indent=1, sort_keys=True))
    if results.content_hash(name, scale, path.parent.parent) != before:   # cannot happen: only meta changed
        path.write_text(text)
        raise RuntimeError(f"{path}: content hash changed; restored the original")


def rewrite(row: dict, commit: str) -> None:
    """Re-key one result file (check 3 inside): recorded fingerprint kept, key replaced, the re-keying logged."""
    def edit(meta):
        prov = meta["provenance"]
        prov["code"] = {row["to"] if k == row["from"] else k: v for k, v in prov["code"].items()}
        meta.setdefault("provenance_rekeys", []).append(
            {"from": row["from"], "to": row["to"], "old_commit": commit, "fingerprint": row["new"],
             "recorded_equal": row["recorded"] == row["new"]})
    rewrite_meta(Path(row["file"]), edit)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.book.rekey", description=__doc__.split("\n")[0])
    ap.add_argument("--old-commit", default="HEAD", help="a commit where the recorded entries still exist")
    ap.add_argument("--write", action="store_true", help="rewrite the metadata (default: report only)")
    a = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", a.old_commit], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        rows = plan(provenance.Index(old_tree(commit, Path(tmp))), provenance.index())
    bad = [r for r in rows if not r["ok"]]
    for r in rows:
        state = "same code" if r["ok"] else "DIFFERENT CODE"
        fresh = "fresh" if r["recorded"] == r["new"] else "stale (recorded fingerprint differs)"
        print(f"{Path(r['file']).relative_to(ROOT)}: {r['from']} -> {r['to']}  [{state}; {fresh}]")
    if a.write:
        for r in rows:
            if r["ok"]:
                rewrite(r, commit)
    print(f"{len(rows) - len(bad)} result(s) {'re-keyed' if a.write else 'to re-key'}; {len(bad)} refused")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
