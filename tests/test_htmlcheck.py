"""lib/book/htmlcheck.py: the table-width and figure-text rules, as pure functions and on a planted page in headless
Chromium (skipped, with the install command, when Chromium is not installed)."""
import shutil

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.book import htmlcheck, plotting


def test_table_rule():
    assert htmlcheck.table_problem(600, 600, 688, 688) is None
    assert htmlcheck.table_problem(688.5, 688.5, 688, 688) is None             # sub-pixel rounding is not a problem
    assert "1200 px wide, its container 688 px" in htmlcheck.table_problem(688, 1200, 688, 688)   # scrolls inside
    assert "its container 400 px" in htmlcheck.table_problem(900, 900, 400, 688)


def test_image_rule():
    rec = {"min_text_pt": 8.5, "dpi": 150.0, "problems": []}
    # natural 1000 px shown at 672: 8.5 pt · 150/72 px · 0.672 · 3/4 = 8.9 pt
    assert htmlcheck.image_problems(rec, 672, 1000) == []
    small = htmlcheck.image_problems(rec, 400, 1000)                           # 5.3 pt
    assert len(small) == 1 and "renders at 5.31 pt" in small[0]
    assert htmlcheck.image_problems({**rec, "problems": ["text 'a' overlaps text 'b'"]}, 672, 1000) == [
        "figure: text 'a' overlaps text 'b'"]
    assert htmlcheck.image_problems(None, 500, 500, software="Matplotlib version3.11") != []
    assert htmlcheck.image_problems(None, 500, 500, software="") == []          # not a figure of ours


def _png(path, fontsize, with_record=True):
    fig, ax = plotting.figure(height=2.5)
    ax.plot(np.arange(5), np.arange(5))
    ax.set_xlabel("step", fontsize=fontsize)
    if with_record:
        path.write_bytes(plotting.png_bytes(fig))
    else:
        fig.savefig(path, format="png")
    plt.close(fig)


@pytest.fixture(scope="module")
def chromium():
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        pytest.skip("headless Chromium is not installed: apt-get install -y chromium chromium-driver")


def test_planted_page(tmp_path, chromium):
    _png(tmp_path / "good.png", 10)
    _png(tmp_path / "small.png", 6)
    _png(tmp_path / "bare.png", 10, with_record=False)
    wide = "x" * 300
    (tmp_path / "page.html").write_text(f"""<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><main>
<div style="width:400px"><table><tr><th>a</th></tr><tr><td>{wide}</td></tr></table></div>
<div style="width:400px"><table><tr><th>fits</th></tr><tr><td>1</td></tr></table></div>
<details><summary>raw data</summary><table><tr><td>{wide}</td></tr></table></details>
<img src="good.png" alt="good">
<img src="small.png" alt="small" style="width:300px">
<img src="bare.png" alt="bare">
</main></body></html>""")
    problems, stats = htmlcheck.check(tmp_path)
    assert stats["tables"] == 2 and stats["hidden_tables"] == 1 and stats["figures_checked"] == 2
    tables = [p for p in problems if "table" in p]
    assert len(tables) == 1 and "its container 400 px" in tables[0] and "first cell 'a'" in tables[0]
    small = [p for p in problems if "renders at" in p]
    assert len(small) == 1 and "small.png"[:5] in small[0]
    bare = [p for p in problems if "no text-size record" in p]
    assert len(bare) == 1 and "bare.png" in bare[0]
    assert len(problems) == 3, problems
