"""The experiment runner: run a registry entry's `run(scale, cfg)` and save its result with provenance.

A *result* is a registry entry in `lib/experiments/registry.toml` (format: `lib.book.registry`): the module it runs
(`base`, a full module path such as `lib.studies.explosion.headline`), its configuration at each scale, what it
reads. A variant of an experiment is another entry (`extends = ...`) that changes some keys — data, not a module.
An experiment module, in its study's folder `lib/studies/<study>/` (or `benchmarks/<script>.py`), provides

    run(scale: str, cfg: dict) -> {"data": JSON-able dict, "arrays": {name: ndarray} (optional),
                                   "seeds": list | dict, "config": dict (optional, extra record)}

and takes every knob from `cfg` (environment variables only for machine limits such as the wall-clock budget of a
training run, `$EXPLOSION_BUDGET_S`). Its docstring's first line says what it shows.

`run_and_save(name, scale)` resolves the configuration, runs it and saves the result with its provenance: the
Merkle fingerprint of the code `run` reaches, the resolved configuration, and the hashes of the input files and of
the results it read (`lib.book.results`). `run_live` / `live_result` run an entry without saving (what a chapter
shows at ci scale). Command line: ``python -m lib.experiments --help`` (`lib.book.cli`).

Unlike the rest of `lib.book`, this module and `lib.book.cli` are fingerprinted like project code
(`lib.book.provenance.FINGERPRINTED`): committed results reached them when they were `lib/experiments/__init__.py`
and `__main__.py` (the δ-dose stage 2 runs stage 1 live at ci scale; the benchmarks' command line).
"""
from __future__ import annotations

import importlib
import time
from pathlib import Path

from lib.book import provenance, registry, results


class ExperimentError(RuntimeError):
    """A user error in running an experiment (unknown name, missing prerequisite, bad override)."""


def entries() -> dict[str, registry.Entry]:
    return registry.entries()


def base_module(entry: registry.Entry):
    return importlib.import_module(entry.module)


def missing_needs(name: str, scale: str) -> list[str]:
    """The results `name` reads at `scale` that do not exist under results/."""
    e = registry.get(name)
    return [n for n in e.needs if not results.exists(n, scale)] if scale == "full" else []


def run_and_save(name: str, scale: str, out: Path | str | None = None, overrides: dict | None = None) -> Path:
    """Run registry entry `name` at `scale` and save it with provenance under `out` (default ./results).

    `overrides` replace keys of the resolved configuration (the saved result then records them, and reads as stale
    against the registry until the registry says the same). Needed results are read from ./results."""
    e = registry.get(name)
    cfg = registry.resolve(name, scale, overrides)
    missing = missing_needs(name, scale)
    if missing:
        raise ExperimentError(f"{name} reads {', '.join(missing)} at scale {scale}: produce "
                              f"{'it' if len(missing) == 1 else 'them'} first (python -m lib.experiments "
                              f"{' '.join(missing)} --scale {scale})")
    mod = base_module(e)
    t0 = time.perf_counter()
    res = mod.run(scale, cfg)
    wall = time.perf_counter() - t0
    read = [n for n in e.needs if scale == "full"]
    # Code a configuration selects at run time (a backend named in a spec string) is reached by name, not by a
    # reference the fingerprint can follow: the base module lists it (`code_entries(cfg)`), so it is fingerprinted too.
    extra = list(getattr(mod, "code_entries", lambda c: [])(cfg))
    prov = dict(registry=name, code=provenance.code_fingerprint([e.code_entry, *extra]), cfg=cfg,
                inputs=results.input_hashes(e.inputs, read, scale))
    return results.save(name, scale, res["data"], arrays=res.get("arrays"), provenance=prov,
                        seeds=res.get("seeds", ()), wall_s=round(wall, 3), config=res.get("config"), root=out)


def run_live(name: str, scale: str, overrides: dict | None = None) -> dict:
    """Run registry entry `name` at `scale` without saving (what a chapter shows live at ci scale): the base
    module's return value, {"data", "arrays", "seeds", ...}."""
    return base_module(registry.get(name)).run(scale, registry.resolve(name, scale, overrides))


def live_result(name: str, scale: str, overrides: dict | None = None) -> results.Result:
    """`run_live` wrapped as a `lib.book.results.Result` (meta: this machine, the commit, the resolved configuration),
    so a chapter handles its live ci-scale run and a committed full-scale result alike."""
    import datetime as _dt
    cfg = registry.resolve(name, scale, overrides)
    out = base_module(registry.get(name)).run(scale, cfg)
    meta = dict(results.environment(), name=name, scale=scale, git_commit=results.git_commit(), config=cfg,
                created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    return results.Result(name, scale, meta, out["data"], out.get("arrays", {}))
