"""lib/book/rekey.py: a result's code entry follows its module only when the code under the new entry is the same."""
import json

import numpy as np

from lib.book import provenance, registry, rekey, results
from tests.reached import copy_reached

ENTRY = "bias_montecarlo"          # a registry entry whose module has moved (lib/experiments -> lib/studies/rounding)
OLD = "lib.experiments.bias_montecarlo:run"


def _old_tree(tmp_path, edit=None):
    """A copy of the sources with the entry's module back at its old path (optionally with its code edited). Only
    what the entry reaches is copied (`copy_reached`; all of lib/, kernels/ and benchmarks/ took ≈ 3 s a tree to
    copy and index), and before the move the copy fingerprints the entry as this tree does (asserted)."""
    root = tmp_path / "old"
    entry = registry.get(ENTRY).code_entry
    copy_reached(root, [entry], also=["lib/experiments/__init__.py"])
    assert provenance.Index(root).fingerprint(entry) == provenance.index().fingerprint(entry)
    new = registry.get(ENTRY).module.replace(".", "/") + ".py"
    src = (root / new).read_text()
    (root / new).unlink()
    (root / "lib" / "experiments" / "bias_montecarlo.py").write_text(edit(src) if edit else src)
    return provenance.Index(root)


def _result(tmp_path, fingerprint: str):
    """A committed-looking result recorded under the old entry, with arrays."""
    root = tmp_path / "results"
    prov = {"registry": ENTRY, "code": {OLD: fingerprint}, "cfg": {}, "inputs": {}}
    results.save(ENTRY, "full", {"x": [1.0, float("nan")]}, provenance=prov, arrays={"a": np.arange(3)}, root=root)
    return root


def test_same_code_is_rekeyed_and_nothing_else_changes(tmp_path):
    new_entry = registry.get(ENTRY).code_entry
    fp = provenance.index().fingerprint(new_entry)
    root = _result(tmp_path, fp)
    before = results.content_hash(ENTRY, "full", root)
    rows = rekey.plan(_old_tree(tmp_path), provenance.index(), root=root)
    assert [(r["from"], r["to"], r["ok"]) for r in rows] == [(OLD, new_entry, True)]
    rekey.rewrite(rows[0], "0" * 40)
    meta = json.loads((root / "full" / f"{ENTRY}.json").read_text())["meta"]
    assert meta["provenance"]["code"] == {new_entry: fp}
    assert meta["provenance_rekeys"] == [{"from": OLD, "to": new_entry, "old_commit": "0" * 40, "fingerprint": fp,
                                          "recorded_equal": True}]
    assert results.content_hash(ENTRY, "full", root) == before
    assert rekey.plan(_old_tree(tmp_path / "again"), provenance.index(), root=root) == []   # nothing left to do


def test_changed_code_is_refused(tmp_path):
    root = _result(tmp_path, "0" * 64)
    old = _old_tree(tmp_path, edit=lambda s: s.replace("SEED = ", "SEED = 1 + ", 1))
    rows = rekey.plan(old, provenance.index(), root=root)
    assert len(rows) == 1 and not rows[0]["ok"] and rows[0]["old"] != rows[0]["new"]


def test_committed_results_name_their_registry_modules():
    """After the move every committed result records the code entry its registry entry names."""
    es = registry.entries()
    for r in results.all_results():
        prov = r.meta.get("provenance")
        if prov and prov.get("registry") in es:
            assert list(prov["code"]) == [es[prov["registry"]].code_entry], r.name
