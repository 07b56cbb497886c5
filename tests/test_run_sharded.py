"""The GPU tests' sharding script, on the CPU: the split and the plumbing (every GPU test skips here)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("run_sharded", ROOT / "tests" / "gpu" / "run_sharded.py")
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def test_shards_balance_by_cost():
    files = [Path(n) for n in ("test_gradients_gpu.py", "test_attention_gpu.py", "a.py", "b.py", "c.py")]
    parts = rs.shards(files, 2)
    assert sorted(f.name for p in parts for f in p) == sorted(f.name for f in files)
    assert [f.name for f in parts[0]] == ["test_gradients_gpu.py"]
    assert len(rs.shards(files, 8)) == 5


def test_runs_and_logs_on_the_cpu(tmp_path):
    log = tmp_path / "gpu_tests.log"
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "run_sharded.py"), "--gpus", "2", "--log",
                        str(log)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    text = log.read_text()
    assert "in 2 shards" in text and "0 shard(s) failed" in text and text.count("--- shard") == 2
