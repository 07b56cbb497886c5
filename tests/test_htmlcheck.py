"""lib/book/htmlcheck.py: its rules as pure functions, and each defect planted in a tiny page checked in headless
Chromium. The browser tests skip, with the install command, when Chromium is not installed — unless
HTML_CHECK=required (CI), where a missing browser fails them."""
import importlib.metadata
import os

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from lib.book import htmlcheck, plotting


def test_table_rule():
    assert htmlcheck.table_problem(600, 600, 688, 688) is None
    assert htmlcheck.table_problem(688.5, 688.5, 688, 688) is None             # sub-pixel rounding is not a problem
    assert "1200 px wide, its container 688 px" in htmlcheck.table_problem(688, 1200, 688, 688)   # scrolls inside
    assert "its container 400 px" in htmlcheck.table_problem(900, 900, 400, 688)


def test_math_rule():
    assert htmlcheck.math_problem(600, 676, 676, 676) is None
    assert htmlcheck.math_problem(676.5, 676, 700, 700) is None
    assert "900 px wide, its container 640 px" in htmlcheck.math_problem(900, 640, 676, 676)   # eq. number beside
    assert "its container 300 px" in htmlcheck.math_problem(400, 1000, 300, 676)               # narrow parent


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
    legend = htmlcheck.image_problems({**rec, "texts": ["paper", "paper_rb512+fix_b7"]}, 672, 1000)
    assert legend == ["figure text 'paper_rb512+fix_b7' shows internal name 'paper_rb512+fix_b7'"]


def test_name_rule():
    names = htmlcheck.name_problems
    assert names("paper_rb512+fix_b7 beside paper+fix_split_sm32, then paper_rb512+fix_b7 again") == [
        "paper_rb512+fix_b7", "paper+fix_split_sm32"]                         # overlapping matches are one name
    assert names("the delta_fp32_o arm and paper_untiled") == ["delta_fp32_o", "paper_untiled"]
    assert names("Issue 16 asks; issue 15's target; issue #3") == ["Issue 16", "issue 15", "issue #3"]
    assert names("FA2_sm32 and x_b7") == ["_sm32", "_b7"]
    # math written as text, URLs, ordinary words and '+' between short symbols are not internal names
    assert names("W_Q grows with dW_Q and r_m; see https://example.org/flash_attn_x; C++, a+b, tissue 3") == []
    assert names("paper_rb512", code_ids=()) == [] and names("issue 9", code_ids=()) == ["issue 9"]


def test_path_rule():
    names = htmlcheck.name_problems
    assert names("lib.training.loop calls kernels.attention; torch.nn.functional too") == [
        "lib.training.loop", "kernels.attention", "torch.nn.functional"]
    assert names("see lib/census.py, results/full/headline.json, .ci/run and README.md") == [
        "lib/census.py", "results/full/headline.json", ".ci/run", "README.md"]
    # ordinary words, units, versions, abbreviations, a sentence's last word and math written as text are not paths
    assert names("e.g. the kernels. Then 1.5 M tokens/s, 400 TFLOP/s, v2.5.1, i.e. W_Q.T and x.y; lib. tests.") == []
    assert names("https://example.org/lib/census.py") == []                 # a URL is not read


def test_process_rule():
    words = htmlcheck.process_problems
    assert words("cut off when the session's GPU time ran out, the most one machine call allows") == [
        "session", "GPU time", "machine call"]
    assert words("a feasibility probe in our Reference Notes; the probe; device time; lr from $HEADLINE_LR") == [
        "feasibility probe", "Reference Notes", "the probe", "device time", "$HEADLINE_LR"]
    assert words("possession, probes the space, a GPU timing, $5 and $x$ are fine") == []


def test_bold_rule():
    assert htmlcheck.bold_problem(1000, {"<strong>/<b>": 150}) is None       # at the limit
    wall = htmlcheck.bold_problem(1000, {"<strong>/<b>": 60, "glued values": 300},
                                  ["Takeaway:", "the output drifts one way", "0.25"])
    assert wall == ("bold wall: 36 % of the page's prose renders bold (360 of 1000 characters, at most 15 %: 300 in "
                    "glued values, 60 in <strong>/<b>; 3 bold spans), longest 'the output drifts one way'")
    assert htmlcheck.bold_problem(300, {"<strong>/<b>": 290}) is None        # too little prose to judge


