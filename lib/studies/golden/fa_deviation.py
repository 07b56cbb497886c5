"""Golden et al.'s microbenchmark: flash attention's deviation from an FP64 golden value, next to baseline attention.

One grid, four sweeps (each a list of cells; a cell = inputs × head dim × sequence length × format × implementation
× tile), every cell measured against the FP64 golden value on the *same* inputs (`lib.fp.deviation`):

* ``seq``   — sequence length (`seq_lens`) × formats (`seq_formats`) × head dims, Golden's tile rule for each head
  dim (FA1's Bc = ⌈M/4d⌉, Br = min(Bc, d), SRAM `sram_elems`), every simulator implementation (`impls`: "baseline",
  "fa2", "fa1" with FP32 state, "fa2-lowp", "fa1-lowp" with every intermediate in the format), plus our kernel's
  numerics profiles (`profiles`, BF16) and, on the GPU, the real kernels (`gpu_kernels`).
* ``dial``  — mantissa bits (`dial_bits`, 8-bit exponent; m7 = BF16) at `dial_seq_len`: the simulator and our
  kernel's profiles ("fa2", "paper", "paper+fix" — the β fix, β = `beta`; "fp32" rounds nothing and is left out).
* ``tile``  — every (Br, Bc) pair of `tiles` at `tile_seq_len` for `tile_formats` × `tile_impls`, plus our kernel
  (profile "fa2", and on the GPU the native path) with the same tiles where it accepts them.
* the claim (`claim_*` keys): Golden's finding judged by `lib.studies.golden.reading.claim_fa_deviation`.

Inputs (`inputs`): "normal" — q, k, v i.i.d. N(0, 1) in FP32 (Golden et al. do not state theirs); "attention" —
`lib.fp.inputs.attention_inputs(kind="attention")`: a few identical "sink" keys whose scores tie
exactly and dominate their rows, V of one sign (BF16 values). Each format's cell rounds the inputs to the format
first and computes the golden value on those rounded inputs, so the deviation is the algorithm's arithmetic only,
not the quantisation of the inputs, which both implementations share. `rows` query rows per (N, d) cell (H = rows // N
heads), so the max is taken over the same number of elements at every N. Non-causal unless `causal`.

How it runs: one (inputs, d, N) group at a time (one set of inputs; every group of the first head dim, which holds
the claim, the dial and the tile sweep, before the others), one format at a time within a group. Formats whose
rounded inputs are equal (FP64 and FP32 here: the inputs are FP32) share one golden value, and a cell that another
sweep already measured on the same inputs (the dial's m = 7 is the BF16 of the sequence sweep at `dial_seq_len`;
the tile sweep's Golden tile, and our kernel's `ours_block`, are sequence-sweep cells at `tile_seq_len`) is copied
with `reused` = True instead of being rerun (same inputs, same function, same arguments). Before every cell, once
`max_wall_s` (> 0) has passed, the remaining cells are recorded with the error `SKIPPED`, so that a run on a device
with a time limit still saves what it measured. With `compile_workers` > 0 a pool of spawned processes compiles
every Triton kernel our kernel's cells need into Triton's on-disk cache while the other cells run (`_Compiler`):
the emulated path takes seconds to compile each specialisation (mantissa bits, tile, head dim, profile), and the
grid needs dozens. `cpu_threads` (> 0) sets torch's intra-op threads for the run (the CPU scale's tensors are tiny).

Our kernel: on the CPU its oracle `lib.fp.reference.emulate_forward` (bit-identical to the Triton interpreter);
on the GPU `kernels.attention.attention(path="emulated")` for the profiles (FP32 inputs on the format's grid) and
`path="native"` (BF16 tensor cores) in ``gpu_kernels``. Real kernels on the GPU: "eager" (softmax(q@kᵀ·α)@v on
tensors of the format), "sdpa_math", "sdpa_flash", "sdpa_efficient" (`torch.nn.attention.sdpa_kernel`),
"ours_fa2", "ours_paper", "ours_paper+fix" (native path). FP32 matmuls run without TF32.

Result data: "records" (one dict per measurement: the cell and `lib.fp.deviation.deviation_stats`, seconds, a hash
of the output so bit-identical outputs can be recognised; FA1 cells also "pred_excess_ms", the derived excess
mean-square error over FA2 in ULP², `lib.fp.deviation.fa1_excess_prediction`), "tiles" (Golden's tile per head
dim), "claim_setup" (the claim's cell), "claims", "device", "torch", "flags" (backend precision switches),
"wall_s", "compile" (the pool: workers, kernels, seconds per compile, failures, the main process's wait).
"""
from __future__ import annotations

