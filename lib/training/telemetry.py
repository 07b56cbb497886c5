"""The proxy loop's telemetry: what a training step's own forward and backward show, read with capture on.

`collect_telemetry(model)` after the backward of a step whose forward ran with ``model.set_capture(True)``: per layer
and head the spectral norms of W_Q and W_K, the largest logit and BF16 tie rates (`score_stats`), Σ Δδ
(`delta_error`), the backends' counters (`backend_stats`) and the β fix's row counts. The training loop
(`lib.training.loop.train`, ``telemetry_every``) calls it between the step's gradient clipping and its update.
"""
from __future__ import annotations

import math

import torch

from lib.training.metrics import bf16_row_ties, bf16_tile_ties, spectral_norm
from lib.training.model import GPT, naive_attention
from lib.training.zero_rows import fix_row_stats

__all__ = ["TIE_TILE", "BACKEND_STATS", "FIX_STATS", "score_stats", "delta_error", "backend_stats",
           "collect_telemetry"]

TIE_TILE = 64   # key-tile width of the tie telemetry: the native kernel's BLOCK_N (kernels.attention.NATIVE_CONFIGS)


def score_stats(q: torch.Tensor, k: torch.Tensor, scale: float, chunk_elems: int = 1 << 26,
                tile: int = TIE_TILE) -> dict:
    """Max causal attention logit and BF16 tie statistics from q, k of shape (B, H, T, D).

    S = scale·QKᵀ is formed in FP32 from the given q, k (the values the backend saw), causally masked; a query row
    "ties" when the maximum of its BF16-rounded scores occurs ≥ 2 times. Returns {"max_logit": float (max over
    B, H and valid (i, j)), "tie_rate": float (fraction of the B·H·T rows), "tie_rate_head": (H,) tensor,
    "tie_rate_tile": float (fraction of rows with two maxima inside one key tile of `tile` columns, the ties a
    per-tile fix detects)}.
    The batch is processed in chunks of at most `chunk_elems` scores to bound memory."""
    B, H, T, _ = q.shape
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    per = max(1, chunk_elems // (H * T * T))
    max_logit = -math.inf
    ties = torch.zeros(H, dtype=torch.float64, device=q.device)
    tile_ties = 0.0
    with torch.autocast(device_type=q.device.type, enabled=False):
        for b0 in range(0, B, per):
            s = torch.matmul(q[b0:b0 + per].float(), k[b0:b0 + per].float().transpose(-2, -1)) * scale
            s = s.masked_fill(~mask, float("-inf"))
            max_logit = max(max_logit, s.max().item())
            ties += bf16_row_ties(s).double().sum(dim=(0, 2))   # rows (b, H, T) -> per head
            tile_ties += bf16_tile_ties(s, tile).double().sum().item()
    tie_head = ties / (B * T)
    return dict(max_logit=max_logit, tie_rate=tie_head.mean().item(), tie_rate_head=tie_head.cpu(),
                tie_rate_tile=tile_ties / (B * H * T))


def delta_error(q, k, v, o_lp, do, scale: float) -> torch.Tensor:
    """Σ over batch rows and positions of δ_lp − δ_hp = rowsum(dO∘(O_lp − O_hp)) per head, shape (H,), FP64.

    O_lp: the backend's output; O_hp: FP32 attention of the same q, k, v; dO: the gradient reaching the output."""
    o_hp = naive_attention(q.float(), k.float(), v.float(), causal=True, scale=scale)
    with torch.autocast(device_type=q.device.type, enabled=False):
        dd = (do.float() * (o_lp.float() - o_hp)).sum(dim=-1)   # (B, H, T)
    return dd.double().sum(dim=(0, 2)).cpu()


BACKEND_STATS = ("underflow_rows", "dose_inj_rms", "dose_dd_rms", "dose_dd_mean", "dose_dd_sum_head")


def backend_stats(stats: dict, n_head: int) -> dict:
    """The telemetry entries of one layer from its backend's counters (`lib.training.authors_backend`,
    `lib.training.dose_backend`, `model.ours_attention` for "+zero_rows"); NaN for what the backend did not count."""
    nan = float("nan")
    out = dict(underflow_rows=stats["underflow_n"] / stats["underflow_of"] if stats.get("underflow_of") else nan,
               dose_inj_rms=nan, dose_dd_rms=nan, dose_dd_mean=nan, dose_dd_sum_head=[nan] * n_head)
    n = stats.get("dose_n", 0)
    if n:
        out.update(dose_inj_rms=math.sqrt(stats["dose_inj_sq"] / n), dose_dd_rms=math.sqrt(stats["dose_dd_sq"] / n),
                   dose_dd_mean=stats["dose_dd_sum"] / n, dose_dd_sum_head=stats["dose_dd_sum_head"].tolist())
    return out


FIX_STATS = ("fix_rows", "fix_zero_rows", "fix_guard_rows")


@torch.no_grad()
def collect_telemetry(model: GPT) -> dict:
    """Per-layer / per-head telemetry of the step whose forward and backward just ran with capture on.

    Returns lists over layers: "wq_norm", "wk_norm" (per head ‖W_Q^h‖₂, ‖W_K^h‖₂, exact spectral norms of the
    (head_dim, n_embd) slices), "wq_norm_layer", "wk_norm_layer" (‖W_Q‖₂, ‖W_K‖₂ of the full (n_embd, n_embd)
    blocks), "max_logit", "tie_rate", "tie_rate_head", "tie_rate_tile" (`score_stats`), and "delta_err_sum" (Σ Δδ per head; NaN where dO was not
    captured). From the backends' counters (`backend_stats`; NaN where the layer's backend does not report them):
    "underflow_rows" (share of query rows whose ℓ sat at the clamp, authors' backend, or that a "+zero_rows"
    control zeroed), "dose_inj_rms", "dose_dd_rms", "dose_dd_mean" (RMS of the injected λ·c(Δδ), RMS and mean of
    Δδ over all rows) and "dose_dd_sum_head" (Σ Δδ per head) of the dose backend. For our kernel's β fix
    (`lib.training.zero_rows.fix_row_stats`; NaN for other layers): "fix_rows" (share of rows whose max it shifts),
    "fix_zero_rows" (rows the exact rule zeroes: ℓ underflows) and "fix_guard_rows" (rows whose shift the guard caps)."""
    cfg = model.config
    out = {k: [] for k in ("wq_norm", "wk_norm", "wq_norm_layer", "wk_norm_layer", "max_logit", "tie_rate",
                           "tie_rate_head", "tie_rate_tile", "delta_err_sum") + BACKEND_STATS + FIX_STATS}
    scale = 1.0 / math.sqrt(cfg.head_dim)
    for i, attn in enumerate(model.attn_layers):
        wq, wk = (w.detach().float() for w in model.qk_weights(i))
        out["wq_norm"].append(spectral_norm(wq).tolist())
        out["wk_norm"].append(spectral_norm(wk).tolist())
        out["wq_norm_layer"].append(spectral_norm(wq.reshape(-1, cfg.n_embd)).item())
        out["wk_norm_layer"].append(spectral_norm(wk.reshape(-1, cfg.n_embd)).item())
        c = attn.captured
        if not c:
            raise RuntimeError("collect_telemetry needs a forward with model.set_capture(True)")
        st = score_stats(c["q"], c["k"], scale)
        out["max_logit"].append(st["max_logit"])
        out["tie_rate"].append(st["tie_rate"])
        out["tie_rate_head"].append(st["tie_rate_head"].tolist())
        out["tie_rate_tile"].append(st["tie_rate_tile"])
        if "do" in c:
            out["delta_err_sum"].append(delta_error(c["q"], c["k"], c["v"], c["o"], c["do"], scale).tolist())
        else:
            out["delta_err_sum"].append([float("nan")] * cfg.n_head)
        for k_, v_ in backend_stats(c.get("stats") or {}, cfg.n_head).items():
            out[k_].append(v_)
        spec = attn.spec
        if spec.backend == "ours" and spec.fix.kind in ("beta", "beta_split") and spec.heads is None:
            fs = fix_row_stats(c["q"], c["k"], numerics=spec.numerics, beta=spec.fix.beta,
                               tie_tol=spec.fix.tie_tol, max_shift=spec.fix.max_shift, scale=scale)
        else:
            fs = dict.fromkeys(FIX_STATS, float("nan"))
        for k_ in FIX_STATS:
            out[k_].append(fs[k_])
    return out
