#!/usr/bin/env python3
"""Steps per second of the particle simulation, four pycudadrv ways against C and peers.

What is measured
----------------
The simulation of ``examples/particles.py``: N bodies, one velocity Verlet step
= four small kernels (``kick_drift``, ``com_partial``, ``com_final``,
``force_kick``), every one written once to the Dispatch convention and given
the same arguments, grids and block (256) by every row. Rows:

* **pycudadrv eager** -- ``fn.launch(grid, block, *args, stream=s)`` per kernel;
* **pycudadrv prepared** -- ``p.launch()`` of one ``PreparedLaunch`` per kernel;
* **pycudadrv Dispatch** -- ``d.dispatch(grid=...)`` of one Dispatch per kernel;
* **pycudadrv graph** -- ``--k`` (100) steps captured once with
  ``stream.capture()``, replayed ``steps / k`` times with ``g.launch()``;
* **C graph replay** -- the same ``k`` steps captured in C
  (``floor_graph_capture_seq`` in ``bench/c_floor.c``: cuStreamBeginCapture, the
  same CUfunctions with the very parameter bytes pycudadrv marshals,
  cuStreamEndCapture, cuGraphInstantiateWithFlags) and replayed from a C loop of
  cuGraphLaunch: the floor of the graph way, and the reference of every round;
* **C launches** -- the same launches as a C loop of cuLaunchKernel
  (``floor_launch_seq_loop``): the floor of the launch-per-kernel ways;
* **CuPy RawKernel** (where installed) -- the same source in a
  ``cupy.RawModule``, cupy arrays, same grids and block, ``kernel(grid, block,
  args)`` per kernel on a non-blocking cupy stream;
* **cuda.core launch** (where installed) -- the same source through
  ``Program``, ``launch(stream, LaunchConfig(grid=..., block=...), kernel, *args)``.

Two sizes: N = 1,024 (launch-bound: the GPU finishes each kernel in about the
time it takes to launch it) and N = 1,048,576 (compute-bound).

Method
------
Each row's timed region is ``steps`` steps *and a synchronize of its stream*,
so every figure is steps completed on the GPU per second of wall time. The
rows run interleaved (``bench/_harness.run_interleaved``): each round times the
C graph replay, every row in turn (order rotated each round), then the C graph
again; one warm-up round is not counted. Every ratio is taken between
figures of the same round, then the median over rounds is reported. The state
keeps evolving from row to row (the integrator is symplectic; nothing
diverges). Before timing, every pycudadrv way and both C rows are run
``2 k`` steps from the same initial state and must agree bit for bit; the
peers are compared too (reported, not required: their compilers may differ).

Targets (launch-bound size, H200): prepared >= 1.3x CuPy's steps/s; graph >=
3x eager; the C graph's steps/s within 1.2x of pycudadrv's graph.

Output: the tables on stdout, ``bench/results/step_loop.json`` (device,
driver, every per-round figure, summaries) and ``bench/results/step_loop.png``
when matplotlib is installed.

Usage: ``python bench/step_loop.py [--sizes 1024,1048576] [--rounds 7]
[--no-peers] [--no-plot] [--results-dir DIR]`` (``--help`` for the rest).
Exits 2 when CUDA or a C compiler is missing; with ``--strict``, 1 when a
target is missed.
"""
from __future__ import annotations

import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter, perf_counter_ns

BENCH_DIR = Path(__file__).resolve().parent
EXAMPLES_DIR = BENCH_DIR.parent / "examples"
sys.path.insert(0, str(BENCH_DIR))       # _cfloor, _harness, _report, wherever we are run from
sys.path.insert(0, str(EXAMPLES_DIR))    # particles (the simulation and its kernels)

import numpy as np  # noqa: E402

import particles  # noqa: E402
from _cfloor import KernelSeq, PeerSkipped, param_array_from_bytes  # noqa: E402
from _harness import (Row, cuda_core_peer, launch_hook, run_interleaved, setup, setup_peers, summarize,  # noqa: E402
                      sync_all_streams)
