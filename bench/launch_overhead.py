#!/usr/bin/env python3
"""Kernel-launch overhead of pycudadrv against a C floor and its peers.

What is measured
----------------
One kernel, ``bench_kernel(float* a, const float* b, int n, float s)``, launched
with ``n = 0`` (no thread touches memory), grid 1, block 32, on one owned
non-blocking stream. Every row launches that same kernel with the same
parameters; what differs is the code between the Python caller and
``cuLaunchKernel``:

* **C floor** -- a C loop of ``cuLaunchKernel`` over the same CUfunction,
  stream and a prebuilt ``void* params[]``, from ``bench/c_floor.c`` compiled
  in this run with the system compiler and called through ctypes from this
  process (it times itself with CLOCK_MONOTONIC, so the ctypes call is not in
  its figure). It is the cost of the driver call alone.
* **C floor + cuCtxGetCurrent** -- the same C loop with a ``cuCtxGetCurrent``
  before each launch: the driver call pycudadrv's per-launch context check
  (``Device.activate``) makes, priced alone (``c_ctx_check_over_c`` in the
  summary; compiled sources without it skip the row).
* **pycudadrv generic** -- ``fn.launch(1, 32, a, b, 0, 1.0, stream=s)``:
  grid/block parsing, checks, marshalling of all four arguments, every call.
* **pycudadrv prepared** -- ``p = fn.bind(1, 32, a, b, 0, 1.0, stream=s)``
  once, then ``p.launch()``; extra rows: ``p(a, b, 0, 1.0)`` (re-marshal all
  arguments each call) and ``p.launch()`` with the GIL released around the
  driver call (``pycudadrv._launch.set_release_gil(True)``; the default holds it).
  Every row but that one runs with the default.
* **peers, where installed** -- cuda.bindings ``cuLaunchKernel`` (with a
  prebuilt ``void**`` given as an int address, and with its ``(values,
  ctypes types)`` tuple form; plus the private ``cuda.bindings._v2`` layer's
  ``launch_kernel`` where that exists), cuda.core ``launch``, CuPy
  ``RawKernel``. Each is optional: a missing or failing peer is reported as
  skipped.

Method
------
Only ratios measured in one process, interleaved, mean anything: launch cost
drifts with clocks, caches and whatever else the host is doing. So each round
times ``--launches`` (20,000) launches of every row in turn, the C floor first,
between every two rows and again last (each row's floor is the mean of the
C runs just before and just after it: on a shared host launch cost drifts by
10-20% over the second a round takes, and a floor run adjacent to the row
cancels that; ``--unpaired`` times the floor only first and last), the rows
in an order rotated by one every round. Each row's
timing region (``time.perf_counter_ns``) covers its launches only; after it,
its stream is synchronised outside the timing (that drain time is recorded
too), so no row starts with another's work still queued; each round ends
with one synchronize of every stream. One warm-up round is not counted; then
``--rounds`` (15) rounds. For each row: the median over rounds of its
per-launch time, and the median (and min, max) over rounds of its ratio to
that same round's C floor. All Python loops have the same shape (``for _ in
itertools.repeat(None, n)`` over a method bound to a local), so the loop
itself costs every Python row the same few tens of nanoseconds.

A second table repeats the prepared (and generic) path with kernels of 1, 4,
16 and 64 parameters (a pointer then ints) against the C floor with the same
counts.

Targets (H200): prepared <= 1.10x the floor; generic <= 1.30x.

Output: the tables on stdout, ``bench/results/launch_overhead.json`` (device,
driver, versions, every per-round figure, the summaries) and
``bench/results/launch_overhead.png`` when matplotlib is installed.

Usage: ``python bench/launch_overhead.py [--rounds 15] [--launches 20000]``
(``--help`` for the rest). Exits 2 when CUDA or a C compiler is missing; with
``--strict``, 1 when a target is missed.
"""
from __future__ import annotations

import ctypes
import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _cfloor, _harness, _report, wherever we are run from

import numpy as np  # noqa: E402

from _cfloor import BenchSetupError, ParamArray, PeerSkipped, build_call_floor, kernel_params  # noqa: E402
from _harness import BLOCK, GRID, KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, cuda_core_peer, cupy_bench_kernel, launch_hook, loop_call0, median_or_nan, run_interleaved, setup, setup_peers, summarize, sync_all_streams  # noqa: E402
from _report import add_output_args, log, new_parser, print_skipped, pyplot, save_figure, write_report  # noqa: E402

