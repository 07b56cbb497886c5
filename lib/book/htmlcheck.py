"""Headless-Chromium check of the built book at a 1280-px window, for the defects a reader sees.

    python -m lib.book.htmlcheck _build/html [--code-id REGEX ...]

Uses Debian's `chromium` + `chromium-driver` (headless, no sandbox, fresh profile) through Selenium; the environment
variables CHROMIUM / CHROMEDRIVER override the PATH search (`browser_paths`). Checks per page:
- loading: no JavaScript-visible load failure; every <img> has `complete && naturalWidth > 0`; every local link target
  (file and #anchor) exists; no figure without an image, no `<Figure size …>` or display-object repr shown as text;
- math: every page that contains TeX has MathJax output (`mjx-container`); no display equation wider than its
  container, its parent or the content column (it would be cut off or need a scrollbar);
- width: no table wider than its parent or the content column (it would scroll sideways). Collapsed content
  (`<details>`, myst-nb's hidden cells, sphinx-togglebutton's `.toggle-hidden`) is expanded in the browser first, so a
  table a reader can only see by opening a toggle is measured too;
- figures: every figure PNG written by `lib.book.plotting` carries a record of its smallest text size (pt at its
  dpi), which is scaled by the image's rendered width / natural width and must stay ≥ `MIN_TEXT_PT`, and of the
  overlaps the figure check found, which must be none; a Matplotlib PNG without that record (a figure that bypassed the
  book's formatter) is a problem too. No image is shown twice on one page (same `src`, or same file content);
- prose: no paragraph whose text starts with `|` (a pipe table printed as text); no paragraph whose whole text sits
  in one `<strong>`/`<b>` (glued text rendered bold); no page whose prose renders more than `MAX_BOLD_SHARE` bold
  (a bold wall: emphasis everywhere marks nothing — `<strong>`/`<b>`, and text styled bold such as myst-nb's glued
  values; headings, table headers and titles are structure, not counted); no "issue <number>", no code id and no module or file path
  (`CODE_ID_PATTERNS`: `lib.training.loop`, `lib/census.py`, `results/full/…`) and no word about how the project is
  worked on (`PROCESS_PATTERNS`: "the session", "GPU time", "reference notes", an unexpanded `$NAME`, …) in prose,
  tables, headings or figure captions. Code is exempt: `<code>`, `<pre>`, code cells' source and textual outputs,
  math and link URLs (a link's text is prose).
Checks of the root page (the page `index.html` leads to): its "What we found" box (`FIRST_SCREEN_BOX`, written by
`lib.claims.found`) must end within the reader's first screen (`FIRST_SCREEN`, 1280 × 800 CSS px: the layout is that
of the 1280-px window, and positions down the page do not depend on the window's height); where the chain figure and
the first table start is reported beside it.
Exits 1 with a list of problems, each naming its page and element.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

INSTALL = "sudo apt-get install -y chromium chromium-driver"
WINDOW = (1280, 1000)     # CSS px: the width the book is checked at
FIRST_SCREEN = (1280, 800)          # CSS px: the reader's first screen of the root page
FIRST_SCREEN_BOX = "what-we-found"  # the class of the root page's box of findings (lib.claims.found.BOX_CLASS)

# Internal names a reader must not meet in prose. Case-sensitive (W_Q, r_m and other math in text do not match).
ISSUE_PATTERN = r"(?i)\bissues?\s*#?\s*\d+"                      # "issue 15", "Issue 16": the project's tracker
CODE_ID_PATTERNS = (
    r"\b[a-z][a-z0-9]+(?:_[a-z0-9]+)*_[a-z0-9]{2,}(?:_[a-z0-9]+)*\b",   # snake_case ids: paper_rb512, fix_b7,
                                                                        # delta_fp32_o, fix_split, paper_untiled
    r"\b[a-z][a-z0-9_]+\+[a-z][a-z0-9_]+",                         # arm specs joined by '+': paper+fix
    r"_(?:sm|rb|b|m)\d+\b",                                         # variant suffixes on any name: _sm32, _b7
    # module and file paths: a reader meets them only in code spans, as code to use
    r"\b(?:lib|kernels|benchmarks|tests)(?:\.[A-Za-z_]\w*)+",         # the project's modules: lib.training.loop,
                                                                        # kernels.attention
    r"\b[a-z_][a-z0-9_]+(?:\.[a-z_][a-z0-9_]+){2,}\b",                # any dotted path of 3+ parts: torch.nn.functional
    r"(?<![\w/])\.?(?:lib|kernels|benchmarks|tests|results|chapters|ci)/[\w.\-/…]*\w",   # lib/census.py, results/full/…
    r"\b[\w\-]+(?:/[\w\-.]+)*\.(?:py|ipynb|json|jsonl|md|ya?ml|toml|npz|npy|pt|csv|txt|sh|log)\b",  # x/y.py, README.md
)
# Words about how the project is worked on (its sessions, machines, budgets, notes), which a reader of the book has
# no use for: say what was measured and what limits it, not whose time ran out. Read in prose like the code ids;
# each pattern carries its own flags.
PROCESS_PATTERNS = (
    r"(?i)\bsessions?\b",                                              # "the session's GPU time ran out"
    r"(?i)\b(?:the|our|this|that|a|old|feasibility)\s+probes?\b",     # "the probe", "feasibility probe"
    r"(?i)\b(?:GPU|device|machine)[- ](?:time|hours?|budget)\b",       # "GPU time", "device time"
    r"(?i)\bmachine[- ]calls?\b",                                      # "the most one machine call allows"
    r"(?i)\breference notes?\b",                                       # "in our reference notes"
    r"\$\{?[A-Z][A-Z0-9_]{2,}\}?",                                     # an unexpanded variable: $HEADLINE_LR
)
# The most of a page's prose characters (text outside code and math, whitespace left out) that may render bold
# (computed font-weight ≥ 600: <strong>/<b>, and text a style sheet makes bold, such as myst-nb's `span.pasted-text`
# for every {glue:text} value). Bold marks one key phrase; a paragraph of ~500 characters with one bold phrase of ~40 is 8 %, a
# "Takeaway:" label on top of that stays under 15 %. Past it bold stops marking anything and reads as shouting.
MAX_BOLD_SHARE = 0.15
# Pages with less prose than this are not judged for bold: a stub page with a bold lead line says nothing about walls.
MIN_BOLD_PROSE = 400
_PROCESS = tuple(re.compile(p) for p in PROCESS_PATTERNS)
_URL = re.compile(r"\b(?:https?|file)://\S+")

# The content column: Jupyter Book's article, else <main>, else the body.
_ARTICLE = ("const a = document.querySelector('article.bd-article') || document.querySelector('main') || "
            "document.body || document.documentElement; const cs = getComputedStyle(a); "
            "const col = a.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight); ")
_VISIBLE = ("const visible = e => { const r = e.getBoundingClientRect(); "
            "return r.width > 0 && r.height > 0 && (!e.checkVisibility || e.checkVisibility()); }; ")
_WHERE = "const where = e => (e.closest('figure[id], .cell[id], section[id], [id]') || {id: ''}).id; "
_JS_IMAGES = "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]);"
_JS_LINKS = "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'));"
_JS_FIGS = ("return Array.from(document.querySelectorAll('figure')).filter(f => !f.querySelector('img, svg, table'))"
            ".map(f => f.id || '(figure without id)');")
_JS_TEXT = "return document.body.innerText;"
_JS_IDS = "return Array.from(document.querySelectorAll('[id]')).map(e => e.id);"
_JS_MATH = ("return [document.querySelectorAll('mjx-container').length, "
            "document.querySelectorAll('.math, div.math, span.math').length, "
            "typeof MathJax !== 'undefined' && MathJax.startup ? 1 : 0];")
_JS_COLUMN = _ARTICLE + "return col;"
_JS_IMG_SIZES = (_VISIBLE + "return Array.from(document.images).map(i => [i.getAttribute('src'), "
                 "i.getBoundingClientRect().width, i.naturalWidth, visible(i)]);")
# Mark the tables a reader cannot see yet, then open every collapsed element: closed <details> (myst-nb's hidden
# cells, sphinx-design dropdowns, sphinx-togglebutton's wrapped blocks) and togglebutton's `.toggle-hidden`.
_JS_EXPAND = (_VISIBLE + "document.querySelectorAll('table').forEach(t => { if (!visible(t)) "
              "t.setAttribute('data-htmlcheck-collapsed', '1'); }); "
              "document.querySelectorAll('details:not([open])').forEach(d => { d.open = true; }); "
              "document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden')); "
              "document.querySelectorAll('.toggle-button-hidden').forEach(e => "
              "e.classList.remove('toggle-button-hidden'));")
_JS_TABLES = (_ARTICLE + _VISIBLE + _WHERE + "return Array.from(document.querySelectorAll('table')).map((t, i) => { "
              "const r = t.getBoundingClientRect(); const p = t.parentElement; "
              "const head = (t.querySelector('th, td') || {textContent: ''}).textContent.trim().slice(0, 40); "
              "return [i, r.width, Math.max(r.width, t.scrollWidth), p ? p.clientWidth : col, col, visible(t), "
              "t.hasAttribute('data-htmlcheck-collapsed'), where(t), head]; });")
# A display equation: MathJax's container (CHTML or SVG); its content is the inner mjx-math / svg, whose width does
# not shrink with the container. The TeX comes from MathJax's own record of the item.
_JS_DISPLAYS = (_ARTICLE + _VISIBLE + _WHERE + "return Array.from(document.querySelectorAll("
                "'mjx-container[display=\"true\"]')).filter(visible).map(c => { "
                "const m = c.querySelector('mjx-math, svg') || c; const p = c.parentElement; let tex = ''; "
                "try { tex = MathJax.startup.document.getMathItemsWithin(c)[0].math; } catch (e) {} "
                "return [tex.trim().slice(0, 50), Math.max(m.getBoundingClientRect().width, c.scrollWidth), "
                "c.clientWidth, p ? p.clientWidth : col, col, where(c)]; });")
_JS_ARTICLE_IMAGES = (_ARTICLE + _WHERE + "return Array.from(a.querySelectorAll('img')).map(i => "
                      "[i.getAttribute('src') || '', where(i)]);")
# Paragraphs outside table cells: text starting with '|', or no text outside its <strong>/<b> but punctuation.
_JS_PARAGRAPHS = (_ARTICLE + _WHERE + "return Array.from(a.querySelectorAll('p')).filter(p => "
                  "!p.closest('td, th, .admonition-title')).map(p => { "
                  "const t = p.textContent.replace(/\\s+/g, ' ').trim(); const c = p.cloneNode(true); "
                  "const bold = c.querySelectorAll('strong, b'); bold.forEach(b => b.remove()); "
                  "const rest = c.textContent.replace(/[\\s.,;:!?()\\[\\]\"'\u2018\u2019\u201c\u201d\u2013\u2014-]/g, "
                  "''); "
                  "return [t.slice(0, 60), t.startsWith('|'), bold.length > 0 && t.length > 0 && rest === '', "
                  "where(p)]; }).filter(r => r[1] || r[2]);")
# Reader-facing text, grouped by its block (paragraph, list item, cell, heading, caption) and named by the cell or
# caption holding it; code and math are skipped.
_JS_TEXT_BLOCKS = (_ARTICLE + _WHERE +
                   "const skip = 'code, pre, kbd, samp, script, style, mjx-container, math, .cell_input, .highlight, "
                   ".headerlink'; const block = 'p, li, td, th, figcaption, caption, h1, h2, h3, h4, h5, h6, dt, dd, "
                   "summary, blockquote'; const w = document.createTreeWalker(a, NodeFilter.SHOW_TEXT); "
                   "const out = new Map(); let n; while ((n = w.nextNode())) { const e = n.parentElement; "
                   "if (!e || !n.nodeValue.trim() || e.closest(skip)) continue; const b = e.closest(block) || e; "
                   "if (!out.has(b)) out.set(b, []); out.get(b).push(n.nodeValue); } "
                   "return Array.from(out, ([b, parts]) => [(b.closest('figcaption, caption, td, th') || b).tagName"
                   ".toLowerCase(), where(b), parts.join('')]);")
# The prose's characters (whitespace left out) and those that render bold, by what makes them bold (<strong>/<b>,
# a glued value, other styling), with the bold spans' texts; code and math are skipped as above, and so is text that
# is bold as structure (headings, table headers, captions' labels, admonition and toggle titles, definition terms).
_JS_BOLD = (_ARTICLE + "const skip = 'code, pre, kbd, samp, script, style, mjx-container, math, .cell_input, "
            ".highlight, .headerlink, h1, h2, h3, h4, h5, h6, th, caption, .caption-number, .admonition-title, "
            "summary, dt'; const w = document.createTreeWalker(a, NodeFilter.SHOW_TEXT); "
            "let all = 0; const kinds = {}; const spans = new Map(); let n; while ((n = w.nextNode())) { "
            "const e = n.parentElement; if (!e || e.closest(skip)) continue; "
            "const k = n.nodeValue.replace(/\\s+/g, '').length; if (!k) continue; all += k; "
            "const wt = getComputedStyle(e).fontWeight; if (!(parseInt(wt) >= 600 || wt === 'bold')) continue; "
            "const s = e.closest('strong, b'); const g = e.closest('.pasted-text'); "
            "const kind = s ? '<strong>/<b>' : g ? 'glued values' : 'other bold styling'; "
            "kinds[kind] = (kinds[kind] || 0) + k; const key = s || g || e; "
            "spans.set(key, (spans.get(key) || '') + n.nodeValue); } "
            "return [all, kinds, Array.from(spans.values(), t => t.replace(/\\s+/g, ' ').trim())];")

# Where the root page's box of findings, its first figure and its first table sit, in CSS px from the top of the page
# (null for one that is missing), measured before anything collapsed is opened.
_JS_FIRST_SCREEN = (_ARTICLE + "const at = e => { if (!e) return null; const r = e.getBoundingClientRect(); "
                    "return [r.top + window.scrollY, r.bottom + window.scrollY]; }; "
                    f"return [at(a.querySelector('.{FIRST_SCREEN_BOX}')), at(a.querySelector('figure img')), "
                    "at(a.querySelector('table'))];")


def browser_paths() -> tuple[str | None, str | None]:
    """(chromium, chromedriver) executables, None for each one missing. The environment variables CHROMIUM and
    CHROMEDRIVER, when set, replace the PATH search (set empty: absent — how the no-browser path is exercised)."""
    def find(var, names):
        if var in os.environ:
            return shutil.which(os.environ[var]) if os.environ[var] else None
        return next((p for p in map(shutil.which, names) if p), None)
    return find("CHROMIUM", ("chromium", "chromium-browser")), find("CHROMEDRIVER", ("chromedriver",))


def _too_wide(w: float, limit: float, tol_px: float) -> bool:
    return w > limit + tol_px


def table_problem(rendered_w: float, content_w: float, parent_w: float, column_w: float, tol_px: float = 1.0):
    """A one-line problem when a table (rendered width, content width incl. overflow) is wider than its parent or
    than the content column (CSS px); None when it fits."""
    limit = min(parent_w, column_w)
    w = max(rendered_w, content_w)
    if _too_wide(w, limit, tol_px):
        return f"table is {w:.0f} px wide, its container {limit:.0f} px (it would scroll sideways)"
    return None


def math_problem(math_w: float, container_w: float, parent_w: float, column_w: float, tol_px: float = 1.0):
    """A one-line problem when a display equation's typeset width (CSS px) exceeds its MathJax container, the
    container's parent or the content column; None when it fits."""
    limit = min(container_w, parent_w, column_w)
    if _too_wide(math_w, limit, tol_px):
        return (f"display equation is {math_w:.0f} px wide, its container {limit:.0f} px (cut off at the right "
                f"or needs a scrollbar)")
    return None


