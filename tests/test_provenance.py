"""lib/book/provenance.py and the staleness of lib/book/results.py: what makes a result stale and what does not.

Moving code, renaming it, editing docstrings, comments, annotations or imports must leave fingerprints unchanged; a
changed line of code — a kernel line above all — must change the fingerprint of everything that reaches it."""
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lib.book import provenance, registry, results
from tests.reached import copy_reached

ROOT = Path(__file__).resolve().parents[1]


def _tree(tmp_path, files: dict) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    return tmp_path


BASE = {
    "lib/__init__.py": "",
    "lib/fp/__init__.py": "",
    "lib/fp/num.py": '''
        """Numbers."""
        import math

        SCALE = 2.0


        def double(x: float) -> float:
            """Twice x."""
            return SCALE * x   # why: a comment
        ''',
    "lib/experiments/__init__.py": "",
    "lib/experiments/exp.py": '''
        from lib.fp import num
        from lib.fp.num import double as dbl


        def run(scale, cfg):
            return {"data": {"y": dbl(cfg["x"]) + num.SCALE}}
        ''',
}


def _real_copy(dest: Path, *entries: str) -> Path:
    """What `entries` reach in the real tree, copied to `dest` (`copy_reached`): the tests below edit a copy and
    index it again, and each indexed all of lib/, kernels/ and benchmarks/ two or three times (≈ 3 s each). The copy
    gives `entries` the real tree's fingerprints (asserted), so only the edit a test makes can move one."""
    copy_reached(dest, entries)
    copied, real = provenance.Index(dest), provenance.index()
    assert all(copied.fingerprint(e) == real.fingerprint(e) for e in entries)
    return dest

def _fp(root, entry="lib.experiments.exp:run"):
    return provenance.Index(root).fingerprint(entry)


def test_docstrings_comments_annotations_and_imports_do_not_count(tmp_path):
    a = _fp(_tree(tmp_path / "a", BASE))
    edited = dict(BASE)
    edited["lib/fp/num.py"] = '''
        """Numbers, now with a longer docstring."""
        import math
        import os

        SCALE = 2.0


        def double(x):
            """Twice x (edited)."""
            # another comment
            return SCALE * x
        '''
    assert _fp(_tree(tmp_path / "b", edited)) == a


def test_moving_and_renaming_do_not_count(tmp_path):
    a = _fp(_tree(tmp_path / "a", BASE))
    moved = {k: v for k, v in BASE.items() if k != "lib/fp/num.py"}
    moved["lib/core/__init__.py"] = ""
    moved["lib/core/arith.py"] = '''
        SCALE = 2.0


        def twice(x):
            return SCALE * x
        '''
    moved["lib/experiments/exp.py"] = '''
        from lib.core import arith as A


        def run(scale, cfg):
            return {"data": {"y": A.twice(cfg["x"]) + A.SCALE}}
        '''
    assert _fp(_tree(tmp_path / "b", moved)) == a


def test_a_changed_line_or_constant_counts_and_propagates(tmp_path):
    a = _fp(_tree(tmp_path / "a", BASE))
    for old, new in (("return SCALE * x", "return SCALE * x + 0.0"), ("SCALE = 2.0", "SCALE = 2.5")):
        changed = dict(BASE)
        changed["lib/fp/num.py"] = BASE["lib/fp/num.py"].replace(old, new)
        assert _fp(_tree(tmp_path / f"c{len(old)}", changed)) != a


def test_the_cached_index_is_rebuilt_when_a_source_file_appears_changes_or_goes(tmp_path):
    root = _tree(tmp_path, BASE)
    first = provenance.index(root)
    assert provenance.index(root) is first                          # nothing changed: the cached index
    (root / "lib" / "fp" / "more.py").write_text("X = 1\n")
    added = provenance.index(root)
    assert added is not first
    num = root / "lib" / "fp" / "num.py"
    num.write_text(num.read_text().replace("SCALE = 2.0", "SCALE = 2.50"))   # one byte longer
    edited = provenance.index(root)
    assert edited is not added
    (root / "lib" / "fp" / "more.py").unlink()
    assert provenance.index(root) is not edited


def test_unreached_code_does_not_count(tmp_path):
    a = _fp(_tree(tmp_path / "a", BASE))
    extra = dict(BASE)
    extra["lib/fp/num.py"] = textwrap.dedent(BASE["lib/fp/num.py"]) + "\n\ndef unrelated():\n    return 42\n"
    assert _fp(_tree(tmp_path / "b", extra)) == a