from _report import (add_output_args, bar_panel, check_common_args, common_args, log, new_parser,  # noqa: E402
                     print_skipped, print_table, pyplot, row_color, save_figure, write_report)

C_GRAPH = "C graph replay (cuGraphLaunch loop)"
C_LAUNCH = "C launches (cuLaunchKernel loop)"
EAGER = "pycudadrv eager launch"
PREPARED = "pycudadrv prepared"
DISPATCH = "pycudadrv Dispatch"
GRAPH = "pycudadrv graph"
CUPY = "CuPy RawKernel"
CORE = "cuda.core launch"

WAY_ROWS = {EAGER: "eager", PREPARED: "prepared", DISPATCH: "dispatch", GRAPH: "graph"}

DEFAULT_SIZES = (1024, 1_048_576)
LAUNCH_BOUND_MAX = 65_536          # sizes up to this count as launch-bound (targets apply to the smallest)
DEFAULT_STEPS_SMALL = 2_000        # steps per measurement, launch-bound sizes
DEFAULT_STEPS_LARGE = 500          # steps per measurement, larger sizes

# name -> (numerator row, denominator row, description, comparison, target); the ratio is
# steps/s of the numerator over steps/s of the denominator (= denominator time / numerator time).
RATIOS = {
    "prepared_over_cupy": (PREPARED, CUPY, "prepared / CuPy steps/s", ">=", 1.3),
    "graph_over_eager": (GRAPH, EAGER, "graph / eager steps/s", ">=", 3.0),
    "c_graph_over_graph": (C_GRAPH, GRAPH, "C graph / pycudadrv graph steps/s", "<=", 1.2),
    "prepared_over_eager": (PREPARED, EAGER, "prepared / eager steps/s", None, None),
    "dispatch_over_prepared": (DISPATCH, PREPARED, "Dispatch / prepared steps/s", None, None),
    "c_launch_over_prepared": (C_LAUNCH, PREPARED, "C launches / prepared steps/s", None, None),
    "graph_over_cupy": (GRAPH, CUPY, "graph / CuPy steps/s", None, None),
    "prepared_over_cuda_core": (PREPARED, CORE, "prepared / cuda.core steps/s", None, None),
}


# --------------------------------------------------------------------------- pycudadrv and C rows

def way_row(sim, name, way, k):
    """``steps`` steps of one pycudadrv way, then the stream's synchronize, timed together."""
    run_way, sync = sim.run, sim.stream.synchronize

    def run(n):
        t0 = perf_counter_ns()
        run_way(way, n, k)
        sync()
        return perf_counter_ns() - t0
    return Row(name, run, sync)


def c_kernel_seq(sim):
    """The step's kernels for C: the same CUfunctions, grids, block and the very
    parameter bytes the prepared launches hold."""
    return KernelSeq((sim.functions[name].handle, sim.grids[name], sim.block, 0,
                      param_array_from_bytes(sim.prepared[name].param_bytes()))
                     for name in particles.STEP_KERNELS)


def c_rows(floor, sim, seq, graph_exec, k, pdev):
    s = sim.stream

    def run_graph(n):
        pdev.set_current()  # untimed: the C loop times itself (launches + synchronize)
        return floor.graph_launch_loop_sync(graph_exec, s.handle, n // k)

    def run_launches(n):
        pdev.set_current()
        return floor.launch_seq_loop(seq, s.handle, n, synchronize=True)

    return Row(C_GRAPH, run_graph, s.synchronize), Row(C_LAUNCH, run_launches, s.synchronize)


# --------------------------------------------------------------------------- peers

class _DeviceArray:
    """A bare ``__cuda_array_interface__`` over a raw device pointer (for pycudadrv.asbuffer)."""

    def __init__(self, ptr, shape, dtype):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (int(ptr), False), "strides": None, "version": 3}


