"""A small GPT in the style of nanoGPT, with a pluggable attention backend per layer.

Pre-LayerNorm blocks, no biases (Linear or LayerNorm), GELU MLP 4×, byte vocabulary (256) with the token embedding
tied to the output head, learned positions, init N(0, 0.02) and residual projections (`c_proj`) N(0, 0.02/√(2·L));
LayerNorm gains start at 1. Shapes: tokens (B, T); residual stream x (B, T, C); per-head q, k, v, o (B, H, T, D)
with C = H·D; q_h = x·W_Q[h]ᵀ with W_Q[h] (D, C) a slice of `c_attn.weight` (`GPT.qk_weights`).

Sizes from the CPU toy to GPT-2 124M (12 layers × 768, vocabulary 50304, T = 1024). Options, all off by default:

* ``pos``: the positional code — "learned" (the table `wpe`), "none" (no positional embedding: causal attention
  alone tells positions apart, so equal prefixes give equal hidden states), or "rope" (rotary embedding of q and k,
  base 10000, on every head's full head dim). The table is drawn at init whatever the mode and dropped unless
  "learned", so every mode draws the same random stream for the other parameters.
* ``qk_norm`` (Wortsman et al. 2023, the standard control of attention-logit growth): True — a LayerNorm over
  head_dim (learnable gain shared by the heads, no bias, like the model's other LayerNorms) on q and on k of every
  head, before any backend; under autocast its FP32 output is cast back to v's dtype, so the backend sees BF16 q, k
  as without it. "fixed" with ``qk_gain=g``: q and k RMS-normalised over the head dim in FP32 (no learnable gain)
  and scaled by the fixed g, so every logit is bounded: |S| ≤ scale·D·g² = √D·g². "capped": the same with a
  learnable per-head gain g_h = qk_gain·sigmoid(θ_h) (θ starts at 0: g_h = g/2), so the bound holds while the model
  chooses its temperature below it. Off, the model is the same computation, parameter for parameter.
* our kernel through its custom ops (`GPT.set_ops(True)`, `kernels.attention_op`), so that `torch.compile(model)`
  compiles the whole model around it; the same launches as the direct path, bit for bit, except that δ from an
  FP32 O (``delta_source=fp32_o``) is the O of the backward's own probabilities there (the op's docstring says why
  the old definition broke the softmax's shift invariance). The row-zeroing control and per-head overrides keep the
  direct path. `build_lm` builds the model this way, as the token-corpus trainer (`lib.training.loop`) does.

Attention backends (`AttnSpec.backend`; the functions and their dispatch table `BACKENDS`: `lib.training.backends`):
* ``"ours"``  — `kernels.attention.attention` with any numerics / fix / β / tie tolerance (imported lazily, so this
  module works before or without the kernel). BF16 q/k/v under CUDA autocast take the kernel's native path;
  FP32 q/k/v (CPU) take its emulated path.
* ``"sdpa"``  — `torch.nn.functional.scaled_dot_product_attention`, pinned to the FlashAttention backend on CUDA
  (`sdpa_kernel(SDPBackend.FLASH_ATTENTION)`); plain SDPA (whichever CPU kernel PyTorch picks) on the CPU.
* ``"naive"`` — softmax(scale·QKᵀ + mask)·V written out in FP32 with autocast off; output cast back to q's dtype.
* ``"authors"`` — the authors' pure-PyTorch FA2 (`lib.training.authors_backend`: tiles, their β rule, ℓ clamp, the
  row-zeroing control).
* ``"dose"`` — FP32 attention whose backward gets λ·c(Δδ) of a low-precision placement added to δ
  (`lib.training.dose_backend`).
* ``"stable[+fix][/beta=B][/max_shift=M]"`` — `kernels.stable_attention` (FA2 numerics, the user kernel;
  `StableSpec`).
* ``"fp32_flash"`` — FP32 attention without the T × T matrix: PyTorch's memory-efficient SDPA kernel on FP32 q, k,
  v (autocast off; `Fp32FlashSpec`).
* ``"inject/..."`` — FP32 attention whose backward receives an O error of the theory's size on chosen rows
  (`lib.training.inject`).

A spec (`lib.training.spec.AttnSpec`, parsed there) is written as a string: ``"sdpa"``, ``"naive"``,
``"<profile>[/<field>=<value>...][+fix]"`` for our kernel, ``"authors[/key=value...][+fix|+zero_rows]"`` (grammar in
`lib.training.authors_backend`) or ``"dose/<placement>[/c=<component>][/lam=<λ>]"`` (grammar in
`lib.training.dose_backend`). For our kernel: profile one of "fp32", "fa2", "paper"; each ``/field=value`` overrides
one `lib.fp.numerics.Numerics` field (values: true/false, integers, or names), e.g. ``"paper/delta_source=dp_p"`` (δ
= rowsum(dP∘P)); "+fix" = β fix with the config's β and tie tolerance (per-tile detection, the paper's Algorithm 1);
"+fix_split" = the same fix also acting on a max repeated across key tiles (`kernels.attention`, fix="beta_split");
"+zero_rows" = the row-zeroing control (`lib.training.zero_rows`: the plain kernel, O = 0 and no gradient on the
rows whose exact-rule shift exceeds the config's `zero_at`, default 126·ln 2 ≈ 87.3). The fix's own options can be
written in the spec too and then win over the config's: ``/beta=<β>``, ``/tie_tol=<tolerance>``,
``/max_shift=<guard>|none`` (none: the paper's exact rule), e.g.
``"paper/round_block=512/beta=2/tie_tol=0.001/max_shift=none+fix"``. ``GPTConfig(attn=["sdpa", "paper", "sdpa"])``
puts the paper kernel in layer 1 only. Per-head overrides (Python only): ``AttnSpec.parse("paper", heads=((1, 7),
"naive"))`` runs heads 1 and 7 of that layer with FP32 attention and the others with the paper kernel.

Telemetry capture (`GPT.set_capture(True)`): each attention layer keeps, for the next forward, x (B, T, C, the input
of `c_attn`), q, k, v, o (B, H, T, D; q and k as the backend saw them, i.e. after rope and QK-norm), dO (the
gradient reaching o, by a tensor hook) and "stats" (counters a backend fills in: `authors_backend`, `dose_backend`),
all detached.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.training.backends import AttnCall, attend
from lib.training.backends import naive_attention, run_backend, sdpa_attention  # noqa: F401  (their old home)
from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL, USER_BETA, Fix
from lib.training import inject
from lib.training.spec import AttnSpec, record as spec_record

POSITIONS = ("learned", "none", "rope")
QK_NORMS = (False, True, "fixed", "capped")
ROPE_BASE = 10000.0


@dataclass(frozen=True)
class StableSpec:
    """A layer on `kernels.stable_attention` (FA2 numerics; a fix of kind "beta": the β-shifted max with the shift
    guard, β the user kernel's `USER_BETA` unless set; exact ties only)."""
    fix: Fix = Fix(beta=USER_BETA)
    text: str = "stable"
    RECORD_KNOBS = ("beta", "max_shift")     # what its records keep (the kernel takes no tie tolerance)

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
    kw = {"beta": USER_BETA}
    for it in items:
        key, eq, val = it.partition("=")
        if key not in ("beta", "max_shift") or not eq:
            raise ValueError(f"bad option {it!r} in {s!r}; options: beta=, max_shift=")
        kw[key] = float(val)
    return StableSpec(fix=Fix("beta" if suffix == "fix" else None, **kw), text=s)


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
    """A layer spec: StableSpec, Fp32FlashSpec, inject.InjectSpec, or an AttnSpec (with the config's fix
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
class GPTConfig:
    """Model shape and attention backends. `attn`: one spec for every layer, or a list of n_layer specs."""
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    block_size: int = 512
    vocab_size: int = 256
    attn: object = "sdpa"
    beta: float = BETA         # β of "+fix" string specs
    tie_tol: float = TIE_TOL   # tie tolerance of "+fix" string specs
    max_shift: float | None = MAX_SHIFT  # underflow guard of "+fix" string specs (None: the paper's exact rule)
    zero_at: float | None = None  # level of "+zero_rows" string specs (None: each backend's default, see zero_rows)
    qk_norm: bool | str = False  # False, True (LayerNorm on each head's q and k), "fixed" or "capped" (docstring)
    ln_eps: float = 1e-5
    pos: str = "learned"       # positional code: "learned", "none" or "rope" (module docstring)
    qk_gain: float = 1.0       # g of qk_norm "fixed" / the cap of "capped"

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        if not isinstance(self.qk_norm, (bool, str)):
            raise TypeError(f"qk_norm must be a bool or a mode name, got {self.qk_norm!r}")
        if self.qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm must be one of {QK_NORMS}, got {self.qk_norm!r}")
        if self.pos not in POSITIONS:
            raise ValueError(f"pos must be one of {POSITIONS}, got {self.pos!r}")
        if not (isinstance(self.qk_gain, (int, float)) and self.qk_gain > 0 and math.isfinite(self.qk_gain)):
            raise ValueError(f"qk_gain must be a finite number > 0, got {self.qk_gain!r}")
        if self.pos == "rope" and self.head_dim % 2:
            raise ValueError(f"rope needs an even head dim, got {self.head_dim}")
        if self.zero_at is not None and (isinstance(self.zero_at, bool) or not isinstance(self.zero_at, (int, float))
                                         or not math.isfinite(self.zero_at) or self.zero_at <= 0):
            raise ValueError(f"zero_at must be a finite number > 0 or None, got {self.zero_at!r}")
        self.layer_specs()  # validate

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def layer_specs(self) -> list:
        specs = self.attn.split(",") if isinstance(self.attn, str) else self.attn
        specs = list(specs) if isinstance(specs, (list, tuple)) else [specs]
        if len(specs) not in (1, self.n_layer):
            raise ValueError(f"attn lists {len(specs)} specs for {self.n_layer} layers")
        kw = dict(beta=self.beta, tie_tol=self.tie_tol, max_shift=self.max_shift, zero_at=self.zero_at)
        return [parse_spec(s, **kw) for s in specs * (self.n_layer // len(specs))]

    def to_dict(self) -> dict:
        """The config as a record; `pos` and `qk_gain` only when set (records written before they existed keep
        their keys)."""
        d = asdict(self)
        for name in ("pos", "qk_gain"):
            if d[name] == self.__dataclass_fields__[name].default:
                del d[name]
        d["attn"] = [spec_record(s) if hasattr(s, "__dataclass_fields__") else str(s) for s in self.layer_specs()]
        return d


# ----------------------------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------------------------
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
        return stable_attention(q, k, v, is_causal=True, fix=spec.fix.kind, beta=spec.fix.beta,
                                max_shift=spec.fix.max_shift)


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
    """An "ours" spec through the custom ops of `kernels.attention_op` (module docstring)."""
    from kernels.attention_op import attention_op
    with torch.autocast(device_type=q.device.type, enabled=False):
        return attention_op(q, k, v, causal=True, numerics=spec.numerics, path=spec.path, **spec.fix.kernel_args())


def _op_path(spec) -> bool:
    """Whether a layer spec takes the custom-op path: our kernel, no row-zeroing control, no per-head override."""
    return isinstance(spec, AttnSpec) and spec.backend == "ours" and spec.fix.kind != "zero_rows" and spec.heads is None


class CausalSelfAttention(nn.Module):
    """x (B, T, C) -> attention output (B, T, C): q, k, v = split(c_attn(x)) per head (B, H, T, D), optional rope
    and QK-norm, the layer's backend, then c_proj."""

    def __init__(self, cfg: GPTConfig, spec, layer: int = 0):
        super().__init__()
        self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
        self.spec = spec
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        if cfg.qk_norm is True:
            self.q_ln = nn.LayerNorm(cfg.head_dim, eps=cfg.ln_eps, bias=False)
            self.k_ln = nn.LayerNorm(cfg.head_dim, eps=cfg.ln_eps, bias=False)
        else:
            self.q_ln = self.k_ln = None
        self.pos, self.qk_mode, self.qk_gain = cfg.pos, cfg.qk_norm, float(cfg.qk_gain)
        self.qk_theta = nn.Parameter(torch.zeros(cfg.n_head)) if cfg.qk_norm == "capped" else None
        self.ops = False                         # our kernel through its custom ops (GPT.set_ops)
        self.attn_call = AttnCall(layer=layer)   # step and seed are set by GPT.set_step
        # Telemetry capture: when `capture` is True the next forward keeps x, q, k, v, o, "stats" and (through a
        # tensor hook) dO in `captured` (module docstring).
        self.capture = False
        self.captured: dict = {}

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
        elif self.ops and _op_path(self.spec):
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

    def _save_do(self, grad):
        self.captured["do"] = grad.detach()
        return grad


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, spec: AttnSpec, layer: int = 0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps, bias=False)
        self.attn = CausalSelfAttention(cfg, spec, layer)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps, bias=False)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT. forward(idx (B, T) int64, targets (B, T) int64 | None) -> (logits (B, T, vocab_size), loss | None);
    the loss is the mean cross-entropy in nats per token (per byte for the byte vocabulary), computed in FP32."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg, s, i) for i, s in enumerate(cfg.layer_specs())]),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps, bias=False),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
        if cfg.pos != "learned":
            del self.transformer["wpe"]   # drawn above all the same (module docstring)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

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

    # -- hooks for telemetry -----------------------------------------------------------------------------------
    @property
    def attn_layers(self) -> list[CausalSelfAttention]:
        return [b.attn for b in self.transformer.h]

    def qk_weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head W_Q and W_K of `layer`: two views of shape (n_head, head_dim, n_embd) into c_attn.weight
        (q_h = x · W_Q[h]ᵀ before QK-norm, with x the captured input of c_attn)."""
        cfg = self.config
        w = self.transformer.h[layer].attn.c_attn.weight  # (3C, C): rows [0, C) Q, [C, 2C) K, [2C, 3C) V
        C, hd = cfg.n_embd, cfg.head_dim
        return w[:C].view(cfg.n_head, hd, C), w[C:2 * C].view(cfg.n_head, hd, C)

    def set_capture(self, on: bool) -> None:
        for a in self.attn_layers:
            a.capture = bool(on)
            if not on:
                a.captured = {}

    def set_step(self, step: int, seed: int = 0) -> None:
        """Tell the attention backends the training step and run seed (the dose backend seeds its signs by them)."""
        for a in self.attn_layers:
            a.attn_call = replace(a.attn_call, step=int(step), seed=int(seed))

    def set_ops(self, on: bool) -> None:
        """Run our kernel through its custom ops (module docstring) in every layer whose spec allows it."""
        for a in self.attn_layers:
            a.ops = bool(on)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_lm(cfg: GPTConfig) -> GPT:
    """The model as the token-corpus trainer builds it: `GPT(cfg)` with our kernel through its custom ops, the global
    generator then advanced by the default inits of each layer's c_attn and c_proj (the draws of the two-stage build
    that every run of that trainer made, kept so that later draws from the generator — the kernel's
    stochastic-rounding seed — follow the same stream)."""
    model = GPT(cfg)
    model.set_ops(True)
    for _ in range(cfg.n_layer):
        nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
    return model
