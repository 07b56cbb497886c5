"""The in-process parse caches of `lib.book.results.load` and `lib.book.registry`: a file rewritten at once with the
same size is read afresh, and what a caller gets is its own copy (mutating it changes no later load)."""
import numpy as np

from lib.book import registry, results


def test_a_result_rewritten_at_once_is_reloaded_and_every_load_is_a_copy(tmp_path):
    results.save("x", "ci", {"v": 1.5, "nested": {"l": [1, 2]}}, arrays={"a": np.arange(4.0)}, root=tmp_path)
    r = results.load("x", "ci", root=tmp_path)
    r.data["nested"]["l"].append(3)
    r.arrays["a"][0] = 99.0
    r.meta["name"] = "changed"
    again = results.load("x", "ci", root=tmp_path)
    assert again.data == {"v": 1.5, "nested": {"l": [1, 2]}} and again.meta["name"] == "x"
    assert np.array_equal(again.arrays["a"], np.arange(4.0))
    # same sizes of both files, different bytes, written within the same clock tick
    results.save("x", "ci", {"v": 2.5, "nested": {"l": [1, 2]}}, arrays={"a": np.arange(4.0) + 1}, root=tmp_path)
    new = results.load("x", "ci", root=tmp_path)
    assert new.data["v"] == 2.5 and np.array_equal(new.arrays["a"], np.arange(4.0) + 1)


def test_a_registry_rewritten_at_once_is_reparsed_and_every_parse_is_a_copy(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[a]\nbase = "m"\nsummary = "s"\n[a.ci]\nmodel = {n = 1}\n')
    registry.entries(f)["a"].configs["ci"]["model"]["n"] = 7
    assert registry.entries(f)["a"].configs["ci"] == {"model": {"n": 1}}
    registry.get("a", f).configs["ci"]["model"]["n"] = 7          # one entry, copied out of the cached parse
    assert registry.get("a", f).configs["ci"] == {"model": {"n": 1}}
    assert registry.get("a", f) == registry.entries(f)["a"]
    f.write_text('[a]\nbase = "m"\nsummary = "s"\n[a.ci]\nmodel = {n = 2}\n')     # same size
    assert registry.resolve("a", "ci", path=f) == {"model": {"n": 2}}
