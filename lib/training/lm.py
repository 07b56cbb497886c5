"""The language model of the new studies: the proxy GPT (`lib.training.model.GPT`) with knobs that shape attention.

`LM(LMConfig(...))` is `GPT` — same blocks, init, tied embedding, capture hooks (`set_capture`, `captured`,
`qk_weights`, `set_step`) — at any size from the CPU toy to GPT-2 124M (12 layers × 768, vocabulary 50304,
T = 1024), plus:

* ``pos``: the positional code — "learned" (GPT's table), "none" (no positional embedding: causal attention alone
  tells positions apart, so equal prefixes give equal hidden states), or "rope" (rotary embedding of q and k,
  base 10000, on every head's full head dim).
* ``qk_norm="fixed"`` with ``qk_gain=g``: q and k RMS-normalised over the head dim (no learnable gain) and scaled by
  the fixed g, so every logit is bounded: |S| ≤ scale·D·g² = √D·g². ``qk_norm="capped"``: the same with a learnable
  per-head gain g_h = qk_gain·sigmoid(θ_h) (θ starts at 0: g_h = g/2), so the bound holds while the model chooses
  its temperature below it. ``qk_norm=True`` keeps GPT's LayerNorm with a learnable, unbounded gain.
* three more attention backends, written as spec strings beside GPT's (`lib.training.model` grammar):
  ``"stable[+fix][/beta=B]"`` — `kernels.stable_attention` (FA2 numerics, the user kernel),
  ``"fp32_flash"`` — FP32 attention without the T × T matrix: PyTorch's memory-efficient SDPA kernel on FP32 q, k,
  v (autocast off), and ``"inject/..."`` — FP32 attention whose backward receives an O error of the theory's size
  on chosen rows (`lib.training.inject`).
* our kernel (GPT's ``"fa2"``, ``"paper/..."`` specs) through its custom ops (`kernels.attention_op`), so that
  `torch.compile(model)` compiles the whole model around it; the same launches as GPT's path, bit for bit, except
  that δ from an FP32 O (``delta_source=fp32_o``) is the O of the backward's own probabilities there (the op's
  docstring says why the old definition broke the softmax's shift invariance). The row-zeroing control and per-head
  overrides keep GPT's path.

Why a subclass and not new options in `GPT`: every committed training result fingerprints the code its run reached
(`lib.book.provenance`), GPT's included, so options added there would mark all of them stale. `LM` with
`pos="learned"`, `qk_norm` False/True and GPT's backends is GPT, parameter for parameter (a test checks the
forward bit for bit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.fp.fix import MAX_SHIFT, USER_BETA
from lib.training import inject
from lib.training.model import GPT, AttnSpec, CausalSelfAttention, GPTConfig, attend

POSITIONS = ("learned", "none", "rope")
QK_NORMS = (False, True, "fixed", "capped")
ROPE_BASE = 10000.0


@dataclass(frozen=True)
class StableSpec:
    """A layer on `kernels.stable_attention` (FA2 numerics; `fix="beta"` the β-shifted max with the shift guard)."""
    fix: str | None = None
    beta: float = USER_BETA
    max_shift: float = MAX_SHIFT
    text: str = "stable"

    @property
    def label(self) -> str:
        return self.text

    heads = None
    backend = "stable"


def parse_stable(s: str) -> StableSpec:
    body, _, suffix = s.partition("+")
    head, *items = body.split("/")
    if head != "stable" or suffix not in ("", "fix"):
        raise ValueError(f"bad stable spec {s!r}; write stable[/beta=B][/max_shift=M][+fix]")
    kw = {}
    for it in items:
        key, eq, val = it.partition("=")
        if key not in ("beta", "max_shift") or not eq:
            raise ValueError(f"bad option {it!r} in {s!r}; options: beta=, max_shift=")
        kw[key] = float(val)
    return StableSpec(fix="beta" if suffix == "fix" else None, text=s, **kw)


@dataclass(frozen=True)
class Fp32FlashSpec:
    """A layer on PyTorch's memory-efficient SDPA kernel with FP32 q, k, v: FP32 attention in O(T) memory."""
    text: str = "fp32_flash"

    @property
    def label(self) -> str:
        return self.text

    heads = None
    backend = "fp32_flash"


