"""The book's chapters as `_toc.yml` lists them: number, file and title, read when the book is built.

A chapter file is ``chapters/NN-name.md``; its number is NN and its title the first level-1 heading of the file.
Pages such as the appendix (no number prefix) are listed with ``number=None``. Figures and prose that refer to
chapters (the intro's causal chain, the pointer to a revisit) read this list, so that they name only the chapters
the build contains.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOC_FILE = ROOT / "_toc.yml"
_NUM = re.compile(r"^(\d+)-")


@dataclass(frozen=True)
class Chapter:
    file: str            # as in _toc.yml, without suffix: "chapters/01-bf16-rounding"
    number: int | None   # 1 for chapters/01-…; None for unnumbered pages
    title: str           # the first "# " heading, without a leading "N. "


def _files(node) -> list[str]:
    out = []
    if isinstance(node, dict):
        if "file" in node:
            out.append(str(node["file"]))
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key, []) or []:
                out.extend(_files(child))
    elif isinstance(node, list):
        for child in node:
            out.extend(_files(child))
    return out


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return re.sub(r"^\d+\.\s*", "", line[2:].strip())
    return path.stem


def chapters(toc: Path | str = TOC_FILE) -> list[Chapter]:
    """Every page of the toc after the root, in order (the root page itself is not a chapter)."""
    toc = Path(toc)
    spec = yaml.safe_load(toc.read_text(encoding="utf-8"))
    out = []
    for f in _files(spec):
        stem = Path(f).with_suffix("") if Path(f).suffix in (".md", ".ipynb") else Path(f)
        src = next((toc.parent / f"{stem}{s}" for s in (".md", ".ipynb") if (toc.parent / f"{stem}{s}").exists()),
                   None)
        m = _NUM.match(stem.name)
        out.append(Chapter(file=str(stem), number=int(m.group(1)) if m else None,
                           title=_title(src) if src is not None and src.suffix == ".md" else stem.name))
    return out


def by_number(toc: Path | str = TOC_FILE) -> dict[int, Chapter]:
    """{chapter number: Chapter} of the numbered chapters in the toc."""
    return {c.number: c for c in chapters(toc) if c.number is not None}


def chapter_span(numbers, present) -> str:
    """'ch. 1–2', 'ch. 4', 'ch. 1, 6' … for the `numbers` that are in `present` ('' when none is)."""
    ns = sorted(n for n in numbers if n in present)
    if not ns:
        return ""
    runs, start = [], ns[0]
    for a, b in zip(ns, ns[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}–{a}")
            start = b
    return "ch. " + ", ".join(runs)
