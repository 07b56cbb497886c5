"""A GPT-2-token corpus of the Python sources installed on a machine, and its document-level train/val split.

Corpus
------
`build_token_corpus(roots, out_dir)` takes every `*.py` file under `roots` (default: this interpreter's standard
library and site-packages, from `sysconfig`), leaves out `__pycache__` and files that cannot be read or are not
UTF-8, keeps one copy of each distinct content (sha256 of the bytes) and orders the documents by that sha256, so the
token stream depends only on the set of contents, not on install paths or directory order. Each document is the
file's text, tokenised with GPT-2's BPE (`lib.training.bpe`, `encode_ordinary`: a literal "<|endoftext|>" in a
source file stays text) and followed by one `EOT`. It writes to `out_dir`:

- `tokens.bin`: the token stream, little-endian uint16, shape (n_tokens,); every id < `bpe.VOCAB_SIZE` < 2**16;
- `doc_offsets.npy`: int64, shape (n_documents + 1,): document i is tokens[offsets[i]:offsets[i+1]], its last token
  is `EOT`; offsets[0] = 0 and offsets[-1] = n_tokens;
- `manifest.json`: Python version, installed distributions, roots, file counts, token and document counts, the
  sha256 of `tokens.bin`, the encoding's files and tiktoken version, and the build's wall time.

Speed: files are read, hashed and decoded in a thread pool (file reads and sha256 release the GIL), and the unique
texts are tokenised in a thread pool with tiktoken's `encode_to_numpy`, whose BPE runs in Rust without the GIL and
returns a numpy buffer, so no Python int per token is ever made; the main thread only appends each document to the
file in order while hashing it.

Split
-----
`split_documents(tokens, offsets, val_fraction, seed)` puts whole documents in validation: document i is in val when
a seeded hash of its tokens, blake2b keyed by `seed`, read as a fraction in [0, 1), is below `val_fraction`.
A document's side thus depends only on its content and the seed, not on which other files the machine has
installed: rebuilding the corpus on an image with more packages moves no existing file between train and val, so
validation never leaks into training across corpus versions. The val share is `val_fraction` of the documents in
expectation (binomial), not exactly, and of the tokens only roughly (file sizes vary). `batch_starts` / `get_batch`
of `lib.training.data` then draw windows from either concatenation; windows may span an `EOT`, as in GPT-2 training.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Iterable

import numpy as np
import tiktoken

from lib.training import bpe

TOKENS_FILE = "tokens.bin"
OFFSETS_FILE = "doc_offsets.npy"
MANIFEST_FILE = "manifest.json"
TOKEN_DTYPE = np.dtype("<u2")     # GPT-2 ids < 50257 fit 16 bits; little-endian on every machine
FORMAT = 1                        # bump when the files' meaning changes


# ----------------------------------------------------------------------------------------------------------------
# collecting the sources
# ----------------------------------------------------------------------------------------------------------------
def default_roots() -> list[Path]:
    """This interpreter's standard library and site-packages (`sysconfig` stdlib, purelib, platlib)."""
    paths = sysconfig.get_paths()
    return [Path(paths[k]) for k in ("stdlib", "purelib", "platlib")]


def _outermost(roots: Iterable[Path | str]) -> list[Path]:
    """The existing roots, resolved, without duplicates and without any root inside another one (a non-venv
    install keeps site-packages inside the stdlib directory; walking both would count its files twice)."""
    resolved = sorted({Path(r).resolve() for r in roots if Path(r).is_dir()})
    return [r for r in resolved if not any(r != o and r.is_relative_to(o) for o in resolved)]


def find_sources(roots: Iterable[Path | str]) -> tuple[list[Path], int]:
    """(the `*.py` files under `roots` in sorted path order, how many `*.py` were skipped inside `__pycache__`)."""
    found, in_cache = [], 0
    for root in _outermost(roots):
        for dirpath, dirnames, filenames in os.walk(root):
            hits = sorted(f for f in filenames if f.endswith(".py"))
            if "__pycache__" in Path(dirpath).relative_to(root).parts:
                in_cache += len(hits)
            else:
                found += [Path(dirpath) / f for f in hits]
    return sorted(found), in_cache


def _read(path: Path) -> tuple[str, tuple[bytes, str, int] | str]:
    """("ok", (sha256 digest of the bytes, text, number of bytes)) or ("unreadable" | "non_utf8", path)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return "unreadable", str(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "non_utf8", str(path)
    return "ok", (hashlib.sha256(raw).digest(), text, len(raw))


# ----------------------------------------------------------------------------------------------------------------
# building
# ----------------------------------------------------------------------------------------------------------------
def _document(enc: tiktoken.Encoding, text: str) -> np.ndarray:
    """One document: the text's GPT-2 tokens followed by EOT, as a uint16 array."""
    ids = enc.encode_to_numpy(text, disallowed_special=())   # no special tokens allowed: the same as encode_ordinary
    doc = np.empty(len(ids) + 1, dtype=TOKEN_DTYPE)
    doc[:-1] = ids
    doc[-1] = bpe.EOT
    return doc


