"""lib/book/toc.py reads the chapters of _toc.yml; the causal-chain figure names only chapters that exist."""
import matplotlib.pyplot as plt

from lib.book import toc
from lib.claims import chain


def _book(tmp_path, numbered):
    """A toc with the given chapter files (each with a title) plus an unnumbered appendix page."""
    (tmp_path / "chapters").mkdir(parents=True)
    lines = ["format: jb-book", "root: intro", "parts:", "  - caption: c", "    chapters:"]
    for stem, title in numbered:
        (tmp_path / "chapters" / f"{stem}.md").write_text(f"---\nx: 1\n---\n\n# {title}\n\ntext\n## sub\n")
        lines.append(f"      - file: chapters/{stem}")
    (tmp_path / "chapters" / "reproduce.md").write_text("# Reproducing\n")
    lines.append("      - file: chapters/reproduce")
    (tmp_path / "_toc.yml").write_text("\n".join(lines) + "\n")
    return tmp_path / "_toc.yml"


def test_chapters_read_numbers_and_titles(tmp_path):
    t = _book(tmp_path, [("01-a", "1. First"), ("04-biased", "4. The biased output")])
    cs = toc.chapters(t)
    assert [(c.number, c.title) for c in cs] == [(1, "First"), (4, "The biased output"), (None, "Reproducing")]
    assert set(toc.by_number(t)) == {1, 4}


def test_chapter_span():
    assert toc.chapter_span((1, 2), {1, 2, 6}) == "ch. 1–2"
    assert toc.chapter_span((5, 6), {1, 6}) == "ch. 6"
    assert toc.chapter_span((4,), {1, 6}) == ""
    assert toc.chapter_span((1, 2, 4), {1, 2, 4}) == "ch. 1–2, 4"


def test_chain_names_only_chapters_in_the_toc(tmp_path):
    without = chain.chain_labels(_book(tmp_path / "a", [("01-a", "1. A"), ("02-b", "2. B"), ("06-c", "6. C")]))
    assert [ch for _, ch in without] == ["ch. 1–2", "ch. 1", chain.NOT_IN_BOOK, chain.NOT_IN_BOOK,
                                         chain.NOT_IN_BOOK, "ch. 6", "ch. 6"]
    full = [(f"0{n}-x", f"{n}. X") for n in range(1, 8)]
    with_all = chain.chain_labels(_book(tmp_path / "b", full))
    assert [ch for _, ch in with_all] == ["ch. 1–2", "ch. 1", "ch. 4", "ch. 4", "ch. 5", "ch. 5–6", "ch. 6"]
    fig = chain.causal_chain_figure(tmp_path / "a" / "_toc.yml")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count(chain.NOT_IN_BOOK) == 3 and not any("ch. 4" in t or "ch. 5" in t for t in texts)
    assert any(t.startswith("β fix (no chapter yet)") for t in texts)   # no chapter 7 in this toc
    plt.close(fig)


def test_the_books_toc_lists_existing_files():
    for c in toc.chapters():
        assert (toc.ROOT / f"{c.file}.md").exists() or (toc.ROOT / f"{c.file}.ipynb").exists(), c.file
