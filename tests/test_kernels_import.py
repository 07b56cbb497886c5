"""`import kernels` on a machine without CUDA: it must switch Triton to its interpreter (with one warning) rather
than fail at the first launch with Triton's "0 active drivers"; an explicit TRITON_INTERPRET is respected."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import os, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import kernels
import torch
from kernels import attention
q = torch.randn(1, 1, 8, 16)
o = attention(q, q, q, numerics="fa2")
print("interpret", os.environ.get("TRITON_INTERPRET"), "shape", tuple(o.shape),
      "warnings", sum("CPU interpreter" in str(w.message) for w in caught))
"""


def _run(extra_env):
    # a clean environment: no TRITON_INTERPRET from the test session, CUDA hidden even on a GPU machine
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", **extra_env}
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("preset,want_warnings", [(None, 1), ("1", 0)])
def test_import_without_cuda_uses_the_interpreter(preset, want_warnings):
    r = _run({} if preset is None else {"TRITON_INTERPRET": preset})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["interpret", "1", "shape", "(1,", "1,", "8,", "16)", "warnings", str(want_warnings)]
