"""Benchmark (a script, not a test): `stable_attention` (no fix, fix, δ from the FP32 O) against SDPA's cuDNN and flash
backends.

    python -m benchmarks.bench_stable_attention --out DIR [--rounds 3] [--shapes 32x12x1024x64,1x32x16384x64]
    python -m lib.experiments stable_attention_bench --scale full --out DIR   (the registered result)

H100, BF16, causal, head dim 64, at B·H·T·D = 32·12·1024·64 and 1·32·16384·64 (the default shapes). Implementations
(`LABELS`): stable_attention plain, with fix="beta", and with delta="fp32_o" (the backward's δ from the FP32 O,
which the forward also writes), SDPA cuDNN and SDPA flash. For each shape and each implementation: forward (inputs
without grad) and forward+backward (`o.backward(dO)`, gradients reset to None between calls) times, as
`triton.testing.do_bench` medians (ms), all in one process on one GPU; `--rounds` rounds interleave the
implementations and the summary takes each time's median over rounds. Before timing, every implementation runs once
(the autotuner picks the stable kernels' configs then; they are recorded).

FLOPs (the Triton tutorial's convention): forward 4·B·H·T²·D/2 (causal), backward 2.5× that (2 for the backward's
matmuls, 0.5 for recomputing QKᵀ), so forward+backward is 3.5× the forward. TFLOP/s = FLOPs / median time, and the
fraction of `PEAK_TFLOPS` = 989.4 TFLOP/s, the H100 SXM's dense BF16 tensor-core rate (datasheet, without
sparsity; the script's earlier 790 was not a datasheet figure), and of a measured ceiling: a BF16 matmul of
`MATMUL_SIZE`³ timed the same way on the same GPU first (`matmul_ceiling`; "matmul" in the record).

Writes DIR/stable_attention_bench.json: per shape, the times, TFLOP/s, fractions and the ratios the targets are
stated in (stable vs cuDNN and vs flash, fwd and fwd+bwd; the fix's and δ-from-FP32-O's extra time over plain
stable, `extra_time`), the configs chosen, and the versions. The δ option shares the plain forward's autotuner key
(its O must be the same bits), so it runs the config tuned for plain stable, which is warmed up first.
Targets (the brief, not checked here): fwd+bwd ≥ 0.9× cuDNN and ≥ 1.3× flash at both shapes; fix ≤ 2 % slower;
δ from the FP32 O ≤ 3 % slower in fwd+bwd (in fwd alone, without grad, it writes no FP32 O: the same kernel).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import triton  # noqa: E402

# H100 SXM datasheet, dense BF16 without sparsity: the datasheet's "BF16 Tensor Core 1,979 teraFLOPS" is with
# structured sparsity, twice the dense rate; the H100 architecture whitepaper gives the dense rate as 989.4 (the
# figure `lib.studies.practice.reading.H100_SXM_DENSE_BF16_TFLOPS` cites; tests/test_layers.py holds them equal).
PEAK_TFLOPS = 989.4
SHAPES = ((32, 12, 1024, 64), (1, 32, 16384, 64))
MODES = ("fwd", "fwd+bwd")
LABELS = {"stable": "stable", "stable_fix": "stable, fix", "stable_delta_fp32_o": "stable, δ from FP32 O",
          "sdpa_cudnn": "SDPA cuDNN", "sdpa_flash": "SDPA flash"}


def _sdpa(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]

    def fn(q, k, v):
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return fn


def implementations() -> dict:
    from kernels import stable_attention
    return {"stable": lambda q, k, v: stable_attention(q, k, v, is_causal=True),
            "stable_fix": lambda q, k, v: stable_attention(q, k, v, is_causal=True, fix="beta"),
            "stable_delta_fp32_o": lambda q, k, v: stable_attention(q, k, v, is_causal=True, delta="fp32_o"),
            "sdpa_cudnn": _sdpa("cudnn"), "sdpa_flash": _sdpa("flash")}


def extra_time(med: dict, name: str, base: str = "stable") -> dict:
    """{mode: median time of `name` / that of `base` − 1} (the fraction of extra time) for the modes both have;
    med: {(implementation, mode): ms}."""
    return {mode: med[(name, mode)] / med[(base, mode)] - 1.0 for mode in MODES
            if (name, mode) in med and (base, mode) in med}


def flops(shape, mode) -> float:
    B, H, T, D = shape
    return 4.0 * B * H * T * T * D / 2 * (1.0 if mode == "fwd" else 3.5)


# The measured ceiling beside the datasheet's peak: one large BF16 matmul (M = N = K) on the same GPU, in the same
# process, timed as the attention kernels are (do_bench medians over the same rounds). 2·M·N·K FLOPs.
MATMUL_SIZE = 8192


def matmul_ceiling(rounds: int, size: int = MATMUL_SIZE, device: str = "cuda") -> dict:
    """{"size", "ms_per_round", "ms" (median over rounds), "tflops", "fraction_of_peak"} of a (size × size) @ (size ×
    size) BF16 matmul (torch.matmul, cuBLAS on the GPU)."""
    from triton.testing import do_bench
    g = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=g) for _ in range(2))
    torch.matmul(a, b)
    ms = [do_bench(lambda: torch.matmul(a, b), return_mode="median") for _ in range(rounds)]
    med = statistics.median(ms)
    tf = 2.0 * size ** 3 / med * 1e-9
    return {"size": size, "ms_per_round": ms, "ms": med, "tflops": tf, "fraction_of_peak": tf / PEAK_TFLOPS}


def of_ceiling(shapes: list[dict], ceiling_tflops: float) -> None:
    """Add to every timed implementation of every `bench_shape` record its TFLOP/s as a fraction of the measured
    matmul ceiling ("fraction_of_matmul"), beside its fraction of the datasheet's peak."""
    for rec in shapes:
        for key, val in rec.items():
            if isinstance(val, dict) and "tflops" in val:
                val["fraction_of_matmul"] = val["tflops"] / ceiling_tflops


