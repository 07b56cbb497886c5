"""lib/book/certify.py: a stale result is re-keyed only when its run gives bit-identical outputs before and after."""
import json
import os
import shutil
import subprocess

import numpy as np

from lib.book import certify, provenance, results

ENTRY = "lib.tiny:run"
MODULE = '''import time

import numpy as np


def helper(x, mode):
    if mode == "a":
        return x * 2.0
    return x + 1.0


def run(scale, cfg):
    t0 = time.perf_counter()
    x = helper(np.arange(cfg["n"], dtype=np.float32), cfg["mode"])
    return {"data": {"total": float(x.sum()), "runs": [{"steps": cfg["n"], "wall_s": time.perf_counter() - t0,
                                                        "seconds": {"read": time.perf_counter()}}]},
            "arrays": {"x": x}, "seeds": [0]}
'''
REGISTRY = '''[tiny]
base = "lib.tiny"
summary = "a tiny experiment"
[tiny.ci]
mode = "a"
n = 5
[tiny.full]
mode = "a"
n = 50
'''


def _git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def scratch_repo(tmp_path, name: str, module: str, registry_toml: str, cfg: dict, data: dict, arrays=None):
    """A scratch repository: the registry reader, one experiment `lib/<name>.py` (entry `lib.<name>:run`) and its
    result `name` (its fingerprint recorded at commit C); returns (repo, C)."""
    repo = tmp_path / "repo"
    (repo / "lib" / "book").mkdir(parents=True)
    (repo / "lib" / "experiments").mkdir()
    (repo / "lib" / "__init__.py").write_text("")
    for f in ("__init__.py", "registry.py"):
        shutil.copy(provenance.ROOT / "lib" / "book" / f, repo / "lib" / "book" / f)
    (repo / "lib" / "experiments" / "registry.toml").write_text(registry_toml)
    (repo / "lib" / f"{name}.py").write_text(module)
    (repo / ".gitignore").write_text("__pycache__/\n")
    entry = f"lib.{name}:run"
    prov = {"registry": name, "code": {entry: provenance.Index(repo).fingerprint(entry)}, "cfg": cfg, "inputs": {}}
    results.save(name, "full", data, provenance=prov, arrays=arrays, root=repo / "results")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "C")
    return repo, _git(repo, "rev-parse", "HEAD")


def _repo(tmp_path):
    return scratch_repo(tmp_path, "tiny", MODULE, REGISTRY, {"mode": "a", "n": 50}, {"total": 1.0},
                        arrays={"a": np.arange(3)})


def _edit(repo, old, new):
    p = repo / "lib" / "tiny.py"
    p.write_text(p.read_text().replace(old, new))
    _git(repo, "commit", "-qam", "edit")


def test_untaken_branch_certified_and_rekeyed(tmp_path, capsys):
    repo, c = _repo(tmp_path)
    _edit(repo, "return x + 1.0", "return x + 3.0")          # the branch mode "a" does not take
    recorded = provenance.Index(repo).fingerprint(ENTRY)
    path = repo / "results" / "full" / "tiny.json"
    before = json.loads(path.read_text())
    assert before["meta"]["provenance"]["code"][ENTRY] != recorded  # stale
    hash_before = results.content_hash("tiny", "full", repo / "results")
    assert certify.main(["tiny", "--old-commit", c, "--write", "--reason", "r"], repo=repo) == 0
    assert "bit-identical" in capsys.readouterr().out
    after = json.loads(path.read_text())
    assert after["meta"]["provenance"]["code"] == {ENTRY: recorded}
    log, = after["meta"]["provenance_rekeys"]
    assert log["kind"] == "certificate" and log["commit"] == c and log["scale"] == "ci" and log["reason"] == "r"
    assert log["to_fingerprint"] == recorded and log["from_fingerprint"] == before["meta"]["provenance"]["code"][ENTRY]
    assert log["new_commit"] == _git(repo, "rev-parse", "HEAD")
    # 1 array of 5 elements; scalars: total, steps and the seed; wall_s and seconds excluded
    assert {k: log["compared"][k] for k in ("arrays", "array_elements", "scalars", "excluded")} == \
        dict(arrays=1, array_elements=5, scalars=3, excluded=2)
    assert results.content_hash("tiny", "full", repo / "results") == hash_before
    cert, = json.loads((repo / certify.CERTIFICATES).read_text())
    assert cert["result"] == "tiny" and cert["bit_identical"] is True and cert["old_commit"] == c
    assert cert["config_differs"] == ["n"] and cert["python"] and cert["torch"]
    # fresh now: a second certificate has nothing to do and writes nothing
    assert certify.main(["tiny", "--old-commit", c, "--write"], repo=repo) == 0
    assert len(json.loads((repo / certify.CERTIFICATES).read_text())) == 1