def root_page(html_dir: Path) -> Path | None:
    """The book's root page: the page `index.html` redirects to (the meta refresh Jupyter Book writes), else
    `index.html` itself; None when there is no `index.html` (a set of pages that is not a book)."""
    index = Path(html_dir) / "index.html"
    if not index.is_file():
        return None
    m = re.search(r"""<meta[^>]+http-equiv=["']?refresh["']?[^>]*content=["'][^"']*url=([^"'>\s]+)""",
                  index.read_text(errors="replace"), re.I)
    target = (index.parent / unquote(urlparse(m.group(1)).path)).resolve() if m else index.resolve()
    return target if target.is_file() else index.resolve()


def first_screen_problem(box, screen_h: float = FIRST_SCREEN[1], tol_px: float = 1.0):
    """A one-line problem when the root page's box of findings (`box`: its (top, bottom) in CSS px from the top of
    the page, None when the page has none) does not end within the first `screen_h` px; None when it does."""
    if box is None:
        return f"the root page has no 'What we found' box (an element of class {FIRST_SCREEN_BOX!r})"
    if box[1] > screen_h + tol_px:
        return (f"the 'What we found' box ends {box[1]:.0f} px down the root page (starts at {box[0]:.0f}), below "
                f"the first screen ({FIRST_SCREEN[0]} × {screen_h:.0f} px)")
    return None


