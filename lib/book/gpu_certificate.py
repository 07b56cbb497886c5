"""The loop's GPU certificate in a reader's words: how many of the committed training runs, rebuilt and trained a few
steps in the tree that made them and in this one, gave the same bits (`lib.training.loop_certificate`)."""
from __future__ import annotations

from lib.book import catalogue

KIND_WORDS = {"lm": "of GPT-2", "proxy": "of the small proxy model"}


def words(recs) -> str:
    """One paragraph from the certificate results `recs` (each a `Result` whose data is a certificate record:
    ``runs`` of {"kind", "done", "bit_identical", "determinism", "stand_in_for"?}, ``steps``, ``device``); "" when
    there is none."""
    recs = [r for r in recs if r is not None]
    if not recs:
        return ""
    runs = [x for r in recs for x in r.data["runs"] if x.get("done")]
    same = [x for x in runs if x.get("bit_identical")]
    strict = sum(x.get("determinism") == "strict" for x in runs)
    stood = sum(bool(x.get("stand_in_for")) for x in runs)
    kinds = {k: sum(x["kind"] == k for x in runs) for k in KIND_WORDS}
    steps = sorted({r.data["steps"] for r in recs})
    devices = sorted({r.data["device"] for r in recs})
    left = sum(not x.get("done") for r in recs for x in r.data["runs"])
    parts = [f"{n} {KIND_WORDS[k]}" for k, n in kinds.items() if n]
    out = (f"The training code these results ran has since been merged into one model and one training loop. Rather "
           f"than re-run every result, each distinct training run they made ({len(runs)}: {' and '.join(parts)}) "
           f"was rebuilt from what its result recorded and trained {' or '.join(map(str, steps))} steps on one "
           f"{' or '.join(devices)}, once in the code that produced the result and once in the current code, "
           f"{'with every operation deterministic' if strict == len(runs) else f'{strict} of them with every operation deterministic'}: "
           f"{len(same)} of {len(runs)} gave bit-identical per-step losses, gradient norms and measurements.")
    if stood:
        out += (f" For {stood} of them the commit that produced the result is no longer in the repository; they ran "
                "in a later commit whose fingerprint of the result's code equals the one the result recorded.")
    if left:
        out += f" {left} have not run yet."
    return (out + f" (Certificates: {catalogue.cite(recs)}.) Timing benchmarks and studies that record no training "
            "run are not covered.")