def test_changed_number_refused_and_nothing_written(tmp_path, capsys):
    repo, c = _repo(tmp_path)
    _edit(repo, "return x * 2.0", "return x * 2.5")          # the branch it takes
    text = (repo / "results" / "full" / "tiny.json").read_text()
    assert certify.main(["tiny", "--old-commit", c, "--write"], repo=repo) == 1
    out = capsys.readouterr().out
    assert "array x: 4 of 5 element(s) differ" in out and "/data/total: 20.0 (old) != 25.0 (new)" in out
    assert (repo / "results" / "full" / "tiny.json").read_text() == text
    assert not (repo / certify.CERTIFICATES).exists()


def test_overrides_reach_both_runs_and_old_commit_must_be_the_recorded_code(tmp_path):
    repo, c = _repo(tmp_path)
    _edit(repo, "return x + 1.0", "return x + 3.0")
    rep = certify.certify("tiny", c, overrides={"n": 7, "mode": "a"}, repo=repo)
    assert rep["ok"] and rep["counts"]["array_elements"] == 7
    rep = certify.certify("tiny", c, overrides={"mode": "b"}, repo=repo)      # now the edited branch runs
    assert not rep["ok"] and any(d.startswith("array x") for d in rep["diffs"])
    rep = certify.certify("tiny", "HEAD", repo=repo)                          # not the code that produced it
    assert not rep["ok"] and "does not give the recorded fingerprint" in rep["why"][0] and not rep["counts"]


def test_dirty_sources_refuse_write(tmp_path, capsys):
    repo, c = _repo(tmp_path)
    (repo / "lib" / "tiny.py").write_text(MODULE.replace("x + 1.0", "x + 3.0"))
    assert certify.main(["tiny", "--old-commit", c, "--write"], repo=repo) == 1
    assert "differ from HEAD" in capsys.readouterr().out


def test_time_keys_excluded_other_scalars_caught():
    run = {"steps": 4, "loss": [1.5, 0.0], "wall_s": 1.0, "tokens_per_s": 9.0, "steps_per_s": 2.0,
           "seconds": {"total": 3.0}, "versions": {"torch": "2"}, "device": "cpu", "max_wall_s": 480}
    counts, diffs = certify.compare_trees(run, dict(run, wall_s=2.0, tokens_per_s=1.0, steps_per_s=5.0,
                                                    seconds={"total": 4.0}, versions={}, device="cuda"))
    assert diffs == [] and counts == {"scalars": 4, "excluded": 6}
    for changed in (dict(steps=5), dict(max_wall_s=481), dict(loss=[1.5, -0.0]), dict(steps=4.0),
                    dict(loss=[1.5]), dict(extra=1)):
        assert certify.compare_trees(run, dict(run, **changed))[1], changed
    nan = np.array([np.nan, 1.0], dtype=np.float32)
    assert certify.compare_arrays({"a": nan}, {"a": nan.copy()})[1] == []
    assert certify.compare_arrays({"a": nan}, {"a": nan.astype(np.float64)})[1]
    assert certify.compare_arrays({"a": np.zeros(2)}, {"a": -np.zeros(2)})[1]


