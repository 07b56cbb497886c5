"""Chapter 1 through the Triton kernel `kernels/row_pv.py`: does the hardware reproduce the software bias?

Same inputs (`lib.fp.rounding_bias.make_rows`, all V negative, N = 256) through
* ``numpy``     the numpy emulation with sequential FP32 accumulation (the chapter's Monte Carlo),
* ``emulated``  the kernel's emulated path (FP32 operands on the BF16 grid, `tl.dot(..., input_precision="ieee")`,
                RNE/SR through `kernels.rounding`): the CPU interpreter in CI, CUDA cores on the GPU;
* ``native``    (``full`` only, GPU) BF16 P̄ and V into the tensor cores, FP32 accumulator, `.to(tl.bfloat16)`.
For k tied maxima × gap g × {RNE, β shift, stochastic rounding}: mean signed errors of P̄V and of O in both orders
(ULPs, 95 % CIs over problems), the theory prediction from each path's own FP32 accumulator, the fraction of
outputs whose accumulator lost the remainder, and how often native and emulated outputs agree bit for bit.
"""
from __future__ import annotations

import numpy as np

SEED = 20251005
BETA = 2.0


def kernel_as_emulation(out: dict, V: np.ndarray) -> dict:
    """Kernel outputs (torch tensors) -> the dict layout of `lib.fp.rounding_bias.emulate_rows` (numpy), with the
    exact float64 reference computed from the kernel's own rounded P̄ operand."""
    p = out["p"].double().cpu().numpy()
    V64 = V.astype(np.float64)
    pv_exact = np.einsum("brn,bnd->brd", p, V64)
    ell_exact = p.sum(axis=-1, keepdims=True)
    tied_sum = np.einsum("brn,bnd->brd", (p == 1.0).astype(np.float64), V64)
    g = {k: out[k].float().cpu().numpy() for k in ("pv", "o_rtn", "o_ntr", "acc", "ell")}
    return {"pv_lp": g["pv"], "o_rtn": g["o_rtn"], "o_ntr": g["o_ntr"], "pv_exact": pv_exact,
            "o_exact": pv_exact / ell_exact, "pv_fp32": g["acc"], "ell_fp32": g["ell"][..., None],
            "tied_sum": tied_sum}


def theory_for(em: dict, k: int, m: int = 7) -> dict:
    """Theory predictions of the mean P̄V and O_ntr errors from a path's own FP32 accumulator (all V negative)."""
    from lib.fp import theory
    from lib.fp.bf16 import ulp
    res = {}
    rho = np.abs(em["pv_fp32"].astype(np.float64) - em["tied_sum"]) * 2.0 ** m
    exact_rho = np.abs(em["pv_exact"] - em["tied_sum"]) * 2.0 ** m
    res["rho_lost"] = float(((rho == 0) & (exact_rho > 0)).mean())
    res["rho_mean"] = float(rho.mean())
    u, inv = np.unique(rho, return_inverse=True)
    acc_err = (em["pv_fp32"] - em["pv_exact"]) / ulp(em["pv_exact"], m)       # FP32 accumulation error, ULPs
    res["theory_pv"] = float(-theory.expected_error_float(k, u, m)[inv.reshape(rho.shape)].mean() + acc_err.mean())
    if k in (1, 2, 4, 8):
        o32 = (em["pv_fp32"] / em["ell_fp32"]).astype(np.float32).astype(np.float64)
        eff = -(o32 - em["tied_sum"] / k) * 2.0 ** m * k
        u, inv = np.unique(eff, return_inverse=True)
        res["theory_o_ntr"] = float(-theory.expected_error_float(k, u, m)[inv.reshape(eff.shape)].mean()
                                    + ((o32 - em["o_exact"]) / ulp(em["o_exact"], m)).mean())
    return res


