"""Weight drift between training runs (Golden et al.'s weight-difference study): metrics, recording, the claim.

Metrics, per weight matrix of two runs a and b at the same step (torch, on the weights' device):
* ``max_abs`` — max |W_a − W_b| over the entries (aligned: the same entry of both matrices).
* ``w1`` — the 1-D Wasserstein-1 distance between the empirical distributions of the two matrices' entries,
  W1 = ∫ |F_a(x) − F_b(x)| dx. For two samples of equal size n it is exactly mean_i |a_(i) − b_(i)| over the sorted
  values (the optimal coupling in one dimension pairs order statistics); `wasserstein_1d` computes that from
  sorted FP32 values with FP64 differences and sum, and the general CDF form for unequal sizes. It is
  permutation-invariant: it compares the *distributions* of the weights, not aligned weights, so two runs from
  different seeds (same distribution, different entries) are close in W1 and far apart in max |ΔW|.
  Golden et al. do not define their Wasserstein distance in the text we could read; this is the standard 1-D
  W1 of the flattened entries (`scipy.stats.wasserstein_distance`), which the tests check against.
* ``scale`` — mean |W| of a run's matrix, the unit of the relative distances W1/mean|W|.

Matrices (`weight_matrices`): for every block i the attention projections W_Q, W_K, W_V (the three row blocks of
`c_attn.weight`), the attention output projection, the MLP's two matrices, and the token (= tied output) and
position embeddings. Layer indices are 0-based: the paper's "layer 2" is index 1.

`DriftRecorder` computes these for a set of run pairs at each recording step of `lib.training.lockstep`.

The claim `weight_drift_bounded` (Golden et al.: flash attention adds 2–5× less weight drift than low-precision
training) — rule, fixed before any GPU run: at the horizon (the last recorded step at which every run of the two
pairs is finite), per weight matrix r = W1(low-precision pair) / W1(flash pair). "reproduced" if the median r over
all matrices is ≥ BOUND_FACTOR = 2 and no matrix has r < 1; "partly" if the median r is ≥ 1 but that is not met;
"not reproduced" if the median r < 1 (flash drifts more than low-precision training on a typical matrix).
"""
from __future__ import annotations

import numpy as np
import torch

BOUND_FACTOR = 2.0
MATRIX_KINDS = ("w_q", "w_k", "w_v", "attn_proj", "fc", "mlp_proj")


# ------------------------------------------------------------------------------------------------------ metrics
def wasserstein_1d(a: torch.Tensor, b: torch.Tensor) -> float:
    """W1 between the empirical distributions of the entries of a and b (any shapes, any sizes), in their units.
    Exact from the sorted values; FP64 differences and sums. Raises on empty or non-finite input."""
    a = a.detach().flatten()
    b = b.detach().flatten()
    if a.numel() == 0 or b.numel() == 0:
        raise ValueError("wasserstein_1d needs two non-empty samples")
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        raise ValueError("wasserstein_1d needs finite samples")
    sa, sb = torch.sort(a)[0].double(), torch.sort(b)[0].double()
    if sa.numel() == sb.numel():
        return float((sa - sb).abs().mean())
    xs = torch.sort(torch.cat([sa, sb]))[0]
    fa = torch.searchsorted(sa, xs[:-1], right=True).double() / sa.numel()
    fb = torch.searchsorted(sb, xs[:-1], right=True).double() / sb.numel()
    return float(((fa - fb).abs() * torch.diff(xs)).sum())


