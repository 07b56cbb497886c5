"""Lead time: does the monitor warn before a training run fails, and does it warn in runs that do not fail?

The warning rule of `lib.monitor.AttentionMonitor` (its own method, with its default `Thresholds`) replayed on a
run's recorded census instead of live: the training loop's census (`lib.training.loop.CensusObserver`) records, per
event, layer and head, the conjunction rate and the largest logit in each placement, which is all the rule reads
(σ₁ of W_Q, also recorded, feeds no warning).

* `replay(steps, conj, logit, placement, every)`: the warnings the monitor would have raised, event by event, in
  every layer: [(step, layer, kind, message)], kind "conjunction" (a head's rate above the threshold), "rise" (a
  head's rate risen above `rise` × its first event's) or "logit" (the layer's largest logit above the threshold:
  the plain logit warning, which needs no census);
* `lead_times(first, failure)`: per kind, the failure step minus the first warning's step (negative: the first
  warning came after the failure; None: it never fired, or the run did not fail) and whether it was a false alarm
  (it fired in a run that did not fail);
* `run_leads(arrays, label, failure, placement, every)`: the two on one run of a result's arrays, naming what the
  record lacks and replaying only what it holds;
* `arm_leads(arrays, outcomes, cfg)`, `lead_numbers(leads, words, cfg)`, `comparison_numbers(...)`: every run of
  a comparison of arms (the GPT-2 arms: their failures from `lib.studies.gpt2.reading.outcomes`), each watched in
  its own kernel's placement, and the chapter's glue and table.

What differs from a live monitor: the recorded census reads `cfg["census_rows"]` sequences of the step's batch in an
extra eager forward, where the monitor by default reads the first `batch_rows` of the training forward itself; the
replay is the monitor with `every = census_every` and that many rows. Census events off the monitor's schedule (the
run's last step) are skipped.
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np

from lib.monitor import AttentionMonitor, MonitorWarning, Thresholds

KINDS = ("conjunction", "rise", "logit")
NEEDS = {"conjunction": "conjunction", "rise": "conjunction", "logit": "max_logit"}   # kind -> census key it reads

__all__ = ["KINDS", "NEEDS", "kind_of", "replay", "first_warnings", "lead_times", "run_leads", "placement_of",
           "arm_leads", "lead_numbers", "lead_table", "comparison_numbers"]


def kind_of(message: str) -> str:
    """The kind of one of the monitor's warning messages (`AttentionMonitor._warnings`' three formats)."""
    return "logit" if "largest logit" in message else "rise" if "rose to" in message else "conjunction"


def replay(steps, conj, logit, placement: str = "authors", every: int | None = None, layers=None,
           thresholds: Thresholds = Thresholds()) -> list[tuple]:
    """The monitor's warnings on recorded series: `conj`, `logit` (E, L, H) per event `steps` (E,), layer and head
    (`layers`: the layer numbers of axis 1, 0-based, default 0..L−1). Each event the monitor with `every` would take
    (all events when None) goes through `AttentionMonitor._warnings` in step order, layer by layer, so the rise rule
    compares with each layer's first replayed event. NaN rates count as 0, as the monitor's census has them where a
    head has no rows. Returns [(step, layer, kind, message)]."""
    conj = np.nan_to_num(np.asarray(conj, dtype=np.float64))
    logit = np.asarray(logit, dtype=np.float64)
    if conj.shape != logit.shape or conj.ndim != 3 or conj.shape[0] != len(steps):
        raise ValueError(f"conj {conj.shape} and logit {logit.shape} must both be (events {len(steps)}, L, H)")
    layers = list(range(conj.shape[1])) if layers is None else [int(l) for l in layers]
    mon = AttentionMonitor(None, every=every or 1, out=None, placement=placement, thresholds=thresholds)
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonitorWarning)
        for i in np.argsort(np.asarray(steps), kind="stable"):
            s = int(steps[i])
            if not mon.due(s):
                continue
            for j, l in enumerate(layers):
                for m in mon._warnings(dict(step=s, layer=l), dict(conjunction=conj[i, j], max_logit=logit[i, j])):
                    found.append((s, l, kind_of(m), m))
    return found


def first_warnings(found) -> dict:
    """{kind: (first step, its layer) or None} of `replay`'s warnings (the lowest layer at a tied step)."""
    return {k: min(((s, l) for s, l, kk, _ in found if kk == k), default=None) for k in KINDS}


def lead_times(first: dict, failure) -> dict:
    """Per kind of `first` ({kind: first step or None}): "lead" failure − first step (None without a failure or a
    warning; negative when the warning came after the failure), "before" (fired at or before the failure step),
    "false_alarm" (fired in a run that did not fail)."""
    out = {}
    for k, s in first.items():
        lead = failure - s if failure is not None and s is not None else None
        out[k] = dict(step=s, lead=lead, before=lead is not None and lead >= 0,
                      false_alarm=failure is None and s is not None)
    return out


