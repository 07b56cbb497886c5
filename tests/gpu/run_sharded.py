"""Run the GPU tests as concurrent pytest processes ("shards"), each on its own GPU, and write one log.

    python tests/gpu/run_sharded.py --gpus 4 --log $OUT/gpu_tests.log        # one shard per GPU
    python tests/gpu/run_sharded.py --gpus 1                                 # the plain run: one pytest process
    python tests/gpu/run_sharded.py --gpus 0 --jobs 0 --log results/full/gpu_tests.log    # `make gpu-tests`

Plain Python and pytest only (the GPU image has no pytest-xdist). What it does:

1. collects the tests marked `gpu` (and not `slow`, unless --all) under `tests` with `pytest --collect-only`;
2. puts them into groups that must share a process, because their tests compile the same Triton kernels or share
   a cached computation (a group is a file, or for the big files a test function, a set of parameter cases, or one
   parameter case of every test function of a file: `COSTS` below), estimates each group's seconds from `COSTS`
   (or from the durations a previous run measured, --costs: a test measured whole and since split into parameter
   cases gets its measured seconds shared out over them, `split_costs`), and deals the groups to the shards longest
   first, each to the least loaded shard (`plan`);
3. starts one `python -m pytest` per shard with CUDA_VISIBLE_DEVICES set to its GPU (shard i on GPU i mod n; a shard
   holding a test that needs two GPUs also sees the next one), streams their output prefixed with the shard, and
   stops a shard that outlives --timeout (default: 240 s or twice the shard's estimate, the longer; its process group
   is killed, and pytest's faulthandler dumps the stacks of any single test that runs past half of it);
4. writes --log: a header (GPU names as each shard's torch saw them, the git commit from BOOK_GIT_COMMIT or `git
   rev-parse HEAD`, torch and Triton versions, the command), the plan, every shard's output, and a summary (each
   shard's exit status, wall time and last pytest line, the slowest tests, the total wall time); next to it
   <log stem>.shard<i>.log per shard and <log stem>_durations.json (measured seconds per test: pass it to --costs);
5. exits 1 if any shard failed or timed out, 2 on a usage error.

Shards are processes, not GPUs: --jobs may exceed --gpus (several shards share a GPU; the tests are compile-bound,
so a 16-core host with one H100 runs 4 shards in about a quarter of the time). --jobs 0 picks
max(#GPUs, min(8, #CPUs // 4)). Each shard's libraries get its share of the cores for their CPU threads
(`shard_threads`: OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, unless already set): each library's
default is every core, and several shards with a thread per core, beside the Triton compiles, stall in their
parallel regions. Without CUDA it refuses unless --allow-cpu, which runs the same plumbing on the CPU
(the gpu tests skip there), to check the script.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COST = 10.0          # seconds per test of a file the table does not know (its tests stay together)
STARTUP_S = 15.0             # per shard: Python, torch, Triton, collection, CUDA context (for the printed estimate)

# Estimated seconds per test on the H100 host (compile-bound: a case that compiles its own kernels costs their
# compile), and the group each test joins: "file", "function", "param" (the tests of one parameter case, across the
# file's functions: they share that case's cached computation), or a label (tests with one label share a process).
# First match wins (a regular expression searched in the node id). Sums per file, roughly: attention ≈ 150 s,
# stable attention ≈ 225 s (the fast path ≈ 50 s, two emulated groups ≈ 110 and ≈ 65 s), gradients ≈ 200 s
# (seven cases of ≈ 10-60 s), deviation ≈ 65 s, census ≈ 40 s, backends ≈ 35 s, delta capture ≈ 45 s (three
# cases, each training the proxy twice), train ≈ 15 s (+ 20 s DDP on two GPUs), row_pv ≈ 8 s, rounding ≈ 3 s.
# Measured durations (--costs) replace these.
COSTS = [
    # test_attention_gpu.py: native kernels ≈ 1-3 s per compile, emulated ones (16 warps) ≈ 6-16 s per constexpr set
    (r"test_attention_gpu\.py::test_native_error_at_most_twice_pytorch_bf16", 3.5, "function"),
    (r"test_attention_gpu\.py::test_delta_kernel_native_equals_emulated", 1.0, "function"),
    (r"test_attention_gpu\.py::test_exact_matmul_inputs_native_equals_emulated_bitwise", 14.0, "attention-dial"),
    (r"test_attention_gpu\.py::test_dial_native_matches_emulated_on_random_inputs", 2.0, "attention-dial"),
    (r"test_attention_gpu\.py::test_fix_native_detects_like_emulated_on_split_ties", 5.0, "attention-fix"),
    (r"test_attention_gpu\.py::test_native_round_block_fix_sees_ties_split_across_tiles", 4.0, "attention-fix"),
    (r"test_attention_gpu\.py::test_native_round_block_error_at_most_twice_pytorch_bf16", 5.0, "function"),
    (r"test_attention_gpu\.py::test_round_block_native_matches_emulated_on_random_inputs", 15.0, "attention-rb"),
    (r"test_attention_gpu\.py::test_round_block_exact_matmul", 12.0, "attention-rb"),
    (r"test_attention_gpu\.py::test_native_one_tile_blocks_equal_round_block_0", 12.0, "function"),
    # test_stable_attention_gpu.py: the fast path (fallback configs, ≈ 1-4 s per compile) and the two emulated
    # groups (the research kernel's emulated path at 4 warps ≈ 35 s per backward, EMULATE ≈ 6 s per kernel)
    (r"test_stable_attention_gpu\.py::test_causal_ties_dq_against_the_oracle", 45.0, "stable-emulated-causal"),
    (r"test_stable_attention_gpu\.py::test_(planted_ties_within_twice_the_fa2_oracle\[stable_fast|error_at|fast_path|"
     r"fix_on|tile_configs)", 3.5, "stable-fast"),
    (r"test_stable_attention_gpu\.py::test_(planted|emulate_equals).*-True\]", 8.0, "stable-emulated-causal"),
    (r"test_stable_attention_gpu\.py::test_(planted|emulate_equals).*-False\]", 8.0, "stable-emulated"),
    # the rest: whole files
    (r"test_census_gpu\.py::test_gpu_census_equals", 4.0, "file"),
    (r"test_census_gpu\.py::test_census_at_the_monitors_shape", 5.0, "file"),
    (r"test_census_gpu\.py::", 4.0, "file"),
    (r"test_backends_gpu\.py::", 4.5, "file"),
    (r"test_delta_capture_gpu\.py::", 15.0, "param"),
    (r"test_gradients_gpu\.py::test_every_variant_within_its_rule", 28.0, "param"),   # the case's gc.run
    (r"test_gradients_gpu\.py::test_normalised_dp_p", 8.0, "function"),
    (r"test_gradients_gpu\.py::", 0.5, "param"),                                     # read the case's run
    (r"test_deviation_gpu\.py::test_fa_deviation_small_grid", 40.0, "function"),
    (r"test_deviation_gpu\.py::", 12.0, "file"),
    (r"test_train_gpu\.py::test_ddp", 20.0, "file"),
    (r"test_train_gpu\.py::", 2.5, "file"),
    (r"test_row_pv_gpu\.py::", 4.0, "file"),
    (r"test_rounding_gpu\.py::", 3.0, "file"),
]
# Tests that need more than one GPU: their shard also sees the next GPU(s) (it still runs on its own first).
NEEDS_GPUS = {r"test_train_gpu\.py::test_ddp_nccl_two_gpus": 2}


# ------------------------------------------------------------------------------------------------------ the plan
def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def _param(nodeid: str) -> str:
    """The file and the parameter case of a node id ("tests/gpu/f.py[case]"); the node id itself without one."""
    _, sep, case = nodeid.partition("[")
    return f"{_file(nodeid)}[{case}" if sep else nodeid


_GROUP = {"file": _file, "function": _function, "param": _param}


def estimate(nodeid: str, measured: dict | None = None) -> tuple[float, str]:
    """(seconds, group) of one test: `measured` seconds when given for it, else the `COSTS` table's (unknown
    files: DEFAULT_COST, grouped by file). The group comes from the table either way."""
    cost, group = DEFAULT_COST, _file(nodeid)
    for pattern, seconds, how in COSTS:
        if re.search(pattern, nodeid):
            cost = seconds
            group = _GROUP[how](nodeid) if how in _GROUP else how
            break
    if measured and nodeid in measured:
        cost = float(measured[nodeid])
    return cost, group


def split_costs(nodeids: list[str], measured: dict | None) -> dict:
    """Seconds of the parameter cases of tests that `measured` knows only whole: a test function measured without
    parameters and since split into cases (a node id "f::test[case]" absent from `measured`, while "f::test" is in
    it) gets its measured seconds divided evenly over its collected cases. The others get nothing here (their own
    measurement, or the table). Takes the collected node ids; returns {node id: seconds}."""
    if not measured:
        return {}
    cases: dict[str, list[str]] = {}
    for nid in nodeids:
        whole = _function(nid)
        if nid not in measured and whole != nid and whole in measured:
            cases.setdefault(whole, []).append(nid)
    return {nid: float(measured[whole]) / len(ids) for whole, ids in cases.items() for nid in ids}


def needs_gpus(nodeid: str) -> int:
    return max([n for pattern, n in NEEDS_GPUS.items() if re.search(pattern, nodeid)], default=1)


def assign_gpus(shards: list[dict], devices: list[str]) -> list[list[str]]:
    """CUDA_VISIBLE_DEVICES of each shard: shard i runs on devices[i mod n]; one that holds a test needing g GPUs
    also sees the next g − 1 (cyclically, at most all n). Without devices: [] each (the variable stays unset)."""
    if not devices:
        return [[] for _ in shards]
    n = len(devices)
    return [[devices[(i + j) % n] for j in range(min(s["gpus"], n))] for i, s in enumerate(shards)]


def plan(nodeids: list[str], n_shards: int, measured: dict | None = None) -> list[dict]:
    """Deal the tests to at most `n_shards` shards: group them (`estimate`; `split_costs` for the tests `measured`
    knows only whole), then give the groups, longest first (ties: collection order), each to the shard with the
    least estimated seconds so far (the lowest index among equals). Returns the non-empty shards as {"nodeids"
    (collection order), "seconds", "groups", "gpus"} dicts, longest first. Equal costs deal whole files
    round-robin."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    if measured:
        measured = {**split_costs(nodeids, measured), **measured}
    groups: dict[str, dict] = {}
    for i, nid in enumerate(nodeids):
        cost, name = estimate(nid, measured)
        g = groups.setdefault(name, {"name": name, "first": i, "nodeids": [], "seconds": 0.0, "gpus": 1})
        g["nodeids"].append(nid)
        g["seconds"] += cost
        g["gpus"] = max(g["gpus"], needs_gpus(nid))
    shards = [{"nodeids": [], "seconds": 0.0, "groups": [], "gpus": 1} for _ in range(n_shards)]
    for g in sorted(groups.values(), key=lambda g: (-g["seconds"], g["first"])):
        s = min(shards, key=lambda s: s["seconds"])           # first of the least loaded
        s["nodeids"] += g["nodeids"]
        s["seconds"] += g["seconds"]
        s["groups"].append(g["name"])
        s["gpus"] = max(s["gpus"], g["gpus"])
    order = {nid: i for i, nid in enumerate(nodeids)}
    for s in shards:
        s["nodeids"].sort(key=order.__getitem__)
    return sorted((s for s in shards if s["nodeids"]), key=lambda s: -s["seconds"])


