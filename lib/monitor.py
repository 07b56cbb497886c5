"""AttentionMonitor: every N training steps, the census of the tie bias's preconditions, the largest logit and σ₁ of
each head's W_Q for chosen attention layers, written as JSON lines, with warnings on documented thresholds.

    mon = AttentionMonitor(model, every=100, layers=None, placement="authors", out="monitor.jsonl")
    for step in range(steps):
        mon.step(step)                    # before the forward: arms the capture when the step is due
        loss = model(x, y)[1]; loss.backward()
        mon.collect(step)                 # after the forward/backward: census, σ₁, one JSON line per layer, disarm
        ...
    data = AttentionMonitor.read("monitor.jsonl")   # arrays indexed (step, layer, head)

It is also a `lib.training.train.train(cfg, step_hook=mon)` hook (`before_forward(step, model)`,
`after_backward(step, model, optimizer)`).

Reaching q, k, v (the attention modules are found once, in this order of preference):
* `qkv_fn(module, args, output) -> (q, k, v)`, given: called by a forward hook on each attention module at an armed
  step (q, k, v: (B, H, T, D)); the modules are `attn_modules` or found as below.
* modules with `capture`/`captured` (`lib.training.model.CausalSelfAttention`: `model.attn_layers`): the monitor sets
  `capture = True` on the chosen layers for the armed step and reads `captured["q"|"k"|"v"]` (as the backend saw
  them), then restores the flag and, unless someone else had it on (the harness's telemetry), clears `captured`.
* otherwise, modules whose class's `forward` calls `scaled_dot_product_attention` (found from the source): for the
  armed step a forward pre-hook swaps `torch.nn.functional.scaled_dot_product_attention` for a recorder that keeps
  the first call's q, k, v (the sub-batch only) and its `is_causal`/`scale`, and a forward hook swaps it back. This
  sees calls written as `F.scaled_dot_product_attention(...)` (or `torch.nn.functional.…`), not a name imported
  before the swap; use `qkv_fn` then. A call with an `attn_mask` is not supported (the census is causal or full).

Per event and chosen layer: `lib.census.precondition_census` on the first `batch_rows` sequences (q, k, v rounded to
BF16 first when they are not BF16, e.g. an FP32 model on the CPU; the record says which), and σ₁ of each head's W_Q
by `power_iters` power-iteration steps whose vectors persist across events (W_Q: `wq_fn(module) -> (H, D, C)`, by
default the nanoGPT layout `module.c_attn.weight[:C]` viewed (n_head, C/n_head, C); None when neither exists).

A JSON line: {"step", "layer", "placement", "batch_rows", "seq_len", "n_head", "causal", "qkv_dtype", "ms" (wall
time of the layer's census and σ₁, after a CUDA synchronise), every per-head census key (lists; NaN as null),
"r_hist" (H lists), "sigma_wq" (list or null), "warnings" (list of str)}.

Warnings (`Thresholds`; Python `warnings` of class `MonitorWarning` and the record's "warnings"), per layer and event:
* a head's conjunction rate above `conjunction` (default 1 % of its (row, feature) pairs);
* a head's conjunction rate above `rise` × max(its first event's rate, `floor`) (default 10 × max(first, 10⁻⁴));
* the layer's largest logit above `max_logit` (default 100, chapter 6's logit bound for the healthy regime).
These defaults are starting points, not calibrated against failures.
"""
from __future__ import annotations

import inspect
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lib.census import R_EDGES, precondition_census

__all__ = ["AttentionMonitor", "MonitorWarning", "Thresholds", "PER_HEAD", "find_attention_modules"]

PER_HEAD = ("tie_rate", "window_rate", "zero_rate", "one_signed", "conjunction", "sink_rate", "top1", "max_logit",
            "err_ulp", "err_pred", "err_ell", "n_rows", "n_tied", "n_window", "n_zero", "n_conj")
_SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale")   # F.scaled_dot_product_attention after q, k, v


class MonitorWarning(UserWarning):
    """A monitored quantity passed its threshold (`Thresholds`)."""


@dataclass(frozen=True)
class Thresholds:
    """When the monitor warns (module docstring). Rates are fractions of a head's (row, feature) pairs."""
    conjunction: float = 0.01
    rise: float = 10.0
    floor: float = 1e-4
    max_logit: float = 100.0


def _calls_sdpa(cls) -> bool:
    try:
        return "scaled_dot_product_attention" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


