"""Copies of one training step's attention inputs, outputs and gradients, small enough to keep and to replay offline.

A *capture* holds what the δ-channel analysis (`lib.studies.delta.stats`) needs from one optimiser step, for a
subsample of the batch: for each captured layer l, for the batch rows `meta["rows"]` (b of them), all heads H
(or the subset `meta["heads"]`) and all T positions (D = head dim, C = width):

    q, k, v    (b, H, T, D)  the attention backend's inputs (q_h = X·W_Q^hᵀ; the values the kernel saw)
    o          (b, H, T, D)  the backend's output O, from which the backward formed δ = rowsum(dO∘O)
    do         (b, H, T, D)  dL/dO
    dq, dk     (b, H, T, D)  dL/dq, dL/dk as they reach c_attn (dW_Q^h = Σ_rows dq_hᵀ·X: the true gradient of
                             these rows; the loss is the mean over the whole batch's B·T tokens, so every gradient
                             carries that 1/(B·T))
    x          (b, T, C)     the attention input X (the input of c_attn), as c_attn's matmul consumed it: rounded to
                             BF16 under BF16 autocast, FP32 otherwise
    wq_u (H, D), wq_s (H,), wq_v (H, C)   the top singular triplet of W_Q^h (before this step's update); wk_* of W_K^h
    adam_q, adam_k (H, D, C) [optional]   Adam's denominator √v̂ + ε for W_Q^h / W_K^h in this step's update (v
                             updated with this step's clipped gradient, bias-corrected), the scale that turns a
                             gradient error into an update error

Storage is exact where the values are BF16: a BF16 tensor is kept as its uint16 bit patterns (encoding "bf16"),
an FP32 one as float32 ("f32"); the Adam denominator (an FP32 quantity) is rounded to BF16 ("bf16_rounded",
relative error ≤ 2⁻⁹), since it only scales. Arrays are keyed ``L<layer>__<name>``; `Capture.get` decodes to
float32. `pack` / `unpack` flatten a list of captures into one dict of arrays plus a JSON index (the form
`lib.book.results` saves).

`CaptureHook` is the training-side half: pass it as ``train(cfg, step_hook=hook)``. At a capture step (every
`every` steps and at `steps`) it turns the selected layers' capture on before the forward, adds a forward hook on
their c_attn (X, and a tensor hook for dL/d(qkv)), and after the backward copies the subsample to host memory
(`hook.captures`). The copy is the only work on the training path; every statistic is computed offline.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["ENCODINGS", "HEAD_AXIS", "encode", "decode", "Capture", "pack", "unpack", "CaptureHook", "top_triplets",
           "adam_denominator"]

ENCODINGS = ("bf16", "f32", "bf16_rounded")
# The head axis of every per-head array (arrays not listed, such as x, have none).
HEAD_AXIS = {"q": 1, "k": 1, "v": 1, "o": 1, "do": 1, "dq": 1, "dk": 1, "wq_u": 0, "wq_s": 0, "wq_v": 0,
             "wk_u": 0, "wk_s": 0, "wk_v": 0, "adam_q": 0, "adam_k": 0}
ROW_AXIS = {"q": 0, "k": 0, "v": 0, "o": 0, "do": 0, "dq": 0, "dk": 0, "x": 0}


def encode(t, round_to_bf16: bool = False) -> tuple[np.ndarray, str]:
    """A tensor -> (stored array, encoding). BF16 -> uint16 bit patterns ("bf16", exact); any other float -> float32
    ("f32"), or, with `round_to_bf16`, rounded to BF16 (RNE) and kept as bit patterns ("bf16_rounded")."""
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(f"encode needs a floating tensor, got {type(t).__name__}")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16), "bf16"
    if round_to_bf16:
        return t.float().to(torch.bfloat16).contiguous().view(torch.int16).cpu().numpy().view(np.uint16), \
            "bf16_rounded"
    return t.float().cpu().numpy(), "f32"


def decode(a: np.ndarray, enc: str) -> np.ndarray:
    """Inverse of `encode`: float32 values."""
    if enc in ("bf16", "bf16_rounded"):
        a = np.asarray(a)
        if a.dtype != np.uint16:
            raise TypeError(f"a '{enc}' array must hold uint16 bit patterns, got {a.dtype}")
        return (a.astype(np.uint32) << 16).view(np.float32)
    if enc == "f32":
        return np.asarray(a, dtype=np.float32)
    raise ValueError(f"unknown encoding {enc!r}; one of {ENCODINGS}")


@dataclass
class Capture:
    """One step's capture: `meta` (JSON-able: step, lr, rows, layers, heads, n_head, head_dim, n_embd, seq_len,
    scale, attn, enc, x_source, x_rounding, adam) and `arrays` ({"L<l>__<name>": stored array})."""
    meta: dict
    arrays: dict = field(default_factory=dict)

    @property
    def layers(self) -> list[int]:
        return list(self.meta["layers"])

    @property
    def heads(self) -> list[int]:
        return list(self.meta["heads"])

    def has(self, layer: int, name: str) -> bool:
        return f"L{layer}__{name}" in self.arrays

    def get(self, layer: int, name: str) -> np.ndarray:
        """Decoded float32 array `name` of `layer`; KeyError if it was not captured."""
        key = f"L{layer}__{name}"
        if key not in self.arrays:
            raise KeyError(f"capture of step {self.meta.get('step')} has no {name!r} for layer {layer}")
        return decode(self.arrays[key], self.meta["enc"][name])

    def layer(self, layer: int) -> dict:
        """All decoded arrays of `layer`: {name: float32 array}."""
        pre = f"L{layer}__"
        return {k[len(pre):]: decode(v, self.meta["enc"][k[len(pre):]]) for k, v in self.arrays.items()
                if k.startswith(pre)}

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))

    def subsample(self, rows=None, layers=None, heads=None) -> "Capture":
        """A smaller capture: `rows` are positions in meta["rows"] (not batch indices), `layers` original layer
        indices, `heads` positions in meta["heads"]. None keeps all."""
        n_rows = len(self.meta["rows"])
        rows = list(range(n_rows)) if rows is None else [int(r) for r in rows]
        layers = self.layers if layers is None else [int(l) for l in layers]
        heads = list(range(len(self.heads))) if heads is None else [int(h) for h in heads]
        if any(not 0 <= r < n_rows for r in rows):
            raise ValueError(f"rows must be positions in 0..{n_rows - 1}, got {rows}")
        if any(l not in self.layers for l in layers):
            raise ValueError(f"layers {layers} are not all captured (have {self.layers})")
        if any(not 0 <= h < len(self.heads) for h in heads):
            raise ValueError(f"heads must be positions in 0..{len(self.heads) - 1}, got {heads}")
        out = {}
        for key, a in self.arrays.items():
            lay, name = key.split("__", 1)
            if int(lay[1:]) not in layers:
                continue
            if name in ROW_AXIS:
                a = np.take(a, rows, axis=ROW_AXIS[name])
            if name in HEAD_AXIS:
                a = np.take(a, heads, axis=HEAD_AXIS[name])
            out[key] = np.ascontiguousarray(a)
        meta = dict(self.meta, rows=[self.meta["rows"][r] for r in rows], layers=layers,
                    heads=[self.heads[h] for h in heads])
        return Capture(meta, out)


def pack(captures, prefix: str = "cap") -> tuple[list[dict], dict]:
    """Flatten captures into (index, arrays): index[i] is capture i's meta, arrays are keyed
    ``<prefix><i>__L<l>__<name>``."""
    index, arrays = [], {}
    for i, c in enumerate(captures):
        index.append(dict(c.meta))
        for k, a in c.arrays.items():
            arrays[f"{prefix}{i}__{k}"] = a
    return index, arrays


def unpack(index, arrays, prefix: str = "cap") -> list[Capture]:
    """Inverse of `pack`."""
    out = []
    for i, meta in enumerate(index):
        pre = f"{prefix}{i}__"
        out.append(Capture(dict(meta), {k[len(pre):]: np.asarray(a) for k, a in arrays.items() if k.startswith(pre)}))
    return out


@torch.no_grad()
def top_triplets(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top singular triplet of each matrix of w (H, D, C): u (H, D), σ (H,), v (H, C), FP32, so that
    W^h ≈ σ u vᵀ + …; the sign is fixed so that the largest-magnitude entry of u is positive (σ u vᵀ is unaffected).
    By `torch.linalg.svd` in FP32: the reference `top_triplets_gram` is tested against, and what the capture hook
    used before it (results/full/capture_overhead_bench.json times both)."""
    u, s, vh = torch.linalg.svd(w.detach().float(), full_matrices=False)
    u1, v1 = u[..., :, 0], vh[..., 0, :]
    sign = torch.sign(torch.gather(u1, -1, u1.abs().argmax(-1, keepdim=True)))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return u1 * sign, s[..., 0], v1 * sign


