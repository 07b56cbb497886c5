"""The import graph reads top-down: components below, studies above, the claims table on top (lazy imports included).

Components, bottom to top: lib.book (plumbing, the experiment runner) < lib.fp (floating point, the oracle) <
kernels (Triton) < lib.census (the bias's preconditions) < lib.training < lib.stats (generic statistics) <
lib.monitor. Above them the studies, one folder each (`lib/studies/<name>/`): a study imports components only, never
another study. The claims table (`lib.claims`) reads the studies; `lib.experiments` (the registry's command line) and
`benchmarks/` sit on top. No import cycles, lazy imports included. A chapter imports `lib.book`, its own studies and
the claims table (plus, for the chapters listed in `CHAPTER_COMPONENTS`, the component modules named there, each still
to move into its study's reading).
"""
import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# lib.census (the bias's preconditions, from q, k, v) needs only lib.fp, and the training loop's observers call it:
# it ranks below lib.training. lib.stats and lib.monitor rank above it.
RANK = {"lib.book": 0, "lib.fp": 1, "kernels": 2, "lib.census": 2.5, "lib.training": 3, "lib.stats": 4,
        "lib.monitor": 5, "lib.studies": 6, "lib.claims": 7, "lib.experiments": 8, "benchmarks": 8}

# the study (or studies) whose chapter a page is
CHAPTER_STUDIES = {"intro.md": (), "01-bf16-rounding.md": ("rounding",), "02-flash-attention-kernel.md": ("kernel", "gpt2"),
                   "02b-where-can-the-chain-start.md": ("census",), "02c-the-chain-in-gpt2.md": ("gpt2",),
                   "08-using-this-in-your-training.md": ("practice", "gpt2"),
                   "03-numeric-deviation.md": ("golden",), "04-biased-output.md": ("delta",),
                   "05-low-rank-accumulation.md": ("delta", "dose"), "06-loss-explosion.md": ("explosion",),
                   "07-the-fix.md": ("fix",), "reproduce.md": (), "bibliography.md": ()}
# component modules a chapter still imports directly (the derivation cells of chapters 1-3, the capture unpacker of
# chapters 4-5); chapters 6 and 7 import none
CHAPTER_COMPONENTS = {
    "01-bf16-rounding.md": ("lib.fp",),
    "02-flash-attention-kernel.md": ("lib.fp",),
    "02b-where-can-the-chain-start.md": ("lib.census",),
    "08-using-this-in-your-training.md": ("lib.monitor",),
    "03-numeric-deviation.md": ("lib.fp", "kernels.attention"),
    "04-biased-output.md": ("lib.training.capture",),
    "05-low-rank-accumulation.md": ("lib.training.capture",),
}


def layer(mod: str):
    """The layer of module `mod`: a study's own folder (`lib.studies.<name>`), else the longest RANK prefix."""
    parts = mod.split(".")
    if parts[:2] == ["lib", "studies"] and len(parts) > 2:
        return ".".join(parts[:3])
    for prefix in sorted(RANK, key=len, reverse=True):
        if mod == prefix or mod.startswith(prefix + "."):
            return prefix
    return None


def rank(lay: str) -> int:
    return RANK["lib.studies"] if lay.startswith("lib.studies.") else RANK[lay]


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module in ("lib", "lib.studies"):      # `from lib import x`: x is a subpackage
                for a in node.names:
                    yield node.lineno, f"{node.module}.{a.name}"
            else:
                yield node.lineno, node.module


def imports(path: Path):
    yield from _imports(ast.parse(path.read_text()))


