#!/usr/bin/env python3
"""CUDA graph replay in pycudadrv against a C floor, CuPy where installed, and
the heat-diffusion stencil run eagerly, prepared and as a graph.

What is measured
----------------
Three tables, each interleaved round by round (see Method):

1. **Replay cost per kernel of a 1,000-kernel graph.** The tiny kernel of
   ``launch_overhead.py`` (``bench_kernel(float* a, const float* b, int n,
   float s)`` with ``n = 0``, grid 1, block 32) launched 1,000 times on one
   owned non-blocking stream and captured into a graph twice: once by
   pycudadrv (``with s.capture() as g:`` around 1,000 prepared launches) and
   once in C (``floor_graph_capture`` in ``bench/c_floor.c``:
   cuStreamBeginCapture, 1,000 x cuLaunchKernel with the same function,
   dimensions and parameter values, cuStreamEndCapture,
   cuGraphInstantiateWithFlags) -- the same chain of 1,000 kernel nodes.
   Rows:

   * **C floor** -- the C-built graph launched from C: a C loop of
     ``--replays`` x cuGraphLaunch, then cuStreamSynchronize, timed in C.
   * **pycudadrv** -- the pycudadrv-captured graph launched from Python:
     ``g.launch()`` ``--replays`` times, then ``s.synchronize()``, timed
     around both with ``time.perf_counter_ns``.
   * **CuPy, where installed** -- the same 1,000 launches of a ``RawKernel``
     captured with ``Stream.begin_capture()/end_capture()``, replayed with
     ``graph.launch(stream=st)``, then ``st.synchronize()``.

   This is GPU-bound (the device runs ~1,000 nodes per replay while the host
   has queued the next), so the synchronize is inside every row's timing and
   the figure is (time for R replays) / (R x 1,000) per kernel.
   Target: pycudadrv <= 1.05 x the C floor.

2. **Host cost of launching a 1-kernel graph.** The same kernel captured once
   (in C, and by pycudadrv); ``--launches`` launches per row per round, in
   timed batches of ``--batch`` with the stream synchronised between batches
   outside the timing (so a full launch queue never throttles the host; with
   ``--batch 0`` all launches run in one batch, as in launch_overhead.py).
   Rows: C loop of cuGraphLaunch; pycudadrv ``g.launch()`` (target <= 1.10 x
   C) and ``g.launch(stream=s)``; CuPy ``graph.launch(stream=st)``.

3. **Heat diffusion** (``pycudadrv.heat``: 5-point stencil, float32, 128 x 128
   grid -- small enough that launches, not the GPU, set the pace), run
   ``--heat-steps`` steps per row per round three ways on one stream, each
   timed including the final synchronize, in steps per second:

   * eager -- ``fn.launch(grid, block, dst, src, n, n, alpha, stream=s)`` per
     step, ping-ponging two buffers;
   * prepared -- two ``PreparedLaunch`` objects (one per buffer order),
     ``.launch()`` alternately;
   * graph -- ``--graph-steps`` (100) steps captured once (an even count, so
     the buffers end where they started), replayed heat-steps / 100 times.

   The eager row plays the floor's part (first and last in each round).
   Target: graph >= 2.5 x eager steps per second.
   Correctness: from the same initial grid, the three ways run
   ``--check-steps`` steps and must give bit-identical grids
   (``numpy.array_equal``), which must match ``heat.reference`` (NumPy
   float64) to a relative error < 1e-5. A mismatch makes the exit code 1.

Before timing, both 1,000-kernel graphs (and CuPy's) are also checked to run
every node: built again with ``n = 32, s = 2`` over ``a = 0, b = 1`` and
replayed once, they must leave ``a = 2 x 1,000`` everywhere.

Method
------
As in launch_overhead.py (``_harness.run_interleaved``): one uncounted warm-up
round, then ``--rounds`` rounds; in each, the floor row runs first and last
(the round's floor is the mean of the two), the other rows in between in an
order rotated by one each round; every row drains its stream before the next
starts. Figures are medians over rounds of per-round values; ratios are taken
within a round only. The C loops time themselves (CLOCK_MONOTONIC), so the
ctypes call is outside their figures. Graphs are uploaded (cuGraphUpload)
before the first round.

Output: the tables on stdout, ``bench/results/graph_replay.json`` (device,
driver, versions, every per-round figure, summaries, checks) and
``bench/results/graph_replay.png`` when matplotlib is installed.

Usage: ``python bench/graph_replay.py [--rounds 15] [--no-peers]`` (``--help``
for the rest). Exits 2 when CUDA or a C compiler is missing; 1 when a
correctness check fails, or with ``--strict`` when a target is missed.
"""
from __future__ import annotations

