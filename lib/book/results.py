"""Results with provenance: atomic save/load, and a staleness check keyed on what can change a number.

A result is two files under ``results/<scale>/``:
  ``<name>.json`` — ``{"meta": {...provenance...}, "data": {...JSON values...}}``
  ``<name>.npz``  — the numpy arrays of the result, if any.

``meta`` holds the audit trail — name, scale, UTC time, git commit (``$BOOK_GIT_COMMIT``, else ``git rev-parse``,
else the ``COMMIT_STAMP`` file a GPU run carries), python/torch/triton/numpy versions, device, seeds, wall time,
the command line — and ``meta["provenance"]``, which decides freshness:

* ``code``: {"pkg.module:run": Merkle fingerprint} of the code the experiment's run can reach
  (`lib.book.provenance`: docstrings, comments, imports, moves and renames do not count; a changed line does);
* ``cfg``: the resolved configuration from the registry (`lib.book.registry`), which must still be what the
  registry resolves the result's name to;
* ``inputs``: sha256 of every input file, and a content hash of every result the run read.

A result is *stale* when any of the three differs. Chapters show stale results with a warning;
``python -m lib.book.results check`` (``make check-results``) lists them with the reason. Results written before
provenance existed carry only ``depends_on`` (sha256 of whole files) and are judged by that.
"""
from __future__ import annotations

import copy
import datetime as _dt
import glob
import hashlib
import io
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


def save(name: str, scale: str, data: dict, *, depends_on=(), provenance: dict | None = None, seeds=(),
         wall_s: float | None = None, config: dict | None = None, arrays: dict | None = None,
         root: Path | None = None) -> Path:
    """Write result `name` at `scale` atomically. `data`: JSON-able values (numpy is converted); `arrays`: numpy
    arrays for the .npz; `provenance`: {"registry": name, "code": {entry: fingerprint}, "cfg": resolved config,
    "inputs": {file or "result:<scale>/<name>": hash}} (see the module docstring); `depends_on`: the older scheme,
    repo-relative paths or globs whose sha256 define freshness (used only without `provenance`); `config`: free-form
    extra configuration for the record (e.g. the resolved per-run training configs)."""
    if not name or "/" in name:
        raise ValueError(f"bad result name {name!r}")
    root = Path(root) if root else RESULTS_DIR
    meta = {"name": name, "scale": scale, "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": git_commit(), "seeds": _jsonable(seeds if isinstance(seeds, dict) else list(seeds)),
            "wall_s": wall_s, "config": _jsonable(config or {}), "argv": sys.argv, **environment()}
    if provenance is not None:
        meta["provenance"] = _jsonable(provenance)
    else:
        meta["depends_on"] = hash_files(expand_dependencies(depends_on))
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
    stale: list = field(default_factory=list)  # why it is stale (`staleness`): empty when fresh

    @property
    def label(self) -> str:
        """'NVIDIA H100 80GB HBM3, 2026-11-22, commit a1b2c3d4' for captions and prose (no internal words: a result of
        another scale than the full one starts 'reduced-size run, ')."""
        m = self.meta
        return (("" if m.get("scale", "full") == "full" else "reduced-size run, ")
                + f"{m.get('device')}, {str(m.get('created_utc', ''))[:10]}, commit {str(m.get('git_commit'))[:8]}")

    @property
    def warning(self) -> str:
        if not self.stale:
            return ""
        return (f"⚠ result '{self.name}' ({self.scale}) is stale — {'; '.join(self.stale[:3])}"
                f"{'…' if len(self.stale) > 3 else ''}. Re-run it: python -m lib.experiments {self.name} "
                f"--scale {self.scale}")


def content_hash(name: str, scale: str, root: Path | None = None) -> str:
    """sha256 of a result's content — its "data" (canonical JSON) and its .npz file — not of its meta, so that
    provenance written into meta does not change the hash that results reading it recorded."""
    root = Path(root) if root else RESULTS_DIR
    js = root / scale / f"{name}.json"
    if not js.exists():
        raise FileNotFoundError(f"no result {js}")
    blob = json.loads(js.read_text())
    h = hashlib.sha256(json.dumps(blob["data"], sort_keys=True, separators=(",", ":")).encode())
    npz = js.with_suffix(".npz")
    if npz.exists():
        h.update(_sha256(npz).encode())
    return h.hexdigest()


