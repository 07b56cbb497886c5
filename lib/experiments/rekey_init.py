"""Re-key committed results after module-level statements entered every fingerprint of their module — only the
results that were fresh.

`lib.book.provenance` gave each module's top-level statements (`os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG",
...)` in `lib.training.train`, the `TRITON_INTERPRET` guard in `kernels`) a definition `<init>` that every definition
of the module depends on, but its hash entered theirs only where the statements reach back into the module (one
strongly connected component): editing such a statement staled nothing, though it can change a number. Now the
`<init>` hash is part of each definition's text (`provenance.Index(module_init=True)`, the default). That changes the
fingerprint of every definition in such a module and of everything that reaches one, so this one-time tool re-keys
the results that were fresh, with the checks of `lib.book.rekey_main` (the recorded fingerprint equals the old
hashing's on the working tree; the content hash is unchanged), logging kind "module statements".

The loop certificate's carry records (`results/loop_certificate_*_carry.json`) key each combination by the
fingerprint of what its child reaches (`lib.training.loop_certificate.tree_fingerprint`); a combination whose key is
this tree's under the old hashing gets this tree's under the new one, so that it still carries.

    python -m lib.experiments.rekey_init            # report what would change
    python -m lib.experiments.rekey_init --write    # rewrite the metadata and the carry records
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from lib.book import provenance
from lib.book.rekey_main import ROOT, rekey_all

KIND = "module statements"
REASON = ("fingerprints now include each module's top-level statements (their hash entered a definition's only where "
          "they reach back into the module)")
CARRIES = ("results/loop_certificate_gpt2_carry.json", "results/loop_certificate_proxy_carry.json")


def child_fingerprint(kind: str, index: provenance.Index, root: Path = ROOT) -> str:
    """`lib.training.loop_certificate.tree_fingerprint` of `root` computed with `index`'s hashing."""
    from lib.training import loop_certificate as lc
    parts = dict({e: index.fingerprint(e) for e in lc.CHILD_ENTRIES[kind]},
                 setup=(Path(root) / "lib/book/setup.py").read_text(), child=lc._CHILD)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def carry_plan(old_index, new_index, root: Path = ROOT) -> list[dict]:
    """One row per combination of each carry record: {"file", "i", "kind", "state", "new"}; state "rekey" where
    its key is this tree's under the old hashing, "fresh" where under the new, else "other" (left alone)."""
    rows = []
    for rel in CARRIES:
        path = Path(root) / rel
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        prints = {}
        for i, run in enumerate(rec.get("runs", [])):
            kind = run.get("kind")
            if kind not in prints:
                prints[kind] = (child_fingerprint(kind, old_index, root), child_fingerprint(kind, new_index, root))
            old, new = prints[kind]
            fp = run.get("new_fingerprint")
            state = "fresh" if fp == new else "rekey" if fp == old else "other"
            rows.append(dict(file=str(path), i=i, kind=kind, state=state, new=new))
    return rows


def rewrite_carries(rows: list[dict]) -> None:
    for file in sorted({r["file"] for r in rows if r["state"] == "rekey"}):
        rec = json.loads(Path(file).read_text())
        for r in rows:
            if r["file"] == file and r["state"] == "rekey":
                rec["runs"][r["i"]]["new_fingerprint"] = r["new"]
        Path(file).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.experiments.rekey_init", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the metadata (default: report only)")
    a = ap.parse_args(argv)
    old_ix, new_ix = provenance.Index(module_init=False), provenance.Index()
    if rekey_all(old_ix, new_ix, a.write, KIND, REASON) is None:
        return 1
    crows = carry_plan(old_ix, new_ix)
    if a.write:
        rewrite_carries(crows)
    counts = {s: sum(r["state"] == s for r in crows) for s in ("rekey", "fresh", "other")}
    print(f"carried combinations: {counts['rekey']} {'re-keyed' if a.write else 'to re-key'}, {counts['fresh']} "
          f"already keyed so, {counts['other']} keyed by another tree, left alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
