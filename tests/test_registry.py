"""lib/book/registry.py, lib/experiments (run_and_save, run_live) and the command line `python -m lib.experiments`."""
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from lib.book import registry, results

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lib.experiments", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT),
                               "HOME": "/tmp"}, timeout=300)


def test_every_entry_resolves_and_its_base_runs_on_cfg():
    es = registry.entries()
    assert es, "empty registry"
    for e in es.values():
        mod = importlib.import_module(e.module)
        params = list(inspect.signature(mod.run).parameters)
        assert params[:2] == ["scale", "cfg"], (e.name, params)
        assert (mod.__doc__ or "").strip(), f"{e.module} has no docstring"
        assert "full" in e.configs, f"{e.name} has no full configuration"
        for s in e.configs:
            assert isinstance(registry.resolve(e.name, s), dict)
    gpu_only = [e for e in es.values() if "ci" not in e.configs]
    for e in gpu_only:
        with pytest.raises(registry.RegistryError, match="needs a GPU"):
            registry.resolve(e.name, "ci")
        assert e.summary and e.device in ("cpu", "gpu") and e.gpu_min >= 0


def test_extends_merges_key_by_key_and_overrides_win(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[a]\nbase = "headline"\nsummary = "s"\n[a.full]\nx = 1\ny = [1, 2]\n[a.ci]\nx = 0\n'
                 '[b]\nextends = "a"\nsummary = "t"\n[b.full]\ny = [3]\n')
    assert registry.resolve("b", "full", path=f) == {"x": 1, "y": [3]}
    assert registry.resolve("b", "ci", path=f) == {"x": 0}
    assert registry.resolve("b", "full", {"x": 5}, path=f) == {"x": 5, "y": [3]}
    assert registry.get("b", path=f).base == "headline"


@pytest.mark.parametrize("text,msg", [
    ('[a]\nbase = "x"\nsummary = "s"\nbogus = 1\n', "unknown keys"),
    ('[a]\nsummary = "s"\n', "needs 'base'"),
    ('[a]\nextends = "b"\nsummary = "s"\n[b]\nextends = "a"\nsummary = "t"\n', "cycle"),
    ('[a]\nbase = "x"\nsummary = "s"\nneeds = ["nope"]\n', "unknown result"),
    ('[a]\nbase = "x"\nsummary = "s"\ndevice = "tpu"\n', "device"),
])
def test_malformed_registry_is_refused(tmp_path, text, msg):
    f = tmp_path / "r.toml"
    f.write_text(text)
    with pytest.raises(registry.RegistryError, match=msg):
        registry.entries(f)


def test_unknown_name_and_scale_are_refused():
    with pytest.raises(registry.RegistryError, match="unknown experiment"):
        registry.get("no_such_result")
    with pytest.raises(registry.RegistryError, match="unknown scale"):
        registry.resolve("headline", "CI")


def test_committed_training_results_are_what_their_entries_run():
    """The registry's configuration of every committed training result plans exactly the runs it recorded (arm,
    attention spec, seed, LR, tag, β and guard) with the recorded training configuration: the variants became data
    without changing what they run."""
    from lib.experiments import migrate
    checked = 0
    for name, e in registry.entries().items():
        if not results.exists(name, "full") or name in migrate.SKIP:
            continue
        res = results.load(name, "full")
        # produced with provenance from the start: checked where it re-ran a migrated result (the same planning)
        if "provenance_migration" not in res.meta and name not in RERUN_MIGRATED:
            continue
        assert migrate.config_check(name, res) == [], name
        checked += 1
    assert checked >= 8          # the migrated training results and their re-runs (seven were retired since)


# Proxy training results first committed through the migration, since re-run with provenance from the start.
RERUN_MIGRATED = ("lr_sweep", "headline", "headline_fix_sm32", "beta_sweep", "beta_sweep_seeds")


