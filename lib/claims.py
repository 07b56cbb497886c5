"""The paper's claims and their replication status, computed from committed/produced results.

An experiment reports on a claim by putting, in its result data,
    data["claims"][CLAIM_ID] = {"status": "reproduced" | "not reproduced" | "partly", "evidence": "<one line>"}
The intro's table is built from these; a claim no result has reported on is "not yet tested".
Full-scale (GPU) verdicts take precedence over ci-scale ones.
"""
from __future__ import annotations

from dataclasses import dataclass

from lib import results as _results


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    chapter: str


CLAIMS = [
    Claim("tie_bias", "Repeated row maxima (P̄ = 1 entries), same-sign V and concentrated attention make the BF16 "
          "rounding of P̄V biased, with the sign of V.", "chapters/01-bf16-rounding"),
    Claim("tie_bias_hw", "The same bias arises in tensor-core (hardware) accumulation, not only in software emulation.",
          "chapters/01-bf16-rounding"),
    Claim("fix_removes_bias", "The β-shifted max removes the bias (no P̄ entry equals 1).", "chapters/01-bf16-rounding"),
    Claim("paper_placement", "The authors' PyTorch flash attention under BF16 autocast rounds S, P̄, ℓ, the per-tile P̄V, "
          "the O accumulator, LSE and δ to BF16.", "chapters/02-flash-attention-kernel"),
    Claim("fa_deviation", "Flash attention deviates ~10× more than baseline attention from an FP64 reference at BF16, "
          "growing with sequence length and shrinking with tile size (Golden et al.).", "chapters/03-numeric-deviation"),
    Claim("delta_bias", "The biased O enters the backward only via δ = rowsum(dO∘O); Δδ > 0 systematically.",
          "chapters/04-biased-output"),
    Claim("low_rank", "The dW_Q error is a sum of similar rank-1 terms that accumulates along one direction.",
          "chapters/05-low-rank-accumulation"),
    Claim("explosion", "Training with the paper's BF16 flash-attention numerics explodes while contrast arms are stable.",
          "chapters/06-loss-explosion"),
    Claim("fp32_o_stabilises", "Computing O in FP32 (everything else BF16) stabilises training.", "chapters/06-loss-explosion"),
    Claim("fix_stabilises", "The β fix prevents the explosion on the same seeds and data order.", "chapters/07-the-fix"),
]


def status_table(root=None) -> list[dict]:
    """One row per claim: id, claim, chapter, status, evidence, source (result label)."""
    verdicts: dict[str, tuple[int, dict, str]] = {}
    try:
        all_res = _results.all_results(root)
    except FileNotFoundError:
        all_res = []
    for r in all_res:
        rank = 2 if r.scale == "full" else 1
        for cid, v in (r.data.get("claims") or {}).items():
            if cid not in verdicts or verdicts[cid][0] < rank:
                verdicts[cid] = (rank, v, f"{r.name} ({r.label})" + (" — STALE" if r.stale else ""))
    rows = []
    for c in CLAIMS:
        rank, v, src = verdicts.get(c.id, (0, {}, ""))
        rows.append({"id": c.id, "claim": c.text, "chapter": c.chapter,
                     "status": v.get("status", "not yet tested"), "evidence": v.get("evidence", ""), "source": src})
    return rows
