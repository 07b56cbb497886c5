"""GPU checks of the training harness (marked `gpu`; skipped without CUDA).

* Same seed ⇒ bit-identical loss and grad-norm curves under BF16 autocast, for our kernel (paper placement, native
  path) and for SDPA's flash backend under `deterministic="strict"`.
* The `ours` backend really takes the kernel's native BF16 path under autocast; SDPA pinned to flash agrees with
  FP32 attention to BF16 accuracy.
* With ≥ 2 GPUs: DDP (nccl, torchrun) keeps the ranks' parameters identical.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lib.book.setup  # noqa: F401
from lib.training.model import naive_attention, sdpa_attention
from lib.training.train import TrainConfig, train

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(n_layer=2, n_head=2, n_embd=128, seq_len=256, batch_size=8, steps=30, lr=5e-3, warmup=5,
             telemetry_every=10, eval_batches=0, progress=False)


@pytest.mark.parametrize("attn,det", [("paper", "warn"), ("paper+fix", "warn"), ("sdpa", "strict"),
                                      ("paper/round_block=128+fix", "warn")])
def test_same_seed_bit_identical_on_gpu(attn, det):
    a = train(TrainConfig.flat(**SMALL, attn=attn, deterministic=det))
    b = train(TrainConfig.flat(**SMALL, attn=attn, deterministic=det))
    assert a["device"].startswith("cuda") and a["autocast"] == "torch.bfloat16"
    assert a["loss"] == b["loss"], [i for i, (x, y) in enumerate(zip(a["loss"], b["loss"])) if x != y][:5]
    assert a["grad_norm"] == b["grad_norm"]
    assert all(torch.equal(p, q) for p, q in zip(a["model"].parameters(), b["model"].parameters()))


def test_ours_takes_native_path_under_autocast():
    from kernels.attention import resolve_path
    from lib.fp.numerics import get_profile
    r = train(TrainConfig.flat(**(SMALL | dict(steps=2, telemetry_every=1)), attn="paper"))
    c = r["model"].attn_layers[0]
    r["model"].set_capture(True)
    x = torch.randint(0, 256, (2, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        r["model"](x)
    q = c.captured["q"]
    assert q.dtype == torch.bfloat16
    assert resolve_path(None, get_profile("paper"), q.dtype, q.device) == "native"


def test_sdpa_flash_matches_fp32_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 256, 64, device="cuda", dtype=torch.bfloat16).unbind(0)
    o = sdpa_attention(q, k, v).float()
    ref = naive_attention(q, k, v).float()   # FP32 math on the same BF16 inputs, rounded to BF16 at the end
    # flash rounds P to BF16 before P·V (relative 2⁻⁹ per weight) and O once: |error| ≤ 2⁻⁸·max|v| with margin 2
    assert (o - ref).abs().max().item() <= 2 ** -7 * v.float().abs().max().item()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_ddp_nccl_two_gpus(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "tests" / "_ddp_worker.py"), str(tmp_path)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False, map_location="cpu") for r in (0, 1))
    assert r0["world_size"] == 2
    assert all(torch.equal(a, b) for a, b in zip(r0["params"], r1["params"]))
    assert r0["loss"] == r1["loss"]