# -------------------------------------------------------------------------------------- a plugin for the shards
# `-p run_sharded` in a shard (tests/gpu on its PYTHONPATH): records each test's seconds (setup + call + teardown) and
# the shard's device, into the JSON file named by $RUN_SHARDED_OUT.
# The file is rewritten after every test, so that a shard killed at its timeout still leaves what it measured.
_RECORD: dict = {"device": "unknown", "durations": {}}


def _dump():
    path = os.environ.get("RUN_SHARDED_OUT")
    if path:
        Path(path).write_text(json.dumps(_RECORD, indent=1))


def pytest_sessionstart(session):
    try:
        import torch
        _RECORD["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception as e:  # noqa: BLE001  (a device name is not worth failing the shard)
        _RECORD["device"] = f"unknown ({type(e).__name__})"
    _dump()


def pytest_runtest_logreport(report):
    d = _RECORD["durations"]
    d[report.nodeid] = d.get(report.nodeid, 0.0) + float(report.duration)
    if report.when == "teardown":
        _dump()


# ------------------------------------------------------------------------------------------------------ running
def _collect(marker: str, paths: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker, *paths]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 5):          # 5: nothing collected
        raise RuntimeError(f"collection failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return [line.strip() for line in p.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def _cuda_devices() -> list[str]:
    """The GPU ids this process may use (CUDA_VISIBLE_DEVICES's entries, or 0..n-1), empty without CUDA."""
    try:
        import torch
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        n = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in visible.split(",") if x.strip()] if visible else [str(i) for i in range(n)]
    return ids[:n]


