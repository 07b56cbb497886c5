"""Chapters 4–5's measurements on the live training step: the O error, Δδ, and the dW_Q error it makes.

`ChainProbe` is a step hook of `lib.training.loop.train_lm` (`before_forward`, `after_backward`): every `every`
steps it turns capture on in the chosen layers of a `lib.training.model.GPT`, and after the backward measures, on the
first `rows` windows of the batch, for every head h (D = head dim, C = width, scale = 1/√D):

* **the O error** E = O − O_ref with O_ref the FP64 attention of the same q, k, v (for the injection backend: the
  injected λ·E, the only error its backward sees); along sign(V) on the *conjunction* — the rows whose preconditions
  hold and the features whose V is one-signed over the tied keys (`classes`; default `lib.census.row_classes`),
  in ULP of O: its sum, count and how many agree with sign(V);
* **Δδ = rowsum(dO ∘ E)** (B, H, T): sums, sums of |Δδ|, counts of Δδ > 0 and of Δδ ≠ 0 over all rows, tied
  rows and window rows, for sign tests and the normalised bias at read time;
* **the dW_Q error**: δ + Δδ changes dS by −P·Δδ (row-broadcast), so the gradient at the backend's q by
  ΔdQ = −scale·Δδ·(P K); its vector-Jacobian product through the layer's projection (rope, QK-norm:
  `LMAttention.project`) gives ΔG_h = ΔdW_Q^h (D × C). Recorded per head: ‖ΔG_h‖_F, its stable rank, its cosine
  with the previous event's ΔG_h (alignment across steps), σ₁ of W_Q^h and the *push*
  −u₁ᵀ ΔG_h v₁ (u₁, v₁ the top singular pair of W_Q^h): the first-order change of σ₁ that the error makes in an SGD
  step of unit rate (positive: the error raises ‖W_Q^h‖₂), and the same through Adam's denominator
  (−u₁ᵀ (ΔG_h ⊘ (√v̂ + ε)) v₁), the scale an Adam step applies.

Everything is computed on the GPU at the probed step and kept as small per-head arrays (`records`: one dict per
event, each value (L, H)); the statistics (sign tests, intervals) are taken when results are read.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from lib.training.capture import adam_denominator
from lib.training.inject import ulp_bf16

KEYS = ("n_rows", "n_tied", "n_window", "n_conj", "dd_sum", "dd_abs", "dd_pos", "dd_nz", "dd_sum_tied", "dd_abs_tied",
        "dd_pos_tied", "dd_nz_tied", "dd_sum_window", "dd_abs_window", "dd_pos_window", "dd_nz_window", "err_v_sum", "err_v_agree", "dg_norm",
        "dg_srank", "dg_cos_prev", "wq_sigma", "push_sgd", "push_adam")


def default_classes(q, k, v):
    from lib.census import row_classes
    return row_classes(q, k, v, causal=True, placement="authors")


def _attention_fp64(q, k, v, scale):
    T = q.shape[-2]
    s = torch.matmul(q.double(), k.double().transpose(-2, -1)) * scale
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=s.device).tril(), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p, torch.matmul(p, v.double())


def _top_pair(w: torch.Tensor, vec, iters: int):
    """(σ₁ (H,), u₁ (H, D), v₁ (H, C), vec) of w (H, D, C) by warm-started power iteration in FP32."""
    w = w.detach().float()
    x = torch.ones(w.shape[0], w.shape[2], device=w.device) if vec is None else vec
    for _ in range(iters):
        x = torch.einsum("hdc,hd->hc", w, torch.einsum("hdc,hc->hd", w, x))
        x = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    wu = torch.einsum("hdc,hc->hd", w, x)
    s = wu.norm(dim=-1)
    return s, wu / s.clamp_min(1e-30).unsqueeze(-1), x, x


class ChainProbe:
    """Step hook: every `every` steps (and at the steps in `steps`), chapters 4–5's measurements on `layers` (None:
    all) for the first `rows` windows (module docstring). `records`: list of {"step": int, key: (L, H) array}."""

    def __init__(self, every: int = 100, layers=None, rows: int = 4, steps=(), classes=None, sigma_iters: int = 20):
        self.every, self.layers, self.rows = int(every), layers, int(rows)
        self.steps = frozenset(int(s) for s in steps)
        self.classes = classes or default_classes
        self.iters = sigma_iters
        self.records: list[dict] = []
        self._prev, self._vec = {}, {}

    def due(self, step: int) -> bool:
        return (self.every > 0 and step % self.every == 0) or step in self.steps

    def _layers(self, model):
        return list(range(len(model.attn_layers))) if self.layers is None else list(self.layers)

    def before_forward(self, step: int, model) -> None:
        if self.due(step):
            for l in self._layers(model):
                model.attn_layers[l].capture = True

    def after_backward(self, step: int, model, optimizer) -> None:
        if not self.due(step):
            return
        rec = {}
        for l in self._layers(model):
            attn = model.attn_layers[l]
            for key, val in self.measure(l, attn, optimizer).items():
                rec.setdefault(key, []).append(val)
            attn.capture = False
            attn.captured = {}
        self.records.append(dict(step=int(step), **{k: np.stack(v) for k, v in rec.items()}))

    @torch.no_grad()
    def measure(self, layer: int, attn, optimizer) -> dict:
        cap = attn.captured
        b = self.rows
        q, k, v, o, do, x = (cap[n][:b] for n in ("q", "k", "v", "o", "do", "x"))
        B, H, T, D = q.shape
        scale = 1.0 / math.sqrt(D)
        p, o_ref = _attention_fp64(q, k, v, scale)
        stats = cap.get("stats") or {}
        if "inj_err" in stats:           # the injection backend: its forward is FP32, the error lives in δ only
            err = attn.spec.lam * stats["inj_err"][:b].double()
        else:
            err = o.double() - o_ref
        dd = (do.double() * err).sum(-1)                                      # (B, H, T)
        cls = self.classes(q, k, v)
        tied, window, one = cls["tied"], cls["window"], cls["one_signed"]    # (B,H,T), (B,H,T), (B,H,T,D)
        conj = window.unsqueeze(-1) & one
        sv = torch.sign(o_ref)
        ulp = ulp_bf16(o_ref.float()).double().clamp_min(1e-300)
        ev = err * sv / ulp                                                    # error along sign(V), in ULP of O
        out = {}

        def per_head(t, mask=None):
            t = t if mask is None else torch.where(mask, t, torch.zeros_like(t))
            return t.reshape(B, H, -1).sum(dim=(0, 2)).double().cpu().numpy()

        out["n_rows"] = np.full(H, B * T, dtype=np.float64)
        out["n_tied"], out["n_window"] = per_head(tied.double()), per_head(window.double())
        out["n_conj"] = per_head(conj.double())
        for tag, m in (("", None), ("_tied", tied), ("_window", window)):
            out[f"dd_sum{tag}"] = per_head(dd, m)
            out[f"dd_abs{tag}"] = per_head(dd.abs(), m)
            out[f"dd_pos{tag}"] = per_head((dd > 0).double(), m)
            out[f"dd_nz{tag}"] = per_head((dd != 0).double(), m)     # rows an injection left alone have Δδ = 0
        out["err_v_sum"] = per_head(ev, conj)
        out["err_v_agree"] = per_head((ev > 0).double(), conj)
        # ΔdQ at the backend's q, then through the projection to W_Q (rope, QK-norm included).
        pk = torch.matmul(p, k.double())
        ddq = (-scale * dd.unsqueeze(-1) * pk).to(torch.float32)
        C = x.shape[-1]
        w = attn.c_attn.weight
        with torch.enable_grad():
            xs = x.detach().to(w.dtype) if x.dtype != w.dtype else x.detach()
            qq, _, _ = attn.project(xs)
            (g,) = torch.autograd.grad(qq, w, grad_outputs=ddq.to(qq.dtype))
        dg = g[:C].double().view(H, D, C)
        wq = w[:C].detach().view(H, D, C)
        s1, u1, v1, self._vec[layer] = _top_pair(wq, self._vec.get(layer), self.iters)
        u1, v1 = u1.double(), v1.double()
        fro = dg.flatten(1).norm(dim=1)
        spec = torch.linalg.matrix_norm(dg.float(), ord=2).double()
        out["dg_norm"] = fro.cpu().numpy()
        out["dg_srank"] = (fro.square() / spec.square().clamp_min(1e-300)).cpu().numpy()
        prev = self._prev.get(layer)
        if prev is None:
            out["dg_cos_prev"] = np.full(H, np.nan)
        else:
            out["dg_cos_prev"] = ((dg * prev).flatten(1).sum(1) / (fro * prev.flatten(1).norm(dim=1)).clamp_min(
                1e-300)).cpu().numpy()
        self._prev[layer] = dg
        out["wq_sigma"] = s1.double().cpu().numpy()
        out["push_sgd"] = (-torch.einsum("hd,hdc,hc->h", u1, dg, v1)).cpu().numpy()
        try:
            den = adam_denominator(optimizer, w)[:C].double().view(H, D, C)
            out["push_adam"] = (-torch.einsum("hd,hdc,hc->h", u1, dg / den, v1)).cpu().numpy()
        except (KeyError, RuntimeError, ValueError):     # no Adam state for this weight (Muon, first step)
            out["push_adam"] = np.full(H, np.nan)
        return out


SPLIT_KEYS = ("err_tie_sum", "err_tie_agree", "err_tie_nz", "err_ell_sum", "err_ell_agree", "err_ell_nz")


def split_numerics(spec):
    """The `Numerics` whose P̄ and ℓ model a layer's attention for `o_error_split`, or None where none does: our
    kernel without a fix (its own numerics, BF16 round to nearest even), PyTorch's flash SDPA (production
    FlashAttention-2: `fa2`), FP32 attention on PyTorch's memory-efficient kernel (`fp32`). Anything else (a fix,
    a per-head override, the authors' code, an injection): None."""
    from lib.fp.numerics import FA2, FP32, get_profile
    backend = getattr(spec, "backend", None)
    if backend == "fp32_flash":
        return FP32
    if getattr(spec, "heads", None) is not None or getattr(getattr(spec, "fix", None), "kind", None) is not None:
        return None
    if backend == "sdpa":
        return FA2
    if backend == "ours":
        nm = get_profile(spec.numerics)
        return nm if nm.mantissa_bits == 7 and nm.rounding == "rne" else None
    return None