PARAM_COUNTS = (1, 4, 16, 64)

FLOOR = "C floor (cuLaunchKernel loop)"
GENERIC = "pycudadrv generic launch"
PREPARED = "pycudadrv prepared"
PREPARED_REMARSHAL = "pycudadrv prepared, re-marshal"
PREPARED_GIL = "pycudadrv prepared, GIL released"
CALL_FLOOR = "Python call floor (no-op C function, same call)"
CTX_FLOOR = "C floor + cuCtxGetCurrent per launch"
CB_PREBUILT = "cuda.bindings cuLaunchKernel (prebuilt void**)"
CB_TUPLE = "cuda.bindings cuLaunchKernel (args tuple)"
CB_V2 = "cuda.bindings._v2 launch_kernel (prebuilt void**)"
CORE = "cuda.core launch"
CUPY = "CuPy RawKernel"

TARGETS = {PREPARED: 1.10, GENERIC: 1.30}


# --------------------------------------------------------------------------- timed loops
# Each factory returns run(n) -> nanoseconds for n launches; only the loop is timed.

def loop_call_args(f, args):
    """n x f(*args)."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            f(*args)
        return perf_counter_ns() - t0
    return run


def loop_generic(fn, args, stream, spelled=False):
    """n x fn.launch(GRID, BLOCK, *args, stream=stream); ``spelled``: the main
    kernel's four arguments written out in the call, as a caller would."""
    launch = fn.launch
    if spelled:
        a, b, k, s = args

        def run(n):
            it = repeat(None, n)
            t0 = perf_counter_ns()
            for _ in it:
                launch(GRID, BLOCK, a, b, k, s, stream=stream)
            return perf_counter_ns() - t0
        return run

    def run_n(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            launch(GRID, BLOCK, *args, stream=stream)
        return perf_counter_ns() - t0
    return run_n


class _NoopLaunch:
    """Gives ``call_floor.noop`` the ``.launch`` attribute loop_generic calls."""

    def __init__(self, noop):
        self.launch = noop


def loop_gil_released(f, set_release_gil):
    """n x f() with pycudadrv releasing the GIL around the driver call; the
    setting in force before (the default: held) comes back after, so no other
    row runs with it."""
    inner = loop_call0(f)

    def run(n):
        prev = set_release_gil(True)
        try:
            return inner(n)
        finally:
            set_release_gil(prev)
    return run


def c_floor_row(floor, name, fn, stream, params, pdev):
    def run(n):
        pdev.set_current()  # untimed: the C loop times itself
        return floor.launch_loop(fn.handle, stream.handle, params, n)
    return Row(name, run, stream.synchronize)


# --------------------------------------------------------------------------- peers

def peer_cuda_bindings(fn, stream, kp_prebuilt: ParamArray, a, b):
    """Rows over cuda.bindings' cuLaunchKernel: kernelParams as the int address
    of the prebuilt void** (the very array the C floor uses), and as the
    ((values), (ctypes types)) tuple that cuda.bindings marshals every call;
    plus cuda.bindings._v2.driver.launch_kernel (ints, raises on error) with
    the prebuilt void** where that private layer exists. Every call's result
    is checked, as pycudadrv and the C floor check theirs."""
    try:
        from cuda.bindings import driver as cbd
        import cuda.bindings as cb_pkg
        version = getattr(cb_pkg, "__version__", "?")
    except ImportError:
        try:
            from cuda import cuda as cbd  # cuda-python < 12.6 layout
            import cuda as cb_pkg
            version = getattr(cb_pkg, "__version__", "?")
        except ImportError as e:
            raise PeerSkipped(f"not installed ({e})") from None
    launch = cbd.cuLaunchKernel
    cbd.cuInit(0)
    f = cbd.CUfunction(fn.handle)
    h = cbd.CUstream(stream.handle)
    kp_int = kp_prebuilt.address
    kp_tuple = ((a.ptr, b.ptr, 0, 1.0), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float))

    # Probe: learn what a successful call returns, so the loop can check every
    # result by identity (an enum member, or a cached small int).
    r1 = launch(f, GRID, 1, 1, BLOCK, 1, 1, 0, h, kp_int, 0)
    r2 = launch(f, GRID, 1, 1, BLOCK, 1, 1, 0, h, kp_tuple, 0)
    ok = r1[0]
    if ok != cbd.CUresult.CUDA_SUCCESS or r2[0] != cbd.CUresult.CUDA_SUCCESS:
        raise PeerSkipped(f"cuLaunchKernel returned {r1!r} / {r2!r}")
    by_identity = r2[0] is ok
    stream.synchronize()

    class CudaBindingsError(RuntimeError):
        pass

    def make_run(kp):
        def run(n):
            it = repeat(None, n)
            if by_identity:
                t0 = perf_counter_ns()
                for _ in it:
                    r = launch(f, GRID, 1, 1, BLOCK, 1, 1, 0, h, kp, 0)
                    if r[0] is not ok:
                        raise CudaBindingsError(repr(r))
                return perf_counter_ns() - t0
            t0 = perf_counter_ns()
            for _ in it:
                r = launch(f, GRID, 1, 1, BLOCK, 1, 1, 0, h, kp, 0)
                if r[0] != ok:
                    raise CudaBindingsError(repr(r))
            return perf_counter_ns() - t0
        return run

    rows = [Row(CB_PREBUILT, make_run(kp_int), stream.synchronize, essential=False),
            Row(CB_TUPLE, make_run(kp_tuple), stream.synchronize, essential=False)]
    meta = {"version": version, "module": cbd.__name__, "result_check": "identity" if by_identity else "=="}

    # Newer cuda.bindings also ship a private, int-handle, raise-on-error
    # driver layer (cuda.bindings._v2.driver.launch_kernel); measured where present.
    try:
        from cuda.bindings._v2 import driver as d2
    except ImportError:
        meta["_v2"] = "not present"
    else:
        try:
            lk, fh, sh = d2.launch_kernel, fn.handle, stream.handle
            lk(fh, GRID, 1, 1, BLOCK, 1, 1, 0, sh, kp_int, 0)  # probe
            stream.synchronize()

            def run_v2(n):
                it = repeat(None, n)
                t0 = perf_counter_ns()
                for _ in it:
                    lk(fh, GRID, 1, 1, BLOCK, 1, 1, 0, sh, kp_int, 0)
                return perf_counter_ns() - t0
            rows.append(Row(CB_V2, run_v2, stream.synchronize, essential=False))
            meta["_v2"] = "ok"
        except Exception as e:  # noqa: BLE001 -- a private API: skip the row, keep the others
            meta["_v2"] = f"skipped: {type(e).__name__}: {e}"
    return rows, meta