def _git_commit() -> str:
    if os.environ.get("BOOK_GIT_COMMIT"):
        return os.environ["BOOK_GIT_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def _versions() -> str:
    out = []
    for mod in ("torch", "triton"):
        try:
            out.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001
            out.append(f"{mod} missing")
    return f"Python {sys.version.split()[0]}, " + ", ".join(out)


class _Shard:
    def __init__(self, index: int, spec: dict, gpus: list[str] | None, args, marker: str, log_base: Path,
                 threads: int = 0):
        self.index, self.spec, self.gpus = index, spec, gpus
        self.log = log_base.with_name(f"{log_base.stem}.shard{index}.log")
        self.out = log_base.with_name(f"{log_base.stem}.shard{index}.json")
        self.tag = f"[shard {index}{' gpu ' + ','.join(gpus) if gpus else ''}] "
        self.timeout = args.timeout or max(240.0, 2 * (spec["seconds"] + STARTUP_S))
        self.cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "run_sharded",
                    "-o", f"faulthandler_timeout={max(1, int(self.timeout // 2))}", "-m", marker,
                    *args.pytest_args, *spec["nodeids"]]
        env = dict(os.environ, PYTHONUNBUFFERED="1", RUN_SHARDED_OUT=str(self.out))
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), str(ROOT),
                                             *filter(None, [os.environ.get("PYTHONPATH")])])
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        if threads > 0:                 # the shard's share of the cores (`shard_threads`), unless the caller set them
            for var in THREAD_VARS:
                env.setdefault(var, str(threads))
        self.env = env
        self.lines: list[str] = []
        self.rc, self.wall, self.timed_out = None, 0.0, False

    def start(self, lock: threading.Lock):
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        self.reader = threading.Thread(target=self._read, args=(lock,), daemon=True)
        self.reader.start()

    def _read(self, lock):
        with self.log.open("w") as f:
            for line in self.proc.stdout:
                self.lines.append(line)
                f.write(line)
                f.flush()
                with lock:
                    sys.stdout.write(self.tag + line)
                    sys.stdout.flush()

    def kill(self):
        """Kill the shard's process group (pytest and whatever it started: torchrun, compile workers)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def poll(self) -> bool:
        """True once finished (killing it past its timeout)."""
        if self.rc is not None:
            return True
        if self.proc.poll() is None:
            if time.perf_counter() - self.t0 <= self.timeout:
                return False
            self.timed_out = True
            self.kill()
        self.reader.join(timeout=30)
        self.wall = time.perf_counter() - self.t0
        self.rc = 124 if self.timed_out else self.proc.returncode
        return True

    def measured(self) -> dict:
        """The shard's record (device, seconds per test), read once; its file is removed."""
        try:
            data = json.loads(self.out.read_text())
            self.out.unlink()
            return data
        except (OSError, ValueError):
            return {}

    def last_line(self) -> str:
        tail = [ln.strip() for ln in self.lines if ln.strip()]
        if self.timed_out:
            return f"TIMED OUT after {self.timeout:.0f} s"
        return tail[-1] if tail else "(no output)"


