"""The authors' pure-PyTorch flash attention (`lib.training.authors_fa`) as a training backend.

Spec strings (parsed by `lib.training.spec.AttnSpec.parse`):

    authors[/tile=<n>][/beta=<β>][/tie_tol=<t>][/floor=<ℓ_min>][/zero_at=<x>][+fix | +zero_rows]

* ``tile``: the q- and k-tile ("bucket") size, a positive int, or −1 = untiled (the sequence length of the call).
  Default 512, as in their model. (The paper's analysis ran untiled at T = 1024.)
* ``beta``, ``tie_tol``: β and the tie tolerance of the rule; default: the model config's `beta` / `tie_tol`, as for
  "+fix" of our kernel. Their current code is β = 2, tolerance 1e-3; the paper's figures β = 7:
  ``authors/beta=2/tie_tol=1e-3+fix`` is their code (STABLE=1), ``authors+fix`` with `beta=7` in the config the
  paper's Fig. 7.
* ``floor``: the clamp of each tile's row sum ℓ (their EPSILON, default 1e-10); 0 disables it.
* ``+fix``: their rule (STABLE=1): a tile max repeated within the tolerance becomes β·max if positive, 0 if
  negative; no underflow guard.
* ``+zero_rows``: the row-zeroing control (`lib.training.zero_rows`): their plain forward (no shift), with O set to 0
  and no gradient on the rows whose exact-rule shift exceeds ``zero_at`` (default: the model config's `zero_at`,
  else −ln(floor) ≈ 23.0, the shift from which their clamped ℓ sits at the clamp).

Examples: ``authors`` (their failing run, 512 tiles), ``authors/tile=-1/beta=7+fix``, ``authors/tile=512+zero_rows``.

Numerics: the forward runs under the model's autocast exactly as their model calls it (BF16 q, k, v from `c_attn`
under CUDA autocast; FP32 on the CPU without autocast), and the backward runs under the same autocast state as the
forward (`AuthorsFA2Amp`): their eager backward outside autocast stops with a dtype error (their runs were compiled;
chapter 2), and a backward under the forward's autocast is the placement `paper_placement` matched bit for bit.

Telemetry (when the caller passes a `stats` dict, at telemetry steps only): "underflow_n" / "underflow_of" count the
query rows whose final ℓ sits at the clamp — ℓ ≤ n_k·floor·(1 + n_k·2⁻⁷) with n_k key tiles, i.e. no more than the
clamps of its tiles could contribute, so O ≈ 0 for that row — (for +zero_rows: the zeroed rows). ℓ is read from the
one `log` call of the forward (LSE = log ℓ + m) by a `TorchFunctionMode`, so the algorithm's code is untouched.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from lib.training.authors_fa import AuthorsFA2
from lib.training.zero_rows import authors_shift, authors_zero_at, count_rows, zero_rows

__all__ = ["AuthorsOptions", "AuthorsFA2Amp", "parse", "attention", "SUFFIXES", "KEYS"]

SUFFIXES = {"": None, "fix": "beta", "zero_rows": "zero_rows"}    # spec suffix -> AttnSpec.fix
KEYS = ("tile", "beta", "tie_tol", "floor", "zero_at")


@dataclass(frozen=True)
class AuthorsOptions:
    """Options of the "authors" backend that no other backend has."""
    tile: int = 512          # q- and k-tile size; -1 = untiled (the sequence length)
    floor: float = 1e-10     # clamp of each tile's row sum (0: none)

    def __post_init__(self):
        if isinstance(self.tile, bool) or not isinstance(self.tile, int) or (self.tile <= 0 and self.tile != -1):
            raise ValueError(f"authors tile must be a positive int or -1 (untiled), got {self.tile!r}")
        if not isinstance(self.floor, (int, float)) or not math.isfinite(self.floor) or self.floor < 0:
            raise ValueError(f"authors floor must be a finite number >= 0, got {self.floor!r}")


def _number(key: str, val: str, spec: str):
    try:
        return int(val) if key == "tile" else float(val)
    except ValueError:
        raise ValueError(f"bad value {val!r} for {key!r} in attention spec {spec!r}; write e.g. tile=512, "
                         f"beta=2, tie_tol=1e-3, floor=1e-10, zero_at=23") from None


def parse(spec: str, defaults: dict) -> dict:
    """AttnSpec fields of an "authors..." spec string; `defaults` holds the config's beta, tie_tol, zero_at."""
    body, _, suffix = spec.partition("+")
    head, *items = body.split("/")
    if head != "authors" or suffix not in SUFFIXES:
        raise ValueError(f"unknown attention spec {spec!r}; write authors[/key=value...][+fix|+zero_rows] with keys "
                         f"{KEYS}")
    vals = {}
    for item in items:
        key, eq, val = item.partition("=")
        if not eq or key not in KEYS:
            raise ValueError(f"bad option {item!r} in {spec!r}; the authors backend takes {KEYS} as key=value")
        if key in vals:
            raise ValueError(f"option {key!r} given twice in {spec!r}")
        vals[key] = _number(key, val, spec)
    opts = AuthorsOptions(tile=vals.pop("tile", 512), floor=vals.pop("floor", 1e-10))
    out = {k: defaults[k] for k in ("beta", "tie_tol", "zero_at") if k in defaults}
    out.update(vals)
    if not (math.isfinite(out.get("beta", 2.0)) and out.get("beta", 2.0) > 1):
        raise ValueError(f"beta must be a finite number > 1 in {spec!r}, got {out.get('beta')!r}")
    if not (math.isfinite(out.get("tie_tol", 0.0)) and out.get("tie_tol", 0.0) >= 0):
        raise ValueError(f"tie_tol must be a finite number >= 0 in {spec!r}, got {out.get('tie_tol')!r}")
    if out.get("zero_at") is None:
        out["zero_at"] = authors_zero_at(opts.floor)
    return dict(out, backend="authors", fix=SUFFIXES[suffix], max_shift=None, opts=opts)