def _timer(fn, mode, q, k, v, do):
    """A zero-argument callable for do_bench, and the tensors whose .grad it must reset."""
    if mode == "fwd":
        def step():
            with torch.no_grad():
                fn(q, k, v)
        return step, None
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    return (lambda: fn(qg, kg, vg).backward(do)), [qg, kg, vg]


def bench_shape(shape, impls, rounds, log) -> dict:
    from triton.testing import do_bench
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    times = {(name, mode): [] for name in impls for mode in MODES}
    errors = {}
    for (name, mode) in list(times):
        step, grads = _timer(impls[name], mode, q, k, v, do)
        try:
            step()                                  # compile / autotune outside the timing
            torch.cuda.synchronize()
        except Exception as e:                      # e.g. a backend this build lacks
            errors[f"{name} {mode}"] = f"{type(e).__name__}: {str(e)[:300]}"
            del times[(name, mode)]
            log(f"  {name} {mode}: failed ({errors[f'{name} {mode}']})")
    for r in range(rounds):
        for (name, mode) in times:
            step, grads = _timer(impls[name], mode, q, k, v, do)
            times[(name, mode)].append(do_bench(step, grad_to_none=grads, return_mode="median"))
        log(f"  round {r}: " + ", ".join(f"{n} {m} {t[-1]:.3f}" for (n, m), t in times.items()))
    out = {"shape": list(shape), "errors": errors, "ms_per_round": {f"{n} {m}": t for (n, m), t in times.items()}}
    med = {key: statistics.median(t) for key, t in times.items()}
    for (name, mode), ms in med.items():
        tf = flops(shape, mode) / ms * 1e-9
        out[f"{name} {mode}"] = {"ms": ms, "tflops": tf, "fraction_of_peak": tf / PEAK_TFLOPS}

    def ratio(a, b, mode):          # how many times faster a is than b
        return med[(b, mode)] / med[(a, mode)] if (a, mode) in med and (b, mode) in med else None
    out["ratios"] = {f"{a} over {b} {mode} (speed-up)": ratio(a, b, mode)
                     for mode in MODES for a, b in (("stable", "sdpa_cudnn"), ("stable", "sdpa_flash"),
                                                    ("stable_fix", "sdpa_cudnn"), ("sdpa_cudnn", "sdpa_flash"))}
    out["fix_cost"] = extra_time(med, "stable_fix")
    out["delta_fp32_o_cost"] = extra_time(med, "stable_delta_fp32_o")
    out["configs"] = chosen_configs(shape)
    del q, k, v, do
    torch.cuda.empty_cache()
    return out


