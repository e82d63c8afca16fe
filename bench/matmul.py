#!/usr/bin/env python3
"""cuDNN matmul plans of pycudadrv against torch.matmul, and the host cost of one execution against C.

What is measured (the method in full: docs/cudnn.md, "The benchmark")
--------------------------------------------------------------------
1. **Throughput.** ``out = a @ b``, n x n, n = 256 ... 8192, float32, float16,
   bfloat16 (compute float32) and float32+TF32 (``--no-tf32`` to skip): a
   ``matmul_plan`` (and an autotuned one at n >= 2048, ``--no-autotune`` to
   skip) against ``torch.matmul(a, b, out=c)`` on the same memory and stream;
   CUDA-event times of ``reps`` back-to-back calls, ``--rounds`` alternating
   rounds, same-round ratios, medians, TFLOP/s. Like is compared with like
   only: the float32 rows run in a child process started with
   ``NVIDIA_TF32_OVERRIDE=0`` (true float32 on both sides; the variable must
   be set before NVIDIA's libraries load, so no process can set it for
   itself), TF32 rows allow TF32 on both sides. Every row's outputs are
   checked against NumPy float64 (16 rows of out) and against each other
   within its precision's tolerance (float32 2e-5, TF32 2e-3, half types
   1e-2); a row outside it is **invalid** and left out of the summary's time
   ratios. Target (H200): within 1.10x of torch's time at n >= 2048.
2. **Host cost of one execution.** A 64 x 64 x 64 float16 plan, ``--launches``
   calls per row per round in batches of ``--batch``, interleaved rounds
   (``bench/_harness.run_interleaved``) against two C floors built in this
   run: ``cuLaunchKernel`` of an empty kernel (``bench/c_floor.c``) and
   cuDNN's own ``cudnnBackendExecute`` on the very handle, execution plan and
   variant pack the plan executes (``bench/c_cudnn_floor.c``, handles from
   ``MatmulPlan._raw_handles``). Rows: ``plan(a, b, out, stream=s)``, the plan
   captured into a graph (``g.launch()``), ``torch.matmul(out=)``. Target
   (H200): ``plan(...)`` under 2x the cuLaunchKernel floor; where cuDNN's own
   floor is already over it, no caller of cuDNN can meet it, and the summary
   says so (``host_target_reachable``, ``host_note``).

Output: the tables on stdout (last), ``bench/results/matmul.json`` (every
per-round figure; ``summary``: ``worst_time_vs_torch_ge2048``,
``host_us_per_execute_over_c``, ``host_us_per_execute_over_cudnn_c``,
``invalid_rows``, ...) and ``bench/results/matmul.png``.

Usage: ``python bench/matmul.py [--sizes 256,...,8192] [--rounds 5]`` (``--help``).
Exits 2 when CUDA, cuDNN or a C compiler is missing; with ``--strict``, 1 when
a target is missed or a row is invalid.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
from itertools import repeat
from pathlib import Path
from time import perf_counter, perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _cfloor/_harness/_report, wherever run from

import numpy as np  # noqa: E402

from _cfloor import BENCH_DIR, BenchSetupError, _compiler_version, compile_shared, kernel_params, shown_command  # noqa: E402
from _harness import (KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, batched, loop_call0, run_interleaved, setup,  # noqa: E402
                      summarize)
from _report import (add_output_args, bar_panel, check_common_args, common_args, log, new_parser,  # noqa: E402
                     print_ratio_table, pyplot, row_color, save_figure, write_json, write_report)

SIZES = (256, 512, 1024, 2048, 4096, 8192)
DTYPES = ("float32", "float16", "bfloat16")
TF32 = "float32+TF32"
TARGET_TIME_RATIO = 1.10          # pycudadrv / torch at sizes >= 2048
TARGET_HOST_RATIO = 2.0           # one execution / one cuLaunchKernel
HOST_SHAPE = (64, 64, 64)
FLOOR = "C floor (cuLaunchKernel loop)"
CUDNN_FLOOR = "C floor of cuDNN (cudnnBackendExecute loop)"
PLAN_ROW = "pycudadrv plan(a, b, out, stream=s)"
GRAPH_ROW = "pycudadrv graph of one plan, g.launch()"
TORCH_ROW = "torch.matmul(a, b, out=c)"
CUDNN_FLOOR_SOURCE = BENCH_DIR / "c_cudnn_floor.c"
OVERRIDE = "NVIDIA_TF32_OVERRIDE"
#: Relative Frobenius error allowed against float64 (and between pycudadrv and torch), by what a row
#: computes. float32 sums of n = 8192 products stay near 4e-6; TF32 rounds the inputs (about 3e-4).
TOLERANCE = {"float32": 2e-5, "tf32": 2e-3, "float16": 1e-2, "bfloat16": 1e-2}
CHECK_ROWS = 16                   # rows of out compared with NumPy float64

# --------------------------------------------------------------------------- set-up

def torch_peer(pdev):
    """(torch, its version) or (None, the reason it is skipped)."""
    try:
        import torch
    except ImportError as e:
        return None, f"skipped: not installed ({e})"
    if not torch.cuda.is_available():
        return None, "skipped: torch.cuda.is_available() is False"
    torch.cuda.init()
    pdev.set_current()
    return torch, torch.__version__


def torch_switches(torch, tf32):
    """Make torch compute what the pycudadrv plan computes: float32 without TF32
    (unless ``tf32``), half types accumulated in float32 throughout."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    if hasattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