def _peer_args(sim, name, buffers, null):
    """The kernel's argument list with each pycudadrv Buffer replaced by the peer's
    own array of the same role, None (the indirect pointer) by ``null``; the u64
    byte lengths and push-constant words are kept as numpy uint64 scalars."""
    import pycudadrv as cd

    out = []
    for a in sim.arguments[name]:
        if a is None:
            out.append(null)
        elif isinstance(a, cd.Buffer):
            out.append(buffers[a.ptr])
        else:
            out.append(a)
    return tuple(out)


def _roles(sim):
    """ptr -> (role, shape, dtype) of the simulation's buffers."""
    return {sim.x.ptr: ("x", (3, sim.n), np.float32), sim.v.ptr: ("v", (3, sim.n), np.float32),
            sim.a.ptr: ("a", (3, sim.n), np.float32), sim.partial.ptr: ("partial", (sim.groups, 4), np.float64),
            sim.cm.ptr: ("cm", (4,), np.float64)}


def _compare(got, expect):
    """(bit-identical, relative difference) of two (x, v) states."""
    same = bool(np.array_equal(got[0], expect[0]) and np.array_equal(got[1], expect[1]))
    return same, particles.rel_error(got[0], got[1], expect[0], expect[1])


def peer_cupy(sim, x0, v0, check_steps, expect):
    """CuPy: one RawModule of the same source, cupy arrays, kernel(grid, block, args)."""
    try:
        import cupy
    except ImportError as e:
        raise PeerSkipped(f"not installed ({e})") from None
    mod = cupy.RawModule(code=particles.SOURCE)
    kern = {name: mod.get_function(name) for name in (*particles.STEP_KERNELS, "force")}
    st = cupy.cuda.Stream(non_blocking=True)
    with st:
        arrays = {role: cupy.zeros(shape, dtype=dt) for role, shape, dt in _roles(sim).values()}
    st.synchronize()
    by_ptr = {ptr: arrays[role] for ptr, (role, _, _) in _roles(sim).items()}
    null = np.uint64(0)
    calls = {name: (kern[name], sim.grids[name], sim.block, _peer_args(sim, name, by_ptr, null))
             for name in kern}

    def reset():
        with st:
            arrays["x"].set(x0, stream=st)
            arrays["v"].set(v0, stream=st)
            for name in particles.SETUP_KERNELS:
                f, g, b, a = calls[name]
                f(g, b, a)
        st.synchronize()

    (k0, g0, b0, a0), (k1, g1, b1, a1), (k2, g2, b2, a2), (k3, g3, b3, a3) = \
        [calls[name] for name in particles.STEP_KERNELS]

    def steps(n):
        for _ in repeat(None, n):
            k0(g0, b0, a0)
            k1(g1, b1, a1)
            k2(g2, b2, a2)
            k3(g3, b3, a3)

    reset()
    with st:
        steps(check_steps)
    st.synchronize()
    same, diff = _compare((arrays["x"].get(), arrays["v"].get()), expect)

    def run(n):
        with st:  # current stream for the launches
            t0 = perf_counter_ns()
            steps(n)
            st.synchronize()
            return perf_counter_ns() - t0

    row = Row(CUPY, run, st.synchronize, essential=False, keep=(mod, kern, st, arrays))
    return row, {"version": cupy.__version__, "bit_identical_to_pycudadrv": same, "rel_diff": diff}


