"""Headless-Chromium check of the built book: every page loads, math is typeset, every image loads, no broken links.

    python -m lib.book.htmlcheck _build/html

Uses Debian's `chromium` + `chromium-driver` (run as --headless --no-sandbox --disable-gpu) through Selenium.
Checks per page: no JavaScript-visible load failure, every <img> has `complete && naturalWidth > 0`, every page that
contains TeX has MathJax output (`mjx-container`) and no raw `\\(`/`$$` left in the text, every local link target
(file and #anchor) exists. Exits 1 with a list of problems.
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


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--allow-file-access-from-files"):
        opts.add_argument(a)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    drv = shutil.which("chromedriver")
    if not binary or not drv:
        raise RuntimeError("chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver)")
    opts.binary_location = binary
    return webdriver.Chrome(service=Service(drv), options=opts)


def check(html_dir: Path, timeout_s: float = 20.0) -> tuple[list[str], dict]:
    html_dir = Path(html_dir).resolve()
    pages = sorted(p for p in html_dir.rglob("*.html")
                   if not any(part in ("_static", "_sources", "_images") for part in p.relative_to(html_dir).parts)
                   and p.name not in ("genindex.html", "search.html"))
    if not pages:
        return [f"no HTML pages under {html_dir}"], {}
    problems, stats = [], {"pages": 0, "images": 0, "math_blocks": 0, "links": 0}
    ids_cache: dict[Path, set] = {}
    d = _driver()
    try:
        for page in pages:
            d.get(page.as_uri())
            rel = page.relative_to(html_dir)
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
            for fid in d.execute_script(_JS_FIGS):
                problems.append(f"{rel}: figure {fid} has no image (a glued figure rendered as text?)")
            text = d.execute_script(_JS_TEXT)
            if "<Figure size" in text:
                problems.append(f"{rel}: a matplotlib figure was rendered as text ('<Figure size ...>')")
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
    print(f"htmlcheck: {stats.get('pages', 0)} pages, {stats.get('images', 0)} images, "
          f"{stats.get('math_blocks', 0)} math elements, {stats.get('links', 0)} local links checked")
    for p in problems:
        print("  PROBLEM:", p)
    print("htmlcheck:", "FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