def modules():
    for pkg in ("lib", "kernels", "benchmarks"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            yield p, name


def bad_imports(name: str, targets) -> list[str]:
    """The (line, target) imports of module `name` that point up or sideways."""
    mine = layer(name)
    bad = []
    for line, target in targets:
        theirs = layer(target)
        if theirs is None or theirs == mine or mine is None:
            continue
        if rank(theirs) >= rank(mine):
            bad.append(f"{line}: {mine} imports {target} ({theirs})")
    return bad


def chapter_imports(path: Path):
    """(line, module) of every import in the code cells of a MyST notebook page."""
    text = path.read_text()
    for m in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", text, flags=re.S | re.M):
        line0 = text[:m.start(1)].count("\n") + 1
        src = "\n".join("" if ln.startswith(":") else ln for ln in m.group(1).split("\n"))  # cell options
        src = re.sub(r"^\s*[%!].*$", "", src, flags=re.M)                               # IPython magics
        for line, mod in _imports(ast.parse(src)):
            yield line0 + line - 1, mod


def chapter_violations(page: str, targets) -> list[str]:
    own = {f"lib.studies.{s}" for s in CHAPTER_STUDIES[page]}
    allowed = ("lib.book", "lib.claims", *CHAPTER_COMPONENTS.get(page, ()))
    bad = []
    for line, mod in targets:
        if not (mod == "lib" or mod.startswith(("lib.", "kernels", "benchmarks"))):
            continue       # numpy, IPython, myst_nb, ...
        if layer(mod) in own or mod in own or any(mod == a or mod.startswith(a + ".") for a in allowed):
            continue
        bad.append(f"{page}:{line} imports {mod}")
    return bad


def test_every_module_belongs_to_a_layer():
    orphans = [n for _, n in modules() if layer(n) is None and n != "lib"]
    assert orphans == [], f"modules outside every layer: {orphans}"


def test_studies_are_folders():
    """lib/studies holds study folders only: no loose modules beside them."""
    loose = [p.name for p in (ROOT / "lib" / "studies").glob("*.py") if p.name != "__init__.py"]
    assert loose == []


def test_imports_point_down():
    bad = []
    for path, name in modules():
        bad += [f"{path.relative_to(ROOT)}:{b}" for b in bad_imports(name, imports(path))]
    assert bad == [], "upward or sideways imports:\n" + "\n".join(bad)


def cycle(edges: dict):
    """One import cycle of {module: {imported module}} as a list of modules (first = last), or None."""
    try:
        TopologicalSorter(edges).prepare()
    except CycleError as err:
        return err.args[1]
    return None


def test_no_import_cycles():
    """No two modules import each other, directly or around a loop — lazy imports inside functions included."""
    names = {name for _, name in modules()}
    edges = {}
    for path, name in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:   # `from pkg import mod`
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                           for a in node.names]
            else:
                continue
            edges.setdefault(name, set()).update(t for t in targets if t in names and t != name)
    assert cycle(edges) is None, f"import cycle: {' -> '.join(cycle(edges))}"
    assert sorted(set(cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == ["a", "b", "c"]   # it can fail


def test_chapters_import_their_own_study():
    pages = [ROOT / "intro.md", *sorted((ROOT / "chapters").glob("*.md"))]
    assert {p.name for p in pages} == set(CHAPTER_STUDIES), "a page without an entry in CHAPTER_STUDIES"
    bad = []
    for p in pages:
        bad += chapter_violations(p.name, chapter_imports(p))
    assert bad == [], "chapters importing another study or a component:\n" + "\n".join(bad)


def test_the_check_can_fail(tmp_path):
    """Planted violations are caught: plumbing importing the training layer, one study importing another, a
    component importing a study, a chapter importing a study not its own."""
    p = tmp_path / "lib" / "book" / "x.py"
    p.parent.mkdir(parents=True)
    p.write_text("def f():\n    from lib.training import model\n")
    assert [t for _, t in imports(p)] == ["lib.training"]
    assert bad_imports("lib.book.x", imports(p))
    assert bad_imports("lib.studies.fix.reading", [(1, "lib.studies.explosion.figures")])
    assert bad_imports("lib.studies.fix.reading", [(1, "lib.claims.table")])
    assert bad_imports("lib.training.regime", [(1, "lib.studies.explosion")])
    assert bad_imports("lib.census", [(1, "lib.training.model")])
    assert bad_imports("lib.training.train", [(1, "lib.stats")])
    assert not bad_imports("lib.studies.fix.reading", [(1, "lib.studies.fix.beta"), (2, "lib.training.horizon")])
    assert not bad_imports("lib.claims.table", [(1, "lib.studies.fix.reading")])
    assert chapter_violations("04-biased-output.md", [(3, "lib.studies.explosion.figures")])
    assert chapter_violations("04-biased-output.md", [(3, "lib.training.horizon")])
    assert not chapter_violations("04-biased-output.md", [(3, "lib.studies.delta.reading"), (4, "numpy")])
    cell = tmp_path / "ch.md"
    cell.write_text("# t\n\n```{code-cell} ipython3\n:tags: [remove-cell]\nimport numpy\n"
                    "from lib.studies import fix\n```\n")
    assert list(chapter_imports(cell)) == [(5, "numpy"), (6, "lib.studies.fix")]


def test_chapter_settings_come_from_the_code_that_uses_them():
    """The study-level readers of settings the chapters name (they keep chapters off the components)."""
    from lib import stats
    from lib.studies.census import reading as census
    from lib.studies.delta import settings as delta_settings
    from lib.studies.kernel import settings as kernel_settings
    from lib.training.authors_backend import AuthorsOptions
    from lib.training.model import GPT, GPTConfig
    assert kernel_settings.authors_tile() == delta_settings.authors_tile() == AuthorsOptions().tile
    assert delta_settings.null_quantile() == stats.NULL_QUANTILE
    cfg = dict(n_layer=2, n_head=2, n_embd=32, seq_len=64)
    want = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64)).num_params() / 1e6
    assert census.model_mparams(cfg) == want and census.model_mparams(dict(cfg, n_layer=3)) > want
    assert "512" in kernel_settings.spec_words("paper/round_block=512")


def test_the_flop_convention_is_the_benchmarks():
    """The chapters' backward-per-forward FLOP ratio is the one the benchmarks count by."""
    from benchmarks import bench_attention, bench_stable_attention
    from lib.studies.kernel.settings import BWD_PER_FWD
    from lib.studies.practice.reading import BWD_PER_FWD as practice_ratio
    assert BWD_PER_FWD == practice_ratio == bench_attention._flops(1, 1, 1, 1, "bwd") / bench_attention._flops(1, 1, 1, 1, "fwd")
    assert bench_stable_attention.flops((1, 1, 1, 1), "fwd+bwd") / bench_stable_attention.flops((1, 1, 1, 1), "fwd") == 1 + BWD_PER_FWD


def test_the_stable_benchmarks_peak_is_the_chapters():
    """bench_stable_attention's fraction of peak divides by the H100 SXM's dense BF16 rate the chapters cite."""
    from benchmarks import bench_stable_attention
    from lib.studies.practice.reading import H100_SXM_DENSE_BF16_TFLOPS
    assert bench_stable_attention.PEAK_TFLOPS == H100_SXM_DENSE_BF16_TFLOPS
