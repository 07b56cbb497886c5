"""How many tracked claims have each replication status, as one sentence for the intro.

Every status that occurs is counted (so that "not reproduced" and "partly" are never dropped from the summary),
in a fixed order: reproduced, partly, not reproduced, inconclusive, not yet tested, then any other status
alphabetically."""
from __future__ import annotations

from collections import Counter

ORDER = ("reproduced", "partly", "not reproduced", "inconclusive", "not yet tested")
_PHRASE = {"reproduced": "{n} {are} reproduced", "partly": "{n} {are} partly reproduced",
           "not reproduced": "{n} {are} not reproduced", "inconclusive": "{n} {are} inconclusive",
           "not yet tested": "{n} {are} not yet tested"}


def counts(rows) -> dict[str, int]:
    """{status: number of claims} over `rows` (`lib.claims.table.status_table()`), in `ORDER`."""
    c = Counter(r["status"] for r in rows)
    keys = [s for s in ORDER if c[s]] + sorted(s for s in c if s not in ORDER)
    return {s: c[s] for s in keys}


def sentence(rows) -> str:
    """'3 are reproduced, 3 are partly reproduced, 3 are not reproduced and 3 are not yet tested'."""
    parts = [_PHRASE.get(s, "{n} {are} '" + s + "'").format(n=n, are="is" if n == 1 else "are")
             for s, n in counts(rows).items()]
    if not parts:
        return "none has been judged yet"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
