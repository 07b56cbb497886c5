"""The experiment registry as data: `lib/experiments/registry.toml` parsed and resolved.

Each TOML table is one result::

    [beta_sweep_seeds]             # result name: results/<scale>/beta_sweep_seeds.json (+ .npz)
    extends = "beta_sweep"         # optional: inherit every key (and both scale tables) of another entry
    base = "lib.studies.fix.beta_sweep"   # the module with run(scale, cfg) (inherited if extended)
    summary = "one line: what it shows"
    chapter = "06"
    gpu_min = 4.0                  # minutes of one H100 at full scale (measured where the result exists)
    device = "gpu"                 # "cpu" for an experiment whose full scale needs no GPU (default "gpu")
    needs = ["headline"]           # results read by the run: they must exist first and are inputs of this one
    inputs = ["data/corpus/pystdlib.txt.xz"]   # files read by the run (sha256 recorded)
    [beta_sweep_seeds.full]        # the configuration at full scale (merged over the extended entry's)
    seeds = [1, 2]
    [beta_sweep_seeds.ci]          # ... and at ci scale (an entry without a ci table runs only on a GPU)
    seeds = [0]

`resolve(name, scale)` merges the scale tables along the `extends` chain (later entries win, key by key) into the
resolved configuration `cfg` that `run(scale, cfg)` receives and that provenance records. It is plain data: the same
entry always resolves to the same `cfg`, so a result whose recorded `cfg` differs from the registry's is stale.
This module only reads the file; running is `lib.book.runner`'s job.
"""
from __future__ import annotations

import copy
import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTRY_FILE = ROOT / "lib" / "experiments" / "registry.toml"
SCALES = ("ci", "full")
_KEYS = {"extends", "base", "summary", "chapter", "gpu_min", "device", "needs", "inputs", "ci", "full", "code"}


# Results read as one: the parts of one experiment that ran as several registry entries (other seeds, other
# machines, a second stage). Chapters, studies and the claims table load a group with `lib.book.results.load_group`.
GROUPS = {
    "healthy_headline": ("healthy_headline", "healthy_headline_more"),        # same LR, steps and batch order
    "width_768": ("healthy_headline_w768", "healthy_headline_w768_s2"),       # seeds 0-1 and seed 2
    "authors_code": ("authors_code", "authors_code_8e3"),                     # the healthy regime and LR 8e-3
    "beta_sweep": ("beta_sweep", "beta_sweep_seeds"),
    "delta_dose": ("delta_dose", "delta_dose_seeds", "delta_dose_brackets", "delta_dose_bias3"),  # stage 1, 2, brackets
    # the GPT-2 channels and remedies: each pair of arms at seeds 0 and 1 (and the arm that decides, at seed 2)
    "gpt2_delta": ("gpt2_delta", "gpt2_delta_s1", "gpt2_delta_s2"),
    "gpt2_remedy_o32": ("gpt2_remedy_o32", "gpt2_remedy_o32_s1", "gpt2_remedy_o32_s2"),
    "gpt2_remedy_fix": ("gpt2_remedy_fix", "gpt2_remedy_fix_s1", "gpt2_remedy_fix_b2_s1", "gpt2_remedy_fix_s2",
                        "gpt2_remedy_fix_b2_s2"),
    "gpt2_qknorm": ("gpt2_qknorm", "gpt2_qknorm_s1", "gpt2_qknorm_fp32_s1", "gpt2_qknorm_s2"),
    "gpt2_authors_compiled": ("gpt2_authors_compiled", "gpt2_authors_compiled_s1", "gpt2_authors_compiled_fix_s1",
                              "gpt2_authors_compiled_s1_long"),
    "gpt2_authors_eager": ("gpt2_authors_eager", "gpt2_authors_eager_s1"),
    "gpt2_inject": ("gpt2_inject", "gpt2_inject_s1"),
    "gpt2_inject_low": ("gpt2_inject_low", "gpt2_inject_low_s1"),
    # the seeds where the paper arm failed, one entry an arm (S in FP32; P̄ and ℓ in FP32)
    "gpt2_dial": ("gpt2_dial_s1", "gpt2_dial_pl32_s1", "gpt2_dial_s2", "gpt2_dial_pl32_s2"),
}


class RegistryError(ValueError):
    """A malformed registry entry or an unknown experiment name."""


@dataclass(frozen=True)
class Entry:
    name: str
    base: str
    summary: str
    chapter: str = ""
    gpu_min: float = 0.0
    needs: tuple = ()
    inputs: tuple = ()
    device: str = "gpu"        # "cpu": the full scale needs no GPU
    code: str = "run"          # the function of the base module whose reachable code is fingerprinted
    configs: dict = field(default_factory=dict)   # scale -> resolved cfg (only the scales the entry has)

    @property
    def module(self) -> str:
        """The experiment module: `base` is its full dotted path (a study's `lib.studies.<study>.<experiment>` or a
        `benchmarks.<script>`)."""
        return self.base

    @property
    def code_entry(self) -> str:
        return f"{self.module}:{self.code}"


_PARSED: dict = {}   # sha256 of the file's bytes -> its parse: parsing takes ≈ 20 ms, reading + a deep copy ≈ 2


