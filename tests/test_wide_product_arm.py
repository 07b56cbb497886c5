"""The training-step benchmark's per-arm product form (`benchmarks.bench_train_step_gpt2.with_wide_product`): the
arm's step runs with `kernels.attention.WIDE_PRODUCT` set to its form and the previous form comes back after each
call, also when the step raises, so the arms of one group, timed in turn, each run their own form."""
import importlib

import pytest

from benchmarks.bench_train_step_gpt2 import with_wide_product


ka = importlib.import_module("kernels.attention")     # the module (the package re-exports its function)


def test_each_call_runs_in_its_form_and_restores_the_previous_one():
    seen = []
    before = ka.WIDE_PRODUCT
    fn = with_wide_product(lambda: seen.append(ka.WIDE_PRODUCT), "bf16_split")
    fn()
    fn()
    assert seen == ["bf16_split", "bf16_split"] and ka.WIDE_PRODUCT == before
    assert with_wide_product(fn, None) is fn

    def boom():
        raise RuntimeError("step failed")
    with pytest.raises(RuntimeError):
        with_wide_product(boom, "bf16_split")()
    assert ka.WIDE_PRODUCT == before
