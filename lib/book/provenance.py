"""Provenance keyed on what can change a number: a Merkle fingerprint of the code a result's `run` can reach.

A result is fresh while three things are unchanged: the code that computed it, its resolved configuration and its
input files. This module fingerprints the code. It parses the project's Python sources (`lib/`, `kernels/`,
`benchmarks/`) without importing them, and gives every top-level definition (function, class, module-level
assignment) a hash of its syntax tree in which

* docstrings, bare string statements, comments (never in the tree), type annotations and import statements are
  dropped, and the definition's own name is blanked;
* every reference to another project definition — `f(...)`, `mod.f`, `pkg.mod.CONST`, through any import alias,
  at module level or imported inside a function — is replaced by that definition's hash (a Merkle tree over the
  reference graph; mutually recursive definitions are hashed together as one strongly connected component);
* references to outside modules (`torch.matmul`, `tl.dot`) are written by their full module path, whatever the alias.

So moving a function to another module, renaming it, or editing a docstring, comment, annotation or import leaves
every fingerprint unchanged, while changing a line of code changes the fingerprint of its definition and of every
definition that reaches it — a kernel line edit marks every result whose `run` reaches the kernel stale.
Module-level statements that are not definitions (`os.environ.setdefault(...)`) belong to a per-module `<init>`
definition that every definition of that module depends on (its hash is part of each one's text). An
`if __name__ == "__main__":` block (without `else`) is skipped: it never runs on import, so it cannot change a
number, and hashing it into `<init>` would tie every definition it references (a command-line `main`, its help
strings) into every definition of its module.

`lib.book` itself (results I/O, scales, the figure style) is plumbing that cannot change a measured number; its
definitions are treated as outside references, so editing it stales nothing. The exception is the experiment runner
(`FINGERPRINTED`: `lib.book.runner`, `lib.book.cli`), which passes each run its configuration and which committed
results reached (as `lib/experiments/__init__.py` and `__main__.py`) before it moved into `lib.book`: it is hashed
like project code.

The serialisation skips fields that are empty or None and the fields Python versions disagree on (`type_params`,
`ctx`, `kind`, `type_comment`), so the GPU image's Python 3.12 and the CPU's 3.11 give the same fingerprints.
"""
from __future__ import annotations

import ast
import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("lib", "kernels", "benchmarks")
PLUMBING = ("lib.book",)   # treated as outside code (see the module docstring) ...
FINGERPRINTED = ("lib.book.runner", "lib.book.cli")   # ... except the experiment runner
_SKIP_FIELDS = {"ctx", "type_comment", "type_params", "kind"}


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class _Module:
    name: str
    path: Path
    is_pkg: bool
    defs: dict = field(default_factory=dict)      # name -> ast node (FunctionDef / ClassDef / Assign ...)
    imports: dict = field(default_factory=dict)   # alias -> ("module", full) | ("from", module, name)
    init: list = field(default_factory=list)      # other module-level statements


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _import_bindings(node, modname: str, is_pkg: bool) -> dict:
    """alias -> binding for one Import / ImportFrom statement."""
    out = {}
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out[a.asname] = ("module", a.name)
            else:   # `import a.b.c` binds `a`
                out[a.name.split(".")[0]] = ("module", a.name.split(".")[0])
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            pkg = modname.split(".") if is_pkg else modname.split(".")[:-1]
            pkg = pkg[:len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        for a in node.names:
            if a.name != "*":
                out[a.asname or a.name] = ("from", base, a.name)
    return out


def _is_main_block(node) -> bool:
    """`if __name__ == "__main__":` (either operand order) without an `else`: code that never runs on import."""
    if not (isinstance(node, ast.If) and not node.orelse and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq)):
        return False
    sides = (node.test.left, node.test.comparators[0])
    return any(isinstance(a, ast.Name) and a.id == "__name__" and isinstance(b, ast.Constant) and b.value == "__main__"
               for a, b in (sides, sides[::-1]))


