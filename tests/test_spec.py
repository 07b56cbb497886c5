"""lib/training/spec.py: attention specs in words — the one place arm labels are made — and the spec module's
parser still parsing what the model runs."""
import pytest

from lib.training import proxy
from lib.training.model import GPTConfig
from lib.training.spec import AttnSpec, describe


@pytest.mark.parametrize("spec,words", [
    ("paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix", "paper placement, 512-key blocks, fix β = 7"),
    ("paper/round_block=512/beta=2/tie_tol=0.001/max_shift=none+fix", "paper placement, 512-key blocks, fix β = 2"),
    ("sdpa", "PyTorch flash SDPA"), ("naive", "FP32 attention"), ("fa2", "FA2 placement"),
    ("paper/mantissa_bits=6/rounding=sr", "paper placement, 6 mantissa bits, stochastic rounding"),
    ("paper/round_s_minus_m=false+fix_split", "paper placement, S − m in FP32, fix β = 7 (also across tiles)"),
    ("paper+zero_rows", "paper placement, rows zeroed, no shift"),
    ("authors/tile=512+fix", "the authors' code, 512-key tiles, fix β = 7"),
    ("dose/paper/c=bias/lam=30", "FP32 attention, δ + 30 × bias part of Δδ (paper placement)"),
])
def test_describe(spec, words):
    assert describe(spec) == words
    assert describe(AttnSpec.parse(spec)) == words


def test_describe_details_and_config_defaults():
    s = "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix"
    assert describe(s, detail=True) == "paper placement, 512-key blocks, fix β = 7, ties within 0.001, exact rule"
    assert describe("paper+fix", beta=30.0, max_shift=None, detail=True) == "paper placement, fix β = 30, exact rule"
    assert describe(AttnSpec.parse("paper", heads=((1,), "naive"))) == "paper placement; heads 1: FP32 attention"


def test_every_proxy_arm_has_a_distinct_label():
    labels = [describe(s) for s in proxy.ARMS.values()]
    assert len(set(labels)) == len(labels) and not any("_" in w for w in labels)


def test_the_model_builds_layers_from_the_spec_module():
    assert GPTConfig(n_layer=2, attn=["sdpa", "paper+fix"]).layer_specs()[1] == AttnSpec.parse("paper+fix")