def peer_cuda_core(sim, x0, v0, check_steps, expect, pdev):
    """cuda.core: Program of the same source, launch(stream, LaunchConfig, kernel, *args)."""
    import pycudadrv as cd

    core = cuda_core_peer(pdev)
    dev, stream, launch = core.device, core.stream, core.launch
    prog = core.Program(particles.SOURCE, code_type="c++", options=core.ProgramOptions(arch=pdev.arch))
    obj = prog.compile("cubin")
    kern = {name: obj.get_kernel(name) for name in (*particles.STEP_KERNELS, "force")}
    roles = _roles(sim)
    owners = {}
    try:   # cuda.core's own buffers (stream= is required by cuda.core 1.x)
        bufs = {role: dev.allocate(int(np.prod(shape)) * np.dtype(dt).itemsize, stream=stream)
                for role, shape, dt in roles.values()}
        ptrs = {}
        for role, b in bufs.items():
            h = b.handle
            ptrs[role] = h if isinstance(h, int) else int(h)
        buffers = "cuda.core Buffer"
    except Exception as e:  # noqa: BLE001 -- fall back to raw device pointers (ints are intptr_t)
        owners = {role: cd.Buffer.zeros(shape, dt) for role, shape, dt in roles.values()}
        bufs = {role: b.ptr for role, b in owners.items()}
        ptrs = dict(bufs)
        buffers = f"int pointers (dev.allocate failed: {type(e).__name__}: {e})"
    stream.sync()
    pdev.set_current()
    pdev.synchronize()
    # pycudadrv views of the same memory, to load and read the state.
    views = {role: cd.asbuffer(_DeviceArray(ptrs[role], shape, dt)) for role, shape, dt in roles.values()}
    by_ptr = {ptr: bufs[role] for ptr, (role, _, _) in roles.items()}
    calls = {name: (kern[name], core.LaunchConfig(grid=sim.grids[name], block=sim.block),
                    _peer_args(sim, name, by_ptr, 0))
             for name in kern}

    def reset():
        views["x"].write(x0, stream=sim.stream)
        views["v"].write(v0, stream=sim.stream)
        sim.stream.synchronize()
        for name in particles.SETUP_KERNELS:
            f, cfg, a = calls[name]
            launch(stream, cfg, f, *a)
        stream.sync()

    (k0, c0, a0), (k1, c1, a1), (k2, c2, a2), (k3, c3, a3) = [calls[name] for name in particles.STEP_KERNELS]

    def steps(n):
        for _ in repeat(None, n):
            launch(stream, c0, k0, *a0)
            launch(stream, c1, k1, *a1)
            launch(stream, c2, k2, *a2)
            launch(stream, c3, k3, *a3)

    reset()
    steps(check_steps)
    stream.sync()
    pdev.set_current()
    got = (views["x"].to_numpy(stream=sim.stream), views["v"].to_numpy(stream=sim.stream))
    same, diff = _compare(got, expect)

    def run(n):
        t0 = perf_counter_ns()
        steps(n)
        stream.sync()
        return perf_counter_ns() - t0

    row = Row(CORE, run, stream.sync, essential=False, keep=(dev, prog, obj, kern, stream, bufs, owners, views))
    return row, {"version": core.version, "module": core.module, "buffers": buffers, "bit_identical_to_pycudadrv": same,
                 "rel_diff": diff}


def peers_rows(enabled, sim, x0, v0, check_steps, expect, pdev):
    """The rows of every peer that is installed and works, and every peer's status."""
    def detail(st):
        return (f" ({st.get('version')}); after {check_steps} steps "
                + ("bit-identical to pycudadrv" if st["bit_identical_to_pycudadrv"]
                   else f"differs from pycudadrv by {st['rel_diff']:.1e} (relative)"))

    rows, info = setup_peers((("cupy", lambda: peer_cupy(sim, x0, v0, check_steps, expect)),
                              ("cuda.core", lambda: peer_cuda_core(sim, x0, v0, check_steps, expect, pdev))),
                             enabled, pdev, detail)
    return list(rows.values()), info


# --------------------------------------------------------------------------- one size

def consistency(sim, floor, seq, graph_exec, x0, v0, k):
    """Run every pycudadrv way and both C rows 2k steps from the same state; the
    final states must be bit-identical. Returns (expected state, {row: bool})."""
    steps = 2 * k
    states = {}
    for name, way in WAY_ROWS.items():
        sim.reset(x0, v0)
        sim.run(way, steps, k)
        states[name] = sim.state()
    sim.reset(x0, v0)
    sim.synchronize()
    floor.graph_launch_loop_sync(graph_exec, sim.stream.handle, 2)
    states[C_GRAPH] = sim.state()
    sim.reset(x0, v0)
    sim.synchronize()
    floor.launch_seq_loop(seq, sim.stream.handle, steps, synchronize=True)
    states[C_LAUNCH] = sim.state()
    expect = states[PREPARED]
    return expect, {name: _compare(st, expect)[0] for name, st in states.items()}