def chosen_configs(shape) -> dict:
    """The autotuner's picks for this shape (forward per fix, backward), as strings."""
    from kernels.stable_bwd import attn_bwd_tuned
    from kernels.stable_fwd import attn_fwd_tuned
    T, D = shape[2], shape[3]
    pick = lambda tuner, key: [str(c) for k, c in tuner.cache.items() if tuple(k[:len(key)]) == key]  # noqa: E731
    return {"fwd": pick(attn_fwd_tuned, (T, D, True, False)), "fwd_fix": pick(attn_fwd_tuned, (T, D, True, True)),
            "bwd": pick(attn_bwd_tuned, (T, D, True))}


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run(scale: str, cfg: dict) -> dict:
    """The registered result `stable_attention_bench` (timings mean something only on the GPU: full scale only).
    cfg: shapes ([[B, H, T, D], …]), rounds. Returns {"data": {"shapes": one `bench_shape` record per shape,
    "device", "torch", "triton", "cuda", "cudnn", "rounds", "peak_tflops", "implementations"}}."""
    if not torch.cuda.is_available():
        raise RuntimeError("stable_attention_bench needs a CUDA GPU")
    log = lambda s: print(s, flush=True)  # noqa: E731
    impls = implementations()
    ceiling = matmul_ceiling(int(cfg["rounds"]))
    log(f"BF16 matmul {ceiling['size']}³: {ceiling['tflops']:.0f} TFLOP/s ({100 * ceiling['fraction_of_peak']:.0f} % "
        f"of the datasheet's {PEAK_TFLOPS:g})")
    results = []
    for shape in (tuple(int(x) for x in s) for s in cfg["shapes"]):
        log(f"shape {shape}")
        results.append(bench_shape(shape, impls, int(cfg["rounds"]), log))
        r = results[-1]
        log("  " + "; ".join(f"{k}: {v:.3f}" for k, v in r["ratios"].items() if v is not None))
        log(f"  fix cost: {r['fix_cost']}")
        log(f"  {LABELS['stable_delta_fp32_o']}, cost over stable: {r['delta_fp32_o_cost']} (target: fwd+bwd ≤ 0.03)")
    of_ceiling(results, ceiling["tflops"])
    return {"data": dict(shapes=results, device=torch.cuda.get_device_name(), torch=torch.__version__,
                         triton=triton.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                         rounds=int(cfg["rounds"]), peak_tflops=PEAK_TFLOPS, matmul=ceiling,
                         implementations=LABELS)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for stable_attention_bench.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of do_bench medians (default 3)")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                    help="comma-separated BxHxTxD (default: the brief's two shapes)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_stable_attention needs a CUDA GPU")
    data = run("full", {"shapes": [s.split("x") for s in a.shapes.split(",")], "rounds": a.rounds})["data"]
    meta = {k: data[k] for k in ("device", "torch", "triton", "cuda", "cudnn", "rounds", "peak_tflops", "matmul",
                                 "implementations")}
    meta |= {"python": platform.python_version(), "git_commit": _commit()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "stable_attention_bench.json"
    path.write_text(json.dumps({"meta": meta, "shapes": data["shapes"]}, indent=1))
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
