"""The native kernels compile for the H100 (sm_90) without a GPU, and the training configuration's kernels with
logical rounding blocks (paper placement, head dim 64, round_block 512: forward with the fix, dK/dV, dQ) do not
spill registers at their NATIVE_CONFIGS launch configs (ptxas's report; benchmarks/kernel_registers.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_native_kernels_compile_for_sm90_without_spills(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TRITON_INTERPRET", None)       # the script sets 0 itself: it must compile, not interpret
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_registers.py"), "--quick", "--out",
                        str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads((tmp_path / "kernel_registers.json").read_text())["rows"]
    assert sorted(x["kernel"] for x in rows) == ["dkdv", "dq", "fwd"]
    for x in rows:
        assert x["round_block"] == 512 and x["head_dim"] == 64 and x["config_key"].endswith("_rb")
        assert 0 < x["registers"] <= 255
        assert x["spill_stores"] == 0 and x["spill_loads"] == 0, x


def test_fp32_operand_kernels_compile_for_sm90_and_split_products_do_not_spill(tmp_path):
    """The native kernels of the fp32 profile (P̄, backward P and dS kept in FP32) with the products in three BF16
    pieces on the tensor cores (`kernels.attention.WIDE_PRODUCT` = "bf16_split") compile for sm_90 at head dim 64
    without register spills, at the launch configs `bwd_kernel_key` picks for them (the FP32 `ieee` form's dK/dV
    kernel spills at every config: `kernels/attention.py`)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TRITON_INTERPRET", None)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_registers.py"), "--quick", "--profile",
                        "fp32", "--wide", "bf16_split", "--out", str(tmp_path)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads((tmp_path / "kernel_registers.json").read_text())["rows"]
    assert {x["kernel"]: x["config_key"] for x in rows} == {"fwd": "fwd_rb", "dkdv": "bwd_split", "dq": "bwd_split"}
    for x in rows:
        assert x["spill_stores"] == 0 and x["spill_loads"] == 0, x
