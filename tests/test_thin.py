"""lib/book/thin.py: arrays no reader uses leave a result's .npz; the rest stay bit for bit, the data and the result's
freshness untouched, the meta says what went; a result whose content hash another records is refused."""
import json

import numpy as np
import pytest

from lib.book import results, thin


def _planted(root):
    rng = np.random.default_rng(0)
    arrays = {"paper:s1__census__authors/r_hist": rng.integers(0, 9, (5, 3, 64)).astype(np.int32),
              "paper:s1__census__fa2/r_hist": rng.integers(0, 9, (5, 3, 64)).astype(np.int32),
              "paper:s1__census__authors/n_tied": rng.integers(0, 99, (5, 3)).astype(np.int64),
              "paper:s1__loss": rng.standard_normal(100).astype(np.float32)}
    results.save("arms", "full", {"runs": [{"label": "paper:s1"}]}, arrays=arrays, root=root)
    results.save("regime", "full", {"runs": []}, arrays={"sdpa__census__fa2/r_hist": np.ones(4, np.int32)}, root=root)
    # a result that records another's content hash as its input
    results.save("reader", "full", {"x": 1}, root=root, arrays={"a__census__fa2/r_hist": np.zeros(2, np.int32)},
                 provenance={"registry": "reader", "code": {},
                             "inputs": results.input_hashes(results_read=["regime"], root=root)})
    return arrays


def test_thinning_drops_only_the_matched_arrays_and_records_it(tmp_path):
    arrays = _planted(tmp_path)
    rows = thin.plan(root=tmp_path, keep=frozenset())
    by = {r["name"]: r for r in rows}
    assert by["arms"]["drop"] == ["paper:s1__census__authors/r_hist", "paper:s1__census__fa2/r_hist"]
    assert by["regime"]["refused"] and not by["arms"]["refused"] and not by["reader"]["refused"]
    data_before = json.loads((tmp_path / "full" / "arms.json").read_text())["data"]
    hash_before = results.content_hash("arms", "full", tmp_path)
    old_sha = thin._sha256(tmp_path / "full" / "arms.npz")
    with pytest.raises(ValueError, match="nothing to drop"):
        thin.thin("arms", [], root=tmp_path)
    with pytest.raises(ValueError, match="a chapter reads"):
        thin.thin("arms", by["arms"]["drop"], root=tmp_path, keep=frozenset({"arms"}))
    assert thin._sha256(tmp_path / "full" / "arms.npz") == old_sha         # refusals leave the file as it was
    rec = thin.thin("arms", by["arms"]["drop"], root=tmp_path)
    assert rec["old_npz_sha256"] == old_sha != thin._sha256(tmp_path / "full" / "arms.npz")
    assert not list((tmp_path / "full").glob(".*tmp"))                      # no temporary file left behind
    after = results.load("arms", "full", tmp_path)
    assert set(after.arrays) == {"paper:s1__census__authors/n_tied", "paper:s1__loss"}
    for k, v in after.arrays.items():                        # the kept arrays, bit for bit
        assert v.dtype == arrays[k].dtype and v.shape == arrays[k].shape and v.tobytes() == arrays[k].tobytes()
    assert after.data == data_before                           # the data untouched
    assert rec["old_content_hash"] == hash_before != results.content_hash("arms", "full", tmp_path)
    assert after.meta["thinned"] == [rec] and rec["dropped"] == by["arms"]["drop"] and rec["bytes"] > 0
    assert thin.plan(["arms"], root=tmp_path, keep=frozenset()) == []          # nothing left to drop
    with pytest.raises(ValueError, match="records its content hash"):
        thin.thin("regime", ["sdpa__census__fa2/r_hist"], root=tmp_path)
    with pytest.raises(KeyError):
        thin.thin("reader", ["no-such-array"], root=tmp_path)


def test_the_reader_of_a_refused_result_stays_fresh_and_kept_results_are_left(tmp_path, monkeypatch):
    _planted(tmp_path)
    regime = tmp_path / "full" / "regime.npz"
    before, meta_before = regime.read_bytes(), (tmp_path / "full" / "regime.json").read_text()
    with pytest.raises(ValueError, match="records its content hash"):
        thin.thin("regime", ["sdpa__census__fa2/r_hist"], root=tmp_path, keep=frozenset())
    assert regime.read_bytes() == before and (tmp_path / "full" / "regime.json").read_text() == meta_before
    reader = json.loads((tmp_path / "full" / "reader.json").read_text())["meta"]
    assert reader["provenance"]["inputs"]["result:full/regime"] == results.content_hash("regime", "full", tmp_path)
    # a failure after the meta was written restores it and leaves the old arrays
    arms = tmp_path / "full" / "arms.json"
    text, npz = arms.read_text(), (tmp_path / "full" / "arms.npz").read_bytes()
    monkeypatch.setattr(thin.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        thin.thin("arms", ["paper:s1__census__fa2/r_hist"], root=tmp_path, keep=frozenset())
    assert arms.read_text() == text and (tmp_path / "full" / "arms.npz").read_bytes() == npz
    assert not list((tmp_path / "full").glob(".*tmp"))


def test_the_committed_regime_run_keeps_what_chapter_2b_draws():
    """The committed tree: the regime run's remainder histograms are still there, and nothing is left to drop."""
    assert thin.droppable(results.RESULTS_DIR / "full" / "gpt2_regime.npz")
    assert thin.plan() == []
