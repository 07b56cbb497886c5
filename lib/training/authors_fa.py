"""The authors' pure-PyTorch flash attention (Qiu & Yao's `attention.py`), as our PyTorch re-implementation.

`AuthorsFA2` implements the algorithm their model runs, written from its published description (their code is not
copied): FA2 forward and backward over q- and k-tiles (512 × 512 in their model), scores
`einsum(q, k)·α`, masked with −finfo(dtype).max in the forward and −inf in the backward, the running max / row sum
/ output kept in buffers of the input dtype and updated in place, each tile's row sum clamped at `row_sum_floor`
(their EPSILON = 1e-10), δ = rowsum(dO∘O) recomputed per tile, dQ/dK/dV accumulated in place; the optional β fix
(`stable=True`: a tile max repeated within `tie_tol` (1e-3 in their code) gets β·max if positive, 0 if negative;
β = 2 in their current code, 7 in the paper's figures).

Called with BF16 q, k, v under `torch.autocast(device, dtype=torch.bfloat16)`, as their model calls it, it rounds
where their code rounds; `lib/studies/kernel/paper_placement.py` establishes that placement bit-for-bit against the
emulator (chapter 2). The training backend built on it is `lib/training/authors_backend.py`.
"""
from __future__ import annotations

import torch

__all__ = ["AuthorsFA2", "authors_attention"]


class AuthorsFA2(torch.autograd.Function):
    """FA2 in plain PyTorch ops, as the authors' model runs it. q, k, v: (B, H, N, d). Returns O (dtype of q).

    `trace` (a dict or None) receives the dtype of each named intermediate and, as tensors, δ and LSE."""

    @staticmethod
    def forward(ctx, q, k, v, causal, q_tile, k_tile, stable, beta, tie_tol, trace, row_sum_floor=1e-10):
        dt, dev = q.dtype, q.device
        N, d = q.shape[-2:]
        alpha_scale = d ** -0.5
        neg = -torch.finfo(dt).max
        out = torch.zeros_like(q)
        row_sum = torch.zeros((*q.shape[:-1], 1), dtype=dt, device=dev)
        row_max = torch.full((*q.shape[:-1], 1), neg, dtype=dt, device=dev)

        def note(name, t):
            if trace is not None and name not in trace:
                trace[name] = str(t.dtype).replace("torch.", "")

        for i0 in range(0, N, q_tile):
            qi = q[..., i0:i0 + q_tile, :]
            oi, li, mi = out[..., i0:i0 + q_tile, :], row_sum[..., i0:i0 + q_tile, :], row_max[..., i0:i0 + q_tile, :]
            for j0 in range(0, N, k_tile):
                kj, vj = k[..., j0:j0 + k_tile, :], v[..., j0:j0 + k_tile, :]
                s = torch.einsum("...id,...jd->...ij", qi, kj) * alpha_scale
                note("S", s)
                if causal and i0 < j0 + k_tile - 1:
                    above = torch.ones(qi.shape[-2], kj.shape[-2], dtype=torch.bool, device=dev).triu(i0 - j0 + 1)
                    s.masked_fill_(above, neg)
                m_tile = s.amax(dim=-1, keepdim=True)
                if stable:
                    near = (s >= (m_tile - tie_tol)).sum(dim=-1, keepdim=True) > 1
                    m_tile = torch.where(near & (m_tile > 0), beta * m_tile, m_tile)
                    m_tile = torch.where(near & (m_tile < 0), 0, m_tile)
                note("m_tile", m_tile)
                m_new = torch.maximum(m_tile, mi)
                s_minus_m = s - m_new
                note("S_minus_m", s_minus_m)
                p = torch.exp(s_minus_m)
                note("P", p)
                l_tile = p.sum(dim=-1, keepdim=True)
                if row_sum_floor:
                    l_tile = l_tile.clamp(min=row_sum_floor)       # the authors' EPSILON = 1e-10
                note("l_tile", l_tile)
                pv = torch.einsum("...ij,...jd->...id", p, vj)
                note("PV", pv)
                rescale = torch.exp(mi - m_new)
                note("rescale", rescale)
                l_new = rescale * li + l_tile
                note("l_update", l_new)
                oi.mul_(rescale).add_(pv)
                note("O_acc", oi)
                mi.copy_(m_new)
                li.copy_(l_new)
                note("l_running", li)
            oi.div_(li)
        lse = row_sum.log() + row_max
        note("LSE", lse)
        note("O", out)
        if trace is not None:
            trace["_lse"] = lse.detach().float().squeeze(-1).cpu()
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cfg = (causal, q_tile, k_tile, alpha_scale, trace)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        causal, q_tile, k_tile, alpha_scale, trace = ctx.cfg
        dev = q.device
        N = q.shape[-2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        deltas = []

        def note(name, t):
            if trace is not None and name not in trace:
                trace[name] = str(t.dtype).replace("torch.", "")

        note("dO", do)
        for i0 in range(0, N, q_tile):
            qi, oi, doi, lsei = (t[..., i0:i0 + q_tile, :] for t in (q, out, do, lse))
            dqi = dq[..., i0:i0 + q_tile, :]
            for j0 in range(0, N, k_tile):
                kj, vj = k[..., j0:j0 + k_tile, :], v[..., j0:j0 + k_tile, :]
                dkj, dvj = dk[..., j0:j0 + k_tile, :], dv[..., j0:j0 + k_tile, :]
                s = torch.einsum("...id,...jd->...ij", qi, kj) * alpha_scale
                if causal and i0 < j0 + k_tile - 1:
                    above = torch.ones(qi.shape[-2], kj.shape[-2], dtype=torch.bool, device=dev).triu(i0 - j0 + 1)
                    s.masked_fill_(above, float("-inf"))
                x = s - lsei
                note("bwd_S_minus_LSE", x)
                p = torch.exp(x)
                note("bwd_P", p)
                dv_tile = torch.einsum("...ij,...id->...jd", p, doi)
                note("dV_tile", dv_tile)
                dp = torch.einsum("...id,...jd->...ij", doi, vj)
                note("dP", dp)
                prod = doi * oi
                note("dO*O", prod)
                delta = prod.sum(dim=-1, keepdim=True)
                note("delta", delta)
                if j0 == 0:
                    deltas.append(delta.detach().float().squeeze(-1))
                t = dp - delta
                note("dP_minus_delta", t)
                ds = p * alpha_scale * t
                note("dS", ds)
                dq_tile = torch.einsum("...ij,...jd->...id", ds, kj)
                dk_tile = torch.einsum("...ij,...id->...jd", ds, qi)
                dqi.add_(dq_tile)
                dkj.add_(dk_tile)
                dvj.add_(dv_tile)
                note("dQ_acc", dqi)
        if trace is not None:
            trace["_delta"] = torch.cat(deltas, dim=-1).cpu()
        return dq, dk, dv, None, None, None, None, None, None, None, None


def authors_attention(q, k, v, *, causal=True, q_tile=512, k_tile=512, stable=False, beta=2.0, tie_tol=1e-3,
                      trace=None, row_sum_floor=1e-10):
    """Call `AuthorsFA2` (q, k, v: (B, H, N, d), any float dtype). `row_sum_floor`: the clamp of each tile's row
    sum (1e-10 in the authors' code; 0 disables it)."""
    return AuthorsFA2.apply(q, k, v, causal, q_tile, k_tile, stable, beta, tie_tol, trace, row_sum_floor)

