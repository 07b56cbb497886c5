"""The byte-level training corpus and its deterministic, replayable batch order.

Corpus
------
`data/corpus/pystdlib.txt.xz`: the `.py` sources of the CPython 3.11.7 standard library (PSF licence,
`data/corpus/LICENSE-PSF.txt`), concatenated in sorted path order, each file preceded by a one-line header
``# ==== <relative path> ====``. Tests, `site-packages`, IDLE, tkinter, lib2to3, turtledemo, pydoc_data, encodings,
ensurepip, the build config and machine-specific `_sysconfigdata*` are left out (see `EXCLUDE`). The file is shipped
in the repo so the CPU (Python 3.11) and the GPU image (Python 3.12, a different standard library) train on the same
bytes; `load_corpus()` checks its sha256 against `CORPUS_SHA256`. Rebuild (on the machine with that Python) with
``python -m lib.training.data build``; `data/corpus/README.md` records the source, version, file-list sha256 and sizes.

Tokens are bytes: vocabulary 256, token id = byte value.

Batches
-------
A run's data order is an int64 array ``starts`` of shape (steps, batch): the start offsets of the `seq_len + 1`-byte
windows of each step, drawn uniformly from the train split by `numpy.random.default_rng(data_seed)`. It is made once
(`batch_starts`), saved with the run (`save_starts` / `load_starts`) and replayed exactly; under DDP each rank takes
its contiguous slice of every row (`rank_slice`). The train/val split is by position: the last `val_fraction` of the
bytes is validation.
"""
from __future__ import annotations

import hashlib
import lzma
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = ROOT / "data" / "corpus"
CORPUS_PATH = CORPUS_DIR / "pystdlib.txt.xz"
# sha256 of the *uncompressed* corpus bytes (written by `build_corpus`; README.md repeats it).
CORPUS_SHA256 = "97ff5d5b530d636d19989f5c57f36909073f4e61e80d87dd17f85990414d181b"
VOCAB_SIZE = 256
DEFAULT_VAL_FRACTION = 0.05

# Top-level names (directories or files) of the stdlib that are not taken, and directory names skipped anywhere.
EXCLUDE = ("test", "site-packages", "idlelib", "tkinter", "lib2to3", "turtledemo", "pydoc_data", "encodings",
           "ensurepip", "__phello__", "lib-dynload", "__pycache__")
EXCLUDE_ANYWHERE = ("tests", "test", "__pycache__")


# ----------------------------------------------------------------------------------------------------------------
# building the corpus (once, on the CPU machine)
# ----------------------------------------------------------------------------------------------------------------
def corpus_files(stdlib: Path) -> list[Path]:
    """The `.py` files of the standard library at `stdlib` that go into the corpus, in sorted relative-path order."""
    stdlib = Path(stdlib)
    out = []
    for p in stdlib.rglob("*.py"):
        rel = p.relative_to(stdlib)
        if rel.parts[0] in EXCLUDE or rel.parts[0].startswith("config-") or rel.name.startswith("_sysconfigdata"):
            continue
        if any(part in EXCLUDE_ANYWHERE for part in rel.parts[:-1]):
            continue
        if rel.name in ("__hello__.py",):
            continue
        out.append(p)
    return sorted(out, key=lambda p: p.relative_to(stdlib).as_posix())


def build_corpus(stdlib: Path | None = None, out_dir: Path = CORPUS_DIR) -> dict:
    """Concatenate the stdlib sources into `out_dir/pystdlib.txt.xz` and write README.md and LICENSE-PSF.txt.

    Returns {"n_files", "n_bytes", "sha256", "file_list_sha256", "compressed_bytes", "python"}."""
    import os
    stdlib = Path(stdlib) if stdlib is not None else Path(os.__file__).parent
    files = corpus_files(stdlib)
    if not files:
        raise FileNotFoundError(f"no .py files under {stdlib}")
    parts, names = [], []
    for p in files:
        rel = p.relative_to(stdlib).as_posix()
        names.append(rel)
        body = p.read_bytes()
        parts.append(f"# ==== {rel} ====\n".encode() + body + (b"" if body.endswith(b"\n") else b"\n"))
    raw = b"".join(parts)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    comp = lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)
    (out_dir / "pystdlib.txt.xz").write_bytes(comp)
    (out_dir / "FILES.txt").write_text("\n".join(names) + "\n")
    lic = stdlib / "LICENSE.txt"
    if lic.exists():
        (out_dir / "LICENSE-PSF.txt").write_bytes(lic.read_bytes())
    info = dict(n_files=len(files), n_bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest(),
                file_list_sha256=hashlib.sha256(("\n".join(names) + "\n").encode()).hexdigest(),
                compressed_bytes=len(comp), python=sys.version.split()[0], stdlib=str(stdlib))
    (out_dir / "README.md").write_text(_readme(info))
    return info


