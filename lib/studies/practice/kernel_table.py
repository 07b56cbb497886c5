"""The kernel bias table's parts: its planted inputs, the kernels a user calls, and the error along sign(V).

The run is `lib.studies.practice.kernel_bias_table` (registry entry ``kernel_bias_table``); chapter 8's check of the
remainder's sign (`reading.remainder_sign_check`) calls these parts directly.

* `planted(B, H, T, D, gap, seed, device, rest)`: q, k, v in BF16 with two keys (0 and 1) of equal BF16 vectors
  k₀ = k₁ = a·e₀ and every query q_i = a·e₀ + ε_i with ε_i ⊥ e₀, so S_i0 = S_i1 = scale·a² exactly: a tied maximum
  `gap` nats above the other keys (scale·ε_i·k_j); gap ≈ 14 puts the remainder r = Σ_{j≥2} exp(S_ij − max) inside the
  sticky-bit band at T = 1024. V₀, V₁ of one sign in every feature (independent magnitudes, so their sum needs a
  ninth mantissa bit half the time: the carry tie); the other keys' V of the same sign (`rest="tied"`: the remainder
  adds to the tied sum's magnitude, as in the paper's worked example) or of random sign (`rest="random"`).
* `fp64_attention(q, k, v, causal)`: the reference.
* `kernel_fn(name)`: `KERNELS` as callables (q, k, v, causal) → O — SDPA's flash, cuDNN, memory-efficient and math
  backends; `stable_attention` without and with the fix (β = 2); the research kernel's `fa2` and `paper` (512-key
  rounding blocks) placements, without and with the fix (paper: β = 7 as in the paper's figures, with the guard);
  the authors' code eager and under `torch.compile`, without and with their fix (β = 2, their current default).
* `along_sign(o, o_ref, sign)`: (O − O_ref)·sign/ulp(O_ref); `problem_means`, `summarize`: the mean per problem and
  over problems (normal approximation: the chapter widens it to Student's t).
"""
from __future__ import annotations

import math

import numpy as np
import torch

KERNELS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math", "stable", "stable+fix", "ours_fa2",
           "ours_fa2+fix", "ours_paper", "ours_paper+fix", "authors", "authors+fix", "authors_compiled",
           "authors_compiled+fix")
LABELS = {
    "sdpa_flash": "PyTorch SDPA, flash backend", "sdpa_cudnn": "PyTorch SDPA, cuDNN backend",
    "sdpa_efficient": "PyTorch SDPA, memory-efficient backend", "sdpa_math": "PyTorch SDPA, math backend",
    "stable": "stable_attention", "stable+fix": "stable_attention, fix β = 2",
    "ours_fa2": "research kernel, FA2 numerics", "ours_fa2+fix": "research kernel, FA2 numerics, fix β = 2",
    "ours_paper": "research kernel, paper placement (512-key blocks)",
    "ours_paper+fix": "research kernel, paper placement, fix β = 7",
    "authors": "authors' code, eager", "authors+fix": "authors' code, eager, their fix (β = 2)",
    "authors_compiled": "authors' code, torch.compile", "authors_compiled+fix": "authors' code, compiled, their fix",
}