def _auto_jobs(n_gpus: int) -> int:
    return max(n_gpus, min(8, (os.cpu_count() or 1) // 4))


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def shard_threads(jobs: int, cores: int | None = None) -> int:
    """CPU threads each of `jobs` concurrent shards may use: the cores this process may run on (`cores`, default its
    affinity), shared out, at least 1."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:          # no affinity on this platform
            cores = os.cpu_count() or 1
    return max(1, int(cores) // max(1, int(jobs)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=0, help="GPUs to use (0: every visible one)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="pytest processes (default: one per GPU; 0: max(#GPUs, min(8, #CPUs // 4)))")
    ap.add_argument("--log", default=None, help="combined log (default: gpu_tests.log in the current directory)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds a shard may run before it is killed (default: 240 or twice its estimate, the longer)")
    ap.add_argument("--costs", default=None, help="a previous run's <log stem>_durations.json (seconds per test)")
    ap.add_argument("--all", action="store_true", help="also the tests marked slow")
    ap.add_argument("--marker", default=None, help="pytest -m expression (default: 'gpu and not slow', or 'gpu')")
    ap.add_argument("--paths", nargs="+", default=["tests"], help="where to collect, inside the repository (default: tests)")
    ap.add_argument("--allow-cpu", action="store_true", help="run without CUDA (the gpu tests skip): checks the script")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    ap.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments for every shard")
    args = ap.parse_args(argv)
    if args.gpus < 0 or (args.jobs is not None and args.jobs < 0) or (args.timeout is not None and args.timeout <= 0):
        ap.error("--gpus, --jobs must be >= 0 and --timeout > 0")

    devices = _cuda_devices()
    if not devices and not args.allow_cpu:
        print("run_sharded: no CUDA GPU visible (use --allow-cpu to run the plumbing on the CPU: the gpu tests skip)",
              file=sys.stderr)
        return 2
    if devices:
        if args.gpus > len(devices):
            print(f"run_sharded: --gpus {args.gpus} but only {len(devices)} visible: {devices}", file=sys.stderr)
            return 2
        devices = devices[:args.gpus or len(devices)]
        n_dev = len(devices)
    else:
        n_dev = max(1, args.gpus)
    jobs = n_dev if args.jobs is None else (_auto_jobs(n_dev) if args.jobs == 0 else args.jobs)
    marker = args.marker or ("gpu" if args.all else "gpu and not slow")
    measured = None
    if args.costs:
        data = json.loads(Path(args.costs).read_text())
        measured = data.get("durations", data)

    t_all = time.perf_counter()
    nodeids = _collect(marker, args.paths)
    if not nodeids:
        print(f"run_sharded: no tests match -m '{marker}' under {args.paths}", file=sys.stderr)
        return 1
    shards = plan(nodeids, jobs, measured)
    log = Path(args.log or "gpu_tests.log").resolve()
    log.parent.mkdir(parents=True, exist_ok=True)
    threads = shard_threads(len(shards))
    runs = [_Shard(i, spec, gpus or None, args, marker, log, threads)
            for i, (spec, gpus) in enumerate(zip(shards, assign_gpus(shards, devices)))]
    plan_lines = [f"{len(nodeids)} tests (-m '{marker}'), {len(runs)} shard(s) on "
                  f"{', '.join(devices) if devices else 'the CPU'} (--jobs {jobs}), "
                  f"{runs[0].env.get('OMP_NUM_THREADS', 'default')} CPU threads each"]
    for r in runs:
        plan_lines.append(f"shard {r.index}: {len(r.spec['nodeids'])} tests, ≈ {r.spec['seconds'] + STARTUP_S:.0f} s "
                          f"estimated, timeout {r.timeout:.0f} s, CUDA_VISIBLE_DEVICES="
                          f"{','.join(r.gpus) if r.gpus else '(unset)'}; groups: {', '.join(r.spec['groups'])}")
    print("\n".join(plan_lines), flush=True)
    if args.dry_run:
        for r in runs:
            print(f"--- shard {r.index}\n" + "\n".join(r.spec["nodeids"]))
        return 0

    lock = threading.Lock()
    try:
        for r in runs:
            r.start(lock)
        while not all([r.poll() for r in runs]):
            time.sleep(0.5)
    except KeyboardInterrupt:           # the shards run in their own sessions: Ctrl-C does not reach them
        for r in runs:
            if getattr(r, "proc", None) is not None and r.proc.poll() is None:
                r.kill()
        raise
    wall = time.perf_counter() - t_all

    durations, devices_seen = {}, {}
    for r in runs:
        m = r.measured()
        durations.update(m.get("durations", {}))
        devices_seen[r.index] = m.get("device", "unknown (the shard wrote no record)")
    failed = [r for r in runs if r.rc != 0]
    names = sorted(set(devices_seen.values()))
    header = [
        f"# GPU tests, {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}: "
        f"{'FAILED' if failed else 'passed'} in {wall:.0f} s wall",
        f"# device: {'; '.join(names)} ({', '.join(f'shard {i}: {d}' for i, d in devices_seen.items())})",
        f"# git commit: {_git_commit()}",
        f"# {_versions()}",
        f"# command: {shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv)}",
        *(f"# {line}" for line in plan_lines)]
    summary = ["## summary"]
    for r in runs:
        summary.append(f"shard {r.index} ({','.join(r.gpus) if r.gpus else 'cpu'}): exit {r.rc}, {r.wall:.0f} s "
                       f"(≈ {r.spec['seconds'] + STARTUP_S:.0f} s estimated): {r.last_line()}")
    slow = sorted(durations.items(), key=lambda kv: -kv[1])[:15]
    summary.append("slowest tests: " + "; ".join(f"{nid} {s:.1f} s" for nid, s in slow))
    verdict = f"FAILED: shard(s) {', '.join(str(r.index) for r in failed)}" if failed else "all shards passed"
    summary.append(f"total wall time: {wall:.1f} s; {verdict}")
    body = []
    for r in runs:
        body.append(f"## shard {r.index} ({','.join(r.gpus) if r.gpus else 'cpu'}): "
                    f"{shlex.join(r.cmd[:len(r.cmd) - len(r.spec['nodeids'])])} and {len(r.spec['nodeids'])} node ids\n")
        body.append("".join(r.lines))
    log.write_text("\n".join(header) + "\n" + "".join(body) + "\n" + "\n".join(summary) + "\n")
    log.with_name(f"{log.stem}_durations.json").write_text(json.dumps(
        {"device": names, "git_commit": _git_commit(), "durations": durations}, indent=1))
    print("\n".join(summary), flush=True)
    print(f"log: {log}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