def name_problems(text: str, code_ids=CODE_ID_PATTERNS) -> list[str]:
    """The internal names in reader-facing `text`: "issue <number>" and matches of the `code_ids` regexes, each
    once, in order of appearance; URLs are not read."""
    text = _URL.sub(" ", text)
    spans = sorted(m.span() for pat in (ISSUE_PATTERN, *code_ids) for m in re.finditer(pat, text))
    merged: list[list[int]] = []
    for lo, hi in spans:                   # overlapping matches are one name: `paper_rb512+fix_b7`, not three
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return list(dict.fromkeys(text[lo:hi] for lo, hi in merged))


def process_problems(text: str) -> list[str]:
    """The words about how the project is worked on (`PROCESS_PATTERNS`) in reader-facing `text`, each once, in order
    of appearance; URLs are not read."""
    text = _URL.sub(" ", text)
    found = sorted((m.start(), m.group(0)) for pat in _PROCESS for m in pat.finditer(text))
    return list(dict.fromkeys(w for _, w in found))


def bold_problem(prose_chars: int, bold_by: dict, spans: list[str] = (), max_share: float = MAX_BOLD_SHARE,
                 min_prose: int = MIN_BOLD_PROSE):
    """A one-line problem when more than `max_share` of a page's `prose_chars` (text outside code and math,
    whitespace left out) render bold; `bold_by`: those bold characters by what makes them bold ('<strong>/<b>',
    'glued values', 'other bold styling'). None when under the share, or when the page has less than `min_prose`
    characters of prose. `spans`: the bold texts, the longest of which is quoted."""
    bold = sum(bold_by.values())
    if prose_chars < min_prose or bold <= max_share * prose_chars:
        return None
    by = ", ".join(f"{v} in {k}" for k, v in sorted(bold_by.items(), key=lambda kv: -kv[1]) if v)
    longest = max(spans, key=len, default="")
    return (f"bold wall: {100 * bold / prose_chars:.0f} % of the page's prose renders bold ({bold} of {prose_chars} "
            f"characters, at most {100 * max_share:.0f} %: {by}; {len(spans)} bold spans)"
            + (f", longest {longest[:60]!r}" if longest else ""))