import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _cfloor, _harness, _report, wherever we are run from

import numpy as np  # noqa: E402

# KERNEL_*, GRID, BLOCK, N_ELEMS: the kernel of launch_overhead.py (same source, name and configuration).
from _cfloor import BenchSetupError, PeerSkipped, kernel_params  # noqa: E402
from _harness import BLOCK, GRID, KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, cupy_bench_kernel, launch_hook, loop_call0, median_or_nan, run_interleaved, setup, setup_peers, summarize, sync_all_streams  # noqa: E402
from _report import add_output_args, log, new_parser, print_skipped, pyplot, save_figure, write_report  # noqa: E402

# Table 1: 1,000-kernel graph replay.
REPLAY_C = "C: C-built graph, cuGraphLaunch loop + sync"
REPLAY_PY = "pycudadrv: captured graph, g.launch() + sync"
REPLAY_CUPY = "CuPy: captured graph, g.launch(stream) + sync"
# Table 2: host cost of a 1-kernel graph launch.
HOST_C = "C: cuGraphLaunch loop"
HOST_PY = "pycudadrv g.launch()"
HOST_PY_STREAM = "pycudadrv g.launch(stream=s)"
HOST_CUPY = "CuPy g.launch(stream=st)"
# Table 3: heat stencil.
HEAT_EAGER = "eager: fn.launch() per step"
HEAT_PREPARED = "prepared: p.launch() per step"
HEAT_GRAPH = "graph: 1 replay per {k} steps"

TARGET_REPLAY = 1.05   # pycudadrv per-kernel replay time / C, at most
TARGET_HOST = 1.10     # pycudadrv g.launch() host time / C cuGraphLaunch, at most
TARGET_HEAT = 2.5      # graph steps/s / eager steps/s, at least
CHECK_REL_ERROR = 1e-5


# --------------------------------------------------------------------------- timed loops

def loop_replay_sync(launch, sync):
    """n x launch(), then sync(); both inside the timing (GPU-bound rows)."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            launch()
        sync()
        return perf_counter_ns() - t0
    return run


def loop_call_stream(f, stream):
    """n x f(stream=stream); the launches only."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            f(stream=stream)
        return perf_counter_ns() - t0
    return run


def batched(run_batch, sync, batch):
    """run(n): ``run_batch`` over batches of ``batch`` launches (all n when
    batch <= 0), ``sync()`` between batches outside the timing; returns the
    summed timed nanoseconds. The last batch is drained by the caller."""
    def run(n):
        step = batch if batch > 0 else n
        total = done = 0
        while done < n:
            k = min(step, n - done)
            total += run_batch(k)
            done += k
            if done < n:
                sync()
        return total
    return run


# --------------------------------------------------------------------------- checks

def expect_all(got, value, what):
    got = np.asarray(got)
    ok = bool(np.array_equal(got, np.full(got.shape, value, np.float32)))
    if not ok:
        raise BenchSetupError(f"{what}: expected all {value}, got {got.reshape(-1)[:8]}...")
    return ok


def check_graphs(floor, fn, s, pdev, cd, kernels):
    """Both ways of building the K-kernel graph must run every node: with
    n = N_ELEMS, s = 2 over a = 0, b = 1, one replay leaves a = 2K."""
    want = 2.0 * kernels
    out = {"expected": want}
    # C-built graph.
    a = cd.Buffer.zeros(N_ELEMS, np.float32, stream=s)
    b = cd.Buffer.from_numpy(np.ones(N_ELEMS, np.float32), stream=s)
    s.synchronize()
    ex, nodes = floor.graph_capture(fn.handle, GRID, BLOCK, 0, s.handle, kernel_params(a.ptr, b.ptr, N_ELEMS, 2.0),
                                    kernels)
    try:
        pdev.set_current()
        floor.graph_launch_loop_sync(ex, s.handle, 1)
    finally:
        floor.graph_exec_destroy(ex)
    out["c_graph_nodes"] = nodes
    expect_all(a.to_numpy(), want, f"C-built {kernels}-kernel graph")
    if nodes not in (-1, kernels):
        raise BenchSetupError(f"C-built graph has {nodes} nodes, expected {kernels}")
    # pycudadrv-captured graph.
    a2 = cd.Buffer.zeros(N_ELEMS, np.float32, stream=s)
    b2 = cd.Buffer.from_numpy(np.ones(N_ELEMS, np.float32), stream=s)
    s.synchronize()
    p = fn.bind(GRID, BLOCK, a2, b2, N_ELEMS, 2.0, stream=s)
    with s.capture() as g:
        for _ in range(kernels):
            p.launch()
    try:
        g.launch()
        s.synchronize()
        out["pycudadrv_graph_nodes"] = g.num_nodes
        expect_all(a2.to_numpy(), want, f"pycudadrv-captured {kernels}-kernel graph")
        if g.num_nodes != kernels:
            raise BenchSetupError(f"pycudadrv-captured graph has {g.num_nodes} nodes, expected {kernels}")
    finally:
        g.close()
    out["ok"] = True
    return out


