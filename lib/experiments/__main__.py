import argparse
import sys
import traceback
from pathlib import Path

import lib.book.setup  # noqa: F401  (sets TRITON_INTERPRET before any kernel import when there is no CUDA)
from lib.book import scale as _scale
from lib.experiments import REGISTRY, run_and_save


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.experiments", description="Run book experiments and save results.")
    ap.add_argument("names", nargs="+", help=f"experiment names or 'all' ({', '.join(REGISTRY)})")
    ap.add_argument("--scale", default=None, help="ci | full (default: $BOOK_SCALE, else full with CUDA, ci without)")
    ap.add_argument("--out", default=None, help="results root (default: ./results)")
    a = ap.parse_args(argv)
    scale = _scale.resolve(a.scale)
    names = list(REGISTRY) if a.names == ["all"] else a.names
    failed = []
    for n in names:
        print(f"=== {n} @ {scale}", flush=True)
        try:
            p = run_and_save(n, scale, Path(a.out) if a.out else None)
            print(f"    -> {p}", flush=True)
        except Exception:  # keep going: one failing experiment must not lose the others' results
            traceback.print_exc()
            failed.append(n)
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
