"""lib/training/loop_certificate.py: the training runs the committed results made, rebuilt from their records, deduplicated,
shortened, and compared bit for bit between two trees (here HEAD against the working tree, shrunk to tiny models)."""
import json
from pathlib import Path

import numpy as np
import pytest

from lib.training import loop_certificate as lc


@pytest.fixture(scope="module")
def this_tree_trained_once():
    """`lc.run_in` that trains each combination in this tree (the new side of every comparison) once per module and
    hands the later tests a copy of its arrays; the old trees (from git, from `prepare`'s archives, in `in_parallel`'s
    threads) are still trained for real each time. The three tests that train for real compare the same combinations
    of this tree: training them once instead of three times saves six children of ≈ 7 s each."""
    real, made = lc.run_in, {}

    def run_in(tree, run, cfg, out, mode="strict"):
        if Path(tree).resolve() != lc.ROOT.resolve():
            return real(tree, run, cfg, out, mode)
        key = (run["kind"], json.dumps(cfg, sort_keys=True), mode)
        if key not in made:
            made[key] = real(tree, run, cfg, out, mode)
        return {k: v.copy() if isinstance(v, np.ndarray) else list(v) for k, v in made[key].items()}
    return run_in


def test_plan_rebuilds_one_run_per_combination_from_the_records():
    p = lc.plan()
    kinds = {r["kind"] for r in p["runs"]}
    assert kinds == {"proxy", "lm"} and len(p["runs"]) == len({lc._key(r) for r in p["runs"]})
    assert all(r["commit"] for r in p["runs"])                        # each run's old tree: its result's commit
    assert {"train_step_gpt2", "capture_overhead_bench"} <= set(p["not_covered"])   # timings record no run
    lm = next(r for r in p["runs"] if r["kind"] == "lm")
    assert "model" in lm["cfg"] and lm["cfg"]["data"] == "tokens"
    proxy = next(r for r in p["runs"] if r["kind"] == "proxy")
    assert {"n_layer", "attn", "seed", "lr"} <= set(proxy["cfg"])
    # seeds and LR do not make a new combination; the spec does
    same = dict(proxy, cfg=dict(proxy["cfg"], seed=proxy["cfg"]["seed"] + 1, lr=1.0))
    assert lc._key(same) == lc._key(proxy) and lc._key(dict(proxy, cfg=dict(proxy["cfg"], attn="x"))) != lc._key(proxy)


def test_shortened_runs_take_every_schedule_within_their_steps():
    run = dict(kind="lm", cfg=dict(model=dict(n_layer=12), steps=10000, census_every=200, probe_every=200,
                                   eval_every=1000, warmup=500, max_wall_s=1320.0, ckpt_path="/tmp/x.pt",
                                   ckpt_every_s=120, census_rows=16, max_tokens=0))
    cfg = lc.shortened(run, 100)
    assert (cfg["steps"], cfg["census_every"], cfg["probe_every"], cfg["eval_every"], cfg["warmup"]) == (100, 50, 50,
                                                                                                         50, 50)
    assert (cfg["max_wall_s"], cfg["ckpt_path"], cfg["ckpt_every_s"], cfg["census_rows"]) == (0.0, "", 0.0, 2)
    assert lc.shortened(run, 100, shrink=True)["model"]["n_layer"] == 2


def test_run_compares_two_trees_resumes_and_reports_differences(tmp_path, monkeypatch, this_tree_trained_once):
    monkeypatch.setattr(lc, "run_in", this_tree_trained_once)
    name = next(r["result"] for r in lc.plan()["runs"] if r["kind"] == "proxy")
    rec = lc.certify_runs("HEAD", tmp_path, steps=2, names=[name], shrink=True)
    assert rec["shrunk"] and all(r["done"] and r["bit_identical"] for r in rec["runs"]), rec["runs"]
    assert "certifies nothing" in lc.summary(rec)
    saved = json.loads((tmp_path / lc.RECORD).read_text())
    assert saved["runs"] == rec["runs"] and saved["old_commit"] == "HEAD"
    calls = []
    monkeypatch.setattr(lc, "run_in", lambda *a: calls.append(a) or {})
    assert lc.certify_runs("HEAD", tmp_path, steps=2, names=[name], shrink=True)["runs"] == rec["runs"] and not calls  # resumed
    outs = iter([{"loss": np.zeros(2, np.float32)}, {"loss": np.ones(2, np.float32)}] * 50)
    monkeypatch.setattr(lc, "run_in", lambda *a: next(outs))
    diff = lc.certify_runs("HEAD", tmp_path / "again", steps=2, names=[name], shrink=True)
    assert not diff["runs"][0]["bit_identical"] and "differ" in diff["runs"][0]["diffs"][0]
    # shards: every combination in exactly one of them, each with its own record
    monkeypatch.setattr(lc, "run_in", lambda *a: {"loss": np.zeros(1, np.float32)})
    parts = [lc.certify_runs("HEAD", tmp_path / "sh", steps=2, names=["gpt2_arms"], shrink=True, shard=(k, 3)) for k in range(3)]
    labels = [r["label"] for p in parts for r in p["runs"]]
    assert sorted(labels) == sorted(r["label"] for r in lc.plan(["gpt2_arms"])["runs"])
    assert all((tmp_path / "sh" / f"loop_certificate.{k}.json").exists() for k in range(3))