def _assigned_names(node) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = []
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                names.append(n.id)
    return names


class Index:
    """The parsed project sources and the fingerprint of every definition."""

    def __init__(self, root: Path | str = ROOT, packages=PACKAGES, outside=(), skip_main: bool = True,
                 module_init: bool = True):
        """`outside`: extra modules ("pkg.mod") or definitions ("pkg.mod:name") treated as outside code, like the
        plumbing (for checks that some code did not change apart from named parts, `lib.book.rekey_unused`).
        `skip_main=False`: hash `if __name__ == "__main__":` blocks into `<init>`, as fingerprints did before
        `lib.book.rekey_main` (the one-time re-keying that compares the two). `module_init=False`: a definition's
        hash leaves out its module's top-level statements unless they reach back into the module, as fingerprints
        did before `lib.experiments.rekey_init`."""
        self.root = Path(root)
        self.outside = tuple(outside)
        self.skip_main = skip_main
        self.module_init = module_init
        self.modules: dict[str, _Module] = {}
        for pkg in packages:
            base = self.root / pkg
            if not base.is_dir():
                continue
            for path in sorted(base.rglob("*.py")):
                if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(self.root).parts):
                    continue
                name, is_pkg = _module_name(path, self.root)
                self.modules[name] = self._parse(name, path, is_pkg, skip_main)
        self._hash: dict[tuple, str] = {}
        self._edges: dict[tuple, set] = {}
        self._text: dict[tuple, str] = {}

    # -- parsing ---------------------------------------------------------------------------------------------------
    @staticmethod
    def _parse(name, path, is_pkg, skip_main=True) -> _Module:
        tree = ast.parse(path.read_text(), filename=str(path))
        m = _Module(name, path, is_pkg)
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                m.imports.update(_import_bindings(node, name, is_pkg))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                m.defs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and not (
                    isinstance(node, ast.AnnAssign) and node.value is None):
                names = _assigned_names(node)
                if names == ["__all__"]:
                    continue
                for n in names:
                    m.defs[n] = node
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                continue  # docstring / bare string
            elif skip_main and _is_main_block(node):
                continue  # never runs on import
            else:
                m.init.append(node)
        return m

    def _is_plumbing(self, modname: str) -> bool:
        if modname in FINGERPRINTED:
            return False
        return any(modname == p or modname.startswith(p + ".") for p in PLUMBING + tuple(
            o for o in self.outside if ":" not in o))

    # -- name resolution -------------------------------------------------------------------------------------------
    def _resolve_in_module(self, modname: str, name: str, depth: int = 0):
        """What `modname.name` is: ("def", mod, name) | ("module", mod) | ("ext", dotted) | None."""
        if depth > 20:
            return None
        sub = f"{modname}.{name}"
        m = self.modules.get(modname)
        if m is None:
            return ("ext", sub)
        if name in m.defs:
            outside = self._is_plumbing(modname) or f"{modname}:{name}" in self.outside
            return ("ext", sub) if outside else ("def", modname, name)
        if name in m.imports:
            return self._resolve_binding(m.imports[name], depth + 1)
        if sub in self.modules:
            return ("module", sub)
        return ("ext", sub)

    def _resolve_binding(self, b, depth: int = 0):
        if b[0] == "module":
            return ("module", b[1]) if b[1] in self.modules or b[1] in PACKAGES else ("ext", b[1])
        _, mod, name = b
        if f"{mod}.{name}" in self.modules:
            return ("module", f"{mod}.{name}")
        if mod in self.modules:
            return self._resolve_in_module(mod, name, depth)
        return ("ext", f"{mod}.{name}")

    def _resolve_chain(self, chain: list[str], scope: dict, modname: str):
        """Resolve a dotted chain like ["proxy", "run_arms"] seen in `modname` with local import `scope`.
        Returns (target, n_used) — how many chain elements the target consumed — or (None, 0)."""
        head = chain[0]
        m = self.modules[modname]
        if head in scope:
            t = self._resolve_binding(scope[head])
        elif head in m.defs:
            t = ("def", modname, head)
        elif head in m.imports:
            t = self._resolve_binding(m.imports[head])
        else:
            return None, 0
        used = 1
        while t is not None and t[0] == "module" and used < len(chain):
            t = self._resolve_in_module(t[1], chain[used])
            used += 1
        if t is not None and t[0] == "module" and not (t[1] in self.modules):
            t = ("ext", t[1])
        if t is not None and t[0] == "module" and self._is_plumbing(t[1]):
            t = ("ext", t[1])
        if t is not None and t[0] == "def" and f"{t[1]}:{t[2]}" in self.outside:
            t = ("ext", f"{t[1]}.{t[2]}")
        return t, used

    # -- canonical text of one definition --------------------------------------------------------------------------
    def _canonical(self, key) -> tuple[str, set]:
        """(text with references as placeholders '⟦<mod>:<name>⟧', referenced project defs) of definition `key`."""
        if key in self._text:
            return self._text[key], self._edges[key]
        modname, name = key
        m = self.modules[modname]
        if name == "<init>":
            nodes = m.init
        else:
            nodes = [m.defs[name]]
        scope: dict = {}
        for node in nodes:
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    scope.update(_import_bindings(sub, modname, m.is_pkg))
        refs: set = set()
        own = {name} if name != "<init>" else set()

        def ser(node) -> str:
            if isinstance(node, list):
                body = node
                if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    body = body[1:]
                body = [b for b in body if not isinstance(b, (ast.Import, ast.ImportFrom))
                        and not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                                 and isinstance(b.value.value, str))]
                return "[" + ",".join(ser(x) for x in body) + "]"
            if not isinstance(node, ast.AST):
                return repr(node)
            if isinstance(node, (ast.Name, ast.Attribute)):
                chain, cur = [], node
                while isinstance(cur, ast.Attribute):
                    chain.append(cur.attr)
                    cur = cur.value
                if isinstance(cur, ast.Name):
                    chain.append(cur.id)
                    chain.reverse()
                    if chain[0] in own and len(chain) == 1 and isinstance(node, ast.Name):
                        return "@self"
                    t, used = self._resolve_chain(chain, scope, modname)
                    if t is not None:
                        rest = chain[used:]
                        if t[0] == "def":
                            refs.add((t[1], t[2]))
                            head = f"\u27e6{t[1]}:{t[2]}\u27e7"
                        elif t[0] == "module":
                            head = f"@mod:{t[1]}"
                        else:
                            head = f"@ext:{t[1]}"
                        return head + "".join(f".{r}" for r in rest)
            if isinstance(node, ast.JoinedStr):   # 3.11 vs 3.12 split constant parts differently: merge them
                parts, buf = [], ""
                for v in node.values:
                    if isinstance(v, ast.Constant):
                        buf += str(v.value)
                    else:
                        if buf:
                            parts.append(repr(buf))
                            buf = ""
                        parts.append(ser(v))
                if buf:
                    parts.append(repr(buf))
                return "JoinedStr(" + ",".join(parts) + ")"
            out = [type(node).__name__]
            for f in node._fields:
                if f in _SKIP_FIELDS:
                    continue
                v = getattr(node, f, None)
                if f == "name" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                        and node in nodes:
                    continue
                if f in ("annotation", "returns"):
                    continue
                if v is None or v == []:
                    continue
                out.append(f"{f}={ser(v)}")
            return "(" + " ".join(out) + ")"

        text = "|".join(ser(n) for n in nodes)
        # Every definition of a module depends on that module's top-level statements, and their hash is part of its
        # text: an edge alone enters the hash only where the statements reach back into the module (one strongly
        # connected component), so `os.environ.setdefault(...)` edited stales nothing (`module_init=False`, the
        # hashing before this was found).
        if name != "<init>" and m.init:
            refs.add((modname, "<init>"))
            if self.module_init:
                text += f"|\u27e6{modname}:<init>\u27e7"
        self._text[key], self._edges[key] = text, refs
        return text, refs

    # -- Merkle hashes over strongly connected components ----------------------------------------------------------
    def def_hash(self, key) -> str:
        if key in self._hash:
            return self._hash[key]
        # Tarjan over the reachable graph, hashing each component once its dependencies are hashed.
        index, low, stack, on = {}, {}, [], set()
        counter = [0]
        sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

        def strong(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(self._canonical(v)[1]):
                if w in self._hash:
                    continue
                if w not in index:
                    strong(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                self._hash_component(comp)

        strong(key)
        return self._hash[key]

    def _hash_component(self, comp: list):
        members = set(comp)

        def subst(k, inside_token):
            text = self._canonical(k)[0]
            for dep in self._canonical(k)[1]:
                tok = f"\u27e6{dep[0]}:{dep[1]}\u27e7"
                text = text.replace(tok, inside_token if dep in members else "#" + self._hash[dep])
            return text

        texts = sorted(subst(k, "@scc") for k in comp)
        scc = _h("\n".join(texts))
        for k in comp:
            self._hash[k] = _h(scc + "\n" + subst(k, "@scc")) if len(comp) > 1 else _h(subst(k, "@scc"))

    # -- public ----------------------------------------------------------------------------------------------------
    def resolve_entry(self, entry: str) -> tuple[str, str]:
        """'pkg.mod:qualname' -> (module, top-level name). Raises KeyError with a clear message."""
        if ":" not in entry:
            raise ValueError(f"code entry {entry!r}: write 'package.module:name'")
        mod, name = entry.split(":", 1)
        if mod not in self.modules:
            raise KeyError(f"code entry {entry!r}: no module {mod!r} under {self.root}")
        if name not in self.modules[mod].defs:
            raise KeyError(f"code entry {entry!r}: module {mod!r} defines no {name!r}")
        return mod, name

    def fingerprint(self, entry: str) -> str:
        """Merkle fingerprint (sha256 hex) of the definition `entry` ('pkg.mod:name') and all it reaches."""
        return self.def_hash(self.resolve_entry(entry))

    def reachable(self, entry: str) -> list[str]:
        """'module:name' of every project definition that `entry` reaches (itself included), sorted."""
        start = self.resolve_entry(entry)
        seen, todo = {start}, [start]
        while todo:
            for w in self._canonical(todo.pop())[1]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return sorted(f"{m}:{n}" for m, n in seen)


_CACHE: dict = {}


def _py_stamps(folder: str) -> list[tuple[str, int, int]]:
    """(path, mtime in ns, size in bytes) of every .py file under `folder`, found with os.scandir: the results'
    staleness asks for the index once per loaded result, and Path.rglob took ≈ 3× as long per call."""
    out = []
    with os.scandir(folder) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                out.extend(_py_stamps(e.path))
            elif e.name.endswith(".py"):
                st = e.stat()
                out.append((e.path, st.st_mtime_ns, st.st_size))
    return out


def index(root: Path | str = ROOT) -> Index:
    """A cached `Index` of `root`, rebuilt when a source file appeared, went or changed modification time or size."""
    root = Path(root)
    stamp = tuple(sorted(x for pkg in PACKAGES if (root / pkg).is_dir() for x in _py_stamps(str(root / pkg))))
    hit = _CACHE.get(str(root))
    if hit is None or hit[0] != stamp:
        hit = (stamp, Index(root))
        _CACHE[str(root)] = hit
    return hit[1]


def code_fingerprint(entries, root: Path | str = ROOT) -> dict[str, str]:
    """{entry: fingerprint} for 'pkg.mod:name' entries."""
    ix = index(root)
    return {e: ix.fingerprint(e) for e in entries}