def installed_distributions() -> dict[str, str]:
    """{distribution name: version} of this interpreter's environment, the first found on sys.path for each name."""
    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name not in out:
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def _workers(workers: int | None) -> int:
    if workers is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    return workers


def _read_unique(pool: ThreadPoolExecutor,
                 found: list[Path]) -> tuple[dict[bytes, str], dict[str, list[str]], int, int]:
    """(texts {sha256 digest: text} of the distinct UTF-8 files, skipped {"unreadable" | "non_utf8": paths},
    number of files decoded, number of bytes of the distinct files)."""
    texts: dict[bytes, str] = {}
    skipped: dict[str, list[str]] = {"unreadable": [], "non_utf8": []}
    n_decoded = n_bytes = 0
    for status, value in pool.map(_read, found):
        if status != "ok":
            skipped[status].append(value)
            continue
        n_decoded += 1
        digest, text, size = value
        if digest not in texts:
            texts[digest] = text
            n_bytes += size
    return texts, skipped, n_decoded, n_bytes


def _write_stream(pool: ThreadPoolExecutor, texts: list[str], out_dir: Path) -> tuple[np.ndarray, str]:
    """Tokenise `texts` in `pool`, append them in order (each + EOT) to `out_dir/tokens.bin`; return the document
    offsets (len(texts) + 1,) and the stream's sha256. The file appears only once complete."""
    enc = bpe.gpt2_encoding()
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    sha = hashlib.sha256()
    tmp = out_dir / (TOKENS_FILE + ".partial")
    with open(tmp, "wb") as f:
        # map yields in order; the workers run ahead while this thread writes
        for i, doc in enumerate(pool.map(lambda text: _document(enc, text), texts)):
            f.write(doc.data)
            sha.update(doc.data)
            offsets[i + 1] = offsets[i] + len(doc)
    os.replace(tmp, out_dir / TOKENS_FILE)
    return offsets, sha.hexdigest()


