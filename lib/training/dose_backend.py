"""The δ-dose backend: FP32 attention whose backward receives a dosed copy of a low-precision placement's δ error.

Causal test of the δ channel. The forward is FP32 attention (as the "naive" backend: O = softmax(α·QKᵀ + mask)·V in
FP32, returned in q's dtype). On the same q, k, v it also runs a low-precision placement (our kernel's "paper",
"fa2", "paper+fix", ... or the authors' algorithm) with no gradient, and keeps its error E = O_lp − O_fp32 (FP32,
(B, H, T, D)). The backward is the FA-style backward in FP32 with

    Δδ = rowsum(dO ∘ E)                (B, H, T): the error the placement's O puts into δ = rowsum(dO ∘ O)
    δ  = rowsum(dO ∘ O_fp32) + λ·c(Δδ)
    dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − δ),  dQ = α·dS K,  dK = α·dSᵀ Q       (all FP32, P causal)

so only δ carries the placement's error, amplified by λ ≥ 0 and reshaped by the component c:

* ``true``   — Δδ itself (λ = 1: the placement's natural δ error, with an FP32 forward);
* ``flip``   — −Δδ;
* ``random`` — a random sign per row times Δδ (the signs from a torch generator seeded from the run seed, the step
  and the layer, so a run is reproducible and every step draws new signs);
* ``bias``   — the mean of Δδ over the rows of each (batch, head), broadcast over its rows ("bias only");
* ``noise``  — Δδ minus that mean ("noise only"); ``true`` = ``bias`` + ``noise``.

λ = 0 adds nothing (the FP32 backward, bit for bit, whatever the placement and component).

Spec strings (parsed by `lib.training.spec.AttnSpec.parse`):

    dose/<placement>[/c=<component>][/lam=<λ>]

where <placement> is any spec of our kernel (``<profile>[/<Numerics field>=<value>...][+fix|+fix_split]``) or of
the authors' backend (``authors[/key=value...][+fix]``); the ``c=`` and ``lam=`` items may stand anywhere after
``dose/`` and the ``+fix`` suffix at the end belongs to the placement. Defaults: c = true, λ = 1. Examples:
``dose/paper/c=bias/lam=30``, ``dose/fa2/c=random/lam=10``, ``dose/paper/c=true/lam=1+fix``,
``dose/authors/tile=-1/c=noise/lam=30``, ``dose/paper/round_block=512/c=flip/lam=30`` (once `Numerics` has that field).

Telemetry (when the caller passes a `stats` dict, at telemetry steps only; sums over all (batch, head, row)):
"dose_n", "dose_dd_sum", "dose_dd_sq" (Σ Δδ, Σ Δδ²), "dose_inj_sq" (Σ (λ·c)²), "dose_dd_sum_head" (Σ Δδ per head).

Cost per step: the placement's forward (one extra kernel launch for our kernel's native path), an FP32 forward and
backward with the (B, H, T, T) probabilities materialised: a few batched matmuls and elementwise kernels, no loop
over heads or rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["COMPONENTS", "DoseOptions", "parse", "delta_error_rows", "component", "row_signs", "DoseAttention",
           "attention"]

COMPONENTS = ("true", "random", "flip", "bias", "noise")
_KEYS = ("c", "lam")


@dataclass(frozen=True)
class DoseOptions:
    """Options of the "dose" backend: the low-precision placement (an AttnSpec), the component c and λ."""
    placement: object
    component: str = "true"
    lam: float = 1.0

    def __post_init__(self):
        if self.component not in COMPONENTS:
            raise ValueError(f"dose component c must be one of {COMPONENTS}, got {self.component!r}")
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not math.isfinite(self.lam) \
                or self.lam < 0:
            raise ValueError(f"dose lam must be a finite number >= 0, got {self.lam!r}")
        if getattr(self.placement, "backend", None) not in ("ours", "authors") or self.placement.heads is not None:
            raise ValueError("the dose placement must be a spec of our kernel or of the authors' backend, without "
                             f"per-head overrides; got {getattr(self.placement, 'label', self.placement)!r}")
        if self.placement.fix.kind == "zero_rows":
            raise ValueError("the dose placement cannot be a +zero_rows control")


def parse(spec: str, parse_placement) -> dict:
    """AttnSpec fields of a "dose/..." spec string; `parse_placement(str) -> AttnSpec` parses the placement."""
    body, plus, suffix = spec.partition("+")
    head, *items = body.split("/")
    if head != "dose" or not items:
        raise ValueError(f"bad dose spec {spec!r}; write dose/<placement>[/c=<component>][/lam=<λ>]")
    vals, rest = {}, []
    for item in items:
        key, eq, val = item.partition("=")
        if eq and key in _KEYS:
            if key in vals:
                raise ValueError(f"{key!r} given twice in {spec!r}")
            vals[key] = val
        else:
            rest.append(item)
    if not rest:
        raise ValueError(f"dose spec {spec!r} names no placement; e.g. dose/paper/c=bias/lam=30")
    try:
        lam = float(vals.get("lam", 1.0))
    except ValueError:
        raise ValueError(f"bad lam {vals['lam']!r} in {spec!r}; write e.g. lam=30") from None
    placement = parse_placement("/".join(rest) + plus + suffix)
    return dict(backend="dose", opts=DoseOptions(placement=placement, component=vals.get("c", "true"), lam=lam))


# ------------------------------------------------------------------------------------------------ the pieces
def delta_error_rows(do: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    """Δδ = rowsum(dO ∘ E) in FP32: dO, E (B, H, T, D) -> (B, H, T)."""
    return (do.float() * err.float()).sum(dim=-1)


def component(dd: torch.Tensor, name: str, signs: torch.Tensor | None = None) -> torch.Tensor:
    """c(Δδ) for Δδ (B, H, T): "true", "flip", "random" (times `signs`, ±1 of Δδ's shape), "bias" (per-(batch, head)
    mean over rows, broadcast), "noise" (Δδ minus that mean)."""
    if name == "true":
        return dd
    if name == "flip":
        return -dd
    if name == "random":
        if signs is None or signs.shape != dd.shape:
            raise ValueError("component 'random' needs ±1 signs of Δδ's shape")
        return dd * signs
    mean = dd.mean(dim=-1, keepdim=True)
    if name == "bias":
        return mean.expand_as(dd)
    if name == "noise":
        return dd - mean
    raise ValueError(f"dose component must be one of {COMPONENTS}, got {name!r}")


def row_signs(shape, *, seed: int, step: int, layer: int, device) -> torch.Tensor:
    """±1 FP32 signs of `shape` from a generator seeded by (seed, step, layer) (numpy's SeedSequence mixes them)."""
    s = int(np.random.SeedSequence([int(seed), int(step), int(layer)]).generate_state(1, np.uint64)[0] >> 1)
    g = torch.Generator(device=device).manual_seed(s)
    return torch.randint(0, 2, tuple(shape), generator=g, device=device).float().mul_(2).sub_(1)


def _fp32_forward(q, k, v, scale, causal):
    """P (B, H, T, T) and O = P·V (B, H, T, D), FP32, with the same ops as the naive backend."""
    qf, kf, vf = q.float(), k.float(), v.float()
    s = torch.matmul(qf, kf.transpose(-2, -1)) * scale
    if causal:
        T, S = s.shape[-2:]
        mask = torch.ones(T, S, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p, torch.matmul(p, vf)


class DoseAttention(torch.autograd.Function):
    """forward(q, k, v, o_lp, scale, causal, component, lam, signs, stats) -> O_fp32 in q's dtype; backward as in
    the module docstring. o_lp (B, H, T, D) or None (no placement: Δδ = 0)."""

    @staticmethod
    def forward(ctx, q, k, v, o_lp, scale, causal, comp, lam, signs, stats):
        with torch.autocast(device_type=q.device.type, enabled=False):
            p, o = _fp32_forward(q, k, v, scale, causal)
            err = o_lp.float() - o if o_lp is not None else None
        ctx.save_for_backward(q, k, v, p, o, err, signs)
        ctx.cfg = (scale, comp, float(lam), stats, q.dtype, k.dtype, v.dtype)
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o, err, signs = ctx.saved_tensors
        scale, comp, lam, stats, qdt, kdt, vdt = ctx.cfg
        with torch.autocast(device_type=do.device.type, enabled=False):
            do = do.float()
            dv = torch.matmul(p.transpose(-2, -1), do)
            dp = torch.matmul(do, v.float().transpose(-2, -1))
            delta = (do * o).sum(dim=-1)
            dd = delta_error_rows(do, err) if err is not None else torch.zeros_like(delta)
            inj = lam * component(dd, comp, signs)
            if lam != 0:
                delta = delta + inj
            ds = dp.sub_(delta.unsqueeze(-1)).mul_(p)
            dq = torch.matmul(ds, k.float()).mul_(scale)
            dk = torch.matmul(ds.transpose(-2, -1), q.float()).mul_(scale)
            if stats is not None:
                stats["dose_n"] = stats.get("dose_n", 0) + dd.numel()
                for key, val in (("dose_dd_sum", dd.double().sum()), ("dose_dd_sq", dd.double().square().sum()),
                                 ("dose_inj_sq", inj.double().square().sum())):
                    stats[key] = stats.get(key, 0.0) + val.item()
                head = dd.double().sum(dim=(0, 2)).cpu()
                stats["dose_dd_sum_head"] = head + stats["dose_dd_sum_head"] if "dose_dd_sum_head" in stats else head
        return dq.to(qdt), dk.to(kdt), dv.to(vdt), None, None, None, None, None, None, None


def attention(q, k, v, *, spec, causal=True, scale=None, call=None, lp_forward=None):
    """Causal attention of q, k, v (B, H, T, D) with the dose backend `spec` (an AttnSpec whose `opts` is a
    DoseOptions). `lp_forward(q, k, v) -> O_lp` runs the placement (the model passes its backend dispatch). `call`:
    the model's per-call context (`stats` dict or None, `seed`, `step`, `layer`). Without a gradient to compute
    (evaluation) only the FP32 forward runs."""
    opts = spec.opts
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    stats = getattr(call, "stats", None)
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        with torch.autocast(device_type=q.device.type, enabled=False):
            return _fp32_forward(q, k, v, scale, causal)[1].to(q.dtype)
    if lp_forward is None:
        raise ValueError("the dose backend needs lp_forward, the placement's forward")
    with torch.no_grad():
        o_lp = lp_forward(q.detach(), k.detach(), v.detach())
    signs = None
    if opts.component == "random":
        signs = row_signs(q.shape[:-1], seed=getattr(call, "seed", 0), step=getattr(call, "step", 0),
                          layer=getattr(call, "layer", 0), device=q.device)
    return DoseAttention.apply(q, k, v, o_lp, scale, causal, opts.component, opts.lam, signs, stats)
