"""Benchmark (a script, not a test): TFLOP/s of our native `fa2` flash attention, with and without the β fix, vs
PyTorch SDPA pinned to its flash backend. GPU only. Causal, BF16, head dim 64 and 128, seq 1k–16k, batch·seq = 16k
tokens, heads·head_dim = 2048. Times are `triton.testing.do_bench` medians (ms) in one process on one GPU.

FLOPs (the Triton tutorial's convention): fwd = 4·B·H·N²·D, halved for causal; bwd = 2.5 × fwd; fwd+bwd = 3.5 × fwd.
The round_block kernels do more work than these FLOPs (the forward computes QKᵀ twice); their TFLOP/s use the same
count, so the ratios are ratios of times.

    python -m lib.experiments attention_bench --scale full [--out DIR]      (or: python benchmarks/bench_attention.py)

writes DIR/full/attention_bench.json (default DIR: ./results) with provenance; its configuration (sequence lengths,
tuning, the round_block and fa2 sections) is the registry entry's (lib/experiments/registry.toml). With tuning on, a small
hand-made list of launch configs is timed at N = 4096 per head dim and kernel, and the winner is used (and recorded).
The JSON also holds "path_agreement": how often native and emulated O agree bit for bit on random inputs, and their
max difference (tensor-core BF16 accumulation vs FP32 FMA accumulation).

--round-blocks adds the paper placement with round_block 0 / 512 / −1 (`lib.fp.numerics.Numerics.round_block`),
fwd and fwd+bwd, against SDPA, in "round_block_rows" (with "round_block_summary": each arm's time over round_block
0's), tuning the launch configs of the block kernels ("fwd_rb", "bwd_rb") first; --skip-fa2 leaves out the fa2
section (then the fa2 summary is empty).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import torch  # noqa: E402
import triton  # noqa: E402

from kernels import attention as attn_mod  # noqa: E402,F401
from kernels.attention import NATIVE_CONFIGS, attention  # noqa: E402
from lib.fp.numerics import get_profile  # noqa: E402

FWD_CANDIDATES = [dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
                  dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
                  dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=4),
                  dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)]
BWD_CANDIDATES = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
                  dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=3),
                  dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2),
                  dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)]
# The block kernels carry one more FP32 accumulator per output: configs with fewer registers per thread (8 warps, or
# no software pipelining) avoid spills (benchmarks/kernel_registers.py).
FWD_RB_CANDIDATES = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                     dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
                     dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2),
                     dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)]
BWD_RB_CANDIDATES = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2),
                     dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=1),
                     dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=1),
                     dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)]
ROUND_BLOCKS = (0, 512, -1)


def _inputs(N, D, dtype=torch.bfloat16, requires_grad=True):
    B, H = max(1, 16384 // N), 2048 // D
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((B, H, N, D), device="cuda", dtype=dtype, generator=g).requires_grad_(requires_grad)
               for _ in range(3))
    return q, k, v


def _sdpa(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _bench(fn, mode, q, k, v):
    from triton.testing import do_bench
    if mode == "fwd":
        return do_bench(lambda: fn(q, k, v))
    o = fn(q, k, v)
    do = torch.randn_like(o)
    if mode == "bwd":
        return do_bench(lambda: o.backward(do, retain_graph=True), grad_to_none=[q, k, v])

    def both():
        fn(q, k, v).backward(do)
    return do_bench(both, grad_to_none=[q, k, v])


def _flops(B, H, N, D, mode):
    f = 4.0 * B * H * N * N * D * 0.5
    return f * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[mode]


def _paper(rb, fix=None):
    nm = get_profile("paper").replace(round_block=rb)
    return lambda q, k, v: attention(q, k, v, causal=True, numerics=nm, fix=fix, path="native")


def tune(D, log, kernels=("fwd", "bwd")):
    """Pick the fastest candidate config per kernel at N = 4096 (fwd alone; bwd via backward time): the fa2 kernels
    ("fwd", "bwd") and/or the paper placement's round_block = 512 kernels ("fwd_rb", "bwd_rb")."""
    q, k, v = _inputs(4096, D)
    table = {"fwd": (FWD_CANDIDATES, "fwd", lambda a, b, c: attention(a, b, c, causal=True, path="native")),
             "bwd": (BWD_CANDIDATES, "bwd", lambda a, b, c: attention(a, b, c, causal=True, path="native")),
             "fwd_rb": (FWD_RB_CANDIDATES, "fwd", _paper(512)), "bwd_rb": (BWD_RB_CANDIDATES, "bwd", _paper(512))}
    out = {}
    for name in kernels:
        cands, mode, fn = table[name]
        key = (name, D <= 64)
        best = None
        for cfg in cands:
            NATIVE_CONFIGS[key] = dict(cfg)
            try:
                ms = _bench(fn, mode, q, k, v)
            except Exception as e:  # e.g. out of shared memory for this config
                log(f"  D={D} {name} {cfg}: failed ({type(e).__name__}: {str(e)[:80]})")
                continue
            log(f"  D={D} {name} {cfg}: {ms:.3f} ms")
            if best is None or ms < best[0]:
                best = (ms, cfg)
        NATIVE_CONFIGS[key] = dict(best[1])
        out[name] = {"config": best[1], "ms_at_4096": best[0]}
    return out


