"""Typed numbers in the book's prose: digits a reader sees that no glue produced.

    python -m lib.book.gluescan [--allowed] [FILE ...]    # default: intro.md and chapters/*.md

The book's rule is that every number in the prose is computed (`{glue:text}`), never typed. Glued values are
substituted at build time, so the *source* with its glue roles removed is exactly the typed text; this module scans
the MyST sources, not the built HTML (no build needed, and every hit has a source line).

What is not prose, and is skipped (`prose_mask`): the front matter; code cells and every fenced code block;
`{math}`, `{glue:md}` and other non-prose directives (`NON_PROSE`); a directive's argument (figure names, paths) —
except the title of an admonition-like directive (`TITLED`), which is prose — and its `:option:` lines; `$...$`,
`$$...$$` and `\\begin…\\end` math; inline code and every role (`{glue:text}`…, `{doc}`…, `{cite}`…, `{numref}`…);
link targets (the link text is prose), bare URLs, HTML tags and comments; `(label)=` targets, footnote labels,
numbered-list markers and a heading's own number ("# 2b. Where …").

What is prose but allowed without glue (`ALLOWED`, each pattern with its reason): references to chapters, sections,
figures, tables, equations and the chain's links ("chapter 2b", "chapters 4–5", "Ch. 6", "§4", "Figs. 3 and 9");
years and arXiv ids in citations; names that carry digits (GPT-2, FlashAttention-2, FA2, FP32, BF16, H100, L3, 1-D;
the model size in "GPT-2 124M"); index bases ("1-based", "counting from 1"); 0 and 1 in formulas and sign conditions
written as text rather than `$…$` ("Δδ > 0", "P̄ = 1", "(β − 1)", "rank-1", "exactly 1") and a formula's
coefficients and powers of two ("4·B·H·T²·D/2", "2⁻⁹"); structural words in headings ("Step 2"); and the quotations
of the paper in `QUOTATIONS` (the phrase as the chapters quote it → why it may be typed). Every other number is a
typed number — a measured value, a setting (β = 7, LR 8e-3, 512-key tiles, seed 0), a confidence level (95 %) —
and `scan` reports it with its line and context; the command exits 1 while any remains. `--allowed` lists the
numbers let through, with the reason, to audit the allow-list.
"""
from __future__ import annotations

import argparse
import bisect
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Quotations of the paper (and of Golden et al.) the prose may type: the phrase as a chapter writes it → why. Matched
# on the raw source with any whitespace between its words and its first letter in either case; a test checks that
# every phrase still occurs in the book, so an entry goes when its sentence is rewritten.
QUOTATIONS: dict[str, str] = {
    "follows one addition in feature 20 of token 718":
        "the paper's worked example of one addition, located as the paper locates it",
    "trained GPT-2 small (12 layers, 524k tokens a step) for about 6.6k steps":
        "the paper's model, batch and failure step, as the paper reports them",
    "The paper's GPT-2 small trained for about 6.6k steps": "the paper's failure step, as the paper reports it",
    "its runs failed after ≈ 2–3.5 B tokens": "the paper's failure horizon, as the paper reports it",
    "GPT-2 small's shape (12 layers × 768": "the paper's model's depth and width",
    "the paper's optimiser and learning rate (AdamW (0.9, 0.95), no weight decay, clipping at 1":
        "the paper's optimiser settings, as the paper states them",
    "The paper traces its failure to layer 2": "the paper's failing layer, as the paper numbers it",
    "its outlier heads by $\\lVert W_Q\\rVert_2$ are 1, 7, 8, 9, 11 and 12":
        "the paper's outlier heads (its Fig. 9), listed to compare with our census",
    "the layer-2 spike of the paper's": "the paper's failing layer, as the paper numbers it",
    "(the paper's layer-2": "the paper's failing layer, as the paper numbers it",
    "the paper's exact rule (ties within 1e-3 of the block maximum": "the fix's tie rule, as the paper states it",
    "at the paper's β = 7 and at β = 2, the value in the authors' current code":
        "the fix's β in the paper and in the authors' released code",
    "Flash attention, they found, adds 2–5× less drift":
        "the finding of Golden et al. that chapter 3 replicates, as they report it",
}