def test_prepared_trees_stand_in_for_git(tmp_path, monkeypatch, this_tree_trained_once):
    """`prepare` writes the old tree as an archive (data/ left out where it equals this tree's) and this tree's
    commit; `run --trees` reads them instead of git and certifies as it did with git (the old tree, unpacked from
    the archive, trained for real); a commit git lacks is listed."""
    import subprocess
    monkeypatch.setattr(lc, "run_in", this_tree_trained_once)
    name = next(r["result"] for r in lc.plan()["runs"] if r["kind"] == "proxy")
    got = lc.prepare(tmp_path / "trees", [name], "HEAD")
    assert set(got["trees"]) == {"HEAD"} and got["missing"] == []
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=lc.ROOT, capture_output=True, text=True).stdout.strip()
    assert (tmp_path / "trees" / "HEAD").read_text().strip() == head
    import tarfile
    with tarfile.open(tmp_path / "trees" / "HEAD.tar.gz") as t:
        names = t.getnames()
    assert any(n.startswith("lib/training/") for n in names) and not any(n.startswith("data/") for n in names)
    rec = lc.certify_runs("HEAD", tmp_path / "out", steps=2, names=[name], shrink=True, trees=tmp_path / "trees")
    assert rec["new_commit"] == head and all(r["bit_identical"] for r in rec["runs"]), rec["runs"]
    assert lc.prepare(tmp_path / "t2", [name], "0" * 40)["missing"] == ["0" * 40]
    bad = lc.certify_runs("0" * 40, tmp_path / "out2", steps=2, names=[name], shrink=True, trees=tmp_path / "t2")
    assert all(lc._verdict(r) == "ERROR" and "prepare it" in r["error"] for r in bad["runs"])


