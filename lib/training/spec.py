"""An attention spec: one layer's attention as a value (`AttnSpec`), its string grammar (`AttnSpec.parse`), and the
readable label a table or a legend shows for it (`describe`).

Grammar (the module docstring of `lib.training.model` shows it at work): a backend's name alone (``"sdpa"``,
``"naive"``, any key of `lib.training.backends.BACKENDS` but the three below, which have grammars of their own),
``"<profile>[/<field>=<value>...][+fix|+fix_split|+zero_rows]"`` for our kernel (profile "fp32", "fa2" or "paper";
each ``/field=value`` overrides one `lib.fp.numerics.Numerics` field, or sets one of the fix's own options
``/beta=``, ``/tie_tol=``, ``/max_shift=<guard>|none``), ``"authors[/key=value...][+fix|+zero_rows]"``
(`lib.training.authors_backend`) and ``"dose/<placement>[/c=<component>][/lam=<λ>]"`` (`lib.training.dose_backend`).

`describe(spec)` turns a spec into words: "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix" reads
"paper placement, 512-key blocks, fix β = 7". Arm *names* (`paper_rb512+fix_b7`) are keys in results; tables and
legends show `describe` of the arm's spec instead.
"""
from __future__ import annotations

import copy
import inspect
import math
import re
from dataclasses import dataclass, fields, is_dataclass, replace

from lib.fp.fix import Fix
from lib.training import authors_backend, dose_backend
from lib.training.backends import BACKENDS
from lib.training.zero_rows import OURS_ZERO_AT

__all__ = ["AttnSpec", "NUMERICS_NAMES", "FIXES", "FIX_OPTIONS", "SUFFIX_FIX", "describe", "in_words", "record"]


NUMERICS_NAMES = ("fp32", "fa2", "paper")


FIXES = {"ours": (None, "beta", "beta_split", "zero_rows"), "authors": (None, "beta", "zero_rows")}


FIX_OPTIONS = ("beta", "tie_tol", "max_shift")   # spec options of the fix, e.g. "paper/beta=2/tie_tol=0.001/max_shift=none+fix"


SUFFIX_FIX = {"": None, "fix": "beta", "fix_split": "beta_split", "zero_rows": "zero_rows"}  # suffix -> fix


GRAMMARS = ("ours", "authors", "dose")   # backends whose strings have a grammar of their own; any other is its name


def bare_names() -> tuple:
    """The backends a spec string names by their name alone: every key of `BACKENDS` (read now, so a line added to
    the table counts) but those of `GRAMMARS`."""
    return tuple(b for b in BACKENDS if b not in GRAMMARS)


