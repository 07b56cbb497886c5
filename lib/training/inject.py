"""Bias injection: FP32 attention whose backward sees an O error of the tie bias's size on a chosen fraction of rows.

The causal test of links 3–7 at a rate we choose. The forward is FP32 attention (as the "naive" backend). On a
fraction r of the query rows of the chosen heads it forms the error the tie bias would put into O,

    E[row, d] = e · ulp_bf16(O[row, d]) · sign(O[row, d])          (e in ULP; 0 on the other rows and heads)

— "away from zero", chapter 1's direction: on a tied row whose mass sits on the tied keys and whose V is one-signed
over them, O ≈ mean V of the tied keys, so sign(O) = sign(V) — and hands it to the backward only through δ, exactly
as the paper says the biased O reaches training (`lib.training.dose_backend.DoseAttention` with O_lp = O + E,
component "true", amplification λ):

    δ = rowsum(dO ∘ O_fp32) + λ · rowsum(dO ∘ E).

Row choice (`select`): "tied" takes the rows whose BF16 score maximum repeats first (`lib.training.metrics
.bf16_row_ties`, the harness's tie definition), then random rows up to the rate; "random" ignores ties. The choice
is random per step and layer, from a generator seeded by (run seed, step, layer), so a run is reproducible.

Direction (`dir`): "o" (the default, above) puts the error on every feature of a chosen row along sign(O); "v"
puts it only on the features where V has one strict sign over the keys at the row's BF16 score maximum (the tied
keys; on an untied row, the one key at the maximum), along that sign, and 0 on the others:

    E[row, d] = e · ulp_bf16(O[row, d]) · s[row, d],    s = ±1 where V[keys at the max, d] is all > 0 / all < 0

— chapter 1's direction taken literally: the census's conjunction is the window rows' one-signed features
(`lib.census`), and there the bias follows sign(V) of the tied keys, whatever the untied keys do to sign(O).

Spec string: ``inject/r=<rate>[/e=<ULP>][/lam=<λ>][/heads=<i>:<j>...][/select=tied|random][/dir=o|v]``, e.g.
``inject/r=0.01/heads=0:1/select=tied`` or ``inject/r=0.03/dir=v``. Defaults: e = `E_DEFAULT`, λ = 1, all heads,
"tied", "o". r = 0 is FP32 attention bit for bit. One rate per layer: a model gives each layer its own spec
(`lib.training.model.GPTConfig`: one comma-separated spec per layer).

At telemetry steps (the model passes a `stats` dict) it records "inj_n_rows", "inj_n_sel", "inj_n_tied",
"inj_n_sel_tied", "inj_n_pairs" (the (row, feature) pairs whose error is not 0: with dir "v", fewer than
inj_n_sel·D) and keeps "inj_err" (E, (B, H, T, D) FP32) and "inj_rows" ((B, H, T) bool) for the study's
measurements of Δδ, the dW_Q error and its push on ‖W_Q‖₂.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lib.training.dose_backend import DoseAttention
from lib.training.metrics import bf16_row_ties

# The tie bias along sign(V) in ULP of O, for two tied maxima whose remainder sits inside the sticky-bit band
# (chapter 1: the expected rounding error of a carry tie broken by the sticky bit, −0.25 ULP for negative V in the
# Monte Carlo of attention-shaped rows, i.e. +0.25 ULP along sign(V)). A study may pass the census's measured value.
E_DEFAULT = 0.25
SELECTS = ("tied", "random")
DIRS = ("o", "v")


@dataclass(frozen=True)
class InjectSpec:
    rate: float
    e: float = E_DEFAULT
    lam: float = 1.0
    heads: tuple | None = None
    select: str = "tied"
    text: str = ""
    dir: str = "o"

    backend = "inject"

    def __post_init__(self):
        for name in ("rate", "e", "lam"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"inject {name} must be a finite number, got {v!r}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"inject rate must be in [0, 1], got {self.rate!r}")
        if self.lam < 0:
            raise ValueError(f"inject lam must be >= 0, got {self.lam!r}")
        if self.select not in SELECTS:
            raise ValueError(f"inject select must be one of {SELECTS}, got {self.select!r}")
        if self.dir not in DIRS:
            raise ValueError(f"inject dir must be one of {DIRS}, got {self.dir!r}")
        if self.heads is not None and (not self.heads or min(self.heads) < 0 or len(set(self.heads)) != len(self.heads)):
            raise ValueError(f"inject heads must be distinct non-negative indices, got {self.heads!r}")

    @property
    def label(self) -> str:
        return self.text or f"inject/r={self.rate:g}"


def parse(spec: str) -> InjectSpec:
    head, *items = spec.split("/")
    if head != "inject":
        raise ValueError(f"bad inject spec {spec!r}; write inject/r=<rate>[/e=..][/lam=..][/heads=i:j][/select=..]"
                         "[/dir=o|v]")
    kw = {}
    for it in items:
        key, eq, val = it.partition("=")
        if not eq:
            raise ValueError(f"bad item {it!r} in {spec!r}; write key=value")
        try:
            if key == "r":
                kw["rate"] = float(val)
            elif key in ("e", "lam"):
                kw[key] = float(val)
            elif key == "heads":
                kw["heads"] = tuple(int(h) for h in val.split(":"))
            elif key in ("select", "dir"):
                kw[key] = val
            else:
                raise ValueError(f"unknown inject option {key!r} in {spec!r}")
        except ValueError as e:
            raise ValueError(f"bad inject spec {spec!r}: {e}") from None
    if "rate" not in kw:
        raise ValueError(f"inject spec {spec!r} needs r=<rate>")
    return InjectSpec(text=spec, **kw)


def ulp_bf16(x: torch.Tensor) -> torch.Tensor:
    """The BF16 unit in the last place of each element of x (FP32): 2^(⌊log2|x|⌋ − 7); 0 where x = 0."""
    _, e = torch.frexp(x.float())           # x = m·2^e, 0.5 ≤ |m| < 1, so ⌊log2|x|⌋ = e − 1
    return torch.where(x == 0, torch.zeros_like(x, dtype=torch.float32), torch.ldexp(torch.ones_like(x, dtype=torch.float32), e - 8))


def _uniform(shape, *, seed: int, step: int, layer: int, device) -> torch.Tensor:
    s = int(np.random.SeedSequence([int(seed), int(step), int(layer), 7]).generate_state(1, np.uint64)[0] >> 1)
    g = torch.Generator(device=device).manual_seed(s)
    return torch.rand(tuple(shape), generator=g, device=device)


def max_key_signs(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) FP32: +1 / −1 where V (B, H, T_k, D) is > 0 / < 0 at every key of the row's BF16 score maximum
    (the keys `lib.training.metrics.bf16_row_ties` counts; masked −inf keys never), 0 where those keys' V differ in
    sign or one is 0. s: the FP32 scores (B, H, T, T_k). The counts are exact (integers far below 2²⁴ in FP32)."""
    sb = s.detach().to(torch.bfloat16)
    at = ((sb == sb.amax(dim=-1, keepdim=True)) & torch.isfinite(sb)).to(torch.float32)
    vf = v.detach().float()
    n = at.sum(dim=-1, keepdim=True)
    n_pos = torch.matmul(at, (vf > 0).to(torch.float32))
    n_neg = torch.matmul(at, (vf < 0).to(torch.float32))
    return (n_pos == n).to(torch.float32) - (n_neg == n).to(torch.float32)