def test_mutual_recursion_is_hashed(tmp_path):
    files = dict(BASE)
    files["lib/fp/num.py"] = '''
        def even(n):
            return True if n == 0 else odd(n - 1)


        def odd(n):
            return False if n == 0 else even(n - 1)


        def double(x):
            return 2 * x if even(2) else x

        SCALE = 2.0
        '''
    a = _fp(_tree(tmp_path / "a", files))
    files2 = dict(files)
    files2["lib/fp/num.py"] = files["lib/fp/num.py"].replace("False if n == 0", "True if n == 0")
    assert _fp(_tree(tmp_path / "b", files2)) != a


def test_plumbing_is_outside(tmp_path):
    files = dict(BASE)
    files["lib/book/__init__.py"] = ""
    files["lib/book/results.py"] = "def save(x):\n    return x\n"
    files["lib/experiments/exp.py"] = textwrap.dedent(BASE["lib/experiments/exp.py"]).replace(
        "from lib.fp import num", "from lib.fp import num\nfrom lib.book import results").replace(
        '    return {"data"', '    results.save(1)\n    return {"data"')
    a = _fp(_tree(tmp_path / "a", files))
    files["lib/book/results.py"] = "def save(x):\n    return x + 1\n"
    assert _fp(_tree(tmp_path / "b", files)) == a


def test_an_edited_kernel_line_stales_the_training_results_that_reach_it(tmp_path):
    """The real tree: copy what a training result and a pure-numpy result reach, change one line of the rounding
    helper, and every committed training result's code fingerprint changes, while a pure-numpy result's does not."""
    before = provenance.index()          # the tree the copy was made from (its index is built once per session)
    e_train, e_np = registry.get("headline").code_entry, registry.get("bias_montecarlo").code_entry
    _real_copy(tmp_path, e_train, e_np)
    fp_train, fp_np = before.fingerprint(e_train), before.fingerprint(e_np)
    assert "kernels.rounding:rne_mantissa" in before.reachable(e_train)
    src = (tmp_path / "kernels" / "rounding.py").read_text()
    line = next(ln for ln in src.splitlines() if "0x7FFF" in ln or "0x7fff" in ln)
    (tmp_path / "kernels" / "rounding.py").write_text(src.replace(line, line.replace("0x7F", "0x3F", 1), 1))
    after = provenance.Index(tmp_path)
    assert after.fingerprint(e_train) != fp_train
    assert after.fingerprint(e_np) == fp_np


def test_a_docstring_edit_in_the_real_kernel_changes_nothing(tmp_path):
    e = registry.get("headline").code_entry
    fp = provenance.index().fingerprint(e)               # the tree the copy was made from
    p = _real_copy(tmp_path, e) / "kernels" / "flash_fwd.py"
    p.write_text(p.read_text().replace('"""', '"""Edited. ', 1) + "\n# a trailing comment\n")
    assert provenance.Index(tmp_path).fingerprint(e) == fp


def test_bad_entries_are_refused():
    ix = provenance.index()
    with pytest.raises(ValueError, match="package.module:name"):
        ix.fingerprint("lib.studies.explosion.headline")
    with pytest.raises(KeyError, match="no module"):
        ix.fingerprint("lib.nowhere:run")
    with pytest.raises(KeyError, match="defines no"):
        ix.fingerprint("lib.studies.explosion.headline:nothing")


def test_staleness_reasons_for_code_config_and_inputs(tmp_path, monkeypatch):
    """A result saved with provenance is fresh; each of code, configuration and input changes makes it stale, and
    the reason names which."""
    prov = dict(registry="bias_montecarlo", code=provenance.code_fingerprint(["lib.studies.rounding.bias_montecarlo:run"]),
                cfg=registry.resolve("bias_montecarlo", "ci"), inputs=results.input_hashes(["data/corpus/README.md"]))
    results.save("bias_montecarlo", "ci", {"y": 1}, provenance=prov, root=tmp_path, arrays={"a": np.zeros(2)})
    assert results.load("bias_montecarlo", "ci", root=tmp_path).stale == []
    blob = (tmp_path / "ci" / "bias_montecarlo.json").read_text()
    for edit, reason in ((('"n_problems": 24', '"n_problems": 25'), "configuration differs"),
                         ((prov["code"]["lib.studies.rounding.bias_montecarlo:run"], "0" * 64), "code changed"),
                         ((prov["inputs"]["data/corpus/README.md"], "1" * 64), "input changed")):
        assert edit[0] in blob
        (tmp_path / "ci" / "bias_montecarlo.json").write_text(blob.replace(edit[0], edit[1]))
        stale = results.load("bias_montecarlo", "ci", root=tmp_path).stale
        assert len(stale) == 1 and reason in stale[0], stale