def _raw(path: Path) -> dict:
    """The registry file parsed and checked: the cached parse of these exact bytes itself (callers must not mutate
    it; chapters and the claims table resolve entries hundreds of times in one process)."""
    data = Path(path).read_bytes()
    key = hashlib.sha256(data).hexdigest()
    if key not in _PARSED:
        _PARSED[key] = _parse(data, Path(path).name)
    return _PARSED[key]


def _load(path: Path) -> dict:
    """A fresh deep copy of the registry's cached parse (`_raw`)."""
    return copy.deepcopy(_raw(path))


def _parse(data: bytes, filename: str) -> dict:
    raw = tomllib.loads(data.decode())
    for name, t in raw.items():
        if not isinstance(t, dict):
            raise RegistryError(f"{filename}: [{name}] must be a table")
        bad = set(t) - _KEYS
        if bad:
            raise RegistryError(f"{filename}: [{name}] has unknown keys {sorted(bad)}; allowed: {sorted(_KEYS)}")
    return raw


def _merge(raw: dict, name: str, seen=()) -> dict:
    if name not in raw:
        raise RegistryError(f"unknown experiment {name!r}" + (f" (extended by {seen[-1]!r})" if seen else ""))
    if name in seen:
        raise RegistryError(f"registry: 'extends' cycle through {' -> '.join(seen + (name,))}")
    t = raw[name]
    parent = _merge(raw, t["extends"], seen + (name,)) if "extends" in t else {"ci": {}, "full": {}, "scales": ()}
    out = {k: v for k, v in parent.items() if k not in ("ci", "full", "summary", "chapter", "gpu_min")}
    for k, v in t.items():
        if k not in ("ci", "full", "extends"):
            out[k] = v
    for s in SCALES:
        out[s] = {**parent.get(s, {}), **t.get(s, {})}
    out["scales"] = tuple(s for s in SCALES if s in t or s in parent["scales"])
    return out


def _entry(raw: dict, name: str) -> Entry:
    """Entry `name` of a parse, resolved through `extends`; its values are shared with `raw` (copy it first)."""
    m = _merge(raw, name)
    for req in ("base", "summary"):
        if req not in m:
            raise RegistryError(f"registry: [{name}] needs '{req}' (directly or through 'extends')")
    e = Entry(name=name, base=m["base"], summary=m["summary"], chapter=str(m.get("chapter", "")),
              gpu_min=float(m.get("gpu_min", 0.0)), needs=tuple(m.get("needs", ())),
              inputs=tuple(m.get("inputs", ())), code=m.get("code", "run"), device=m.get("device", "gpu"),
              configs={s: m[s] for s in m["scales"]})
    if e.device not in ("cpu", "gpu"):
        raise RegistryError(f"registry: [{e.name}] device must be 'cpu' or 'gpu', got {e.device!r}")
    missing = [n for n in e.needs if n not in raw]
    if missing:
        raise RegistryError(f"registry: [{e.name}] needs unknown result(s) {missing}")
    return e


def entries(path: Path | str = REGISTRY_FILE) -> dict[str, Entry]:
    """Every registry entry, in file order, with its resolved configuration per scale."""
    raw = _load(Path(path))
    return {name: _entry(raw, name) for name in raw}


def get(name: str, path: Path | str = REGISTRY_FILE) -> Entry:
    """Entry `name`, checked as `entries` checks it; only its own resolution is copied out of the cached parse (a
    copy of the whole registry per call was most of a result's staleness check)."""
    raw = _raw(Path(path))
    if name not in raw:
        raise RegistryError(f"unknown experiment {name!r}; known: {', '.join(raw)}")
    return copy.deepcopy(_entry(raw, name))


def resolve(name: str, scale: str, overrides: dict | None = None, path: Path | str = REGISTRY_FILE) -> dict:
    """The resolved configuration of `name` at `scale` (a new dict), with `overrides` applied last."""
    if scale not in SCALES:
        raise RegistryError(f"unknown scale {scale!r}; choose one of {SCALES}")
    e = get(name, path)
    if scale not in e.configs:
        raise RegistryError(f"{name} has no {scale} configuration (it runs at {', '.join(e.configs) or 'no scale'}"
                            f"{': it needs a GPU' if scale == 'ci' else ''})")
    cfg = json.loads(json.dumps(e.configs[scale]))   # a deep copy of plain JSON values
    for k, v in (overrides or {}).items():
        cfg[k] = v
    return cfg


# Keys that bound one call's time, not what a result measures: a run spanning several calls of ≤ 10 minutes sets them
# per call (the loop certificate's `max_s`, which a last call with less time left sets lower), so a result is not
# stale for recording another value of one (`config_digest(..., drop=CALL_BOUNDS)` in `lib.book.results.staleness`).
CALL_BOUNDS = frozenset({"max_s"})


def config_digest(cfg: dict, drop=()) -> str:
    """A canonical JSON text of `cfg` (sorted keys, floats as Python writes them) without the top-level keys in
    `drop`: what provenance compares."""
    return json.dumps({k: v for k, v in cfg.items() if k not in drop}, sort_keys=True, separators=(",", ":"))