def round_block_rows(D, seqs, log):
    """Paper placement with round_block 0 / 512 / −1 and SDPA: fwd and fwd+bwd ms and TFLOP/s per seq length."""
    rows = []
    impls = {f"paper_rb{rb}": _paper(rb) for rb in ROUND_BLOCKS}
    impls["paper_rb512_fix"] = _paper(512, "beta")
    impls["sdpa_flash"] = _sdpa
    for N in seqs:
        q, k, v = _inputs(N, D)
        B, H = q.shape[0], q.shape[1]
        for mode in ("fwd", "fwd+bwd"):
            row = {"D": D, "N": N, "B": B, "H": H, "mode": mode}
            for name, fn in impls.items():
                ms = _bench(fn, mode, q, k, v)
                row[f"{name}_ms"] = ms
                row[f"{name}_tflops"] = _flops(B, H, N, D, mode) / ms * 1e-9
            for rb in ROUND_BLOCKS[1:]:
                row[f"rb{rb}_over_rb0"] = row[f"paper_rb{rb}_ms"] / row["paper_rb0_ms"]
            row["rb0_over_sdpa"] = row["paper_rb0_ms"] / row["sdpa_flash_ms"]
            log(f"D={D} N={N:5d} {mode:8s} " + "  ".join(f"{n} {row[n + '_tflops']:6.1f}" for n in impls) +
                f" TFLOP/s; rb512/rb0 {row['rb512_over_rb0']:.3f}, rb-1/rb0 {row['rb-1_over_rb0']:.3f}")
            rows.append(row)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def path_agreement(D=64, N=1000):
    """Native vs emulated forward on random BF16 inputs with the same tiles: bitwise-equal fraction, max |ΔO|."""
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn((2, 4, N, D), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    res = {}
    for fix, nm in ((None, "fa2"), ("beta", "fa2"), (None, "paper_rb512"), ("beta", "paper_rb512")):
        num = get_profile("paper").replace(round_block=512) if nm == "paper_rb512" else nm
        o_n = attention(q, k, v, causal=True, fix=fix, numerics=num, path="native", block=(64, 64)).float()
        o_e = attention(q, k, v, causal=True, fix=fix, numerics=num, path="emulated", block=(64, 64)).float()
        ref = torch.softmax((q.double() @ k.double().transpose(-1, -2) / D ** 0.5).masked_fill(
            torch.ones(N, N, dtype=torch.bool, device="cuda").triu(1), float("-inf")), -1) @ v.double()
        res[str(fix) if nm == "fa2" else f"{nm}, fix {fix}"] = {"bitwise_equal_fraction": (o_n == o_e).float().mean().item(),
                         "max_abs_diff": (o_n - o_e).abs().max().item(),
                         "max_abs_err_native_vs_fp64": (o_n.double() - ref).abs().max().item(),
                         "max_abs_err_emulated_vs_fp64": (o_e.double() - ref).abs().max().item(),
                         "shape": [2, 4, N, D], "causal": True, "block": [64, 64]}
    return res


def _data(rows, tuned, agree, rb_rows) -> dict:
    fb = [r for r in rows if r["mode"] == "fwd+bwd"]
    summary = {"complete": agree is not None}
    if fb:
        summary.update({"fwd+bwd_ratio_vs_sdpa_min": min(r["ratio_ours_vs_sdpa"] for r in fb),
                        "fwd+bwd_ratio_vs_sdpa_median": sorted(r["ratio_ours_vs_sdpa"] for r in fb)[len(fb) // 2],
                        "fix_overhead_fwd+bwd_max": max(r["fix_overhead"] for r in fb),
                        "fix_overhead_fwd+bwd_median": sorted(r["fix_overhead"] for r in fb)[len(fb) // 2]})
    rb_summary = {f"D{r['D']}_N{r['N']}_{r['mode']}": {k: r[k] for k in r if k.endswith("_over_rb0")
                                                         or k == "rb0_over_sdpa"} for r in rb_rows}
    print(f"summary: {summary}", flush=True)
    return {"rows": rows, "summary": summary, "tuned": {str(d): t for d, t in tuned.items()},
            "round_block_rows": list(rb_rows), "round_block_summary": rb_summary,
            "configs_used": {f"{k[0]}_{'d<=64' if k[1] else 'd>64'}": v for k, v in NATIVE_CONFIGS.items()},
            "path_agreement": agree}


def run(scale: str, cfg: dict) -> dict:
    """cfg: seqs (sequence lengths), head_dims, tune (time the candidate launch configs first), round_blocks (the
    paper placement with round_block 0 / 512 / -1), fa2 (the fa2 / fa2+fix section). GPU only."""
    if not torch.cuda.is_available():
        raise RuntimeError("attention_bench needs a CUDA GPU")
    log = lambda s: print(s, flush=True)  # noqa: E731
    seqs = list(cfg["seqs"])
    impls = {"ours": lambda q, k, v: attention(q, k, v, causal=True, numerics="fa2", path="native"),
             "ours_fix": lambda q, k, v: attention(q, k, v, causal=True, numerics="fa2", fix="beta", path="native"),
             "sdpa_flash": _sdpa}
    tuned, rows, rb_rows = {}, [], []
    for D in cfg["head_dims"]:
        if cfg["tune"]:
            log(f"tuning D={D}")
            tuned[D] = tune(D, log, (("fwd", "bwd") if cfg["fa2"] else ()) +
                            (("fwd_rb", "bwd_rb") if cfg["round_blocks"] else ()))
        if cfg["round_blocks"]:
            rb_rows += round_block_rows(D, seqs, log)
        for N in seqs if cfg["fa2"] else ():
            q, k, v = _inputs(N, D)
            B, H = q.shape[0], q.shape[1]
            for mode in ("fwd", "bwd", "fwd+bwd"):
                row = {"D": D, "N": N, "B": B, "H": H, "mode": mode}
                for name, fn in impls.items():
                    ms = _bench(fn, mode, q, k, v)
                    row[f"{name}_ms"] = ms
                    row[f"{name}_tflops"] = _flops(B, H, N, D, mode) / ms * 1e-9
                row["ratio_ours_vs_sdpa"] = row["sdpa_flash_ms"] / row["ours_ms"]
                row["fix_overhead"] = row["ours_fix_ms"] / row["ours_ms"] - 1.0
                log(f"D={D} N={N:5d} {mode:8s} ours {row['ours_tflops']:6.1f}  fix {row['ours_fix_tflops']:6.1f}  "
                    f"sdpa {row['sdpa_flash_tflops']:6.1f} TFLOP/s  ratio {row['ratio_ours_vs_sdpa']:.3f}  "
                    f"fix overhead {100 * row['fix_overhead']:+.2f}%")
                rows.append(row)
            del q, k, v
            torch.cuda.empty_cache()
    agree = path_agreement()
    log(f"path agreement: {agree}")
    return {"data": _data(rows, tuned, agree, rb_rows), "seeds": [0, 1],
            "config": {"causal": True, "dtype": "bfloat16", "tokens_per_batch": 16384, "heads_x_dim": 2048,
                       "timer": "triton.testing.do_bench median"}}


def main(argv=None) -> int:
    """The registry entry through `python -m lib.experiments` (``--quick``: sequence lengths 1k and 4k only)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="results root (writes OUT/full/attention_bench.json)")
    ap.add_argument("--quick", action="store_true", help="sequence lengths 1k and 4k only")
    a = ap.parse_args(argv)
    from lib.book.cli import main as cli
    return cli(["attention_bench", "--scale", "full"] + (["--out", a.out] if a.out else [])
               + (["--set", "seqs=[1024,4096]"] if a.quick else []))


if __name__ == "__main__":
    raise SystemExit(main())
