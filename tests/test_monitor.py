"""lib/monitor.py on the CPU: the right steps and layers on our GPT and on a plain SDPA GPT, the census of a direct
call, power iteration against the spectral norm, the JSON round trip, the warnings, the training harness's hook."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lib import census as cs
from lib.monitor import PER_HEAD, AttentionMonitor, MonitorWarning, Thresholds, find_attention_modules
from lib.training.model import GPT, GPTConfig


class SdpaAttention(nn.Module):
    """nanoGPT's attention, calling F.scaled_dot_product_attention."""

    def __init__(self, C, H):
        super().__init__()
        self.n_head = H
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class SdpaGPT(nn.Module):
    def __init__(self, vocab=64, C=32, H=2, L=3, T=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(ln=nn.LayerNorm(C), attn=SdpaAttention(C, H))) for _ in range(L))
        self.head = nn.Linear(C, vocab, bias=False)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = x + b["attn"](b["ln"](x))
        logits = self.head(x)
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=3, n_head=2, n_embd=32, block_size=32, vocab_size=64, attn="sdpa"))


def sdpa_gpt():
    torch.manual_seed(0)
    return SdpaGPT()


def batch(step, B=6, T=32, vocab=64):
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, vocab, (B, T), generator=g)
    return x, torch.roll(x, -1, 1)


def run(model, mon, steps, opt=None):
    """Forward, backward (and an SGD step) per step with the monitor around them."""
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x, y = batch(step)
        mon.step(step)
        _, loss = model(x, y)
        loss.backward()
        mon.collect(step)
        opt.step()
        opt.zero_grad()