@dataclass(frozen=True)
class AttnSpec:
    """One layer's attention: backend, and for "ours" the kernel's numerics, its fix (one `Fix`: kind, β, tie
    tolerance, shift guard) and path. Construct it with `AttnSpec.parse`, which also takes the fix's knobs flat."""
    backend: str = "sdpa"
    numerics: object = "fa2"      # a profile name or a lib.fp.numerics.Numerics (only for backend "ours")
    fix: Fix = Fix()              # kind None | "beta" | "beta_split" ("ours") | "zero_rows" ("ours", "authors")
    path: str | None = None       # kernel path: None (auto) | "emulated" | "native"
    heads: tuple | None = None    # ((head indices), spec): those heads use another spec (string or AttnSpec)
    text: str | None = None       # the string this spec was parsed from (its label)
    zero_at: float | None = None  # "zero_rows": zero rows whose exact-rule shift exceeds this (None: backend default)
    opts: object = None           # backend options: authors_backend.AuthorsOptions, dose_backend.DoseOptions

    def __post_init__(self):
        if not isinstance(self.fix, Fix):
            raise TypeError(f"an AttnSpec's fix is a lib.fp.fix.Fix, got {self.fix!r} (AttnSpec.parse takes the kind "
                            "and its knobs flat)")
        if self.heads is not None:
            idx, other = self.heads
            idx = tuple(int(i) for i in idx)
            if not idx or len(set(idx)) != len(idx) or min(idx) < 0:
                raise ValueError(f"heads must name distinct non-negative head indices, got {self.heads!r}")
            other = (AttnSpec.parse(other, beta=self.fix.beta, tie_tol=self.fix.tie_tol) if isinstance(other, str)
                     else other)
            if not isinstance(other, AttnSpec) or other.heads is not None:
                raise ValueError("a per-head override must be a plain spec (no nested heads)")
            object.__setattr__(self, "heads", (idx, other))
        if self.backend not in BACKENDS:
            raise ValueError(f"attention backend must be one of {tuple(BACKENDS)}, got {self.backend!r}")
        if self.fix.kind not in FIXES.get(self.backend, (None,)):
            raise ValueError(f"fix={self.fix.kind!r} is not available for backend {self.backend!r} (fixes: "
                             f"{ {b: f[1:] for b, f in FIXES.items()} })")
        if self.zero_at is not None and not (isinstance(self.zero_at, (int, float)) and self.zero_at > 0
                                             and math.isfinite(self.zero_at)):
            raise ValueError(f"zero_at must be a finite number > 0 or None, got {self.zero_at!r}")
        want = {"authors": authors_backend.AuthorsOptions, "dose": dose_backend.DoseOptions}.get(self.backend)
        if (want is None and self.opts is not None) or (want is not None and not isinstance(self.opts, want)):
            raise ValueError(f"backend {self.backend!r} takes opts of type "
                             f"{want.__name__ if want else None}, got {type(self.opts).__name__}")

    @classmethod
    def parse(cls, spec, **kw) -> "AttnSpec":
        """An AttnSpec from a string (grammar in the module docstring: "sdpa", "naive", "paper+fix",
        "authors/tile=512+fix", "dose/paper/c=bias/lam=30", ...) or an AttnSpec. `kw`: the config's defaults (beta,
        tie_tol, max_shift, zero_at) and other AttnSpec fields; values written in the string win."""
        if isinstance(spec, AttnSpec):
            knobs = {k: kw.pop(k) for k in FIX_OPTIONS if k in kw}
            if knobs:
                kw["fix"] = replace(spec.fix, **knobs)
            return replace(spec, **kw) if kw else spec
        if not isinstance(spec, str):
            raise TypeError(f"attention spec must be a str or AttnSpec, got {type(spec).__name__}")
        s = spec.strip()
        if s in bare_names():
            return cls(backend=s, text=s, **_one_fix({k: v for k, v in kw.items() if k != "zero_at"}))
        head = s.partition("/")[0].partition("+")[0]
        if head == "authors":
            fields = kw | authors_backend.parse(s, kw)
            if fields["fix"] != "zero_rows":
                fields["zero_at"] = None
            return cls(text=s, **_one_fix(fields))
        if head == "dose":
            sub = {k: v for k, v in kw.items() if k in ("beta", "tie_tol", "max_shift", "zero_at", "path")}
            rest = {k: v for k, v in kw.items() if k not in sub}
            return cls(text=s, **rest, **dose_backend.parse(s, lambda p: cls.parse(p, **sub)))
        body, _, suffix = s.partition("+")
        base, *overrides = body.split("/")
        if base not in NUMERICS_NAMES or suffix not in SUFFIX_FIX:
            raise ValueError(f"unknown attention spec {spec!r}; use a backend's name alone {bare_names()}, "
                             f"'authors[/...]', 'dose/<placement>[/...]', or one of {NUMERICS_NAMES} with optional "
                             "'/field=value' overrides and '+fix', '+fix_split' or '+zero_rows'")
        numerics = base
        attn_opts = {}     # the fix's own options (not Numerics fields): beta, tie_tol, max_shift ("none": exact rule)
        if overrides:
            from lib.fp.numerics import get_profile
            changes = {}
            for ov in overrides:
                key, eq, val = ov.partition("=")
                if not eq or not key:
                    raise ValueError(f"bad numerics override {ov!r} in {spec!r}; write field=value")
                low = val.lower()
                if key in FIX_OPTIONS:
                    try:
                        attn_opts[key] = None if key == "max_shift" and low == "none" else float(val)
                    except ValueError:
                        raise ValueError(f"bad {key} {val!r} in {spec!r}: write a number"
                                         + (" or 'none'" if key == "max_shift" else "")) from None
                    continue
                changes[key] = True if low == "true" else False if low == "false" else \
                    int(val) if val.lstrip("-").isdigit() else val
            try:
                numerics = replace(get_profile(base), **changes)
            except TypeError as e:
                raise ValueError(f"bad numerics override in {spec!r}: {e}") from e
        fix = SUFFIX_FIX[suffix]
        if attn_opts and fix not in ("beta", "beta_split", "zero_rows"):
            raise ValueError(f"{sorted(attn_opts)} in {spec!r} are options of the fix: add '+fix' or '+fix_split'")
        zero_at = kw.get("zero_at")
        kw = kw | attn_opts | {"zero_at": (OURS_ZERO_AT if zero_at is None else zero_at) if fix == "zero_rows"
                               else None}
        return cls(backend="ours", numerics=numerics, text=s, **_one_fix(kw | {"fix": fix}))

    @property
    def label(self) -> str:
        if self.text is not None:
            name = self.text
        elif self.backend != "ours":
            name = self.backend + ({None: "", "beta": "+fix", "zero_rows": "+zero_rows"}[self.fix.kind]
                                   if self.backend == "authors" else "")
        else:
            name = (self.numerics if isinstance(self.numerics, str) else "custom") + \
                {None: "", "beta": "+fix", "beta_split": "+fix_split", "zero_rows": "+zero_rows"}[self.fix.kind]
        if self.heads is not None:
            name += f"[heads {','.join(map(str, self.heads[0]))}: {self.heads[1].label}]"
        return name