class Operands:
    """a, b, out of one size and dtype: torch tensors (when torch is there) and
    the pycudadrv Buffers over the same memory."""

    def __init__(self, cd, torch, n, dtype, rng):
        self.torch_ok = torch is not None
        if torch is not None:
            tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
            g = torch.Generator(device="cuda").manual_seed(int(rng.integers(1 << 31)))
            self.ta = torch.randn((n, n), device="cuda", dtype=tdt, generator=g)
            self.tb = torch.randn((n, n), device="cuda", dtype=tdt, generator=g)
            self.tc = torch.empty((n, n), device="cuda", dtype=tdt)
            self.tc_torch = torch.empty((n, n), device="cuda", dtype=tdt)
            torch.cuda.synchronize()
            wrap = (lambda t: cd.asbuffer(t.view(torch.int16))) if dtype == "bfloat16" else cd.asbuffer
            self.a, self.b, self.out = wrap(self.ta), wrap(self.tb), wrap(self.tc)
            self.out_torch = wrap(self.tc_torch)
        else:
            dt = np.float32 if dtype == "float32" else (np.float16 if dtype == "float16" else np.uint16)
            host = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(2)]
            if dtype == "bfloat16":
                host = [(h.view(np.uint32) >> 16).astype(np.uint16) for h in host]
            self.a, self.b = (cd.Buffer.from_numpy(h.astype(dt)) for h in host)
            self.out = cd.Buffer.empty((n, n), dt)
            self.out_torch = None
            cd.Device(0).synchronize()


def event_time_ms(cd, s, fn, reps):
    """GPU milliseconds per call of ``fn`` over ``reps`` back-to-back calls on ``s``."""
    e0, e1 = cd.Event(), cd.Event()
    e0.record(s)
    for _ in range(reps):
        fn()
    e1.record(s)
    return cd.Event.elapsed_ms(e0, e1) / reps


def rel_diff(torch, x, y):
    x, y = x.double(), y.double()
    return float(torch.linalg.norm(x - y) / torch.linalg.norm(y))


# --------------------------------------------------------------------------- throughput

def precision_of(dtype, override):
    """What a row computes: float32 rows run under NVIDIA_TF32_OVERRIDE=0; TF32 rows compute in TF32
    unless this process has the override (then in float32, still compared with a TF32 tolerance)."""
    return ("float32" if override else "tf32") if dtype == TF32 else dtype


def _host64(buf, dtype, n, rows=None):
    """Rows ``rows`` (all when None) of the n x n operand ``buf`` (``dtype``) as float64, read back."""
    isz = 4 if dtype == "float32" else 2
    raw = buf.read() if rows is None else np.concatenate([buf.read(offset=int(r) * n * isz, nbytes=n * isz)
                                                          for r in rows])
    if dtype == "bfloat16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(-1, n)
    return raw.view(np.float32 if dtype == "float32" else np.float16).astype(np.float64).reshape(-1, n)


def check_row(torch, ops, n, plan_dtype, precision):
    """pycudadrv's (and torch's) out against NumPy float64 on CHECK_ROWS rows, and against each other
    (whole matrix), each within TOLERANCE[precision]: the row's validity."""
    rows = np.unique(np.linspace(0, n - 1, CHECK_ROWS).astype(np.int64))
    ref = _host64(ops.a, plan_dtype, n, rows) @ _host64(ops.b, plan_dtype, n)
    errs = {who: float(np.linalg.norm(_host64(buf, plan_dtype, n, rows) - ref) / np.linalg.norm(ref))
            for who, buf in (("pycudadrv", ops.out), ("torch", ops.out_torch)) if buf is not None}
    tol = TOLERANCE[precision]
    rep = {"precision": precision, "tolerance": tol, "rel_err_vs_float64": errs, "checked_rows": len(rows)}
    if torch is not None:
        rep["rel_diff_vs_torch"] = rel_diff(torch, ops.tc, ops.tc_torch)
    bad = [f"{who} {e:.1e} from float64" for who, e in errs.items() if not e <= tol]
    if "rel_diff_vs_torch" in rep and not rep["rel_diff_vs_torch"] <= tol:
        bad.append(f"pycudadrv and torch {rep['rel_diff_vs_torch']:.1e} apart")
    rep["valid"] = not bad
    if bad:
        rep["invalid_reason"] = f"{', '.join(bad)} (over the {precision} tolerance {tol:.0e})"
    return rep