def peer_cuda_core(pdev):
    """cuda.core: its own Program, Kernel, Stream and Buffers; launch(stream, config, kernel, *args)."""
    core = cuda_core_peer(pdev)
    dev, stream, launch = core.device, core.stream, core.launch
    prog = core.Program(KERNEL_SRC, code_type="c++", options=core.ProgramOptions(arch=pdev.arch))
    kernel = prog.compile("cubin").get_kernel(KERNEL_NAME)
    owners = ()
    try:
        a = dev.allocate(N_ELEMS * 4, stream=stream)  # stream= is required by cuda.core 1.x
        b = dev.allocate(N_ELEMS * 4, stream=stream)
        buffers = "cuda.core Buffer"
    except Exception as e:  # noqa: BLE001 -- fall back to raw device pointers (ints are intptr_t)
        import pycudadrv as cd
        owners = (cd.Buffer.zeros(N_ELEMS * 4), cd.Buffer.zeros(N_ELEMS * 4))
        pdev.synchronize()
        a, b = owners[0].ptr, owners[1].ptr
        buffers = f"int pointers (dev.allocate failed: {e})"
    stream.sync()
    dev.sync()
    config = core.LaunchConfig(grid=GRID, block=BLOCK)
    k0, s0 = np.int32(0), np.float32(1.0)
    launch(stream, config, kernel, a, b, k0, s0)  # probe
    stream.sync()

    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            launch(stream, config, kernel, a, b, k0, s0)
        return perf_counter_ns() - t0

    row = Row(CORE, run, stream.sync, essential=False, keep=(dev, prog, kernel, a, b, owners, stream))
    return [row], {"version": core.version, "module": core.module, "buffers": buffers}


