"""Compile the native attention kernels for the H100 (sm_90) on any machine, GPU or not, and report ptxas's registers
and spills per kernel and launch config (a script, not a test; tests/test_kernel_registers.py runs its quick set).

Triton compiles ahead of time for an explicit target without a driver (`triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))`); the PTX is then passed to the ptxas shipped with Triton (`-v`), which prints
registers per thread and spill stores/loads in bytes. A kernel that spills keeps part of its accumulators in local
memory: the launch configs of `kernels.attention.NATIVE_CONFIGS` were picked so that the training configuration
(head dim 64) does not. Kernels are compiled with the launcher's constexprs for the native path (BF16 operands,
runtime loop bounds) and the paper placement unless told otherwise; causal.

    python benchmarks/kernel_registers.py [--out DIR] [--quick] [--profile paper] [--configs] [--wide ieee]

--quick: head dim 64 only, round_block 512 (the kernels with logical rounding blocks). --configs: also every
candidate launch config of benchmarks/bench_attention.py. Prints one line per kernel and writes
DIR/kernel_registers.json when --out is given (plain JSON: no GPU result, nothing to provenance-track).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Compile, never interpret: this must be decided before `kernels` is imported (Triton reads it when it decorates).
os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import kernels.attention  # noqa: E402,F401
from kernels.flash_bwd import attn_bwd_dkdv_kernel, attn_bwd_dq_kernel  # noqa: E402
from kernels.flash_fwd import attn_fwd_kernel  # noqa: E402
from lib.fp.numerics import get_profile  # noqa: E402

A = sys.modules["kernels.attention"]
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
TARGET = GPUTarget("cuda", 90, 32)
_PTR_BF16 = {"Q", "K", "V", "O", "DO", "DQ", "DK", "DV"}
_PTR_F32 = {"O32", "LSE", "DELTA"}
_FLOAT = {"scale", "beta", "tie_tol", "max_shift"}


def _signature(fn, consts):
    sig = {}
    for name in fn.arg_names:
        sig[name] = ("constexpr" if name in consts else "*bf16" if name in _PTR_BF16 else "*fp32" if name in _PTR_F32
                     else "fp32" if name in _FLOAT else "i32")
    return sig


def _ptxas(ptx: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run([str(PTXAS), "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull], capture_output=True,
                             text=True, check=True).stderr
    finally:
        os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return {"registers": int(regs[1]), "spill_stores": int(spill[1]), "spill_loads": int(spill[2])}


def compile_kernel(kernel: str, nm, head_dim: int, round_block: int, cfg: dict, fix=None, causal=True) -> dict:
    """Compile one kernel ("fwd", "dkdv", "dq") of the native path for sm_90 with launch config `cfg`
    (BLOCK_M, BLOCK_N, num_warps, num_stages); returns its ptxas report plus what was compiled."""
    nm = nm.replace(round_block=round_block)
    common = dict(D=head_dim, DP=max(16, triton.next_power_of_2(head_dim)), CAUSAL=causal, NATIVE=True,
                  STATIC_LOOPS=False, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], RB_TILES=1,
                  WIDE_SPLIT=A._wide_split("native"))
    if kernel == "fwd":
        fn = attn_fwd_kernel
        consts = dict(common, CLAMP_SHIFT=True, N_TILES=1, ROUND_BLOCK=round_block != 0, FIX=A._FIX_CODE[fix],
                      STORE_O32=False, **A._fwd_flags(nm))
    else:
        bwd_rb = round_block != 0 and nm.round_grad_acc
        consts = dict(common, ROUND_BLOCK=bwd_rb, **A._bwd_flags(nm))
        if kernel == "dkdv":
            fn = attn_bwd_dkdv_kernel
            consts.update(M_TILES=1, ROUND_BWD_P=nm.round_bwd_p)
        else:
            fn = attn_bwd_dq_kernel
            consts.update(N_TILES=1, DELTA_ONLY=False)
    t0 = time.perf_counter()
    compiled = triton.compile(ASTSource(fn, _signature(fn, consts), consts), target=TARGET,
                              options=dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
    rep = _ptxas(compiled.asm["ptx"])
    rep.update(kernel=kernel, head_dim=head_dim, round_block=round_block, fix=fix, causal=causal,
               config=dict(cfg), compile_s=round(time.perf_counter() - t0, 2))
    return rep


def report(profile="paper", head_dims=(64, 128), round_blocks=(0, 512), configs=False, log=print) -> list[dict]:
    """Every kernel at every head dim and round_block with its NATIVE_CONFIGS entry (and, with `configs`, the
    benchmark's candidate configs). The forward is compiled with the fix (its largest variant)."""
    nm = get_profile(profile)
    rows = []
    for d in head_dims:
        for rb in round_blocks:
            for kernel in ("fwd", "dkdv", "dq"):
                key = A.fwd_kernel_key(nm.replace(round_block=rb)) if kernel == "fwd" else \
                    A.bwd_kernel_key(nm.replace(round_block=rb))
                cfgs = [A.native_config(d, key)]
                if configs:
                    from benchmarks.bench_attention import BWD_CANDIDATES, FWD_CANDIDATES
                    cfgs += [c for c in (FWD_CANDIDATES if kernel == "fwd" else BWD_CANDIDATES) if c not in cfgs]
                for cfg in cfgs:
                    r = compile_kernel(kernel, nm, d, rb, cfg, fix="beta" if kernel == "fwd" else None)
                    r.update(profile=profile, config_key=key, default=cfg == cfgs[0])
                    log(f"{kernel:4s} D={d:3d} round_block={rb:4d} {key:6s} warps={cfg['num_warps']} "
                        f"stages={cfg['num_stages']} tiles={cfg['BLOCK_M']}x{cfg['BLOCK_N']}: {r['registers']} regs, "
                        f"spill {r['spill_stores']}/{r['spill_loads']} B ({r['compile_s']} s)")
                    rows.append(r)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="directory for kernel_registers.json")
    ap.add_argument("--quick", action="store_true", help="head dim 64, round_block 512 only")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--configs", action="store_true", help="also the benchmark's candidate launch configs")
    ap.add_argument("--wide", default=A.WIDE_PRODUCT, choices=A._WIDE_PRODUCTS,
                    help="products of FP32 operands (profile fp32; kernels.attention.WIDE_PRODUCT)")
    a = ap.parse_args(argv)
    A.WIDE_PRODUCT = a.wide
    rows = report(a.profile, (64,) if a.quick else (64, 128), (512,) if a.quick else (0, 512), a.configs,
                  log=lambda s: print(s, flush=True))
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernel_registers.json").write_text(json.dumps(
            {"target": "cuda sm_90", "triton": triton.__version__, "rows": rows}, indent=1))
        print(out / "kernel_registers.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
