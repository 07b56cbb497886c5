"""Attention backends: q, k, v (B, H, T, D) -> O (B, H, T, D), one function per backend, and the dispatch by spec.

* ``"ours"`` — `kernels.attention.attention` with any numerics / fix / β / tie tolerance (imported lazily, so this
  module works before or without the kernel); "+zero_rows" runs the plain kernel and zeroes the rows whose exact-rule
  shift exceeds the spec's `zero_at` (`lib.training.zero_rows`).
* ``"sdpa"`` — `torch.nn.functional.scaled_dot_product_attention`, pinned to the FlashAttention backend on CUDA.
* ``"naive"`` — softmax(scale·QKᵀ + mask)·V written out in FP32 with autocast off.
* ``"authors"``, ``"dose"`` — `lib.training.authors_backend`, `lib.training.dose_backend`.

`BACKENDS` maps a spec's backend name (`lib.training.spec.AttnSpec.backend`) to its function; `run_backend` calls it,
`attend` honours a spec's per-head override. `AttnCall` carries what a backend may need beyond q, k, v.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lib.training import authors_backend, dose_backend
from lib.training.zero_rows import OURS_ZERO_AT, count_rows, ours_zero_mask, zero_rows

__all__ = ["BACKENDS", "AttnCall", "attend", "run_backend", "naive_attention", "sdpa_attention", "ours_attention"]


def naive_attention(q, k, v, *, causal=True, scale=None):
    """softmax(scale·QKᵀ + causal mask)·V in FP32 with autocast off; q, k, v (B, H, T, D); returns q's dtype."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    with torch.autocast(device_type=q.device.type, enabled=False):
        qf, kf, vf = q.float(), k.float(), v.float()
        s = torch.matmul(qf, kf.transpose(-2, -1)) * scale
        if causal:
            T, S = s.shape[-2:]
            mask = torch.ones(T, S, dtype=torch.bool, device=s.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
        o = torch.matmul(torch.softmax(s, dim=-1), vf)
    return o.to(q.dtype)


def sdpa_attention(q, k, v, *, causal=True, scale=None):
    """PyTorch SDPA; pinned to the FlashAttention backend on CUDA (errors if that backend cannot run)."""
    if q.device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def ours_attention(q, k, v, *, spec, causal=True, scale=None, call=None):
    """Our Triton flash attention (`kernels.attention.attention`), imported on first use. "+zero_rows": the plain
    kernel, then the rows whose exact-rule shift exceeds `spec.zero_at` zeroed with no gradient; their count goes
    to `call.stats` when that is a dict."""
    try:
        from kernels.attention import attention
    except ImportError as e:  # the kernel is written in parallel; say clearly what is missing
        raise ImportError(f"attention backend 'ours' needs kernels.attention: {e}") from e
    fix = spec.fix
    zero = fix.kind == "zero_rows"
    with torch.autocast(device_type=q.device.type, enabled=False):
        o = attention(q, k, v, causal=causal, scale=scale, numerics=spec.numerics, fix=None if zero else fix.kind,
                      beta=fix.beta, tie_tol=fix.tie_tol, max_shift=fix.max_shift, path=spec.path)
        if not zero:
            return o
        mask = ours_zero_mask(q, k, numerics=spec.numerics, beta=fix.beta, tie_tol=fix.tie_tol, causal=causal,
                              scale=scale, zero_at=OURS_ZERO_AT if spec.zero_at is None else spec.zero_at)
    count_rows(getattr(call, "stats", None), mask)
    return zero_rows(o, mask)


def _dose_attention(q, k, v, *, spec, causal=True, scale=None, call=None):
    lp = lambda q_, k_, v_: run_backend(spec.opts.placement, q_, k_, v_, causal=causal, scale=scale)  # noqa: E731
    return dose_backend.attention(q, k, v, spec=spec, causal=causal, scale=scale, call=call, lp_forward=lp)


# backend name -> f(q, k, v, *, spec, causal, scale, call) -> O
BACKENDS = {
    "sdpa": lambda q, k, v, *, spec, call=None, **kw: sdpa_attention(q, k, v, **kw),
    "naive": lambda q, k, v, *, spec, call=None, **kw: naive_attention(q, k, v, **kw),
    "ours": ours_attention,
    "authors": authors_backend.attention,
    "dose": _dose_attention,
}


@dataclass
class AttnCall:
    """What a backend may need beyond q, k, v: the layer, the training step and run seed (the dose backend's random
    signs), and `stats`, a dict the backend adds counters to at telemetry steps (None otherwise)."""
    layer: int = 0
    step: int = 0
    seed: int = 0
    stats: dict | None = None


def run_backend(spec, q, k, v, *, causal=True, scale=None, call: AttnCall | None = None):
    return BACKENDS[spec.backend](q, k, v, spec=spec, causal=causal, scale=scale, call=call)


def attend(spec, q, k, v, call: AttnCall | None = None):
    """Causal attention of q, k, v (B, H, T, D) with `spec`, honouring its per-head override (both parts get
    `call`, so their counters add up)."""
    if spec.heads is None:
        return run_backend(spec, q, k, v, causal=True, call=call)
    idx, other = spec.heads
    H = q.shape[1]
    if max(idx) >= H:
        raise ValueError(f"per-head override names head {max(idx)} but the layer has {H} heads")
    sel = torch.zeros(H, dtype=torch.bool)
    sel[list(idx)] = True
    a = torch.nonzero(~sel).flatten().tolist()
    b = torch.nonzero(sel).flatten().tolist()
    parts = {}
    if a:
        parts.update(zip(a, run_backend(spec, q[:, a], k[:, a], v[:, a], causal=True, call=call).unbind(1)))
    parts.update(zip(b, run_backend(other, q[:, b], k[:, b], v[:, b], causal=True, call=call).unbind(1)))
    return torch.stack([parts[h] for h in range(H)], dim=1)
