"""tests/gpu/run_sharded.py on the CPU: how it deals tests to shards and GPUs, and that the whole plumbing runs."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.gpu import run_sharded as rs

ROOT = Path(__file__).resolve().parent.parent


def _ids(files: dict) -> list[str]:
    return [f"tests/gpu/{name}::test_{i}" for name, n in files.items() for i in range(n)]


@pytest.fixture(scope="module")
def collected() -> list[str]:
    """The node ids `make gpu-tests` runs (collected once for the tests below)."""
    return rs._collect("gpu and not slow", ["tests/gpu"])


def test_every_test_once_and_groups_kept_together(collected):
    ids = collected
    assert any("test_census_gpu.py" in i for i in ids) and len(ids) > 50
    for n in (1, 2, 4, 8):
        shards = rs.plan(ids, n)
        dealt = [i for s in shards for i in s["nodeids"]]
        assert sorted(dealt) == sorted(ids) and len(shards) <= n
        where = {}
        for k, s in enumerate(shards):
            for i in s["nodeids"]:
                where.setdefault(rs.estimate(i)[1], set()).add(k)
        assert all(len(ks) == 1 for ks in where.values()), "a group was split"
        for s in shards:                                    # collection order inside a shard
            assert s["nodeids"] == [i for i in ids if i in set(s["nodeids"])]
    one = rs.plan(ids, 1)
    assert len(one) == 1 and one[0]["nodeids"] == ids       # --gpus 1: the plain run


def test_longest_first_to_the_least_loaded_shard():
    ids = _ids({"test_a_gpu.py": 10, "test_b_gpu.py": 6, "test_c_gpu.py": 5, "test_d_gpu.py": 1})   # unknown files
    shards = rs.plan(ids, 2)                                 # DEFAULT_COST per test: 100, 60, 50, 10 s
    assert [s["seconds"] for s in shards] == [110.0, 110.0]
    assert [sorted(s["groups"]) for s in shards] == [["tests/gpu/test_a_gpu.py", "tests/gpu/test_d_gpu.py"],
                                                     ["tests/gpu/test_b_gpu.py", "tests/gpu/test_c_gpu.py"]]
    assert len(rs.plan(ids, 8)) == 4                          # no empty shards
    # equal files deal round-robin
    even = rs.plan(_ids({f"test_{x}_gpu.py": 2 for x in "pqrs"}), 2)
    assert [len(s["groups"]) for s in even] == [2, 2]
    with pytest.raises(ValueError):
        rs.plan(ids, 0)


def test_measured_durations_replace_the_table_and_the_table_groups():
    ids = _ids({"test_a_gpu.py": 2, "test_b_gpu.py": 2})
    measured = {ids[0]: 300.0}
    assert rs.estimate(ids[0], measured) == (300.0, "tests/gpu/test_a_gpu.py")
    assert rs.plan(ids, 2, measured)[0]["groups"] == ["tests/gpu/test_a_gpu.py"]
    # the table: a function of the big attention file is its own group; the stable file's emulated cases split by
    # masking; the DDP test needs two GPUs
    att = "tests/gpu/test_attention_gpu.py::test_native_error_at_most_twice_pytorch_bf16[d64-causal-None]"
    assert rs.estimate(att)[1] == att.split("[")[0]
    st = "tests/gpu/test_stable_attention_gpu.py::test_emulate_equals_research_emulated_bitwise[ties-{}-{}]"
    assert rs.estimate(st.format("None", "True"))[1] == rs.estimate(st.format("beta", "True"))[1] != \
        rs.estimate(st.format("None", "False"))[1]
    assert rs.needs_gpus("tests/gpu/test_train_gpu.py::test_ddp_nccl_two_gpus") == 2


def test_a_split_test_shares_out_its_measured_seconds():
    """A test measured whole and since parametrized: its cases get the measured seconds divided evenly (the others
    keep their own measurement or the table's); one "param" group per case, across the file's functions."""
    f = "tests/gpu/test_x_gpu.py"
    ids = [f"{f}::test_big[{c}]" for c in ("a", "b", "c", "d")] + [f"{f}::test_big_too[a]", f"{f}::test_old[x]",
                                                                   f"{f}::test_old[new]"]
    measured = {f"{f}::test_big": 100.0, f"{f}::test_old[x]": 7.0, f"{f}::test_big_too": 0.0}
    split = rs.split_costs(ids, measured)
    assert split == {**{i: 25.0 for i in ids[:4]}, f"{f}::test_big_too[a]": 0.0}
    assert rs.split_costs(ids, None) == {}
    assert rs.plan(ids, 1, measured)[0]["seconds"] == 100.0 + 7.0 + rs.DEFAULT_COST    # test_old[new]: the table
    # the two split tests of the suite: the gradient cases and the capture test's layer cases, each case one group
    # holding that case of every function of its file
    grad = "tests/gpu/test_gradients_gpu.py::test_{}[rb512]"
    assert rs.estimate(grad.format("every_variant_within_its_rule"))[1] == \
        rs.estimate(grad.format("every_variant_ran_on_every_input"))[1] == "tests/gpu/test_gradients_gpu.py[rb512]"
    cap = "tests/gpu/test_delta_capture_gpu.py::test_capture_leaves_training_unchanged_and_replays[layers{}]"
    assert rs.estimate(cap.format("01"))[1] != rs.estimate(cap.format("23"))[1]


def test_the_committed_durations_estimate_the_split_tests(collected):
    """The gradient checks' table test and the capture test are split into cases: where the measured run knew them
    whole, their cases in the current suite share out its seconds, so the estimate of the suite keeps their total;
    where it measured the cases, each keeps its own seconds and nothing is shared out."""
    d = json.loads((ROOT / "tests" / "gpu" / "durations_h100.json").read_text())["durations"]
    split = rs.split_costs(collected, d)
    for whole in ("tests/gpu/test_gradients_gpu.py::test_every_variant_within_its_rule",
                  "tests/gpu/test_delta_capture_gpu.py::test_capture_leaves_training_unchanged_and_replays"):
        if whole in collected:          # not split (any more): its own measurement
            continue
        cases = [i for i in collected if i.startswith(whole + "[")]
        assert len(cases) >= 3, whole
        if all(c in d for c in cases):  # measured case by case
            assert not any(c in split for c in cases), whole
            continue
        assert all(c in split for c in cases), whole
        assert sum(split[c] for c in cases) == pytest.approx(d[whole])
        assert max(split[c] for c in cases) <= 60.0          # no case planned longer than a minute


def test_shard_threads_share_the_cores(tmp_path):
    assert [rs.shard_threads(j, cores=16) for j in (1, 4, 5, 32)] == [16, 4, 3, 1]
    args = SimpleNamespace(timeout=None, pytest_args=[])
    spec = {"nodeids": ["tests/gpu/test_x_gpu.py::test_a"], "seconds": 1.0, "groups": [], "gpus": 1}
    env = rs._Shard(0, spec, None, args, "gpu", tmp_path / "log", threads=3).env
    assert all(env[v] == "3" or v in os.environ for v in rs.THREAD_VARS)
    assert rs._Shard(0, spec, None, args, "gpu", tmp_path / "log").env.get("OMP_NUM_THREADS") == \
        os.environ.get("OMP_NUM_THREADS")                      # threads=0: left as it is


def test_gpus_per_shard():
    shards = [{"gpus": 1}, {"gpus": 2}, {"gpus": 1}, {"gpus": 1}, {"gpus": 1}]
    assert rs.assign_gpus(shards, ["0", "1", "2", "3"]) == [["0"], ["1", "2"], ["2"], ["3"], ["0"]]
    assert rs.assign_gpus(shards[:2], ["5"]) == [["5"], ["5"]]      # one GPU: every shard on it
    assert rs.assign_gpus(shards[:2], []) == [[], []]


def test_the_plumbing_runs_on_the_cpu(tmp_path, capsys):
    """Two shards on the CPU (--allow-cpu: the gpu tests skip), a log with the header, each shard's log and the
    durations file; without --allow-cpu it refuses (its `main` called here: a second interpreter only to import
    torch and refuse took ≈ 4 s, and the run above already starts the script as a command)."""
    log = tmp_path / "gpu_tests.log"
    cmd = [sys.executable, "tests/gpu/run_sharded.py", "--allow-cpu", "--gpus", "2", "--log", str(log),
           "--paths", "tests/gpu/test_rounding_gpu.py", "tests/gpu/test_row_pv_gpu.py"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    text = log.read_text()
    assert "# git commit: " in text and "# device: cpu" in text and "all shards passed" in text
    assert (tmp_path / "gpu_tests.shard0.log").exists() and (tmp_path / "gpu_tests.shard1.log").exists()
    durations = json.loads((tmp_path / "gpu_tests_durations.json").read_text())["durations"]
    assert len(durations) == 3 and not list(tmp_path.glob("*.json"))[1:]
    assert "[shard 0] " in p.stdout
    if torch.cuda.is_available():
        return
    capsys.readouterr()
    assert rs.main(["--gpus", "1"]) == 2 and "--allow-cpu" in capsys.readouterr().err


def test_the_committed_durations_deal_four_even_shards_within_five_minutes(collected):
    """`make gpu-tests` deals the current suite by the seconds measured on one H100 (tests/gpu/durations_h100.json,
    split tests shared out, new ones from the table): four shards within 5 % of each other, each well inside the
    300 s target once its start-up is added."""
    rec = json.loads((ROOT / "tests" / "gpu" / "durations_h100.json").read_text())
    assert all("H100" in dev for dev in rec["device"]) and len(rec["git_commit"]) == 40
    d = rec["durations"]
    shards = rs.plan(collected, 4, d)
    secs = [s["seconds"] for s in shards]
    assert len(shards) == 4 and max(secs) <= 1.05 * sum(secs) / 4
    assert max(secs) + rs.STARTUP_S < 300
    assert "--costs $(GPU_COSTS)" in (ROOT / "Makefile").read_text()