def input_hashes(files=(), results_read=(), scale: str = "full", root: Path | None = None) -> dict[str, str]:
    """{file: sha256} for repo-relative `files` and {"result:<scale>/<name>": content_hash} for `results_read`."""
    out = hash_files(expand_dependencies(files)) if files else {}
    for n in results_read:
        out[f"result:{scale}/{n}"] = content_hash(n, scale, root)
    return out


def staleness(meta: dict) -> list[str]:
    """Why a result is stale (an empty list when it is fresh): each reason is one short line."""
    prov = meta.get("provenance")
    if prov is None:   # the older scheme: sha256 of whole files
        bad = []
        for f, h in meta.get("depends_on", {}).items():
            p = ROOT / f
            if not p.exists() or _sha256(p) != h:
                bad.append(f"file changed: {f}")
        return bad
    from lib.book import provenance as _pv, registry as _reg
    bad = []
    for entry, h in prov.get("code", {}).items():
        try:
            now = _pv.index().fingerprint(entry)
        except (KeyError, ValueError) as e:
            bad.append(f"code entry gone: {e}")
            continue
        if now != h:
            bad.append(f"code changed: {entry}")
    for key, h in prov.get("inputs", {}).items():
        if key.startswith("result:"):
            sc, _, n = key[len("result:"):].partition("/")
            try:
                now = content_hash(n, sc)
            except FileNotFoundError:
                now = None
        else:
            p = ROOT / key
            now = _sha256(p) if p.exists() else None
        if now != h:
            bad.append(f"input changed: {key}")
    name = prov.get("registry", meta.get("name"))
    try:
        cfg = _reg.resolve(name, meta.get("scale"))
    except _reg.RegistryError as e:
        bad.append(f"registry: {e}")
    else:
        rec, drop = prov.get("cfg", {}), _reg.CALL_BOUNDS
        if _reg.config_digest(cfg, drop) != _reg.config_digest(rec, drop):
            diff = sorted(k for k in (set(cfg) | set(rec)) - drop if cfg.get(k) != rec.get(k))
            bad.append(f"configuration differs from the registry: {', '.join(diff)}")
    return bad


def exists(name: str, scale: str, root: Path | None = None) -> bool:
    return ((Path(root) if root else RESULTS_DIR) / scale / f"{name}.json").exists()


def load(name: str, scale: str, root: Path | None = None) -> Result:
    """Load result `name` at `scale`; raises FileNotFoundError with the command that produces it."""
    root = Path(root) if root else RESULTS_DIR
    js = root / scale / f"{name}.json"
    if not js.exists():
        raise FileNotFoundError(f"no result {js}; produce it with `python -m lib.experiments {name} --scale {scale}`")
    blob, arrays = _read(js)
    meta = copy.deepcopy(blob["meta"])
    return Result(name, scale, meta, _restore_nonfinite(blob["data"]), {k: v.copy() for k, v in arrays.items()},
                  staleness(meta))


_READ: dict = {}   # str(json path) -> (its bytes, the .npz's bytes or None, parsed JSON, arrays)


def _read(js: Path) -> tuple[dict, dict]:
    """(parsed JSON, {name: array}) of a result's files, parsed once per process for the same bytes: the claims
    table and the chapters load the same results again and again, and decompressing an .npz costs far more than
    reading and comparing its bytes. The caller copies before handing anything out."""
    raw = js.read_bytes()
    npz = js.with_suffix(".npz")
    zraw = npz.read_bytes() if npz.exists() else None
    hit = _READ.get(str(js))
    if hit is None or hit[0] != raw or hit[1] != zraw:
        arrays = {}
        if zraw is not None:
            with np.load(io.BytesIO(zraw)) as z:
                arrays = {k: z[k] for k in z.files}
        hit = (raw, zraw, json.loads(raw), arrays)
        _READ[str(js)] = hit
    return hit[2], hit[3]


def load_group(group: str, scale: str = "full", root: Path | None = None) -> list[Result]:
    """The results of registry group `group` (`lib.book.registry.GROUPS`) that exist at `scale`, in group order."""
    from lib.book import registry as _reg
    return [load(n, scale, root) for n in _reg.GROUPS[group] if exists(n, scale, root)]


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
        print(f"{flag:5}  {r.scale}/{r.name:32} {r.label}" + (f"   {'; '.join(r.stale)}" if r.stale else ""))
    print(f"{n_stale} stale result(s)")
    return 1 if (a.strict and n_stale) else 0


if __name__ == "__main__":
    sys.exit(main())