def test_moved_entry_found_by_its_earlier_name_and_old_hashing(tmp_path, capsys):
    """A result recorded before its module moved (`lib.book.rekey` logs the move) and before fingerprints dropped
    `__main__` blocks (recorded under the older hashing): step 1 finds the code under its earlier name and hashing."""
    from lib.book import rekey
    repo, _ = _repo(tmp_path)
    p = repo / "lib" / "tiny.py"
    p.write_text(MODULE + '\n\nif __name__ == "__main__":\n    print(run("ci", {"n": 3, "mode": "a"}))\n')
    path = repo / "results" / "full" / "tiny.json"
    old_fp = provenance.Index(repo, skip_main=False, module_init=False).fingerprint(ENTRY)   # the hashing then
    assert old_fp != provenance.Index(repo).fingerprint(ENTRY)
    rekey.rewrite_meta(path, lambda m: m["provenance"]["code"].update({ENTRY: old_fp}))
    _git(repo, "commit", "-qam", "C: the result's fingerprint under the older hashing")
    c = _git(repo, "rev-parse", "HEAD")
    # the move: lib.tiny -> lib.moved, re-keyed as lib.book.rekey does (recorded fingerprint kept)
    _git(repo, "mv", "lib/tiny.py", "lib/moved.py")
    reg = repo / "lib" / "experiments" / "registry.toml"
    reg.write_text(REGISTRY.replace('base = "lib.tiny"', 'base = "lib.moved"'))
    rekey.rewrite(dict(file=str(path), **{"from": ENTRY, "to": "lib.moved:run"}, new="x", recorded=old_fp), c)
    _git(repo, "commit", "-qam", "move")
    assert certify.earlier_names(json.loads(path.read_text())["meta"], "lib.moved:run") == ["lib.moved:run", ENTRY]

    (repo / "lib" / "moved.py").write_text((repo / "lib" / "moved.py").read_text().replace("x + 1.0", "x + 3.0"))
    _git(repo, "commit", "-qam", "edit the untaken branch")
    assert certify.main(["tiny", "--old-commit", c, "--write"], repo=repo) == 0
    out = capsys.readouterr().out
    assert f"(as {ENTRY}, with __main__ blocks hashing)" in out and "bit-identical" in out
    meta = json.loads(path.read_text())["meta"]
    assert meta["provenance"]["code"] == {"lib.moved:run": provenance.Index(repo).fingerprint("lib.moved:run")}
    log = meta["provenance_rekeys"][-1]
    assert log["old_entry"] == ENTRY and log["old_hashing"] == "with __main__ blocks"
    assert log["from_fingerprint"] == old_fp

    # the taken branch edited in the same way: the two runs differ, whatever name and hashing step 1 used
    rekey.rewrite_meta(path, lambda m: m["provenance"]["code"].update({"lib.moved:run": old_fp}))
    moved = repo / "lib" / "moved.py"
    stamp = moved.stat().st_mtime_ns
    moved.write_text(moved.read_text().replace("x * 2.0", "x * 2.5"))
    # An edit of the same size within the same second leaves the bytecode cache of the run above looking valid
    # (Python checks a source's size and whole-second mtime): force that case, the new run must not reuse it.
    os.utime(moved, ns=(stamp, stamp))
    rep = certify.certify("tiny", c, repo=repo)
    assert not rep["ok"] and rep["entries"]["lib.moved:run"]["old_entry"] == ENTRY and rep["diffs"]


def test_old_tree_without_the_entry_is_refused_in_step_1(tmp_path):
    repo, c = _repo(tmp_path)
    _git(repo, "rm", "-q", "lib/tiny.py")
    _git(repo, "commit", "-qm", "gone")
    gone = _git(repo, "rev-parse", "HEAD")
    (repo / "lib" / "tiny.py").write_text(MODULE.replace("x + 1.0", "x + 3.0"))
    _git(repo, "add", "lib/tiny.py")
    _git(repo, "commit", "-qm", "back, edited")
    rep = certify.certify("tiny", gone, repo=repo)
    f = rep["entries"][ENTRY]
    assert not rep["ok"] and "does not give the recorded fingerprint" in rep["why"][0] and not rep["counts"]
    assert f["old"].startswith("missing: ") and "no module 'lib.tiny'" in f["old"] and f["old_entry"] is None