def test_content_hash_ignores_meta(tmp_path):
    results.save("r", "ci", {"x": [1, 2]}, depends_on=[], root=tmp_path, arrays={"a": np.arange(3)})
    h = results.content_hash("r", "ci", tmp_path)
    p = tmp_path / "ci" / "r.json"
    p.write_text(p.read_text().replace('"scale": "ci"', '"scale": "ci", "extra": 1'))
    assert results.content_hash("r", "ci", tmp_path) == h
    results.save("r", "ci", {"x": [1, 3]}, depends_on=[], root=tmp_path, arrays={"a": np.arange(3)})
    assert results.content_hash("r", "ci", tmp_path) != h


# -- `if __name__ == "__main__":` blocks never run on import, so they are not fingerprinted ----------------------------
CLI = '''
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--x", type=float, help="the input")
    print(scale(ap.parse_args().x))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="a command line")
    ap.add_argument("--y", help="another input")
    main()
'''   # a command line: `main` and the block that calls it
SCALE_SRC = "SCALE = 2.0\n\n\ndef scale(x):\n    return SCALE * x\n"
MAIN = {
    "lib/__init__.py": "",
    "lib/fp/__init__.py": "",
    "lib/fp/tool.py": "import argparse\n\n" + SCALE_SRC + "\n\ndef shift(x):\n    return x + 1.0\n\n" + CLI,
    "lib/experiments/__init__.py": "",
    "lib/experiments/exp.py": '''
        from lib.fp import tool


        def run(scale, cfg):
            return {"data": {"y": tool.scale(cfg["x"]) + tool.shift(1.0)}}
        ''',
}


def _all_fps(root, **kw) -> dict:
    """{"mod:name": fingerprint} of every definition under `root`."""
    ix = provenance.Index(root, **kw)
    return {f"{m}:{n}": ix.fingerprint(f"{m}:{n}") for m, mod in ix.modules.items() for n in mod.defs}


def _main_edit(tmp_path, tag, old, new) -> Path:
    files = dict(MAIN)
    src = textwrap.dedent(files["lib/fp/tool.py"])
    assert src.count(old) == 1
    files["lib/fp/tool.py"] = src.replace(old, new)
    return _tree(tmp_path / tag, files)


def test_a_string_edit_in_a_main_block_changes_no_fingerprint(tmp_path):
    a = _all_fps(_tree(tmp_path / "a", MAIN))
    b = _main_edit(tmp_path, "b", 'help="another input"', 'help="another input, edited"')
    assert _all_fps(b) == a
    assert _all_fps(b, skip_main=False) != _all_fps(tmp_path / "a", skip_main=False)   # the old hashing: it did


def test_code_added_to_or_removed_from_a_main_block_changes_no_fingerprint(tmp_path):
    a = _all_fps(_tree(tmp_path / "a", MAIN))
    added = _main_edit(tmp_path, "b", "    main()\n", "    print(shift(3.0))\n    main()\n")
    removed = _main_edit(tmp_path, "c", '    ap.add_argument("--y", help="another input")\n', "")
    assert _all_fps(added) == a and _all_fps(removed) == a
    swapped = _main_edit(tmp_path, "d", 'if __name__ == "__main__":', 'if "__main__" == __name__:')
    assert _all_fps(swapped) == a   # either operand order


def test_moving_a_function_and_the_command_line_out_stales_nothing(tmp_path):
    """`scale` (reached by `run`) moves to another module, and `main` with the `__main__` block to a third: the
    fingerprint of the entry is unchanged (the old hashing, which tied the block into `tool`'s `<init>`, moved)."""
    a = _tree(tmp_path / "a", MAIN)
    moved = {k: v for k, v in MAIN.items() if k != "lib/fp/tool.py"}
    moved["lib/fp/tool.py"] = '''
        from lib.fp.arith import scale


        def shift(x):
            return x + 1.0
        '''
    moved["lib/fp/arith.py"] = SCALE_SRC
    moved["lib/fp/cli.py"] = "import argparse\n\nfrom lib.fp.arith import scale\n\n" + CLI
    b = _tree(tmp_path / "b", moved)
    assert _fp(b) == _fp(a)
    assert _fp(b, "lib.fp.tool:shift") == _fp(a, "lib.fp.tool:shift")
    assert _fp(b, "lib.fp.arith:scale") == _fp(a, "lib.fp.tool:scale")
    old = provenance.Index(a, skip_main=False).fingerprint("lib.experiments.exp:run")
    assert provenance.Index(b, skip_main=False).fingerprint("lib.experiments.exp:run") != old