def find_attention_modules(model: torch.nn.Module) -> list:
    """The attention modules of `model`, in order: `model.attn_layers` if it has them, else the modules with
    `capture`/`captured`, else the modules whose class's forward calls scaled_dot_product_attention."""
    if hasattr(model, "attn_layers"):
        return list(model.attn_layers)
    found = [m for m in model.modules() if hasattr(m, "capture") and hasattr(m, "captured")]
    return found or [m for m in model.modules() if _calls_sdpa(type(m))]


def _default_wq(module):
    """(H, D, C) per-head W_Q of a nanoGPT-style attention (c_attn: Linear(C, 3C), rows [0, C) = Q), or None."""
    lin, n_head = getattr(module, "c_attn", None), getattr(module, "n_head", None)
    if not isinstance(lin, torch.nn.Linear) or not isinstance(n_head, int):
        return None
    C = lin.in_features
    return lin.weight[:C].view(n_head, C // n_head, C)


def _json_list(x):
    """A numpy array as nested lists with NaN/inf as None (JSON has no NaN)."""
    a = np.asarray(x, dtype=np.float64)
    return np.where(np.isfinite(a), a, None).tolist()


class AttentionMonitor:
    """Census, largest logit and σ₁(W_Q) of chosen attention layers every `every` steps (module docstring).

    model: any nn.Module (or None: bound at the first `before_forward`); every: steps between events (events at
    step % every == 0); layers: indices into the attention modules (None: all); placement: the census's ("authors"
    or "fa2"); out: JSON-lines path, created (truncated) here, or None to keep the records in `self.records` only;
    batch_rows: sequences of the batch the census sees; attn_modules, qkv_fn (q, k, v of a causal attention),
    wq_fn: how to reach the attention (module docstring); power_iters: power steps per event; thresholds:
    `Thresholds`; chunk: the census's (b, h) chunk; seed: the power vectors' start."""

    def __init__(self, model=None, every: int = 100, layers=None, placement: str = "authors", out="monitor.jsonl",
                 *, batch_rows: int = 4, attn_modules=None, qkv_fn=None, wq_fn=None, power_iters: int = 3,
                 thresholds: Thresholds = Thresholds(), chunk: int = 16, seed: int = 0):
        for name, val in (("every", every), ("batch_rows", batch_rows), ("power_iters", power_iters)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        self.every, self.placement = every, placement
        self.batch_rows, self.power_iters, self.thresholds, self.chunk = batch_rows, power_iters, thresholds, chunk
        self.qkv_fn, self.wq_fn, self.seed = qkv_fn, wq_fn or _default_wq, seed
        self._layers, self._attn_modules = layers, attn_modules
        self.model, self.modules, self.layers, self.mode = None, [], [], None
        self.out = None if out is None else Path(out)
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text("")
        self.records: list[dict] = []
        self._armed = None
        self._handles, self._was, self._got = [], {}, {}
        self._sdpa_original = None
        self._power: dict[int, torch.Tensor] = {}
        self._first: dict[int, dict] = {}
        if model is not None:
            self.bind(model)

    def bind(self, model) -> None:
        """Find the attention modules of `model` and choose how to reach q, k, v (module docstring). Called by the
        constructor, or by the first `before_forward(step, model)` when the monitor was made without a model (as a
        `train(step_hook=)` hook, whose model the harness builds)."""
        mods = list(self._attn_modules) if self._attn_modules is not None else find_attention_modules(model)
        if not mods:
            raise ValueError("no attention modules found: pass attn_modules (and qkv_fn if they do not call "
                             "F.scaled_dot_product_attention)")
        layers = list(range(len(mods))) if self._layers is None else [int(l) for l in self._layers]
        if any(not 0 <= l < len(mods) for l in layers):
            raise ValueError(f"layers {layers} outside the {len(mods)} attention modules")
        self.model, self.modules, self.layers = model, mods, layers
        self.mode = "qkv_fn" if self.qkv_fn is not None else \
            "capture" if all(hasattr(mods[l], "captured") for l in layers) else "sdpa"

    # -- the step protocol ---------------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        return step % self.every == 0

    def step(self, step: int) -> None:
        """Before the forward of `step`: arm the capture of the chosen layers if the step is due."""
        if not self.due(step):
            return
        if self.model is None:
            raise RuntimeError("AttentionMonitor has no model: pass one, call bind(model), or use it as a step_hook")
        self._disarm()
        self._armed, self._got = int(step), {}
        for l in self.layers:
            m = self.modules[l]
            if self.mode == "qkv_fn":
                self._handles.append(m.register_forward_hook(
                    lambda mod, args, out, l=l: self._got.setdefault(l, self._qkv(*self.qkv_fn(mod, args, out)))))
            elif self.mode == "capture":
                self._was[l] = m.capture
                m.capture = True
            else:
                self._handles.append(m.register_forward_pre_hook(lambda mod, args, l=l: self._swap_sdpa(l)))
                self._handles.append(m.register_forward_hook(lambda mod, args, out: self._restore_sdpa(),
                                                             always_call=True))

    @torch.no_grad()
    def collect(self, step: int) -> list[dict]:
        """After the forward (and backward) of `step`: census and σ₁ of each chosen layer, one JSON line each, then
        disarm. Returns this step's records ([] when the step was not armed)."""
        if self._armed != step:
            return []
        got = {}
        for l in self.layers:
            if self.mode == "capture":
                cap = self.modules[l].captured
                if not all(n in cap for n in "qkv"):
                    raise RuntimeError(f"step {step}, layer {l}: nothing captured (did the forward run?)")
                got[l] = self._qkv(cap["q"], cap["k"], cap["v"])
            elif l in self._got:
                got[l] = self._got[l]
            else:
                raise RuntimeError(f"step {step}, layer {l}: no q, k, v recorded (did the forward run, and does the "
                                   f"module call F.scaled_dot_product_attention? else pass qkv_fn)")
        self._disarm()
        recs = [self._event(step, l, *got[l]) for l in self.layers]
        if self.out is not None:
            with self.out.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in recs)
        self.records.extend(recs)
        return recs

    def before_forward(self, step: int, model=None) -> None:
        """`train(step_hook=)` protocol: `step` (binding `model` first if the monitor has none)."""
        if self.model is None and model is not None:
            self.bind(model)
        self.step(step)

    def after_backward(self, step: int, model=None, optimizer=None) -> list[dict]:
        """`train(step_hook=)` protocol (also callable as `after_backward(step)`): `collect`."""
        return self.collect(step)

    # -- reading q, k, v -------------------------------------------------------------------------------------------
    def _qkv(self, q, k, v, causal: bool = True, scale=None):
        """The sub-batch the census sees, detached: (q, k, v, causal, scale)."""
        r = self.batch_rows
        return q.detach()[:r], k.detach()[:r], v.detach()[:r], bool(causal), scale

    def _swap_sdpa(self, layer: int) -> None:
        if self._sdpa_original is None:           # (a nested monitored module keeps the outer one's original)
            self._sdpa_original = F.scaled_dot_product_attention
        original = self._sdpa_original

        def recorder(q, k, v, *args, **kwargs):
            opts = dict(zip(_SDPA_ARGS, args)) | kwargs
            if layer not in self._got:
                if opts.get("attn_mask") is not None:
                    raise ValueError("AttentionMonitor: an SDPA call with attn_mask is not supported; pass qkv_fn")
                self._got[layer] = self._qkv(q, k, v, opts.get("is_causal", False), opts.get("scale"))
            return original(q, k, v, *args, **kwargs)
        F.scaled_dot_product_attention = recorder

    def _restore_sdpa(self) -> None:
        if self._sdpa_original is not None:
            F.scaled_dot_product_attention = self._sdpa_original
            self._sdpa_original = None

    def _disarm(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._restore_sdpa()
        for l, was in self._was.items():
            m = self.modules[l]
            m.capture = was
            if not was:
                m.captured = {}
        self._was = {}
        self._armed = None

    # -- one event -------------------------------------------------------------------------------------------------
    def _event(self, step: int, layer: int, q, k, v, causal: bool, scale) -> dict:
        if q.is_cuda:
            torch.cuda.synchronize(q.device)      # time the event alone, not the step's queued kernels
        t0 = time.perf_counter()
        dtype = str(q.dtype).replace("torch.", "")
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        c = precondition_census(q, k, v, causal=causal, placement=self.placement, scale=scale, chunk=self.chunk)
        sigma = self._sigma(layer)
        rec = dict(step=int(step), layer=int(layer), placement=self.placement, batch_rows=int(q.shape[0]),
                   seq_len=int(q.shape[2]), n_head=int(q.shape[1]), causal=causal, qkv_dtype=dtype,
                   ms=(time.perf_counter() - t0) * 1e3)
        rec.update({key: _json_list(c[key]) for key in PER_HEAD})
        rec["r_hist"] = c["r_hist"].astype(int).tolist()
        rec["sigma_wq"] = None if sigma is None else _json_list(sigma.cpu().numpy())
        rec["warnings"] = self._warnings(rec, c)
        return rec

    def _sigma(self, layer: int):
        """σ₁ (H,) of each head's W_Q by power iteration from the vectors of the previous event (None without W_Q)."""
        w = self.wq_fn(self.modules[layer])
        if w is None:
            return None
        w = w.detach().float()
        H, _, C = w.shape
        v = self._power.get(layer)
        if v is None or v.shape != (H, C) or v.device != w.device or not bool(torch.isfinite(v).all()):
            g = torch.Generator().manual_seed(self.seed + layer)
            v = torch.nn.functional.normalize(torch.randn(H, C, generator=g), dim=-1).to(w.device)
        for _ in range(self.power_iters):
            u = torch.nn.functional.normalize(torch.einsum("hdc,hc->hd", w, v), dim=-1)
            v = torch.einsum("hdc,hd->hc", w, u)
            sigma = v.norm(dim=-1)
            v = v / sigma[:, None]
        self._power[layer] = v
        return sigma

    def _warnings(self, rec: dict, c: dict) -> list[str]:
        th, l, s = self.thresholds, rec["layer"], rec["step"]
        conj = np.asarray(c["conjunction"], dtype=np.float64)
        first = self._first.setdefault(l, dict(step=s, conjunction=conj.copy()))
        msgs = []
        if conj.max() > th.conjunction:
            h = int(conj.argmax())
            msgs.append(f"step {s}, layer {l}: head {h}'s conjunction rate {conj[h]:.3g} is above {th.conjunction:g}")
        if first["step"] != s:
            base = np.maximum(first["conjunction"], th.floor)
            for h in np.flatnonzero(conj > th.rise * base):
                msgs.append(f"step {s}, layer {l}: head {h}'s conjunction rate rose to {conj[h]:.3g}, above "
                            f"{th.rise:g} × max(its step-{first['step']} rate {first['conjunction'][h]:.3g}, "
                            f"{th.floor:g})")
        top = float(np.max(c["max_logit"]))
        if top > th.max_logit:
            msgs.append(f"step {s}, layer {l}: the largest logit {top:.4g} is above {th.max_logit:g}")
        for m in msgs:
            warnings.warn(m, MonitorWarning)
        return msgs

    # -- reading a record file -------------------------------------------------------------------------------------
    @staticmethod
    def read(path) -> dict:
        """A JSON-lines file of the monitor as arrays: "step" (S,), "layer" (L,) (sorted), every per-head key and
        "sigma_wq" as (S, L, H) float arrays (NaN where missing), "r_hist" (S, L, H, bins), "ms" (S, L), "r_edges",
        and "warnings": a list of (step, layer, message)."""
        recs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        if not recs:
            raise ValueError(f"{path}: no records")
        steps = sorted({r["step"] for r in recs})
        layers = sorted({r["layer"] for r in recs})
        H = max(r["n_head"] for r in recs)
        si, li = {s: i for i, s in enumerate(steps)}, {l: i for i, l in enumerate(layers)}
        n_bins = len(R_EDGES) - 1
        out = {key: np.full((len(steps), len(layers), H), np.nan) for key in (*PER_HEAD, "sigma_wq")}
        out["r_hist"] = np.zeros((len(steps), len(layers), H, n_bins))
        out["ms"] = np.full((len(steps), len(layers)), np.nan)
        out["warnings"] = []
        for r in recs:
            i, j, h = si[r["step"]], li[r["layer"]], r["n_head"]
            for key in (*PER_HEAD, "sigma_wq"):
                if r.get(key) is not None:
                    out[key][i, j, :h] = [np.nan if x is None else x for x in r[key]]
            out["r_hist"][i, j, :h] = r["r_hist"]
            out["ms"][i, j] = r["ms"]
            out["warnings"].extend((r["step"], r["layer"], m) for m in r["warnings"])
        out.update(step=np.array(steps), layer=np.array(layers), r_edges=R_EDGES.copy())
        return out
