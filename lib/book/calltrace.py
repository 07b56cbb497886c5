"""What the changed code was asked and answered: the calls into edited definitions, recorded in two runs and compared.

A certificate (`lib.book.certify`) compares what a run saves. A timing benchmark saves only seconds, which differ
from one run of the same code to the next, so comparing its outputs compares nothing. Its run still executes code
that an edit can change — a spec parser, a config adapter — and that code's effect on the timed computation can only
be through what it returns to the unchanged code around it. This module records exactly that boundary, in the old
tree and in the new one, so that a certificate can show the edit returned the same values on the same inputs:

1. `changed_defs(old_root, new_root, entries)`: the project definitions (`lib.book.provenance` keys, "module:name")
   that the result's code entries reach in either tree and whose own text differs between the trees (a definition's
   canonical text with its references as names: a changed callee does not mark its callers), or that exist in one
   tree only.
2. `specs_for(old_root, new_root, keys)`: where each changed definition lies in each tree (its source file and line
   range), for the tracer; a changed statement at module level (`<init>`) cannot be traced and is refused, since it
   runs at import and may set anything.
3. The tracer (`install`, started in every Python process of the run by the `sitecustomize` that `tracer_env`
   writes, so the run's worker processes are traced too) records, for every *outermost* call into a changed function
   or method (code whose source lies inside a changed definition, called from code that does not): a canonical text
   of its arguments on entry, of its return value, and of its arguments on return (a method that sets fields of
   `self` shows them there), and the seconds spent inside. Calls made by changed code into changed code are inside
   that boundary and are not recorded, so restructuring inside the changed code is allowed. When a process exits
   normally (a forked worker ends without this) it adds, for the modules it imported, the values of the changed
   module-level assignments and, for a changed class, its dataclass fields (name, default, factory) and class
   attributes — what the generated `__init__` and the unchanged readers of those values see.
4. `compare(read(old_dir), read(new_dir))`: the multiset of records of each run (order across worker processes is
   not deterministic), equal or the first differences.

Canonical texts: tensors and arrays by dtype, shape and a SHA-256 of their bytes; dataclasses and plain objects by
type and fields (depth ≤ 4); functions, classes and modules by qualified name; memory addresses never. What this
does not show: a changed function's effect on global state other than its arguments and return value (a write to
a module-level cache, a file), which the caller could later read; the certificate's reason must say why there is
none. The seconds spent inside the changed code are recorded on both sides so a reader can see whether it could
matter to a timing.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import hashlib
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

# Only the standard library at module level: the traced processes load this file by its path (`SITECUSTOMIZE`), also
# in an old tree that has no such module; `lib.book.provenance` is imported where the trees are compared.
ENV = "BOOK_CALLTRACE"          # path of the tracer's spec (JSON) in the traced processes
MAX_DEPTH = 4
MAX_TEXT = 400                   # characters of a record's readable text kept for a difference report
_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


# ---------------------------------------------------------------------------------------------------------------
# which definitions changed
# ---------------------------------------------------------------------------------------------------------------
def _reach(ix, entries) -> set:
    keys = set()
    for e in entries:
        try:
            keys.update(ix.reachable(e))
        except (KeyError, ValueError):
            pass
    return keys


def changed_defs(old_root, new_root, entries) -> list[str]:
    """Sorted "module:name" keys reached from `entries` in either tree whose own canonical text differs between
    `old_root` and `new_root` (or that one tree lacks)."""
    from lib.book import provenance
    old_ix, new_ix = provenance.Index(old_root), provenance.Index(new_root)
    out = []
    for key in sorted(_reach(old_ix, entries) | _reach(new_ix, entries)):
        mod, name = key.split(":", 1)
        texts = []
        for ix in (old_ix, new_ix):
            m = ix.modules.get(mod)
            has = m is not None and (name in m.defs or (name == "<init>" and m.init))
            texts.append(ix._canonical((mod, name))[0] if has else None)
        if texts[0] != texts[1]:
            out.append(key)
    return out


def _def_nodes(path: Path, name: str) -> list:
    from lib.book import provenance
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            found.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and name in provenance._assigned_names(node):
            found.append(node)
    return found


def spec_for(root, keys) -> dict:
    """The tracer's spec for changed definitions `keys` of the tree at `root`: {"functions": [[file, first line,
    last line, key], ...], "values": [[module, name, key], ...], "classes": [[module, name, key], ...],
    "absent": [keys this tree lacks]}. Raises ValueError for a changed module-level statement."""
    from lib.book import provenance
    root = Path(root)
    ix = provenance.Index(root)
    spec = dict(functions=[], values=[], classes=[], absent=[])
    for key in keys:
        mod, name = key.split(":", 1)
        if name == "<init>":
            raise ValueError(f"{key}: a changed module-level statement runs at import and cannot be traced")
        m = ix.modules.get(mod)
        if m is None or name not in m.defs:
            spec["absent"].append(key)
            continue
        for node in _def_nodes(m.path, name):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                spec["values"].append([mod, name, key])
                continue
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spec["functions"].append([str(m.path.resolve()), first, node.end_lineno, key])
            if isinstance(node, ast.ClassDef):
                spec["classes"].append([mod, name, key])
    return spec


def specs_for(old_root, new_root, keys) -> tuple[dict, dict]:
    """`spec_for` of both trees, the values and classes kept only for keys both trees define: a definition that one
    tree lacks can be read only by changed code, whose calls show its effect."""
    old, new = spec_for(old_root, keys), spec_for(new_root, keys)
    one_side = set(old["absent"]) | set(new["absent"])
    for spec in (old, new):
        for kind in ("values", "classes"):
            spec[kind] = [row for row in spec[kind] if row[2] not in one_side]
    return old, new


# ---------------------------------------------------------------------------------------------------------------
# canonical texts
# ---------------------------------------------------------------------------------------------------------------
def _digest(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


def canon(x, depth: int = 0, seen=None) -> str:
    """A text of `x` that equal values give in any process: no memory addresses, tensors by their bytes' hash."""
    seen = set() if seen is None else seen
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return repr(x)                                  # a float's repr round-trips: equal text, equal bits
    tname = f"{type(x).__module__}.{type(x).__qualname__}"
    if depth > MAX_DEPTH:
        return f"<{tname}>"
    if id(x) in seen:
        return f"<cycle {tname}>"
    mod = type(x).__module__
    if mod.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter"):
        try:
            t = x.detach()
            if t.device.type == "meta" or t.is_sparse:
                raise TypeError
            t = t.cpu().contiguous()
            import torch
            if t.dtype in (torch.bfloat16, torch.float16):
                t = t.view(torch.int16)
            data = _digest(t.numpy().tobytes()) if t.numel() else "-"
        except Exception:           # fake, meta or otherwise data-less tensors: shape and dtype only
            data = "?"
        return f"tensor({x.dtype},{tuple(x.shape)},{x.device.type},{data})"
    if mod == "numpy" and type(x).__name__ == "ndarray":
        return f"ndarray({x.dtype},{x.shape},{_digest(x.tobytes()) if x.dtype != object else repr(x.tolist())})"
    if type(x).__module__ == "numpy":                  # numpy scalars
        return f"{tname}({x!r})"
    seen = seen | {id(x)}
    if isinstance(x, (list, tuple)):
        inner = ",".join(canon(v, depth + 1, seen) for v in x)
        return f"{type(x).__name__}[{inner}]"
    if isinstance(x, (set, frozenset)):
        return f"{type(x).__name__}{{{','.join(sorted(canon(v, depth + 1, seen) for v in x))}}}"
    if isinstance(x, dict):
        items = sorted((canon(k, depth + 1, seen), canon(v, depth + 1, seen)) for k, v in x.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(x, type) or type(x).__name__ in ("function", "builtin_function_or_method", "method",
                                                   "method-wrapper", "wrapper_descriptor"):
        return f"<{getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', type(x).__name__)}>"
    if type(x).__name__ == "partial" and hasattr(x, "func"):
        return f"partial({canon(x.func, depth + 1, seen)},{canon(x.args, depth + 1, seen)}," \
               f"{canon(x.keywords, depth + 1, seen)})"
    if type(x).__name__ == "module":
        return f"<module {x.__name__}>"
    if dataclasses.is_dataclass(x):
        fs = ",".join(f"{f.name}={canon(getattr(x, f.name, None), depth + 1, seen)}" for f in dataclasses.fields(x))
        return f"{tname}({fs})"
    if hasattr(x, "__dict__"):
        try:
            fs = ",".join(f"{k}={canon(v, depth + 1, seen)}" for k, v in sorted(vars(x).items()))
        except Exception:
            fs = "?"
        return f"{tname}({fs})"
    try:
        return _ADDR.sub("", repr(x))
    except Exception:
        return f"<{tname}>"


def _args_text(frame) -> str:
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    loc = frame.f_locals
    return ",".join(f"{v}={canon(loc.get(v, '<unbound>'))}" for v in code.co_varnames[:n])


# ---------------------------------------------------------------------------------------------------------------
# the tracer (runs inside the traced processes)
# ---------------------------------------------------------------------------------------------------------------
class _Tracer:
    def __init__(self, spec: dict, out_dir: str):
        self.spec, self.out_dir = spec, out_dir
        self.by_file = collections.defaultdict(list)
        for path, first, last, key in spec["functions"]:
            self.by_file[path].append((first, last, key))
        self.codes: dict = {}                       # code object -> key or None
        self.local = threading.local()
        self.pid, self.fh = None, None

    def key_of(self, code):
        k = self.codes.get(code, 0)
        if k == 0:
            k = None
            for first, last, key in self.by_file.get(code.co_filename, ()):
                if first <= code.co_firstlineno <= last:
                    k = key
                    break
            self.codes[code] = k
        return k

    def write(self, rec: dict):
        if self.pid != os.getpid():                # a forked worker: its own file
            self.pid = os.getpid()
            self.fh = open(os.path.join(self.out_dir, f"calls_{self.pid}.jsonl"), "a")
        self.fh.write(json.dumps(rec) + "\n")
        self.fh.flush()

    def __call__(self, frame, event, arg):
        if event != "call" and event != "return":
            return
        loc = self.local
        if getattr(loc, "busy", False):
            return
        key = self.key_of(frame.f_code)
        if key is None:
            return
        stack = loc.__dict__.setdefault("stack", [])
        loc.busy = True
        try:
            if event == "call":
                if not stack:
                    stack.append([frame, key, f"{frame.f_code.co_qualname}({_args_text(frame)})",
                                  time.perf_counter()])
                else:
                    stack.append(None)
            elif stack:
                top = stack.pop()
                if top is not None and top[0] is frame:
                    _, k, call, t0 = top
                    self.write(dict(key=k, call=call, ret=canon(arg), after=_args_text(frame),
                                    s=time.perf_counter() - t0))
        finally:
            loc.busy = False

    def values(self) -> None:
        """The changed module-level values and classes' fields, as seen at the end of the process."""
        self.local.busy = True
        sys.setprofile(None)
        for mod, name, key in self.spec["values"]:
            if mod in sys.modules:                  # only what this process imported (and so could read)
                self.write(dict(key=key, value=canon(getattr(sys.modules[mod], name, "<absent>"))))
        for mod, name, key in self.spec["classes"]:
            if mod not in sys.modules:
                continue
            cls = getattr(sys.modules[mod], name)
            fields = [(f.name, canon(f.default), canon(f.default_factory), f.init, f.compare)
                      for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
            attrs = {k: canon(v) for k, v in vars(cls).items()
                     if not k.startswith("__") and not callable(v) and not isinstance(v, (classmethod, staticmethod,
                                                                                          property))}
            self.write(dict(key=key, value=canon(dict(fields=fields, attrs=attrs))))


def install() -> None:
    """Start tracing in this process if `ENV` names a spec (called by the written `sitecustomize`)."""
    path = os.environ.get(ENV)
    if not path:
        return
    spec = json.loads(Path(path).read_text())
    tracer = _Tracer(spec, spec["out_dir"])
    sys.setprofile(tracer)
    threading.setprofile(tracer)
    import atexit
    atexit.register(tracer.values)


SITECUSTOMIZE = """\
# Written by lib.book.calltrace: start the call tracer in every Python process of a traced run (this file's
# folder is first on PYTHONPATH; the tracer is loaded by its path, so the traced tree need not have it).
import os
if os.environ.get({env!r}):
    import importlib.util
    _spec = importlib.util.spec_from_file_location("_book_calltrace", {path!r})
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    _mod.install()
"""


def tracer_env(where, tree, spec: dict, out_dir) -> dict:
    """Write the spec and a `sitecustomize.py` into folder `where`; returns the environment variables a traced
    run of `tree` adds (PYTHONPATH: `where` first, then the tree; the records go to `out_dir`)."""
    where, out_dir = Path(where), Path(out_dir)
    where.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (where / "spec.json").write_text(json.dumps(dict(spec, out_dir=str(out_dir))))
    (where / "sitecustomize.py").write_text(SITECUSTOMIZE.format(env=ENV, path=str(Path(__file__).resolve())))
    return {ENV: str(where / "spec.json"), "PYTHONPATH": f"{where}{os.pathsep}{tree}"}


# ---------------------------------------------------------------------------------------------------------------
# reading and comparing
# ---------------------------------------------------------------------------------------------------------------
def read(out_dir) -> list[dict]:
    recs = []
    for p in sorted(Path(out_dir).glob("calls_*.jsonl")):
        recs += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return recs


def _ident(r: dict) -> str:
    return json.dumps({k: v for k, v in r.items() if k != "s"}, sort_keys=True)


def compare(old: list[dict], new: list[dict]) -> tuple[dict, list[str]]:
    """({"calls", "values", "per_key" {key: {"calls", "old_s", "new_s"}}}, differences) of two runs' records,
    compared as multisets (worker processes interleave in no fixed order)."""
    per_key: dict = {}
    for side, recs in (("old", old), ("new", new)):
        for r in recs:
            d = per_key.setdefault(r["key"], dict(calls=0, old_s=0.0, new_s=0.0, values=0))
            if "call" in r:
                d[f"{side}_s"] += r["s"]
                if side == "new":
                    d["calls"] += 1
            elif side == "new":
                d["values"] += 1
    a, b = collections.Counter(map(_ident, old)), collections.Counter(map(_ident, new))
    diffs = []
    for text, n in sorted((a - b).items()):
        diffs.append(f"only in the old run ({n}×): {text[:MAX_TEXT]}")
    for text, n in sorted((b - a).items()):
        diffs.append(f"only in the new run ({n}×): {text[:MAX_TEXT]}")
    counts = dict(calls=sum("call" in r for r in new), values=sum("value" in r for r in new),
                  per_key={k: dict(calls=d["calls"], values=d["values"], old_s=round(d["old_s"], 6),
                                   new_s=round(d["new_s"], 6)) for k, d in sorted(per_key.items())})
    return counts, diffs
