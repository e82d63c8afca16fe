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
from _harness import (BLOCK, GRID, KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, batched, cupy_bench_kernel,  # noqa: E402
                      launch_hook, loop_call0, loop_replay_sync, ratio_median, run_interleaved, setup, setup_peers,
                      summarize, sync_all_streams)
from _report import (add_output_args, check_common_args, common_args, drift_note, log, new_parser,  # noqa: E402
                     print_ratio_table, print_skipped, print_table, pyplot, ratio_panel, save_figure, write_report)

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

def loop_call_stream(f, stream):
    """n x f(stream=stream); the launches only."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            f(stream=stream)
        return perf_counter_ns() - t0
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

def heat_report(res, steps, graph_name):
    """Steps per second of every way per round; speedup = eager time / way
    time in the same round (eager = the mean of its two runs)."""
    rep = {"steps_per_measurement": steps, "ways": {HEAT_EAGER: res.rate_report(HEAT_EAGER, steps)}}
    for name in res.rows:
        speed = [1 / r for r in res.ratios(name)]
        rep["ways"][name] = {**res.rate_report(name, steps), "speedup_vs_eager": speed,
                             "speedup_summary": summarize(speed)}
    g = rep["ways"].get(graph_name)
    rep["target_graph_over_eager"] = TARGET_HEAT
    rep["pass"] = bool(g) and g["speedup_summary"]["median"] >= TARGET_HEAT
    rep["dropped"] = dict(res.dropped)
    return rep


def print_heat_table(rep, n, graph_name):
    rows = []
    for k, v in rep["ways"].items():
        sps = v["steps_per_s_summary"]["median"]
        if k == HEAT_EAGER:
            rows.append((k, sps, 1e6 / sps, 1.0))
            continue
        sp = v["speedup_summary"]
        tail = (f">= {TARGET_HEAT:.2f}", "PASS" if rep["pass"] else "FAIL") if k == graph_name else ()
        rows.append((k, sps, 1e6 / sps, sp["median"], sp["min"], sp["max"], *tail))
    print_table([("steps/s", 12, ",.0f"), ("us/step", 9, ".3f"), ("x eager", 9, ".3f"), ("min", 9, ".3f"),
                 ("max", 9, ".3f"), ("target", 9, ""), ("result", 8, "<")], rows, first="way",
                heading=f"--- heat diffusion {n}x{n}: {rep['steps_per_measurement']:,} steps per way per round, "
                        "synchronize included ---")


def plot(path, replay, host, heat, graph_name, title):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    ratio_panel(axes[0], replay, key="us", unit="us/kernel", fmt="%.3f", room=1.45,
                title="replay of a 1,000-kernel graph, per kernel (red: target)")
    ratio_panel(axes[1], host, key="us", unit="us/launch", room=1.45,
                title="1-kernel graph launch, host cost (red: target)")

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
    common_args(ap, rounds=15, launches=20_000, peers="CuPy")
    ap.add_argument("--kernels", type=int, default=1000, help="kernels in the replayed graph (default 1000)")
    ap.add_argument("--replays", type=int, default=200,
                    help="replays of that graph per row per round (default 200)")
    ap.add_argument("--batch", type=int, default=200,
                    help="launches per timed batch of the 1-kernel table, stream synchronised between batches "
                         "outside the timing; 0: one batch (default 200)")
    ap.add_argument("--heat-n", type=int, default=128, help="heat grid edge (default 128)")
    ap.add_argument("--heat-steps", type=int, default=10_000, help="steps per way per round (default 10000)")
    ap.add_argument("--graph-steps", type=int, default=100, help="steps captured in the heat graph (default 100)")
    ap.add_argument("--check-steps", type=int, default=2000,
                    help="steps of the heat correctness check (default 2000)")
    add_output_args(ap)
    args = check_common_args(ap, ap.parse_args(argv))
    if min(args.kernels, args.replays, args.heat_n, args.heat_steps, args.graph_steps, args.check_steps) < 1 \
            or args.batch < 0:
        ap.error("counts must be >= 1 (--batch >= 0)")

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
    replay_rep = res1.table_report(per=R * K, key="us")
    replay_rep.update({"kernels": K, "replays_per_round": R, "c_graph_nodes": c_big_nodes,
                       "pycudadrv_graph_nodes": g_big.num_nodes, "unit": "us per kernel"})

    # 2. host cost of a 1-kernel graph launch.
    sync_all()
    log(f"host-cost table: {len(host_rows) + 1} rows, {args.launches:,} launches per row per round")
    res2 = run_interleaved(Row(HOST_C, c_host, s.synchronize), host_rows, launches=args.launches,
                           label="1-kernel", **common)
    host_rep = res2.table_report(key="us")
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
    print_ratio_table(replay_rep, key="us", unit="us/kernel", fmt=".4f", ratio="x C", drain=False,
                      extra=[("us/replay", 11, ".1f", lambda r: r["us_summary"]["median"] * K)],
                      heading=f"--- {K:,}-kernel graph replay: {R} replays + synchronize per row per round ---",
                      note=drift_note(replay_rep["floor"], "C floor"))
    how = f"batches of {args.batch}" if args.batch > 0 else "one batch"
    print_ratio_table(host_rep, key="us", ratio="x C",
                      heading=f"--- 1-kernel graph, host cost per launch: {args.launches:,} launches per row per "
                              f"round ({how}) ---",
                      note=drift_note(host_rep["floor"], "C floor", "; drain us: the last batch's synchronize, "
                                      "untimed -- large values mean the GPU set the pace"))
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

    summary = {"replay_per_kernel_over_c": ratio_median(replay_rep["rows"], REPLAY_PY),
               "graph_launch_over_c": ratio_median(host_rep["rows"], HOST_PY),
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
