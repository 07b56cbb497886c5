"""Adding an attention backend the way a user would: one module (one function, q, k, v -> O), one line in the table
`lib.training.backends.BACKENDS`, and a registry entry whose spec names it. The module is written under tmp_path and
imported from there; the table line is a `monkeypatch.setitem`; the registry entry is the real registry with one
table appended, in a tmp file (`lib.book.registry` takes a path). Nothing under lib/ is edited.

The toy backend is FP32 softmax attention written out (so it must agree with the "naive" backend) that records every
call (the layer its `AttnCall` names), so each test can tell that it, and not another backend, ran.

A spec *string* names the backend by its table line alone (`AttnSpec.parse` takes any key of the table that has no
grammar of its own as a bare name), so `GPTConfig(attn="toy")`, the proxy studies' `TrainConfig.flat(attn="toy")`
and a registry entry (TOML holds strings) select it; `describe` labels it from its module's docstring ("a toy
attention backend"), not as another backend. A key named like one of our kernel's profiles would take that profile's
name over, so the table is checked for one.
"""
import importlib
import sys

import numpy as np
import pytest
import torch

from lib.fp.fix import Fix
from lib.book import registry, runner
from lib.training import loop
from lib.training.backends import BACKENDS, AttnCall, naive_attention, run_backend
from lib.training.model import GPT, GPTConfig
from lib.training.spec import AttnSpec, describe

MODULE = "toy_attention"
TOY_SOURCE = '''\
"""A toy attention backend: softmax(scale * Q K^T + causal mask) V in FP32, autocast off; records its calls."""
import math

import torch

CALLS = []   # one entry per call: the layer its AttnCall names (None without one)


def attention(q, k, v, *, spec, causal=True, scale=None, call=None):
    CALLS.append(None if call is None else call.layer)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    with torch.autocast(device_type=q.device.type, enabled=False):
        s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
        if causal:
            T, S = s.shape[-2:]
            s = s.masked_fill(torch.ones(T, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        o = torch.matmul(torch.softmax(s, dim=-1), v.float())
    return o.to(q.dtype)
'''

TINY = dict(n_layer=2, n_head=2, n_embd=16, block_size=16)

# The registry entry a user appends to lib/experiments/registry.toml: a grid of training runs through the one loop
# (`lib.training.grid`), its spec naming the new backend.
ENTRY = '''
[toy_grid]
base = "lib.training.grid"
summary = "A toy attention backend trained through the one loop (a test's entry)."
device = "cpu"
inputs = ["data/corpus/pystdlib.txt.xz"]
[toy_grid.ci]
workers = 1
base = {n_layer = 2, n_head = 2, n_embd = 16, block_size = 16, attn = "toy", steps = 3, batch_size = 2, lr = 3e-3, warmup = 1, census_every = 0, eval_every = 0, eval_batches = 1}
regimes = [{label = "toy", seeds = [0]}]
'''


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    """The user's module, written and imported from tmp_path (not yet in the table)."""
    (tmp_path / f"{MODULE}.py").write_text(TOY_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    mod = importlib.import_module(MODULE)
    yield mod
    sys.modules.pop(MODULE, None)


@pytest.fixture
def toy(toy_module, monkeypatch):
    """The module plus its one table line."""
    monkeypatch.setitem(BACKENDS, "toy", toy_module.attention)
    return toy_module


@pytest.fixture
def toy_registry(tmp_path):
    """The registry with the toy entry appended (a tmp copy: every other entry still resolves beside it)."""
    path = tmp_path / "registry.toml"
    path.write_text(registry.REGISTRY_FILE.read_text() + ENTRY)
    return path


def _qkv(seed=0, shape=(2, 2, 12, 8)):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=g) for _ in range(3))


def _tiny_run(attn, steps=4):
    return loop.RunConfig(model=GPTConfig(**TINY, attn=attn), steps=steps, batch_size=2, lr=3e-3, warmup=1,
                          census_every=0, eval_batches=1)