# ------------------------------------------------------------------------------------------------ inputs
def planted(B: int, H: int, T: int, D: int, gap: float, seed: int, device, rest: str = "tied") -> tuple:
    """(q, k, v) BF16 (B, H, T, D) with a tied maximum at keys 0 and 1, `gap` nats above the others, V₀ and V₁ of
    one sign per feature (module docstring); the other keys' V of the tied sign (`rest="tied"`) or of random sign
    (`rest="random"`, same magnitudes). Also returns the sign of the tied V, (B, H, D)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    scale = 1.0 / math.sqrt(D)
    a = float(torch.tensor(math.sqrt(gap / scale)).to(torch.bfloat16))      # a BF16 value: a² exact in FP32
    q = torch.randn(B, H, T, D, generator=g) * 0.3
    k = torch.randn(B, H, T, D, generator=g) * 0.3
    q[..., 0] = a
    k[..., 0] = 0.0
    k[:, :, :2] = 0.0
    k[:, :, :2, 0] = a
    sign = torch.where(torch.rand(B, H, 1, D, generator=g) < 0.5, -1.0, 1.0)
    # The other keys' V share the tied keys' sign, as in the paper's worked example: the sticky bit breaks the carry
    # tie away from zero only when the remainder adds to the tied sum's magnitude (a remainder of random sign breaks
    # it either way and the mean error is ≈ 0 — the practice chapter's remainder-sign check).
    v = torch.randn(B, H, T, D, generator=g)
    if rest == "tied":
        v = sign * v.abs()
    elif rest != "random":
        raise ValueError(f"rest must be 'tied' or 'random', got {rest!r}")
    v[:, :, :2] = sign * (0.5 + torch.rand(B, H, 2, D, generator=g))       # |V| in [0.5, 1.5): one sign
    to = lambda t: t.to(torch.bfloat16).to(device)  # noqa: E731
    return to(q), to(k), to(v), sign[:, :, 0].to(device)


def fp64_attention(q, k, v, causal: bool):
    qd, kd, vd = q.double(), k.double(), v.double()
    s = torch.matmul(qd, kd.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), vd)


# ------------------------------------------------------------------------------------------------ kernels
def _sdpa(backend_name):
    def f(q, k, v, causal):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        be = getattr(SDPBackend, backend_name)
        with sdpa_kernel(be):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def _ours(numerics, fix, beta):
    def f(q, k, v, causal):
        from kernels.attention import attention
        return attention(q, k, v, causal=causal, numerics=numerics, fix=fix, beta=beta)   # native on CUDA
    return f


def _stable(fix):
    def f(q, k, v, causal):
        from kernels.stable_attention import stable_attention
        return stable_attention(q, k, v, is_causal=causal, fix=fix, beta=2.0)
    return f


_COMPILED = {}


def _authors(compiled: bool, fix: bool):
    def f(q, k, v, causal):
        from lib.training.authors_fa import authors_attention

        def call(q_, k_, v_):
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                return authors_attention(q_, k_, v_, causal=causal, stable=fix, beta=2.0)
        if compiled:
            key = (causal, fix)
            if key not in _COMPILED:
                _COMPILED[key] = torch.compile(call)
            return _COMPILED[key](q, k, v)
        return call(q, k, v)
    return f


def kernel_fn(name: str):
    from lib.fp.numerics import PAPER
    table = {
        "sdpa_flash": _sdpa("FLASH_ATTENTION"), "sdpa_cudnn": _sdpa("CUDNN_ATTENTION"),
        "sdpa_efficient": _sdpa("EFFICIENT_ATTENTION"), "sdpa_math": _sdpa("MATH"),
        "stable": _stable(None), "stable+fix": _stable("beta"),
        "ours_fa2": _ours("fa2", None, 2.0), "ours_fa2+fix": _ours("fa2", "beta", 2.0),
        "ours_paper": _ours(PAPER.replace(round_block=512), None, 7.0),
        "ours_paper+fix": _ours(PAPER.replace(round_block=512), "beta", 7.0),
        "authors": _authors(False, False), "authors+fix": _authors(False, True),
        "authors_compiled": _authors(True, False), "authors_compiled+fix": _authors(True, True),
    }
    return table[name]


# ------------------------------------------------------------------------------------------------ measuring
def along_sign(o, o_ref, sign) -> torch.Tensor:
    """(O − O_ref)·sign / ulp_bf16(O_ref), FP64, elementwise."""
    from lib.training.inject import ulp_bf16
    u = ulp_bf16(o_ref.float()).double().clamp_min(1e-300)
    return (o.double() - o_ref) * sign / u


def problem_means(e: torch.Tensor, mask: torch.Tensor, problem_dims: int) -> np.ndarray:
    """Mean of e over the mask within each problem (the first `problem_dims` axes), for problems with ≥ 1 pair."""
    flat_e = e.reshape(*e.shape[:problem_dims], -1)
    flat_m = mask.reshape(*mask.shape[:problem_dims], -1).double()
    n = flat_m.sum(-1)
    s = (flat_e * flat_m).sum(-1)
    ok = n > 0
    return (s[ok] / n[ok]).flatten().cpu().numpy()


def summarize(means: np.ndarray) -> dict:
    """Mean over problems and its 95 % interval (normal approximation over the problem means)."""
    n = int(len(means))
    if n == 0:
        return dict(mean=float("nan"), lo=float("nan"), hi=float("nan"), n_problems=0)
    m = float(means.mean())
    half = 1.96 * float(means.std(ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
    return dict(mean=m, lo=m - half, hi=m + half, n_problems=n)