import hashlib
import time

import torch

from lib.fp import deviation as dv
from lib.fp.numerics import get_profile
from lib.studies.golden.reading import SKIPPED, claim_fa_deviation

SIM_IMPLS = {"baseline": None, "fa2": ("fa2", "fp32"), "fa1": ("fa1", "fp32"), "fa2-lowp": ("fa2", "format"),
             "fa1-lowp": ("fa1", "format")}
PROFILE_SPECS = {"fp32": ("fp32", None), "fa2": ("fa2", None), "paper": ("paper", None),
                 "paper+fix": ("paper", "beta")}
GPU_KERNELS = ("eager", "sdpa_math", "sdpa_flash", "sdpa_efficient", "ours_fa2", "ours_paper", "ours_paper+fix")


# ------------------------------------------------------------------------------------------------------ plan
def _fmt_of_bits(b: int) -> str:
    return "bf16" if b == 7 else f"m{b}"


def plan(cfg: dict, device: str) -> list[dict]:
    """The cells of the grid (dicts: sweep, inputs, d, N, fmt, impl, block), in a fixed order."""
    cells = []
    gpu = device == "cuda"

    def add(sweep, inputs, d, n, fmt, impl, block):
        cells.append(dict(sweep=sweep, inputs=inputs, d=d, N=n, fmt=fmt, impl=impl, block=list(block)))

    for inputs in cfg["inputs"]:
        for d in cfg["head_dims"]:
            tile = dv.golden_tile(d, cfg["sram_elems"])
            for n in cfg["seq_lens"]:
                for fmt in cfg["seq_formats"]:
                    for impl in cfg["impls"]:
                        add("seq", inputs, d, n, fmt, impl, tile)
                    if fmt == "bf16":
                        for prof in cfg["profiles"]:
                            add("seq", inputs, d, n, fmt, f"ours:{prof}", cfg["ours_block"])
                    if gpu:
                        for kern in cfg["gpu_kernels"]:
                            if kern.startswith("ours_") and fmt != "bf16":
                                continue
                            add("seq", inputs, d, n, fmt, f"gpu:{kern}",
                                cfg["ours_block"] if kern.startswith("ours_") else tile)
        d = cfg["head_dims"][0]
        tile = dv.golden_tile(d, cfg["sram_elems"])
        for b in cfg["dial_bits"]:
            for impl in cfg["impls"]:
                add("dial", inputs, d, cfg["dial_seq_len"], _fmt_of_bits(b), impl, tile)
            for prof in cfg["profiles"]:
                if prof != "fp32":      # the fp32 profile rounds nothing: the dial does not move it
                    add("dial", inputs, d, cfg["dial_seq_len"], _fmt_of_bits(b), f"ours:{prof}", cfg["ours_block"])
    for inputs in cfg["tile_inputs"]:
        d = cfg["head_dims"][0]
        for fmt in cfg["tile_formats"]:
            for br in cfg["tiles"]:
                for bc in cfg["tiles"]:
                    for impl in cfg["tile_impls"]:
                        add("tile", inputs, d, cfg["tile_seq_len"], fmt, impl, (br, bc))
        for br, bc in cfg["kernel_tiles"]:
            add("tile", inputs, d, cfg["tile_seq_len"], "bf16", "ours:fa2", (br, bc))
            if gpu:
                add("tile", inputs, d, cfg["tile_seq_len"], "bf16", "gpu:ours_fa2", (br, bc))
    for c in cells:
        dv.get_format(c["fmt"])
        kind, _, name = c["impl"].partition(":")
        if not (c["impl"] in SIM_IMPLS or (kind == "ours" and name in PROFILE_SPECS)
                or (kind == "gpu" and name in GPU_KERNELS)):
            raise ValueError(f"unknown implementation {c['impl']!r} in the configuration")
    return cells


