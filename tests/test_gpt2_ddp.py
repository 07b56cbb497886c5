"""gpt2_ddp (GPT-2 at the authors' batch on several GPUs): its ci run (every part in this process, one rank of a gloo
group), the registered full plan (accumulation from the GPU count, the parts' budgets), the launch the README gives,
and the scaling reading. The DDP path itself with 2 ranks and accumulation: tests/test_ddp.py."""
import math
import re
from pathlib import Path

import pytest

from lib.book import registry
from lib.studies.gpt2 import ddp

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ci(tmp_path_factory):
    cfg = registry.resolve("gpt2_ddp", "ci", {"corpus_dir": str(tmp_path_factory.mktemp("ddp") / "corpus")})
    return cfg, ddp.run("ci", cfg)


def test_ci_run_trains_every_part_from_one_initialisation(ci):
    cfg, res = ci
    runs = {r["label"]: r for r in res["data"]["runs"]}
    assert list(runs) == ["sdpa:s0", "naive:s0", "scaling_1:s0", "scaling_all:s0"] == ddp.labels(cfg)
    for lab, r in runs.items():
        assert r["steps"] == cfg["steps"] and r["world_size"] == 1
        assert r["grad_accum"] == cfg["batch_size"] // cfg["micro_batch"] == 2     # 4 windows as 2 × 2, one rank
        assert r["config"]["micro_batch"] == 2 and r["tokens_per_step"] == 4 * 32
    a = res["arrays"]
    # the arms: the census at steps 0, 2 and the last; the scaling pair: none, and no evaluation
    assert list(a["sdpa:s0__census__step"]) == [0, 2, 3] and len(a["scaling_1:s0__census__step"]) == 0
    assert runs["scaling_1:s0"]["val"]["step"] == [] and runs["sdpa:s0"]["val"]["step"] == [4]
    # one initialisation and batch order: FP32 attention and SDPA agree at step 0 to FP32 rounding (a different
    # initialisation or batch moves the first loss by ~1e-2), and so do the scaling runs (SDPA)
    first = [float(a[f"{lab}__loss"][0]) for lab in runs]
    assert max(first) - min(first) < 1e-4 * first[0]
    s = res["data"]["scaling"]
    assert s["gpus"] == 1 and s["one"] > 0 and s["all"] > 0        # clock every step: 2 steady windows each
    assert res["data"]["telemetry"]["scaling_1:s0"]["step_times"][-1][0] == 4


def test_full_plan_takes_the_authors_batch_whatever_the_gpu_count():
    cfg = registry.resolve("gpt2_ddp", "full")
    arms_ = {a["label"]: a for a in cfg["arms"]}
    assert arms_["sdpa"]["attn"] == "sdpa" and arms_["paper"]["attn"] == "paper/round_block=512"
    assert all(a["compile"] for a in cfg["arms"]) and cfg["scaling"]["compile"]
    rc = ddp.part_config(cfg, "paper:s0", "/corpus")
    assert rc.batch_size * rc.seq_len == 327_680 and rc.micro_batch == 20
    assert [rc.grad_accum(w) for w in (1, 2, 4, 8)] == [16, 8, 4, 2]       # 20 × accumulation × GPUs = 320
    with pytest.raises(ValueError, match="not a multiple"):
        rc.grad_accum(3)
    assert (rc.lr, rc.warmup, rc.beta1, rc.beta2, rc.weight_decay, rc.grad_clip) == (1e-3, 2000, 0.9, 0.95, 0.0, 1.0)
    assert (rc.census_every, rc.max_wall_s, rc.compile, rc.model.attn) == (100, 540, True, "paper/round_block=512")
    assert rc.data == "tokens" and rc.corpus_dir == "/corpus" and rc.seed == rc.data_seed == 0
    one, every = (ddp.part_config(cfg, f"scaling_{k}:s0", "/corpus") for k in ("1", "all"))
    assert one.census_every == every.census_every == 0 and one.eval_batches == 0
    assert (one.max_wall_s, every.max_wall_s, one.model.attn) == (180, 100, "sdpa")
    assert one.record()["batch_size"] == 320 and one.record()["micro_batch"] == 20


def test_readme_gives_the_launch_the_driver_runs():
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("torchrun "))
    plan, label = re.search(r"part (\S+) (\S+)$", line).groups()
    assert label in ddp.labels(registry.resolve("gpt2_ddp", "full"))
    cmd = ddp.part_command(plan, label, 4)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and line == " ".join(["torchrun"] + cmd[3:])


def test_steady_rate_and_scaling_rule():
    # 10 steps a window; the first window (compilation) is left out: 20 steps in 4 s
    assert ddp.steady_tokens_per_s([(10, 60.0), (20, 62.0), (30, 64.0)], 1000) == pytest.approx(5000.0)
    assert math.isnan(ddp.steady_tokens_per_s([(10, 60.0), (20, 62.0)], 1000))      # no window after the first
    rules = {"scaling_min": 0.9}
    ok = ddp.scaling({"scaling": {"one": 100.0, "all": 360.0, "gpus": 4}}, rules)
    short = ddp.scaling({"scaling": {"one": 100.0, "all": 350.0, "gpus": 4}}, rules)
    assert ok["efficiency"] == pytest.approx(0.9) and ok["meets"]
    assert short["efficiency"] == pytest.approx(0.875) and not short["meets"]