def bench_size(n, steps, args, floor, pdev):
    """All rows for ``n`` bodies; returns the size's report."""
    k = args.k
    sim = particles.Simulation(n, device=pdev)
    x0, v0 = particles.initial_state(n)
    sim.reset(x0, v0)
    t0 = perf_counter()
    g = sim.graph(k)
    capture_s = perf_counter() - t0
    seq = c_kernel_seq(sim)
    t0 = perf_counter()
    graph_exec, c_nodes = floor.graph_capture_seq(seq, sim.stream.handle, k)
    c_capture_s = perf_counter() - t0
    floor.graph_upload(graph_exec, sim.stream.handle)
    try:
        expect, identical = consistency(sim, floor, seq, graph_exec, x0, v0, k)
        bad = [name for name, ok in identical.items() if not ok]
        log(f"  N={n:,}: graph of {k} steps = {g.num_nodes} nodes (pycudadrv, {capture_s * 1e3:.1f} ms), "
            f"{c_nodes} nodes (C, {c_capture_s * 1e3:.1f} ms); after {2 * k} steps the four ways and both C "
            f"rows are " + ("bit-identical" if not bad else f"NOT identical: {', '.join(bad)} differ"))
        if bad:
            raise RuntimeError(f"N={n}: rows disagree after {2 * k} steps: {bad}")

        floor_row, c_launch_row = c_rows(floor, sim, seq, graph_exec, k, pdev)
        rows = [way_row(sim, name, way, k) for name, way in WAY_ROWS.items()] + [c_launch_row]
        peer_rows, peers = peers_rows(not args.no_peers, sim, x0, v0, 2 * k, expect, pdev)
        rows += peer_rows
        sync_all = sync_all_streams([sim.stream.synchronize] + [r.sync for r in peer_rows], pdev)

        sim.reset(x0, v0)
        sync_all()
        res = run_interleaved(floor_row, rows, rounds=args.rounds, launches=steps,
                              warmup_rounds=args.warmup_rounds, rotate=not args.no_rotate, sync_all=sync_all,
                              label=f"N={n:,}", log=lambda m: log(m.replace("us/launch", "us/step")))
        finite = all(np.isfinite(a).all() for a in sim.state())
    finally:
        floor.graph_exec_destroy(graph_exec)
        sim.close()
    if not finite:
        raise RuntimeError(f"N={n}: the state is not finite after the benchmark")

    rows_rep = {name: {**res.rate_report(name, steps), "time_over_c_graph": res.ratios(name)}
                for name in [C_GRAPH] + [r.name for r in rows if r.name in res.rows]}
    ratios = {}
    for key, (num, den, desc, cmp, target) in RATIOS.items():
        if num not in rows_rep or den not in rows_rep:
            ratios[key] = {"description": desc, "available": False,
                           "why": f"{num if num not in rows_rep else den} not measured"}
            continue
        per = res.ratios_between(den, num)     # steps/s of num over steps/s of den
        r = {"description": desc, "available": True, "per_round": per, "summary": summarize(per)}
        if target is not None:
            med = r["summary"]["median"]
            r["target"] = f"{cmp} {target}"
            r["pass"] = bool(med >= target) if cmp == ">=" else bool(med <= target)
        ratios[key] = r
    return {
        "n": n,
        "launch_bound": n <= LAUNCH_BOUND_MAX,
        "steps_per_measurement": steps,
        "steps_per_graph": k,
        "blocks": sim.groups,
        "graph_nodes": {"pycudadrv": g.num_nodes, "c": c_nodes},
        "capture_ms": {"pycudadrv": capture_s * 1e3, "c": c_capture_s * 1e3},
        "bit_identical_after_2k_steps": identical,
        "peers": peers,
        "dropped_rows": dict(res.dropped),
        "rows": rows_rep,
        "ratios": ratios,
    }