# ------------------------------------------------------------------------------------------------- inputs
def make_inputs(kind: str, H: int, N: int, d: int, seed: int) -> tuple:
    """(q, k, v) FP32 (H, N, d) on the CPU; "normal": N(0, 1); "attention": `lib.fp.inputs.attention_inputs`."""
    if kind == "normal":
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(H, N, d, generator=g) for _ in range(3))
    if kind == "attention":
        from lib.fp.inputs import attention_inputs
        q, k, v, _ = attention_inputs("attention", 1, H, N, d, seed)
        return tuple(t[0].float() for t in (q, k, v))
    raise ValueError(f"unknown input kind {kind!r}; use 'normal' or 'attention'")


# -------------------------------------------------------------------------------------------- implementations
def _ours(q, k, v, fmt, prof, block, causal, cfg, device):
    """Our kernel's numerics profile `prof` at the format's mantissa bits (FP32 inputs on the format's grid)."""
    name, fix = PROFILE_SPECS[prof]
    f = dv.get_format(fmt)
    if f.storage not in (None, torch.bfloat16):
        raise ValueError(f"our kernel handles 8-bit-exponent formats only, got {fmt}")
    nm = get_profile(name).replace(mantissa_bits=f.mantissa_bits)
    kw = dict(causal=causal, fix=fix, beta=float(cfg["beta"]))
    if device == "cuda":
        from kernels.attention import attention
        o = attention(q.float()[None], k.float()[None], v.float()[None], numerics=nm, path="emulated",
                      block=tuple(block), **kw)
        return o[0]
    from lib.fp.reference import emulate_forward
    o = emulate_forward(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), nm, block_m=block[0], block_n=block[1],
                        **kw).o
    return torch.from_numpy(o)