def test_a_code_edit_next_to_a_main_block_still_counts(tmp_path):
    a = _fp(_tree(tmp_path / "a", MAIN))
    assert _fp(_main_edit(tmp_path, "b", "return SCALE * x", "return SCALE * x + 0.0")) != a
    # other module-level tests, or a `__main__` test with an `else` (which runs on import), are still hashed
    for tag, new in (("c", 'if __name__ != "__main__":'), ("d", 'if __name__ == "lib.fp.tool":')):
        base = _fp(_main_edit(tmp_path, tag, 'if __name__ == "__main__":', new))
        edited = _main_edit(tmp_path, tag + "2", 'if __name__ == "__main__":', new)
        p = edited / "lib/fp/tool.py"
        p.write_text(p.read_text().replace('help="another input"', 'help="edited"'))
        assert _fp(edited) != base
    with_else = _main_edit(tmp_path, "e", "    main()\n", "    main()\nelse:\n    SCALE = 3.0\n")
    assert _fp(with_else) != a


def test_a_help_string_in_the_real_training_command_line_changes_nothing(tmp_path):
    """The real tree: lib/training/data.py's `__main__` block and train.py's command-line help are not reached."""
    e = registry.get("headline").code_entry
    fp = provenance.index().fingerprint(e)               # the tree the copy was made from
    with_main = provenance.Index(_real_copy(tmp_path, e), skip_main=False).fingerprint(e)   # before the edits
    for rel, old, new in (("lib/training/data.py", 'help="standard-library directory',
                           'help="edited standard-library directory'),
                          ("lib/training/train.py", "_HELP.get(name, ", "'edited ' + _HELP.get(name, ")):
        p = tmp_path / rel
        assert old in p.read_text()
        p.write_text(p.read_text().replace(old, new, 1))
    assert provenance.Index(tmp_path).fingerprint(e) == fp
    assert provenance.Index(tmp_path, skip_main=False).fingerprint(e) != with_main   # the edits are code there


def test_an_edited_module_statement_counts_in_every_definition_of_its_module(tmp_path):
    # A top-level statement that reaches no definition of its module (as `os.environ.setdefault(...)` in the
    # training module): the hashing before `lib.experiments.rekey_init` missed an edit of it.
    files = dict(BASE)
    files["lib/fp/num.py"] = files["lib/fp/num.py"] + "\n        import os\n        os.environ.setdefault('A', '1')\n"
    a = _tree(tmp_path / "a", files)
    files["lib/fp/num.py"] = files["lib/fp/num.py"].replace("'1'", "'2'")
    b = _tree(tmp_path / "b", files)
    assert _fp(a) != _fp(b)
    old = dict(module_init=False)
    assert provenance.Index(a, **old).fingerprint("lib.experiments.exp:run") == \
        provenance.Index(b, **old).fingerprint("lib.experiments.exp:run")


def test_rekey_init_rekeys_only_results_fresh_under_the_old_hashing(tmp_path):
    from lib.book import rekey_main
    from lib.experiments import rekey_init
    entry = "lib.experiments.exp:run"
    files = dict(BASE)
    files["lib/fp/num.py"] = files["lib/fp/num.py"] + "\n        import os\n        os.environ.setdefault('A', '1')\n"
    root = _tree(tmp_path / "tree", files)
    old, new = provenance.Index(root, module_init=False), provenance.Index(root)
    assert old.fingerprint(entry) != new.fingerprint(entry)
    res = tmp_path / "results"
    for name, fp in (("fresh", old.fingerprint(entry)), ("stale", "0" * 64)):
        results.save(name, "full", {"x": 1.0}, provenance={"registry": name, "code": {entry: fp}, "cfg": {},
                                                          "inputs": {}}, root=res)
    rows = rekey_main.plan(old, new, root=res)
    assert sorted((r["file"].split("/")[-1], r["state"]) for r in rows) == [("fresh.json", "rekey"),
                                                                          ("stale.json", "stale")]
    for r in rows:
        if r["state"] == "rekey":
            rekey_main.rewrite(r, "0" * 40, rekey_init.KIND, rekey_init.REASON)
    meta = json.loads((res / "full" / "fresh.json").read_text())["meta"]
    assert meta["provenance"]["code"][entry] == new.fingerprint(entry)
    assert meta["provenance_rekeys"][-1]["kind"] == "module statements"
    assert json.loads((res / "full" / "stale.json").read_text())["meta"]["provenance"]["code"][entry] == "0" * 64
