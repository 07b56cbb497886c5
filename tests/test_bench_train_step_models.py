"""benchmarks/bench_train_step_models.py: training steps where an arm also changes the model — each arm built with
its own model (the group's, with the arm's change), timed as bench_train_step_gpt2 times every arm, and recorded with
its attention spec restored and the group's base model beside its change."""
import pytest
import torch

from benchmarks import bench_train_step_gpt2 as steps
from benchmarks import bench_train_step_models as bm

MODEL = dict(n_layer=1, n_head=2, n_embd=8, block_size=4, vocab_size=16)
CHANGE = dict(qk_norm="capped", qk_gain=2.0)


def test_each_arm_is_built_with_its_own_model_and_recorded_with_its_spec(monkeypatch):
    built = []

    def fake_train_step(attn, compile_, model_kw, batch_size, device):
        built.append((attn, compile_, dict(model_kw), torch._dynamo.config.automatic_dynamic_shapes))
        return (lambda: None), None, None
    monkeypatch.setattr(steps, "train_step", fake_train_step)
    groups = [[dict(label="sdpa", attn="sdpa", compile=False), dict(label="plain", attn="paper", compile=False),
               dict(label="bounded", attn="paper", compile=False, model=CHANGE)]]
    cfg = dict(model=MODEL, batch_size=2, warmup_steps=1, rounds=2, rep_ms=1, groups=groups)
    out = bm.run("ci", cfg)["data"]
    assert [b[0] for b in built] == ["sdpa", "paper", "paper"]
    assert [b[2] for b in built] == [MODEL, MODEL, MODEL | CHANGE]          # only the bounded arm changes the model
    assert not any(b[3] for b in built) and out["automatic_dynamic_shapes"] is False
    assert torch._dynamo.config.automatic_dynamic_shapes                    # restored after the run
    (g,) = out["groups"]
    assert [r["attn"] for r in g] == ["sdpa", "paper", "paper"] and [r["label"] for r in g] == ["sdpa", "plain", "bounded"]
    assert g[2]["model"] == CHANGE and "model" not in g[1] and all(r["model_base"] == MODEL for r in g)
    assert g[0]["ratio_to_baseline"] == 1.0 and all(len(r["ms"]) == 2 for r in g)
    assert g[2]["ratio_to_baseline"] == pytest.approx(g[2]["ms_median"] / g[0]["ms_median"])


def test_keys_name_each_arm_once():
    groups, arms = bm.keyed_groups([[dict(attn="a"), dict(attn="a", model=CHANGE)], [dict(attn="a")]])
    keys = [x["attn"] for g in groups for x in g]
    assert len(set(keys)) == 3 and [arms[k] for k in keys] == [("a", {}), ("a", CHANGE), ("a", {})]