# Directives whose whole block (argument, options, body) is not prose.
NON_PROSE = {"code-cell", "code", "code-block", "sourcecode", "math", "bibliography", "raw", "literalinclude",
             "include", "toctree", "tableofcontents", "mermaid", "eval-rst", "glue:math", "glue:any", "glue", "glue:",
             "glue:md", "image"}
# Directives whose argument is a title (prose); for the others (glue:figure, figure, table with a label, …) the
# argument is a name or a path.
TITLED = {"admonition", "topic", "dropdown", "sidebar", "card", "tab-item", "exercise", "proof", "prf:theorem"}

NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-−+]?\d+)?(?:\s?%)?")    # 12, 0.95, 1,200, 8e-3, 95 %

_CH = r"(?:\d+[a-z]?\b|(?-i:[A-Z])\b)"              # "2b", "6", appendix "A"
_LIST = rf"{_CH}(?:\.\d+)*(?:\s*(?:[–—-]|,|and|or|to|&)\s*{_CH}(?:\.\d+)*)*"
_OP = r"[−+±·×/<>=≤≥≠≈]"
ALLOWED: list[tuple[str, re.Pattern]] = [
    ("a reference to a chapter, section, figure, table, equation or link of the chain",
     re.compile(rf"(?i)(?:\b(?:chapters?|ch(?:s|ap)?\.|sections?|secs?\.|appendix|appendices|figures?|figs?\.|"
                rf"tables?|tabs?\.|equations?|eqs?\.|links?|parts?)|§§?)[\s-]*\(?{_LIST}\)?")),
    ("a year in a citation", re.compile(r"(?:et al\.?,?\s*\(?|\(|[A-Z][a-z]+,?\s+\(?)(?:19|20)\d\d[a-z]?\b")),
    ("an arXiv id", re.compile(r"(?i)\barxiv[:\s]*\d{4}\.\d{4,5}(?:v\d+)?")),
    ("a name that carries digits (FP32, BF16, H100, FA2, W_Q, L3, sm90, e4m3, sha256)",
     re.compile(r"\b[A-Za-z][A-Za-z_]*\d+(?:[A-Za-z_]+\d*)*\b")),
    ("a dimension (1-D, 2-D)", re.compile(r"\b[1-4]-?D\b")),
    ("a hyphenated product name (GPT-2, FlashAttention-2, Wasserstein-1)",
     re.compile(r"\b[A-Z][A-Za-z]*-\d+(?:\.\d+)?\b")),
    ("a model size in a model's name (GPT-2 124M)", re.compile(r"\bGPT-2\s+\d+[MB]\b")),
    ("an index base (1-based, counting from 1)",
     re.compile(r"(?i)\b[01]-based\b|\bcount(?:ing|ed|s)?\s+(?:\w+\s+)?from\s+[01]\b")),
    ("a 0 or 1 in a formula or sign condition written as text (Δδ > 0, P̄ = 1, β − 1, rank-1, exactly 1)",
     re.compile(rf"(?:{_OP}|\b(?:exactly|rank|lag|near|is|to|towards|all|minus|miss|misses|by|guard|sticky)\b)"
                rf"[\s-]*[01]\b(?![.,]\d)|\b[01](?=\s*{_OP})", re.I)),
    ("a coefficient or power of two in a formula written as text (4·B·H·T²·D/2, 2⁻⁹)",
     re.compile(r"\b\d+(?=·[^\W\d])|(?<=[^\W\d]/)\d+\b|(?<=[)²]/)\d+\b|\b2(?=[⁻⁰¹²³⁴⁵⁶⁷⁸⁹])")),
]
# Structural words in a heading: "Step 2", "Part 1".
HEADING_WORDS = re.compile(r"(?i)\b(?:step|part|stage|phase|case|level|round|option)\s+\d+[a-z]?\b")

_FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[\w:.-]+)\}\s*(?P<arg>.*)$")


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    number: str
    context: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.number!r:8} {self.context}"