# --------------------------------------------------------------------------- CuPy

def peer_cupy(kernels):
    """CuPy: the kernel as a RawKernel on a non-blocking cupy Stream, captured
    into a K-kernel and a 1-kernel graph. Returns ((replay row, host-cost row
    factory, stream), meta); raises PeerSkipped or anything on failure."""
    c = cupy_bench_kernel()
    cupy, kernel, st, a, b, grid, block, args = c.cupy, c.kernel, c.stream, c.a, c.b, c.grid, c.block, c.args

    def capture(count, kargs):
        with st:
            st.begin_capture()
            try:
                for _ in range(count):
                    kernel(grid, block, kargs)
            finally:
                g = st.end_capture()
        return g

    # Check: every node runs (a = 2K after one replay with n = 32, s = 2).
    ca = cupy.zeros(N_ELEMS, dtype=cupy.float32)
    cb = cupy.ones(N_ELEMS, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    g_check = capture(kernels, (ca, cb, np.int32(N_ELEMS), np.float32(2.0)))
    g_check.launch(stream=st)
    st.synchronize()
    got = cupy.asnumpy(ca)
    if not np.array_equal(got, np.full(N_ELEMS, 2.0 * kernels, np.float32)):
        raise PeerSkipped(f"check failed: expected all {2.0 * kernels}, got {got[:8]}")
    del g_check

    g_big = capture(kernels, args)
    g_one = capture(1, args)
    try:  # Graph.upload is not in every CuPy version; the warm-up round uploads anyway
        for g in (g_big, g_one):
            g.upload(stream=st)
        uploaded = "yes"
    except Exception as e:  # noqa: BLE001
        uploaded = f"no ({type(e).__name__}: {e})"
    st.synchronize()
    replay = Row(REPLAY_CUPY, loop_replay_sync(lambda: g_big.launch(stream=st), st.synchronize), st.synchronize,
                 essential=False, keep=(kernel, st, a, b, g_big))

    def host_row(batch):
        return Row(HOST_CUPY, batched(loop_call_stream(g_one.launch, st), st.synchronize, batch), st.synchronize,
                   essential=False, keep=(kernel, st, a, b, g_one))

    return (replay, host_row, st), {"version": cupy.__version__, "check": "ok", "uploaded": uploaded}


# --------------------------------------------------------------------------- reporting

def table_report(res, floor_name, per_run, target=None, target_row=None):
    """Per-unit microseconds (unit = ns / per_run) and ratios to the round's
    floor for every row of ``res``; PASS/FAIL of ``target_row`` against
    ``target`` (median ratio at most the target)."""
    def us(values):
        return [v / per_run / 1e3 for v in values]

    fl = us(res.floor_ns)
    drift = [b / a for a, b in zip(res.floor_first_ns, res.floor_last_ns)]
    rep = {
        "floor": {
            "name": floor_name,
            "first_ns": res.floor_first_ns,
            "last_ns": res.floor_last_ns,
            "us": fl,
            "us_summary": summarize(fl),
            "drain_us": [d / 1e3 for d in res.drain_ns.get(floor_name, [])],
            "drift_last_over_first": drift,
            "drift_summary": summarize(drift),
        },
        "rows": {},
    }
    for name in res.rows:
        v = us(res.rows[name])
        ratios = res.ratios(name)
        r = {
            "per_round_ns": res.rows[name],
            "us": v,
            "us_summary": summarize(v),
            "ratio_to_floor": ratios,
            "ratio_summary": summarize(ratios),
            "drain_us": [d / 1e3 for d in res.drain_ns.get(name, [])],
        }
        if name == target_row and target is not None:
            r["target"] = target
            r["pass"] = bool(ratios) and r["ratio_summary"]["median"] <= target
        rep["rows"][name] = r
    rep["dropped"] = dict(res.dropped)
    return rep


def heat_report(res, steps, graph_name):
    """Steps per second of every way per round; speedup = eager time / way
    time in the same round (eager = the mean of its two runs)."""
    eager_sps = [steps * 1e9 / t for t in res.floor_ns]
    rep = {"steps_per_measurement": steps, "ways": {
        HEAT_EAGER: {"steps_per_s": eager_sps, "steps_per_s_summary": summarize(eager_sps),
                     "us_per_step_summary": summarize([1e6 / x for x in eager_sps]),
                     "first_ns": res.floor_first_ns, "last_ns": res.floor_last_ns},
    }}
    for name in res.rows:
        sps = [steps * 1e9 / t for t in res.rows[name]]
        speed = [f / t for f, t in zip(res.floor_ns, res.rows[name])]
        rep["ways"][name] = {"per_round_ns": res.rows[name], "steps_per_s": sps,
                             "steps_per_s_summary": summarize(sps),
                             "us_per_step_summary": summarize([1e6 / x for x in sps]),
                             "speedup_vs_eager": speed, "speedup_summary": summarize(speed)}
    g = rep["ways"].get(graph_name)
    rep["target_graph_over_eager"] = TARGET_HEAT
    rep["pass"] = bool(g) and g["speedup_summary"]["median"] >= TARGET_HEAT
    rep["dropped"] = dict(res.dropped)
    return rep


def _verdict(row, sign="<="):
    if "target" not in row:
        return ""
    return f"{sign + ' %.2f' % row['target']:>9}  {'PASS' if row['pass'] else 'FAIL'}"


def print_replay_table(rep, kernels, replays):
    fl = rep["floor"]
    names = list(rep["rows"])
    w = max(len(n) for n in [fl["name"], *names]) + 2
    print(f"\n--- {kernels:,}-kernel graph replay: {replays} replays + synchronize per row per round ---")
    print(f"{'row':<{w}}{'us/kernel':>10}{'us/replay':>11}{'x C':>9}{'min':>9}{'max':>9}{'target':>9}  result")
    print("-" * (w + 69))
    m = fl["us_summary"]["median"]
    print(f"{fl['name']:<{w}}{m:>10.4f}{m * kernels:>11.1f}{1.0:>9.3f}")
    for n in names:
        r = rep["rows"][n]
        m, rt = r["us_summary"]["median"], r["ratio_summary"]
        print(f"{n:<{w}}{m:>10.4f}{m * kernels:>11.1f} {rt['median']:>8.3f} {rt['min']:>8.3f} {rt['max']:>8.3f}"
              f"{_verdict(r)}")
    d = fl["drift_summary"]
    print(f"(C floor drift within a round, last/first: median {d['median']:.3f}, range {d['min']:.3f}..{d['max']:.3f})")


def print_host_table(rep, launches, batch):
    fl = rep["floor"]
    names = list(rep["rows"])
    w = max(len(n) for n in [fl["name"], *names]) + 2
    how = f"batches of {batch}" if batch > 0 else "one batch"
    print(f"\n--- 1-kernel graph, host cost per launch: {launches:,} launches per row per round ({how}) ---")
    print(f"{'row':<{w}}{'us/launch':>10}{'x C':>9}{'min':>9}{'max':>9}{'drain us':>10}{'target':>9}  result")
    print("-" * (w + 65))
    print(f"{fl['name']:<{w}}{fl['us_summary']['median']:>10.3f}{1.0:>9.3f}{'':>18}"
          f"{median_or_nan(fl['drain_us']):>10.1f}")
    for n in names:
        r = rep["rows"][n]
        rt = r["ratio_summary"]
        print(f"{n:<{w}}{r['us_summary']['median']:>10.3f} {rt['median']:>8.3f} {rt['min']:>8.3f} {rt['max']:>8.3f}"
              f"{median_or_nan(r['drain_us']):>10.1f}{_verdict(r)}")
    d = fl["drift_summary"]
    print(f"(C floor drift within a round, last/first: median {d['median']:.3f}, range {d['min']:.3f}..{d['max']:.3f};"
          f" drain us: the last batch's synchronize, untimed -- large values mean the GPU set the pace)")


def print_heat_table(rep, n, graph_name):
    ways = rep["ways"]
    w = max(len(k) for k in ways) + 2
    print(f"\n--- heat diffusion {n}x{n}: {rep['steps_per_measurement']:,} steps per way per round, "
          f"synchronize included ---")
    print(f"{'way':<{w}}{'steps/s':>12}{'us/step':>9}{'x eager':>9}{'min':>9}{'max':>9}{'target':>9}  result")
    print("-" * (w + 68))
    for k, v in ways.items():
        sps = v["steps_per_s_summary"]["median"]
        if k == HEAT_EAGER:
            print(f"{k:<{w}}{sps:>12,.0f}{1e6 / sps:>9.3f}{1.0:>9.3f}")
            continue
        sp = v["speedup_summary"]
        tail = ""
        if k == graph_name:
            tail = f"{'>= %.2f' % TARGET_HEAT:>9}  {'PASS' if rep['pass'] else 'FAIL'}"
        print(f"{k:<{w}}{sps:>12,.0f}{1e6 / sps:>9.3f} {sp['median']:>8.3f} {sp['min']:>8.3f} {sp['max']:>8.3f}{tail}")


def plot(path, replay, host, heat, graph_name, title):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))

    def ratio_panel(ax, rep, unit, target_row, target, subtitle, fmt):
        fl = rep["floor"]
        names = [fl["name"], *rep["rows"]]
        summ = [None] + [rep["rows"][n]["ratio_summary"] for n in rep["rows"]]
        med = [1.0] + [r["median"] for r in summ[1:]]
        lo = [0.0] + [r["median"] - r["p25"] for r in summ[1:]]
        hi = [0.0] + [r["p75"] - r["median"] for r in summ[1:]]
        colors = ["0.5"] + ["tab:blue" if n.startswith("pycudadrv") else "tab:orange" for n in rep["rows"]]
        y = list(range(len(names)))
        ax.barh(y, med, xerr=[lo, hi], color=colors, capsize=3)
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(1.0, color="k", lw=0.8)
        right = max([m + h for m, h in zip(med, hi)] + [target])
        for i, n in enumerate(names):
            src = fl if i == 0 else rep["rows"][n]
            u = src["us_summary"]["median"]
            ax.text(med[i] + hi[i] + 0.015 * right, i, f"{med[i]:.3f}x  ({fmt % u} {unit})", va="center",
                    fontsize=7)
            if n == target_row:
                ax.plot([target] * 2, [i - 0.42, i + 0.42], color="red", ls="--", lw=1.2)
        ax.set_xlim(0, right * 1.45)
        ax.set_xlabel("time / C floor of the same round (median; whiskers p25..p75)", fontsize=8)
        ax.set_title(subtitle, fontsize=9)

    ratio_panel(axes[0], replay, "us/kernel", REPLAY_PY, TARGET_REPLAY,
                "replay of a 1,000-kernel graph, per kernel (red: target)", "%.3f")
    ratio_panel(axes[1], host, "us/launch", HOST_PY, TARGET_HOST,
                "1-kernel graph launch, host cost (red: target)", "%.2f")

    ax = axes[2]
    ways = list(heat["ways"])
    sps = [heat["ways"][k]["steps_per_s_summary"]["median"] for k in ways]
    colors = ["0.5", "tab:cyan", "tab:blue"][:len(ways)]
    x = np.arange(len(ways))
    ax.bar(x, sps, color=colors)
    for i, k in enumerate(ways):
        sp = 1.0 if k == HEAT_EAGER else heat["ways"][k]["speedup_summary"]["median"]
        ax.text(i, sps[i], f"{sps[i]:,.0f}/s\n{sp:.2f}x eager", ha="center", va="bottom", fontsize=8)
    if sps:
        ax.axhline(sps[0] * TARGET_HEAT, color="red", ls="--", lw=1.2, label=f"target: {TARGET_HEAT}x eager")
        ax.legend(fontsize=8, loc="upper left")
        ax.set_ylim(0, max(max(sps), sps[0] * TARGET_HEAT) * 1.25)
    ax.set_xticks(x)
    ax.set_xticklabels([k.split(":")[0] for k in ways])
    ax.set_ylabel("steps per second (median over rounds)")
    ax.set_title(f"heat stencil {heat['n']}x{heat['n']} ({graph_name.split(': ')[1]})", fontsize=9)
    save_figure(fig, path, title)


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=15, help="counted rounds of every table (default 15)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="uncounted rounds first (default 1)")
    ap.add_argument("--kernels", type=int, default=1000, help="kernels in the replayed graph (default 1000)")
    ap.add_argument("--replays", type=int, default=200,
                    help="replays of that graph per row per round (default 200)")
    ap.add_argument("--launches", type=int, default=20_000,
                    help="1-kernel graph launches per row per round (default 20000)")
    ap.add_argument("--batch", type=int, default=200,
                    help="launches per timed batch of the 1-kernel table, stream synchronised between batches "
                         "outside the timing; 0: one batch (default 200)")
    ap.add_argument("--heat-n", type=int, default=128, help="heat grid edge (default 128)")
    ap.add_argument("--heat-steps", type=int, default=10_000, help="steps per way per round (default 10000)")
    ap.add_argument("--graph-steps", type=int, default=100, help="steps captured in the heat graph (default 100)")
    ap.add_argument("--check-steps", type=int, default=2000,
                    help="steps of the heat correctness check (default 2000)")
    ap.add_argument("--no-peers", action="store_true", help="skip CuPy")
    ap.add_argument("--no-rotate", action="store_true", help="same row order every round")
    add_output_args(ap)
    args = ap.parse_args(argv)
    if min(args.rounds, args.kernels, args.replays, args.launches, args.heat_n, args.heat_steps,
           args.graph_steps, args.check_steps) < 1 or args.warmup_rounds < 0 or args.batch < 0:
        ap.error("counts must be >= 1 (--warmup-rounds and --batch >= 0)")
    if args.heat_n < 3:
        ap.error("--heat-n must be >= 3")
    if args.graph_steps % 2:
        ap.error("--graph-steps must be even (the buffers must end where they started)")
    for name in ("heat_steps", "check_steps"):
        if getattr(args, name) % args.graph_steps:
            ap.error(f"--{name.replace('_', '-')} must be a multiple of --graph-steps ({args.graph_steps})")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from pycudadrv import heat

    bench = setup("graph_replay", f"{args.rounds} rounds",
                  check_ready=lambda floor: None if floor.has_graph_capture
                  else "the C floor has no floor_graph_capture")
    if bench is None:
        return 2
    cd, floor, pdev, title = bench.cd, bench.floor, bench.pdev, bench.title
    K, R = args.kernels, args.replays
    hook = launch_hook()

    fn = cd.compile(KERNEL_SRC).load().function(KERNEL_NAME)
    s = cd.Stream()
    a = cd.Buffer.zeros(N_ELEMS, np.float32, stream=s)
    b = cd.Buffer.from_numpy(np.ones(N_ELEMS, np.float32), stream=s)
    s.synchronize()

    checks = {}
    try:
        checks["graphs"] = check_graphs(floor, fn, s, pdev, cd, K)
    except (BenchSetupError, RuntimeError) as e:
        print(f"graph_replay: sanity check failed: {e}", file=sys.stderr)
        return 1
    log(f"  check: the C-built and pycudadrv-captured {K}-kernel graphs both run every node "
        f"(a = {2.0 * K:g}; nodes {checks['graphs']['c_graph_nodes']} / {checks['graphs']['pycudadrv_graph_nodes']})")

    # The timed graphs: n = 0, s = 1 (no thread touches memory), as launch_overhead.py.
    c_params = kernel_params(a.ptr, b.ptr, 0, 1.0)
    c_big, c_big_nodes = floor.graph_capture(fn.handle, GRID, BLOCK, 0, s.handle, c_params, K)
    c_one, _ = floor.graph_capture(fn.handle, GRID, BLOCK, 0, s.handle, c_params, 1)
    prepared = fn.bind(GRID, BLOCK, a, b, 0, 1.0, stream=s)
    with s.capture() as g_big:
        for _ in range(K):
            prepared.launch()
    with s.capture() as g_one:
        prepared.launch()
    for ex in (c_big, c_one):
        floor.graph_upload(ex, s.handle)
    g_big.upload()
    g_one.upload()
    s.synchronize()

    def c_replay(n):
        pdev.set_current()  # untimed: the C loop times itself
        return floor.graph_launch_loop_sync(c_big, s.handle, n)

    def c_host_batch(n):
        return floor.graph_launch_loop(c_one, s.handle, n)

    c_host_batched = batched(c_host_batch, s.synchronize, args.batch)

    def c_host(n):
        pdev.set_current()
        return c_host_batched(n)

    replay_rows = [Row(REPLAY_PY, loop_replay_sync(g_big.launch, s.synchronize), s.synchronize,
                       target=TARGET_REPLAY)]
    host_rows = [Row(HOST_PY, batched(loop_call0(g_one.launch), s.synchronize, args.batch), s.synchronize,
                     target=TARGET_HOST),
                 Row(HOST_PY_STREAM, batched(loop_call_stream(g_one.launch, s), s.synchronize, args.batch),
                     s.synchronize)]

    streams_sync = [s.synchronize]
    peers_ok, peers = setup_peers((("cupy", lambda: peer_cupy(K)),), not args.no_peers, pdev)
    if "cupy" in peers_ok:
        cupy_replay, cupy_host, cupy_stream = peers_ok["cupy"]
        replay_rows.append(cupy_replay)
        host_rows.append(cupy_host(args.batch))
        streams_sync.append(cupy_stream.synchronize)
    log(f"peers: cupy: {peers['cupy']['status']}"
        + (f" ({peers['cupy']['version']})" if peers["cupy"]["status"] == "ok" else ""))
    sync_all = sync_all_streams(streams_sync, pdev)

    common = dict(rounds=args.rounds, warmup_rounds=args.warmup_rounds, rotate=not args.no_rotate,
                  sync_all=sync_all, log=log)

    # 1. replay of the K-kernel graph.
    sync_all()
    log(f"replay table: {len(replay_rows) + 1} rows, {R} replays of a {K}-kernel graph per row per round")
    res1 = run_interleaved(Row(REPLAY_C, c_replay, s.synchronize), replay_rows, launches=R, label="replay",
                           **common)
    replay_rep = table_report(res1, REPLAY_C, R * K, TARGET_REPLAY, REPLAY_PY)
    replay_rep.update({"kernels": K, "replays_per_round": R, "c_graph_nodes": c_big_nodes,
                       "pycudadrv_graph_nodes": g_big.num_nodes, "unit": "us per kernel"})

    # 2. host cost of a 1-kernel graph launch.
    sync_all()
    log(f"host-cost table: {len(host_rows) + 1} rows, {args.launches:,} launches per row per round")
    res2 = run_interleaved(Row(HOST_C, c_host, s.synchronize), host_rows, launches=args.launches,
                           label="1-kernel", **common)
    host_rep = table_report(res2, HOST_C, args.launches, TARGET_HOST, HOST_PY)
    host_rep.update({"launches_per_round": args.launches, "batch": args.batch, "unit": "us per launch"})

    # 3. heat stencil three ways.
    n, steps, k = args.heat_n, args.heat_steps, args.graph_steps
    graph_name = HEAT_GRAPH.format(k=k)
    hfn = cd.compile(heat.SOURCE).load().function("heat_step")
    u0 = heat.initial_grid(n)
    poison = np.full_like(u0, np.nan)
    ha = cd.Buffer.from_numpy(u0, stream=s)
    hb = cd.Buffer.from_numpy(poison, stream=s)
    s.synchronize()
    hgrid, hblock, alpha = heat.grid_for(n), heat.BLOCK, heat.ALPHA
    ab = hfn.bind(hgrid, hblock, hb, ha, n, n, alpha, stream=s)   # step a -> b
    ba = hfn.bind(hgrid, hblock, ha, hb, n, n, alpha, stream=s)   # step b -> a
    with s.capture() as hg:
        for _ in range(k // 2):
            ab.launch()
            ba.launch()
    hg.upload()
    s.synchronize()

    def heat_eager(steps_):
        launch = hfn.launch
        it = repeat(None, steps_ // 2)
        t0 = perf_counter_ns()
        for _ in it:
            launch(hgrid, hblock, hb, ha, n, n, alpha, stream=s)
            launch(hgrid, hblock, ha, hb, n, n, alpha, stream=s)
        s.synchronize()
        return perf_counter_ns() - t0

    def heat_prepared(steps_):
        f_ab, f_ba = ab.launch, ba.launch
        it = repeat(None, steps_ // 2)
        t0 = perf_counter_ns()
        for _ in it:
            f_ab()
            f_ba()
        s.synchronize()
        return perf_counter_ns() - t0

    heat_graph = loop_replay_sync(hg.launch, s.synchronize)

    def heat_graph_steps(steps_):
        return heat_graph(steps_ // k)

    sync_all()
    log(f"heat table: {n}x{n}, {steps:,} steps per way per round")
    res3 = run_interleaved(Row(HEAT_EAGER, heat_eager, s.synchronize),
                           [Row(HEAT_PREPARED, heat_prepared, s.synchronize),
                            Row(graph_name, heat_graph_steps, s.synchronize)],
                           launches=steps, label="heat", **common)
    heat_rep = heat_report(res3, steps, graph_name)
    heat_rep.update({"n": n, "graph_steps": k, "grid": list(hgrid), "block": list(hblock), "alpha": alpha,
                     "graph_nodes": hg.num_nodes})

    # Heat correctness: the three ways from the same initial grid, the same steps.
    cs = args.check_steps
    outs = {}
    for name, way in ((HEAT_EAGER, heat_eager), (HEAT_PREPARED, heat_prepared), (graph_name, heat_graph_steps)):
        ha.write(u0, stream=s)
        hb.write(poison, stream=s)
        s.synchronize()
        way(cs)
        outs[name] = ha.to_numpy().reshape(n, n)  # an even number of steps ends in a
    ref = heat.reference(u0, cs)
    identical = {name: bool(np.array_equal(outs[HEAT_EAGER], o)) for name, o in outs.items()}
    err = heat.rel_error(outs[graph_name], ref)
    heat_ok = all(identical.values()) and err < CHECK_REL_ERROR
    checks["heat"] = {"steps": cs, "bit_identical_to_eager": identical, "graph_rel_error_vs_reference": err,
                      "limit": CHECK_REL_ERROR, "ok": heat_ok}

    # Report.
    print(f"\n=== graph replay: {title} ===")
    print_replay_table(replay_rep, K, R)
    print_host_table(host_rep, args.launches, args.batch)
    print_heat_table(heat_rep, n, graph_name)
    print_skipped(peers, *(rep["dropped"] for rep in (replay_rep, host_rep, heat_rep)))
    print(f"\nheat check ({cs} steps from the same grid): eager, prepared and graph bit-identical: "
          f"{'yes' if all(identical.values()) else 'NO ' + str(identical)}; graph vs NumPy float64: "
          f"relative error {err:.2e} (limit {CHECK_REL_ERROR:g}) -> {'OK' if heat_ok else 'FAIL'}")

    targets = {
        f"replay per kernel <= {TARGET_REPLAY:.2f}x C": replay_rep["rows"][REPLAY_PY].get("pass", False),
        f"graph.launch() <= {TARGET_HOST:.2f}x C cuGraphLaunch": host_rep["rows"][HOST_PY].get("pass", False),
        f"heat graph >= {TARGET_HEAT:.1f}x eager steps/s": heat_rep["pass"],
    }
    passed = all(targets.values())
    print("targets: " + "; ".join(f"{k_}: {'PASS' if v else 'FAIL'}" for k_, v in targets.items()))

    def med(r):
        return r["ratio_summary"]["median"] if r.get("ratio_summary", {}).get("n") else None

    summary = {"replay_per_kernel_over_c": med(replay_rep["rows"][REPLAY_PY]),
               "graph_launch_over_c": med(host_rep["rows"][HOST_PY]),
               "heat_graph_over_eager": (heat_rep["ways"][graph_name]["speedup_summary"]["median"]
                                         if graph_name in heat_rep["ways"] else None)}
    data = {
        "summary": summary,
        **bench.report_header(),
        "config": {"rounds": args.rounds, "warmup_rounds": args.warmup_rounds, "rotate": not args.no_rotate,
                   "kernels": K, "replays": R, "launches": args.launches, "batch": args.batch,
                   "grid": GRID, "block": BLOCK, "n": 0, "kernel": KERNEL_SRC.strip(),
                   "heat_n": n, "heat_steps": steps, "graph_steps": k, "check_steps": cs},
        "targets": {"replay_per_kernel_max_ratio": TARGET_REPLAY, "graph_launch_max_ratio": TARGET_HOST,
                    "heat_graph_min_speedup": TARGET_HEAT},
        "target_results": targets,
        "passed": passed,
        "checks": checks,
        "checks_ok": heat_ok,
        "peers": peers,
        "launch_hook": None if hook is None else repr(hook),
        "replay": replay_rep,
        "host": host_rep,
        "heat": heat_rep,
    }
    write_report(args.results_dir, "graph_replay", data,
                 None if args.no_plot else lambda path: plot(path, replay_rep, host_rep, heat_rep, graph_name, title))

    sync_all()
    for ex in (c_big, c_one):
        floor.graph_exec_destroy(ex)
    for g in (g_big, g_one, hg):
        g.close()
    if not heat_ok:
        return 1
    return 1 if (args.strict and not passed) else 0


if __name__ == "__main__":
    sys.exit(main())
