"""A rerun of one GPT-2 arm read in place of its truncated first run (`lib.studies.gpt2.reading.merge_seeds`,
`replaced_words`): the longer run and its own arrays are read, the replacement is named with both devices, and two
full runs of one label are still refused."""
import copy
import dataclasses

import numpy as np
import pytest

from lib.book import results
from lib.studies.gpt2 import reading as g2r

pytestmark = pytest.mark.skipif(not results.exists("gpt2_arms", "full"), reason="no committed GPT-2 comparison")


def _rerun(res, label: str, steps: int, device: str):
    """`res` reduced to the run `label`, planted as a rerun of `steps` steps on `device`, with its arrays marked."""
    data = copy.deepcopy(res.data)
    data["runs"] = [dict(r, steps=steps, truncated_at=None) for r in data["runs"] if r["label"] == label]
    data["telemetry"] = {label: data["telemetry"][label]}
    arrays = {k: np.asarray(v) + 1 for k, v in res.arrays.items() if k.split("__")[0] == label
              and np.issubdtype(np.asarray(v).dtype, np.number)}
    return dataclasses.replace(res, data=data, arrays=arrays, meta=dict(res.meta, device=device))


def test_a_rerun_replaces_a_truncated_run_and_says_so():
    a = results.load("gpt2_arms", "full")
    paper = next(r for r in a.data["runs"] if r["label"] == "paper:s0")
    assert paper["truncated_at"] is not None           # the committed seed-0 paper run stopped on its budget
    re = _rerun(a, "paper:s0", paper["steps"] + 100, "GPU B")
    for order in ([a, re], [re, a]):
        m = g2r.merge_seeds(order)
        run = next(r for r in m.data["runs"] if r["label"] == "paper:s0")
        assert run["steps"] == paper["steps"] + 100 and len(m.data["runs"]) == len(a.data["runs"])
        key = next(k for k in re.arrays if k.startswith("paper:s0__"))
        assert np.array_equal(m.arrays[key], re.arrays[key], equal_nan=True)
        words = g2r.replaced_words(m)
        assert "read from its rerun" in words and "GPU B" in words and f"{paper['steps']:,} steps" in words
    assert g2r.replaced_words(g2r.merge_seeds([a])) == ""


def test_two_full_runs_of_one_arm_are_refused():
    a = results.load("gpt2_arms", "full")
    sdpa = next(r for r in a.data["runs"] if r["label"] == "sdpa:s0")
    assert sdpa["truncated_at"] is None
    with pytest.raises(ValueError, match="appears twice"):
        g2r.merge_seeds([a, _rerun(a, "sdpa:s0", sdpa["steps"] + 100, "GPU B")])