def _lines_with_offsets(text: str):
    pos = 0
    for line in text.splitlines(keepends=True):
        yield pos, line
        pos += len(line)


def _mask_blocks(text: str, mask: bytearray) -> None:
    """Front matter and fenced blocks: code and non-prose directives whole; prose directives' argument and options."""
    def mark(a, b):
        mask[a:b] = b"\1" * (b - a)

    lines = list(_lines_with_offsets(text))
    i = 0
    if lines and lines[0][1].rstrip() == "---":
        for j in range(1, len(lines)):
            if lines[j][1].rstrip() == "---":
                mark(0, lines[j][0] + len(lines[j][1]))
                i = j + 1
                break
    stack: list[tuple[str, int, bool]] = []       # (fence char, length, whole block masked)
    in_options = False
    for off, line in lines[i:]:
        body = line.rstrip("\n")
        masked_outer = any(s[2] for s in stack)
        m = _FENCE.match(body)
        if m and stack and m["fence"][0] == stack[-1][0] and len(m["fence"]) >= stack[-1][1] and not m["info"].strip():
            mark(off, off + len(line))                # closing fence
            stack.pop()
            in_options = False
            continue
        if m and not masked_outer:
            info = m["info"].strip()
            d = _DIRECTIVE.match(info)
            whole = d is None or d["name"] in NON_PROSE    # a plain ``` block is code
            stack.append((m["fence"][0], len(m["fence"]), whole))
            if d is not None and not whole and d["name"] in TITLED and d["arg"]:
                mark(off, off + body.index(d["arg"], len(m["indent"]) + len(m["fence"])))   # keep the title
            else:
                mark(off, off + len(line))
            in_options = not whole
            continue
        if masked_outer:
            mark(off, off + len(line))
            continue
        if in_options:
            if re.match(r"^\s*:[\w-]+:", body) or body.strip() == "---":
                mark(off, off + len(line))
                continue
            in_options = False


_INLINE = [
    re.compile(r"\$\$.+?\$\$", re.S),                                    # display math
    re.compile(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.S),              # amsmath environments
    re.compile(r"(?:\{[\w:.-]+\})?(`+)(?:(?!\1).)+?\1", re.S),           # roles and inline code
    re.compile(r"(?<![\\$])\$(?![\s$])(?:[^$\\\n]|\\.|\n(?!\s*\n))+?(?<!\s)\$"),   # inline math
    re.compile(r"<!--.*?-->", re.S),                                      # HTML comments
    re.compile(r"<[A-Za-z/][^>\n]*>"),                                    # HTML tags, autolinks
    re.compile(r"https?://\S+"),                                          # bare URLs
    re.compile(r"(?<=\])\([^)\s]*(?:\s+\"[^\"]*\")?\)"),                  # link targets
    re.compile(r"(?<=\])\[[^\]]*\]"),                                     # reference-link labels
    re.compile(r"\[\^[^\]]+\]:?"),                                        # footnote labels
    re.compile(r"^\([\w.:-]+\)=[ \t]*$", re.M),                           # MyST targets
    re.compile(r"\{\{.*?\}\}", re.S),                                     # substitutions
    re.compile(r"^#{1,6}[ \t]+(?:\d+[a-z]?|[A-Z](?=\.))(?:\.\d+)*\.?(?=\s)", re.M),   # a heading's own number
    re.compile(r"^[ \t]*\d+[.)](?=[ \t])", re.M),                          # a numbered list's markers
]


def prose_mask(text: str) -> bytearray:
    """1 for every character of `text` that is not prose (see the module's docstring), 0 for prose."""
    mask = bytearray(len(text))
    _mask_blocks(text, mask)
    for pat in _INLINE:
        visible = _visible(text, mask)
        for m in pat.finditer(visible):
            if "\0" in m.group(0):               # the match reaches into a masked block: not an inline span
                continue
            mask[m.start():m.end()] = b"\1" * (m.end() - m.start())
    return mask