# --------------------------------------------------------------------------- report

ROW_ORDER = (C_GRAPH, GRAPH, C_LAUNCH, PREPARED, DISPATCH, EAGER, CUPY, CORE)


def print_size(rep, rounds):
    n = rep["n"]
    kind = "launch-bound" if rep["launch_bound"] else "compute-bound"
    print(f"\n=== N = {n:,} ({kind}): {rep['steps_per_measurement']:,} steps x {rounds} rounds, "
          f"{len(particles.STEP_KERNELS)} kernels/step, graph of {rep['steps_per_graph']} steps ===")
    table = []
    for name in [r for r in ROW_ORDER if r in rep["rows"]]:
        r = rep["rows"][name]
        us, rel = r["us_per_step_summary"]["median"], summarize(r["time_over_c_graph"])
        table.append((name, r["steps_per_s_summary"]["median"], us, us / len(particles.STEP_KERNELS),
                      rel["median"], rel["min"], rel["max"]))
    print_table([("steps/s", 12, ",.0f"), ("us/step", 10, ".2f"), ("us/kernel", 11, ".2f"),
                 ("time/C graph", 14, ".3f"), ("min", 8, ".3f"), ("max", 8, ".3f")], table)
    print_skipped(rep["peers"], rep["dropped_rows"])
    print("ratios (median over rounds of same-round ratios):")
    for key, r in rep["ratios"].items():
        if not r["available"]:
            if "target" in r or RATIOS[key][4] is not None:
                print(f"  {r['description']:<36} n/a ({r['why']})")
            continue
        s = r["summary"]
        tail = ""
        if "pass" in r:
            tail = f"   target {r['target']}: {'PASS' if r['pass'] else 'FAIL'}" if rep["launch_bound"] else \
                f"   (target {r['target']} applies to the launch-bound size)"
        print(f"  {r['description']:<36} {s['median']:7.3f}x  (min {s['min']:.3f}, max {s['max']:.3f}){tail}")


def evaluate_targets(reports):
    """Targets on the smallest launch-bound size: {key: True/False/None (not measured)}."""
    lb = [r for r in reports if r["launch_bound"]]
    if not lb:
        return None, {}
    rep = min(lb, key=lambda r: r["n"])
    out = {}
    for key, (_, _, _, _, target) in RATIOS.items():
        if target is None:
            continue
        r = rep["ratios"][key]
        out[key] = r["pass"] if r["available"] else None
    return rep["n"], out