# ------------------------------------------------------------------------------------------------ the table line
def test_the_table_line_is_what_makes_the_backend_known(toy_module, monkeypatch):
    assert "toy" not in BACKENDS
    with pytest.raises(ValueError, match="attention backend must be one of"):
        AttnSpec(backend="toy")
    monkeypatch.setitem(BACKENDS, "toy", toy_module.attention)
    spec = AttnSpec(backend="toy")
    assert spec.backend == "toy" and spec.label == "toy"
    q, k, v = _qkv()
    o = run_backend(spec, q, k, v, causal=True, call=AttnCall(layer=3))
    assert toy_module.CALLS == [3]
    torch.testing.assert_close(o, naive_attention(q, k, v, causal=True), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------------ the one model
def test_gpt_runs_forward_and_backward_through_it(toy):
    x = torch.randint(0, 256, (2, TINY["block_size"]), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, dims=1)
    out = {}
    for name, attn in (("toy", AttnSpec(backend="toy")), ("naive", "naive")):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY, attn=attn))
        _, loss = model(x, y)
        loss.backward()
        out[name] = (loss.detach(), model.transformer.h[0].attn.c_attn.weight.grad.clone())
    assert toy.CALLS == [0, 1]                           # one call per layer, each told its layer
    assert torch.isfinite(out["toy"][1]).all() and out["toy"][1].abs().sum() > 0
    torch.testing.assert_close(out["toy"][0], out["naive"][0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out["toy"][1], out["naive"][1], rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------------ the one loop
def test_the_one_loop_trains_with_it(toy):
    steps = 4
    r = loop.train(_tiny_run(AttnSpec(backend="toy"), steps), observers=[])
    calls = len(toy.CALLS)
    ref = loop.train(_tiny_run("naive", steps), observers=[])
    assert len(toy.CALLS) == calls                       # the reference run did not go through the toy
    assert calls == (steps + 1) * TINY["n_layer"]        # every step's forward, and the final validation batch
    assert r["config"]["model"]["attn"]["backend"] == "toy"
    assert len(r["loss"]) == steps and np.isfinite(r["loss"]).all()
    np.testing.assert_allclose(r["loss"], ref["loss"], rtol=1e-5)   # the same run as FP32 attention's
    np.testing.assert_allclose(r["val"]["loss"], ref["val"]["loss"], rtol=1e-5)


# ------------------------------------------------------------------------------------------------ the registry entry
def test_the_registry_entry_resolves(toy, toy_registry):
    e = registry.get("toy_grid", path=toy_registry)
    assert e.base == "lib.training.grid" and e.device == "cpu" and set(e.configs) == {"ci"}
    cfg = registry.resolve("toy_grid", "ci", path=toy_registry)
    assert cfg["base"]["attn"] == "toy" and cfg["regimes"] == [{"label": "toy", "seeds": [0]}]
    assert runner.base_module(e).run.__module__ == "lib.training.grid"
    with pytest.raises(registry.RegistryError):
        registry.get("toy_grid")                         # only the tmp registry has it


def test_the_registry_entry_runs_through_the_one_loop(toy, toy_registry):
    e = registry.get("toy_grid", path=toy_registry)
    out = runner.base_module(e).run("ci", registry.resolve("toy_grid", "ci", path=toy_registry))  # as run_live
    (run,) = out["data"]["runs"]
    assert "error" not in run and run["steps"] == 3
    assert len(toy.CALLS) == (3 + 1) * TINY["n_layer"]


# ------------------------------------------------------------------------------------------------ the spec grammar
def test_a_spec_string_names_it(toy):
    assert AttnSpec.parse("toy").backend == "toy"
    assert GPTConfig(**TINY, attn="toy").layer_specs()[0].backend == "toy"
    assert GPTConfig(**TINY, attn="toy,naive").layer_specs()[0].backend == "toy"
    from lib.training.train import TrainConfig                   # the proxy studies' flat config
    assert TrainConfig.flat(n_layer=1, n_head=1, n_embd=16, seq_len=16, attn="toy").model.attn == "toy"


def test_describe_does_not_mislabel_it(toy):
    words = describe(AttnSpec(backend="toy"))
    assert words == describe("toy") == "a toy attention backend"    # the first clause of its module's docstring
    assert words not in {describe(s) for s in ("fa2", "sdpa", "naive")}


def test_a_backends_words_come_from_its_docstrings_else_its_name(monkeypatch):
    def documented(q, k, v, *, spec, causal=True, scale=None, call=None):
        """FP32 attention written out again. Its function's docstring comes before its module's."""
    monkeypatch.setitem(BACKENDS, "documented", documented)
    monkeypatch.setitem(BACKENDS, "bare", lambda q, k, v, **kw: q)     # a lambda here: no docstring, nor its module's
    monkeypatch.setattr(sys.modules[__name__], "__doc__", None)
    assert describe("documented") == "FP32 attention written out again"   # an acronym keeps its capitals
    assert describe("bare") == "bare"


def test_the_built_in_bare_names_parse_as_before():
    for name in ("sdpa", "naive"):                       # what the parser returned when these were its only bare names
        assert AttnSpec.parse(name) == AttnSpec(backend=name, text=name)
        assert AttnSpec.parse(f" {name} ", beta=3.0, zero_at=5.0) == \
            AttnSpec(backend=name, text=name, fix=Fix(beta=3.0))


def test_an_unknown_bare_name_lists_the_known_ones(toy):
    with pytest.raises(ValueError, match=r"unknown attention spec 'flash'.*\('sdpa', 'naive', 'toy'\)"):
        AttnSpec.parse("flash")
    for own_grammar in ("ours", "authors/tile=x"):       # names with a grammar of their own are not bare names
        with pytest.raises(ValueError):
            AttnSpec.parse(own_grammar)


def _shadowed() -> set:
    """The profile names of our kernel that a key of the table would take over: `AttnSpec.parse` reads a bare name
    before it reads a profile, so a backend named "paper" would silently replace the paper placement."""
    from lib.training.spec import NUMERICS_NAMES, bare_names
    return set(bare_names()) & set(NUMERICS_NAMES)


def test_no_table_key_shadows_a_profile_name():
    from lib.training.spec import NUMERICS_NAMES
    assert not _shadowed()
    for name in NUMERICS_NAMES:
        assert AttnSpec.parse(name).backend == "ours" and AttnSpec.parse(name).numerics == name


def test_a_table_key_named_like_a_profile_is_caught(monkeypatch):
    monkeypatch.setitem(BACKENDS, "paper", naive_attention)
    assert _shadowed() == {"paper"}
    assert AttnSpec.parse("paper").backend == "paper"     # what the check above guards against