def build_token_corpus(roots: Iterable[Path | str] | None, out_dir: Path | str, *, workers: int | None = None,
                       max_files: int | None = None) -> dict:
    """Tokenise the `*.py` sources under `roots` (None: `default_roots()`) into `out_dir` (see the module docstring
    for the files) and return the manifest that is also written to `out_dir/manifest.json`.

    workers: threads for reading and for tokenising (default: the CPUs this process may use).
    max_files: read only the first `max_files` files in sorted path order (a quick build for tests)."""
    t0 = time.perf_counter()
    workers = _workers(workers)
    roots = default_roots() if roots is None else [Path(r) for r in roots]
    found, in_cache = find_sources(roots)
    if max_files is not None:
        found = found[:max_files]
    if not found:
        raise FileNotFoundError(f"no .py files under {[str(r) for r in roots]}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)   # a rebuild that stops half-way leaves no valid-looking corpus
    with ThreadPoolExecutor(workers) as pool:
        texts, skipped, n_decoded, n_bytes = _read_unique(pool, found)
        if not texts:
            raise ValueError(f"none of the {len(found)} .py files under {[str(r) for r in roots]} is UTF-8 text")
        t_read = time.perf_counter()
        digests = sorted(texts)     # content order: independent of paths and of the walk
        offsets, tokens_sha256 = _write_stream(pool, [texts[d] for d in digests], out_dir)
    np.save(out_dir / OFFSETS_FILE, offsets)
    t_end = time.perf_counter()

    enc = bpe.gpt2_encoding()
    manifest = dict(
        format=FORMAT,
        python=dict(version=platform.python_version(), implementation=platform.python_implementation(),
                    executable=sys.executable),
        roots=[str(r) for r in _outermost(roots)],
        files=dict(found=len(found), skipped_pycache=in_cache, unreadable=len(skipped["unreadable"]),
                   non_utf8=len(skipped["non_utf8"]), decoded=n_decoded, unique=len(digests),
                   duplicates=n_decoded - len(digests), max_files=max_files),
        skipped_files={k: sorted(v) for k, v in skipped.items()},
        n_bytes=n_bytes,
        n_documents=len(digests),
        n_tokens=int(offsets[-1]),
        tokens_file=TOKENS_FILE, dtype=TOKEN_DTYPE.str, offsets_file=OFFSETS_FILE,
        tokens_sha256=tokens_sha256,
        contents_sha256=hashlib.sha256(b"".join(digests)).hexdigest(),   # the set of documents, in order
        encoding=dict(name=enc.name, n_vocab=enc.n_vocab, eot=bpe.EOT, tiktoken=tiktoken.__version__,
                      encoder_json_sha256=bpe.ENCODER_JSON_SHA256, vocab_bpe_sha256=bpe.VOCAB_BPE_SHA256),
        distributions=installed_distributions(),
        workers=workers,
        seconds=dict(read=round(t_read - t0, 3), tokenise_write=round(t_end - t_read, 3), total=round(t_end - t0, 3)),
    )
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# ----------------------------------------------------------------------------------------------------------------
# loading and splitting
# ----------------------------------------------------------------------------------------------------------------
def load_token_corpus(out_dir: Path | str, *, check: bool = True) -> tuple[np.memmap, dict]:
    """(tokens, manifest) of a corpus built by `build_token_corpus`: tokens is a read-only uint16 memmap of shape
    (n_tokens,). With `check`, its length and sha256 must match the manifest (one pass over the file)."""
    out_dir = Path(out_dir)
    manifest = json.loads((out_dir / MANIFEST_FILE).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{out_dir}: corpus format {manifest.get('format')!r}, this code reads {FORMAT}")
    tokens = np.memmap(out_dir / manifest["tokens_file"], dtype=np.dtype(manifest["dtype"]), mode="r")
    if len(tokens) != manifest["n_tokens"]:
        raise ValueError(f"{out_dir}: {len(tokens)} tokens on disk, the manifest says {manifest['n_tokens']}")
    if check:
        sha = hashlib.sha256()
        for a in range(0, len(tokens), 1 << 24):
            sha.update(tokens[a:a + (1 << 24)].data)
        if sha.hexdigest() != manifest["tokens_sha256"]:
            raise ValueError(f"{out_dir}: tokens have sha256 {sha.hexdigest()}, the manifest says "
                             f"{manifest['tokens_sha256']} (rebuild the corpus)")
    return tokens, manifest


def load_doc_offsets(out_dir: Path | str) -> np.ndarray:
    """The document boundaries of a built corpus: int64 (n_documents + 1,), from 0 to n_tokens, increasing."""
    offsets = np.load(Path(out_dir) / OFFSETS_FILE)
    if offsets.ndim != 1 or offsets.dtype != np.int64 or offsets[0] != 0 or np.any(np.diff(offsets) <= 0):
        raise ValueError(f"{out_dir}: {OFFSETS_FILE} is not an increasing int64 list of boundaries from 0")
    return offsets


def val_documents(tokens: np.ndarray, offsets: np.ndarray, val_fraction: float, seed: int) -> np.ndarray:
    """Boolean (n_documents,): True for the documents that go to validation, those whose blake2b hash of their
    token bytes keyed by `seed`, read as a 64-bit fraction, is below `val_fraction`."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) <= 0):
        raise ValueError("offsets must increase from 0 to len(tokens)")
    key = int(seed).to_bytes(8, "little", signed=True)
    tokens = np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE)   # the hash reads the on-disk bytes
    cut = val_fraction * 2.0 ** 64
    return np.array([int.from_bytes(hashlib.blake2b(tokens[a:b].data, digest_size=8, key=key).digest(), "little") < cut
                     for a, b in zip(offsets[:-1], offsets[1:])], dtype=bool)


def split_documents(tokens: np.ndarray, offsets: np.ndarray, val_fraction: float,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): contiguous 1-D uint16 arrays, the concatenation in corpus order of the documents that
    `val_documents` leaves in training and of those it sends to validation. Raises if either side is empty."""
    is_val = val_documents(tokens, offsets, val_fraction, seed)
    if is_val.all() or not is_val.any():
        raise ValueError(f"val_fraction {val_fraction} with seed {seed} puts all {len(is_val)} documents on one side")
    per_token = np.repeat(is_val, np.diff(np.asarray(offsets, dtype=np.int64)))
    tokens = np.asarray(tokens)
    return tokens[~per_token], tokens[per_token]


# ----------------------------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------------------------
def summary(manifest: dict) -> dict:
    """The manifest without its long lists (distributions, skipped paths): what the command line prints."""
    short = {k: v for k, v in manifest.items() if k not in ("distributions", "skipped_files")}
    short["distributions"] = len(manifest["distributions"])
    return short


def main(argv: list[str] | None = None) -> dict:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m lib.training.token_corpus",
                                 description="Build (or check) the GPT-2-token corpus of installed Python sources.")
    ap.add_argument("cmd", choices=["build", "info"])
    ap.add_argument("--out", required=True, help="output directory (tokens.bin, doc_offsets.npy, manifest.json)")
    ap.add_argument("--roots", nargs="+", default=None, help="source directories (default: stdlib + site-packages)")
    ap.add_argument("--workers", type=int, default=None, help="threads (default: all usable CPUs)")
    ap.add_argument("--max-files", type=int, default=None, help="take only the first N files (sorted path order)")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        manifest = build_token_corpus(a.roots, a.out, workers=a.workers, max_files=a.max_files)
    else:
        manifest = load_token_corpus(a.out)[1]   # checks length and sha256
    print(json.dumps(summary(manifest), indent=1))
    return manifest


if __name__ == "__main__":
    main()
