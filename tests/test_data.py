"""The pinned corpus and the deterministic, replayable batch order (lib/training/data.py)."""
import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from lib.training import data

STDLIB = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")


def test_corpus_is_pinned_and_matches_readme():
    d = data.load_corpus()
    assert d.dtype == np.uint8 and not d.flags.writeable
    assert hashlib.sha256(d.tobytes()).hexdigest() == data.CORPUS_SHA256
    readme = (data.CORPUS_DIR / "README.md").read_text()
    assert data.CORPUS_SHA256 in readme and f"{len(d)} bytes uncompressed" in readme
    assert (data.CORPUS_DIR / "LICENSE-PSF.txt").read_text().count("PYTHON SOFTWARE FOUNDATION") >= 1
    files = (data.CORPUS_DIR / "FILES.txt").read_text().split()
    assert hashlib.sha256(("\n".join(files) + "\n").encode()).hexdigest() in readme
    # every listed file's header is in the corpus, in the listed (sorted) order, and nothing excluded slipped in
    text = d.tobytes()
    pos = [text.find(f"# ==== {f} ====\n".encode()) for f in files]
    assert min(pos) == 0 and pos == sorted(pos)
    assert files == sorted(files)
    assert not any(f.startswith(("test/", "idlelib/", "site-packages/")) or "/tests/" in f for f in files)


@pytest.mark.skipif(not STDLIB.exists(), reason="the CPython 3.11.7 stdlib the corpus was built from is not here")
def test_file_selection_reproduces_the_shipped_list():
    files = (data.CORPUS_DIR / "FILES.txt").read_text().split()
    assert [p.relative_to(STDLIB).as_posix() for p in data.corpus_files(STDLIB)] == files


def test_split_is_a_partition():
    d = data.load_corpus()
    tr, va = data.split(d, 0.1)
    assert len(tr) + len(va) == len(d) and abs(len(va) - 0.1 * len(d)) <= 1
    assert np.shares_memory(tr, d) and tr[-1] == d[len(tr) - 1] and va[0] == d[len(tr)]
    with pytest.raises(ValueError):
        data.split(d, 0.0)


def test_batch_starts_seeded_in_range_and_replayable(tmp_path):
    a = data.batch_starts(10_000, 64, 8, 50, seed=3)
    b = data.batch_starts(10_000, 64, 8, 50, seed=3)
    c = data.batch_starts(10_000, 64, 8, 50, seed=4)
    assert a.shape == (50, 8) and a.dtype == np.int64
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.min() >= 0 and a.max() + 64 + 1 <= 10_000
    p = data.save_starts(tmp_path / "s.npy", a)
    assert np.array_equal(data.load_starts(p), a)
    np.save(tmp_path / "bad.npy", np.zeros(3))
    with pytest.raises(ValueError):
        data.load_starts(tmp_path / "bad.npy")
    for bad in (dict(seq_len=0), dict(batch=-1), dict(steps=1.5)):
        kw = dict(n_bytes=100, seq_len=8, batch=2, steps=3, seed=0) | bad
        with pytest.raises(ValueError):
            data.batch_starts(**kw)
    with pytest.raises(ValueError):
        data.batch_starts(10, 16, 1, 1, 0)


def test_rank_slices_tile_the_global_batch():
    s = data.batch_starts(10_000, 16, 6, 4, seed=0)
    parts = [data.rank_slice(s, r, 3) for r in range(3)]
    assert np.array_equal(np.concatenate(parts, axis=1), s)
    with pytest.raises(ValueError):
        data.rank_slice(s, 0, 4)
    with pytest.raises(ValueError):
        data.rank_slice(s, 3, 3)


def test_get_batch_windows_and_shift():
    d = data.load_corpus()
    starts = np.array([0, 12345, len(d) - 33])
    x, y = data.get_batch(d, starts, 32)
    assert x.shape == y.shape == (3, 32) and x.dtype == torch.int64
    for i, s in enumerate(starts):
        assert bytes(x[i].tolist()) == d[s:s + 32].tobytes()
        assert bytes(y[i].tolist()) == d[s + 1:s + 33].tobytes()
    with pytest.raises(ValueError):
        data.get_batch(d, np.array([len(d) - 10]), 32)
