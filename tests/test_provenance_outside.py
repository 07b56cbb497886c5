"""Code treated as outside (`lib.book.provenance.Index(outside=...)`): an edit there leaves a fingerprint alone, an
edit anywhere else still moves it — the check `lib.book.rekey_unused` relies on."""
from lib.book import provenance
from lib.training import grid


def _tree(tmp, backend_body, helper_body):
    pkg = tmp / "lib"
    (pkg / "training").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "training" / "__init__.py").write_text("")
    (pkg / "training" / "m.py").write_text(
        "def backend(x):\n" f"    return {backend_body}\n\n"
        "def helper(x):\n" f"    return {helper_body}\n\n"
        "def run(x, use):\n    return backend(x) if use else helper(x)\n")
    return tmp


def test_outside_code_is_ignored_and_other_code_is_not(tmp_path):
    a = provenance.Index(_tree(tmp_path / "a", "x + 1", "x * 2"), packages=("lib",))
    b = provenance.Index(_tree(tmp_path / "b", "x + 2", "x * 2"), packages=("lib",))
    c = provenance.Index(_tree(tmp_path / "c", "x + 2", "x * 3"), packages=("lib",))
    e = "lib.training.m:run"
    assert a.fingerprint(e) != b.fingerprint(e)                     # the backend is reachable: it moves
    out = ("lib.training.m:backend",)
    fa, fb, fc = (provenance.Index(t.root, packages=("lib",), outside=out).fingerprint(e) for t in (a, b, c))
    assert fa == fb                                                  # ... unless named outside
    assert fb != fc                                                  # the helper still counts


def test_grid_names_the_user_kernel_only_when_a_layer_selects_it():
    assert grid.code_entries({"base": {"attn": "sdpa"}, "regimes": [{"label": "a"}]}) == []
    assert grid.code_entries({"base": {"attn": "sdpa"}, "regimes": [{"label": "a", "attn": "sdpa,stable+fix"}]}) \
        == ["kernels.stable_attention:stable_attention"]


def test_a_study_without_code_entries_needs_a_readers_statement():
    """Check 3 of `rekey_unused`: a study that names the code its configuration selects answers it; one that does not
    fails it unless a reader says why the run never executed the outside code (it once passed silently)."""
    import types
    from lib.book.rekey_unused import selection_problems
    out = ["kernels.stable_attention"]
    cfg = {"base": {"attn": "sdpa"}, "regimes": [{"label": "a"}]}
    assert selection_problems(grid, cfg, out) == []
    stable = {"base": {"attn": "sdpa"}, "regimes": [{"label": "a", "attn": "sdpa,stable+fix"}]}
    assert selection_problems(grid, stable, out) == ["the configuration selects ['kernels.stable_attention']"]
    bare = types.ModuleType("lib.studies.bare")
    (why,) = selection_problems(bare, cfg, out)
    assert "no code_entries" in why and "--not-selected-because" in why
    assert selection_problems(bare, cfg, out, "its specs are sdpa and paper only") == []
    assert selection_problems(bare, cfg, out, "   ") != []