def peer_cupy():
    """CuPy: RawKernel over cupy arrays, launched on a non-blocking cupy Stream."""
    c = cupy_bench_kernel()
    kernel, st, a, b, grid, block, args = c.kernel, c.stream, c.a, c.b, c.grid, c.block, c.args

    def run(n):
        it = repeat(None, n)
        with st:  # current stream for the launches; untimed
            t0 = perf_counter_ns()
            for _ in it:
                kernel(grid, block, args)
            return perf_counter_ns() - t0

    row = Row(CUPY, run, st.synchronize, essential=False, keep=(kernel, st, a, b))
    return [row], {"version": c.cupy.__version__}


def peers_rows(enabled, fn, stream, kp_prebuilt, a, b, pdev):
    """The rows of every peer that is installed and works, and every peer's status."""
    def detail(info):
        extra = f" ({info.get('version')})"
        if "_v2" in info:
            extra += f"; _v2 launch_kernel: {info['_v2']}"
        return extra

    rows, info = setup_peers((("cuda.bindings", lambda: peer_cuda_bindings(fn, stream, kp_prebuilt, a, b)),
                              ("cuda.core", lambda: peer_cuda_core(pdev)),
                              ("cupy", peer_cupy)), enabled, pdev, detail)
    return [r for peer in rows.values() for r in peer], info


# --------------------------------------------------------------------------- checks

def check_c_floor(floor, fn, stream, pdev, cd):
    """The C floor's parameter array must reach the kernel intact: launch it
    once through the C loop with n = N_ELEMS, s = 2, b = 1, a = 0 and expect a = 2."""
    a = cd.Buffer.zeros(N_ELEMS, np.float32)
    b = cd.Buffer.from_numpy(np.ones(N_ELEMS, np.float32))
    pdev.synchronize()
    floor.launch_loop(fn.handle, stream.handle, kernel_params(a.ptr, b.ptr, N_ELEMS, 2.0), 1)
    stream.synchronize()
    got = a.to_numpy()
    if not np.array_equal(got, np.full(N_ELEMS, 2.0, np.float32)):
        raise BenchSetupError(f"C floor sanity check failed: expected all 2.0, got {got[:8]}...")


# --------------------------------------------------------------------------- reporting

def print_main_table(main, order):
    fl = main["floor"]
    w = max(len(n) for n in [FLOOR, *order]) + 2
    print()
    print(f"{'row':<{w}}{'us/launch':>10}{'x floor':>9}{'min':>8}{'max':>8}{'drain us':>10}"
          f"{'target':>9}  result")
    print("-" * (w + 64))
    print(f"{FLOOR:<{w}}{fl['per_launch_us_summary']['median']:>10.3f}{1.0:>9.3f}{'':>16}"
          f"{median_or_nan(fl['drain_us']):>10.1f}")
    for name in order:
        r = main["rows"][name]
        us, rt = r["per_launch_us_summary"]["median"], r["ratio_summary"]
        tgt = r.get("target")
        tail = ""
        if tgt is not None:
            tail = f"{'<= %.2f' % tgt:>9}  {'PASS' if r['pass'] else 'FAIL'}"
        print(f"{name:<{w}}{us:>10.3f}{rt['median']:>9.3f}{rt['min']:>8.3f}{rt['max']:>8.3f}"
              f"{median_or_nan(r['drain_us']):>10.1f}{tail}")
    d = fl["drift_summary"]
    print(f"(floor drift within a round, last/first: median {d['median']:.3f}, "
          f"range {d['min']:.3f}..{d['max']:.3f}; drain us: the row's stream synchronize after its "
          f"launches, untimed -- large values mean the GPU, not the CPU, set the pace)")