def test_duplicate_rule():
    assert htmlcheck.duplicate_problems([("a.png", "h1", "f1"), ("b.png", "h2", "f2")]) == []
    same_src = htmlcheck.duplicate_problems([("_images/a.png", "h1", "f1"), ("x.png", "h3", ""),
                                             ("_images/a.png", "h1", "f2")])
    assert same_src == ["image a.png is shown 2 times (same src; in #f1, #f2)"]
    same_bytes = htmlcheck.duplicate_problems([("a.png", "h1", "f1"), ("b.png", "h1", "f2"), ("c.png", "", "")])
    assert same_bytes == ["image a.png is shown 2 times (same content: a.png, b.png; in #f1, #f2)"]
    assert htmlcheck.duplicate_problems([("r1.png", "", ""), ("r2.png", "", "")]) == []   # unknown content
    inline = "data:image/png;base64,iVBORw0KGgo/AAAA"
    assert htmlcheck.duplicate_problems([(inline, "h4", "f1"), (inline, "h4", "f2")]) == [
        "image an inline data: image is shown 2 times (same src; in #f1, #f2)"]


def test_browser_paths_follow_the_environment(monkeypatch):
    monkeypatch.setenv("CHROMIUM", "")
    monkeypatch.setenv("CHROMEDRIVER", "sh")                  # any executable on PATH stands in for the driver
    chromium, driver = htmlcheck.browser_paths()
    assert chromium is None and driver and driver.endswith("/sh")


def _need_browser():
    """Skip when Chromium or its driver is missing; fail instead under HTML_CHECK=required (CI)."""
    if all(htmlcheck.browser_paths()):
        return
    why = f"headless Chromium is not installed, the HTML check is not tested: {htmlcheck.INSTALL}"
    if os.environ.get("HTML_CHECK") == "required":
        pytest.fail(f"HTML_CHECK=required: {why}")
    pytest.skip(why)


