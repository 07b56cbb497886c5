"""tests/gpu/run_sharded.py on the CPU: how it deals tests to shards and GPUs, and that the whole plumbing runs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.gpu import run_sharded as rs

ROOT = Path(__file__).resolve().parent.parent


def _ids(files: dict) -> list[str]:
    return [f"tests/gpu/{name}::test_{i}" for name, n in files.items() for i in range(n)]


def test_every_test_once_and_groups_kept_together():
    ids = rs._collect("gpu", ["tests/gpu"])
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


def test_gpus_per_shard():
    shards = [{"gpus": 1}, {"gpus": 2}, {"gpus": 1}, {"gpus": 1}, {"gpus": 1}]
    assert rs.assign_gpus(shards, ["0", "1", "2", "3"]) == [["0"], ["1", "2"], ["2"], ["3"], ["0"]]
    assert rs.assign_gpus(shards[:2], ["5"]) == [["5"], ["5"]]      # one GPU: every shard on it
    assert rs.assign_gpus(shards[:2], []) == [[], []]


def test_the_plumbing_runs_on_the_cpu(tmp_path):
    """Two shards on the CPU (--allow-cpu: the gpu tests skip), a log with the header, each shard's log and the
    durations file; without --allow-cpu it refuses."""
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
    refused = subprocess.run([sys.executable, "tests/gpu/run_sharded.py", "--gpus", "1"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--allow-cpu" in refused.stderr


def test_the_committed_durations_deal_four_even_shards_within_five_minutes():
    """`make gpu-tests` deals by the seconds measured on one H100 (tests/gpu/durations_h100.json): four shards
    within 5 % of each other, each well inside the 300 s target once its start-up is added."""
    rec = json.loads((ROOT / "tests" / "gpu" / "durations_h100.json").read_text())
    assert all("H100" in dev for dev in rec["device"]) and len(rec["git_commit"]) == 40
    d = rec["durations"]
    shards = rs.plan(list(d), 4, d)
    secs = [s["seconds"] for s in shards]
    assert len(shards) == 4 and max(secs) <= 1.05 * sum(secs) / 4
    assert max(secs) + rs.STARTUP_S < 300
    assert "--costs $(GPU_COSTS)" in (ROOT / "Makefile").read_text()