def test_a_commit_git_lacks_is_stood_in_for_by_a_commit_with_the_recorded_fingerprint(tmp_path, monkeypatch):
    """A result whose commit git no longer has, and which records a re-keying that found its recorded fingerprint at
    a commit git has, gets that commit as its old tree (in `prepare`, and in `run` from the archives); the
    combination names the commit it stands in for. Without such a re-keying (or when it did not find the recorded
    fingerprint) the commit stays missing."""
    import subprocess
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=lc.ROOT, capture_output=True, text=True).stdout.strip()
    gone = "e" * 40
    rekey = {"from": "a:run", "to": "b:run", "old_commit": head, "fingerprint": "f", "recorded_equal": True}
    one = {"provenance": {"code": {"b:run": "f"}}}
    got = lambda log, meta=one: lc._stand_in({"meta": dict(meta, provenance_rekeys=log)})     # noqa: E731
    assert got([dict(rekey, recorded_equal=False, old_commit=gone), rekey]) == {"stand_ins": [head]}
    assert got([dict(rekey, old_commit=gone), rekey]) == {"stand_ins": [gone, head]}           # in the log's order
    assert got([dict(rekey, recorded_equal=False)]) == {} and lc._stand_in({"meta": one}) == {}
    # after an entry that replaced the recorded fingerprint, equality shows only equivalence to the replacement
    replaced = {"kind": "certificate", "from_fingerprint": "f", "to_fingerprint": "g", "commit": head}
    assert got([replaced, rekey]) == {} and got([rekey, replaced, dict(rekey, old_commit=gone)]) == {
        "stand_ins": [head]}
    assert got([rekey], {"provenance": {"code": {"b:run": "f", "c:run": "h"}}}) == {}  # one re-keying, one entry
    run = next(r for r in lc.plan()["runs"] if r["kind"] == "proxy")
    lost = dict(run, commit=gone, stand_ins=[gone[:-1] + "d", head], also=[])
    assert lc.old_tree_of(lost, None, None, lc.ROOT) == head     # git lacks the commit and the first stand-in
    assert lc.old_tree_of(dict(lost, stand_ins=None), None, None, lc.ROOT) == gone
    assert lc.old_tree_of(dict(run, stand_ins=[head]), None, None, lc.ROOT) == run["commit"]   # own commit first
    assert lc.old_tree_of(lost, "HEAD", None, lc.ROOT) == "HEAD"            # one tree for all wins
    monkeypatch.setattr(lc, "plan", lambda names=None, root=lc.ROOT: {"runs": [lost], "not_covered": []})
    got = lc.prepare(tmp_path / "trees", repo=lc.ROOT)
    assert set(got["trees"]) == {head} and got["missing"] == []
    assert lc.old_tree_of(lost, None, tmp_path / "trees", lc.ROOT) == head   # from the archives, as on the GPU
    monkeypatch.setattr(lc, "run_in", lambda *a: {"loss": np.zeros(2, np.float32)})
    rec = lc.certify_runs(None, tmp_path / "out", steps=2, shrink=True, trees=tmp_path / "trees")
    (r,) = rec["runs"]
    assert r["bit_identical"] and r["old"] == head and r["stand_in_for"] == gone, r
    assert "1 against a stand-in" in lc.summary(rec)
    # carried into a later record, the combination still says what it stands in for
    carry = tmp_path / "out" / lc.RECORD
    again = lc.certify_runs(None, tmp_path / "out2", steps=2, shrink=True, trees=tmp_path / "trees", carry=carry)
    (r2,) = again["runs"]
    assert r2.get("carried_from") and r2["old"] == head and r2["stand_in_for"] == gone, r2
    monkeypatch.setattr(lc, "plan", lambda names=None, root=lc.ROOT: {"runs": [dict(lost, stand_ins=None)],
                                                                      "not_covered": []})
    assert lc.prepare(tmp_path / "t2", repo=lc.ROOT)["missing"] == [gone]


def test_a_difference_is_told_from_run_to_run_variation(tmp_path, monkeypatch):
    """Old and new differ: a second run of the new tree that repeats it makes the combination DIFFERS (a real
    difference); one that differs from it too makes it VARIES, with both loss differences recorded."""
    name = next(r["result"] for r in lc.plan()["runs"] if r["kind"] == "proxy")
    z, o, h = (np.full(2, v, np.float32) for v in (0.0, 1.0, 0.5))
    by_file = {"old.npz": z, "new.npz": o, "again.npz": o}      # what each of the three runs gives
    monkeypatch.setattr(lc, "run_in", lambda tree, run, cfg, out, mode="strict": {"loss": by_file[out.name]})
    rec = lc.certify_runs("HEAD", tmp_path / "a", steps=2, names=[name], shrink=True)
    r = rec["runs"][0]
    assert lc._verdict(r) == "DIFFERS" and r["reproducible"] and (r["loss_diff"], r["self_loss_diff"]) == (1.0, 0.0)
    by_file["again.npz"] = h
    r = lc.certify_runs("HEAD", tmp_path / "b", steps=2, names=[name], shrink=True)["runs"][0]
    assert lc._verdict(r) == "VARIES" and r["self_loss_diff"] == 0.5
    assert "1 vary from run to run" in lc.summary(dict(rec, runs=[r]))