def run_leads(arrays: dict, label: str, failure, placement: str, every: int | None = None) -> dict:
    """`lead_times` of one run whose census lies in `arrays` under "<label>__census__step" and
    "<label>__census__<placement>/<key>": {"placement", "failure", "missing": [census keys the rule needs that the
    record lacks], "replayed": [kinds replayed], "layer": {kind: first warning's layer, 1-based, or None}, kind:
    lead_times' entry}. A kind whose census key is missing is not replayed: its entry is None, not "never fired"."""
    pre = f"{label}__census__"
    have = {key: f"{pre}{placement}/{key}" in arrays for key in set(NEEDS.values())}
    if f"{pre}step" not in arrays:
        have = dict.fromkeys(have, False)
    missing = sorted(key for key, ok in have.items() if not ok)
    replayed = [k for k in KINDS if have[NEEDS[k]]]
    out = dict(placement=placement, failure=failure, missing=missing, replayed=replayed,
               layer=dict.fromkeys(KINDS), **dict.fromkeys(KINDS))
    if not replayed:
        return out
    steps = np.asarray(arrays[f"{pre}step"])
    shape = next(np.shape(arrays[f"{pre}{placement}/{key}"]) for key, ok in have.items() if ok)
    read = lambda key, fill: (np.asarray(arrays[f"{pre}{placement}/{key}"], dtype=np.float64) if have[key]  # noqa: E731
                              else np.full(shape, fill))
    first = first_warnings(replay(steps, read("conjunction", 0.0), read("max_logit", np.nan), placement, every))
    leads = lead_times({k: None if first[k] is None else first[k][0] for k in replayed}, failure)
    out.update(leads)
    out["layer"] |= {k: first[k][1] + 1 for k in replayed if first[k] is not None}
    return out


def placement_of(attn: str) -> str:
    """The census placement the monitor's docstring asks for, for an attention spec: "authors" for the paper's and
    the authors' kernels (BF16 scores, P̄V rounded before normalising), "fa2" for every other (SDPA, our FA2
    profile, FP32 attention: FP32 scores and accumulators)."""
    return "authors" if str(attn).split("/")[0].split("+")[0] in ("paper", "authors") else "fa2"


def arm_leads(arrays: dict, outcomes: dict, cfg: dict, placement: str | None = None) -> list[dict]:
    """`run_leads` of every run of a comparison of arms: `outcomes` {arm: [(seed, steps, failure step or None,
    steps to recover or None)]} (`lib.studies.gpt2.reading.outcomes`), `cfg` the comparison's configuration ("arms":
    [{"label", "attn"}], "census_every"). Each run is watched in its own arm's placement (`placement_of`), or in
    `placement` for all. Returns one dict per run, in `outcomes`' order, with "arm", "seed", "steps", "recovered"."""
    attn = {a["label"]: a["attn"] for a in cfg["arms"]}
    out = []
    for arm, runs in outcomes.items():
        p = placement or placement_of(attn[arm])
        for seed, steps, failure, rec in runs:
            r = run_leads(arrays, f"{arm}:s{seed}", failure, p, cfg["census_every"])
            out.append(dict(r, arm=arm, seed=seed, steps=steps, recovered=rec))
    return out


# ------------------------------------------------------------------------------------------------ the chapter
def _cell(entry) -> str:
    """A table cell: the first warning's step, and how far ahead of the failure (or "false alarm")."""
    if entry is None:
        return "not recorded"
    if entry["step"] is None:
        return "never"
    if entry["false_alarm"]:
        return f"{entry['step']:,} (false alarm)"
    lead = entry["lead"]
    return f"{entry['step']:,} ({lead:,} ahead)" if lead >= 0 else f"{entry['step']:,} ({-lead:,} after)"


def _failure_cell(r: dict) -> str:
    if r["failure"] is None:
        return f"none in {r['steps']:,} steps"
    back = "not recovered" if r["recovered"] is None else f"recovered {r['recovered']:,} later"
    return f"{r['failure']:,}, {back}"


def _step(s) -> str:
    return "never" if s is None else f"{s:,}"


def _range(xs) -> str:
    xs = sorted(xs)
    return "—" if not xs else f"{xs[0]:,}" if xs[0] == xs[-1] else f"{xs[0]:,}–{xs[-1]:,}"


