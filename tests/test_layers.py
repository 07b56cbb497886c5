"""The import graph reads top-down: every module imports only its own layer or lower ones (lazy imports included).

Layers, bottom to top: lib.book (plumbing) < lib.fp (floating point, the oracle) < kernels (Triton) < lib.training <
lib.readings < lib.figures and lib.experiments (siblings: neither imports the other) < benchmarks."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"lib.book": 0, "lib.fp": 1, "kernels": 2, "lib.training": 3, "lib.readings": 4, "lib.figures": 5,
        "lib.experiments": 5, "benchmarks": 6}


def layer(mod: str):
    for prefix in sorted(RANK, key=len, reverse=True):
        if mod == prefix or mod.startswith(prefix + "."):
            return prefix
    return None


def imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "lib":       # `from lib import x`: x is a subpackage
                for a in node.names:
                    yield node.lineno, f"lib.{a.name}"
            else:
                yield node.lineno, node.module


def modules():
    for pkg in ("lib", "kernels", "benchmarks"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            yield p, name


def test_every_module_belongs_to_a_layer():
    orphans = [n for _, n in modules() if layer(n) is None and n != "lib"]
    assert orphans == [], f"modules outside every layer: {orphans}"


def test_imports_point_down():
    bad = []
    for path, name in modules():
        mine = layer(name)
        if mine is None:
            continue
        for line, target in imports(path):
            theirs = layer(target)
            if theirs is None or theirs == mine:
                continue
            if RANK[theirs] > RANK[mine] or (RANK[theirs] == RANK[mine]):
                bad.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {target} ({theirs})")
    assert bad == [], "upward or sideways imports:\n" + "\n".join(bad)


def test_the_check_can_fail(tmp_path, monkeypatch):
    """A planted upward import (plumbing importing the training layer) is caught."""
    p = tmp_path / "lib" / "book" / "x.py"
    p.parent.mkdir(parents=True)
    p.write_text("def f():\n    from lib.training import model\n")
    assert [t for _, t in imports(p)] == ["lib.training"]
    assert RANK[layer("lib.training")] > RANK[layer("lib.book.x")]
