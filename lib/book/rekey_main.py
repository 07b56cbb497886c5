"""Re-key committed results after fingerprints stopped covering `__main__` blocks — only the results that were fresh.

`lib.book.provenance` no longer hashes `if __name__ == "__main__":` blocks: they never run on import, and hashed
into the module's `<init>` they tied a module's command line into every definition of the module. That changes the
fingerprint of every definition in such a module and of everything that reaches one, so results that were fresh
would read stale although no line they ran changed. This one-time tool re-keys them, after checking, per result:

1. the fingerprint of its recorded entry under the old hashing (`provenance.Index(skip_main=False)`) on the working
   tree equals the recorded one: the result was fresh;
2. its fingerprint under the new hashing differs from the recorded one (otherwise there is nothing to do);
3. the file round-trips in the format `lib.book.results.save` writes, and its content hash (data and arrays) is
   unchanged (`lib.book.rekey.rewrite_meta`).

Then the recorded fingerprint is replaced by the new one, and ``meta["provenance_rekeys"]`` logs the entry, the old
and new fingerprints, the commit of the tree both were computed on, and the reason. A result that was stale under
the old hashing keeps its recorded fingerprint: it stays stale for the same reason. ``--write`` refuses to run while
the sources (`provenance.PACKAGES`) differ from HEAD, so that the logged commit is the tree that was checked.

    python -m lib.book.rekey_main            # report what would change
    python -m lib.book.rekey_main --write    # rewrite the metadata
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from lib.book import provenance, results
from lib.book.rekey import rewrite_meta

ROOT = results.ROOT
REASON = "fingerprints no longer include __main__ blocks (they never run on import)"


def plan(old_index: provenance.Index, new_index: provenance.Index, root: Path | None = None) -> list[dict]:
    """One row per recorded code entry of every result with provenance: {"file", "entry", "recorded", "old", "new",
    "state"}, state "rekey" (checks 1 and 2 pass), "fresh" (recorded = new: nothing to do) or "stale" (the recorded
    fingerprint matches neither hashing, or the entry is gone: left alone)."""
    rows = []
    for path in sorted((Path(root) if root else results.RESULTS_DIR).glob("*/*.json")):
        prov = json.loads(path.read_text())["meta"].get("provenance")
        for entry, recorded in (prov or {}).get("code", {}).items():
            try:
                old, new = old_index.fingerprint(entry), new_index.fingerprint(entry)
            except (KeyError, ValueError) as e:
                old = new = f"missing: {e}"
            state = "fresh" if recorded == new else "rekey" if recorded == old else "stale"
            rows.append(dict(file=str(path), entry=entry, recorded=recorded, old=old, new=new, state=state))
    return rows


def rewrite(row: dict, commit: str, kind: str = "main blocks", reason: str = REASON) -> None:
    """Re-key one result's entry (check 3 inside): the new fingerprint recorded, the re-keying logged (`kind`,
    `reason`: what changed in the hashing)."""
    if row["state"] != "rekey":
        raise ValueError(f"{row['file']}: {row['entry']} is {row['state']}, not re-keyed")

    def edit(meta):
        meta["provenance"]["code"][row["entry"]] = row["new"]
        meta.setdefault("provenance_rekeys", []).append(dict(
            kind=kind, entry=row["entry"], from_fingerprint=row["old"], to_fingerprint=row["new"],
            commit=commit, reason=reason))
    rewrite_meta(Path(row["file"]), edit)


def _git(*args) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def rekey_all(old_index: provenance.Index, new_index: provenance.Index, write: bool, kind: str = "main blocks",
              reason: str = REASON) -> list[dict] | None:
    """Plan, print and (with `write`) re-key every result fresh under `old_index`'s hashing to `new_index`'s; the
    rows of `plan`, or None where `write` is refused because the sources differ from HEAD."""
    if write and _git("status", "--porcelain", "--", *provenance.PACKAGES):
        print("the sources differ from HEAD; commit them first (the log names the commit checked)")
        return None
    commit = _git("rev-parse", "HEAD")
    rows = plan(old_index, new_index)
    for r in rows:
        print(f"{Path(r['file']).relative_to(ROOT)}: {r['entry']}  [{r['state']}]")
    if write:
        for r in rows:
            if r["state"] == "rekey":
                rewrite(r, commit, kind, reason)
    counts = {s: sum(r["state"] == s for r in rows) for s in ("rekey", "fresh", "stale")}
    print(f"{counts['rekey']} result entries {'re-keyed' if write else 'to re-key'}; {counts['fresh']} fresh as they "
          f"are; {counts['stale']} stale, left alone")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.book.rekey_main", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the metadata (default: report only)")
    a = ap.parse_args(argv)
    rows = rekey_all(provenance.Index(skip_main=False, module_init=False), provenance.Index(module_init=False),
                     a.write)
    return 1 if rows is None else 0


if __name__ == "__main__":
    sys.exit(main())