def test_the_registered_certificate_records_counts_and_resumes(tmp_path, monkeypatch):
    """`run(scale, cfg)` (the registry's entry point): the record so far as the result's data with its counts; a second
    call resumes from the workdir; without the prepared trees folder it reads git."""
    from lib.book import registry
    cfg = dict(registry.resolve("loop_certificate_gpt2", "full"), workdir=str(tmp_path / "w"),
               trees="no-such-folder", names=["gpt2_arms", "authors_code"], steps=2)
    calls = []
    monkeypatch.setattr(lc, "_unpack", lambda commit, dest, trees, repo: calls.append(trees) or dest)
    monkeypatch.setattr(lc, "_corpus", lambda cfg, shrink: None)
    monkeypatch.setattr(lc, "run_in", lambda tree, run, c, out, mode="strict": {"loss": np.zeros(2, np.float32)})
    got = lc.run("full", cfg)["data"]
    n = len(lc.plan(["gpt2_arms"])["runs"])                         # its GPT-2 runs only, not the proxy's
    assert {r["kind"] for r in got["runs"]} == {"lm"} and got["kinds"] == ["lm"]
    assert got["counts"]["bit-identical"] == n and got["n_left"] == 0 and f"{n} of {n}" in got["summary"]
    assert calls and all(t is None for t in calls)                 # no prepared folder: git
    monkeypatch.setattr(lc, "run_in", lambda *a: (_ for _ in ()).throw(AssertionError("ran again")))
    assert lc.run("full", cfg)["data"]["counts"] == got["counts"]  # resumed, nothing trained twice
    proxy = dict(registry.resolve("loop_certificate_proxy", "full"), workdir=str(tmp_path / "p"),
                 trees="no-such-folder", names=["gpt2_arms", "authors_code"], steps=2)
    monkeypatch.setattr(lc, "run_in", lambda tree, run, c, out, mode="strict": {"loss": np.zeros(2, np.float32)})
    assert {r["kind"] for r in lc.run("full", proxy)["data"]["runs"]} == {"proxy"}


def test_strict_determinism_first_and_warn_where_an_op_has_none(tmp_path, monkeypatch):
    """Both trees run with every op deterministic; where strict raises (an op without a deterministic form), both run
    again with warnings only, and the record names the mode, the strict error and the warnings (kept out of the
    comparison); a third run of this tree uses the mode the pair used."""
    name = next(r["result"] for r in lc.plan()["runs"] if r["kind"] == "proxy")
    modes = []

    def fake(tree, run, cfg, out, mode="strict"):
        modes.append((out.name, mode))
        if mode == "strict":
            raise RuntimeError("index_add_cuda_ does not have a deterministic implementation")
        return {"loss": np.zeros(2, np.float32), lc.WARNINGS: [f"{out.name}: index_add_cuda_ nondeterministic"]}
    monkeypatch.setattr(lc, "run_in", fake)
    rec = lc.certify_runs("HEAD", tmp_path / "a", steps=2, names=[name], shrink=True)
    r = rec["runs"][0]
    assert modes == [("old.npz", "strict"), ("old.npz", "warn"), ("new.npz", "warn")] * len(rec["runs"])
    assert r["determinism"] == "warn" and "deterministic implementation" in r["strict_error"]
    assert r["determinism_warnings"] == [f"{f}: index_add_cuda_ nondeterministic" for f in ("new.npz", "old.npz")]
    assert lc._verdict(r) == "bit-identical" and "0 of 1 with every op deterministic" in lc.summary(
        {"runs": [r], "steps": 2, "device": "cpu", "shrunk": True, "not_covered": []})
    # strict that runs: no fallback; a difference re-runs this tree in strict
    modes.clear()
    outs = {"old.npz": np.zeros(2, np.float32), "new.npz": np.ones(2, np.float32), "again.npz": np.ones(2, np.float32)}
    monkeypatch.setattr(lc, "run_in",
                        lambda tree, run, cfg, out, mode="strict": modes.append(mode) or {"loss": outs[out.name]})
    rec = lc.certify_runs("HEAD", tmp_path / "b", steps=2, names=[name], shrink=True)
    r = rec["runs"][0]
    assert modes == ["strict"] * 3 * len(rec["runs"]) and r["determinism"] == "strict" and lc._verdict(r) == "DIFFERS"
    monkeypatch.undo()
    with pytest.raises(ValueError):
        lc.run_in(lc.ROOT, {"kind": "proxy"}, {}, tmp_path / "x.npz", "sometimes")


