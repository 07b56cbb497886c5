"""Diagnostic (GPU): where the research kernel's emulated backward differs from the CPU oracle on causal planted ties.

    python benchmarks/diagnose_emulated_dq.py > diag.txt

For each launch configuration of the emulated path (warps, pipeline stages) it runs the research kernel's emulated
forward once and its backward, on the planted causal ties of tests/gpu/test_stable_attention_gpu.py, and prints per
gradient the rows farther than 0.02 from the CPU oracle (`lib.fp.reference`, numerics "fa2", 64-key tiles) and the
largest difference; δ against the oracle's δ; and which 64-row tiles and key tiles the bad rows sit in. Then, for the
census GPU tests, the authors' BF16 einsum against our FP32-product-then-round placement with cuBLAS's reduced-precision
BF16 reductions allowed (PyTorch's default) and forbidden: the share of equal elements and the largest gap in BF16 ULPs.
"""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import lib.book.setup  # noqa: E402,F401
import importlib  # noqa: E402
A = importlib.import_module("kernels.attention")   # the module (the package exports a function of that name)
from lib.fp.numerics import get_profile  # noqa: E402
from lib.fp.reference import emulate_backward, emulate_forward  # noqa: E402


def _load(path):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dq_configs():
    T = _load(ROOT / "tests/gpu/test_stable_attention_gpu.py")
    q, k, v, do = T._ties()
    q, k, v, do = (x.expand(1, 2, *x.shape[-2:]).contiguous() if x.dim() == 2 else x.contiguous() for x in (q, k, v, do))
    nm = get_profile("fa2")
    kw = dict(causal=True, scale=0.125, block_m=64, block_n=64, fix=None, beta=2.0, max_shift=64.0)
    x = [t.detach().float().cpu() for t in (q, k, v, do)]
    f = emulate_forward(*x[:3], "fa2", **kw)
    g = emulate_backward(*x[:3], f.o, f.lse, x[3], "fa2", **kw)
    o, lse, _ = A.attention_fwd(q, k, v, causal=True, scale=0.125, nm=nm, fix=None, beta=2.0, tie_tol=0.0,
                                path="emulated", block=(64, 64))
    print(f"forward: O equal to the oracle's: {torch.equal(o.cpu(), torch.as_tensor(f.o))}; "
          f"lse max |Δ| {float((lse.cpu() - torch.as_tensor(f.lse)).abs().max()):.3g}")
    real = A._blocks
    for cfg in (dict(), dict(num_warps=4, num_stages=1), dict(num_warps=8), dict(num_warps=8, num_stages=1),
                dict(num_warps=16), dict(num_warps=2, num_stages=1)):
        A._blocks = lambda path, d, kernel, block, cfg=cfg: dict(real(path, d, kernel, block), **cfg)
        try:
            dq, dk, dv, delta = A.attention_bwd(do, q, k, v, o, lse, causal=True, scale=0.125, nm=nm, path="emulated",
                                                block=(64, 64))
            torch.cuda.synchronize()
        finally:
            A._blocks = real
        line = [f"config {cfg or 'default (4 warps, 3 stages)'}:"]
        line.append(f"δ max |Δ| {float((delta.cpu() - torch.as_tensor(g['delta'])).abs().max()):.3g}")
        for name, a in (("dq", dq), ("dk", dk), ("dv", dv)):
            d = (a.double().cpu() - torch.as_tensor(g[name], dtype=torch.float64)).abs().amax(-1)   # (B, H, T)
            bad = torch.nonzero(d > 0.02)
            tiles = sorted({int(t) // 64 for t in bad[:, -1]})
            line.append(f"{name}: {len(bad)} rows > 0.02 (max {float(d.max()):.4g}; 64-row tiles {tiles}; "
                        f"local rows {sorted({int(t) % 64 for t in bad[:, -1]})[:6]}…)")
        print("  ".join(line), flush=True)
    # The native path (what training runs): BF16 inputs, tensor-core products; not bit-exact, so only far rows count.
    qb, kb, vb, dob = (t.bfloat16() for t in (q, k, v, do))
    on, lsen, _ = A.attention_fwd(qb, kb, vb, causal=True, scale=0.125, nm=nm, fix=None, beta=2.0, tie_tol=0.0,
                                  path="native")
    dq, dk, dv, delta = A.attention_bwd(dob, qb, kb, vb, on, lsen, causal=True, scale=0.125, nm=nm, path="native")
    line = ["native path:"]
    for name, a in (("dq", dq), ("dk", dk), ("dv", dv)):
        d = (a.double().cpu() - torch.as_tensor(g[name], dtype=torch.float64)).abs().amax(-1)
        bad = torch.nonzero(d > 0.02)
        line.append(f"{name}: {len(bad)} rows > 0.02 (max {float(d.max()):.4g}; 64-row tiles "
                    f"{sorted({int(t) // 64 for t in bad[:, -1]})})")
    print("  ".join(line), flush=True)


def census_cublas():
    from benchmarks.bench_census import attention_shaped
    from lib import census as cs
    from lib.fp.bf16 import ulp
    from lib.training.authors_fa import authors_attention
    q, k, v = attention_shaped(2, 4, 1024, 64, peaked=True, device="cuda")
    s = cs.placement_scores(q.float(), k.float(), "authors", 64 ** -0.5, causal=False).cpu().numpy()
    sc = cs.placement_scores(q.float(), k.float(), "authors", 64 ** -0.5, causal=True)
    ours_o = cs.forward_rows(sc, v.float(), cs.placement_numerics("authors")).cpu().numpy()
    for allow in (True, False):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = allow
        with torch.autocast("cuda", dtype=torch.bfloat16):
            theirs = (torch.einsum("...id,...jd->...ij", q, k) * 64 ** -0.5).float().cpu().numpy()
            o = authors_attention(q, k, v, causal=True, q_tile=512, k_tile=512).float().cpu().numpy()
        gap = np.abs(s - theirs) / ulp(theirs)
        print(f"reduced-precision BF16 reductions {'allowed' if allow else 'forbidden'}: S equal on "
              f"{(s == theirs).mean():.6f}, > 1 ULP on {int((gap > 1).sum())} of {gap.size} (max {gap.max():.3g} "
              f"ULP); O equal on {(ours_o == o).mean():.4f}, > 1 ULP on {int((np.abs(ours_o - o) > ulp(o)).sum())}",
              flush=True)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True


if __name__ == "__main__":
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    dq_configs()
    census_cublas()
