"""Settings chapters 4 and 5 name in their prose, read from the code that uses them."""
from __future__ import annotations


def authors_tile() -> int:
    """The authors' flash attention's q- and k-tile (keys): their model's default."""
    from lib.training.authors_backend import AuthorsOptions
    return AuthorsOptions().tile


def null_quantile() -> float:
    """The quantile of the sign nulls the chapters report (`lib.stats.NULL_QUANTILE`)."""
    from lib import stats
    return stats.NULL_QUANTILE