def lead_table(leads: list[dict], words: dict) -> str:
    """A Markdown table of `arm_leads`: one row per run (arm's readable name from `words`, seed, placement watched),
    its failure, and each warning's first step with its lead (steps ahead of the failure) or "false alarm"."""
    th = Thresholds()
    place = {"authors": "authors'", "fa2": "FA2"}
    md = [f"| run, seed (placement watched) | failure step | conjunction above {100 * th.conjunction:g} % | "
          f"{th.rise:g}× rise | logit above {th.max_logit:g} |", "|---|---|---|---|---|"]
    for r in leads:
        md.append(f"| {words.get(r['arm'], r['arm'])}, seed {r['seed']} ({place[r['placement']]}) | "
                  f"{_failure_cell(r)} | " + " | ".join(_cell(r[k]) for k in KINDS) + " |")
    return "\n".join(md)


def lead_numbers(leads: list[dict], words: dict, cfg: dict, other: list[dict] | None = None) -> dict:
    """Glue of `arm_leads` ("lt_…"): the table, how many runs, how many hit the failure rule, how many of those did
    not recover and within how many steps the others did; in the runs that failed, the leads of the monitor's
    conjunction warnings (the earlier of its two rules) and of the plain logit warning, over the runs where each came
    at or before the failure, and in how many; how many of the runs that did not fail each warned in; the latest first
    warning of each over every run; the replay's settings; what the records lack; and, from `other` (the same runs
    all watched in the authors' placement), how many runs that did not fail its conjunction warnings fired in."""
    failed = [r for r in leads if r["failure"] is not None]
    ok = [r for r in leads if r["failure"] is None]

    def monitor(r):       # the earlier of the two conjunction rules, as one lead_times entry (None: not replayed)
        es = [r[k] for k in ("conjunction", "rise") if r[k] is not None]
        fired = [e for e in es if e["step"] is not None]
        return min(fired, key=lambda e: e["step"]) if fired else (es[0] if es else None)

    def fired_in(rs, pick):
        return sum(1 for r in rs if pick(r) is not None and pick(r)["step"] is not None)

    def leads_of(pick):      # the leads of the warnings that came at or before the failure
        return [pick(r)["lead"] for r in failed if pick(r) is not None and pick(r)["before"]]

    def firsts(pick):
        return [pick(r)["step"] for r in leads if pick(r) is not None and pick(r)["step"] is not None]
    logit = lambda r: r["logit"]   # noqa: E731
    m_lead, l_lead = leads_of(monitor), leads_of(logit)
    boom = [r for r in failed if r["recovered"] is None]

    def named(rs):
        return "; ".join(f"{words.get(r['arm'], r['arm'])}, seed {r['seed']}" for r in rs) or "none"
    missing = sorted({m for r in leads for m in r["missing"]})
    rows = inspect.signature(AttentionMonitor).parameters["batch_rows"].default
    logit_everywhere = bool(ok) and fired_in(leads, logit) == len(leads)
    out = {"lt_md": lead_table(leads, words), "lt_n_runs": len(leads), "lt_n_failed": len(failed),
           "lt_n_boom": len(boom), "lt_boom_runs": named(boom), "lt_failed_runs": named(failed),
           "lt_n_ok": len(ok), "lt_monitor_lead": _range(m_lead), "lt_logit_lead": _range(l_lead),
           "lt_monitor_before": len(m_lead), "lt_logit_before": len(l_lead),
           "lt_monitor_false": fired_in(ok, monitor), "lt_logit_false": fired_in(ok, logit),
           "lt_monitor_latest": _step(max(firsts(monitor), default=None)),
           "lt_logit_latest": _step(max(firsts(logit), default=None)),
           "lt_logit_says": (f"it fired in every run by step {_step(max(firsts(logit)))}, so it does not tell the "
                             "runs that fail from those that do not" if logit_everywhere else
                             f"it fired in {fired_in(leads, logit)} of {len(leads)} runs"),
           "lt_missing": ", ".join(missing) or "nothing", "lt_monitor_rows": rows,
           "lt_rows": cfg["census_rows"], "lt_every": f"{cfg['census_every']:,}",
           "lt_window": cfg["rules"]["failure_window"], "lt_rise": f"{cfg['rules']['failure_rise']:g}",
           "lt_others": (f"; the loss came back in the other {len(failed) - len(boom)}, within "
                         f"{max(r['recovered'] for r in failed if r['recovered'] is not None):,} steps"
                         if len(failed) > len(boom) else ""),
           "lt_seeds": ", ".join(str(s) for s in sorted({r["seed"] for r in leads}))}
    if other is not None:
        ok_o = [r for r in other if r["failure"] is None]
        out |= {"lt_authors_false": fired_in(ok_o, monitor), "lt_authors_n_ok": len(ok_o)}
    return out


def comparison_numbers(arrays: dict, outcomes: dict, cfg: dict, words: dict) -> dict:
    """`lead_numbers` of a comparison of arms, each run watched in its own placement, with the authors' placement
    for every run as `other` (`arm_leads`' arguments; `words`: the arms' readable names)."""
    return lead_numbers(arm_leads(arrays, outcomes, cfg), words, cfg, arm_leads(arrays, outcomes, cfg, "authors"))