def w1_sorted(sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """W1 of two equal-size samples given sorted (1-D): mean |sa − sb| in FP64, as a 0-d tensor (no sync)."""
    return (sa.double() - sb.double()).abs().mean()


def weight_matrices(model) -> dict:
    """name -> weight matrix (a view) of a `lib.training.model.GPT`: "h<i>.<kind>" for kind in MATRIX_KINDS, "wte",
    "wpe"."""
    C = model.config.n_embd
    out = {}
    for i, blk in enumerate(model.transformer.h):
        w = blk.attn.c_attn.weight
        out[f"h{i}.w_q"], out[f"h{i}.w_k"], out[f"h{i}.w_v"] = w[:C], w[C:2 * C], w[2 * C:]
        out[f"h{i}.attn_proj"] = blk.attn.c_proj.weight
        out[f"h{i}.fc"] = blk.mlp.c_fc.weight
        out[f"h{i}.mlp_proj"] = blk.mlp.c_proj.weight
    out["wte"] = model.transformer.wte.weight
    out["wpe"] = model.transformer.wpe.weight
    return out


class DriftRecorder:
    """Collects drift metrics at recording steps. pairs: {pair name: (arm a, arm b)}.

    `__call__(step, models)` (the `on_record` hook of `train_lockstep`): sorts every matrix of every arm once,
    then per pair and matrix stores max |W_a − W_b| and W1, and per arm and matrix mean |W|; NaN where a matrix is
    not finite. `arrays()` returns {"steps" (R,), "max_abs" (P, R, M), "w1" (P, R, M), "scale" (A, R, M)} as numpy,
    with the orders of `pair_names`, `arm_names`, `matrix_names`."""

    def __init__(self, pairs: dict):
        if not pairs:
            raise ValueError("pairs must name at least one (arm a, arm b) pair")
        self.pairs = {k: tuple(v) for k, v in pairs.items()}
        for k, v in self.pairs.items():
            if len(v) != 2 or v[0] == v[1]:
                raise ValueError(f"pair {k!r} must name two different arms, got {v!r}")
        self.pair_names = list(self.pairs)
        self.arm_names = sorted({a for p in self.pairs.values() for a in p})
        self.matrix_names = None
        self.steps, self._max, self._w1, self._scale = [], [], [], []

    def __call__(self, step: int, models: dict) -> None:
        missing = [a for a in self.arm_names if a not in models]
        if missing:
            raise ValueError(f"pairs name arms that are not trained: {missing}")
        mats = {a: weight_matrices(models[a]) for a in self.arm_names}
        if self.matrix_names is None:
            self.matrix_names = list(mats[self.arm_names[0]])
        nan = torch.tensor(float("nan"), dtype=torch.float64)
        flat = {a: {m: mats[a][m].detach().float().flatten() for m in self.matrix_names} for a in self.arm_names}
        finite = {a: {m: torch.isfinite(flat[a][m]).all() for m in self.matrix_names} for a in self.arm_names}
        srt = {a: {m: torch.sort(flat[a][m])[0] for m in self.matrix_names} for a in self.arm_names}
        row_max, row_w1 = [], []
        for pa, pb in self.pairs.values():
            mx, w1 = [], []
            for m in self.matrix_names:
                ok = finite[pa][m] & finite[pb][m]
                mx.append(torch.where(ok, (flat[pa][m] - flat[pb][m]).abs().max().double(), nan.to(ok.device)))
                w1.append(torch.where(ok, w1_sorted(srt[pa][m], srt[pb][m]), nan.to(ok.device)))
            row_max.append(torch.stack(mx))
            row_w1.append(torch.stack(w1))
        sc = [torch.stack([torch.where(finite[a][m], flat[a][m].abs().double().mean(), nan.to(flat[a][m].device))
                           for m in self.matrix_names]) for a in self.arm_names]
        self.steps.append(int(step))
        self._max.append(torch.stack(row_max).cpu())
        self._w1.append(torch.stack(row_w1).cpu())
        self._scale.append(torch.stack(sc).cpu())

    def arrays(self) -> dict:
        if not self.steps:
            raise RuntimeError("nothing recorded")
        return {"steps": np.asarray(self.steps, dtype=np.int64),
                "max_abs": torch.stack(self._max, 1).numpy(), "w1": torch.stack(self._w1, 1).numpy(),
                "scale": torch.stack(self._scale, 1).numpy()}


# ------------------------------------------------------------------------------------------------------ reading
def _idx(names, name, what):
    if name not in names:
        raise KeyError(f"no {what} {name!r}; have {names}")
    return names.index(name)


def horizon(data: dict, arrays: dict, pairs) -> int:
    """Index of the last record at which every matrix of every listed pair is finite (−1 if none)."""
    ok = np.ones(len(arrays["steps"]), bool)
    for p in pairs:
        i = _idx(data["pairs"], p, "pair")
        ok &= np.isfinite(arrays["w1"][i]).all(-1)
    idx = np.flatnonzero(ok)
    return int(idx[-1]) if idx.size else -1


def series(data: dict, arrays: dict, pair: str, matrix: str, metric: str = "w1") -> np.ndarray:
    """metric ("w1" | "max_abs" | "rel_w1" = W1 / mean|W| of the pair's second arm) of one matrix over the records."""
    p = _idx(data["pairs"], pair, "pair")
    m = _idx(data["matrices"], matrix, "matrix")
    if metric == "rel_w1":
        b = _idx(data["arms"], data["pair_arms"][pair][1], "arm")
        return arrays["w1"][p, :, m] / arrays["scale"][b, :, m]
    return arrays[metric][p, :, m]


def ratios(data: dict, arrays: dict, num_pair: str, den_pair: str, metric: str = "w1", at: int | None = None):
    """metric(num_pair) / metric(den_pair) per matrix at record `at` (default: the two pairs' horizon).
    Returns (ratios (M,) numpy, record index)."""
    at = horizon(data, arrays, (num_pair, den_pair)) if at is None else at
    if at < 0:
        return np.full(len(data["matrices"]), np.nan), at
    a = arrays[metric][_idx(data["pairs"], num_pair, "pair"), at]
    b = arrays[metric][_idx(data["pairs"], den_pair, "pair"), at]
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b, at


def layer_table(data: dict, arrays: dict, num_pair: str, den_pair: str, metric: str = "w1"):
    """(n_layer, len(MATRIX_KINDS)) array of ratios at the horizon, rows = layers, cols = MATRIX_KINDS."""
    r, _ = ratios(data, arrays, num_pair, den_pair, metric)
    names = data["matrices"]
    layers = sorted({int(n.split(".")[0][1:]) for n in names if n.startswith("h")})
    out = np.full((len(layers), len(MATRIX_KINDS)), np.nan)
    for i in layers:
        for j, kind in enumerate(MATRIX_KINDS):
            out[i, j] = r[names.index(f"h{i}.{kind}")]
    return out


def bound_verdict(r: np.ndarray) -> str:
    """The claim's rule on per-matrix ratios r = W1(low precision) / W1(flash) (module docstring)."""
    r = np.asarray(r, dtype=float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return "not yet tested"
    med = float(np.median(r))
    if med >= BOUND_FACTOR and float(r.min()) >= 1.0:
        return "reproduced"
    if med >= 1.0:
        return "partly"
    return "not reproduced"


def claim_weight_drift_bounded(data: dict, arrays: dict) -> dict:
    """{"status", "evidence"} for `weight_drift_bounded` from a `weight_drift` result (data, arrays)."""
    st = data["claim_setup"]
    flash, low, seed = st["flash_pair"], st["lowprec_pair"], st["seed_pair"]
    r, at = ratios(data, arrays, low, flash)
    status = bound_verdict(r)
    if at < 0:
        return {"status": status, "evidence": "no record at which both pairs are finite"}
    rs, _ = ratios(data, arrays, seed, flash, at=at)
    step = int(arrays["steps"][at])
    fr = np.asarray(r)[np.isfinite(r)]
    focus = st["focus_matrix"]
    fi = data["matrices"].index(focus)
    extra = []
    for pair in st.get("placement_pairs", []):
        if pair in data["pairs"]:
            rp, _ = ratios(data, arrays, low, pair, at=at)
            extra.append(f"{pair}: r = {rp[fi]:.2g} at {focus}")
    ev = (f"{data.get('device', '?')}, {st['regime']}, horizon step {step} of {st['steps']}, seeds "
          f"{st['seeds']}: W1({low}) / W1({flash}) per matrix: median {np.median(fr):.2g}, range "
          f"{fr.min():.2g}–{fr.max():.2g}, ≥ {BOUND_FACTOR:g} in {int((fr >= BOUND_FACTOR).sum())} of {fr.size}; "
          f"{focus}: {r[fi]:.2g}; W1({seed}) / W1({flash}): median {np.nanmedian(rs):.2g}"
          + ("; " + "; ".join(extra) if extra else ""))
    return {"status": status, "evidence": ev}


def placement_check(data: dict, arrays: dict) -> dict:
    """Does the paper placement's drift at the focus matrix break the low-precision bound where fa2's does not?
    {pair: {"r": W1(low precision)/W1(pair) at the focus matrix, "breaks": r < 1, "step": horizon step}}."""
    st = data["claim_setup"]
    low = st["lowprec_pair"]
    fi = data["matrices"].index(st["focus_matrix"])
    out = {}
    for pair in [st["flash_pair"], *st.get("placement_pairs", [])]:
        if pair not in data["pairs"]:
            continue
        r, at = ratios(data, arrays, low, pair)
        out[pair] = {"r": float(r[fi]), "breaks": bool(r[fi] < 1.0),
                     "step": int(arrays["steps"][at]) if at >= 0 else None}
    return out



def key_numbers(data: dict, arrays: dict) -> dict:
    """The numbers chapter 3 quotes from one `weight_drift` result."""
    st = data["claim_setup"]
    low, flash, seed = st["lowprec_pair"], st["flash_pair"], st["seed_pair"]
    r, at = ratios(data, arrays, low, flash)
    fr = r[np.isfinite(r)]
    fi = data["matrices"].index(st["focus_matrix"])
    out = {"horizon": int(arrays["steps"][at]) if at >= 0 else None, "steps": st["steps"],
           "median": float(np.median(fr)) if fr.size else float("nan"),
           "min": float(fr.min()) if fr.size else float("nan"), "max": float(fr.max()) if fr.size else float("nan"),
           "n_ge_bound": int((fr >= BOUND_FACTOR).sum()), "n": int(fr.size), "focus": st["focus_matrix"],
           "focus_ratio": float(r[fi])}
    rs, _ = ratios(data, arrays, seed, flash, at=at)
    out["seed_over_flash"] = float(np.nanmedian(rs))
    rm, _ = ratios(data, arrays, seed, flash, metric="max_abs", at=at)
    out["seed_over_flash_max"] = float(np.nanmedian(rm))
    rl, _ = ratios(data, arrays, low, flash, metric="max_abs", at=at)
    out["low_over_flash_max"] = float(np.nanmedian(rl))
    out["placement"] = placement_check(data, arrays)
    for pair in st.get("placement_pairs", []):
        if pair in data["pairs"]:
            rp, _ = ratios(data, arrays, low, pair, at=at)
            out[f"median:{pair}"] = float(np.nanmedian(rp))
    return out


# Reader-facing words for the arms and pairs of `weight_drift` (its names are keys in the result).
ARM_WORDS = {"flash": "SDPA flash", "naive": "FP32 attention", "naive_fp32": "FP32 attention, FP32 training",
             "naive_seed1": "FP32 attention, seed 1", "fa2": "our kernel, FA2 numerics",
             "paper": "our kernel, paper placement"}
PAIR_WORDS = {"flash_vs_naive": "flash vs FP32 attention", "fa2_vs_naive": "FA2 numerics vs FP32 attention",
              "paper_vs_naive": "paper placement vs FP32 attention", "paper_vs_fa2": "paper placement vs FA2 numerics",
              "seed": "seed vs seed", "bf16_vs_fp32": "BF16 vs FP32 training"}


def in_words(text: str) -> str:
    """`text` (a claim's evidence, say) with `weight_drift`'s pair names replaced by `PAIR_WORDS` (longest names
    first, whole words only; arm names and the pair "seed", which are common words, only where they are a W1
    argument: "W1(seed)")."""
    import re
    words = {k: v for k, v in PAIR_WORDS.items() if "_" in k}
    pat = re.compile(r"\b(" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")\b")
    text = re.sub(r"W1\((\w+)\)", lambda m: f"W1({PAIR_WORDS.get(m.group(1), m.group(1))})", text)
    return pat.sub(lambda m: words[m.group(1)], text)