def plot(path, reports, title):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(reports), figsize=(7.5 * len(reports), 5.2), squeeze=False)
    for ax, rep in zip(axes[0], reports):
        names = [r for r in ROW_ORDER if r in rep["rows"]]
        summ = [rep["rows"][nm]["steps_per_s_summary"] for nm in names]
        sps = [x["median"] for x in summ]
        lines = []
        for key in ("prepared_over_cupy", "graph_over_eager", "c_graph_over_graph"):
            r = rep["ratios"][key]
            if r["available"]:
                verdict = (" PASS" if r["pass"] else " FAIL") if rep["launch_bound"] else ""
                lines.append(f"{r['description']}: {r['summary']['median']:.2f}x ({r['target']}){verdict}")
        kind = "launch-bound" if rep["launch_bound"] else "compute-bound"
        bar_panel(ax, names, sps, lo=[m - x["p25"] for m, x in zip(sps, summ)],
                  hi=[x["p75"] - m for m, x in zip(sps, summ)], colors=[row_color(nm) for nm in names],
                  labels=[f"{m:,.0f}" for m in sps], room=1.25,
                  xlabel="steps per second (median over rounds; whiskers p25..p75)",
                  title=f"N = {rep['n']:,} ({kind})\n" + "\n".join(lines))
    save_figure(fig, path, title, fontsize=10)


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                    help="comma-separated body counts (default 1024,1048576)")
    common_args(ap, rounds=7, peers="CuPy and cuda.core")
    ap.add_argument("--steps", type=int, default=None,
                    help=f"steps per row per round, every size (default {DEFAULT_STEPS_SMALL} up to "
                         f"N={LAUNCH_BOUND_MAX}, {DEFAULT_STEPS_LARGE} above)")
    ap.add_argument("--k", type=int, default=100, help="steps per captured graph (default 100)")
    add_output_args(ap)
    args = check_common_args(ap, ap.parse_args(argv))
    try:
        args.sizes = [int(s) for s in str(args.sizes).replace(" ", "").split(",") if s]
    except ValueError:
        ap.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not args.sizes or any(n < 1 for n in args.sizes):
        ap.error("--sizes must list positive body counts")
    if args.k < 1:
        ap.error("--k must be >= 1")
    if args.steps is not None and (args.steps < 1 or args.steps % args.k):
        ap.error(f"--steps must be a positive multiple of --k ({args.k})")
    for default in (DEFAULT_STEPS_SMALL, DEFAULT_STEPS_LARGE):
        if args.steps is None and default % args.k:
            ap.error(f"--k must divide the default steps per measurement ({default}); give --steps too")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    bench = setup("step_loop", f"{args.rounds} rounds", title_prefix="particles step loop: ",
                  check_built=lambda floor: None if floor.has_seq and floor.has_graph_capture
                  else f"{floor.path} lacks floor_graph_capture_seq/floor_launch_seq_loop")
    if bench is None:
        return 2
    floor, pdev, title = bench.floor, bench.pdev, bench.title
    hook = launch_hook()

    reports = []
    for n in args.sizes:
        steps = args.steps or (DEFAULT_STEPS_SMALL if n <= LAUNCH_BOUND_MAX else DEFAULT_STEPS_LARGE)
        reports.append(bench_size(n, steps, args, floor, pdev))

    print(f"\n##### {title}")
    for rep in reports:
        print_size(rep, args.rounds)
    target_n, verdicts = evaluate_targets(reports)
    passed = None
    if target_n is not None:
        print(f"\ntargets at N = {target_n:,}: " + ", ".join(
            f"{RATIOS[key][2]} {RATIOS[key][3]} {RATIOS[key][4]}: "
            + ("not measured" if v is None else ("PASS" if v else "FAIL")) for key, v in verdicts.items()))
        passed = all(v is not False for v in verdicts.values())
    else:
        print(f"\nno launch-bound size (N <= {LAUNCH_BOUND_MAX:,}) measured: targets not evaluated")

    summary = {}
    if target_n is not None:
        rep_t = next(r for r in reports if r["n"] == target_n)
        for key in RATIOS:
            r = rep_t["ratios"][key]
            summary[key] = r["summary"]["median"] if r.get("available") else None
        summary["size"] = target_n
    data = {
        "summary": summary,
        **bench.report_header(),
        "config": {"sizes": args.sizes, "rounds": args.rounds, "warmup_rounds": args.warmup_rounds,
                   "rotate": not args.no_rotate,
                   "steps_per_graph": args.k, "block": particles.BLOCK, "kernels_per_step": list(particles.STEP_KERNELS),
                   "params": particles.physical_params(), "timed_region": "steps + stream synchronize"},
        "targets": {key: f"{RATIOS[key][3]} {RATIOS[key][4]}" for key in RATIOS if RATIOS[key][4] is not None},
        "target_size": target_n,
        "target_results": verdicts,
        "passed": passed,
        "launch_hook": None if hook is None else repr(hook),
        "sizes": {str(rep["n"]): rep for rep in reports},
    }
    write_report(args.results_dir, "step_loop", data,
                 None if args.no_plot else lambda path: plot(path, reports, title))
    return 1 if (args.strict and passed is False) else 0


if __name__ == "__main__":
    sys.exit(main())