def _image_label(src: str) -> str:
    return "an inline data: image" if src.startswith("data:") else (Path(urlparse(src).path).name or src)[:40]


def duplicate_problems(images: list[tuple[str, str, str]]) -> list[str]:
    """One problem per image shown more than once on a page. `images`: (src, content digest or '' when unknown,
    where it is), in page order; images are the same when their src or their digest is."""
    groups: list[list[tuple[str, str, str]]] = []
    for img in images:
        g = next((g for g in groups if any(img[0] == o[0] or (img[1] and img[1] == o[1]) for o in g)), None)
        if g is None:
            groups.append([img])
        else:
            g.append(img)
    out = []
    for g in (g for g in groups if len(g) > 1):
        srcs = list(dict.fromkeys(s for s, _, _ in g))
        how = "same src" if len(srcs) == 1 else "same content: " + ", ".join(map(_image_label, srcs))
        places = ", ".join(f"#{w}" if w else "(no id)" for _, _, w in g)
        out.append(f"image {_image_label(g[0][0])} is shown {len(g)} times ({how}; in {places})")
    return out


def image_problems(rec: dict | None, rendered_w: float, natural_w: float, software: str = "",
                   min_pt: float | None = None, code_ids=CODE_ID_PATTERNS) -> list[str]:
    """Problems of one figure image from its PNG record (`lib.book.plotting.figure_record`), its rendered and
    natural widths (px). Text renders at min_text_pt · (dpi / 72) · (rendered / natural) CSS px = that × 3/4 pt.
    A record that lists the figure's texts (`texts`: titles, labels, legend entries) has them read for internal
    names too."""
    from lib.book.plotting import MIN_TEXT_PT
    min_pt = MIN_TEXT_PT if min_pt is None else min_pt
    if rec is None:
        return ["figure PNG has no text-size record (drawn without lib.book.plotting's formatter)"] \
            if software.lower().startswith("matplotlib") else []
    out = [f"figure: {p}" for p in rec.get("problems", [])]
    if natural_w > 0 and rec.get("min_text_pt", float("inf")) != float("inf"):
        px = rec["min_text_pt"] * rec["dpi"] / 72.0 * rendered_w / natural_w
        pt = px * 72.0 / 96.0
        if pt < min_pt - 1e-6:
            out.append(f"figure text renders at {pt:.2f} pt (< {min_pt:g} pt): smallest text "
                       f"{rec['min_text_pt']:g} pt at {rec['dpi']:g} dpi, image shown at {rendered_w:.0f} of "
                       f"{natural_w:.0f} px")
    for t in rec.get("texts", []):
        out += [f"figure text {t[:60]!r} shows internal name {n!r}" for n in name_problems(t, code_ids)]
    return out