def _gpu_kernel(q, k, v, fmt, kern, block, causal, cfg):
    """A real GPU kernel on tensors of the format's storage dtype. Returns O or raises."""
    import torch.nn.functional as F
    f = dv.get_format(fmt)
    if f.storage is None:
        raise ValueError("real kernels run on torch dtypes only")
    q, k, v = (t.to(f.storage) for t in (q, k, v))
    if kern == "eager":
        a = q.shape[-1] ** -0.5
        s = (q @ k.transpose(-1, -2)) * a
        if causal:
            n = s.shape[-1]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v
    if kern.startswith("sdpa_"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = {"sdpa_math": SDPBackend.MATH, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                   "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[kern]
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]
    from kernels.attention import attention
    name, fix = PROFILE_SPECS[kern.removeprefix("ours_")]
    return attention(q[None], k[None], v[None], causal=causal, numerics=name, fix=fix, beta=float(cfg["beta"]),
                     path="native", block=tuple(block))[0]


def _compute(cell, q, k, v, cfg, device):
    impl, fmt, block, causal = cell["impl"], cell["fmt"], tuple(cell["block"]), bool(cfg["causal"])
    if impl == "baseline":
        return dv.baseline_attention(q, k, v, fmt, causal=causal)
    if impl in SIM_IMPLS:
        style, state = SIM_IMPLS[impl]
        return dv.flash_attention(q, k, v, fmt, style=style, state=state, block=block, causal=causal)
    kind, _, name = impl.partition(":")
    if kind == "ours":
        return _ours(q, k, v, fmt, name, block, causal, cfg, device)
    return _gpu_kernel(q, k, v, fmt, name, block, causal, cfg)


def _hash(o: torch.Tensor) -> str:
    """A short hash of O's bytes in its own dtype: equal hashes = bit-identical outputs. The bytes are read as uint8
    (NumPy has no bfloat16, so a BF16 tensor cannot pass through `.numpy()` in its own dtype)."""
    return hashlib.sha1(o.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------- kernel compilation
def _kernel_key(cell: dict):
    """The Triton specialisation a cell of our kernel runs (None for the other cells): the emulated path's
    profile × mantissa bits × head dim × tile, or the native kernel × head dim × tile (constexprs; N is a runtime
    argument, so every N that is a multiple of 16 shares one compiled kernel)."""
    kind, _, name = cell["impl"].partition(":")
    if kind == "ours":
        return ("ours", name, dv.get_format(cell["fmt"]).mantissa_bits, cell["d"], tuple(cell["block"]))
    if kind == "gpu" and name.startswith("ours_"):
        return ("native", name, cell["d"], tuple(cell["block"]))
    return None


def kernel_specs(groups: list) -> list[dict]:
    """One spec per Triton specialisation the groups' cells need (`_kernel_key`): its key, the first cell that uses
    it, the index of the group of that first use, and a rough relative compile cost (the emulated path unrolls its
    FP32 matmuls, so its compile time grows with Br·Bc·d: 54 s at 128 × 128 and d = 64 on an idle H100, 5-8 s at
    64 × 64; the native path's tensor-core matmuls compile in 1-2 s). Ordered for submission in the order of first
    use, except that the costliest kernel after the first group's goes right after them: it is the one compile
    that can outlast the cells run before its first use (`benchmarks/fa_deviation_cost.py` simulates the orders)."""
    specs: dict = {}
    for gi, (_, cells) in enumerate(groups):
        for c in cells:
            key = _kernel_key(c)
            if key is not None and key not in specs:
                br, bc = c["block"]
                cost = br * bc * c["d"] * (1.0 if key[0] == "ours" else 0.2)
                specs[key] = dict(key=key, cell=dict(c), group=gi, cost=cost)
    first = [s for s in specs.values() if s["group"] == 0]
    rest = [s for s in specs.values() if s["group"] > 0]
    if rest:
        big = max(rest, key=lambda s: s["cost"])
        rest = [big] + [s for s in rest if s is not big]
    return first + rest


def _compile_spec(spec: dict, cfg: dict, device: str) -> float:
    """In a worker process: run the spec's first cell on one head of random inputs (its own N, head dim and tile),
    so that Triton compiles the kernel into its on-disk cache, where the main process finds it. Returns seconds."""
    t0 = time.perf_counter()
    c = spec["cell"]
    f = dv.get_format(c["fmt"])
    q, k, v = (f.round(t.to(f.work)).to(device) for t in make_inputs("normal", 1, c["N"], c["d"], 0))
    _compute(c, q, k, v, cfg, device)
    if device == "cuda":
        torch.cuda.synchronize()
    return round(time.perf_counter() - t0, 2)


class _Compiler:
    """Triton compiles our kernel's specialisations one at a time in the calling process, and the emulated path's
    compiles take seconds each (the grid needs dozens). With `workers` > 0 a pool of spawned processes compiles
    every specialisation the grid needs up front, into Triton's on-disk cache, while the main process runs the
    other cells; before the first cell of a kernel the main process waits for that kernel's compile. The pool only
    warms the cache, it never changes which kernel runs: a kernel it fails to compile is compiled by the main
    process, as without a pool, and so is every kernel once the pool breaks (a worker died) or one wait timed out
    (the pool is then given up, so that a stuck pool costs one wait, not one per kernel)."""

    def __init__(self, specs: list, cfg: dict, device: str, workers: int):
        self.pending, self.info = {}, {"workers": workers, "kernels": len(specs), "compile_s": {}, "failed": {},
                                       "waited_s": 0.0}
        self.pool, self.ready = None, set()
        if workers <= 0 or not specs:
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        small = {k: cfg[k] for k in ("causal", "beta")}
        try:        # one CPU thread each: the workers only compile, beside the main process and other jobs
            self.pool = ProcessPoolExecutor(max_workers=min(workers, len(specs)), mp_context=mp.get_context("spawn"),
                                            initializer=torch.set_num_threads, initargs=(1,))
            for s in specs:
                self.pending[s["key"]] = self.pool.submit(_compile_spec, s, small, device)
        except Exception as e:  # noqa: BLE001  (no pool: the main process compiles every kernel, as without one)
            self.info["failed"]["pool"] = _err(e)
            self.close()

    def wait(self, cell: dict, timeout: float) -> bool:
        """Wait, at most `timeout` s, for the compile of the cell's kernel. True if the cell needs no compile: no
        kernel of ours, or one the pool compiled or this process has run; False if this process will compile it."""
        from concurrent.futures import TimeoutError as FutureTimeout
        key = _kernel_key(cell)
        if key is None or key in self.ready:
            return True
        fut = self.pending.pop(key, None)
        if fut is None:
            return False
        name = "/".join(str(x) for x in key)
        t0 = time.perf_counter()
        try:
            self.info["compile_s"][name] = fut.result(timeout=min(max(0.0, timeout), 1e6))
        except FutureTimeout:
            self.info["failed"][name] = f"not compiled within {timeout:.0f} s: the pool is given up"
            self.close()
            return False
        except Exception as e:  # noqa: BLE001  (a failed compile or a broken pool: the main process compiles it)
            self.info["failed"][name] = _err(e)
            return False
        finally:
            self.info["waited_s"] += time.perf_counter() - t0
        self.ready.add(key)
        return True

    def ran(self, cell: dict):
        """The main process ran the cell: its kernel is compiled here."""
        key = _kernel_key(cell)
        if key is not None:
            self.ready.add(key)

    def close(self):
        """Stop the workers now (a compile still running is abandoned; Triton writes its cache atomically)."""
        if self.pool is not None:
            procs = list((getattr(self.pool, "_processes", None) or {}).values())
            self.pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(timeout=10)
            self.pool = None
        self.info["unused"] = self.info.get("unused", 0) + len(self.pending)
        self.pending = {}
        self.info["waited_s"] = round(self.info["waited_s"], 1)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def _groups(cells: list, cfg: dict) -> list:
    """The cells grouped by (inputs, d, N) (one set of inputs each), in the order they run: every group of the
    first head dim (the claim's, the dial's and the tile sweep's) before those of the others, so that a run cut by
    `max_wall_s` loses the extra head dims first; otherwise in plan order."""
    groups: dict = {}
    for c in cells:
        groups.setdefault((c["inputs"], c["d"], c["N"]), []).append(c)
    return sorted(groups.items(), key=lambda kv: kv[0][1] != cfg["head_dims"][0])


def run(scale: str, cfg: dict) -> dict:
    device = cfg["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("this configuration needs a CUDA GPU (device = 'cuda'); use the ci scale on the CPU")
    flags = {}
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False     # FP32 matmuls in FP32 (the working precision)
        torch.backends.cudnn.allow_tf32 = False
        flags = {"matmul.allow_tf32": False,
                 "matmul.allow_bf16_reduced_precision_reduction":
                     torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
                 "matmul.allow_fp16_reduced_precision_reduction":
                     torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}
        if hasattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed"):
            flags["math_sdp_fp16_bf16_reduction"] = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    threads = torch.get_num_threads()
    if int(cfg.get("cpu_threads", 0)) > 0:
        torch.set_num_threads(int(cfg["cpu_threads"]))
    t_all = time.perf_counter()
    budget = float(cfg.get("max_wall_s", 0.0))
    over = lambda: bool(budget) and time.perf_counter() - t_all > budget  # noqa: E731
    groups = _groups(plan(cfg, device), cfg)
    compiler = _Compiler(kernel_specs(groups), cfg, device, int(cfg.get("compile_workers", 0)))
    records = []
    try:
        for (inputs, d, n), group in groups:
            H = max(1, cfg["rows"] // n)
            if over():   # keep what was measured within the device's limit
                records += [dict(c, H=H, error=SKIPPED) for c in group]
                continue
            base = tuple(t.to(device) for t in make_inputs(inputs, H, n, d, cfg["seed"]))
            by_fmt: dict = {}
            for c in group:
                by_fmt.setdefault(c["fmt"], []).append(c)
            golds: list = []        # (inputs as FP64, golden value): formats whose rounded inputs are equal share it
            for fmt, fcells in by_fmt.items():
                f = dv.get_format(fmt)
                # The format's inputs (FP32 values on its grid; FP64 widens exactly) and their golden value. The
                # rounding runs on the device (IEEE casts and integer bit operations: the same bits as on the CPU).
                q, k, v = (f.round(t.to(f.work)) for t in base)
                wide = tuple(t.double() for t in (q, k, v))
                gold = next((g for w, g in golds if all(torch.equal(a, b) for a, b in zip(w, wide))), None)
                if gold is None:
                    gold = dv.golden_attention(q, k, v, causal=bool(cfg["causal"]))
                    golds.append((wide, gold))
                del wide
                preds: dict = {}
                done: dict = {}     # (impl, block) -> its record: a cell repeated by another sweep is not rerun
                for c in fcells:
                    rec = dict(c, H=H)
                    same = done.get((c["impl"], tuple(c["block"])))
                    if same is not None:
                        records.append(dict(same, sweep=c["sweep"], reused=True))
                        continue
                    compiled = True
                    if not over():
                        left = budget - (time.perf_counter() - t_all) if budget else float("inf")
                        compiled = compiler.wait(c, min(left, float(cfg.get("compile_wait_s", 300.0))))
                    # a kernel this process would compile itself starts only with `compile_reserve_s` of budget left
                    if over() or (budget and not compiled and budget - (time.perf_counter() - t_all)
                                  < float(cfg.get("compile_reserve_s", 150.0))):
                        records.append(dict(rec, error=SKIPPED))
                        continue
                    compiler.ran(c)
                    t0 = time.perf_counter()
                    try:
                        o = _compute(c, q, k, v, cfg, device)
                        if device == "cuda":
                            torch.cuda.synchronize()
                        rec["seconds"] = round(time.perf_counter() - t0, 4)
                        o = o.to(gold.device)
                        rec.update(dv.deviation_stats(o, gold, fmt), hash=_hash(o))
                        if c["impl"] == "fa1":      # the derived excess of per-tile storage over FA2 (u²)
                            bc = c["block"][1]
                            if bc not in preds:
                                preds[bc] = dv.fa1_excess_prediction(q, k, v, fmt, block_n=bc,
                                                                     causal=bool(cfg["causal"]))
                            rec["pred_excess_ms"] = preds[bc]
                        done[(c["impl"], tuple(c["block"]))] = rec
                    except Exception as e:  # noqa: BLE001  (a backend that refuses a dtype or tile is a finding)
                        rec["error"] = _err(e)
                    records.append(rec)
                del preds
            del golds
            print(f"[fa_deviation] {inputs} d={d} N={n}: {len(group)} cells, "
                  f"{time.perf_counter() - t_all:.0f} s", flush=True)
    finally:
        compiler.close()
        torch.set_num_threads(threads)
    data = {
        "records": records,
        "tiles": {str(d): list(dv.golden_tile(d, cfg["sram_elems"])) for d in cfg["head_dims"]},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__, "flags": flags, "wall_s": round(time.perf_counter() - t_all, 1),
        "compile": compiler.info,
    }
    skipped = sum(r.get("error") == SKIPPED for r in records)
    if skipped:
        print(f"[fa_deviation] the wall-clock budget ({budget:g} s) skipped {skipped} of {len(records)} cells",
              flush=True)
    data["claim_setup"] = {k: cfg[k] for k in ("claim_seq_len", "claim_head_dim", "claim_inputs", "tile_inputs",
                                               "seed", "causal")}
    data["claims"] = {"fa_deviation": claim_fa_deviation(data)}
    return {"data": data, "seeds": [cfg["seed"]]}