@torch.no_grad()
def o_error_split(q, k, v, o, numerics, classes, scale=None) -> dict:
    """O's error along sign(V) on the conjunction, split into the rounding of P̄V and the rest (P̄ and ℓ).

    q, k, v: (B, H, T, D) as the attention saw them; o: (B, H, T, D) the attention's output; `numerics`: the
    placement that models its P̄ and ℓ (`split_numerics`); `classes(q, k, v)`: the census's row classes (as
    `ChainProbe`). With O_ref the FP64 attention of q, k, v (causal; scale D^−½ by default) and, from the
    placement's scores S (`lib.census.placement_scores`: BF16 S where the numerics round it), its rounding blocks,
    its P̄ (rounded where it rounds P̄, as the P̄V operand), its α rescales and its row sum ℓ (rounded where it
    rounds ℓ, as the division sees it) — `lib.census.forward_rows` with every rounding of the numerator off —

        O_∘ = (Σ_j α_j P̄_j V_j) / ℓ      (B, H, T, D): the same P̄ and ℓ, P̄V never rounded,

    O's error E = O − O_ref (what `ChainProbe` records as err_v_*) is the sum of

    * the tie part E_tie = O − O_∘: the roundings of P̄V (per rounding block, the accumulator, the numerator before
      the division) and of O itself — chapter 1's tie bias where several P̄ are 1 and V is one-signed over them;
    * the ℓ part E_ℓ = O_∘ − O_ref: what the placement's P̄ (from its S) and ℓ do to the whole row.

    The numerator of O_∘ is summed in FP32 (≈ 10⁻⁴ ULP of O off the FP64 value). Both parts are taken along
    sign(O_ref) in ULP of O (BF16 spacing at O_ref), as err_v_*, over the conjunction pairs (window rows × features
    whose V is one-signed over the tied keys). Returns per head (H,) float64: "err_tie_sum", "err_ell_sum" (ULP of O;
    err_tie_sum + err_ell_sum = err_v_sum up to FP64 rounding), "err_tie_agree", "err_ell_agree" (pairs > 0, i.e.
    along sign(V)) and "err_tie_nz", "err_ell_nz" (pairs ≠ 0)."""
    from lib.census import forward_rows, placement_scores
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    nm = numerics
    _, o_ref = _attention_fp64(q, k, v, scale)
    s = placement_scores(q.float(), k.float(), "authors" if nm.round_s else "fa2", scale, True)
    o_free, ell_free = forward_rows(s, v.float(), nm.replace(round_pv=False, round_acc=False,
                                                             normalize_then_round=True, round_o=False),
                                    return_l=True)
    del s
    ell = ell_free if nm.normalize_then_round else ell_free.to(torch.bfloat16).float()   # ℓ as the division sees it
    o_free = o_free.double() * (ell_free.double() / ell.double()).unsqueeze(-1)
    cls = classes(q, k, v)
    conj = cls["window"].unsqueeze(-1) & cls["one_signed"]
    along = torch.sign(o_ref) / ulp_bf16(o_ref.float()).double().clamp_min(1e-300)
    out = {}
    for tag, part in (("tie", o.double() - o_free), ("ell", o_free - o_ref)):
        e = part * along
        for key, t in (("sum", e), ("agree", (e > 0).double()), ("nz", (e != 0).double())):
            out[f"err_{tag}_{key}"] = torch.where(conj, t, torch.zeros_like(t)).sum(dim=(0, 2, 3)).cpu().numpy()
    return out


def records_arrays(records: list[dict]) -> dict:
    """`ChainProbe.records` -> {"step": (E,), key: (E, L, H)}."""
    out = {"step": np.asarray([r["step"] for r in records], dtype=np.int64)}
    for key in KEYS:
        if records and key in records[0]:
            out[key] = np.stack([r[key] for r in records])
    return out