def _visible(text: str, mask: bytearray) -> str:
    """`text` with its non-prose blanked to NULs; line breaks stay, so `^` and `$` still find lines."""
    return "".join("\0" if k and c != "\n" else c for c, k in zip(text, mask))


def _quotation_pattern(phrase: str) -> re.Pattern:
    """The phrase with any whitespace (a line break) between its words; its first letter in either case."""
    words = [re.escape(w) for w in phrase.split()]
    if phrase[:1].isalpha():
        words[0] = f"[{phrase[0].lower()}{phrase[0].upper()}]" + words[0][1:]
    return re.compile(r"\s+".join(words))


def allowed_spans(text: str, visible: str) -> list[tuple[int, int, str]]:
    """(start, end, why) of every stretch whose digits need no glue. Quotations are matched on the raw source (they
    may hold math, which `visible` blanks out); the other patterns on the prose with its non-prose blanked."""
    spans = [(m.start(), m.end(), why) for why, pat in ALLOWED for m in pat.finditer(visible)]
    for phrase, why in QUOTATIONS.items():
        spans += [(m.start(), m.end(), "a quotation: " + why) for m in _quotation_pattern(phrase).finditer(text)]
    for m in re.finditer(r"^#{1,6}[ \t].*$", visible, re.M):
        spans += [(m.start() + h.start(), m.start() + h.end(), "a structural word in a heading")
                  for h in HEADING_WORDS.finditer(m.group(0))]
    return spans


def _classify(text: str, path: str):
    """Every number of the prose, as (Hit, why) with why None for a typed number."""
    visible = _visible(text, prose_mask(text))
    spans = allowed_spans(text, visible)
    starts = [off for off, _ in _lines_with_offsets(text)]
    for m in NUMBER.finditer(visible):
        a, b = m.span()
        why = next((w for s, e, w in spans if s <= a and b <= e), None)
        line = _bisect(starts, a)
        ln_start = starts[line]
        ln_end = text.find("\n", a)
        ln_end = len(text) if ln_end < 0 else ln_end
        lo, hi = max(ln_start, a - 50), min(ln_end, b + 50)
        ctx = ("…" if lo > ln_start else "") + text[lo:hi].strip() + ("…" if hi < ln_end else "")
        yield Hit(path, line + 1, m.group(0), ctx), why


def scan_text(text: str, path: str = "<text>") -> list[Hit]:
    """The typed numbers of one MyST source: numbers in its prose that no allowed pattern covers."""
    return [h for h, why in _classify(text, path) if why is None]


def allowed_text(text: str, path: str = "<text>") -> list[tuple[Hit, str]]:
    """The numbers of the prose that need no glue, each with the reason (to audit the allow-list)."""
    return [(h, why) for h, why in _classify(text, path) if why is not None]


def _bisect(starts: list[int], pos: int) -> int:
    return bisect.bisect_right(starts, pos) - 1


def h_path(p: Path) -> str:
    """A path as reports show it: relative to the repository where it is inside it."""
    p = Path(p).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def scan(path: Path | str) -> list[Hit]:
    """The typed numbers of one MyST source file."""
    return scan_text(Path(path).read_text(encoding="utf-8"), h_path(path))


def book_sources(root: Path = ROOT) -> list[Path]:
    """The book's MyST sources: intro.md and chapters/*.md."""
    return [root / "intro.md"] + sorted((root / "chapters").glob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.book.gluescan", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="MyST sources (default: intro.md and chapters/*.md)")
    parser.add_argument("--allowed", action="store_true", help="also list the numbers allowed, with the reason")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    paths = args.files or book_sources()
    report = {p: scan(p) for p in paths}
    for p, hits in report.items():
        for h in hits:
            print(h)
        if args.allowed:
            for h, why in allowed_text(p.read_text(encoding="utf-8"), h_path(p)):
                print(f"  allowed  {h}   [{why}]")
    total = sum(len(h) for h in report.values())
    print("\ntyped numbers per file:")
    for p, hits in report.items():
        print(f"  {len(hits):4d}  {p.name}")
    print(f"  {total:4d}  total, in {len(report)} files ({time.perf_counter() - t0:.2f} s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
