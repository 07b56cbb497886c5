"""lib/book/results.py (provenance, atomic save, staleness) and lib/book/scale.py (named scales)."""
import json

import numpy as np
import pytest

from lib.book import results, scale


def test_save_load_roundtrip_with_provenance(tmp_path, monkeypatch):
    dep = results.ROOT / "lib" / "fp" / "bf16.py"
    p = results.save("demo", "ci", {"x": np.float32(1.5), "v": np.arange(3), "nan": float("nan")},
                     arrays={"a": np.eye(2)}, depends_on=["lib/fp/bf16.py"], seeds=[1, 2], wall_s=0.25,
                     config={"k": 3}, root=tmp_path)
    assert p == tmp_path / "ci" / "demo.json" and p.with_suffix(".npz").exists()
    r = results.load("demo", "ci", root=tmp_path)
    assert r.data["x"] == 1.5 and r.data["v"] == [0, 1, 2] and np.isnan(r.data["nan"])
    assert np.array_equal(r.arrays["a"], np.eye(2))
    m = r.meta
    for key in ("git_commit", "python", "torch", "triton", "device", "created_utc", "argv"):
        assert key in m
    assert m["seeds"] == [1, 2] and m["wall_s"] == 0.25 and m["config"] == {"k": 3}
    assert m["depends_on"]["lib/fp/bf16.py"] == results._sha256(dep)
    assert r.stale == [] and r.warning == ""
    assert r.label.startswith("reduced-size run, ") and "ci" not in r.label.split(", ")


def test_nonfinite_values_roundtrip_as_floats(tmp_path):
    data = {"grid": [{"a": float("nan"), "b": 1.5, "c": float("inf"), "d": -float("inf")}], "s": "text"}
    results.save("nf", "ci", data, depends_on=[], root=tmp_path)
    assert '"nan"' in (tmp_path / "ci" / "nf.json").read_text()           # valid JSON on disk
    back = results.load("nf", "ci", root=tmp_path).data
    g = back["grid"][0]
    assert np.isnan(g["a"]) and g["b"] == 1.5 and g["c"] == float("inf") and g["d"] == -float("inf")
    assert back["s"] == "text"


def test_staleness_detects_changed_dependency(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    f = src / "mod.py"
    f.write_text("a = 1\n")
    monkeypatch.setattr(results, "ROOT", tmp_path)
    results.save("dep", "ci", {}, depends_on=["src/*.py"], root=tmp_path / "res")
    assert results.load("dep", "ci", root=tmp_path / "res").stale == []
    f.write_text("a = 2\n")
    r = results.load("dep", "ci", root=tmp_path / "res")
    assert r.stale == ["file changed: src/mod.py"] and "stale" in r.warning


def test_save_rejects_missing_dependency_and_bad_name(tmp_path):
    with pytest.raises(FileNotFoundError):
        results.save("x", "ci", {}, depends_on=["does/not/exist.py"], root=tmp_path)
    with pytest.raises(ValueError):
        results.save("a/b", "ci", {}, depends_on=[], root=tmp_path)


def test_load_missing_says_how_to_produce(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m lib.experiments nope"):
        results.load("nope", "full", root=tmp_path)


def test_atomic_write_leaves_no_temp_files(tmp_path):
    for i in range(3):
        results.save("atom", "ci", {"i": i}, depends_on=[], root=tmp_path)
    assert sorted(x.name for x in (tmp_path / "ci").iterdir()) == ["atom.json"]
    assert json.loads((tmp_path / "ci" / "atom.json").read_text())["data"]["i"] == 2


def test_committed_results_have_provenance():
    """Every committed result names its commit, device, versions, and the code / configuration / input provenance that
    decides its freshness (staleness itself is reported, not failed)."""
    for r in results.all_results():
        for key in ("git_commit", "device", "torch", "triton", "python", "created_utc", "provenance"):
            assert key in r.meta, (r.name, key)
        prov = r.meta["provenance"]
        assert prov["code"] and all(len(h) == 64 for h in prov["code"].values()), r.name
        assert prov["registry"] == r.name and isinstance(prov["cfg"], dict), r.name


def test_scale_resolution(monkeypatch):
    monkeypatch.setattr(scale, "_has_cuda", lambda: False)
    monkeypatch.delenv("BOOK_SCALE", raising=False)
    assert scale.resolve() == "ci"
    monkeypatch.setenv("BOOK_SCALE", "full")
    with pytest.raises(scale.ScaleError, match="needs a CUDA GPU"):
        scale.resolve()
    with pytest.raises(scale.ScaleError, match="unknown scale"):
        scale.resolve("huge")
    monkeypatch.setattr(scale, "_has_cuda", lambda: True)
    monkeypatch.delenv("BOOK_SCALE")
    assert scale.resolve() == "full"
    assert scale.pick("ci", ci=1, full=2) == 1
    with pytest.raises(scale.ScaleError):
        scale.pick("full", ci=1)