# Their backward as a plain function: called as ``AuthorsFA2.backward(ctx, do)`` inside another autograd function's
# backward, the compiler takes it for a call of that function's backward node and stops ("Expected
# FakeBackwardCFunction"), so a compiled model with this backend trained eagerly; the same code, called as a function,
# traces. Eagerly the two calls are one and the same function.
_authors_backward = AuthorsFA2.__dict__["backward"].__func__
_authors_forward = AuthorsFA2.__dict__["forward"].__func__


class AuthorsFA2Amp(AuthorsFA2):
    """`AuthorsFA2` with its backward run under the autocast state its forward saw (same arguments, same code)."""

    @staticmethod
    def forward(ctx, q, *args):
        dev = q.device.type
        ctx.amp = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        return _authors_forward(ctx, q, *args)

    @staticmethod
    def backward(ctx, do):
        dev, on, dtype = ctx.amp
        with torch.autocast(device_type=dev, dtype=dtype, enabled=on):
            return _authors_backward(ctx, do)


class _RowSumProbe(TorchFunctionMode):
    """Keeps the input of `Tensor.log` calls: in `AuthorsFA2.forward` the only one is the final ℓ (B, H, N, 1)."""

    def __init__(self):
        super().__init__()
        self.row_sum = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.log and self.row_sum is None:
            self.row_sum = args[0].detach().float()
        return func(*args, **(kwargs or {}))


def attention(q, k, v, *, spec, causal=True, scale=None, call=None):
    """Causal attention of q, k, v (B, H, T, D) by the authors' algorithm with `spec` (an AttnSpec whose `opts` is
    an AuthorsOptions); returns O (B, H, T, D) in q's dtype. `call.stats` (a dict or None) receives the
    underflow counts (module docstring)."""
    if scale is not None and scale != q.shape[-1] ** -0.5:
        raise ValueError("the authors' attention uses scale = head_dim ** -0.5 only")
    opts = spec.opts
    N = q.shape[-2]
    tile = N if opts.tile == -1 else opts.tile
    stats = getattr(call, "stats", None)
    fix = spec.fix
    stable = fix.kind == "beta"
    args = (q, k, v, causal, tile, tile, stable, fix.beta, fix.tie_tol, None, opts.floor)
    if fix.kind == "zero_rows":
        o = AuthorsFA2Amp.apply(*args)
        with torch.no_grad():
            mask = authors_shift(q, k, tile=tile, beta=fix.beta, tie_tol=fix.tie_tol, causal=causal) > spec.zero_at
        count_rows(stats, mask)
        return zero_rows(o, mask)
    if stats is None:
        return AuthorsFA2Amp.apply(*args)
    probe = _RowSumProbe()
    with probe:
        o = AuthorsFA2Amp.apply(*args)
    n_k = -(-N // tile)
    count_rows(stats, probe.row_sum.squeeze(-1) <= n_k * opts.floor * (1 + n_k * 2 ** -7))
    return o
