"""lib.studies.golden.tie_inputs: the tied first-tile maxima of fa_deviation's attention-shaped inputs, and the words
for the β fix's change of bias."""
import math

import pytest

from lib.studies.golden import tie_inputs as di


def test_sinks_tie_in_every_rows_first_tile_and_the_cap_splits_them_by_r_m():
    from lib.studies.golden.fa_deviation import make_inputs
    q, k, _ = make_inputs("attention", 2, 128, 32, 0)
    kw = dict(block_n=32, beta=7.0)
    none = di.first_tile_ties(q, k, max_shift=1e9, **kw)       # no shift is that large: nothing capped
    every = di.first_tile_ties(q, k, max_shift=0.0, **kw)      # any positive shift exceeds 0: every positive tie capped
    assert none["rows"] == every["rows"] == 2 * 128
    # the sinks at keys 0, 1, 2 are one vector and the queries are aligned with it: every row ties in tile 0
    assert none["tied"] == none["rows"]
    assert none["capped"] == 0 and every["capped"] == every["tied"]
    assert 0 < none["r_lo"] <= none["r_hi"]
    # a cap between the smallest and largest tied maximum splits the rows
    mid = (kw["beta"] - 1) * (none["r_lo"] + none["r_hi"]) / 2
    some = di.first_tile_ties(q, k, max_shift=mid, **kw)
    assert 0 < some["capped"] < some["tied"]


@pytest.mark.parametrize("paper, fix, word", [(-0.3, -2.4, "makes the bias 8 times as large"),
                                              (-0.4, -0.1, "shrinks the bias 4-fold"),
                                              (-0.3, 0.36, "leaves the bias about the same size"),
                                              (0.0, -1.0, "cannot be compared"),
                                              (math.nan, -1.0, "cannot be compared")])
def test_fix_bias_words(paper, fix, word):
    assert di.fix_bias_words(paper, fix).startswith(word)