def _png_info(path: Path):
    """(record or None, Software tag) of a local PNG file; (None, '') for anything else."""
    if path.suffix.lower() != ".png" or not path.exists():
        return None, ""
    from PIL import Image

    from lib.book.plotting import read_png_record
    with Image.open(path) as im:
        software = str(getattr(im, "text", {}).get("Software", ""))
    return read_png_record(path), software


def _digest(page: Path, src: str, cache: dict) -> str:
    """sha256 of an image's bytes (local file or data: URI); '' for remote or missing images."""
    u = urlparse(src)
    if u.scheme == "data":
        return hashlib.sha256(src.encode()).hexdigest()
    if u.scheme in ("http", "https"):
        return ""
    path = (page.parent / unquote(u.path)).resolve()
    if path not in cache:
        cache[path] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return cache[path]


def _driver(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    binary, drv = browser_paths()
    if not binary or not drv:
        raise RuntimeError(f"chromium and chromedriver are needed: {INSTALL}")
    opts = webdriver.ChromeOptions()
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
              "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={profile}", "--allow-file-access-from-files",
              f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.binary_location = binary
    return webdriver.Chrome(service=Service(drv), options=opts)


def _context(text: str, name: str, width: int = 30) -> str:
    i = text.find(name)
    lo, hi = max(0, i - width), min(len(text), i + len(name) + width)
    return ("…" if lo else "") + " ".join(text[lo:hi].split()) + ("…" if hi < len(text) else "")


def _page_problems(d, page: Path, stats: dict, code_ids, digests: dict) -> list[str]:
    """The width, duplicate-image and prose problems of the page loaded in `d` (expands its collapsed elements)."""
    out = []
    d.execute_script(_JS_EXPAND)
    for i, rw, cw, pw, colw, visible, collapsed, where, head in d.execute_script(_JS_TABLES):
        if not visible:                       # hidden by something other than a toggle (e.g. an unselected tab)
            stats["unmeasured_tables"] += 1
            continue
        stats["hidden_tables" if collapsed else "tables"] += 1
        why = table_problem(rw, cw, pw, colw)
        if why:
            out.append(f"{'collapsed ' if collapsed else ''}table {i + 1}{' in #' + where if where else ''} (first "
                       f"cell {head!r}){' once expanded' if collapsed else ''}: {why}")
    for tex, mw, cw, pw, colw, where in d.execute_script(_JS_DISPLAYS):
        stats["math_displays"] += 1
        why = math_problem(mw, cw, pw, colw)
        if why:
            out.append(f"math {tex!r}{' in #' + where if where else ''}: {why}")
    images = [(src, _digest(page, src, digests), where) for src, where in d.execute_script(_JS_ARTICLE_IMAGES)]
    out += duplicate_problems(images)
    for text, pipe, bold, where in d.execute_script(_JS_PARAGRAPHS):
        at = f" in #{where}" if where else ""
        if pipe:
            out.append(f"paragraph{at} starts with '|' (a pipe table printed as text): {text!r}")
        if bold:
            out.append(f"paragraph{at} is bold from end to end (<strong> wraps its whole text): {text!r}")
    for tag, where, text in d.execute_script(_JS_TEXT_BLOCKS):
        for name in name_problems(text, code_ids):
            out.append(f"internal name {name!r} in <{tag}>{' in #' + where if where else ''}: "
                       f"{_context(text, name)!r}")
        for word in process_problems(text):
            out.append(f"process word {word!r} in <{tag}>{' in #' + where if where else ''}: "
                       f"{_context(text, word)!r}")
    why = bold_problem(*d.execute_script(_JS_BOLD))
    if why:
        out.append(why)
    return out


def check(html_dir: Path, timeout_s: float = 20.0, code_ids=CODE_ID_PATTERNS) -> tuple[list[str], dict]:
    """(problems, stats) of every page under `html_dir` (see the module docstring); `code_ids`: the regexes of
    internal names that prose must not show."""
    html_dir = Path(html_dir).resolve()
    pages = sorted(p for p in html_dir.rglob("*.html")
                   if not any(part in ("_static", "_sources", "_images") for part in p.relative_to(html_dir).parts)
                   and p.name not in ("genindex.html", "search.html"))
    if not pages:
        return [f"no HTML pages under {html_dir}"], {}
    problems, stats = [], {"pages": 0, "images": 0, "math_blocks": 0, "math_displays": 0, "links": 0, "tables": 0,
                           "hidden_tables": 0, "unmeasured_tables": 0, "figures_checked": 0, "column_px": None}
    ids_cache: dict[Path, set] = {}
    digests: dict[Path, str] = {}
    root = root_page(html_dir)
    with tempfile.TemporaryDirectory(prefix="htmlcheck-profile-") as profile:
        d = _driver(profile)
        try:
            for page in pages:
                d.get(page.as_uri())
                rel = page.relative_to(html_dir)
                if Path(unquote(urlparse(d.current_url).path)).resolve() != page:   # a redirect (index.html): the
                    stats["redirects"] = stats.get("redirects", 0) + 1               # target page is checked itself
                    continue
                stats["pages"] += 1
                # MathJax typesets asynchronously: wait until every math node is rendered (or time out).
                t0 = time.time()
                while True:
                    n_mjx, n_math, has_mj = d.execute_script(_JS_MATH)
                    if n_math == 0 or n_mjx >= n_math or time.time() - t0 > timeout_s:
                        break
                    time.sleep(0.2)
                if n_math:
                    stats["math_blocks"] += n_math
                    if not has_mj:
                        problems.append(f"{rel}: MathJax did not load")
                    elif n_mjx < n_math:
                        problems.append(f"{rel}: only {n_mjx}/{n_math} math elements typeset")
                for src, ok in d.execute_script(_JS_IMAGES):
                    stats["images"] += 1
                    if not ok:
                        problems.append(f"{rel}: image failed to load: {src}")
                if page == root:
                    box, fig, table = d.execute_script(_JS_FIRST_SCREEN)
                    stats["first_screen"] = {"box": box, "figure": fig, "table": table}
                    why = first_screen_problem(box)
                    if why:
                        problems.append(f"{rel}: {why}")
                column = d.execute_script(_JS_COLUMN)
                stats["column_px"] = column if stats["column_px"] is None else min(stats["column_px"], column)
                for src, rw, nw, visible in d.execute_script(_JS_IMG_SIZES):
                    u = urlparse(src or "")
                    if not visible or u.scheme in ("http", "https", "data"):
                        continue
                    rec, software = _png_info((page.parent / unquote(u.path)).resolve())
                    if rec is not None:
                        stats["figures_checked"] += 1
                    for why in image_problems(rec, rw, nw, software, code_ids=code_ids):
                        problems.append(f"{rel}: image {Path(u.path).name[:16]}…: {why}")
                for fid in d.execute_script(_JS_FIGS):
                    problems.append(f"{rel}: figure {fid} has no image (a glued figure rendered as text?)")
                text = d.execute_script(_JS_TEXT)
                if "<Figure size" in text:
                    problems.append(f"{rel}: a matplotlib figure was rendered as text ('<Figure size ...>')")
                if "<IPython.core.display." in text:   # e.g. an empty Markdown("") prints its repr
                    problems.append(f"{rel}: a display object was rendered as its repr ('<IPython.core.display...>')")
                problems += [f"{rel}: {p}" for p in _page_problems(d, page, stats, code_ids, digests)]
                ids_cache[page] = set(d.execute_script(_JS_IDS))
                for href in d.execute_script(_JS_LINKS):
                    u = urlparse(href)
                    if u.scheme in ("http", "https", "mailto") or href.startswith("javascript:"):
                        continue
                    stats["links"] += 1
                    target = page if not u.path else (page.parent / unquote(u.path)).resolve()
                    if target.is_dir():
                        target = target / "index.html"
                    if not target.exists():
                        problems.append(f"{rel}: broken link {href}")
                        continue
                    if u.fragment and target.suffix == ".html":
                        if target not in ids_cache:
                            ids_cache[target] = set(re.findall(r'id="([^"]+)"', target.read_text(errors="replace")))
                        if unquote(u.fragment) not in ids_cache[target]:
                            problems.append(f"{rel}: broken anchor {href}")
        finally:
            d.quit()
    return problems, stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.book.htmlcheck", description=__doc__.split("\n")[0])
    ap.add_argument("html_dir", nargs="?", default="_build/html", type=Path)
    ap.add_argument("--code-id", action="append", metavar="REGEX",
                    help="a regex of internal names prose must not show (repeat; replaces the default list)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    problems, stats = check(args.html_dir, code_ids=tuple(args.code_id) if args.code_id else CODE_ID_PATTERNS)
    print(f"htmlcheck: {stats.get('pages', 0)} pages, {stats.get('images', 0)} images "
          f"({stats.get('figures_checked', 0)} figures with a text-size record), {stats.get('tables', 0)} visible "
          f"tables (+{stats.get('hidden_tables', 0)} collapsed, measured expanded; "
          f"{stats.get('unmeasured_tables', 0)} not measurable), {stats.get('math_blocks', 0)} math elements "
          f"({stats.get('math_displays', 0)} displays measured), {stats.get('links', 0)} local links checked; "
          f"content column {stats.get('column_px')} px at a {WINDOW[0]}-px window")
    fs = stats.get("first_screen")
    if fs:
        def top(x):
            return "none" if x is None else f"{x[0]:.0f}–{x[1]:.0f} px"
        print(f"htmlcheck: root page at {FIRST_SCREEN[0]} × {FIRST_SCREEN[1]}: 'What we found' box {top(fs['box'])}, "
              f"first figure {top(fs['figure'])}, first table {top(fs['table'])} down the page")
    for p in problems:
        print("  PROBLEM:", p)
    print("htmlcheck:", "FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