def _one_fix(fields: dict) -> dict:
    """AttnSpec fields with the fix's kind (`fix`) and knobs (`beta`, `tie_tol`, `max_shift`), given flat as spec
    strings and configurations give them, folded into one `Fix` (a knob not given takes `Fix`'s default)."""
    fields = dict(fields)
    knobs = {k: fields.pop(k) for k in FIX_OPTIONS if k in fields}
    fields["fix"] = Fix(fields.pop("fix", None), **knobs)
    return fields


def record(spec):
    """A layer spec as the flat record results keep (`dataclasses.asdict` of it, as before the fix was one value):
    a `Fix` field becomes the keys fix (its kind), beta, tie_tol and max_shift in its place — or only those the
    spec's class records (`RECORD_KNOBS`) —, nested specs likewise; anything else as `asdict` gives it."""
    if isinstance(spec, (list, tuple)):
        return type(spec)(record(x) for x in spec)
    if isinstance(spec, dict):
        return {k: record(v) for k, v in spec.items()}
    if not is_dataclass(spec) or isinstance(spec, type):
        return copy.deepcopy(spec)
    out = {}
    for f in fields(spec):
        v = getattr(spec, f.name)
        if isinstance(v, Fix):
            out[f.name] = v.kind
            out.update((k, getattr(v, k)) for k in getattr(spec, "RECORD_KNOBS", FIX_OPTIONS))
        else:
            out[f.name] = record(v)
    return out


# ------------------------------------------------------------------------------------------------------ labels
_BACKEND_WORDS = {"sdpa": "PyTorch flash SDPA", "naive": "FP32 attention"}
_PROFILE_WORDS = {"paper": "paper placement", "fa2": "FA2 placement", "fp32": "our kernel in FP32"}
_DELTA_WORDS = {"dp_p": "δ = rowsum(dP∘P)", "dp_p_norm": "δ = rowsum(dP∘P) / ΣP", "fp32_o": "δ from an FP32 O",
                "saved_o": "δ from the saved O"}


def _field_words(name: str, value) -> str:
    """One Numerics field that a spec changed, in words."""
    if name == "round_block":
        return "whole-row blocks" if value == -1 else "per-tile rounding" if value == 0 else f"{value}-key blocks"
    if name == "mantissa_bits":
        return f"{value} mantissa bits"
    if name == "rounding":
        return "stochastic rounding" if value == "sr" else "round-to-nearest-even"
    if name == "delta_source":
        return _DELTA_WORDS[value]
    if name == "round_s_minus_m":
        return "S − m rounded" if value else "S − m in FP32"
    if name == "normalize_then_round":
        return "normalise, then round" if value else "round, then normalise"
    if isinstance(value, bool) and name in _ROUNDED_WORDS:
        return f"{_ROUNDED_WORDS[name]} {'rounded' if value else 'in FP32'}"
    return f"{name.replace('_', ' ')} = {value}"


