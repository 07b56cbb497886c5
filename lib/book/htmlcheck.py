"""Headless-Chromium check of the built book at a 1280-px window: every page loads, math is typeset, every image
loads, no broken links, no table wider than its container, no figure whose text renders below 8 pt.

    python -m lib.book.htmlcheck _build/html

Uses Debian's `chromium` + `chromium-driver` (run as --headless --no-sandbox --disable-gpu) through Selenium.
Checks per page: no JavaScript-visible load failure; every <img> has `complete && naturalWidth > 0`; every page that
contains TeX has MathJax output (`mjx-container`) and no raw `\\(`/`$$` left in the text; every local link target
(file and #anchor) exists; every visible <table> fits its container (its rendered width ≤ the width of its parent
and of the content column — a wider table would scroll sideways; a table in a collapsed cell is not visible and not
checked); every figure PNG written by `lib.book.plotting` carries a record of its smallest text size (pt at its
dpi), which is scaled by the image's rendered width / natural width and must stay ≥ `MIN_TEXT_PT`, and of the
overlaps the figure check found, which must be none. A Matplotlib PNG without that record (a figure that bypassed
the book's formatter) is a problem too. Exits 1 with a list of problems.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

_JS_IMAGES = "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]);"
_JS_LINKS = "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'));"
_JS_FIGS = ("return Array.from(document.querySelectorAll('figure')).filter(f => !f.querySelector('img, svg, table'))"
            ".map(f => f.id || '(figure without id)');")
_JS_TEXT = "return document.body.innerText;"
_JS_IDS = "return Array.from(document.querySelectorAll('[id]')).map(e => e.id);"
_JS_MATH = ("return [document.querySelectorAll('mjx-container').length, "
            "document.querySelectorAll('.math, div.math, span.math').length, "
            "typeof MathJax !== 'undefined' && MathJax.startup ? 1 : 0];")


_JS_COLUMN = ("const a = document.querySelector('article.bd-article') || document.querySelector('main') || "
              "document.body || document.documentElement; const cs = getComputedStyle(a); "
              "return a.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);")
_JS_TABLES = ("const a = document.querySelector('article.bd-article') || document.querySelector('main') || "
              "document.body || document.documentElement; const cs = getComputedStyle(a); "
              "const col = a.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight); "
              "return Array.from(document.querySelectorAll('table')).map((t, i) => { "
              "const r = t.getBoundingClientRect(); const p = t.parentElement; "
              "const cap = (t.closest('figure, .cell, section') || {}).id || ''; "
              "const head = (t.querySelector('th, td') || {textContent: ''}).textContent.trim().slice(0, 40); "
              "return [i, r.width, Math.max(r.width, t.scrollWidth), p ? p.clientWidth : col, col, "
              "r.width > 0 && r.height > 0 && (!t.checkVisibility || t.checkVisibility()), cap, head]; });")
_JS_IMG_SIZES = ("return Array.from(document.images).map(i => { const r = i.getBoundingClientRect(); "
                 "return [i.getAttribute('src'), r.width, i.naturalWidth, "
                 "r.width > 0 && r.height > 0 && (!i.checkVisibility || i.checkVisibility())]; });")
WINDOW = (1280, 1000)     # CSS px: the width the book is checked at


def table_problem(rendered_w: float, content_w: float, parent_w: float, column_w: float, tol_px: float = 1.0):
    """A one-line problem when a table (rendered width, content width incl. overflow) is wider than its parent or
    than the content column (CSS px); None when it fits."""
    limit = min(parent_w, column_w)
    w = max(rendered_w, content_w)
    if w > limit + tol_px:
        return f"table is {w:.0f} px wide, its container {limit:.0f} px (it would scroll sideways)"
    return None


def image_problems(rec: dict | None, rendered_w: float, natural_w: float, software: str = "",
                   min_pt: float | None = None) -> list[str]:
    """Problems of one figure image from its PNG record (`lib.book.plotting.figure_record`), its rendered and
    natural widths (px). Text renders at min_text_pt · (dpi / 72) · (rendered / natural) CSS px = that × 3/4 pt."""
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


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--allow-file-access-from-files", f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", "--hide-scrollbars"):
        opts.add_argument(a)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    drv = shutil.which("chromedriver")
    if not binary or not drv:
        raise RuntimeError("chromium and chromedriver are needed: apt-get install -y chromium chromium-driver")
    opts.binary_location = binary
    return webdriver.Chrome(service=Service(drv), options=opts)


def check(html_dir: Path, timeout_s: float = 20.0) -> tuple[list[str], dict]:
    """(problems, stats) of every page under `html_dir` (see the module docstring)."""
    html_dir = Path(html_dir).resolve()
    pages = sorted(p for p in html_dir.rglob("*.html")
                   if not any(part in ("_static", "_sources", "_images") for part in p.relative_to(html_dir).parts)
                   and p.name not in ("genindex.html", "search.html"))
    if not pages:
        return [f"no HTML pages under {html_dir}"], {}
    problems, stats = [], {"pages": 0, "images": 0, "math_blocks": 0, "links": 0, "tables": 0, "hidden_tables": 0,
                           "figures_checked": 0, "column_px": None}
    ids_cache: dict[Path, set] = {}
    d = _driver()
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
            column = d.execute_script(_JS_COLUMN)
            stats["column_px"] = column if stats["column_px"] is None else min(stats["column_px"], column)
            for i, rw, cw, pw, colw, visible, where, head in d.execute_script(_JS_TABLES):
                if not visible:
                    stats["hidden_tables"] += 1
                    continue
                stats["tables"] += 1
                why = table_problem(rw, cw, pw, colw)
                if why:
                    problems.append(f"{rel}: table {i + 1}{' in #' + where if where else ''} (first cell "
                                    f"{head!r}): {why}")
            for src, rw, nw, visible in d.execute_script(_JS_IMG_SIZES):
                u = urlparse(src or "")
                if not visible or u.scheme in ("http", "https", "data"):
                    continue
                rec, software = _png_info((page.parent / unquote(u.path)).resolve())
                if rec is not None:
                    stats["figures_checked"] += 1
                for why in image_problems(rec, rw, nw, software):
                    problems.append(f"{rel}: image {Path(u.path).name[:16]}…: {why}")
            for fid in d.execute_script(_JS_FIGS):
                problems.append(f"{rel}: figure {fid} has no image (a glued figure rendered as text?)")
            text = d.execute_script(_JS_TEXT)
            if "<Figure size" in text:
                problems.append(f"{rel}: a matplotlib figure was rendered as text ('<Figure size ...>')")
            if "<IPython.core.display." in text:   # e.g. an empty Markdown("") prints its repr
                problems.append(f"{rel}: a display object was rendered as its repr ('<IPython.core.display...>')")
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
                        import re
                        ids_cache[target] = set(re.findall(r'id="([^"]+)"', target.read_text(errors="replace")))
                    if unquote(u.fragment) not in ids_cache[target]:
                        problems.append(f"{rel}: broken anchor {href}")
    finally:
        d.quit()
    return problems, stats


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    html_dir = Path(argv[0] if argv else "_build/html")
    problems, stats = check(html_dir)
    print(f"htmlcheck: {stats.get('pages', 0)} pages, {stats.get('images', 0)} images "
          f"({stats.get('figures_checked', 0)} figures with a text-size record), {stats.get('tables', 0)} visible "
          f"tables ({stats.get('hidden_tables', 0)} collapsed), {stats.get('math_blocks', 0)} math elements, "
          f"{stats.get('links', 0)} local links checked; content column {stats.get('column_px')} px at a "
          f"{WINDOW[0]}-px window")
    for p in problems:
        print("  PROBLEM:", p)
    print("htmlcheck:", "FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
