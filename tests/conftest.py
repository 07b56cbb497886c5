"""Test set-up: Triton's CPU interpreter when there is no CUDA (must happen before any kernel import)."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("MPLBACKEND", "Agg")

import lib.book.setup  # noqa: E402,F401  (sets TRITON_INTERPRET=1 without CUDA)

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    import torch
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `make gpu-tests` on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpt2_arms_ci():
    """The registered gpt2_arms experiment run live at ci scale (two arms × 4 steps of a toy GPT-2, ≈ 10 s on the
    CPU), as chapter 2c shows it without a GPU result: the telemetry and the reading tests check the same run."""
    from lib.book.runner import live_result
    return live_result("gpt2_arms", "ci")


@pytest.fixture(scope="session")
def kernel_bias_table_ci():
    """The registered kernel_bias_table run live at ci scale (three kernels × two problems of 8 × 64 rows), as the
    practice chapter shows it without a GPU result: its own checks and the chapter's reading use the same run."""
    from lib.book.runner import live_result
    return live_result("kernel_bias_table", "ci")
