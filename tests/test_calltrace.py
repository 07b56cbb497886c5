"""lib/book/calltrace.py and `certify --trace-calls`: a timing-only run is certified by what its changed code
returned, and refused when that differs, when a changed value is read, or when the change cannot be traced."""
import json

import numpy as np
import pytest

from lib.book import calltrace, certify, provenance
from tests.test_certify import _git, scratch_repo

ENTRY = "lib.bench:run"
# A benchmark: it parses its configuration with a helper, then times a computation; it saves only seconds.
MODULE = '''import multiprocessing
import time

import numpy as np

SCALE = 2.0


def parse(text):
    name, _, n = text.partition("/")
    return {"name": name, "n": int(n)}


def work(n):
    return float((np.arange(n) * SCALE).sum())


def rare(n):
    return n + 1


def run(scale, cfg):
    spec = parse(cfg["spec"])
    if cfg.get("rare"):
        rare(1)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pool.apply(parse, (cfg["spec"],))
    t0 = time.perf_counter()
    work(spec["n"])
    return {"data": {"runs": [{"wall_s": time.perf_counter() - t0}]}, "seeds": [0]}
'''
REGISTRY = '''[bench]
base = "lib.bench"
summary = "a tiny benchmark"
[bench.ci]
spec = "x/5"
[bench.full]
spec = "x/50"
'''


def _repo(tmp_path):
    return scratch_repo(tmp_path, "bench", MODULE, REGISTRY, {"spec": "x/50"}, {"runs": [{"wall_s": 1.0}]})


def _edit(repo, old, new):
    p = repo / "lib" / "bench.py"
    assert old in p.read_text()
    p.write_text(p.read_text().replace(old, new))
    _git(repo, "commit", "-qam", "edit")


def test_refactor_that_returns_the_same_is_certified_by_its_calls(tmp_path, capsys):
    repo, c = _repo(tmp_path)
    # the parser rewritten; it returns the same dict for every input of the form name/n
    _edit(repo, 'name, _, n = text.partition("/")\n    return {"name": name, "n": int(n)}',
          'parts = text.split("/")\n    return dict(name=parts[0], n=int(parts[1]))')
    assert certify.main(["bench", "--old-commit", c], repo=repo) == 1     # outputs alone compare nothing
    assert "nothing compared" in capsys.readouterr().out
    rep = certify.certify("bench", c, repo=repo, trace_calls=True)
    assert rep["ok"], rep["why"]
    assert rep["changed"] == ["lib.bench:parse"]
    # the call in the main process and the one in the forked worker
    assert rep["calls"]["per_key"]["lib.bench:parse"]["calls"] == 2
    assert certify.main(["bench", "--old-commit", c, "--trace-calls", "--write", "--reason", "r"], repo=repo) == 0
    meta = json.loads((repo / "results" / "full" / "bench.json").read_text())["meta"]
    log = meta["provenance_rekeys"][-1]
    assert log["compared"]["changed_definitions"] == ["lib.bench:parse"]
    assert meta["provenance"]["code"][ENTRY] == provenance.Index(repo).fingerprint(ENTRY)


def test_changed_return_value_refused(tmp_path, capsys):
    repo, c = _repo(tmp_path)
    _edit(repo, 'return {"name": name, "n": int(n)}', 'return {"name": name, "n": int(n) + 1}')
    assert certify.main(["bench", "--old-commit", c, "--trace-calls", "--write"], repo=repo) == 1
    out = capsys.readouterr().out
    assert "calls into the changed code" in out and "not certified" in out


def test_changed_value_read_by_unchanged_code_refused(tmp_path):
    repo, c = _repo(tmp_path)
    _edit(repo, "SCALE = 2.0", "SCALE = 3.0")          # `work` and `run` unchanged, the value they read changed
    rep = certify.certify("bench", c, repo=repo, trace_calls=True)
    assert not rep["ok"] and rep["changed"] == ["lib.bench:SCALE"]
    assert any("3.0" in d for d in rep["diffs"])


def test_changed_module_statement_cannot_be_traced(tmp_path):
    repo, c = _repo(tmp_path)
    _edit(repo, "SCALE = 2.0\n", "SCALE = 2.0\nnp.random.seed(1)\n")
    rep = certify.certify("bench", c, repo=repo, trace_calls=True)
    assert not rep["ok"] and "module-level statement" in rep["why"][0]


def test_changed_code_never_called_compares_nothing(tmp_path):
    repo, c = _repo(tmp_path)
    _edit(repo, "return n + 1", "return n + 2")
    # a definition the run reaches but never calls: no output, no call, no value to compare (rekey_unused's case)
    rep = certify.certify("bench", c, repo=repo, trace_calls=True)
    assert rep["changed"] == ["lib.bench:rare"]
    assert not rep["ok"] and "nothing compared" in rep["why"][0] and "never called" in rep["why"][0]


def test_canonical_texts_have_no_addresses_and_read_tensor_bytes():
    torch = pytest.importorskip("torch")

    class Thing:
        def __init__(self, v):
            self.v = v

    a, b = Thing(np.arange(3.0)), Thing(np.arange(3.0))
    assert calltrace.canon(a) == calltrace.canon(b) and "0x" not in calltrace.canon(object())
    assert calltrace.canon(np.arange(3.0)) != calltrace.canon(np.arange(3.0) + 1)
    t = torch.ones(4, dtype=torch.bfloat16)
    assert calltrace.canon(t) == calltrace.canon(t.clone()) != calltrace.canon(t * 2)
    assert calltrace.canon({"b": 1, "a": [1.5, None]}) == calltrace.canon({"a": [1.5, None], "b": 1})


def test_exclude_needs_the_calls_and_leaves_out_a_timing_key(tmp_path):
    repo, c = _repo(tmp_path)
    p = repo / "lib" / "bench.py"
    p.write_text(p.read_text().replace('"runs": [{"wall_s": time.perf_counter() - t0}]',
                                       '"runs": [{"wall_s": time.perf_counter() - t0, "ms": time.perf_counter()}]'))
    _git(repo, "commit", "-qam", "a timing under a key of its own")
    rekey_fp = provenance.Index(repo).fingerprint(ENTRY)
    from lib.book import rekey
    rekey.rewrite_meta(repo / "results" / "full" / "bench.json",
                       lambda m: m["provenance"]["code"].update({ENTRY: rekey_fp}))
    _git(repo, "commit", "-qam", "the result recorded here")
    c = _git(repo, "rev-parse", "HEAD")
    _edit(repo, 'return {"name": name, "n": int(n)}', 'return dict(name=name, n=int(n))')
    with pytest.raises(certify.CertificateError, match="needs --trace-calls"):
        certify.certify("bench", c, repo=repo, exclude=["ms"])
    rep = certify.certify("bench", c, repo=repo, trace_calls=True)
    assert not rep["ok"] and any("/ms" in d for d in rep["diffs"])         # the timing differs run to run
    rep = certify.certify("bench", c, repo=repo, trace_calls=True, exclude=["ms"])
    assert rep["ok"], rep["why"]
    assert "ms" in rep["excluded"]