def select_rows(tied: torch.Tensor, head_mask: torch.Tensor, rate: float, u: torch.Tensor, select: str) -> torch.Tensor:
    """(B, H, T) bool: rows that receive the error. Among the rows of the chosen heads (`head_mask`, (H,) bool), a
    fraction `rate` in expectation: with select="tied", tied rows first (each with probability min(1, rate/f_tied)),
    then untied rows with the probability that brings the total to `rate`; with "random", every row with probability
    `rate`. `u`: uniform [0, 1) draws of the rows' shape."""
    hm = head_mask.view(1, -1, 1).expand_as(tied)
    if select == "random" or rate == 0.0:
        return (u < rate) & hm
    n = hm.sum().clamp(min=1)
    f_tied = ((tied & hm).sum() / n).item()
    if f_tied >= rate:
        p_tied, p_other = (rate / f_tied if f_tied > 0 else 0.0), 0.0
    else:
        p_tied, p_other = 1.0, (rate - f_tied) / (1.0 - f_tied)
    p = torch.where(tied, torch.full_like(u, p_tied), torch.full_like(u, p_other))
    return (u < p) & hm


def attention(q, k, v, *, spec: InjectSpec, call=None, causal: bool = True, scale=None):
    """Causal attention of q, k, v (B, H, T, D): FP32 forward; backward with λ·rowsum(dO∘E) added to δ (module
    docstring). Without a gradient to compute (evaluation) only the FP32 forward runs."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    B, H, T, _ = q.shape
    with torch.autocast(device_type=q.device.type, enabled=False), torch.no_grad():
        s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
        if causal:
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=s.device).tril(), float("-inf"))
        o = torch.matmul(torch.softmax(s, dim=-1), v.float())
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        return o.to(q.dtype)
    with torch.no_grad():
        heads = torch.ones(H, dtype=torch.bool, device=q.device)
        if spec.heads is not None:
            if max(spec.heads) >= H:
                raise ValueError(f"inject names head {max(spec.heads)} but the layer has {H} heads")
            heads = torch.zeros_like(heads)
            heads[list(spec.heads)] = True
        tied = bf16_row_ties(s)
        u = _uniform((B, H, T), seed=getattr(call, "seed", 0), step=getattr(call, "step", 0),
                     layer=getattr(call, "layer", 0), device=q.device)
        rows = select_rows(tied, heads, spec.rate, u, spec.select)
        sign = torch.sign(o) if spec.dir == "o" else max_key_signs(s, v)
        err = spec.e * ulp_bf16(o) * sign * rows.unsqueeze(-1)
        stats = getattr(call, "stats", None)
        if stats is not None:
            hm = heads.view(1, -1, 1).expand_as(tied)
            stats.update(inj_n_rows=int(hm.sum()), inj_n_sel=int(rows.sum()), inj_n_tied=int((tied & hm).sum()),
                         inj_n_sel_tied=int((rows & tied).sum()), inj_n_pairs=int((err != 0).sum()), inj_err=err,
                         inj_rows=rows)
    return DoseAttention.apply(q, k, v, o + err, scale, causal, "true", spec.lam, None, None)
