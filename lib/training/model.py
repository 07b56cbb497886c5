"""A small GPT in the style of nanoGPT, with a pluggable attention backend per layer.

Pre-LayerNorm blocks, no biases (Linear or LayerNorm), GELU MLP 4×, byte vocabulary (256) with the token embedding
tied to the output head, learned positions, init N(0, 0.02) and residual projections (`c_proj`) N(0, 0.02/√(2·L));
LayerNorm gains start at 1. Shapes: tokens (B, T); residual stream x (B, T, C); per-head q, k, v, o (B, H, T, D)
with C = H·D; q_h = x·W_Q[h]ᵀ with W_Q[h] (D, C) a slice of `c_attn.weight` (`GPT.qk_weights`).

QK-norm (`GPTConfig.qk_norm`, off by default; Wortsman et al. 2023, the standard control of attention-logit growth):
a LayerNorm over head_dim (learnable gain shared by the heads, no bias, like the model's other LayerNorms) on q and
on k of every head, before any backend. Under autocast its FP32 output is cast back to v's dtype, so the backend
sees BF16 q, k as without it. Off, the model is the same computation, parameter for parameter, as without the option.

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
of `c_attn`), q, k, v, o (B, H, T, D; q and k as the backend saw them, i.e. after QK-norm), dO (the gradient reaching
o, by a tensor hook) and "stats" (counters a backend fills in: `authors_backend`, `dose_backend`), all detached.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.training.backends import AttnCall, attend
from lib.training.backends import naive_attention, run_backend, sdpa_attention  # noqa: F401  (their old home)
from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL
from lib.training.spec import AttnSpec


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
    qk_norm: bool = False      # LayerNorm on each head's q and k (module docstring)
    ln_eps: float = 1e-5

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        if not isinstance(self.qk_norm, bool):
            raise TypeError(f"qk_norm must be a bool, got {self.qk_norm!r}")
        if self.zero_at is not None and (isinstance(self.zero_at, bool) or not isinstance(self.zero_at, (int, float))
                                         or not math.isfinite(self.zero_at) or self.zero_at <= 0):
            raise ValueError(f"zero_at must be a finite number > 0 or None, got {self.zero_at!r}")
        self.layer_specs()  # validate

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def layer_specs(self) -> list[AttnSpec]:
        specs = self.attn
        if isinstance(specs, str) and "," in specs:
            specs = specs.split(",")
        if isinstance(specs, (list, tuple)):
            if len(specs) != self.n_layer:
                raise ValueError(f"attn lists {len(specs)} specs for {self.n_layer} layers")
        else:
            specs = [specs] * self.n_layer
        out = []
        for s in specs:
            kw = {} if isinstance(s, AttnSpec) else dict(beta=self.beta, tie_tol=self.tie_tol,
                                                          max_shift=self.max_shift, zero_at=self.zero_at)
            out.append(AttnSpec.parse(s, **kw))
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["attn"] = [asdict(s) for s in self.layer_specs()]  # a Numerics value becomes a dict of its fields
        return d


# ----------------------------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    """x (B, T, C) -> attention output (B, T, C): q, k, v = split(c_attn(x)) per head (B, H, T, D), optional
    QK-norm, the layer's backend, then c_proj."""

    def __init__(self, cfg: GPTConfig, spec: AttnSpec, layer: int = 0):
        super().__init__()
        self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
        self.spec = spec
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        if cfg.qk_norm:
            self.q_ln = nn.LayerNorm(cfg.head_dim, eps=cfg.ln_eps, bias=False)
            self.k_ln = nn.LayerNorm(cfg.head_dim, eps=cfg.ln_eps, bias=False)
        else:
            self.q_ln = self.k_ln = None
        self.attn_call = AttnCall(layer=layer)   # step and seed are set by GPT.set_step
        # Telemetry capture: when `capture` is True the next forward keeps x, q, k, v, o, "stats" and (through a
        # tensor hook) dO in `captured` (module docstring).
        self.capture = False
        self.captured: dict = {}

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hd = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hd).transpose(1, 2) for t in (q, k, v))
        if self.q_ln is not None:
            q, k = self.q_ln(q).to(v.dtype), self.k_ln(k).to(v.dtype)
        call = replace(self.attn_call, stats={}) if self.capture else self.attn_call
        y = attend(self.spec, q, k, v, call)
        if self.capture:
            self.captured = dict(x=x.detach(), q=q.detach(), k=k.detach(), v=v.detach(), o=y.detach(),
                                 stats=call.stats)
            if y.requires_grad:
                y.register_hook(self._save_do)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

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
    """Byte-level GPT. forward(idx (B, T) int64, targets (B, T) int64 | None) -> (logits (B, T, 256), loss | None);
    the loss is the mean cross-entropy in nats per byte, computed in FP32."""

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

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
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

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
