"""Worker for tests/test_stable_attention.py: compiles the user kernel's native forward and backward for sm_90
(no GPU needed; Triton compiles ahead of time for an explicit target, as benchmarks/kernel_registers.py does) and
prints, as JSON, which PTX instruction defines each exp2 argument: {"fwd": {"mul.f32": n, ...}, "bwd": {...},
"fwd_o32": {...}} ("fwd_o32": the forward that also writes the FP32 O, with TMA descriptors for its BF16 tiles).
Run in its own process: the interpreter must be off before `kernels` is imported."""
import json
import os
import re
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels.stable_bwd import attn_bwd_kernel  # noqa: E402
from kernels.stable_fwd import attn_fwd_kernel  # noqa: E402

_BF16 = {"Q", "K", "V", "O", "DO", "DQ", "DK", "DV"}
_F32_PTR = {"LSE", "DELTA", "O32"}
_FLOAT = {"qk_scale", "scale", "beta", "max_shift"}


def exp2_operands(fn, consts) -> dict:
    """{opcode: count} of the instructions whose result is an `ex2` operand in `fn`'s PTX for sm_90."""
    sig = {n: "constexpr" if n in consts else "*bf16" if n in _BF16 else "*fp32" if n in _F32_PTR
           else "fp32" if n in _FLOAT else "i32" for n in fn.arg_names}
    ptx = triton.compile(ASTSource(fn, sig, consts), target=GPUTarget("cuda", 90, 32),
                         options=dict(num_warps=4, num_stages=2)).asm["ptx"]
    defs = {}
    for line in ptx.splitlines():
        m = re.match(r"\s*([a-z0-9_.]+)\s+(%\w+),", line)
        if m:
            defs[m[2]] = m[1]
    ops = {}
    for m in re.finditer(r"ex2\.approx[.a-z0-9]*\s+%\w+,\s*(%\w+);", ptx):
        op = defs.get(m[1], "?")
        ops[op] = ops.get(op, 0) + 1
    return ops


if __name__ == "__main__":
    native = dict(HEAD_DIM=64, CAUSAL=True, EMULATE=False, BASE2=True, USE_TMA=False, STATIC_LOOPS=False)
    print(json.dumps({
        "fwd": exp2_operands(attn_fwd_kernel, dict(native, BLOCK_M=64, BLOCK_N=64, FIX=True, WARP_SPECIALIZE=False,
                                                   N_TILES=1, STORE_O32=False)),
        "fwd_o32": exp2_operands(attn_fwd_kernel, dict(native, USE_TMA=True, BLOCK_M=64, BLOCK_N=64, FIX=True,
                                                       WARP_SPECIALIZE=False, N_TILES=1, STORE_O32=True)),
        "bwd": exp2_operands(attn_bwd_kernel, dict(native, BLOCK_BIG=64, BLOCK_STEP=64, N_STEPS=1))}))
