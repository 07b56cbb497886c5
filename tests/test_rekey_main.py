"""lib/book/rekey_main.py: after `__main__` blocks left the fingerprints, only results that were fresh are re-keyed."""
import json

import numpy as np
import pytest

from lib.book import provenance, registry, rekey_main, results

CHANGED = registry.get("headline").code_entry          # reaches lib/training/train.py, which has a __main__ block
SAME = registry.get("bias_montecarlo").code_entry      # reaches no module with one


def _results(tmp_path, old):
    """Three results: fresh under the old hashing, stale, and fresh under both."""
    root = tmp_path / "results"
    for name, entry, fp in (("fresh", CHANGED, old.fingerprint(CHANGED)), ("stale", CHANGED, "0" * 64),
                            ("same", SAME, old.fingerprint(SAME))):
        prov = {"registry": name, "code": {entry: fp}, "cfg": {}, "inputs": {}}
        results.save(name, "full", {"x": [1.0, float("nan")]}, provenance=prov, arrays={"a": np.arange(3)},
                     root=root)
    return root


def test_only_fresh_results_are_rekeyed_and_logged(tmp_path):
    old, new = provenance.Index(skip_main=False), provenance.index()
    assert old.fingerprint(CHANGED) != new.fingerprint(CHANGED) and old.fingerprint(SAME) == new.fingerprint(SAME)
    root = _results(tmp_path, old)
    texts = {p.stem: p.read_text() for p in (root / "full").glob("*.json")}
    hashes = {n: results.content_hash(n, "full", root) for n in texts}
    rows = rekey_main.plan(old, new, root=root)
    assert {(r["file"].split("/")[-1], r["state"]) for r in rows} == {
        ("fresh.json", "rekey"), ("stale.json", "stale"), ("same.json", "fresh")}
    for r in rows:
        if r["state"] == "rekey":
            rekey_main.rewrite(r, "0" * 40)
        else:
            with pytest.raises(ValueError, match="not re-keyed"):
                rekey_main.rewrite(r, "0" * 40)
    blob = json.loads((root / "full" / "fresh.json").read_text())
    assert blob["meta"]["provenance"]["code"] == {CHANGED: new.fingerprint(CHANGED)}
    assert blob["meta"]["provenance_rekeys"] == [dict(
        kind="main blocks", entry=CHANGED, from_fingerprint=old.fingerprint(CHANGED),
        to_fingerprint=new.fingerprint(CHANGED), commit="0" * 40, reason=rekey_main.REASON)]
    # only the fingerprint line and the log differ; the data, the arrays and the other results are untouched
    before = json.loads(texts["fresh"])
    before["meta"]["provenance"]["code"][CHANGED] = new.fingerprint(CHANGED)
    before["meta"]["provenance_rekeys"] = blob["meta"]["provenance_rekeys"]
    assert blob == before
    assert {p.stem: p.read_text() for p in (root / "full").glob("*.json") if p.stem != "fresh"} == \
        {n: t for n, t in texts.items() if n != "fresh"}
    assert {n: results.content_hash(n, "full", root) for n in texts} == hashes
    assert [r["state"] for r in rekey_main.plan(old, new, root=root)].count("rekey") == 0   # nothing left to do
