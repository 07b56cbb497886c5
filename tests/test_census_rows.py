"""`lib.census.row_classes`: the census's classes row by row, consistent with the counts of `precondition_census`."""
import numpy as np
import pytest
import torch

from lib import census as cs
from tests.test_census import oracle_heads, stack, tie_head, worked_v


@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_row_masks_add_up_to_the_census_counts(placement):
    q, k, v = oracle_heads()
    c = cs.precondition_census(q, k, v, placement=placement)
    m = cs.row_classes(q, k, v, placement=placement)
    assert np.array_equal(m["tied"].sum(dim=(0, 2)).numpy(), c["n_tied"])
    assert np.array_equal(m["window"].sum(dim=(0, 2)).numpy(), c["n_window"])
    assert np.array_equal(m["zero"].sum(dim=(0, 2)).numpy(), c["n_zero"])
    conj = (m["window"].unsqueeze(-1) & m["one_signed"]).sum(dim=(0, 2, 3)).numpy()
    assert np.array_equal(conj, c["n_conj"])


def test_tied_sign_is_the_sign_of_v_over_the_tied_keys():
    q, k, v = stack(tie_head(64, g=10.0, v_tied=worked_v()))           # tied V negative in every feature
    m = cs.row_classes(q, k, v, placement="authors")
    rows = m["window"][0, 0]
    assert rows.any() and (m["tied_sign"][0, 0][rows] == -1).all() and m["one_signed"][0, 0][rows].all()
    assert (m["tied_sign"][0, 0][~m["tied"][0, 0]] == 0).all()
    v2 = v.clone()
    v2[0, 0, 1, :4] = 1.0                                              # mixed signs in features 0–3
    m2 = cs.row_classes(q, k, v2, placement="authors")
    r = m2["window"][0, 0]
    assert not m2["one_signed"][0, 0][r][:, :4].any() and m2["one_signed"][0, 0][r][:, 4:].all()