def direct_qkv(model, x, layer, rows):
    """q, k, v of `layer` on input x, reached without the monitor."""
    if isinstance(model, GPT):
        model.set_capture(True)
        model(x)
        cap = model.attn_layers[layer].captured
        q, k, v = cap["q"], cap["k"], cap["v"]
        model.set_capture(False)
    else:
        got = {}
        h = model.blocks[layer]["attn"].c_attn.register_forward_hook(lambda m, a, out: got.setdefault("qkv", out))
        model(x, torch.zeros_like(x))
        h.remove()
        B, T, C3 = got["qkv"].shape
        q, k, v = (t.view(B, T, 2, C3 // 6).transpose(1, 2) for t in got["qkv"].split(C3 // 3, dim=2))
    return tuple(t.detach()[:rows].to(torch.bfloat16) for t in (q, k, v))


@pytest.mark.parametrize("make", [tiny_gpt, sdpa_gpt], ids=["our_gpt", "sdpa_gpt"])
def test_records_the_right_steps_and_layers(make, tmp_path):
    model = make()
    mon = AttentionMonitor(model, every=5, layers=[0, 2], out=tmp_path / "m.jsonl", batch_rows=2)
    assert mon.mode == ("capture" if isinstance(model, GPT) else "sdpa")
    run(model, mon, 12)
    assert [(r["step"], r["layer"]) for r in mon.records] == [(0, 0), (0, 2), (5, 0), (5, 2), (10, 0), (10, 2)]
    r = mon.records[0]
    assert r["batch_rows"] == 2 and r["seq_len"] == 32 and r["n_head"] == 2 and r["qkv_dtype"] == "float32"
    assert r["causal"] is True and len(r["sigma_wq"]) == 2 and r["n_rows"] == [64.0, 64.0]
    # disarmed: no capture left on, SDPA restored
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention
    if isinstance(model, GPT):
        assert not any(a.capture or a.captured for a in model.attn_layers)


def sharpen(model):
    """No position embeddings (a repeated token gives layer 0 an identical key: exact ties in both placements) and
    c_attn scaled up (concentrated attention: window rows). Factors chosen so that both models have conjunction
    pairs in layer 0."""
    gpt = isinstance(model, GPT)
    with torch.no_grad():
        (model.transformer.wpe if gpt else model.wpe).weight.zero_()
        for m in find_attention_modules(model):
            m.c_attn.weight.mul_(32.0 if gpt else 12.0)
    return model


@pytest.mark.filterwarnings("ignore::lib.monitor.MonitorWarning")    # sharpened: high logits, conjunction
@pytest.mark.parametrize("make", [tiny_gpt, sdpa_gpt], ids=["our_gpt", "sdpa_gpt"])
@pytest.mark.parametrize("placement", cs.PLACEMENTS)
def test_the_census_equals_a_direct_call(make, placement):
    model = sharpen(make())
    mon = AttentionMonitor(model, every=1, layers=[0], placement=placement, out=None, batch_rows=3)
    x, y = batch(7)
    mon.step(7)
    model(x, y)
    (rec,) = mon.collect(7)
    q, k, v = direct_qkv(model, x, 0, 3)
    want = cs.precondition_census(q, k, v, placement=placement)
    assert want["n_conj"].min() > 0
    for key in PER_HEAD:
        got = np.array([np.nan if a is None else a for a in rec[key]])
        np.testing.assert_array_equal(got, want[key], err_msg=key)
    np.testing.assert_array_equal(rec["r_hist"], want["r_hist"])


def test_power_iteration_converges_to_the_spectral_norm():
    model = tiny_gpt()
    mon = AttentionMonitor(model, every=1, out=None, batch_rows=1, power_iters=2)
    x, y = batch(0)
    for step in range(60):                             # fixed weights: the vectors persist across events
        mon.step(step)
        model(x, y)
        mon.collect(step)
    for layer in range(3):
        wq, _ = model.qk_weights(layer)
        exact = torch.linalg.matrix_norm(wq.detach().double(), 2).numpy()
        got = np.array(mon.records[-3 + layer]["sigma_wq"])
        # power iteration, 2 steps per event over 60 events: converged far inside 1e-3 (FP32: ≤ (m + n)·eps32)
        np.testing.assert_allclose(got, exact, rtol=1e-3)
        assert not np.allclose(np.array(mon.records[layer]["sigma_wq"]), exact, rtol=1e-3)   # not at the start


def test_jsonl_round_trips(tmp_path):
    model = sdpa_gpt()
    mon = AttentionMonitor(model, every=4, out=tmp_path / "m.jsonl", batch_rows=2)
    run(model, mon, 9)
    d = AttentionMonitor.read(tmp_path / "m.jsonl")
    assert list(d["step"]) == [0, 4, 8] and list(d["layer"]) == [0, 1, 2]
    assert d["conjunction"].shape == (3, 3, 2) and d["r_hist"].shape == (3, 3, 2, len(cs.R_EDGES) - 1)
    for r in mon.records:
        i, j = list(d["step"]).index(r["step"]), r["layer"]
        for key in ("tie_rate", "err_ulp", "max_logit", "sigma_wq"):
            want = np.array([np.nan if a is None else a for a in r[key]])
            np.testing.assert_array_equal(d[key][i, j], want, err_msg=key)
        np.testing.assert_array_equal(d["r_hist"][i, j], r["r_hist"])


class PlantedAttention(nn.Module):
    """Attention over planted q, k, v held in `self.qkv` (B, H, T, D): its forward ignores x's values."""

    def __init__(self, qkv):
        super().__init__()
        self.qkv = qkv

    def forward(self, x):
        q, k, v = self.qkv
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum() + 0 * x.sum()


def test_a_rising_conjunction_warns():
    from tests.test_census import stack, tie_head
    torch.manual_seed(0)
    rnd = tuple(torch.randn(1, 2, 64, 16).bfloat16().float() for _ in range(3))
    attn = PlantedAttention(rnd)
    mon = AttentionMonitor(attn, every=100, out=None, batch_rows=1, attn_modules=[attn],
                           thresholds=Thresholds(conjunction=0.5, rise=10, floor=1e-4, max_logit=50))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # nothing to warn about at first
        mon.step(0)
        attn(torch.zeros(1))
        (quiet,) = mon.collect(0)
    assert quiet["warnings"] == [] and max(quiet["conjunction"]) < 1e-4   # a share of 128 rows: 1e-4 means none
    attn.qkv = stack(tie_head(64, g=10.0), tie_head(64, g=10.0))   # every row from 2 on in the conjunction
    mon.step(100)
    attn(torch.zeros(1))
    with pytest.warns(MonitorWarning) as caught:
        (loud,) = mon.collect(100)
    assert [str(w.message) for w in caught] == loud["warnings"]
    assert loud["conjunction"] == [62 / 64] * 2
    assert sum("rose to" in m for m in loud["warnings"]) == 2 and any("above 0.5" in m for m in loud["warnings"])
    assert not any("logit" in m for m in loud["warnings"])          # the largest logit is 8, under 50


def test_as_the_training_harness_step_hook(tmp_path):
    """`train(cfg, step_hook=mon)`: events at 0, 3, 6 on every layer; the harness's own telemetry (every 2 steps,
    through the same capture flag) still gets its q, k, v on the shared steps."""
    from lib.training.train import TrainConfig, train
    cfg = TrainConfig.flat(n_layer=2, n_head=2, n_embd=32, seq_len=32, batch_size=4, steps=7, warmup=1, lr=1e-3,
                      attn="sdpa", telemetry_every=2, eval_batches=0, progress=False, device="cpu")
    mon = AttentionMonitor(None, every=3, out=tmp_path / "m.jsonl", batch_rows=2)    # bound to train()'s model
    res = train(cfg, step_hook=mon)
    assert [(r["step"], r["layer"]) for r in mon.records] == [(0, 0), (0, 1), (3, 0), (3, 1), (6, 0), (6, 1)]
    assert res["telemetry"]["step"] == [0, 2, 4, 6] and len(res["telemetry"]["tie_rate"]) == 4
    assert isinstance(mon.model, GPT) and not any(a.capture or a.captured for a in mon.model.attn_layers)


def test_the_benchmark_runs_in_smoke_mode():
    from benchmarks.bench_monitor import main
    out = main(["--smoke"])
    assert out["n_events"] == 2 and out["plain_ms"] > 0 and out["event_ms"] > 0
    assert out["ratio"] == pytest.approx(out["monitor_ms"] / out["plain_ms"])