def test_cli_help_describes_every_experiment():
    r = _cli("--help")
    assert r.returncode == 0, r.stderr
    for e in registry.entries().values():
        assert e.name in r.stdout and f"GPU {e.gpu_min:g} min" in r.stdout
        assert e.summary.split()[0] in r.stdout


@pytest.mark.parametrize("args,msg", [(("nonsense",), "unknown experiment"),
                                      (("headline", "--scale", "CI"), "unknown scale"),
                                      (("headline", "--scale", "full"), "needs a CUDA GPU"),
                                      (("headline", "--set", "steps"), "key=value")])
def test_cli_user_errors_are_one_line_and_exit_2(args, msg, capsys, monkeypatch):
    """The command line's `main` in this process, in the environment `_cli` gives it (`python -m lib.experiments` is
    `sys.exit(main())`: the help and ci-run tests run that wiring as a subprocess); an exception here fails the test
    as a traceback would, without starting a Python that imports torch per case."""
    from lib.book import cli
    monkeypatch.delenv("BOOK_SCALE", raising=False)
    assert cli.main(list(args)) == 2
    out = capsys.readouterr()
    assert msg in out.err and "Traceback" not in out.err and len(out.err.strip().splitlines()) == 1, out


def test_cli_runs_a_ci_experiment_with_provenance(tmp_path):
    r = _cli("rounding_exhaustive", "--scale", "ci", "--out", str(tmp_path), "--set", "random_patterns=4096")
    assert r.returncode == 0, r.stderr
    res = results.load("rounding_exhaustive", "ci", root=tmp_path)
    assert res.data["n"] == 4096 and res.data["all_equal"] and res.data["patterns"] == "2**12 random (seed 0)"
    prov = res.meta["provenance"]
    assert prov["cfg"]["random_patterns"] == 4096 and "lib.studies.kernel.rounding_exhaustive:run" in prov["code"]
    # run with an override: the result records it, and reads as differing from the registry
    assert any("configuration differs from the registry: random_patterns" in s for s in res.stale)


def test_a_call_bound_is_not_a_configuration_difference(tmp_path):
    """A run spanning several calls records the time bound its last call set (the loop certificate's `max_s`): that
    is not a difference from the registry; any other key still is."""
    name = "loop_certificate_gpt2"
    cfg = registry.resolve(name, "full")
    assert "max_s" in cfg and registry.CALL_BOUNDS == {"max_s"}
    for key, value, stale in (("max_s", cfg["max_s"] - 170, False), ("steps", cfg["steps"] + 1, True)):
        results.save(name, "full", {"x": 1}, provenance={"registry": name, "cfg": dict(cfg, **{key: value})},
                     root=tmp_path)
        reasons = results.load(name, "full", root=tmp_path).stale
        assert any("configuration differs" in r for r in reasons) is stale, (key, reasons)
        if stale:
            assert any(r.endswith(f"registry: {key}") for r in reasons), reasons


def test_groups_name_registry_entries_and_load_in_order(tmp_path):
    """Every result group (`registry.GROUPS`) names registry entries; `results.load_group` loads the existing ones
    in group order."""
    es = registry.entries()
    for g, names in registry.GROUPS.items():
        assert names and all(n in es for n in names), g
    names = registry.GROUPS["healthy_headline"]
    results.save(names[1], "full", {"x": 1}, provenance={"registry": names[1]}, root=tmp_path)
    assert [r.name for r in results.load_group("healthy_headline", root=tmp_path)] == [names[1]]
    results.save(names[0], "full", {"x": 0}, provenance={"registry": names[0]}, root=tmp_path)
    assert [r.name for r in results.load_group("healthy_headline", root=tmp_path)] == list(names)


def test_every_base_is_a_full_module_path():
    """`base` names the experiment module by its full dotted path (a study's module, a benchmark script): the module
    exists where the registry says."""
    for e in registry.entries().values():
        assert e.module == e.base and "." in e.base, e.name
        assert (registry.ROOT / (e.base.replace(".", "/") + ".py")).exists(), e.name
