"""python -m lib.experiments (this module): run registered experiments and save their results with provenance."""
import argparse
import json
import sys
import textwrap
import traceback
from pathlib import Path

import lib.book.setup  # noqa: F401  (sets TRITON_INTERPRET before any kernel import when there is no CUDA)
from lib.book import registry, results
from lib.book import scale as _scale


def _listing() -> str:
    """One block per experiment: name, what it shows, GPU minutes, what it needs first."""
    try:
        es = registry.entries()
    except registry.RegistryError as e:
        return f"(registry unreadable: {e})"
    lines = ["experiments (GPU min = minutes of one H100 at --scale full; ci runs on the CPU in seconds):", ""]
    for e in es.values():
        head = f"  {e.name}  [chapter {e.chapter or '-'}; GPU {e.gpu_min:g} min" + \
               (f"; needs {', '.join(e.needs)}" if e.needs else "") + "]"
        lines.append(head)
        lines += textwrap.wrap(e.summary, width=96, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def _parse_set(items) -> dict:
    out = {}
    for it in items or ():
        key, eq, val = it.partition("=")
        if not eq or not key:
            raise ValueError(f"--set {it!r}: write key=value (value as JSON, e.g. steps=500 or seeds=[0,1])")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
    return out


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lib.experiments", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run book experiments and save their results (results/<scale>/<name>.json + .npz) with "
                    "provenance.", epilog=_listing() + "\n\nOther commands: 'check' (which committed results are "
                    "stale, and why), 'list' (names only), 'all' (every experiment, in registry order).")
    ap.add_argument("names", nargs="+", metavar="NAME", help="experiment names, 'all', 'check' or 'list'")
    ap.add_argument("--scale", default=None, help="ci | full (default: $BOOK_SCALE, else full with CUDA, ci without)")
    ap.add_argument("--out", default=None, help="results root to write to (default: ./results)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override one configuration key (JSON value); the result then differs from the registry")
    a = ap.parse_args(argv)
    try:
        es = registry.entries()
    except registry.RegistryError as e:
        return _fail(str(e))
    if a.names == ["list"]:
        print("\n".join(es))
        return 0
    if a.names == ["check"]:
        return results.main(["check"])
    names = list(es) if a.names == ["all"] else a.names
    unknown = [n for n in names if n not in es]
    if unknown:
        return _fail(f"unknown experiment(s) {', '.join(unknown)}; see python -m lib.experiments --help")
    try:
        overrides = _parse_set(a.set)
        try:
            scale = _scale.resolve(a.scale)
        except _scale.ScaleError:
            # experiments whose full scale needs no GPU (numpy Monte Carlo) may run at full scale on the CPU
            if (a.scale or "") == "full" and all(es[n].device == "cpu" for n in names):
                scale = "full"
            else:
                raise
    except (_scale.ScaleError, ValueError) as e:
        return _fail(str(e))
    from lib.book.runner import ExperimentError, run_and_save
    if a.names == ["all"]:
        skipped = [n for n in names if scale not in es[n].configs]
        names = [n for n in names if scale in es[n].configs]
        if skipped:
            print(f"(skipped, no {scale} configuration: {', '.join(skipped)})", flush=True)
    failed, done = [], []
    for n in names:
        print(f"=== {n} @ {scale}  ({es[n].summary})", flush=True)
        try:
            p = run_and_save(n, scale, Path(a.out) if a.out else None, overrides)
            print(f"    -> {p}", flush=True)
            done.append((n, str(p)))
        except (ExperimentError, registry.RegistryError) as e:
            print(f"error: {e}", file=sys.stderr)
            failed.append(n)
        except Exception:  # keep going: one failing experiment must not lose the others' results
            traceback.print_exc()
            failed.append(n)
    print("\n".join(["", f"{'result':28s} written to"] + [f"{n:28s} {p}" for n, p in done]
                    + [f"{n:28s} FAILED" for n in failed]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
