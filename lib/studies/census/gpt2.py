"""GPT-2 124M on the Python sources installed where it runs: loss, validation loss, tokens seen and the census.

`run(scale, cfg)`: builds the token corpus (`lib.training.token_corpus`: the `.py` files of this interpreter's
standard library and site-packages, deduplicated by content, sorted, GPT-2 BPE) into `cfg["corpus_dir"]` (reused if
its manifest is there), then trains each run of `cfg["runs"]` (one after another: each fills the GPU) with
`lib.training.loop.train_lm`: GPT-2 small's shape (12 layers × 768, 12 heads, vocabulary 50304, T = 1024), the
paper's recipe (AdamW (0.9, 0.95), weight decay 0, clip 1, LR `lr` after a linear warm-up, BF16 autocast), the
census of both placements every `census_every` steps on `census_rows` windows of the step's batch, validation
loss every `eval_every` steps. A run stops at `steps`, `max_tokens`, or its wall budget `max_wall_s` (recorded as
`truncated_at`). The corpus manifest (interpreter, package versions, file and token counts, sha256 of the token
stream) goes into the result, so a changed image reads as a different corpus.

At ci scale the same code builds a corpus from this repository's `lib/` sources and trains a two-layer toy.
"""
from __future__ import annotations

import json
from pathlib import Path

from lib.training import token_corpus
from lib.training.model import GPTConfig
from lib.training.loop import RunConfig, pack_runs, run_many

ROOT = Path(__file__).resolve().parents[3]


def corpus(cfg: dict) -> tuple[str, dict]:
    """(corpus directory, manifest): built unless a manifest is already there."""
    out = Path(cfg["corpus_dir"])
    man = out / "manifest.json"
    if man.exists():
        return str(out), json.loads(man.read_text())
    roots = [str(ROOT / r) for r in cfg["roots"]] if cfg.get("roots") else None
    return str(out), token_corpus.build_token_corpus(roots=roots, out_dir=out, max_files=cfg.get("max_files"))


def run_configs(cfg: dict, corpus_dir: str) -> list[RunConfig]:
    model = dict(cfg["model"])
    out = []
    for spec in cfg["runs"]:
        m = GPTConfig(**(model | {k: v for k, v in spec.items() if k in ("attn", "pos", "qk_norm", "qk_gain")}))
        out.append(RunConfig(
            model=m, data="tokens", corpus_dir=corpus_dir, steps=cfg["steps"], batch_size=cfg["batch_size"],
            lr=spec.get("lr", cfg["lr"]), warmup=cfg["warmup"], seed=spec["seed"], data_seed=spec["seed"],
            compile=spec.get("compile", cfg.get("compile", False)), census_every=cfg["census_every"],
            census_rows=cfg["census_rows"], eval_every=cfg["eval_every"], eval_batches=cfg["eval_batches"],
            max_wall_s=cfg.get("max_wall_s", 0.0), max_tokens=cfg.get("max_tokens", 0),
            ckpt_path=spec.get("ckpt_path", ""), ckpt_every_s=cfg.get("ckpt_every_s", 0.0), label=spec["label"]))
    return out


def run(scale: str, cfg: dict) -> dict:
    corpus_dir, manifest = corpus(cfg)
    cfgs = run_configs(cfg, corpus_dir)
    res = run_many(cfgs, workers=1)
    runs, arrays = pack_runs(res, [c.label for c in cfgs])
    man = {k: v for k, v in manifest.items() if k != "distributions"}
    man["n_distributions"] = len(manifest.get("distributions", {}))
    return dict(data=dict(manifest=man, distributions=manifest.get("distributions", {}), runs=runs),
                arrays=arrays, seeds=[c.seed for c in cfgs])