def test_a_combination_of_the_same_code_carries_over_from_an_earlier_record(tmp_path, monkeypatch):
    """A record from another hold whose new tree ran the same code (`tree_fingerprint`), on the same GPU model and
    versions, lends its bit-identical combinations without training them again; a different fingerprint, versions or
    verdict does not."""
    name = next(r["result"] for r in lc.plan()["runs"] if r["kind"] == "proxy")
    monkeypatch.setattr(lc, "run_in", lambda tree, run, cfg, out, mode="strict": {"loss": np.zeros(2, np.float32)})
    first = lc.certify_runs("HEAD", tmp_path / "a", steps=2, names=[name], shrink=True)
    fp = lc.tree_fingerprint("proxy")
    assert all(r["new_fingerprint"] == fp and "carried_from" not in r for r in first["runs"])
    assert first["versions"]["torch"] and len(fp) == 64
    prior = tmp_path / "a" / lc.RECORD
    monkeypatch.setattr(lc, "run_in", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained again")))
    again = lc.certify_runs("HEAD", tmp_path / "b", steps=2, names=[name], shrink=True, carry=prior)
    assert all(r["done"] and r["bit_identical"] and r["carried_from"]["new_commit"] == first["new_commit"]
               for r in again["runs"])
    assert f"{len(again['runs'])} carried from an earlier run of the same code" in lc.summary(again)
    # what must match: the code, the machine's versions, a bit-identical verdict, the steps
    run = again["runs"][0]
    rec = json.loads(prior.read_text())
    c = rec["runs"][0]
    args = (run, rec, fp, rec["versions"], 2, "HEAD", True)
    assert lc.carried(*args) is not None
    assert lc.carried(run, rec, "0" * 64, *args[3:]) is None
    assert lc.carried(run, rec, fp, dict(rec["versions"], torch="0.0"), 2, "HEAD", True) is None
    assert lc.carried(run, rec, fp, rec["versions"], 3, "HEAD", True) is None
    assert lc.carried(run, rec, fp, rec["versions"], 2, "HEAD", False) is None      # a shrunk record certifies nothing
    assert lc.carried(run, dict(rec, runs=[dict(c, bit_identical=False)]), *args[2:]) is None
    assert lc.carried(run, dict(rec, runs=[dict(c, old="0" * 40)]), *args[2:]) is None
    # a fingerprint that differs trains again
    calls = []
    monkeypatch.setattr(lc, "tree_fingerprint", lambda kind, tree=lc.ROOT: "f" * 64)
    monkeypatch.setattr(lc, "run_in", lambda tree, run, cfg, out, mode="strict": calls.append(out.name) or
                        {"loss": np.zeros(2, np.float32)})
    fresh = lc.certify_runs("HEAD", tmp_path / "c", steps=2, names=[name], shrink=True, carry=prior)
    assert calls and not any(r.get("carried_from") for r in fresh["runs"])


def test_the_fingerprint_follows_the_code_the_child_reaches(tmp_path):
    """`tree_fingerprint` changes with a definition the child reaches (the kernel included) and not with code it
    never reaches."""
    from tests.reached import copy_reached
    # The copy holds what a child reaches, lib/book/setup.py and the unreached file changed below, not all of lib/,
    # kernels/ and benchmarks/: every edit re-parses the copy, and parsing the whole tree five times took 15 of this
    # test's 19 s. That the copy fingerprints as the whole tree does is asserted first.
    copy_reached(tmp_path, [e for es in lc.CHILD_ENTRIES.values() for e in es],
                 also=("lib/book/setup.py", "lib/studies/gpt2/remedies.py"))
    base = {k: lc.tree_fingerprint(k, tmp_path) for k in ("lm", "proxy")}
    assert base == {k: lc.tree_fingerprint(k) for k in ("lm", "proxy")}
    reading = tmp_path / "lib" / "studies" / "gpt2" / "remedies.py"      # reading code: no run reaches it
    reading.write_text(reading.read_text().replace("def _change(", "def _unused():\n    return 1\n\n\ndef _change(", 1))
    assert "_unused" in reading.read_text()
    assert {k: lc.tree_fingerprint(k, tmp_path) for k in base} == base
    # a default of the config class the child builds from the record fills the fields an older record lacks
    loop = tmp_path / "lib" / "training" / "loop.py"
    src = loop.read_text()
    assert src.count("    n_bos: int = 0 ") == 1
    loop.write_text(src.replace("    n_bos: int = 0 ", "    n_bos: int = 1 "))
    assert lc.tree_fingerprint("lm", tmp_path) != base["lm"]
    loop.write_text(src)
    train = tmp_path / "lib" / "training" / "train.py"
    src = train.read_text()
    assert src.count("    val_fraction: float = 0.05") == 1
    train.write_text(src.replace("    val_fraction: float = 0.05", "    val_fraction: float = 0.1"))
    assert lc.tree_fingerprint("proxy", tmp_path) != base["proxy"] and lc.tree_fingerprint("lm", tmp_path) == base["lm"]
    train.write_text(src)
    kern = tmp_path / "kernels" / "attention.py"          # a setting of the kernel that every training run reaches
    src = kern.read_text()
    assert '\nWIDE_PRODUCT = "ieee"\n' in src
    kern.write_text(src.replace('\nWIDE_PRODUCT = "ieee"\n', '\nWIDE_PRODUCT = "bf16_split"\n'))
    assert all(lc.tree_fingerprint(k, tmp_path) != base[k] for k in base)


def test_several_combinations_at_once_merge_into_the_plan_order(tmp_path, monkeypatch):
    """`in_parallel`: J shards at once, each combination in exactly one, merged back in plan order; on a machine of
    several GPUs each shard's children see one GPU; the registered proxy half runs that way and resumes."""
    from lib.book import registry
    seen = []
    monkeypatch.setattr(lc, "_corpus", lambda cfg, shrink: None)

    def fake(tree, run, c, out, mode="strict"):
        seen.append((run["label"], lc._SHARD.gpu))
        return {"loss": np.zeros(2, np.float32)}
    monkeypatch.setattr(lc, "run_in", fake)
    want = [r["label"] for r in lc.plan(["gpt2_arms"])["runs"]]
    rec = lc.in_parallel(3, "HEAD", tmp_path / "a", steps=2, names=["gpt2_arms"], shrink=True, gpus=2)
    assert [r["label"] for r in rec["runs"]] == want and rec["jobs"] == 3 and rec["shard"] == [0, 1]
    assert all(r["done"] and r["bit_identical"] for r in rec["runs"]) and lc.counts(rec)["bit-identical"] == len(want)
    # shard k's children ran on GPU k mod 2: the plan's i-th combination on GPU (i mod 3) mod 2
    gpu_of = dict((label, g) for label, g in seen)
    assert [gpu_of[label] for label in want] == [(i % 3) % 2 for i in range(len(want))]
    seen.clear()
    lc.in_parallel(2, "HEAD", tmp_path / "b", steps=2, names=["gpt2_arms"], shrink=True, gpus=1)
    assert {g for _, g in seen} == {None}                          # one GPU: every shard shares it
    try:
        lc.merge_shards([rec, rec])
    except ValueError as e:
        assert "shards 0 … 1 of 2" in str(e)
    else:
        raise AssertionError("merged two copies of one record")
    cfg = dict(registry.resolve("loop_certificate_proxy", "full"), workdir=str(tmp_path / "p"), trees="no-such-folder",
               names=["authors_code"], steps=2)
    assert cfg["jobs"] > 1
    monkeypatch.setattr(lc, "_unpack", lambda commit, dest, trees, repo: dest)
    got = lc.run("full", cfg)["data"]
    assert got["jobs"] == cfg["jobs"] and [r["label"] for r in got["runs"]] == [
        r["label"] for r in lc.plan(["authors_code"])["runs"] if r["kind"] == "proxy"]
    assert all((tmp_path / "p" / f"loop_certificate.{k}.json").exists() for k in range(cfg["jobs"]))
    monkeypatch.setattr(lc, "run_in", lambda *a: (_ for _ in ()).throw(AssertionError("ran again")))
    assert lc.run("full", cfg)["data"]["counts"] == got["counts"]  # each shard resumed its record


def test_several_at_once_train_for_real(tmp_path, monkeypatch, this_tree_trained_once):
    """`in_parallel` with the real children (tiny models, HEAD against this tree): every combination's old tree
    trained in its shard's thread (this tree's runs, the same as the tests above, made once for the module), each
    in its own temporary trees, bit-identical, merged in plan order."""
    monkeypatch.setattr(lc, "run_in", this_tree_trained_once)
    name = next(r["result"] for r in lc.plan()["runs"] if r["kind"] == "proxy")
    rec = lc.in_parallel(2, "HEAD", tmp_path, steps=2, names=[name], shrink=True)
    assert [r["label"] for r in rec["runs"]] == [r["label"] for r in lc.plan([name])["runs"]]
    assert all(r["done"] and r["bit_identical"] and not r.get("error") for r in rec["runs"]), rec["runs"]
    assert "certifies nothing" in lc.summary(rec)