def parse_spec(s, **defaults):
    """A layer spec: StableSpec, Fp32FlashSpec, inject.InjectSpec, or GPT's AttnSpec (with the config's fix
    defaults)."""
    if isinstance(s, (StableSpec, Fp32FlashSpec, inject.InjectSpec, AttnSpec)):
        return s
    head = str(s).strip().partition("/")[0].partition("+")[0]
    if head == "stable":
        return parse_stable(s.strip())
    if s.strip() == "fp32_flash":
        return Fp32FlashSpec()
    if head == "inject":
        return inject.parse(s.strip())
    return AttnSpec.parse(s, **defaults)


@dataclass
class LMConfig(GPTConfig):
    """GPTConfig plus the positional code and the bounded QK-norm (module docstring)."""
    pos: str = "learned"
    qk_gain: float = 1.0        # g of qk_norm "fixed" / the cap of "capped"

    def __post_init__(self):
        if self.pos not in POSITIONS:
            raise ValueError(f"pos must be one of {POSITIONS}, got {self.pos!r}")
        if self.qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm must be one of {QK_NORMS}, got {self.qk_norm!r}")
        if not (isinstance(self.qk_gain, (int, float)) and self.qk_gain > 0 and math.isfinite(self.qk_gain)):
            raise ValueError(f"qk_gain must be a finite number > 0, got {self.qk_gain!r}")
        if self.pos == "rope" and self.head_dim % 2:
            raise ValueError(f"rope needs an even head dim, got {self.head_dim}")
        qk = self.qk_norm
        self.qk_norm = bool(qk) if qk in (False, True) else False   # GPTConfig validates a bool
        super().__post_init__()
        self.qk_norm = qk

    def layer_specs(self) -> list:
        specs = self.attn.split(",") if isinstance(self.attn, str) else self.attn
        specs = list(specs) if isinstance(specs, (list, tuple)) else [specs]
        if len(specs) not in (1, self.n_layer):
            raise ValueError(f"attn lists {len(specs)} specs for {self.n_layer} layers")
        kw = dict(beta=self.beta, tie_tol=self.tie_tol, max_shift=self.max_shift, zero_at=self.zero_at)
        return [parse_spec(s, **kw) for s in specs * (self.n_layer // len(specs))]

    def to_dict(self) -> dict:
        from dataclasses import asdict, fields
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["attn"] = [asdict(s) if hasattr(s, "__dataclass_fields__") else str(s) for s in self.layer_specs()]
        return d


def rope(x: torch.Tensor, base: float = ROPE_BASE) -> torch.Tensor:
    """Rotary position embedding of x (B, H, T, D), pairs (i, i + D/2) rotated by position·base^(−2i/D); FP32
    angles, the result in x's dtype."""
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    ang = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    xf = x.float()
    a, b = xf[..., :half], xf[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)


# The user kernel is found by name: a run that does not select it does not depend on its code. A run that does is
# fingerprinted with it through `code_entries` (`lib.training.grid`).
STABLE_KERNEL = "kernels.stable_attention:stable_attention"


def stable_attend(spec: StableSpec, q, k, v):
    import importlib
    mod, _, name = STABLE_KERNEL.partition(":")
    stable_attention = getattr(importlib.import_module(mod), name)
    if q.device.type != "cuda":
        raise RuntimeError("the stable backend is a CUDA kernel; train it on a GPU")
    with torch.autocast(device_type="cuda", enabled=False):
        return stable_attention(q, k, v, is_causal=True, fix=spec.fix, beta=spec.beta, max_shift=spec.max_shift)


def fp32_flash_attention(q, k, v):
    """Causal attention in FP32 by PyTorch's memory-efficient SDPA kernel (autocast off; FP32 q, k, v; no T × T
    matrix); O in q's dtype. The kernel pinned, so a machine without it fails instead of silently materialising."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with torch.autocast(device_type=q.device.type, enabled=False):
        backends = [SDPBackend.EFFICIENT_ATTENTION] if q.device.type == "cuda" else [SDPBackend.MATH]
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    return o.to(q.dtype)


def ours_op_attend(spec: AttnSpec, q, k, v):
    """GPT's "ours" spec through the custom ops of `kernels.attention_op` (module docstring)."""
    from kernels.attention_op import attention_op
    with torch.autocast(device_type=q.device.type, enabled=False):
        return attention_op(q, k, v, causal=True, numerics=spec.numerics, fix=spec.fix, beta=spec.beta,
                            tie_tol=spec.tie_tol, max_shift=spec.max_shift, path=spec.path)


def _op_path(spec) -> bool:
    """Whether a layer spec takes the custom-op path: our kernel, no row-zeroing control, no per-head override."""
    return isinstance(spec, AttnSpec) and spec.backend == "ours" and spec.fix != "zero_rows" and spec.heads is None


class LMAttention(CausalSelfAttention):
    """GPT's attention with rope, the bounded QK-norm and the two new backends."""

    def __init__(self, cfg: LMConfig, spec, layer: int = 0):
        super().__init__(replace(cfg, qk_norm=cfg.qk_norm is True), spec, layer)
        self.pos, self.qk_mode, self.qk_gain = cfg.pos, cfg.qk_norm, float(cfg.qk_gain)
        self.qk_theta = nn.Parameter(torch.zeros(cfg.n_head)) if cfg.qk_norm == "capped" else None

    def gain(self) -> torch.Tensor | float:
        """The QK-norm gain per head, (H, 1, 1), or a float for "fixed"."""
        if self.qk_mode == "capped":
            return (self.qk_gain * torch.sigmoid(self.qk_theta)).view(-1, 1, 1)
        return self.qk_gain

    def project(self, x):
        """q, k, v (B, H, T, D) of x (B, T, C) as the backend sees them: after rope and the QK-norm."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hd = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hd).transpose(1, 2) for t in (q, k, v))
        if self.pos == "rope":
            q, k = rope(q), rope(k)
        if self.q_ln is not None:
            q, k = self.q_ln(q).to(v.dtype), self.k_ln(k).to(v.dtype)
        elif self.qk_mode in ("fixed", "capped"):
            # RMS-normalise in FP32 (the bound must hold whatever the autocast dtype), then the gain.
            g = self.gain()
            q = (F.rms_norm(q.float(), (hd,)) * g).to(v.dtype)
            k = (F.rms_norm(k.float(), (hd,)) * g).to(v.dtype)
        return q, k, v

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.project(x)
        call = replace(self.attn_call, stats={}) if self.capture else self.attn_call
        if isinstance(self.spec, StableSpec):
            y = stable_attend(self.spec, q, k, v)
        elif isinstance(self.spec, Fp32FlashSpec):
            y = fp32_flash_attention(q, k, v)
        elif _op_path(self.spec):
            y = ours_op_attend(self.spec, q, k, v)
        elif isinstance(self.spec, inject.InjectSpec):
            y = inject.attention(q, k, v, spec=self.spec, call=call)
        else:
            y = attend(self.spec, q, k, v, call)
        if self.capture:
            self.captured = dict(x=x.detach(), q=q.detach(), k=k.detach(), v=v.detach(), o=y.detach(),
                                 stats=call.stats)
            if y.requires_grad:
                y.register_hook(self._save_do)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class LM(GPT):
    """GPT with the knobs of `LMConfig`. forward(idx (B, T), targets (B, T) | None) -> (logits, loss | None), loss
    the mean cross-entropy in nats per token (FP32)."""

    def __init__(self, cfg: LMConfig):
        if not isinstance(cfg, LMConfig):
            raise TypeError(f"LM needs an LMConfig, got {type(cfg).__name__}")
        super().__init__(cfg)
        # Swap in the extended attention with GPT's initial weights (so the default LM is GPT bit for bit).
        for i, (blk, spec) in enumerate(zip(self.transformer.h, cfg.layer_specs())):
            new = LMAttention(cfg, spec, i)
            got = new.load_state_dict(blk.attn.state_dict(), strict=False)
            # Only the bounded QK-norm's own gain is new, only GPT's LayerNorm gains (built for a truthy qk_norm) go.
            assert set(got.missing_keys) <= {"qk_theta"} and \
                all(k.startswith(("q_ln.", "k_ln.")) for k in got.unexpected_keys), got
            blk.attn = new
        if cfg.pos != "learned":
            del self.transformer["wpe"]

    def forward(self, idx, targets=None):
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        x = self.transformer.wte(idx)
        if self.config.pos == "learned":
            x = x + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
