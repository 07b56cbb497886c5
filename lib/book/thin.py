"""Thin committed results: drop the arrays no reader uses, so that the tree a GPU campaign sends stays under its limit.

Every GPU campaign sends the working tree (at most 64 MiB), and most of it is `results/full/`. A GPT-2 result keeps,
per run, the census's histogram of the other keys' share on tied rows (``<run>__census__<placement>/r_hist``): about
31 % of its arrays, read by chapter 2b for the regime run only (`KEEP`). This tool drops such arrays from a result's
``.npz`` and says so in its meta:

1. a result whose content hash another result records as an input (``provenance.inputs["result:<scale>/<name>"]``)
   is refused: thinning changes the hash (it covers the .npz's bytes), so the reader would go stale;
2. the kept arrays are written to a new compressed .npz and read back: each must have the same dtype, shape and bytes
   as before, or nothing is written;
3. the meta gets a ``thinned`` record (the arrays dropped, their bytes, the .npz's old sha256 and the result's old
   content hash, the reason) through `lib.book.rekey.rewrite_meta`, which checks that the data and the content hash
   are unchanged by it; then the new .npz replaces the old one. The JSON's data is untouched, so nothing a chapter
   prints from it changes; the dropped arrays remain in git history (the old sha256 names the file).

A result's freshness does not depend on its own content, so thinning stales nothing (`python -m lib.book.results
check`). Run it after copying a hold's GPT-2 results in, before committing them:

    python -m lib.book.thin                 # report what would be dropped
    python -m lib.book.thin --write         # drop it
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from lib.book import results
from lib.book.rekey import rewrite_meta

# fnmatch patterns of array keys that no chapter reads (checked by tracing every array access of every chapter).
THIN = ("*__census__*/r_hist",)
# Results whose arrays of those patterns a chapter does read: chapter 2b draws the regime run's remainder histogram.
KEEP = frozenset({"gpt2_regime"})
REASON = ("arrays no chapter reads, dropped so that the tree sent to a GPU machine stays under its limit; the "
          "old .npz is in git history under its sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recorded_inputs(scale: str = "full", root: Path | None = None) -> set[str]:
    """Names of the results at `scale` whose content hash another result records as an input."""
    root = Path(root) if root else results.RESULTS_DIR
    import json
    out = set()
    for js in root.glob("*/*.json"):
        prov = json.loads(js.read_text())["meta"].get("provenance") or {}
        for key in prov.get("inputs", {}):
            if key.startswith(f"result:{scale}/"):
                out.add(key.split("/", 1)[1])
    return out


def member_bytes(npz: Path) -> dict[str, int]:
    """{array key: its compressed bytes in `npz`}."""
    with zipfile.ZipFile(npz) as z:
        return {i.filename[:-len(".npy")]: i.compress_size for i in z.infolist() if i.filename.endswith(".npy")}


def droppable(npz: Path, patterns=THIN) -> dict[str, int]:
    """{array key: its compressed bytes in `npz`} for the keys matching `patterns`."""
    return {k: n for k, n in member_bytes(npz).items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def plan(names=None, scale: str = "full", root: Path | None = None, patterns=THIN, keep=KEEP) -> list[dict]:
    """One row per result at `scale` (of `names`, default all) with arrays to drop: {"name", "drop": [keys],
    "bytes": compressed bytes dropped, "refused": why not, or ""}."""
    root = Path(root) if root else results.RESULTS_DIR
    readers = recorded_inputs(scale, root)
    rows = []
    for npz in sorted((root / scale).glob("*.npz")):
        name = npz.stem
        if (names and name not in names) or name in keep:
            continue
        drop = droppable(npz, patterns)
        if drop:
            rows.append(dict(name=name, drop=sorted(drop), bytes=sum(drop.values()),
                             refused="another result records its content hash" if name in readers else ""))
    return rows


def thin(name: str, drop: list[str], scale: str = "full", root: Path | None = None, reason: str = REASON,
         keep=KEEP) -> dict:
    """Drop the arrays `drop` from result `name` (steps 1–3 of the module docstring); returns the meta record. The
    new .npz is written beside the old one first, then the meta, then the .npz replaced; a failure before the last
    step restores the meta and removes the new file."""
    root = Path(root) if root else results.RESULTS_DIR
    if not drop:
        raise ValueError(f"{name}: nothing to drop (re-saving the arrays would change the content hash for nothing)")
    if name in keep:
        raise ValueError(f"{name}: a chapter reads the arrays of this result that the patterns match")
    if name in recorded_inputs(scale, root):
        raise ValueError(f"{name}: another result records its content hash; thinning it would stale that one")
    npz = root / scale / f"{name}.npz"
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    missing = sorted(set(drop) - set(arrays))
    if missing:
        raise KeyError(f"{name}: no arrays {missing}")
    kept = {k: v for k, v in arrays.items() if k not in set(drop)}
    buf = io.BytesIO()
    np.savez_compressed(buf, **kept)
    with np.load(io.BytesIO(buf.getvalue()), allow_pickle=False) as z:
        back = {k: z[k] for k in z.files}
    same = set(back) == set(kept) and all(back[k].dtype == kept[k].dtype and back[k].shape == kept[k].shape
                                          and back[k].tobytes() == kept[k].tobytes() for k in kept)
    if not same:                                        # cannot happen with numpy's own format; refuse if it does
        raise RuntimeError(f"{name}: the kept arrays do not read back bit for bit; nothing written")
    sizes = member_bytes(npz)
    record = dict(dropped=sorted(drop), bytes=sum(sizes[k] for k in drop), old_npz_sha256=_sha256(npz),
                  old_content_hash=results.content_hash(name, scale, root), reason=reason)
    js = root / scale / f"{name}.json"
    text = js.read_text()
    fd, tmp = tempfile.mkstemp(dir=npz.parent, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        rewrite_meta(js, lambda meta: meta.setdefault("thinned", []).append(record))
        os.replace(tmp, npz)
    except BaseException:
        js.write_text(text)
        Path(tmp).unlink(missing_ok=True)
        raise
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.book.thin", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="results to thin (default: every result with arrays to drop)")
    ap.add_argument("--scale", default="full")
    ap.add_argument("--write", action="store_true", help="drop the arrays (default: report only)")
    a = ap.parse_args(argv)
    rows = plan(a.names or None, a.scale)
    for r in rows:
        print(f"{r['name']:28s} {len(r['drop']):3d} arrays {r['bytes'] / 1e6:6.2f} MB  {r['refused'] or ''}")
    ok = [r for r in rows if not r["refused"]]
    print(f"{sum(r['bytes'] for r in ok) / 1e6:.2f} MB to drop from {len(ok)} results"
          + ("" if a.write else " (report only: --write drops them)"))
    if a.write:
        for r in ok:
            thin(r["name"], r["drop"], a.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
