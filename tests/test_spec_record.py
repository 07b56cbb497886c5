"""A layer spec holds its fix as one `Fix`, and its record stays the flat dict it was before: the fix's kind under
"fix", then its β, tie tolerance and shift guard as keys of their own, in the places `dataclasses.asdict` gave them
when they were four fields of the spec."""
import json

from lib.fp.fix import BETA, MAX_SHIFT, USER_BETA, Fix
from lib.training.loop import RunConfig
from lib.training.model import GPTConfig, parse_spec
from lib.training.spec import AttnSpec, record

# The keys, in order, that an AttnSpec's record had while the fix was four fields of the spec.
FLAT_KEYS = ["backend", "numerics", "fix", "beta", "tie_tol", "max_shift", "path", "heads", "text", "zero_at", "opts"]


def test_an_attn_spec_records_its_fix_flat():
    spec = AttnSpec.parse("paper/round_block=512/beta=2/max_shift=none+fix", tie_tol=0.001)
    assert spec.fix == Fix("beta", 2.0, 0.001, None)
    r = record(spec)
    assert list(r) == FLAT_KEYS
    assert (r["fix"], r["beta"], r["tie_tol"], r["max_shift"]) == ("beta", 2.0, 0.001, None)
    assert r["numerics"]["round_block"] == 512               # a Numerics value records as its fields
    assert json.loads(json.dumps(r)) == r                     # plain JSON, as results keep it
    plain = record(AttnSpec.parse("sdpa"))
    assert (plain["fix"], plain["beta"], plain["max_shift"]) == (None, BETA, MAX_SHIFT)


def test_nested_specs_record_flat_too():
    dose = record(AttnSpec.parse("dose/paper/c=bias/lam=30+fix", beta=5.0))
    placement = dose["opts"]["placement"]
    assert list(placement) == FLAT_KEYS and (placement["fix"], placement["beta"]) == ("beta", 5.0)
    heads = record(AttnSpec(backend="ours", numerics="fa2", heads=((0, 2), "paper+fix")))
    idx, other = heads["heads"]
    assert idx == (0, 2) and list(other) == FLAT_KEYS and other["fix"] == "beta"


def test_the_user_kernel_spec_records_the_knobs_it_takes():
    r = record(parse_spec("stable/beta=3+fix"))
    assert r == {"fix": "beta", "beta": 3.0, "max_shift": MAX_SHIFT, "text": "stable/beta=3+fix"}
    assert record(parse_spec("stable"))["beta"] == USER_BETA


def test_configs_record_their_layer_specs_flat():
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=16, attn=["paper+fix", "sdpa"], beta=4.0)
    attn = cfg.to_dict()["attn"]
    assert [list(a) for a in attn] == [FLAT_KEYS, FLAT_KEYS] and attn[0]["beta"] == 4.0
    run = RunConfig(model=GPTConfig(n_layer=1, n_head=2, n_embd=16, attn=[AttnSpec.parse("fa2+fix", beta=3.0)]))
    (layer,) = run.record()["model"]["attn"]
    assert (layer["fix"], layer["beta"]) == ("beta", 3.0)