# the quantity each boolean rounding point of lib.fp.numerics.Numerics rounds, as a label names it
_ROUNDED_WORDS = {"round_s": "S", "round_p": "P̄", "rowsum_rounded_p": "ℓ of the rounded P̄", "round_l": "ℓ",
                  "round_pv": "P̄V", "round_acc": "O accumulator", "round_lse": "LSE", "round_o": "O",
                  "round_delta": "δ", "round_delta_products": "dO∘O", "round_bwd_s_minus_lse": "S − LSE",
                  "round_bwd_p": "backward P", "round_ds": "dS", "round_dp": "dP", "round_grad_acc": "dQ, dK, dV"}

# an attention spec with options or a fix ("paper/round_block=512/beta=7+fix"; a bare profile name is a word)
_SPEC_IN_TEXT = re.compile(r"(?<![\w/])(?:paper|fa2|fp32|authors)(?:/[a-z_]+=[\w.+-]+?)*(?:/[a-z_]+=[\w.-]+)"
                           r"(?:\+(?:fix_split|fix|zero_rows))?(?![\w/])|(?<![\w/])(?:paper|fa2|fp32|authors)"
                           r"\+(?:fix_split|fix|zero_rows)(?![\w/])")


def in_words(text: str) -> str:
    """`text` (a context line a result recorded, say "arm paper/round_block=512, LR 0.0005") with every attention
    spec that has options or a fix replaced by `describe` of it ("arm paper placement, 512-key blocks, LR …")."""
    def one(m):
        try:
            return describe(m.group(0))
        except (ValueError, KeyError, TypeError):
            return m.group(0)
    return _SPEC_IN_TEXT.sub(one, text)


def _fix_words(s: "AttnSpec", detail: bool) -> list[str]:
    return [] if s.fix.kind is None else [s.fix.label(detail)]


def _own_words(backend: str) -> str:
    """Words for a backend this module has none for: the first clause (up to ':' or '.') of its function's docstring,
    else of its module's, else its name; a plain capitalised first word is lower-cased, as in the other labels."""
    fn = BACKENDS[backend]
    for doc in (fn.__doc__, getattr(inspect.getmodule(fn), "__doc__", None)):
        clause = " ".join(re.split(r"[:.]", doc or "", maxsplit=1)[0].split())
        if clause:
            return clause[0].lower() + clause[1:] if clause.split()[0].istitle() else clause
    return backend


def describe(spec, detail: bool = False, **defaults) -> str:
    """The readable label of an attention spec (a string or an `AttnSpec`): "paper placement, 512-key blocks, fix
    β = 7" for "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix"; `detail` adds the fix's tie
    tolerance and shift cap ("…, ties within 0.001, exact rule"); `defaults`: the run's configuration values the
    string does not set (beta, tie_tol, max_shift). The one place arm labels are made."""
    from lib.fp.numerics import PROFILES, get_profile
    s = AttnSpec.parse(spec, **defaults) if isinstance(spec, str) else spec
    if s.heads is not None:
        idx, other = s.heads
        heads = ", ".join(map(str, idx))
        return f"{describe(replace(s, heads=None), detail)}; heads {heads}: {describe(other, detail)}"
    if s.backend in _BACKEND_WORDS:
        return _BACKEND_WORDS[s.backend]
    if s.backend == "dose":
        o = s.opts
        return f"FP32 attention, δ + {o.lam:g} × {o.component} part of Δδ ({describe(o.placement)})"
    if s.backend == "authors":
        tile = "untiled" if s.opts.tile == -1 else f"{s.opts.tile}-key tiles"
        return ", ".join(["the authors' code", tile] + _fix_words(s, detail))
    if s.backend != "ours":
        return _own_words(s.backend)
    base = (s.text or "").partition("/")[0].partition("+")[0]
    if base not in PROFILES:                       # a Numerics value without a profile to compare against
        base = next((name for name, p in PROFILES.items() if p == get_profile(s.numerics)), "fa2")
    mine, ref = get_profile(s.numerics), PROFILES[base]
    changed = [_field_words(f, getattr(mine, f)) for f in mine.as_dict() if getattr(mine, f) != getattr(ref, f)]
    return ", ".join([_PROFILE_WORDS[base], *changed, *_fix_words(s, detail)])
