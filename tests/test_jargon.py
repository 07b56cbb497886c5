"""No internal jargon ("the issue asks", "the lead's decision", references to files outside the repository) in the
README, the pages of the book, the code those pages list (`literalinclude`), or any module of lib/, kernels/ and
benchmarks/."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JARGON = re.compile(r"the issue (asks|asked|we set)|issue's target|\bthe lead\b(?! shape)|\blead's\b|\.notes/",
                    re.IGNORECASE)
ROLES = re.compile(r"LEAD-DECISIONS|\b(KERNEL|LEAD)\b(?! *=)|written by [A-Z]{4,}")     # role names in capitals
PAGES = ["intro.md", "README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "chapters").glob("*.md"))
MODULES = sorted(str(p.relative_to(ROOT)) for d in ("lib", "kernels", "benchmarks") for p in (ROOT / d).rglob("*.py"))
# listed code that still carries jargon, in files this test's owner may not edit: strict, so that the fix is noticed
KNOWN: dict = {}


def _hits(text: str) -> list[str]:
    return [ln.strip()[:100] for ln in text.splitlines() if JARGON.search(ln) or ROLES.search(ln)]


@pytest.mark.parametrize("path", PAGES + MODULES)
def test_no_jargon_in_pages_and_modules(path):
    assert not _hits((ROOT / path).read_text(encoding="utf-8")), path


def _listings():
    out = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for m in re.finditer(r"```\{literalinclude\} (\S+)\n((?::\S+:.*\n)*)", text):
            opts = dict(re.findall(r":(\S+): *(.*)", m.group(2)))
            rel = (ROOT / page).parent.joinpath(m.group(1)).resolve().relative_to(ROOT)
            out.append((str(rel), opts.get("pyobject")))
    return out


def _source(rel: str, obj):
    text = (ROOT / rel).read_text(encoding="utf-8")
    if not obj:
        return text
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == obj:
            return "\n".join(text.splitlines()[node.lineno - 1:node.end_lineno])
    raise LookupError(f"{obj} not in {rel}")


@pytest.mark.parametrize("rel,obj", [pytest.param(*lo, marks=pytest.mark.xfail(strict=True, reason=KNOWN[lo]))
                                     if lo in KNOWN else lo for lo in _listings()])
def test_no_jargon_in_listed_code(rel, obj):
    assert not _hits(_source(rel, obj)), f"{rel}:{obj}"


def test_the_pattern_catches_what_it_should():
    for bad in ("The issue asks for", "(the lead's decision; x)", "see `.notes/arithmetic-contract.md`",
                "# Underflow guard (LEAD-DECISIONS 1)", "The issue we set ourselves asked", "written by KERNEL (x)"):
        assert _hits(bad), bad
    for ok in ("the lead shape of q", "BLOCK_KERNEL = 4", "an issue with the kernel", "misleading"):
        assert not _hits(ok), ok