def print_param_table(params):
    print()
    print(f"{'params':>6}{'C us':>9}{'prepared us':>13}{'x C':>8}{'min':>8}{'generic us':>12}{'x C':>8}"
          f"{'call floor us':>15}")
    print("-" * 79)
    for n, rep in params.items():
        c = rep["floor"]["per_launch_us_summary"]["median"]
        p, g = rep["rows"][PREPARED], rep["rows"][GENERIC]
        cf = rep["rows"].get(CALL_FLOOR)
        cf_us = cf["per_launch_us_summary"]["median"] if cf else float("nan")
        print(f"{n:>6}{c:>9.3f}{p['per_launch_us_summary']['median']:>13.3f}{p['ratio_summary']['median']:>8.3f}"
              f"{p['ratio_summary']['min']:>8.3f}{g['per_launch_us_summary']['median']:>12.3f}"
              f"{g['ratio_summary']['median']:>8.3f}{cf_us:>15.3f}")
    print("(call floor: a C function that does nothing, called as the generic launch is, "
          "fn(1, 32, *args, stream=s): CPython's own cost for that call; the generic launch pays it too)")


def plot(path, main, order, params, title):
    plt = pyplot()
    if params:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax1 = plt.subplots(figsize=(9, 5.5))
        ax2 = None
    names = [FLOOR, *order]
    summ = [None] + [main["rows"][n]["ratio_summary"] for n in order]
    med = [1.0] + [r["median"] for r in summ[1:]]
    lo = [0.0] + [r["median"] - r["p25"] for r in summ[1:]]
    hi = [0.0] + [r["p75"] - r["median"] for r in summ[1:]]
    colors = ["0.5" if n == FLOOR else ("tab:blue" if n.startswith("pycudadrv") else "tab:orange")
              for n in names]
    y = list(range(len(names)))
    ax1.barh(y, med, xerr=[lo, hi], color=colors, capsize=3)
    ax1.set_yticks(y)
    ax1.set_yticklabels(names, fontsize=8)
    ax1.invert_yaxis()
    ax1.axvline(1.0, color="k", lw=0.8)
    right = max([m + h for m, h in zip(med, hi)] + [TARGETS[n] for n in names if n in TARGETS])
    for i, n in enumerate(names):
        src = main["floor"] if n == FLOOR else main["rows"][n]
        us = src["per_launch_us_summary"]["median"]
        ax1.text(med[i] + hi[i] + 0.015 * right, i, f"{med[i]:.2f}x  ({us:.2f} us)", va="center", fontsize=7)
        if n in TARGETS:
            ax1.plot([TARGETS[n]] * 2, [i - 0.42, i + 0.42], color="red", ls="--", lw=1.2)
    ax1.set_xlabel("per-launch time / C floor of the same round (median over rounds; whiskers: p25..p75)")
    ax1.set_xlim(0, right * 1.3)
    ax1.set_title("launch overhead, ratio to the C floor (red: target)", fontsize=10)

    if ax2 is not None:
        _plot_params(ax2, params)
    save_figure(fig, path, title)


def _plot_params(ax2, params):
    counts = list(params)
    x = np.arange(len(counts))
    wbar = 0.27
    for j, (label, get) in enumerate((
            ("C floor", lambda r: r["floor"]["per_launch_us_summary"]["median"]),
            ("pycudadrv prepared", lambda r: r["rows"][PREPARED]["per_launch_us_summary"]["median"]),
            ("pycudadrv generic", lambda r: r["rows"][GENERIC]["per_launch_us_summary"]["median"]))):
        ax2.bar(x + (j - 1) * wbar, [get(params[c]) for c in counts], wbar, label=label,
                color=("0.5", "tab:blue", "tab:cyan")[j])
    ax2.set_xticks(x)
    ax2.set_xticklabels([f"{c} params" for c in counts])
    ax2.set_ylabel("us per launch (median over rounds)")
    ax2.legend(fontsize=8)
    ax2.set_title("by parameter count (pointer + ints)", fontsize=10)


# --------------------------------------------------------------------------- main

def param_source(counts):
    """Kernels p1, p4, p16, p64: a float* then ints; they write nothing when the ints are 0."""
    out = []
    for n in counts:
        sig = ", ".join(["float* a", *[f"int x{i}" for i in range(1, n)]])
        if n > 1:
            body = f"    if ({' + '.join(f'x{i}' for i in range(1, n))} == 12345) a[0] = 1.0f;"
        else:
            body = "    if (a == nullptr) return;"
        out.append(f'extern "C" __global__ void p{n}({sig}) {{\n{body}\n}}\n')
    return "\n".join(out)