def run(scale: str, cfg: dict) -> dict:
    """cfg: ks (tied maxima), gaps (score units), n_problems per cell. The native tensor-core path runs at full
    scale on a GPU only."""
    import torch

    import lib.book.setup  # noqa: F401
    from kernels.row_pv import row_pv
    from lib.fp.rounding_bias import emulate_rows, make_rows, summarize
    from lib.book.setup import DEVICE, INTERPRET
    native_ok = scale == "full" and not INTERPRET and DEVICE == "cuda"
    ks, gaps, P = cfg["ks"], cfg["gaps"], cfg["n_problems"]
    cells, agree = [], []
    for i, (k, g) in enumerate((k, g) for k in ks for g in gaps):
        seed = SEED + 100 * i
        S, V = make_rows(np.random.default_rng(seed), P, 16, 256, 16, k, g)
        St, Vt = torch.from_numpy(S).to(DEVICE), torch.from_numpy(V).to(DEVICE)
        for meth in ("rne", "beta", "sr"):
            kw = {"beta": BETA if meth == "beta" else None, "stochastic": meth == "sr", "seed": seed + 7}
            paths = {}
            rng = np.random.default_rng(seed + 1)
            paths["numpy"] = emulate_rows(S, V, 7, beta=kw["beta"], stochastic=meth == "sr", rng=rng)
            paths["emulated"] = kernel_as_emulation(row_pv(St, Vt, 7, **kw), V)
            if native_ok:
                paths["native"] = kernel_as_emulation(row_pv(St, Vt, 7, native=True, **kw), V)
            for name, em in paths.items():
                rec = {"k": k, "gap": g, "method": meth, "path": name, "seed": seed, **summarize(em)}
                if meth == "rne":
                    rec.update(theory_for(em, k))
                cells.append(rec)
            if "native" in paths:
                a, b = paths["native"], paths["emulated"]
                agree.append({"k": k, "gap": g, "method": meth,
                              **{f"{o}_equal": float((a[o] == b[o]).mean()) for o in ("pv_lp", "o_rtn", "o_ntr")},
                              "acc_equal": float((a["pv_fp32"] == b["pv_fp32"]).mean()),
                              "p_equal": float((np.asarray(a["pv_exact"]) == np.asarray(b["pv_exact"])).mean())})
    return {"data": {"cells": cells, "agreement": agree, "native_measured": native_ok,
                     "device": torch.cuda.get_device_name(0) if native_ok else "cpu (Triton interpreter)"},
            "config": {"ks": ks, "gaps": gaps, "n_problems": P, "rows": 16, "n_keys": 256, "features": 16,
                       "beta": BETA, "frac_neg": 1.0},
            "seeds": [SEED]}


def gpu_summary_md(data: dict, label: str, k: int = 2, gap: float = 14.0) -> str:
    """One Markdown paragraph comparing the native and emulated paths of a ``full`` result (for chapter 1)."""
    by = {(c["k"], c["gap"], c["method"], c["path"]): c for c in data["cells"]}
    if (k, gap, "rne", "native") not in by:
        raise KeyError(f"no native cell for k={k}, gap={gap} in this result")
    nat, emu = by[(k, gap, "rne", "native")], by[(k, gap, "rne", "emulated")]
    nat_b, nat_s = by[(k, gap, "beta", "native")], by[(k, gap, "sr", "native")]
    agr = [a for a in data["agreement"] if a["method"] == "rne"]
    return (f"On the GPU ({label}), for $k={k}$, $g={gap:g}$: the native tensor-core path gives "
            f"{nat['pv']:+.3f} ± {nat['pv_ci']:.3f} ULP for $\\bar PV$, the emulated path {emu['pv']:+.3f} ± "
            f"{emu['pv_ci']:.3f}, and the theory fed with the native accumulator {nat['theory_pv']:+.3f}. "
            f"Round-then-normalise $O$: native {nat['o_rtn']:+.3f} ± {nat['o_rtn_ci']:.3f}; normalise-then-round $O$: "
            f"native {nat['o_ntr']:+.3f} ± {nat['o_ntr_ci']:.3f} (theory from its accumulator "
            f"{nat.get('theory_o_ntr', float('nan')):+.3f}), emulated {emu['o_ntr']:+.3f} ± {emu['o_ntr_ci']:.3f}. "
            f"With the β shift the native $\\bar PV$ error is {nat_b['pv']:+.3f} ± {nat_b['pv_ci']:.3f}, with stochastic "
            f"rounding {nat_s['pv']:+.3f} ± {nat_s['pv_ci']:.3f}. Native and emulated $\\bar PV$ outputs agree bit for "
            f"bit in {min(a['pv_lp_equal'] for a in agr):.1%} to {max(a['pv_lp_equal'] for a in agr):.1%} of outputs "
            f"per cell (FP32 accumulators: {min(a['acc_equal'] for a in agr):.1%} to "
            f"{max(a['acc_equal'] for a in agr):.1%}); the native accumulator lost the whole remainder in "
            f"{nat['rho_lost']:.1%} of outputs (emulated: {emu['rho_lost']:.1%}).")
