"""Settings chapter 2 names in its prose, read from the code that uses them (so the text cannot drift from it)."""
from __future__ import annotations

# FlashAttention's FLOP convention, as the benchmarks count it: a backward is 2.5 forwards (a test ties the two).
BWD_PER_FWD = 2.5


def authors_tile() -> int:
    """The authors' flash attention's q- and k-tile (keys): their model's default."""
    from lib.training.authors_backend import AuthorsOptions
    return AuthorsOptions().tile


def spec_words(spec: str) -> str:
    """An attention spec in words (`lib.training.spec.describe`)."""
    from lib.training.spec import describe
    return describe(spec)
