"""Benchmark (a script, not a test): seconds of delta_capture's work after training, for one seed, on synthetic
captures of the full-scale shapes (4 rows, 6 layers, 6 heads, T = 512, D = 64, C = 384; BF16 q, k, v, dO, dq, dk,
X; O the BF16-rounded FP32 attention; the full registry entry's n_shuffle, n_flip, replay_every, replay_rows and
variants).

    python benchmarks/bench_delta_replay.py [--caps 30] [--device cpu|cuda] [--threads N] [--profile]

runs `lib.studies.delta.delta_capture.replay` (capture statistics of every capture, `run_summary`, the variant
replays) and `choose_keep` + `pack` as `seed_run` does after training, and prints the time of each stage; its
progress lines show where it is. --threads sets torch's threads (default: the share of one of 3 workers,
`worker_threads(3)`); start it with OPENBLAS_NUM_THREADS=1 to match a worker (`worker_env`). --profile prints
cProfile's top functions. Writes nothing.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

B, L, H, T, D, C = 4, 6, 6, 512, 64, 384


def synth(step: int, seed: int = 0):
    """A full-shape `Capture` of random data, encoded as the hook encodes a BF16-autocast step."""
    from lib.training.capture import Capture, encode
    g = torch.Generator().manual_seed(seed * 7919 + step)
    r = lambda *s, sc=1.0: torch.randn(*s, generator=g) * sc  # noqa: E731
    arrays, enc = {}, {}
    for l in range(L):
        q, k, v = (r(B, H, T, D, sc=1.5).to(torch.bfloat16) for _ in range(3))
        o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        t = dict(q=q, k=k, v=v, o=o.to(torch.bfloat16), do=r(B, H, T, D, sc=1e-4).to(torch.bfloat16),
                 dq=r(B, H, T, D, sc=1e-4).to(torch.bfloat16), dk=r(B, H, T, D, sc=1e-4).to(torch.bfloat16),
                 x=r(B, T, C).to(torch.bfloat16))
        for n, a in t.items():
            arrays[f"L{l}__{n}"], enc[n] = encode(a)
        for tag in ("wq", "wk"):
            trip = (torch.nn.functional.normalize(r(H, D), dim=-1), 1 + r(H).abs(),
                    torch.nn.functional.normalize(r(H, C), dim=-1))
            for n, a in zip(("u", "s", "v"), trip):
                arrays[f"L{l}__{tag}_{n}"], enc[f"{tag}_{n}"] = encode(a)
        for n in ("adam_q", "adam_k"):
            arrays[f"L{l}__{n}"], enc[n] = encode(r(H, D, C).abs() * 1e-4 + 1e-8, round_to_bf16=True)
    meta = dict(step=step, lr=5e-4, rows=list(range(B)), layers=list(range(L)), heads=list(range(H)), n_head=H,
                head_dim=D, n_embd=C, seq_len=T, scale=1 / np.sqrt(D), attn=["paper/round_block=512"] * L, enc=enc,
                x_source="model", x_rounding="bf16", adam=dict(beta1=0.9, beta2=0.95, eps=1e-8))
    return Capture(meta, arrays)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--caps", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    from lib.book import registry
    from lib.studies.delta import delta_capture as dc
    from lib.training.capture import pack
    torch.set_num_threads(a.threads or dc.worker_threads(3))
    cfg = dict(registry.resolve("delta_capture", "full"), replay_device=a.device)
    t0 = time.perf_counter()
    caps = [synth(cfg["capture_every"] * i) for i in range(a.caps)]
    print(f"{a.caps} synthetic captures in {time.perf_counter() - t0:.1f} s; torch threads "
          f"{torch.get_num_threads()}, device {a.device}", flush=True)
    prof = cProfile.Profile() if a.profile else None
    if prof:
        prof.enable()
    t0 = time.perf_counter()
    rep = dc.replay(caps, cfg, 0, np.ones(cfg["steps"]), 1.0)
    t1 = time.perf_counter()
    kept = dc.choose_keep(caps, cfg["keep_steps"], int(cfg["keep_rows"]), cfg["keep_heads"], cfg["keep_layers"])
    pack(kept, prefix="keep")
    t2 = time.perf_counter()
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    print(f"capture stats + run_summary {rep['replay_s']:.1f} s; variant replays {rep['variant_s']:.1f} s; "
          f"choose_keep + pack {t2 - t1:.2f} s; total {t2 - t0:.1f} s")


if __name__ == "__main__":
    main()