def measure_size(cd, cudnn, torch, s, ext, n, dtype, rounds, rng, autotune, target_ms, override):
    """One (size, dtype) row: per-round times of pycudadrv (default and
    autotuned plans) and torch, their ratios, TFLOP/s, the precision check.
    A plan cuDNN refuses gives a row with "refused" (the message) instead."""
    plan_dtype = "float32" if dtype == TF32 else dtype
    tf32 = dtype == TF32
    t0 = perf_counter()
    try:
        plan = cudnn.matmul_plan((n, n), (n, n), plan_dtype, allow_tf32=tf32)
    except cd.NotSupportedError as e:
        return {"n": n, "dtype": dtype, "precision": precision_of(dtype, override), "refused": str(e)}
    build_s = perf_counter() - t0
    tuned, tune_s = None, None
    if autotune:
        t0 = perf_counter()
        tuned = cudnn.matmul_plan((n, n), (n, n), plan_dtype, allow_tf32=tf32, autotune=True)
        tune_s = perf_counter() - t0
    ops = Operands(cd, torch, n, plan_dtype, rng)
    s.wait_stream(cd.Device(0).default_stream)
    a, b, out = ops.a, ops.b, ops.out
    calls = {"pycudadrv": lambda: plan(a, b, out, stream=s)}
    if tuned is not None:
        calls["pycudadrv autotuned"] = lambda: tuned(a, b, out, stream=s)
    if torch is not None:
        torch_switches(torch, tf32)
        ta, tb, tct, matmul = ops.ta, ops.tb, ops.tc_torch, torch.matmul

        def torch_call():              # on ext (= s): the caller has made it torch's current stream
            matmul(ta, tb, out=tct)
        calls["torch"] = torch_call
    with (torch.cuda.stream(ext) if torch is not None else contextlib.nullcontext()):
        # Warm-up (code loading, torch's heuristics) and the number of calls per timing.
        est = {}
        for name, fn in calls.items():
            fn()
            s.synchronize()
            est[name] = event_time_ms(cd, s, fn, 1)
        reps = max(2, min(200, int(target_ms / max(min(est.values()), 1e-3))))
        times = {name: [] for name in calls}
        names = list(calls)
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                times[name].append(event_time_ms(cd, s, calls[name], reps))
            s.synchronize()
    flops = 2.0 * n ** 3
    rep = {"n": n, "dtype": dtype, "reps": reps, "plan_build_s": build_s, "engine": plan.engine,
           "workspace_nbytes": plan.workspace_nbytes, "rows": {}}
    for name, ts in times.items():
        rep["rows"][name] = {"ms": ts, "ms_summary": summarize(ts),
                             "tflops": flops / (statistics.median(ts) * 1e-3) / 1e12}
    if tuned is not None:
        rep["autotune_s"] = tune_s
        rep["autotuned_engine"] = tuned.engine
    if torch is not None:
        for name in [x for x in names if x != "torch"]:
            ratios = [p / t for p, t in zip(times[name], times["torch"])]
            rep["rows"][name]["time_vs_torch"] = ratios
            rep["rows"][name]["time_vs_torch_summary"] = summarize(ratios)
    s.synchronize()
    out.fill(np.uint16(0xFFFF) if plan_dtype != "float32" else np.uint32(0xFFFFFFFF), stream=s)   # NaN
    plan(a, b, out, stream=s)
    if torch is not None:
        ops.out_torch.fill(np.uint16(0xFFFF) if plan_dtype != "float32" else np.uint32(0xFFFFFFFF), stream=s)
        with torch.cuda.stream(ext):
            torch_call()
    s.synchronize()
    rep.update(check_row(torch, ops, n, plan_dtype, precision_of(dtype, override)))
    return rep


