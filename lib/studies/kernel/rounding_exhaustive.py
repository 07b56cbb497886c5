"""Verify the rounding helper of kernels/rounding.py against torch's `.to(torch.bfloat16)` and Triton's native cast.

* ``full`` (GPU): all 2**32 FP32 bit patterns, in chunks of 2**28, plus all 65 536 BF16 patterns for BF16->FP32.
* ``ci`` (CPU interpreter): ``random_patterns`` random FP32 patterns (seed 0; 2**22 registered) plus all 65 536 BF16
  patterns.

"Equal" means identical bits, except that a NaN input only has to give a NaN (torch and the GPU use different
canonical NaN payloads; our helper keeps the input's sign and top payload bits, quiet bit set).
Also counts the special classes (NaN, ±Inf, overflow to Inf, subnormal outputs, −0) so the reader sees they were hit.
"""
from __future__ import annotations

import numpy as np
import torch

def _compare(x: torch.Tensor, tally: dict, with_native: bool) -> None:
    from kernels.rounding import native_to_bf16, round_to_bf16
    ours = round_to_bf16(x).view(torch.int16)
    ref = x.to(torch.bfloat16).view(torch.int16)
    nan_in = torch.isnan(x)
    ours_f = ours.view(torch.bfloat16).float()
    tally["n"] += x.numel()
    tally["nan_inputs"] += int(nan_in.sum())
    tally["nan_kept"] += int(torch.isnan(ours_f[nan_in]).sum())
    tally["mismatch_vs_torch"] += int(((ours != ref) & ~nan_in).sum())
    fin_in = torch.isfinite(x)
    tally["overflow_to_inf"] += int((fin_in & torch.isinf(ours_f)).sum())
    tally["inf_inputs"] += int(torch.isinf(x).sum())
    tally["subnormal_outputs"] += int(((ours & 0x7F80) == 0).logical_and((ours & 0x7F) != 0).sum())
    tally["neg_zero_outputs"] += int((ours == torch.tensor(-32768, dtype=torch.int16, device=x.device)).sum())
    if with_native:
        nat = native_to_bf16(x).view(torch.int16)
        tally["mismatch_native_vs_ours"] += int(((nat != ours) & ~nan_in).sum())
        tally["native_nan_kept"] += int(torch.isnan(nat.view(torch.bfloat16)[nan_in].float()).sum())


def run(scale: str, cfg: dict) -> dict:
    """cfg: exhaustive (all 2**32 patterns on the GPU, with Triton's native cast) or random_patterns (count, seed 0,
    on the CPU interpreter, whose native cast truncates)."""
    import lib.book.setup  # noqa: F401
    from kernels.rounding import bf16_to_fp32
    from lib.book.setup import DEVICE, INTERPRET
    tally = {k: 0 for k in ("n", "nan_inputs", "nan_kept", "mismatch_vs_torch", "overflow_to_inf", "inf_inputs",
                            "subnormal_outputs", "neg_zero_outputs", "mismatch_native_vs_ours", "native_nan_kept")}
    if cfg["exhaustive"]:
        chunk = 1 << 28
        for start in range(0, 1 << 32, chunk):
            u = torch.arange(start, start + chunk, dtype=torch.int64, device=DEVICE)
            x = (u - (1 << 32) * (u >= (1 << 31))).to(torch.int32).view(torch.float32)
            _compare(x, tally, with_native=True)
            del u, x
        patterns = "all 2**32"
    else:
        g = torch.Generator().manual_seed(0)
        u = torch.randint(-2**31, 2**31, (cfg["random_patterns"],), generator=g, dtype=torch.int64).to(torch.int32)
        _compare(u.view(torch.float32).to(DEVICE), tally, with_native=False)  # interpreter's native cast truncates
        n = cfg["random_patterns"]
        count = f"2**{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"    # the label says the count run
        patterns = f"{count} random (seed 0)"
    # BF16 -> FP32 on all 65 536 patterns, and RNE(BF16 value) must be the identity.
    h = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).to(DEVICE).view(torch.bfloat16)
    wide = bf16_to_fp32(h)
    nan_h = torch.isnan(h.float())
    tally["bf16_to_fp32_mismatch"] = int(((wide.view(torch.int32) != h.float().view(torch.int32)) & ~nan_h).sum())
    from kernels.rounding import round_to_bf16
    tally["bf16_roundtrip_mismatch"] = int(((round_to_bf16(wide).view(torch.int16) != h.view(torch.int16)) & ~nan_h).sum())
    tally["bf16_patterns"] = 65536
    data = {"patterns": patterns, "interpreter": INTERPRET, **tally,
            "all_equal": tally["mismatch_vs_torch"] == 0 and tally["nan_kept"] == tally["nan_inputs"]
            and tally["bf16_to_fp32_mismatch"] == 0 and tally["bf16_roundtrip_mismatch"] == 0
            and (not cfg["exhaustive"] or (tally["mismatch_native_vs_ours"] == 0
                                     and tally["native_nan_kept"] == tally["nan_inputs"]))}
    return {"data": data, "seeds": [] if cfg["exhaustive"] else [0], "config": {"patterns": patterns}}
