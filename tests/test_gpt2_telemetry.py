"""The GPT-2 arms' telemetry at toy size on the CPU: the side chain probe leaves training bit-identical, captures the
training loss's dO, records the layers it chose; the telemetry cost read from the progress clock."""
import numpy as np
import pytest
import torch

from lib.book import registry
from lib.studies.gpt2 import arms
from lib.studies.gpt2.telemetry import SideProbe, telemetry_cost
from lib.training.chain_probe import SPLIT_KEYS
from lib.training.model import build_lm
from lib.training.loop import RunConfig, get_batch, load_data


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("telemetry")
    cfg = dict(registry.resolve("gpt2_arms", "ci"), corpus_dir=str(tmp / "corpus"))
    corpus_dir, _ = arms.build_corpus(cfg)
    return cfg, arms.arm_configs(cfg, corpus_dir)


def test_probe_leaves_training_bit_identical(toy):
    cfg, rcs = toy
    rc = rcs[0]
    plain = arms.train_lm(rc)
    probed = arms.train_arm(rc, cfg["probe"], progress_every=1)
    assert np.array_equal(np.asarray(plain["loss"]), np.asarray(probed["loss"]))
    assert np.array_equal(np.asarray(plain["grad_norm"]), np.asarray(probed["grad_norm"]))
    # events at 0, 2 and the last step (3); one layer each, chosen by its conjunction count
    recs = probed["probe"]
    assert [r["step"] for r in recs] == [0, 2, 3]
    L, H = rc.model.n_layer, rc.model.n_head
    for r in recs:
        assert r["layers"].shape == (1,) and r["conj_all"].shape == (L,)
        assert r["conj_all"][r["layers"][0]] == r["conj_all"].max()
        assert r["dg_norm"].shape == (1, H)
    assert len(probed["probe_s"]) == 3 and [s for s, _ in probed["step_times"]] == [1, 2, 3, 4]


def test_probe_captures_the_training_losss_do(toy):
    """The probe's dO on its rows equals the dO the full batch's loss gives those rows (FP32 on the CPU: equal to
    rounding; the scaling by rows / batch is what makes them equal at all)."""
    cfg, rcs = toy
    rc = rcs[0]
    torch.manual_seed(rc.seed)
    model = build_lm(rc.model)
    train = load_data(rc)[0]
    probe = SideProbe(rc, train, every=1, rows=1, top=rc.model.n_layer)
    got = {}
    real_measure = probe.measure

    def spy(l, attn, opt, *classes):
        got[l] = attn.captured["do"].clone()
        return real_measure(l, attn, opt, *classes)
    probe.measure = spy
    opt = torch.optim.AdamW(model.parameters())
    x, y = get_batch(train, probe.starts[0], rc, "cpu")
    for attn in model.attn_layers:
        attn.capture = True
    model(x, y)[1].backward()                       # the training step's backward, as train_lm runs it
    full = {l: attn.captured["do"][:1].clone() for l, attn in enumerate(model.attn_layers)}
    for attn in model.attn_layers:
        attn.capture, attn.captured = False, {}
    grads = [p.grad.clone() for p in model.parameters()]
    probe.after_backward(0, model, opt)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))   # no gradient touched
    for l in full:
        assert torch.allclose(got[l], full[l], rtol=1e-5, atol=1e-6 * float(full[l].abs().max()))
        assert float(full[l].abs().max()) > 0


def test_telemetry_cost_on_planted_times():
    """Windows of 50 steps at 5 s; the windows holding events at 200 and 400 take 1 s more: share 2 / (5 · 9)."""
    times, t = [], 0.0
    for s in range(50, 551, 50):
        t += 5.0 + (1.0 if s in (250, 450) else 0.0)
        times.append((s, t))
    c = telemetry_cost(times, [200, 400])
    assert c["clean_s"] == pytest.approx(5.0) and c["extra_s"] == pytest.approx(2.0)
    assert c["share"] == pytest.approx(2.0 / (5.0 * 10))
    # a restarted clock (a resumed process) is left out, not counted as a negative window
    c2 = telemetry_cost(times + [(600, 1.0), (650, 6.0)], [200, 400])
    assert c2["share"] == pytest.approx(2.0 / (5.0 * 11))


