"""Launch settings of the GPU tests that keep Triton's compile time down; each leaves the tested arithmetic as it is.

A GPU test run is compile-bound: every constexpr set of a kernel compiles once (on the CPU, ptxas included; Triton's
on-disk cache then serves it to later processes on the machine, not to a fresh machine), and the emulated path's
FP32 `ieee` dots are unrolled FMAs whose compile time grows with the work per thread. Measured by compiling the
kernels for sm_90 on a 2-core CPU (Triton 3.6, `triton.compile` with a GPUTarget, as benchmarks/kernel_registers.py
does): the research kernel's emulated `fa2` backward (dK/dV + dQ, causal, head dim 64) ≈ 25-45 s at 4 warps and
≈ 6 s at 16; the SR precision-dial forward ≈ 20 s at 4 warps and ≈ 6 s at 16; a native forward ≈ 1-1.5 s and
backward ≈ 2-4 s per launch config. The stable kernel's autotuners compile all 9 forward and 7 backward configs for
each new (T, head dim, causal, fix) key, ≈ 30 s per key.
"""
from __future__ import annotations


def emulated_warps(monkeypatch, num_warps: int = 16, kernels=("fwd", "bwd")) -> None:
    """Launch the research kernel's emulated path with `num_warps` warps for the kernels whose names start with one
    of `kernels` ("fwd": the forward, also "fwd_rb"; "bwd": dK/dV and dQ, also "bwd_rb"); the native path and the δ
    pre-kernel are untouched.

    Safe for the backward: it has no reduction across threads (each FMA dot sums its K dimension in order inside one
    thread; P, dS and every rounding are elementwise, SR draws by element index), so the warp count does not enter
    its arithmetic. Not for δ's "dp_p" source, whose row sum runs in the dQ kernel (no test uses it with this). The
    forward's row sums (ℓ, the tie counts are exact) are tree reductions whose order follows the layout: with more
    warps the emulated forward is the same rounding points in another FP32 summation order. So use "fwd" only where
    the comparison does not depend on that order: exact inputs (every sum exact) or an error bound; never for a bit
    for bit comparison against another kernel's 4-warp forward."""
    import importlib
    att = importlib.import_module("kernels.attention")     # the module (`kernels.attention` is also the function)
    original = att._blocks

    def _blocks(path, d, kernel, block):
        cfg = original(path, d, kernel, block)
        if path == "emulated" and kernel.startswith(tuple(kernels)):
            cfg = dict(cfg, num_warps=num_warps)
        return cfg

    monkeypatch.setattr(att, "_blocks", _blocks)


def fallback_autotune(monkeypatch) -> None:
    """The stable kernel's autotuners hold only their fallback configs (64 × 64 tiles, 4 warps), so that each new
    (T, head dim, causal, fix) key compiles one forward and one backward instead of 9 and 7. The other tile configs
    are checked by explicit launches (test_stable_attention_gpu.py::test_tile_configs_within_fa_rule); which one is
    fastest is the benchmark's business (benchmarks/bench_stable_attention.py)."""
    from kernels.stable_bwd import BWD_FALLBACK, attn_bwd_tuned
    from kernels.stable_fwd import FWD_FALLBACK, attn_fwd_tuned

    monkeypatch.setattr(attn_fwd_tuned, "configs", [FWD_FALLBACK])
    monkeypatch.setattr(attn_bwd_tuned, "configs", [BWD_FALLBACK])