@torch.no_grad()
def top_triplets_gram(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`top_triplets` without the SVD; what `CaptureHook` uses: the same contract (u (H, D), σ (H,), v (H, C), FP32,
    W^h ≈ σ u vᵀ + …, largest-magnitude entry of u positive). It replaced `top_triplets` in the hook (which changed
    the captures' triplets in their last bits; delta_capture, delta_capture_8e3 and capture_overhead_bench were
    re-run with it).

    Method: the small side's Gram matrix in FP64 (G = W Wᵀ, D × D, when D ≤ C; else Wᵀ W), its top eigenpair by
    `torch.linalg.eigh` on a host copy of G, then the other vector back on w's device: v = Wᵀu / ‖Wᵀu‖ (FP64),
    σ = ‖Wᵀu‖ (= √λ₁ up to rounding). A zero block gives σ = 0 and u, v = e₀ (as the SVD does), no NaN; a
    non-finite block gives NaN outputs rather than an error.

    Why: `torch.linalg.svd` of the capture's blocks (12 calls of (6, 64, 384) per capture at the full proxy) took
    141 ms on an H100 — 82 % of a capture's 171 ms — and 279 ms on host copies
    (results/full/capture_overhead_bench.json, `capture_parts_ms`). Here only an FP64 Gram matmul and one
    (H, 64, 64) copy each way (≈ 200 KB) touch the device; the batched eigh of 64 × 64 runs on the CPU.

    Accuracy: G is formed in FP64 from the FP32 entries, so the top eigenpair is accurate to ~1e-16·λ₁ (vectors
    to ~1e-16·λ₁/(λ₁ − λ₂)) before the FP32 rounding of the outputs. Measured on Gaussian blocks of the capture's
    shape (6, 64, 384) and on blocks with a planted rank-1 spike, heads with σ₁/σ₂ ≥ 1.01: against an FP64 SVD,
    σ within 6e-8 relative and 1 − u·u_svd, 1 − v·v_svd ≤ 1.4e-8; against the FP32 `torch.linalg.svd` (the
    previous implementation, itself up to 7e-7 off the FP64 SVD in σ) within 8e-7 and ≤ 6.5e-7
    (tests/test_capture_triplets.py). With σ₁ = σ₂ (a degenerate top) any unit vector of the top space is an
    answer, as for the SVD."""
    w = w.detach()
    w64 = w.double()
    tall = w64.shape[-2] > w64.shape[-1]              # D > C: the small side is C; eigh of Wᵀ W gives v
    a = w64.transpose(-2, -1) if tall else w64        # (…, m, n) with m ≤ n: the top left vector of a
    g = (a @ a.transpose(-2, -1)).cpu()               # (…, m, m) FP64 Gram matrix, on the host
    finite = torch.isfinite(g).all(-1).all(-1)        # (…,) a non-finite block gives NaN outputs, not an error
    _, vec = torch.linalg.eigh(torch.where(finite[..., None, None], g, torch.zeros_like(g)))
    x = vec[..., :, -1].to(w.device)                  # (…, m) unit; eigh's eigenvalues ascend: the last is the top
    y = (a.transpose(-2, -1) @ x.unsqueeze(-1)).squeeze(-1)    # (…, n) = σ · (the other vector)
    s = torch.linalg.vector_norm(y, dim=-1)
    zero = (s == 0).unsqueeze(-1)                     # W^h = 0: σ = 0 and u, v = e₀, as the SVD gives
    e0 = lambda t: torch.nn.functional.one_hot(torch.zeros_like(t[..., 0], dtype=torch.long),  # noqa: E731
                                               t.shape[-1]).to(t.dtype)
    x = torch.where(zero, e0(x), x)
    y = torch.where(zero, e0(y), y / torch.where(zero, torch.ones_like(s).unsqueeze(-1), s.unsqueeze(-1)))
    bad = ~finite.to(w.device)
    s = torch.where(bad, torch.full_like(s, float("nan")), s)
    x = torch.where(bad.unsqueeze(-1), torch.full_like(x, float("nan")), x)
    y = torch.where(bad.unsqueeze(-1), torch.full_like(y, float("nan")), y)
    u1, v1 = (y, x) if tall else (x, y)
    sign = torch.sign(torch.gather(u1, -1, u1.abs().argmax(-1, keepdim=True)))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return (u1 * sign).float(), s.float(), (v1 * sign).float()


@torch.no_grad()
def adam_denominator(opt: torch.optim.Optimizer, p: torch.Tensor) -> torch.Tensor:
    """√v̂ + ε of AdamW for parameter `p` in the step about to be taken (p.grad already clipped): v = β₂·v_prev +
    (1 − β₂)·g², v̂ = v / (1 − β₂ᵗ), t = the step count after this step. Same shape as p, FP32."""
    group = next((g for g in opt.param_groups if any(q is p for q in g["params"])), None)
    if group is None:
        raise ValueError("the parameter is not in the optimizer")
    beta2, eps = group["betas"][1], group["eps"]
    st = opt.state.get(p, {})
    v_prev = st.get("exp_avg_sq")
    t_prev = float(st["step"]) if "step" in st else 0.0
    g = p.grad.detach().float()
    v = (1.0 - beta2) * g * g if v_prev is None else beta2 * v_prev.float() + (1.0 - beta2) * g * g
    t = t_prev + 1.0
    return torch.sqrt(v / (1.0 - beta2 ** t)) + eps


class CaptureHook:
    """A `train(..., step_hook=)` hook that captures steps `every` N (0: none) and the listed `steps`.

    rows: batch rows to keep (indices into the global batch); layers: layer indices (None: all); adam: also keep
    Adam's denominator of W_Q and W_K. Captures accumulate in `self.captures` (host memory, a list of `Capture`);
    `self.copy_s` sums the time spent copying (seconds), to check the hook's overhead."""

    def __init__(self, every: int = 0, steps=(), rows=(0,), layers=None, adam: bool = True):
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"every must be an int ≥ 0, got {every!r}")
        rows = tuple(int(r) for r in rows)
        if not rows or min(rows) < 0 or len(set(rows)) != len(rows):
            raise ValueError(f"rows must be distinct non-negative batch indices, got {rows!r}")
        self.every, self.steps, self.rows = every, frozenset(int(s) for s in steps), rows
        self.layers = None if layers is None else tuple(int(l) for l in layers)
        self.adam = bool(adam)
        self.captures: list[Capture] = []
        self.copy_s = 0.0
        self._handles, self._store, self._was = [], {}, {}

    def wants(self, step: int) -> bool:
        return (self.every > 0 and step % self.every == 0) or step in self.steps

    def _layers(self, model) -> list[int]:
        n = len(model.attn_layers)
        layers = list(range(n)) if self.layers is None else list(self.layers)
        if any(not 0 <= l < n for l in layers):
            raise ValueError(f"capture layers {layers} outside the model's {n} layers")
        return layers

    def before_forward(self, step: int, model) -> None:
        if not self.wants(step):
            return
        self._store, self._was = {}, {}
        for l in self._layers(model):
            attn = model.attn_layers[l]
            self._was[l] = attn.capture
            attn.capture = True
            slot = self._store.setdefault(l, {})

            def fwd_hook(mod, inp, out, slot=slot):
                x = inp[0].detach()
                slot["x"] = x.to(out.dtype) if out.dtype != x.dtype else x   # what the matmul consumed
                slot["x_rounding"] = "bf16" if out.dtype == torch.bfloat16 and x.dtype != torch.bfloat16 else "none"
                if out.requires_grad:
                    out.register_hook(lambda g, slot=slot: slot.__setitem__("dqkv", g.detach()))
            self._handles.append(attn.c_attn.register_forward_hook(fwd_hook))

    @torch.no_grad()
    def after_backward(self, step: int, model, optimizer) -> None:
        if not self.wants(step):
            return
        import time
        dev = next(model.parameters()).device
        if dev.type == "cuda":   # the step's queued kernels finish first: copy_s then times the copy alone
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for h in self._handles:
            h.remove()
        self._handles = []
        cfg = model.config
        H, D, C = cfg.n_head, cfg.head_dim, cfg.n_embd
        arrays, enc = {}, {}
        x_source = x_rounding = None
        layers = sorted(self._store)
        for l in layers:
            attn, slot = model.attn_layers[l], self._store[l]
            cap = attn.captured
            missing = [n for n in ("q", "k", "v", "o", "do") if n not in cap] + \
                [n for n in ("x", "dqkv") if n not in slot]
            if missing:
                raise RuntimeError(f"step {step}, layer {l}: nothing captured for {missing} (did the backward run?)")
            B = cap["q"].shape[0]
            if max(self.rows) >= B:
                raise ValueError(f"capture rows {self.rows} exceed the batch of {B} (per rank)")
            idx = torch.tensor(self.rows, device=cap["q"].device)
            dqkv = slot["dqkv"].index_select(0, idx)                                   # (b, T, 3C)
            T = dqkv.shape[1]
            heads_of = lambda t: t.reshape(len(self.rows), T, H, D).transpose(1, 2)  # noqa: E731
            tensors = {n: cap[n].index_select(0, idx) for n in ("q", "k", "v", "o", "do")}
            tensors["dq"], tensors["dk"] = heads_of(dqkv[..., :C]), heads_of(dqkv[..., C:2 * C])
            if "x" in cap:   # the model's own capture of the attention input
                x, x_source = cap["x"], "model"
                x = x.to(slot["x"].dtype) if x.dtype != slot["x"].dtype else x
            else:
                x, x_source = slot["x"], "c_attn_hook"
            x_rounding = slot["x_rounding"]
            tensors["x"] = x.index_select(0, idx)
            for n, t in tensors.items():
                arrays[f"L{l}__{n}"], enc[n] = encode(t)
            wq, wk = model.qk_weights(l)
            for tag, w in (("wq", wq), ("wk", wk)):
                u, s, v = top_triplets_gram(w)
                for n, t in ((f"{tag}_u", u), (f"{tag}_s", s), (f"{tag}_v", v)):
                    arrays[f"L{l}__{n}"], enc[n] = encode(t)
            if self.adam and attn.c_attn.weight.grad is not None:
                den = adam_denominator(optimizer, attn.c_attn.weight)
                for n, blk in (("adam_q", den[:C]), ("adam_k", den[C:2 * C])):
                    arrays[f"L{l}__{n}"], enc[n] = encode(blk.reshape(H, D, C), round_to_bf16=True)
            attn.capture = self._was[l]
            if not self._was[l]:
                attn.captured = {}
        group = optimizer.param_groups[0]
        meta = dict(step=int(step), lr=float(group["lr"]), rows=list(self.rows), layers=layers, heads=list(range(H)),
                    n_head=H, head_dim=D, n_embd=C, seq_len=int(T), scale=1.0 / float(np.sqrt(D)),
                    attn=[model.attn_layers[l].spec.label for l in layers], enc=enc, x_source=x_source,
                    x_rounding=x_rounding,
                    adam=dict(beta1=float(group["betas"][0]), beta2=float(group["betas"][1]),
                              eps=float(group["eps"])) if self.adam else None)
        self._store = {}
        self.captures.append(Capture(meta, arrays))
        self.copy_s += time.perf_counter() - t0