def test_run_records_the_telemetry(gpt2_arms_ci):
    """The registered ci run (shared with the reading tests: tests/conftest.py)."""
    tel = gpt2_arms_ci.data["telemetry"]
    assert set(tel) == {"fp32:s0", "paper:s0"}
    assert gpt2_arms_ci.arrays["paper:s0__probe__layers"].shape == (3, 1)
    assert gpt2_arms_ci.arrays["paper:s0__probe__dg_norm"].shape == (3, 1, 2)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_split_flag_adds_its_keys_and_changes_nothing_else(toy):
    """The probe with `split` off records what it recorded before (no split key); on, the same training, the same
    records bit for bit, and the split's keys besides, whose two parts add up to the recorded total."""
    cfg, rcs = toy
    rc = rcs[0]                                                    # FP32 attention: fast on the CPU
    off = arms.train_arm(rc, cfg["probe"], progress_every=1)
    on = arms.train_arm(rc, dict(cfg["probe"], split=True), progress_every=1)
    assert "split" not in cfg["probe"] and not any(k in r for r in off["probe"] for k in SPLIT_KEYS)
    assert _same(off["loss"], on["loss"]) and _same(off["grad_norm"], on["grad_norm"])
    H = rc.model.n_head
    for a, b in zip(off["probe"], on["probe"]):
        assert set(b) == set(a) | set(SPLIT_KEYS)
        assert all(_same(a[k], b[k]) for k in a)
        assert all(b[k].shape == (1, H) and np.isfinite(b[k]).all() for k in SPLIT_KEYS)
        np.testing.assert_allclose(b["err_tie_sum"] + b["err_ell_sum"], b["err_v_sum"], rtol=1e-9, atol=1e-9)
        assert (b["err_tie_nz"] <= b["n_conj"]).all() and (b["err_ell_agree"] <= b["err_ell_nz"]).all()


