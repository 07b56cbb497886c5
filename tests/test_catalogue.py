"""lib/book/catalogue.py: every registry entry and every committed result, each read by its own name."""
import json
import shutil

from lib.book import catalogue, registry, results


def test_every_entry_and_every_committed_result_is_listed_with_its_own_provenance():
    rows = catalogue.rows("full")
    names = [r["name"] for r in rows]
    assert names[:len(registry.entries())] == list(registry.entries())
    committed = {p.stem for p in (results.RESULTS_DIR / "full").glob("*.json")}
    assert committed <= set(names)
    for r in rows:
        if r["committed"]:
            res = results.load(r["name"], "full")
            assert r["commit"] == res.meta["git_commit"] and r["label"] == res.label
            assert r["stale"] == res.stale and r["wall_s"] == res.meta.get("wall_s")
        assert r["command"], f"{r['name']} has no command"
        if r["in_registry"]:
            assert r["command"] == f"python -m lib.experiments {r['name']} --scale full --out results"


def test_results_outside_the_registry_get_their_script(tmp_path):
    (tmp_path / "full").mkdir()
    blob = {"meta": {"name": "my_bench", "scale": "full", "device": "gpu", "git_commit": "f" * 40,
                     "argv": ["benchmarks/bench_attention.py", "--out", "/root/out", "--quick"], "wall_s": 120.0,
                     "depends_on": {}}, "data": {}}
    (tmp_path / "full" / "my_bench.json").write_text(json.dumps(blob))
    shutil.copy(results.RESULTS_DIR / "full" / "rounding_exhaustive.json", tmp_path / "full")
    rows = {r["name"]: r for r in catalogue.rows("full", root=tmp_path)}
    assert rows["my_bench"]["command"] == "python benchmarks/bench_attention.py --quick --out results"
    assert not rows["my_bench"]["in_registry"] and rows["my_bench"]["gpu_min"] == 2.0
    assert rows["rounding_exhaustive"]["committed"] and not rows["headline"]["committed"]
    md = catalogue.markdown_table(list(rows.values()))
    assert md.count("\n") == len(rows) + 1 and "| not produced |" in md and "ffffffff" in md
    det = catalogue.markdown_details(list(rows.values()))
    assert det.count("\n* ") == len(rows) - 1 and "(not a registry entry)" in det and "not produced yet" in det
    assert "`python benchmarks/bench_attention.py --quick --out results`" in det