def test_missing_browser_skips_unless_required(monkeypatch):
    monkeypatch.setenv("CHROMIUM", "")
    monkeypatch.delenv("HTML_CHECK", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium chromium-driver"):
        _need_browser()
    monkeypatch.setenv("HTML_CHECK", "required")
    with pytest.raises(pytest.fail.Exception, match="HTML_CHECK=required"):
        _need_browser()


@pytest.fixture(scope="module")
def chromium():
    _need_browser()


def _png(path, fontsize, with_record=True):
    fig, ax = plotting.figure(height=2.5)
    ax.plot(np.arange(5), np.arange(5))
    ax.set_xlabel("step", fontsize=fontsize)
    if with_record:
        path.write_bytes(plotting.png_bytes(fig))
    else:
        fig.savefig(path, format="png")
    plt.close(fig)


def test_planted_page(tmp_path, chromium):
    _png(tmp_path / "good.png", 10)
    _png(tmp_path / "small.png", 6)
    _png(tmp_path / "bare.png", 10, with_record=False)
    wide = "x" * 300
    (tmp_path / "page.html").write_text(f"""<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><main>
<div style="width:400px"><table><tr><th>a</th></tr><tr><td>{wide}</td></tr></table></div>
<div style="width:400px"><table><tr><th>fits</th></tr><tr><td>1</td></tr></table></div>
<details><summary>raw data</summary><table><tr><td>narrow</td></tr></table></details>
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


# --- one defect per page, all pages checked in one browser session --------------------------------------------------

def _mathjax_uri() -> str:
    js = importlib.metadata.distribution("sphinx-mathjax-offline").locate_file(
        "sphinx-mathjax-offline/static/mathjax/tex-chtml.js")
    return js.resolve().as_uri()


# The rules of the book's themes that decide what is collapsed and how math overflows (pydata-sphinx-theme,
# sphinx-togglebutton), so the planted pages behave as the built book does.
_CSS = """div.math { align-items: center; display: flex; max-width: 100%; overflow: hidden; }
div.math mjx-container { flex-grow: 1; overflow: auto; }
span.pasted-text { font-weight: bold; }
.admonition.toggle-hidden .admonition-title ~ * { height: 0; margin: 0; opacity: 0; visibility: hidden;
  display: block; }"""
_WIDE_ROW = "".join(f"<td>{12345.678901 + i:.6f}</td>" for i in range(20))     # ~1,800 px of unbreakable numbers
_LONG_SUM = " + ".join(f"a_{{{i}}} b_{{{i}}}" for i in range(60))
_PROSE = ("The bias is one-signed across the tied keys, so the output drifts the same way at every step and the "
          "weights it feeds grow along one direction.")
PAGES = {
    "clean": """
<p><strong>Takeaway:</strong> the bias is one-signed | a bar inside a sentence is fine.</p>
<p>W_Q and r_m grow; see <a href="https://example.org/flash_attn_x">https://example.org/flash_attn_x</a>.</p>
<p>The arm <code>paper_rb512+fix_b7</code> is named in code.</p>
<pre>paper+fix_split_sm32 and issue 15 inside a code block</pre>
<div class="cell"><div class="cell_input"><div class="highlight"><pre>delta_fp32_o = 1</pre></div></div>
<div class="cell_output"><div class="output stream"><pre>paper_untiled</pre></div></div></div>
<details class="hide below-input"><summary>Show output</summary><table><tr><td>narrow</td></tr></table></details>
<div class="math notranslate nohighlight">\\[ x^2 + y^2 = z^2 \\]</div>
<figure id="fig-a"><img src="a.png" alt="a"><figcaption><p>A figure shown once.</p></figcaption></figure>
<figure id="fig-b"><img src="b.png" alt="b"><figcaption><p>Another figure.</p></figcaption></figure>
<p>Run <code>python -m lib.experiments headline</code>, read <code>lib/census.py</code> or
<a href="https://example.org/lib/census.py">the census code</a>: e.g. 1.5 M tokens/s at 400 TFLOP/s, i.e. fast.</p>
<pre>the session's GPU time, $HEADLINE_LR and results/full/headline.json inside a code block</pre>""",
    "dup_src": """<figure id="fig-1"><img src="a.png" alt="a"></figure>
<figure id="fig-2"><img src="a.png" alt="a again"></figure>""",
    "dup_content": """<figure id="fig-1"><img src="a.png" alt="a"></figure>
<figure id="fig-2"><img src="a_copy.png" alt="a copied"></figure>""",
    "pipe": "<p>| arm | outcome |\n|---|---|\n| paper | exploded |</p>",
    "math": f"""<div style="width:400px"><div class="math notranslate nohighlight">\\[ {_LONG_SUM} \\]</div></div>
<div id="bare" style="width:400px; overflow:visible"><div style="display:block">\\[ {_LONG_SUM} \\]</div></div>""",
    "details_table": f"""<section id="raw"><div class="cell tag_hide-output"><details class="hide below-input">
<summary>Show code cell output</summary><div class="cell_output"><div class="output text_html">
<table class="dataframe"><tr><th>seed</th></tr><tr>{_WIDE_ROW}</tr></table></div></div></details></div></section>""",
    "toggle_table": f"""<div class="admonition dropdown toggle toggle-hidden" id="tg"><p class="admonition-title">
Per-seed values</p><table><tr><th>lr</th></tr><tr>{_WIDE_ROW}</tr></table></div>""",
    "bold": """<p><strong>The bias is one-signed across the tied keys, so the output drifts.</strong></p>
<p><b>A glued sentence</b>.</p>""",
    "names": """<p>The paper_rb512+fix_b7 arm explodes.</p>
<table><tr><th>arm</th></tr><tr><td>paper+fix_split_sm32</td></tr></table>
<figure id="fig-x"><img src="a.png" alt="a"><figcaption><p>delta_fp32_o against paper_untiled.</p></figcaption>
</figure><ul><li>As Issue 16 asks.</li></ul>""",
    "paths": """<h2 id="h">The loop in lib.training.loop</h2>
<p>The kernel (kernels.attention) is in lib/census.py; see <a href="paths.html">results/full/headline.json</a>.</p>
<table><tr><th>run</th></tr><tr><td>lib.studies.dose.reading</td></tr></table>""",
    "process": """<p>The run stopped when the session ran past its GPU time.</p>
<table><tr><td>LR from $HEADLINE_LR</td></tr></table>
<figure id="fig-p"><img src="a.png" alt="a"><figcaption><p>As the probe in our reference notes saw.</p></figcaption>
</figure>""",
    # ~7 % bold (a label and a key phrase per paragraph; bold code is code, headings and table headers structure)
    "bold_ok": "".join(f"<h2>A bold heading of some length, {i}</h2><p><strong>Step {i}:</strong> {_PROSE} "
                       f"<strong>It drifts.</strong> {_PROSE}<strong><code>{'x' * 300}</code></strong></p>"
                       f"<table><tr><th>{_PROSE}</th></tr><tr><td>1</td></tr></table>" for i in range(3)),
    # ~40 % bold: a bold sentence in every paragraph
    "bold_wall": "".join(f"<p><strong>{_PROSE}</strong> {_PROSE} {_PROSE[:40]}</p>" for i in range(3)),
    # glued values, bold by myst-nb's style sheet: a number or phrase in bold in every clause
    "bold_glued": "".join(f'<p>The bias is <span class="pasted-text">-0.25 ULP per step</span>, the drift '
                          f'<span class="pasted-text">3.2e-4 of the weight norm</span> and the share '
                          f'<span class="pasted-text">the same sign in 97 % of rows</span>.</p>' for i in range(6)),
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory, chromium):
    """{page name: its problems} of every page in PAGES, checked in one run."""
    root = tmp_path_factory.mktemp("site")
    for name, color in (("a", "red"), ("b", "blue")):
        Image.new("RGB", (120, 80), color).save(root / f"{name}.png")
    (root / "a_copy.png").write_bytes((root / "a.png").read_bytes())
    head = (f'<meta charset="utf-8"><style>{_CSS}</style>'
            f'<script id="MathJax-script" async src="{_mathjax_uri()}"></script>')
    for name, body in PAGES.items():
        (root / f"{name}.html").write_text(f"<!DOCTYPE html><html><head>{head}</head><body><main>{body}</main>"
                                           f"</body></html>")
    problems, stats = htmlcheck.check(root, timeout_s=10.0)
    assert stats["pages"] == len(PAGES)
    by_page = {name: [] for name in PAGES}
    for p in problems:
        page, _, what = p.partition(".html: ")
        by_page[page].append(what)
    return by_page


def test_clean_page_passes(planted):
    assert planted["clean"] == []


def test_duplicate_images(planted):
    assert planted["dup_src"] == ["image a.png is shown 2 times (same src; in #fig-1, #fig-2)"]
    assert planted["dup_content"] == ["image a.png is shown 2 times (same content: a.png, a_copy.png; in #fig-1, "
                                      "#fig-2)"]


def test_pipe_table_as_text(planted):
    assert planted["pipe"] == ["paragraph starts with '|' (a pipe table printed as text): "
                               "'| arm | outcome | |---|---| | paper | exploded |'"]


def test_math_wider_than_its_container(planted):
    both = planted["math"]
    assert len(both) == 2, both
    for p in both:                                   # a scrolled display (theme CSS) and one that sticks out
        assert p.startswith("math 'a_{0} b_{0} + a_{1} b_{1}") and "display equation is" in p
        assert "its container 400 px (cut off at the right or needs a scrollbar)" in p
    assert " in #bare: " in both[1]


def test_collapsed_tables_are_measured_expanded(planted):
    for page, where in (("details_table", "raw"), ("toggle_table", "tg")):
        (p,) = planted[page]
        assert p.startswith(f"collapsed table 1 in #{where} (first cell ") and " once expanded: table is " in p
        assert int(p.split("table is ")[1].split(" px")[0]) > 1000


def test_whole_bold_paragraphs(planted):
    assert planted["bold"] == [
        "paragraph is bold from end to end (<strong> wraps its whole text): "
        "'The bias is one-signed across the tied keys, so the output d'",
        "paragraph is bold from end to end (<strong> wraps its whole text): 'A glued sentence.'"]


def test_internal_names_in_prose_tables_and_captions(planted):
    assert planted["names"] == [
        "internal name 'paper_rb512+fix_b7' in <p>: 'The paper_rb512+fix_b7 arm explodes.'",
        "internal name 'paper+fix_split_sm32' in <td>: 'paper+fix_split_sm32'",
        "internal name 'delta_fp32_o' in <figcaption> in #fig-x: 'delta_fp32_o against paper_untiled.'",
        "internal name 'paper_untiled' in <figcaption> in #fig-x: 'delta_fp32_o against paper_untiled.'",
        "internal name 'Issue 16' in <li>: 'As Issue 16 asks.'"]


def test_module_and_file_paths_outside_code(planted):
    assert planted["paths"] == [
        "internal name 'lib.training.loop' in <h2> in #h: 'The loop in lib.training.loop'",
        "internal name 'kernels.attention' in <p>: 'The kernel (kernels.attention) is in lib/census.py; see res…'",
        "internal name 'lib/census.py' in <p>: '…nel (kernels.attention) is in lib/census.py; see "
        "results/full/headline.js…'",
        "internal name 'results/full/headline.json' in <p>: '…ion) is in lib/census.py; see "
        "results/full/headline.json.'",
        "internal name 'lib.studies.dose.reading' in <td>: 'lib.studies.dose.reading'"]


def test_process_words(planted):
    assert planted["process"] == [
        "process word 'session' in <p>: 'The run stopped when the session ran past its GPU time.'",
        "process word 'GPU time' in <p>: '…when the session ran past its GPU time.'",
        "process word '$HEADLINE_LR' in <td>: 'LR from $HEADLINE_LR'",
        "process word 'the probe' in <figcaption> in #fig-p: 'As the probe in our reference notes saw.'",
        "process word 'reference notes' in <figcaption> in #fig-p: 'As the probe in our reference notes saw.'"]


def test_bold_walls(planted):
    assert planted["bold_ok"] == []
    (p,) = planted["bold_wall"]
    assert p.startswith("bold wall: ") and " in <strong>/<b>; 3 bold spans), longest 'The bias is one-signed" in p
    assert 30 <= int(p.split("bold wall: ")[1].split(" %")[0]) <= 45
    (g,) = planted["bold_glued"]
    assert g.startswith("bold wall: ") and " in glued values; 18 bold spans), longest 'the same sign in 97" in g


# --- the root page's first screen: its "What we found" box must end within 800 px ------------------------------------

def test_first_screen_rule(tmp_path):
    assert htmlcheck.first_screen_problem((300, 790)) is None
    assert htmlcheck.first_screen_problem((300, 800.5)) is None                 # sub-pixel rounding
    assert "ends 1200 px down the root page (starts at 600), below the first screen (1280 × 800 px)" in \
        htmlcheck.first_screen_problem((600, 1200))
    assert "no 'What we found' box" in htmlcheck.first_screen_problem(None)
    assert htmlcheck.root_page(tmp_path) is None                                # no index.html: not a book
    (tmp_path / "intro.html").write_text("<html></html>")
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=intro.html" />')
    assert htmlcheck.root_page(tmp_path) == (tmp_path / "intro.html").resolve()
    (tmp_path / "index.html").write_text("<html><body>the root itself</body></html>")
    assert htmlcheck.root_page(tmp_path) == (tmp_path / "index.html").resolve()


def _book(root, body):
    root.mkdir()
    (root / "index.html").write_text('<!DOCTYPE html><html><head><meta http-equiv="Refresh" content="0; '
                                     'url=home.html" /></head></html>')
    (root / "home.html").write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><main>{body}'
                                    f'</main></body></html>')
    (root / "other.html").write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><main>'
                                     '<div style="height:2000px"></div></main></body></html>')   # not the root


def test_planted_first_screen(tmp_path, chromium):
    box = (f'<div class="admonition {htmlcheck.FIRST_SCREEN_BOX}"><p class="admonition-title">What we found</p>'
           '<ul><li>A finding.</li></ul></div>')
    _book(tmp_path / "low", f'<div style="height:900px"></div>{box}')
    problems, stats = htmlcheck.check(tmp_path / "low")
    assert len(problems) == 1 and problems[0].startswith("home.html: the 'What we found' box ends "), problems
    assert stats["first_screen"]["box"][0] >= 900
    _book(tmp_path / "none", "<p>No box here.</p>")
    problems, _ = htmlcheck.check(tmp_path / "none")
    assert problems == ["home.html: the root page has no 'What we found' box (an element of class "
                        "'what-we-found')"]
    _book(tmp_path / "high", f'<h1>A title</h1>{box}<figure><img src="x.png" alt="x"></figure>')
    Image.new("RGB", (120, 80), "red").save(tmp_path / "high" / "x.png")
    problems, stats = htmlcheck.check(tmp_path / "high")
    assert problems == [], problems
    fs = stats["first_screen"]
    assert fs["box"][1] <= 800 and fs["figure"][0] >= fs["box"][1] and fs["table"] is None
