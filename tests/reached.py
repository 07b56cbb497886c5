"""Copies of this repository that hold only the sources some code entries reach, for tests that edit a copy and
index it again (`lib.book.provenance`): indexing such a copy takes a fraction of the ≈ 3 s that all of lib/,
kernels/ and benchmarks/ take."""
import shutil
from pathlib import Path

from lib.book import provenance


def copy_reached(dest: Path, entries, also=()) -> Path:
    """Copy to `dest` the modules that `entries` ('pkg.mod:name') reach in this repository, the files `also` (paths
    relative to it) and the __init__.py of every package above them; returns `dest`. A test comparing fingerprints
    of an edited copy first checks that the unedited copy gives its entries this repository's fingerprints, so that
    nothing left out of the copy, only the edit, can move one."""
    ix = provenance.index()
    files = {ix.modules[d.split(":")[0]].path.relative_to(provenance.ROOT) for e in entries for d in ix.reachable(e)}
    files |= {Path(f) for f in also}
    files |= {d / "__init__.py" for f in files for d in f.parents if (provenance.ROOT / d / "__init__.py").exists()}
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(provenance.ROOT / f, dest / f)
    return dest
