"""`benchmarks.bench_train_step_static`: train_step_gpt2's method with Dynamo's automatic dynamic shapes off, in this
process and in the group subprocesses (their environment), restored after the call; and why it is needed — a second
compiled model whose β fix differs only in β makes Dynamo mark β symbolic unless the flag is off."""
import logging
import os

import torch
import torch._dynamo.config

from benchmarks import bench_train_step_gpt2 as steps, bench_train_step_static as static


def test_run_turns_automatic_dynamic_off_for_the_groups_and_restores_it(monkeypatch):
    seen = []

    def fake_run(scale, cfg):
        seen.append((os.environ.get(static.ENV), torch._dynamo.config.automatic_dynamic_shapes, scale))
        return {"data": {"groups": []}, "seeds": [0]}
    monkeypatch.setattr(steps, "run", fake_run)
    monkeypatch.delenv(static.ENV, raising=False)
    before = torch._dynamo.config.automatic_dynamic_shapes
    out = static.run("full", {"groups": []})
    assert seen == [("0", False, "full")]                  # subprocesses inherit os.environ; this process the flag
    assert out["data"]["automatic_dynamic_shapes"] is False
    assert static.ENV not in os.environ and torch._dynamo.config.automatic_dynamic_shapes == before


def _marked_dynamic(automatic: bool) -> list[str]:
    """Compile (Dynamo only) two tiny models with the exact-rule fix at β = 7 and then β = 2, one after the other
    in this process as a benchmark group does; the attributes Dynamo marked dynamic on the way."""
    from lib.training.model import GPTConfig, build_lm
    records = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    log = logging.getLogger("torch._dynamo.pgo")
    handler, level = Grab(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(automatic_dynamic_shapes=automatic):
            for beta in (7, 2):
                cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=64, vocab_size=128,
                                attn=f"paper/round_block=64/beta={beta}/tie_tol=0.001/max_shift=none+fix")
                torch.manual_seed(0)
                model = build_lm(cfg)
                x = torch.randint(0, 128, (1, 64))
                torch.compile(model, backend="eager")(x, x)[1].backward()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        torch._dynamo.reset()
    # "marking <attr> as dynamic" (a float) or "<attr> is converted to a symbolic integer" (an int)
    return [m for m in records if "as dynamic" in m or "symbolic" in m]


def test_a_second_beta_is_made_symbolic_only_with_automatic_dynamic_on():
    assert any("spec.fix.beta" in m for m in _marked_dynamic(True))
    assert _marked_dynamic(False) == []