def parse_args(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=15, help="counted rounds (default 15)")
    ap.add_argument("--launches", type=int, default=20_000, help="launches per row per round (default 20000)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="uncounted rounds first (default 1)")
    ap.add_argument("--no-peers", action="store_true", help="skip cuda.bindings, cuda.core and CuPy")
    ap.add_argument("--no-params", action="store_true", help="skip the parameter-count table")
    ap.add_argument("--no-rotate", action="store_true", help="same row order every round")
    ap.add_argument("--unpaired", action="store_true",
                    help="the floor only first and last in each round, not between every two rows")
    add_output_args(ap)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.launches < 1 or args.warmup_rounds < 0:
        ap.error("--rounds and --launches must be >= 1, --warmup-rounds >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    bench = setup("launch_overhead", f"{args.rounds} rounds x {args.launches:,} launches")
    if bench is None:
        return 2
    cd, floor, pdev, title = bench.cd, bench.floor, bench.pdev, bench.title

    # The kernel, its stream and buffers (shared by the C floor, pycudadrv and cuda.bindings).
    mod = cd.compile(KERNEL_SRC).load()
    fn = mod.function(KERNEL_NAME)
    s = cd.Stream()
    a = cd.Buffer.zeros(N_ELEMS, np.float32)
    b = cd.Buffer.from_numpy(np.ones(N_ELEMS, np.float32))
    pdev.synchronize()  # the buffers were filled on the device's default stream
    check_c_floor(floor, fn, s, pdev, cd)

    c_params = kernel_params(a.ptr, b.ptr, 0, 1.0)
    floor_row = c_floor_row(floor, FLOOR, fn, s, c_params, pdev)

    prepared = fn.bind(GRID, BLOCK, a, b, 0, 1.0, stream=s)
    remarshal = fn.bind(GRID, BLOCK, a, b, 0, 1.0, stream=s)  # its own arena, re-filled every call
    rows = [
        Row(GENERIC, loop_generic(fn, (a, b, 0, 1.0), s, spelled=True), s.synchronize, target=TARGETS[GENERIC]),
        Row(PREPARED, loop_call0(prepared.launch), s.synchronize, target=TARGETS[PREPARED]),
        Row(PREPARED_REMARSHAL, loop_call_args(remarshal, (a, b, 0, 1.0)), s.synchronize),
    ]
    if getattr(floor, "has_ctx_launch_loop", False):
        # What the context check of every pycudadrv launch (Device.activate: cuCtxGetCurrent) costs in C.
        def ctx_run(n):
            pdev.set_current()
            return floor.ctx_launch_loop(fn.handle, s.handle, c_params, n)
        rows.append(Row(CTX_FLOOR, ctx_run, s.synchronize))
    try:
        from pycudadrv._launch import set_release_gil
    except ImportError:
        log("  (pycudadrv._launch.set_release_gil missing: no 'GIL released' row)")
    else:
        if set_release_gil(False):
            raise SystemExit("launch_overhead: launches release the GIL at start (pycudadrv's default holds it)")
        gil_released = fn.bind(GRID, BLOCK, a, b, 0, 1.0, stream=s)
        rows.append(Row(PREPARED_GIL, loop_gil_released(gil_released.launch, set_release_gil), s.synchronize))

    log("peers:")
    peer_rows, peers = peers_rows(not args.no_peers, fn, s, c_params, a, b, pdev)
    rows += peer_rows
    sync_all = sync_all_streams([s.synchronize] + [r.sync for r in peer_rows], pdev)
    hook = launch_hook()

    sync_all()
    log(f"main benchmark: {len(rows) + 1} rows")
    res = run_interleaved(floor_row, rows, rounds=args.rounds, launches=args.launches,
                          warmup_rounds=args.warmup_rounds, rotate=not args.no_rotate, sync_all=sync_all,
                          label="main", log=log, paired=not args.unpaired)
    order = [r.name for r in rows if r.name in res.rows]
    main_rep = {"floor": res.floor_report(FLOOR),
                "rows": {n: res.row_report(n, TARGETS.get(n)) for n in order}}

    # Parameter-count table: prepared (and generic) against C with the same counts.
    params_rep = {}
    call_floor = None
    if not args.no_params:
        try:
            call_floor = build_call_floor()
        except BenchSetupError as e:
            log(f"  (no Python-call floor row: {e})")
        pmod = cd.compile(param_source(PARAM_COUNTS), name="params.cu").load()
        for count in PARAM_COUNTS:
            pfn = pmod.function(f"p{count}")
            pargs = (a, *([0] * (count - 1)))
            pc = ParamArray(ctypes.c_void_p(a.ptr), *[ctypes.c_int(0) for _ in range(count - 1)])
            pprep = pfn.bind(GRID, BLOCK, *pargs, stream=s)
            prow = [Row(PREPARED, loop_call0(pprep.launch), s.synchronize),
                    Row(GENERIC, loop_generic(pfn, pargs, s), s.synchronize)]
            if call_floor is not None:      # what CPython alone spends on fn.launch(1, 32, *args, stream=s)
                prow.append(Row(CALL_FLOOR, loop_generic(_NoopLaunch(call_floor.noop), pargs, s), lambda: None))
            pres = run_interleaved(c_floor_row(floor, FLOOR, pfn, s, pc, pdev), prow, rounds=args.rounds,
                                   launches=args.launches, warmup_rounds=args.warmup_rounds,
                                   rotate=not args.no_rotate, sync_all=sync_all, label=f"{count} params",
                                   log=lambda m: None, paired=not args.unpaired)
            params_rep[count] = {"floor": pres.floor_report(FLOOR),
                                 "rows": {n: pres.row_report(n) for n in (PREPARED, GENERIC, CALL_FLOOR)
                                          if n in pres.rows},
                                 "param_bytes": 8 + 4 * (count - 1)}
            log(f"  {count} params: C {params_rep[count]['floor']['per_launch_us_summary']['median']:.3f} us, "
                f"prepared x{params_rep[count]['rows'][PREPARED]['ratio_summary']['median']:.3f}")

    # Report.
    print(f"\n=== launch overhead: {title} ===")
    print_main_table(main_rep, order)
    print_skipped(peers, res.dropped)
    if params_rep:
        print_param_table(params_rep)
    passed = all(main_rep["rows"][n]["pass"] for n in TARGETS if n in main_rep["rows"])
    print("\ntargets (median ratio to the C floor): "
          + ", ".join(f"{n} <= {t:.2f}: {'PASS' if main_rep['rows'][n]['pass'] else 'FAIL'}"
                      for n, t in TARGETS.items() if n in main_rep["rows"]))

    def med(rows, name):
        r = rows.get(name)
        return None if r is None or not r.get("ratio_summary", {}).get("n") else r["ratio_summary"]["median"]

    summary = {"prepared_over_c": med(main_rep["rows"], PREPARED), "generic_over_c": med(main_rep["rows"], GENERIC),
               "cuda_core_over_c": med(main_rep["rows"], CORE), "cupy_over_c": med(main_rep["rows"], CUPY),
               "c_ctx_check_over_c": med(main_rep["rows"], CTX_FLOOR)}
    for count, r in params_rep.items():
        summary[f"generic{count}_over_c"] = med(r["rows"], GENERIC)
        summary[f"prepared{count}_over_c"] = med(r["rows"], PREPARED)
        summary[f"call_floor{count}_over_c"] = med(r["rows"], CALL_FLOOR)
    data = {
        "summary": summary,
        **bench.report_header(),
        "config": {"rounds": args.rounds, "launches_per_round": args.launches,
                   "warmup_rounds": args.warmup_rounds, "rotate": not args.no_rotate,
                   "grid": GRID, "block": BLOCK, "n": 0, "kernel": KERNEL_SRC.strip(),
                   "param_counts": list(PARAM_COUNTS) if params_rep else []},
        "targets": TARGETS,
        "passed": passed,
        "peers": peers,
        "dropped_rows": dict(res.dropped),
        "launch_hook": None if hook is None else repr(hook),
        "main": main_rep,
        "params": {str(k): v for k, v in params_rep.items()},
    }
    write_report(args.results_dir, "launch_overhead", data,
                 None if args.no_plot else lambda path: plot(path, main_rep, order, params_rep, title))
    return 1 if (args.strict and not passed) else 0


if __name__ == "__main__":
    sys.exit(main())