def _readme(info: dict) -> str:
    return f"""# Byte-level training corpus: CPython standard-library source

- **Source**: the `.py` files of the CPython {info['python']} standard library (`{info['stdlib']}`), taken in sorted
  relative-path order, each preceded by a header line `# ==== <relative path> ====`.
- **Left out**: `test/` and every `tests/` directory, `site-packages/`, `idlelib/`, `tkinter/`, `lib2to3/`,
  `turtledemo/`, `pydoc_data/`, `encodings/`, `ensurepip/`, `__phello__/`, `__hello__.py`, `config-*/`,
  `_sysconfigdata*` (machine-specific).
- **Files**: {info['n_files']} (listed in `FILES.txt`; sha256 of that list: `{info['file_list_sha256']}`).
- **Size**: {info['n_bytes']} bytes uncompressed, {info['compressed_bytes']} bytes xz-compressed
  (`pystdlib.txt.xz`).
- **sha256 of the uncompressed bytes**: `{info['sha256']}` (checked by `lib.training.data.load_corpus()`).
- **Licence**: Python Software Foundation License; the licence file of that Python install is `LICENSE-PSF.txt`.
- **Rebuild**: `python -m lib.training.data build` with that Python (the GPU image's Python 3.12 has a different standard
  library, which is why the corpus is pinned and shipped).
"""


# ----------------------------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=2)
def _load(path: str, check: bool) -> np.ndarray:
    raw = lzma.decompress(Path(path).read_bytes())
    if check:
        got = hashlib.sha256(raw).hexdigest()
        if got != CORPUS_SHA256:
            raise ValueError(f"corpus {path} has sha256 {got}, expected {CORPUS_SHA256} (rebuild or re-check out)")
    arr = np.frombuffer(raw, dtype=np.uint8)
    arr.flags.writeable = False
    return arr


def load_corpus(path: Path | str = CORPUS_PATH, *, check: bool = True) -> np.ndarray:
    """The corpus as a read-only uint8 array of shape (n_bytes,); sha256-checked against `CORPUS_SHA256`
    when `path` is the shipped corpus and `check` is true."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"corpus not found at {path}; it is shipped in the repo (data/corpus)")
    return _load(str(path.resolve()), bool(check) and path.resolve() == CORPUS_PATH.resolve())


def split(data: np.ndarray, val_fraction: float = DEFAULT_VAL_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): the first 1 − val_fraction of the bytes and the rest (views, no copy)."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    cut = int(round(len(data) * (1.0 - val_fraction)))
    return data[:cut], data[cut:]


# ----------------------------------------------------------------------------------------------------------------
# batch order
# ----------------------------------------------------------------------------------------------------------------
def batch_starts(n_bytes: int, seq_len: int, batch: int, steps: int, seed: int) -> np.ndarray:
    """Start offsets of every window of a run: int64 array (steps, batch), uniform in [0, n_bytes − seq_len − 1),
    from `numpy.random.default_rng(seed)`. A window is `seq_len + 1` bytes (inputs and shifted targets)."""
    for name, val in (("seq_len", seq_len), ("batch", batch), ("steps", steps)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val <= 0:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    hi = int(n_bytes) - int(seq_len) - 1
    if hi <= 0:
        raise ValueError(f"data of {n_bytes} bytes is too short for windows of {seq_len + 1} bytes")
    rng = np.random.default_rng(int(seed))
    return rng.integers(0, hi, size=(int(steps), int(batch)), dtype=np.int64)


def rank_slice(starts: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank `rank`'s contiguous share of every row of `starts` (steps, batch) -> (steps, batch // world_size)."""
    steps, batch = starts.shape
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside [0, {world_size})")
    if batch % world_size:
        raise ValueError(f"global batch {batch} is not divisible by world size {world_size}")
    per = batch // world_size
    return starts[:, rank * per:(rank + 1) * per]


def save_starts(path: Path | str, starts: np.ndarray) -> Path:
    """Save a batch order (steps, batch) int64 as .npy; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.asarray(starts, dtype=np.int64))
    return path


def load_starts(path: Path | str) -> np.ndarray:
    """Load a batch order saved by `save_starts`; checks that it is a 2-D integer array."""
    starts = np.load(Path(path))
    if starts.ndim != 2 or not np.issubdtype(starts.dtype, np.integer):
        raise ValueError(f"{path}: expected a 2-D integer array of batch starts, got {starts.dtype} {starts.shape}")
    return starts.astype(np.int64, copy=False)


def get_batch(data: np.ndarray, starts: np.ndarray, seq_len: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Windows at `starts` (batch,) -> (x, y): int64 tensors of shape (batch, seq_len), y = x shifted by one byte."""
    starts = np.asarray(starts, dtype=np.int64)
    if starts.ndim != 1:
        raise ValueError(f"starts must be 1-D (one step's batch), got shape {starts.shape}")
    if len(starts) and (starts.min() < 0 or starts.max() + seq_len + 1 > len(data)):
        raise ValueError("a window falls outside the data")
    idx = starts[:, None] + np.arange(seq_len + 1, dtype=np.int64)[None, :]
    win = torch.from_numpy(data[idx].astype(np.int64))
    x, y = win[:, :-1], win[:, 1:]
    if torch.device(device).type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.contiguous().to(device), y.contiguous().to(device)


if __name__ == "__main__":
    import argparse
    import json
    ap = argparse.ArgumentParser(description="Build the pinned byte-level corpus (run with CPython 3.11.7).")
    ap.add_argument("cmd", choices=["build", "info"])
    ap.add_argument("--stdlib", default=None, help="standard-library directory (default: this Python's)")
    a = ap.parse_args()
    if a.cmd == "build":
        print(json.dumps(build_corpus(a.stdlib), indent=1))
    else:
        d = load_corpus()
        print(json.dumps(dict(n_bytes=int(len(d)), sha256=CORPUS_SHA256), indent=1))