def _tied_rows(B: int, H: int, T: int, D: int, seed: int = 0):
    """q, k, v (B, H, T, D) whose every row from the third on ties keys 0 and 1 at S = 4 (exact in BF16, scale
    D^−½ = ¼ for D = 16), every other key at S − max = −14: r/n_max = (t − 1)·e⁻¹⁴/2, inside the sticky-bit
    window for t ≥ 2. V: BF16, |V| uniform in [½, 2), of one sign per (window, head, feature) over all keys — so
    each tied pair's remainder is along sign(V), where chapter 1's tie bias is positive."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.zeros(B, H, T, D), torch.zeros(B, H, T, D)
    q[..., 0] = 4.0
    k[..., :2, 0], k[..., 2:, 0] = 4.0, -10.0
    sign = torch.where(torch.rand(B, H, 1, D, generator=g) < 0.5, -1.0, 1.0)
    v = (sign * (0.5 + 1.5 * torch.rand(B, H, T, D, generator=g))).to(torch.bfloat16).float()
    return q, k, v


def test_split_on_planted_tied_rows_in_a_paper_layer(toy):
    """A ci-size model's paper-placement layer (the ci arm's spec) with planted tied rows captured: the probe's tie
    part (O − O_∘, the rounding of P̄V) leans along sign(V) by a fifth of a ULP, as chapter 1's theory puts it
    for two ties with a remainder along V (≈ ¼ ULP of the sum where the sum rounds); the ℓ part (O_∘ − O_ref) is
    what BF16 ℓ = n_max, dropping r, does — r/n_max ≤ 2⁻¹⁵ of O here, under 0.01 ULP."""
    from lib.training.chain_probe import _attention_fp64, default_classes
    from lib.training.inject import ulp_bf16
    from lib.training.model import ours_op_attend
    cfg, rcs = toy
    rc = rcs[1]
    assert rc.model.attn.startswith("paper")
    model = build_lm(rc.model)
    attn = model.attn_layers[0]
    H, D = rc.model.n_head, rc.model.n_embd // rc.model.n_head
    q, k, v = _tied_rows(8, H, 64, D)
    o = ours_op_attend(attn.spec, q, k, v)              # the layer's own kernel
    attn.captured = dict(q=q, k=k, v=v, o=o)
    probe = SideProbe(rc, np.zeros(10_000, dtype=np.uint16), every=1, rows=8, top=1, split=True)
    got = probe.measure_split(attn)
    cls = default_classes(q, k, v)
    conj = cls["window"].unsqueeze(-1) & cls["one_signed"]
    n = int(conj.sum())
    assert n == 8 * H * 62 * D                          # every feature of every row from the third
    _, o_ref = _attention_fp64(q, k, v, D ** -0.5)
    total = torch.where(conj, (o.double() - o_ref) * torch.sign(o_ref) / ulp_bf16(o_ref.float()).double(), 0.0)
    np.testing.assert_allclose(got["err_tie_sum"] + got["err_ell_sum"], total.sum((0, 2, 3)).numpy(), rtol=1e-9)
    tie, ell = got["err_tie_sum"].sum() / n, got["err_ell_sum"].sum() / n
    assert 0.1 < tie < 0.3
    assert 0.0 < ell < 0.01                             # along V (|O| grows by r/n_max) but two orders smaller
    # every head's sum leans along V; pair by pair it is about as often against V (a sum that needs no rounding
    # drops its tiny remainder), which is why the reading tests the signs of sums, not of pairs
    assert (got["err_tie_sum"] > 0).all() and (got["err_ell_agree"] == got["err_ell_nz"]).all()
    assert 0.3 < got["err_tie_agree"].sum() / got["err_tie_nz"].sum() < 0.7
    # the same rows through the FA2 placement's numerics (FP32 S, one final rounding): no P̄V rounding to bias
    from lib.fp.numerics import FA2
    from lib.training.chain_probe import o_error_split
    o2 = ours_op_attend(type(attn.spec).parse("fa2"), q, k, v)
    fa2 = o_error_split(q, k, v, o2, FA2, default_classes)
    assert abs(fa2["err_tie_sum"].sum() / n) < 0.05


def _near_ties(B: int, H: int, T: int, D: int = 16):
    """q, k, v (B, H, T, D), D = 16 (scale ¼): every row from the second on has key 0 at S = 4 and key 1 at
    S = 4 + 5/512 (q·k = 16 + 5/128, exact in FP32), every other key at S = −10. BF16 scores tie keys 0 and 1 (q·k
    rounds to 16 at BF16's spacing of ⅛ there); FP32 scores do not (P̄ = e^−5/512 ≈ 0.990 does not round to 1 in
    BF16, whose spacing below 1 is 2⁻⁸). V one-signed (positive) over all keys."""
    q, k = torch.zeros(B, H, T, D), torch.zeros(B, H, T, D)
    q[..., 0], q[..., 1] = 4.0, 1.0
    k[..., 0, 0] = 4.0
    k[..., 1, 0], k[..., 1, 1] = 4.0, 5 / 128
    k[..., 2:, 0] = -10.0
    v = (0.5 + torch.rand(B, H, T, D, generator=torch.Generator().manual_seed(0))).to(torch.bfloat16).float()
    return q, k, v


@pytest.mark.parametrize("text, placement", [
    ("paper/round_block=512", "authors"), ("paper/round_block=512/round_s=false", "fa2"),
    ("paper/round_block=512/round_p=false/round_l=false", "authors"), ("fa2", "fa2"), ("sdpa", "fa2"),
    ("naive", "fa2"), ("authors/tile=512", "authors"), ("dose/paper/c=bias/lam=30", "authors"),
    ("paper+fix", "authors")])
def test_score_placement_follows_where_the_scores_are_rounded(text, placement):
    from lib.studies.gpt2.telemetry import score_placement
    from lib.training.spec import AttnSpec
    assert score_placement(AttnSpec.parse(text)) == placement


def test_own_placement_probes_each_layers_own_ties(toy):
    """On rows where BF16 scores tie and FP32 scores do not: the probe's default ("authors") finds the ties in
    every layer; with placement "own" a layer whose attention keeps S in FP32 finds none there (its ties are the FA2
    placement's), one that rounds S finds them as before; training and records otherwise unchanged."""
    from lib.census import row_classes
    from lib.training.spec import AttnSpec
    cfg, rcs = toy
    q, k, v = _near_ties(2, 2, 8)
    authors = row_classes(q, k, v, placement="authors")
    assert authors["tied"][..., 1:].all() and not row_classes(q, k, v, placement="fa2")["tied"].any()
    rc = rcs[0]
    train = np.zeros(10_000, dtype=np.uint16)
    own = SideProbe(rc, train, placement="own")
    default = SideProbe(rc, train)

    class Layer:                                    # what the probe reads of a layer: its spec
        def __init__(self, text):
            self.spec = AttnSpec.parse(text)
    for text, ties in (("paper/round_block=512/round_s=false", False), ("sdpa", False), ("paper", True)):
        got = own.layer_classes(Layer(text))(q, k, v)
        assert bool(got["tied"][..., 1:].all()) is ties and bool(got["tied"].any()) is ties
        assert torch.equal(default.layer_classes(Layer(text))(q, k, v)["tied"], authors["tied"])
    with pytest.raises(ValueError, match="placement"):
        SideProbe(rc, train, placement="fa2")
    # a whole arm: the same training bits, the same record keys
    on = arms.train_arm(rc, dict(cfg["probe"], placement="own"), progress_every=1)
    off = arms.train_arm(rc, cfg["probe"], progress_every=1)
    assert _same(off["loss"], on["loss"]) and _same(off["grad_norm"], on["grad_norm"])
    assert [set(r) for r in on["probe"]] == [set(r) for r in off["probe"]]
