"""What a GPT-2 arm measures beside its training step, without touching the step: the chain probe on the layers
with the largest conjunction, and the wall time of every 50 steps (what the telemetry costs).

`SideProbe` is a `lib.training.loop.train_lm` step hook. Every `every` steps (and at the last step), after the
training step's backward and before the optimizer step, it runs its own eager forward and backward of the model on
the first `rows` windows of that step's batch (BF16 autocast on CUDA, as training), with capture on in every layer:

* its backward runs as `torch.autograd.grad` to the token embedding, so no parameter's gradient changes: the step
  the optimizer takes is the one the compiled model computed — a compiled arm stays compiled, and its trajectory is
  the one it would have without the probe;
* the probe's loss is scaled by rows / batch, so the dO it captures is the training loss's dO on those rows;
* the layers measured are the `top` layers with the most conjunction entries on those rows (tied rows in the
  rounding window whose V is one-signed over the tied keys, in the authors' placement: `lib.census.row_classes`;
  with `placement` "own" (registry: ``probe.placement = "own"``), in the placement of each layer's own attention,
  `own_classes`), chosen afresh at every event and recorded (`layers`, and every layer's
  count in `conj_all`);
* on each chosen layer, `lib.training.chain_probe.ChainProbe.measure`: the O error along sign(V) on the
  conjunction, Δδ on all, tied and window rows, the dW_Q error's norm, stable rank, alignment with the same layer's
  previous event (NaN when that layer was not measured at the previous event) and its push on ‖W_Q,h‖₂;
* with `split` (registry: ``probe.split = true``; off by default, and then the records are those without it), on
  each chosen layer also `lib.training.chain_probe.o_error_split`: that O error split into the rounding of P̄V
  (the tie part) and the placement's P̄ and ℓ (the ℓ part), each as a sum in ULP of O and counts of pairs along
  sign(V) and ≠ 0 (keys `SPLIT_KEYS`); NaN on layers no placement models (`split_numerics`).

`Clock` prints one progress line every `every` steps (what the campaign reads) and keeps (step, seconds) pairs:
with the loss flushed every 50 steps the windows are synchronised, so a window holding a census, a probe or an
evaluation costs what it costs over a clean window (`telemetry_cost`).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lib.training import data as data_mod
from lib.training.chain_probe import SPLIT_KEYS, ChainProbe, o_error_split, split_numerics

TARGET_SHARE = 0.05      # what the census and the probe may cost, as a share of training time (the study's target)
PROBE_PLACEMENTS = ("authors", "own")   # whose ties the side probe measures on (`SideProbe`)


def score_placement(spec) -> str:
    """Where a layer's attention (`spec`, an AttnSpec) forms its scores S, as a census placement: "authors" where S
    is rounded to BF16 before the softmax (our kernel under a profile with `round_s`, the authors' code, the dose
    backend on either), "fa2" where S stays FP32 (PyTorch's SDPA, FP32 attention, our kernel without `round_s`).
    Its ties are the census's tied rows of that placement: equal BF16 scores, or FP32 scores whose P̄ rounds to 1."""
    from lib.fp.numerics import get_profile
    backend = getattr(spec, "backend", None)
    if backend == "dose":
        spec = spec.opts.placement
        backend = spec.backend
    if backend == "authors":
        return "authors"
    if backend == "ours":
        return "authors" if get_profile(spec.numerics).round_s else "fa2"
    return "fa2"


def own_classes(spec):
    """`classes(q, k, v)` of the census placement the layer's own attention has (`score_placement`): its own ties."""
    from lib.census import row_classes
    placement = score_placement(spec)
    return lambda q, k, v: row_classes(q, k, v, causal=True, placement=placement)


class SideProbe(ChainProbe):
    """The chain probe on its own forward and backward (module docstring). `rc`: the arm's RunConfig; `train`:
    its training tokens (as `train_lm` loads them); `top`: layers measured per event; `split`: record the O error's
    split too (module docstring). `records`: one dict per event: "step", "layers" (top,), "conj_all" (L,), and
    (top, H) arrays of `ChainProbe`'s keys (and of `SPLIT_KEYS` with `split`); `seconds`: the wall time of each
    event (synchronised on CUDA). `placement`: whose ties the probe's rows are — "authors" (the default: rows where
    BF16 scores tie, `chain_probe.default_classes`, whatever the arm's attention) or "own" (each layer's own
    attention's ties, `own_classes`: the same where the arm rounds S to BF16; where it keeps S in FP32,
    the rows whose P̄ rounds to 1 on several keys, which BF16-score ties miss)."""

    def __init__(self, rc, train: np.ndarray, every: int = 200, rows: int = 4, top: int = 3, classes=None,
                 split: bool = False, placement: str = "authors"):
        super().__init__(every=every, layers=None, rows=rows, steps=(rc.steps - 1,), classes=classes)
        if placement not in PROBE_PLACEMENTS:
            raise ValueError(f"probe placement must be one of {PROBE_PLACEMENTS}, got {placement!r}")
        if placement == "own" and classes is not None:
            raise ValueError("probe placement 'own' chooses each layer's classes; do not pass classes too")
        self.placement = placement
        self.rc, self.train, self.top = rc, train, int(top)
        self.starts = data_mod.batch_starts(len(train), rc.seq_len - rc.n_bos, rc.batch_size, rc.steps,
                                            rc.data_seed)
        self.seconds: list[float] = []
        self.split = bool(split)

    def before_forward(self, step: int, model) -> None:
        pass                                  # the training forward is never touched

    def after_backward(self, step: int, model, optimizer) -> None:
        if not self.due(step):
            return
        from lib.training.loop import get_batch
        dev = next(model.parameters()).device
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        x, y = get_batch(self.train, self.starts[step][:self.rows], self.rc, dev)
        layers = model.attn_layers
        for attn in layers:
            attn.capture = True
        try:
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                _, loss = model(x, y)
            # Gradients only as far as the token embedding: every layer's dO is captured on the way, and no parameter's
            # .grad (the training step's, or a data-parallel reducer's hooks) is touched.
            torch.autograd.grad(loss * (self.rows / self.rc.batch_size), [model.transformer.wte.weight])
            counts = []
            classes = [self.layer_classes(attn) for attn in layers]
            with torch.no_grad():
                for attn, layer_cls in zip(layers, classes):
                    c = attn.captured
                    cls = layer_cls(c["q"], c["k"], c["v"])
                    counts.append(int((cls["window"].unsqueeze(-1) & cls["one_signed"]).sum()))
            # Ties broken by the lower layer: the choice is deterministic given the counts.
            chosen = sorted(sorted(range(len(layers)), key=lambda l: (-counts[l], l))[:self.top])
            for l in list(self._prev):
                if l not in chosen:
                    del self._prev[l]          # alignment is with the previous event only
            rec = {}
            for l in chosen:
                for key, val in self.measure(l, layers[l], optimizer, classes[l]).items():
                    rec.setdefault(key, []).append(val)
                if self.split:
                    for key, val in self.measure_split(layers[l], classes[l]).items():
                        rec.setdefault(key, []).append(val)
        finally:
            for attn in layers:
                attn.capture = False
                attn.captured = {}
        self.records.append(dict(step=int(step), layers=np.asarray(chosen, dtype=np.int64),
                                 conj_all=np.asarray(counts, dtype=np.int64),
                                 **{k: np.stack(v) for k, v in rec.items()}))
        sync()
        self.seconds.append(time.perf_counter() - t0)


    def layer_classes(self, attn):
        """The row classes the probe uses on one layer (`placement`)."""
        return own_classes(attn.spec) if self.placement == "own" else self.classes

    def measure(self, layer: int, attn, optimizer, classes=None) -> dict:
        """`ChainProbe.measure` with this layer's row classes (`classes`; default the probe's). That method reads
        them from the probe, and the proxy loop's probe is left as it is, so they are lent to it for the call."""
        if classes is None:
            return super().measure(layer, attn, optimizer)
        keep, self.classes = self.classes, classes
        try:
            return super().measure(layer, attn, optimizer)
        finally:
            self.classes = keep

    def measure_split(self, attn, classes=None) -> dict:
        """`o_error_split` on one layer's capture (its first `rows` windows), under the placement of its spec; NaN
        per head where no placement models it. `classes`: the layer's row classes (default the probe's)."""
        cap = attn.captured
        q, k, v, o = (cap[n][:self.rows] for n in ("q", "k", "v", "o"))
        nm = split_numerics(attn.spec)
        if nm is None:
            return {key: np.full(q.shape[1], np.nan) for key in SPLIT_KEYS}
        return o_error_split(q, k, v, o, nm, classes or self.classes)


def probe_arrays(records: list[dict]) -> dict:
    """`SideProbe.records` -> {"step": (E,), "layers": (E, top), "conj_all": (E, L), key: (E, top, H)} (and the
    split's keys, `SPLIT_KEYS`, when the probe recorded them)."""
    from lib.training.chain_probe import records_arrays
    out = records_arrays(records)
    for key in ("layers", "conj_all") + SPLIT_KEYS:
        if records and key in records[0]:
            out[key] = np.stack([r[key] for r in records])
    return out


class Clock:
    """A step hook printing "[label] step N t S s grads finite|NOT FINITE" every `every` steps (one device sync per
    line) and keeping `times`: [(steps done, seconds since the hook was made)]."""

    def __init__(self, label: str, every: int = 50):
        self.label, self.every, self.t0 = label, every, time.perf_counter()
        self.times: list[tuple[int, float]] = []

    def before_forward(self, step, model):
        pass

    def after_backward(self, step, model, opt):
        if (step + 1) % self.every == 0:
            finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
            t = time.perf_counter() - self.t0
            self.times.append((step + 1, round(t, 3)))
            print(f"[{self.label}] step {step + 1} t {t:.0f} s grads {'finite' if finite else 'NOT FINITE'}",
                  flush=True)


class Hooks:
    """Several step hooks as one, called in order."""

    def __init__(self, *hooks):
        self.hooks = [h for h in hooks if h is not None]

    def before_forward(self, step, model):
        for h in self.hooks:
            h.before_forward(step, model)

    def after_backward(self, step, model, opt):
        for h in self.hooks:
            h.after_backward(step, model, opt)


def telemetry_cost(times, events, every: int = 50) -> dict:
    """What the telemetry costs, from `Clock.times` [(steps done, seconds)] and the steps at which something ran
    beside training (`events`: census, probe or evaluation steps, 0-based). A window is `every` steps between two
    progress lines (the first, which compiles, has no line before it); windows across a gap or a restart are left
    out. Returns
    {"clean_s": median seconds of a window without events, "extra_s": summed excess of windows with events over
    it, "train_s": clean_s × windows counted, "share": extra_s / train_s}."""
    ev = np.asarray(sorted(events), dtype=np.int64)
    clean, busy = [], []
    for (s0, t0), (s1, t1) in zip(times, times[1:]):
        if s1 - s0 != every or t1 <= t0:     # a gap, or a resumed process's clock restarting
            continue
        hit = bool(((ev >= s0) & (ev < s1)).any())
        (busy if hit else clean).append(t1 - t0)
    if not clean:
        return dict(clean_s=float("nan"), extra_s=float("nan"), train_s=float("nan"), share=float("nan"))
    c = float(np.median(clean))
    extra = float(sum(max(0.0, b - c) for b in busy))
    train = c * (len(clean) + len(busy))
    return dict(clean_s=c, extra_s=extra, train_s=train, share=extra / train)
