"""Every result of the book, from the registry and from `results/<scale>/`, with the command that regenerates it.

`rows(scale)` joins the registry entries (`lib.book.registry.entries()`: summary, chapter, GPU minutes, needs) with
the committed results at `scale` (`lib.book.results`: label, wall time, staleness reasons), each result read by its
own name. A committed result that has no registry entry (a benchmark script's output, say) is listed too, with the
command recorded in its meta. The appendix prints this table.
"""
from __future__ import annotations

from pathlib import Path

from lib.book import registry, results


def command(name: str, scale: str = "full") -> str:
    """The one command that regenerates registry entry `name` at `scale` into ./results."""
    return f"python -m lib.experiments {name} --scale {scale} --out results"


def _script_command(meta: dict) -> str:
    """The command a result without a registry entry was produced with (its script, writing into ./results)."""
    argv = list(meta.get("argv") or [])
    if argv and argv[0].endswith(".py") and (results.ROOT / argv[0]).exists():
        rest = []
        skip = False
        for a in argv[1:]:
            if skip:
                skip = False
                continue
            if a == "--out":              # the machine's output folder: the repository's results/ instead
                skip = True
                continue
            rest.append(a)
        return " ".join(["python", argv[0], *rest, "--out", "results"])
    return ""


def rows(scale: str = "full", root: Path | str | None = None) -> list[dict]:
    """One dict per result, registry order first, then committed results without an entry:
    name, in_registry, summary, chapter, gpu_min, needs, command, committed, label, wall_s, stale (list of reasons)."""
    out = []
    entries = registry.entries()
    for name, e in entries.items():
        have = results.exists(name, scale, root)
        res = results.load(name, scale, root) if have else None
        out.append(dict(name=name, in_registry=True, summary=e.summary, chapter=e.chapter, gpu_min=e.gpu_min,
                        device=e.device, needs=list(e.needs), command=command(name, scale), committed=have,
                        label=res.label if res else "", wall_s=res.meta.get("wall_s") if res else None,
                        stale=list(res.stale) if res else [], commit=res.meta.get("git_commit") if res else None))
    base = Path(root) if root else results.RESULTS_DIR
    for js in sorted((base / scale).glob("*.json")):
        if js.stem in entries:
            continue
        res = results.load(js.stem, scale, root)
        out.append(dict(name=js.stem, in_registry=False, summary=res.meta.get("summary", ""), chapter="",
                        gpu_min=round(res.meta["wall_s"] / 60, 1) if res.meta.get("wall_s") else None,
                        device="gpu", needs=[], command=_script_command(res.meta), committed=True, label=res.label,
                        wall_s=res.meta.get("wall_s"), stale=list(res.stale), commit=res.meta.get("git_commit")))
    return out


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _gpu(r: dict) -> str:
    return "—" if r["gpu_min"] is None else ("CPU" if r.get("device") == "cpu" else f"{r['gpu_min']:g}")


def markdown_table(rs: list[dict]) -> str:
    """An overview that fits the text column: result, chapter, GPU minutes, the committed result's date and commit,
    fresh / stale / not produced. `markdown_details` gives the rest."""
    lines = ["| result | ch. | GPU min | committed (commit · date) | state |", "|---|---|---|---|---|"]
    for r in rs:
        if r["committed"]:
            parts = r["label"].split(" · ")
            com = " · ".join(parts[2:4]) if len(parts) >= 4 else r["label"]
            state = "**stale**" if r["stale"] else "fresh"
        else:
            com, state = "—", "not produced"
        lines.append(f"| {_cell(r['name'])} | {_cell(r['chapter'] or '—')} | {_gpu(r)} | {_cell(com)} | {state} |")
    return "\n".join(lines)


def markdown_details(rs: list[dict]) -> str:
    """One list item per result: what it shows, the one command that regenerates it, what it needs first, the
    committed result's provenance and every reason it is stale."""
    items = []
    for r in rs:
        head = f"**{r['name']}**" + ("" if r["in_registry"] else " (not a registry entry)")
        meta = [f"chapter {r['chapter']}" if r["chapter"] else None,
                ("CPU only" if r.get("device") == "cpu" else f"{r['gpu_min']:g} GPU min")
                if r["gpu_min"] is not None else None,
                ("after " + ", ".join(r["needs"])) if r["needs"] else None]
        meta = "; ".join(m for m in meta if m)
        cmd = f"`{r['command']}`" if r["command"] else "no command recorded"
        if not r["committed"]:
            com = "not produced yet."
        else:
            com = r["label"] + (f", {r['wall_s']:.0f} s" if isinstance(r["wall_s"], (int, float)) else "")
            com += (" — **stale**: " + "; ".join(r["stale"]) + ".") if r["stale"] else " — fresh."
        items.append(f"* {head}{' (' + meta + ')' if meta else ''}: {r['summary'] or '(no summary)'}  \n"
                     f"  Regenerate: {cmd}  \n  Committed: {com}")
    return "\n".join(items)
