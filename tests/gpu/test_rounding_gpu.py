"""On the GPU: Triton's native `.to(tl.bfloat16)` is RNE and equals our helper (the interpreter's cast is not)."""
import pytest
import torch

from kernels.rounding import native_to_bf16, round_to_bf16

pytestmark = pytest.mark.gpu


def test_native_cast_equals_helper_and_torch_on_random_patterns():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(-2**31, 2**31, (1 << 26,), generator=g, device="cuda", dtype=torch.int64).to(torch.int32).view(torch.float32)
    nan = torch.isnan(x)
    ours, nat, ref = (f(x).view(torch.int16) for f in (round_to_bf16, native_to_bf16, lambda t: t.to(torch.bfloat16)))
    assert int(((ours != nat) & ~nan).sum()) == 0
    assert int(((ours != ref) & ~nan).sum()) == 0
    assert torch.isnan(nat[nan].view(torch.bfloat16).float()).all()
