"""`lib.book.gluescan` finds the numbers typed into the book's prose (the rule: every number in the prose is glued).

On planted sources: typed numbers are caught, with their line; glued values, chapter and figure references, code
cells and fences, inline code, math, directive options, headings' numbers, link targets, names that carry digits and
the paper quotations of the allow-list are not.

On the real chapters the rule does not hold yet, so `test_typed_numbers_do_not_grow` is a ratchet: each source's
count of typed numbers must not exceed its ceiling in `CEILING` (the counts when the scanner was written), so the
count can only go down. A source not in `CEILING` (a new chapter) has ceiling 0. When you glue a chapter's typed
numbers, lower its ceiling to the new count (`python -m lib.book.gluescan` prints it) so they cannot come back.
"""
import textwrap
from pathlib import Path

import pytest

from lib.book import gluescan

ROOT = Path(__file__).resolve().parents[1]

# Typed numbers per source when the scanner was written; only ever lower these.
CEILING = {
    "intro.md": 0,
    "chapters/01-bf16-rounding.md": 0,
    "chapters/02-flash-attention-kernel.md": 0,
    "chapters/02b-where-can-the-chain-start.md": 0,
    "chapters/02c-the-chain-in-gpt2.md": 0,
    "chapters/03-numeric-deviation.md": 0,
    "chapters/04-biased-output.md": 0,
    "chapters/05-low-rank-accumulation.md": 0,
    "chapters/06-loss-explosion.md": 0,
    "chapters/07-the-fix.md": 0,
    "chapters/08-using-this-in-your-training.md": 0,
    "chapters/bibliography.md": 0,
    "chapters/reproduce.md": 0,
}

HEAD = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""


def numbers(src: str) -> list[str]:
    return [h.number for h in gluescan.scan_text(HEAD + textwrap.dedent(src))]


def test_typed_numbers_are_caught_with_their_line():
    src = HEAD + "# 3. A chapter\n\nWe trained for 1,200 steps at LR 3e-4\nwith 12 heads, 0.95 momentum; 95 % of runs.\n"
    hits = gluescan.scan_text(src, "x.md")
    assert [(h.line, h.number) for h in hits] == [(8, "1,200"), (8, "3e-4"), (9, "12"), (9, "0.95"), (9, "95 %")]
    assert hits[0].path == "x.md" and "1,200 steps" in hits[0].context


def test_settings_in_prose_tables_headings_and_titles_are_caught():
    assert numbers("""
        ## Before a blow-up: the 8e-3 contrast

        | gap | tied rows |
        |---|---|
        | 4 | {glue:text}`w_g4:.2f` |

        ```{admonition} Takeaway (LR 8e-3)
        :class: note
        The fix at β = 7 with 512-key tiles, seed 0, 10³ logits.
        ```

        1. **Inputs.** Of 16 rows.
        """) == ["8e-3", "4", "8e-3", "7", "512", "0", "10", "16"]


def test_glued_values_are_not_caught():
    assert numbers("""
        It trained {glue:text}`g_steps:,` steps in {glue:text}`g_wall:.1f` minutes
        ({glue:text}`g_n_tok_m:.1f` M tokens, {glue:text}`w_authors_g10_err:+.2f` ULP).

        ```{glue:figure} fig-gpt2-loss
        :name: fig-gpt2-loss
        :width: 80%

        The loss of {glue:text}`g_seed` seed.
        ```

        ```{glue:md} table_12
        :format: myst
        ```
        """) == []


def test_references_names_and_structure_are_not_caught():
    assert numbers("""
        # 2b. Where can the chain start?

        (label-2)=
        ## Step 2: the census

        Chapter 1 proved it; chapters 4–7 and chapters 3, 5 and 6 test it (chapter 1, chapter 2; Ch. 6; §4;
        the paper's Figs. 3 and 9, Fig. 9, Table 2, Sec. 4.2, link 3, appendix A). See
        [the data](https://example.org/v2/123.csv) and <https://arxiv.org/abs/2506.12345>, arXiv:2506.12345,
        {cite:t}`qiu2025lowprecision`, Qiu et al. (2025), Golden et al., 2024.
        GPT-2 124M, FlashAttention-2, FA2, FP32, BF16, H100, W_Q, L3, sha256, the 1-D Wasserstein-1 distance,
        heads counted from 1, 0-based layers.<!-- 42 --> <img width="300" src="x.png">
        """) == []


def test_code_and_math_are_not_caught():
    assert numbers("""
        Rounding `x.to(torch.bfloat16)` of $2^{-8}$ and $\\bar P=e^{S-m}$, with $m=3,\\dots,10$ and
        {math}`\\alpha_2`:

        $$
        E = \\frac{1}{12} \\sum_t w_t^2
        $$

        ```{code-cell} ipython3
        :tags: [remove-cell]
        glue("n", 12 * 64, display=False)
        ```

        ````{admonition} Nested
        ```python
        x = 3.5
        ```
        ````

        ```bash
        make book   # 2 cores
        ```
        """) == []


def test_formula_constants_written_as_text_are_not_caught_but_parameters_are():
    assert numbers("""
        Rows with Δδ > 0 and V < 0, where P̄ = 1 (exactly 1), give exp(−(β − 1)·r_m) < 1 and O = 0/0;
        a rank-1 sum, the lag-1 autocorrelation, x₁ = −ln(1 − 2⁻⁹), 4·B·H·T²·D/2. But β = 7, d = 32, N ∈ {40, 97}.
        """) == ["7", "32", "40", "97"]


def test_an_allowed_quotation_is_not_caught_and_the_same_numbers_elsewhere_are():
    quote = "The paper's GPT-2 small trained for about 6.6k steps"
    assert quote in gluescan.QUOTATIONS
    first, rest = quote.split(" small ")
    assert numbers(f"""
        {first}
        small {rest} before its loss exploded.
        Ours trained for about 6.6k steps.
        """) == ["6.6"]
    assert numbers("The paper traces its failure to layer 2; our census finds layer 2.\n") == ["2"]


def test_every_quotation_still_occurs_in_the_book():
    text = "\n".join(p.read_text(encoding="utf-8") for p in gluescan.book_sources())
    stale = [q for q in gluescan.QUOTATIONS if not gluescan._quotation_pattern(q).search(text)]
    assert stale == [], "quotations no chapter holds any more: remove them from gluescan.QUOTATIONS"


def test_the_command_exits_1_while_typed_numbers_remain(tmp_path, capsys):
    clean, typed = tmp_path / "clean.md", tmp_path / "typed.md"
    clean.write_text(HEAD + "It took {glue:text}`n` steps (chapter 2).\n")
    typed.write_text(HEAD + "It took 300 steps.\n")
    assert gluescan.main([str(clean)]) == 0
    assert gluescan.main([str(clean), str(typed), "--allowed"]) == 1
    out = capsys.readouterr().out
    assert "typed.md:6: '300'" in out and "allowed" in out and "chapter 2" in out


@pytest.mark.parametrize("path", [str(p.relative_to(ROOT)) for p in gluescan.book_sources()])
def test_typed_numbers_do_not_grow(path):
    """Ratchet over the real sources: at most CEILING[path] typed numbers (0 for a source not listed)."""
    hits = gluescan.scan(ROOT / path)
    ceiling = CEILING.get(path, 0)
    assert len(hits) <= ceiling, (f"{path}: {len(hits)} typed numbers, ceiling {ceiling}; glue the new ones:\n"
                                  + "\n".join(map(str, hits)))
