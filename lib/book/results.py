"""Results with provenance: atomic save/load, and a staleness check.

A result is two files under ``results/<scale>/``:
  ``<name>.json`` — ``{"meta": {...provenance...}, "data": {...JSON values...}}``
  ``<name>.npz``  — the numpy arrays of the result, if any.

Provenance (``meta``): name, scale, UTC time, git commit (``$BOOK_GIT_COMMIT``, else ``git rev-parse``, else the
``COMMIT_STAMP`` file a GPU run carries), sha256 of every file the result depends on, python/torch/triton/numpy
versions, device name, seeds, wall time in seconds, and free-form config.

A result is *stale* when a file it depends on no longer has the recorded sha256. Chapters show stale results with
a warning; ``python -m lib.book.results check`` (``make check-results``) lists them.
"""
from __future__ import annotations

import datetime as _dt
import glob
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "results"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expand_dependencies(patterns) -> list[str]:
    """Expand glob patterns (relative to the repo root) to a sorted list of existing files, repo-relative."""
    out = set()
    for p in patterns:
        hits = glob.glob(str(ROOT / p), recursive=True)
        if not hits:
            raise FileNotFoundError(f"dependency {p!r} matches no file under {ROOT}")
        out.update(str(Path(h).resolve().relative_to(ROOT)) for h in hits if Path(h).is_file())
    return sorted(out)


def hash_files(files) -> dict[str, str]:
    return {f: _sha256(ROOT / f) for f in files}


def git_commit() -> str:
    if os.environ.get("BOOK_GIT_COMMIT"):
        return os.environ["BOOK_GIT_COMMIT"]
    try:
        c = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if c.returncode == 0:
            return c.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    stamp = ROOT / "COMMIT_STAMP"
    return stamp.read_text().strip() if stamp.exists() else "unknown"


def environment() -> dict:
    """Versions and device of this process."""
    env = {"python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform()}
    try:
        import torch
        env["torch"] = torch.__version__
        env["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.processor() or platform.machine()})"
        env["cuda"] = torch.version.cuda
    except ImportError:  # pragma: no cover
        env["device"] = "cpu"
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        pass
    env["triton_interpret"] = os.environ.get("TRITON_INTERPRET", "0") == "1"
    return env


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating,)):
        x = float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)  # JSON has no NaN/Inf: stored as 'nan' / 'inf' / '-inf', turned back into floats by load()
    return x


def _restore_nonfinite(x):
    """Inverse of the non-finite encoding of `_jsonable`: 'nan', 'inf', '-inf' strings back to floats."""
    if isinstance(x, dict):
        return {k: _restore_nonfinite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_restore_nonfinite(v) for v in x]
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    return x


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save(name: str, scale: str, data: dict, *, depends_on, seeds=(), wall_s: float | None = None,
         config: dict | None = None, arrays: dict | None = None, root: Path | None = None) -> Path:
    """Write result `name` at `scale` atomically. `data`: JSON-able values (numpy is converted); `arrays`: numpy
    arrays for the .npz; `depends_on`: repo-relative paths or globs whose sha256 define freshness."""
    if not name or "/" in name:
        raise ValueError(f"bad result name {name!r}")
    root = Path(root) if root else RESULTS_DIR
    files = expand_dependencies(depends_on)
    meta = {"name": name, "scale": scale, "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": git_commit(), "depends_on": hash_files(files), "seeds": _jsonable(list(seeds)),
            "wall_s": wall_s, "config": _jsonable(config or {}), "argv": sys.argv, **environment()}
    out = root / scale / f"{name}.json"
    text = json.dumps({"meta": meta, "data": _jsonable(data)}, indent=1, sort_keys=True)
    _atomic_write(out, lambda p: Path(p).write_text(text))
    npz = out.with_suffix(".npz")
    if arrays:
        def _w(p):
            with open(p, "wb") as f:
                np.savez_compressed(f, **arrays)
        _atomic_write(npz, _w)
    elif npz.exists():
        npz.unlink()
    return out


@dataclass
class Result:
    name: str
    scale: str
    meta: dict
    data: dict
    arrays: dict = field(default_factory=dict)
    stale: list = field(default_factory=list)  # dependency files whose sha256 changed (or vanished)

    @property
    def label(self) -> str:
        """'full · NVIDIA H100 80GB HBM3 · a1b2c3d4 · 2026-11-22' for captions."""
        m = self.meta
        return f"{m.get('scale')} · {m.get('device')} · {str(m.get('git_commit'))[:8]} · {str(m.get('created_utc', ''))[:10]}"

    @property
    def warning(self) -> str:
        if not self.stale:
            return ""
        return (f"⚠ result '{self.name}' ({self.scale}) is stale: {len(self.stale)} source file(s) changed since it "
                f"was produced ({', '.join(self.stale[:4])}{'…' if len(self.stale) > 4 else ''}). Re-run it.")


def staleness(meta: dict) -> list[str]:
    bad = []
    for f, h in meta.get("depends_on", {}).items():
        p = ROOT / f
        if not p.exists() or _sha256(p) != h:
            bad.append(f)
    return bad


def exists(name: str, scale: str, root: Path | None = None) -> bool:
    return ((Path(root) if root else RESULTS_DIR) / scale / f"{name}.json").exists()


def load(name: str, scale: str, root: Path | None = None) -> Result:
    """Load result `name` at `scale`; raises FileNotFoundError with the command that produces it."""
    root = Path(root) if root else RESULTS_DIR
    js = root / scale / f"{name}.json"
    if not js.exists():
        raise FileNotFoundError(f"no result {js}; produce it with `python -m lib.experiments {name} --scale {scale}`")
    blob = json.loads(js.read_text())
    arrays = {}
    npz = js.with_suffix(".npz")
    if npz.exists():
        with np.load(npz) as z:
            arrays = {k: z[k] for k in z.files}
    return Result(name, scale, blob["meta"], _restore_nonfinite(blob["data"]), arrays, staleness(blob["meta"]))


def all_results(root: Path | None = None) -> list[Result]:
    root = Path(root) if root else RESULTS_DIR
    return [load(p.stem, p.parent.name, root) for p in sorted(root.glob("*/*.json"))]


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m lib.book.results", description="List results and their staleness.")
    ap.add_argument("command", choices=["check", "list"])
    ap.add_argument("--strict", action="store_true", help="exit 1 if any result is stale")
    a = ap.parse_args(argv)
    n_stale = 0
    for r in all_results():
        flag = "STALE" if r.stale else "ok"
        n_stale += bool(r.stale)
        print(f"{flag:5}  {r.scale}/{r.name:32} {r.label}" + (f"   changed: {', '.join(r.stale)}" if r.stale else ""))
    print(f"{n_stale} stale result(s)")
    return 1 if (a.strict and n_stale) else 0


if __name__ == "__main__":
    sys.exit(main())