def run_float32_child(args):
    """The float32 rows, measured by this script in a child process started with
    NVIDIA_TF32_OVERRIDE=0 (true float32 on both sides); (rows, what happened)."""
    import pycudadrv
    with tempfile.TemporaryDirectory(prefix="pycudadrv-matmul-") as tmp:
        path = Path(tmp) / "float32.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--float32-child", str(path),
               "--sizes", ",".join(map(str, args.sizes)), "--rounds", str(args.rounds),
               "--target-ms", str(args.target_ms)] + (["--no-autotune"] if args.no_autotune else [])
        env = dict(os.environ, **{OVERRIDE: "0"})
        here = os.path.dirname(os.path.dirname(os.path.abspath(pycudadrv.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
        log(f"  float32 rows: child process with {OVERRIDE}=0 ...")
        proc = subprocess.run(cmd, env=env)
        if proc.returncode != 0 or not path.exists():
            return [], {"status": f"failed: the child exited with {proc.returncode}"}
        data = json.loads(path.read_text())
    return data["results"], {"status": "ok", "tf32_override": data["tf32_override"], "torch": data["torch"]}


def throughput(cd, cudnn, pdev, dtypes, args, override, seed):
    """Every (dtype, size) row of ``dtypes``, torch where installed; (rows, torch or None, its status)."""
    torch, torch_info = torch_peer(pdev)
    log(f"  torch: {torch_info}")
    s = cd.Stream()
    ext = torch.cuda.ExternalStream(s.handle) if torch is not None else None
    rng = np.random.default_rng(seed)
    results = []
    for dtype in dtypes:
        for n in args.sizes:
            results.append(measure_size(cd, cudnn, torch, s, ext, n, dtype, args.rounds, rng,
                                        autotune=not args.no_autotune and n >= 2048, target_ms=args.target_ms,
                                        override=override))
            log_row(results[-1])
            cudnn.clear_cache()
    return results, torch, torch_info


def float32_child(args) -> int:
    """``--float32-child PATH``: measure the float32 rows here (NVIDIA_TF32_OVERRIDE=0 must be in
    this process's environment), write them to PATH as JSON."""
    import pycudadrv as cd
    from pycudadrv import cudnn
    reason = (f"{OVERRIDE}=0 is not in the environment" if os.environ.get(OVERRIDE) != "0" else
              cudnn.unavailable_reason() or (None if cd.is_available() else "no CUDA device"))
    if reason is not None:
        print(f"matmul --float32-child: {reason}", file=sys.stderr)
        return 2
    pdev = cd.Device(0)
    pdev.set_current()
    results, _, torch_info = throughput(cd, cudnn, pdev, ["float32"], args, True, seed=2025)
    write_json(Path(args.float32_child), {"results": results, "torch": torch_info,
                                          "tf32_override": cudnn.tf32_override()})
    return 0


def log_row(r):
    if "refused" in r:
        log(f"  {r['dtype']:<13} n={r['n']:<5} refused by pycudadrv: {r['refused'].splitlines()[0]}")
        return
    p = r["rows"]["pycudadrv"]
    ratio = p.get("time_vs_torch_summary", {}).get("median")
    log(f"  {r['dtype']:<13} n={r['n']:<5} pycudadrv {p['tflops']:7.1f} TFLOP/s"
        + (f", x{ratio:.3f} torch's time" if ratio is not None else "")
        + f"  (plan {r['plan_build_s'] * 1e3:.0f} ms; {r['precision']}: "
        + ("valid" if r["valid"] else f"INVALID: {r['invalid_reason']}") + ")")


# --------------------------------------------------------------------------- host cost

class CudnnFloor:
    """The compiled ``c_cudnn_floor.c`` (a C loop of ``cudnnBackendExecute``), bound to the loaded
    libcudnn at ``libcudnn_path``; ``header_check`` says whether it was checked against cudnn_graph.h."""

    def __init__(self, lib, libcudnn_path, compile_cmd, compiler_version, header_check):
        self.lib, self.compile_cmd, self.compiler_version = lib, compile_cmd, compiler_version
        self.header_check = header_check
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
        for name, args, res in (("init", [S], I), ("init_error", [], S), ("status_name", [I], S),
                                ("execute_loop", [P, P, P, I], ctypes.c_double)):
            f = getattr(lib, f"cudnn_floor_{name}")
            f.argtypes, f.restype = args, res
        if lib.cudnn_floor_init(libcudnn_path.encode()) != 0:
            raise BenchSetupError(f"cuDNN C floor: {lib.cudnn_floor_init_error().decode(errors='replace')}")

    def execute_loop(self, handle: int, plan: int, pack: int, iters: int) -> int:
        """``iters`` x ``cudnnBackendExecute(handle, plan, pack)``; elapsed nanoseconds measured in C."""
        sec = self.lib.cudnn_floor_execute_loop(handle, plan, pack, iters)
        if sec < 0:
            code = int(round(-sec))
            raise RuntimeError(f"cuDNN C floor: cudnnBackendExecute failed: "
                               f"{self.lib.cudnn_floor_status_name(code).decode(errors='replace')} ({code})")
        return int(round(sec * 1e9))


def _cudnn_header_flags(libcudnn_path):
    """(-D/-I flags that check c_cudnn_floor.c against cudnn_graph.h, where it is), or ([], why not)."""
    from pycudadrv import cudnn
    from pycudadrv._paths import find_cuda_include
    dirs = []
    if os.path.isabs(libcudnn_path):
        dirs.append(os.path.normpath(os.path.join(os.path.dirname(libcudnn_path), "..", "include")))
    dirs += [os.path.join(d, "cudnn", "include") for d in cudnn._nvidia_dirs()]
    inc = next((d for d in dirs if os.path.isfile(os.path.join(d, "cudnn_graph.h"))), None)
    if inc is None:
        return [], "not checked: no cudnn_graph.h beside the library or in the nvidia-cudnn wheel"
    try:
        cuda_inc = find_cuda_include(require=("cuda_runtime_api.h",))
    except FileNotFoundError:
        return [], f"not checked: {inc}/cudnn_graph.h needs cuda_runtime_api.h, not found"
    return ["-DPYCUDADRV_CHECK_CUDNN_H", f"-I{inc}", f"-I{cuda_inc}"], f"checked against {inc}/cudnn_graph.h"


def build_cudnn_floor(libcudnn_path: str) -> CudnnFloor:
    """Compile ``c_cudnn_floor.c`` as bench/_cfloor.py compiles c_floor.c (cc -O2 -shared -fPIC ... -ldl),
    checked against cuDNN's header where one is installed, and bind it to the loaded ``libcudnn_path``.
    Raises BenchSetupError when the compiler is missing or the compile fails."""
    flags, header = _cudnn_header_flags(libcudnn_path)
    out, cmd, cc, proc = compile_shared(CUDNN_FLOOR_SOURCE, "c_cudnn_floor.so", flags, ["-ldl"])
    if proc.returncode != 0 and flags and "static assert" not in proc.stderr:
        header = f"not checked: compiling with the header failed ({proc.stderr.strip().splitlines()[:1]})"
        out, cmd, cc, proc = compile_shared(CUDNN_FLOOR_SOURCE, "c_cudnn_floor.so", (), ["-ldl"])
    if proc.returncode != 0:
        raise BenchSetupError(f"compiling the cuDNN C floor failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return CudnnFloor(ctypes.CDLL(out), libcudnn_path, shown_command(cmd), _compiler_version(cc), header)


def host_cost(cd, cudnn, torch, floor, pdev, args):
    m, k, n = HOST_SHAPE
    fn = cd.compile(KERNEL_SRC).load().function(KERNEL_NAME)
    s = cd.Stream()
    ka = cd.Buffer.zeros(N_ELEMS, np.float32, stream=s)
    kb = cd.Buffer.zeros(N_ELEMS, np.float32, stream=s)
    c_params = kernel_params(ka.ptr, kb.ptr, 0, 1.0)
    plan = cudnn.matmul_plan((m, k), (k, n), "float16")
    rng = np.random.default_rng(7)
    a = cd.Buffer.from_numpy(rng.standard_normal((m, k)).astype(np.float16), stream=s)
    b = cd.Buffer.from_numpy(rng.standard_normal((k, n)).astype(np.float16), stream=s)
    out = cd.Buffer.empty((m, n), np.float16, stream=s)
    plan(a, b, out, stream=s)
    with s.capture() as g:
        plan(a, b, out, stream=s)
    g.upload()
    s.synchronize()

    def in_batches(run_batch):
        return batched(run_batch, s.synchronize, args.batch)

    def c_floor(count):
        pdev.set_current()       # untimed: the C loop times itself
        return in_batches(lambda c: floor.launch_loop(fn.handle, s.handle, c_params, c))(count)

    def plan_loop(count):
        it = repeat(None, count)
        t0 = perf_counter_ns()
        for _ in it:
            plan(a, b, out, stream=s)
        return perf_counter_ns() - t0

    rows = [Row(PLAN_ROW, in_batches(plan_loop), s.synchronize),
            Row(GRAPH_ROW, in_batches(loop_call0(g.launch)), s.synchronize)]
    cudnn_c = {"status": "skipped"}
    try:
        cfl = build_cudnn_floor(cudnn.library_path())
    except BenchSetupError as e:
        cudnn_c = {"status": f"skipped: {e}"}
        log(f"  {CUDNN_FLOOR}: {cudnn_c['status']}")
    else:
        # The very handle (its stream set to s), execution plan and variant pack plan(a, b, out, stream=s) uses.
        h, ep, pack = plan._raw_handles(a, b, out, stream=s)

        def cudnn_floor(count):
            pdev.set_current()   # untimed, as for the other floor
            return in_batches(lambda c: cfl.execute_loop(h, ep, pack, c))(count)
        rows.append(Row(CUDNN_FLOOR, cudnn_floor, s.synchronize, essential=False, keep=cfl))
        cudnn_c = {"status": "ok", "compile": cfl.compile_cmd, "compiler": cfl.compiler_version,
                   "header": cfl.header_check}
    peer = {"status": "skipped: torch not available"}
    if torch is not None:
        ext = torch.cuda.ExternalStream(s.handle)
        ta = torch.randn((m, k), device="cuda", dtype=torch.float16)
        tb = torch.randn((k, n), device="cuda", dtype=torch.float16)
        tc = torch.empty((m, n), device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
        pdev.set_current()
        matmul = torch.matmul

        def torch_loop(count):
            it = repeat(None, count)
            with torch.cuda.stream(ext):
                t0 = perf_counter_ns()
                for _ in it:
                    matmul(ta, tb, out=tc)
                return perf_counter_ns() - t0
        rows.append(Row(TORCH_ROW, in_batches(torch_loop), s.synchronize, essential=False, keep=(ta, tb, tc, ext)))
        peer = {"status": "ok"}
    res = run_interleaved(Row(FLOOR, c_floor, s.synchronize), rows, rounds=args.host_rounds,
                          launches=args.launches, warmup_rounds=1, sync_all=s.synchronize, label="host",
                          log=lambda msg: None)
    g.close()
    return {"shape": HOST_SHAPE, "dtype": "float16", "launches_per_round": args.launches, "batch": args.batch,
            **host_report(res), "torch": peer, "cudnn_c_floor": cudnn_c, "engine": plan.engine}


def host_report(res):
    """The floor and rows of the host-cost table (Interleaved.floor_report / row_report), the rows
    dropped, and plan()'s same-round ratio to cuDNN's own C floor where that ran."""
    rep = {"floor": res.floor_report(), "rows": {name: res.row_report(name) for name in res.rows},
           "dropped_rows": dict(res.dropped)}
    if CUDNN_FLOOR in res.rows:
        over = res.ratios_between(PLAN_ROW, CUDNN_FLOOR)
        rep["rows"][PLAN_ROW]["ratio_to_cudnn_floor"] = over
        rep["rows"][PLAN_ROW]["ratio_to_cudnn_floor_summary"] = summarize(over)
    return rep


# --------------------------------------------------------------------------- report

def worst_ratio(results, dtypes, row):
    """The largest median time ratio to torch of ``row`` over the valid rows of ``dtypes`` at n >= 2048."""
    vals = [r["rows"][row]["time_vs_torch_summary"]["median"] for r in results
            if r["n"] >= 2048 and r["dtype"] in dtypes and r.get("valid") and row in r["rows"]
            and "time_vs_torch_summary" in r["rows"][row]]
    return max(vals) if vals else None


def invalid_rows(results):
    """One line per row that was refused or whose precision does not match what it claims."""
    out = []
    for r in results:
        if "refused" in r:
            out.append(f"{r['dtype']} n={r['n']}: refused ({r['refused'].splitlines()[0][:160]})")
        elif not r.get("valid"):
            out.append(f"{r['dtype']} n={r['n']}: {r.get('invalid_reason', 'not checked')}")
    return out


def host_summary(host):
    """The host-cost part of the summary: pycudadrv's plan() against both C floors, and whether the
    target (under 2x cuLaunchKernel) is reachable by any caller of cudnnBackendExecute."""
    rows = host["rows"]
    plan_ratio = rows[PLAN_ROW]["ratio_summary"]["median"]
    out = {"host_us_per_execute_over_c": plan_ratio,
           "host_us_per_execute": rows[PLAN_ROW]["per_launch_us_summary"]["median"],
           "c_floor_us": host["floor"]["per_launch_us_summary"]["median"],
           "graph_us_per_launch_over_c": rows[GRAPH_ROW]["ratio_summary"]["median"] if GRAPH_ROW in rows else None}
    if CUDNN_FLOOR in rows:
        cud = rows[CUDNN_FLOOR]["ratio_summary"]["median"]
        over = rows[PLAN_ROW]["ratio_to_cudnn_floor_summary"]["median"]
        reachable = cud < TARGET_HOST_RATIO
        out.update({"host_us_per_execute_over_cudnn_c": over,
                    "cudnn_c_floor_us": rows[CUDNN_FLOOR]["per_launch_us_summary"]["median"],
                    "cudnn_c_floor_over_c": cud, "host_target_reachable": reachable})
        out["host_note"] = (
            f"cuDNN's own C loop of cudnnBackendExecute costs {out['cudnn_c_floor_us']:.2f} us per execution, "
            f"{cud:.2f}x the cuLaunchKernel floor ({out['c_floor_us']:.2f} us): "
            + (f"the {TARGET_HOST_RATIO}x target is reachable; " if reachable else
               f"no caller of cudnnBackendExecute can be under {TARGET_HOST_RATIO}x it; ")
            + f"pycudadrv's plan() costs {over:.3f}x cuDNN's own floor"
            + (f"; a graph of the plan (g.launch()) costs {out['graph_us_per_launch_over_c']:.2f}x the "
               "cuLaunchKernel floor" if out["graph_us_per_launch_over_c"] is not None else ""))
    else:
        out.update({"host_us_per_execute_over_cudnn_c": None, "host_target_reachable": None,
                    "host_note": f"cuDNN C floor {host['cudnn_c_floor']['status']}"})
    return out


def print_tables(results, host, summary):
    print()
    print(f"{'dtype':<14}{'n':>6}{'pycudadrv':>11}{'torch':>9}{'x torch':>9}{'tuned':>9}{'x torch':>9}"
          f"{'vs f64':>9}{'vs torch':>10}  check       engine")
    print(f"{'':<14}{'':>6}{'TFLOP/s':>11}{'TFLOP/s':>9}{'(time)':>9}{'TFLOP/s':>9}{'(time)':>9}"
          f"{'rel err':>9}{'rel diff':>10}")
    print("-" * 110)
    for r in results:
        if "refused" in r:
            print(f"{r['dtype']:<14}{r['n']:>6}  refused: {r['refused'].splitlines()[0][:80]}")
            continue
        rows = r["rows"]
        p, t, q = rows.get("pycudadrv"), rows.get("torch"), rows.get("pycudadrv autotuned")

        def ratio(x):
            return f"{x['time_vs_torch_summary']['median']:>9.3f}" if x and "time_vs_torch_summary" in x \
                else f"{'-':>9}"
        check = f"{r['precision']} ok" if r.get("valid") else "INVALID"
        print(f"{r['dtype']:<14}{r['n']:>6}{p['tflops']:>11.1f}"
              f"{(t['tflops'] if t else float('nan')):>9.1f}{ratio(p)}"
              f"{(q['tflops'] if q else float('nan')):>9.1f}{ratio(q)}"
              f"{r['rel_err_vs_float64']['pycudadrv']:>9.1e}{r.get('rel_diff_vs_torch', float('nan')):>10.1e}"
              f"  {check:<12}{r['engine'].get('engine')}")
    bad = summary["invalid_rows"]
    if bad:
        print("invalid rows (left out of the summary's time ratios):")
        for line in bad:
            print(f"  {line}")
    print_ratio_table(host, drain=False, unit="us/call",
                      extra=[("x cuDNN C", 11, ".3f",
                              lambda r: r.get("ratio_to_cudnn_floor_summary", {}).get("median"))],
                      heading=f"host cost of one execution ({'x'.join(map(str, HOST_SHAPE))} float16), "
                              "median over rounds (x cuDNN C: plan() over cuDNN's own C floor):")
    print()
    w, h = summary["worst_time_vs_torch_ge2048"], summary["host_us_per_execute_over_c"]
    print(f"worst pycudadrv/torch time at n >= 2048 (valid rows): {w if w is None else round(w, 3)} (target <= "
          f"{TARGET_TIME_RATIO}: {summary['pass_time']}); autotuned: "
          f"{summary['worst_time_vs_torch_ge2048_autotuned']}; TF32: {summary['worst_time_vs_torch_ge2048_tf32']}")
    print(f"host cost: {h:.3f}x the cuLaunchKernel floor (target < {TARGET_HOST_RATIO}: {summary['pass_host']}); "
          f"{summary['host_note']}")


def plot(path, results, host, title):
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    colors = {"float32": "tab:blue", "float16": "tab:orange", "bfloat16": "tab:green", TF32: "tab:purple"}
    for dtype in colors:
        rs = [r for r in results if r["dtype"] == dtype and "refused" not in r]
        if not rs:
            continue
        xs = [r["n"] for r in rs]
        ax1.plot(xs, [r["rows"]["pycudadrv"]["tflops"] for r in rs], "o-", color=colors[dtype],
                 label=f"pycudadrv {dtype}" + ("" if all(r.get("valid") for r in rs) else " (INVALID rows)"))
        if all("torch" in r["rows"] for r in rs):
            ax1.plot(xs, [r["rows"]["torch"]["tflops"] for r in rs], "s--", color=colors[dtype], alpha=0.6,
                     label=f"torch {dtype}")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("n (a, b, out are n x n)")
    ax1.set_ylabel("TFLOP/s (median over rounds)")
    ax1.legend(fontsize=7)
    ax1.set_title("matmul throughput: cuDNN plan vs torch.matmul, same stream and memory\n"
                  "(float32: both sides under NVIDIA_TF32_OVERRIDE=0)", fontsize=10)
    names = [FLOOR, *host["rows"]]
    vals = [host["floor"]["per_launch_us_summary"]["median"]] + \
        [host["rows"][n]["per_launch_us_summary"]["median"] for n in host["rows"]]
    bar_panel(ax2, names, vals, colors=[row_color(nm, "C floor" in nm) for nm in names],
              labels=[f"{v:.2f} us" for v in vals], room=1.3, title="host cost of one execution",
              xlabel="host us per call (red: 2x the cuLaunchKernel floor)")
    ax2.axvline(vals[0] * TARGET_HOST_RATIO, color="red", ls="--", lw=1.2)
    ax2.set_xlim(0, max(vals + [vals[0] * TARGET_HOST_RATIO]) * 1.3)
    save_figure(fig, path, title)


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="square sizes n (default 256..8192)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="default float32,float16,bfloat16")
    common_args(ap, rounds=5, launches=10_000, warmup=False, rotate=False)   # --launches: host-cost executions
    ap.add_argument("--target-ms", type=float, default=10.0, help="GPU ms per timing (default 10)")
    ap.add_argument("--no-autotune", action="store_true", help="skip the autotuned plans (sizes >= 2048)")
    ap.add_argument("--no-tf32", action="store_true", help="skip the float32+TF32 rows")
    ap.add_argument("--host-rounds", type=int, default=15, help="host-cost rounds (default 15)")
    ap.add_argument("--batch", type=int, default=500, help="executions per timed batch (0: all at once)")
    ap.add_argument("--float32-child", metavar="PATH", help=argparse.SUPPRESS)   # internal: the float32 rows
    add_output_args(ap)
    args = check_common_args(ap, ap.parse_args(argv))
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    args.dtypes = [x.strip() for x in args.dtypes.split(",") if x.strip()]
    if any(d not in DTYPES for d in args.dtypes) or not args.sizes or args.host_rounds < 1:
        ap.error(f"--dtypes from {DTYPES}, --host-rounds >= 1, at least one size")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.float32_child:
        return float32_child(args)
    bench = setup("matmul", f"sizes {args.sizes[0]}..{args.sizes[-1]}, {args.rounds} rounds")
    if bench is None:
        return 2
    cd, floor, pdev, title = bench.cd, bench.floor, bench.pdev, bench.title
    from pycudadrv import cudnn
    reason = cudnn.unavailable_reason()
    if reason is not None:
        print(f"matmul: cuDNN is not available: {reason}", file=sys.stderr)
        return 2
    override = cudnn.tf32_override()
    log(f"  cuDNN {'.'.join(map(str, cudnn.version()))} at {cudnn.library_path()}; {OVERRIDE}=0 "
        + ("in effect here: the float32 rows run in this process, the TF32 rows compute float32 too" if override
           else "not set here: the float32 rows run in a child process that has it"))
    results, float32_info = [], {"status": "not asked for"}
    if "float32" in args.dtypes and not override:
        results, float32_info = run_float32_child(args)
        if float32_info["status"] != "ok":
            log(f"  float32 rows: {float32_info['status']}")
    here = [d for d in args.dtypes if d != "float32" or override]
    dtypes = here + ([] if args.no_tf32 or "float32" not in args.dtypes else [TF32])
    t_start = perf_counter()
    rows, torch, torch_info = throughput(cd, cudnn, pdev, dtypes, args, override, seed=2024)
    results += rows
    log(f"  throughput done in {perf_counter() - t_start:.1f} s; host cost ...")
    host = host_cost(cd, cudnn, torch, floor, pdev, args)
    worst = worst_ratio(results, DTYPES, "pycudadrv")
    hs = host_summary(host)
    bad = invalid_rows(results)
    summary = {
        "worst_time_vs_torch_ge2048": worst,
        "host_us_per_execute_over_c": hs.pop("host_us_per_execute_over_c"),
        "host_us_per_execute_over_cudnn_c": hs.pop("host_us_per_execute_over_cudnn_c"),
        "worst_time_vs_torch_ge2048_autotuned": worst_ratio(results, DTYPES, "pycudadrv autotuned"),
        "worst_time_vs_torch_ge2048_tf32": worst_ratio(results, (TF32,), "pycudadrv"),
        **hs,
        "invalid_rows": bad,
        "target_time_vs_torch": TARGET_TIME_RATIO,
        "target_host_over_c": TARGET_HOST_RATIO,
        "pass_time": worst is not None and worst <= TARGET_TIME_RATIO,
        "pass_precision": not bad,
    }
    summary["pass_host"] = summary["host_us_per_execute_over_c"] < TARGET_HOST_RATIO
    data = {
        "summary": summary,
        **bench.report_header(),
        "cudnn_version": ".".join(map(str, cudnn.version())),
        "cudnn_library": cudnn.library_path(),
        "tf32_override_here": override,
        "float32_rows": float32_info,
        "torch": torch_info,
        "config": {"sizes": args.sizes, "dtypes": sorted({*args.dtypes, *dtypes}), "rounds": args.rounds,
                   "target_ms": args.target_ms, "autotune": not args.no_autotune, "host_shape": HOST_SHAPE,
                   "host_rounds": args.host_rounds, "launches": args.launches, "batch": args.batch,
                   "tolerance": TOLERANCE, "checked_rows": CHECK_ROWS,
                   "torch_switches": "allow_tf32 off (on for float32+TF32), fp16/bf16 reduced-precision "
                                     f"reduction off; float32 rows under {OVERRIDE}=0"},
        "throughput": results,
        "host": host,
    }
    write_report(args.results_dir, "matmul", data,
                 None if args.no_plot else lambda path: plot(path, results, host, title))
    print_tables(results, host, summary)
    passed = summary["pass_host"] and summary["pass_precision"] and (summary["pass_time"] or worst is None)
    return 1 if (args.strict and not passed) else 0


if __name__ == "__main__":
    sys.exit(main())
