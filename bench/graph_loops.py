#!/usr/bin/env python3
"""Steps with the host out of the way: PDL-chained graphs, device-side loops,
GPU-driven indirect dispatch and launch sequences, against C twins built from
the same kernels and the same parameter bytes, interleaved round by round.

What is measured
----------------
One step = 4 dependent elementwise kernels (``y = a x + b``, each reading what
the previous one wrote; every kernel keeps the PDL contract: it waits for its
producer with ``griddepcontrol.wait`` before reading), at N = 1,024, 16,384
and 1,048,576 floats. Time per step, on the GPU and the host together (each
row launches, then synchronizes its stream), of:

* **graph**: 100 steps captured once, replayed (pycudadrv ``stream.capture()``;
  C twin: ``floor_graph_capture_seq``);
* **graph + PDL**: the same with programmatic edges between the kernels
  (pycudadrv ``capture(pdl=True)``; C twin: ``floor_graph_capture_seq_pdl``);
* **device loop** with 1, 10 and 100 steps per iteration, with and without PDL:
  one graph launch runs 1,000 steps through a conditional WHILE node
  (pycudadrv ``stream.loop(times=...)``; C twin: ``floor_while_graph_seq``,
  the same WHILE node and body built in C with pycudadrv's condition kernel);
* **launch sequence**: a ``LaunchSequence`` of the 4 prepared launches issued
  250 times per call, against a C loop of cuLaunchKernel with the same bytes
  (``floor_launch_seq_loop``), at N = 1,024;
* **indirect dispatch** in a graph of 20 dispatches of an elementwise kernel
  (2**22 elements): the grid set on the GPU from three counts
  (device-updatable node), persistent blocks looping over the workgroups, and
  a direct dispatch of the same grid; and the C twin of the GPU-driven graph
  (``floor_indirect_graph``: pycudadrv's update kernel, the same dispatch
  kernel and parameter bytes, the same device-updatable node and, as
  pycudadrv builds them on sm_90+, the same programmatic edges: node after its
  update kernel, update kernel after the previous node), also with full edges;
* **convergence** (``examples/heat_convergence.py``): time to the answer of the
  device loop against the host loop that reads the residual every 10 steps.

Every ratio is a median of same-round ratios. JSON summary keys:
``pdl_graph_speedup`` (plain graph time / PDL graph time at N = 1,024),
``pdl_graph_over_c``, ``device_loop_over_c`` (worst over the loop variants
and sizes), ``convergence_speedup``, ``indirect_device_over_direct``,
``indirect_device_over_c_twin``, ``indirect_c_twin_over_direct`` (no target:
the floor of the mechanism), ``sequence_over_c``. Targets (H200): pycudadrv PDL
graph and device loops within 1.03x of their C twins; PDL graph >= 1.25x the
plain graph's steps/s at N = 1,024; convergence >= 1.3x; indirect within 1.10x
of direct, or (when the C twin itself is above that) within 1.03x of the C
twin; sequence within 1.02x of C.

Usage: ``python bench/graph_loops.py [--rounds 5] [--sizes 1024,16384,1048576]
[--no-plot] [--results-dir DIR]``. Exits 2 when CUDA, a C compiler or a
driver with conditional nodes is missing; with ``--strict``, 1 when a target
is missed.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from time import perf_counter_ns

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "examples"))

import numpy as np  # noqa: E402

from _cfloor import KernelSeq, param_array_from_bytes  # noqa: E402
from _harness import Row, launch_hook, run_interleaved, setup, summarize  # noqa: E402
from _report import add_output_args, log, new_parser, pyplot, save_figure, write_report  # noqa: E402

SRC = r"""
extern "C" __global__ void step(float* y, const float* x, float a, float b, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
    asm volatile("griddepcontrol.launch_dependents;");
}
// The Dispatch convention: out (ptr, len), x (ptr, len), (indirect, indirect_len).
extern "C" __global__ void axpb_groups(float* out, unsigned long long out_len, const float* x,
                                       unsigned long long x_len, const unsigned int* indirect,
                                       unsigned long long indirect_len) {
    unsigned long long groups = indirect_len ? indirect[0] : gridDim.x;
    unsigned long long stride = indirect_len ? gridDim.x : groups;
    for (unsigned long long wg = blockIdx.x; wg < groups; wg += stride) {
        unsigned long long i = wg * blockDim.x + threadIdx.x;
        if (i < out_len / 4) out[i] = 2.0f * x[i] + 1.0f;
    }
}
"""
COEFFS = ((0.5, 1.0), (1.5, -0.5), (0.75, 0.25), (1.25, -1.0))
GRAPH_STEPS = 100
LOOP_STEPS = 1000
SPI = (1, 10, 100)
TARGETS = {"pdl_graph_speedup": (">=", 1.25), "pdl_graph_over_c": ("<=", 1.03), "device_loop_over_c": ("<=", 1.03),
           "convergence_speedup": (">=", 1.3), "indirect_device_over_direct": ("<=", 1.10),
           "indirect_device_over_c_twin": ("<=", 1.03), "sequence_over_c": ("<=", 1.02)}


def timed(launch, sync, launches_per_run):
    def run(n):
        t0 = perf_counter_ns()
        for _ in range(n * launches_per_run):
            launch()
        sync()
        return perf_counter_ns() - t0
    return run


def per_round_ratio(res, num, den):
    return [a / b for a, b in zip(res.rows[num], res.rows[den])]


def step_rows(b, cd, mod, n, rounds):
    """The graph, PDL graph and device-loop rows at size n; returns (result, steps per launch of each row)."""
    floor, s = b.floor, cd.Stream()
    f = mod.function("step")
    rng = np.random.default_rng(n)
    bufs = [cd.Buffer.from_numpy(rng.standard_normal(n).astype(np.float32), stream=s) for _ in range(4)]
    grid = (n + 255) // 256
    preps = [f.bind(grid, 256, bufs[(k + 1) % 4], bufs[k], a, c, n, stream=s) for k, (a, c) in enumerate(COEFFS)]
    seq = KernelSeq([(f.handle, grid, 256, 0, param_array_from_bytes(p.param_bytes())) for p in preps])

    def one_step():
        for p in preps:
            p.launch()

    rows, steps, keep = [], {}, [seq, bufs, preps]
    with s.capture() as g:
        for _ in range(GRAPH_STEPS):
            one_step()
    with s.capture(pdl=True) as gp:
        for _ in range(GRAPH_STEPS):
            one_step()
    c_graph = floor.graph_capture_seq(seq, s.handle, GRAPH_STEPS)[0]
    c_pdl = floor.graph_capture_seq_pdl(seq, s.handle, GRAPH_STEPS)
    keep += [g, gp]
    sync = s.synchronize
    floor_row = Row("C graph", timed(lambda: floor.graph_launch_loop(c_graph, s.handle, 1), sync, 1), sync)
    rows.append(Row("pycudadrv graph", timed(g.launch, sync, 1), sync))
    rows.append(Row("C graph + PDL", timed(lambda: floor.graph_launch_loop(c_pdl, s.handle, 1), sync, 1), sync))
    rows.append(Row("pycudadrv graph + PDL", timed(gp.launch, sync, 1), sync))
    for name in ("C graph", "pycudadrv graph", "C graph + PDL", "pycudadrv graph + PDL"):
        steps[name] = GRAPH_STEPS
    cond = cd._loops.loop_kernel(cd.Device(0), "pycudadrv_loop_times")
    c_exec = [c_graph, c_pdl]
    for spi in SPI:
        for pdl in (False, True):
            tag = f"{spi} step{'s' if spi > 1 else ''}/iteration{' + PDL' if pdl else ''}"
            with s.loop(times=LOOP_STEPS // spi, pdl=pdl) as loop:
                for _ in range(spi):
                    one_step()
            state = cd.Buffer.zeros(4, np.uint32, stream=s)
            ce = floor.while_graph_seq(seq, s.handle, spi, pdl, cond.handle, state.ptr, LOOP_STEPS // spi)
            c_exec.append(ce)
            keep += [loop, state]
            rows.append(Row(f"pycudadrv loop {tag}", timed(loop.launch, sync, 1), sync))
            rows.append(Row(f"C loop {tag}", timed(lambda ce=ce: floor.graph_launch_loop(ce, s.handle, 1), sync, 1),
                            sync))
            steps[f"pycudadrv loop {tag}"] = steps[f"C loop {tag}"] = LOOP_STEPS
    # the same results from every way: run each once from the same state and compare
    sync()
    res = run_interleaved(floor_row, rows, rounds=rounds, launches=3, warmup_rounds=1, label=f"N={n}",
                          log=lambda m: None)
    for ce in c_exec:
        floor.graph_exec_destroy(ce)
    return res, steps, keep


def sequence_rows(b, cd, mod, rounds):
    floor, s, n = b.floor, cd.Stream(), 1024
    f = mod.function("step")
    bufs = [cd.Buffer.zeros(n, np.float32, stream=s) for _ in range(4)]
    preps = [f.bind(4, 256, bufs[(k + 1) % 4], bufs[k], a, c, n, stream=s) for k, (a, c) in enumerate(COEFFS)]
    seq = KernelSeq([(f.handle, 4, 256, 0, param_array_from_bytes(p.param_bytes())) for p in preps])
    ls = cd.LaunchSequence(preps)
    reps = 250

    def c_run(k):
        return floor.launch_seq_loop(seq, s.handle, k * reps, synchronize=True)

    def py_run(k):
        t0 = perf_counter_ns()
        ls.launch(k * reps)
        s.synchronize()
        return perf_counter_ns() - t0
    res = run_interleaved(Row("C launch loop", c_run, s.synchronize), [Row("LaunchSequence", py_run, s.synchronize)],
                          rounds=rounds, launches=4, warmup_rounds=1, label="sequence", log=lambda m: None)
    return res, (seq, bufs, preps, ls)


def indirect_rows(b, cd, mod, rounds, n=1 << 22, dispatches=20):
    """The indirect-dispatch rows: pycudadrv's direct, GPU-driven (device-updated grid) and
    persistent graphs, and the C twins of the GPU-driven one (the same update kernel, the same
    dispatch kernel and parameter bytes, the same node mechanism, built with the driver API):
    with the programmatic edges pycudadrv gives them on sm_90+ ("C twin"), and with full edges
    ("C twin, full edges"; below sm_90 the twin)."""
    from pycudadrv.dispatch import Encoder, Pass

    floor, s = b.floor, cd.Stream()
    f = mod.function("axpb_groups")
    dev = cd.Device(0)
    pdl = dev.compute_capability >= (9, 0)
    x = cd.Buffer.from_numpy(np.random.default_rng(1).standard_normal(n).astype(np.float32), stream=s)
    outs = {m: cd.Buffer.zeros(n, np.float32, stream=s)
            for m in ("device", "persistent", "direct", "c_twin", "c_full_edges")}
    groups = n // 256
    counts = cd.Buffer.from_numpy(np.array([groups, 1, 1], np.uint32), stream=s)
    graphs = {}
    for mode in ("device", "persistent", "direct"):
        d = Pass(Encoder(stream=s), mode).dispatch(f, block=(256, 1, 1),
                                                   indirect_mode="persistent" if mode == "persistent" else "auto")
        d.set_arg((0, 0), outs[mode]).set_arg((0, 1), x)
        with s.capture() as g:
            for _ in range(dispatches):
                if mode == "direct":
                    d.dispatch(grid=(groups, 1, 1))
                else:
                    d.dispatch(indirect=counts)
        graphs[mode] = g
    upd = cd._loops.loop_kernel(dev, "pycudadrv_indirect_update")
    max_x = dev.attribute("max_grid_dim_x")
    c_exec, keep = {}, []
    for mode, with_pdl in (("c_twin", pdl), ("c_full_edges", False)):
        d = Pass(Encoder(stream=s), mode).dispatch(f, block=(256, 1, 1))
        d.set_arg((0, 0), outs[mode]).set_arg((0, 1), x)
        params = param_array_from_bytes(f.bind(1, 256, *d.arguments(counts), stream=s).param_bytes())
        keep.append(params)
        c_exec[mode] = floor.indirect_graph(upd.handle, f.handle, 256, params, counts.ptr, max_x, dispatches,
                                            with_pdl, s.handle)
    sync = s.synchronize

    def c_timed(ce):                # the replays issued by one C loop, then the same synchronize as every row
        def run(k):
            t0 = perf_counter_ns()
            floor.graph_launch_loop(ce, s.handle, k)
            sync()
            return perf_counter_ns() - t0
        return run
    for g in graphs.values():
        g.launch()
    for ce in c_exec.values():
        floor.graph_launch_loop(ce, s.handle, 1)
    sync()
    ref = (2.0 * x.to_numpy(stream=s).astype(np.float64) + 1.0).astype(np.float32)
    same = {m: bool(np.array_equal(o.to_numpy(stream=s), ref)) for m, o in outs.items()}
    res = run_interleaved(Row("direct", timed(graphs["direct"].launch, sync, 1), sync),
                          [Row("device-updated grid", timed(graphs["device"].launch, sync, 1), sync),
                           Row("persistent blocks", timed(graphs["persistent"].launch, sync, 1), sync),
                           Row("C twin", c_timed(c_exec["c_twin"]), sync),
                           Row("C twin, full edges", c_timed(c_exec["c_full_edges"]), sync)],
                          rounds=rounds, launches=5, warmup_rounds=1, label="indirect", log=lambda m: None)
    for ce in c_exec.values():
        floor.graph_exec_destroy(ce)
    return res, same, pdl, (graphs, outs, x, counts, keep)


def convergence(rounds):
    import heat_convergence as hc

    sim = hc.Convergence(256, 10)
    sim.run("device", 2e-3, 2)
    host, dev = [], []
    steps = set()
    for _ in range(max(3, rounds)):
        for way, acc in (("host", host), ("device", dev)):
            grid, st, sec = sim.run(way, 2e-3, 20_000)
            steps.add(st)
            acc.append(sec)
    return [h / d for h, d in zip(host, dev)], host, dev, steps


def main(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=5, help="counted rounds (default 5)")
    ap.add_argument("--sizes", default="1024,16384,1048576", help="elements per buffer")
    add_output_args(ap)
    args = ap.parse_args(argv)
    b = setup("graph_loops", "steps with the host out of the way",
              check_built=lambda fl: None if fl.has_loops and fl.has_indirect else
              "the C floor has no WHILE-loop or indirect-dispatch twins")
    if b is None:
        return 2
    cd = b.cd
    launch_hook()
    if cd._driver.driver_version() < (12, 4):
        print("graph_loops: conditional nodes and device-updatable kernel nodes need a CUDA 12.4+ driver",
              file=sys.stderr)
        return 2
    mod = cd.compile(SRC, name="graph_loops.cu").load()
    sizes = [int(x) for x in args.sizes.split(",")]
    report = {"sizes": {}, "summary": {}}
    loop_over_c, pdl_over_c = [], {}
    print(f"\n=== {b.title} ===")
    print(f"{'N':>9} {'row':<40} {'us/step':>9} {'x C twin':>9}")
    for n in sizes:
        res, steps, keep = step_rows(b, cd, mod, n, args.rounds)
        us = {name: statistics.median(res.rows[name]) / (3 * steps[name]) / 1e3 for name in res.rows}
        us["C graph"] = statistics.median(res.floor_ns) / (3 * GRAPH_STEPS) / 1e3
        ratios = {"pycudadrv graph": per_round_ratio_floor(res, "pycudadrv graph"),
                  "pycudadrv graph + PDL": per_round_ratio(res, "pycudadrv graph + PDL", "C graph + PDL"),
                  "PDL speedup": per_round_ratio(res, "pycudadrv graph", "pycudadrv graph + PDL")}
        for spi in SPI:
            for pdl in (False, True):
                tag = f"{spi} step{'s' if spi > 1 else ''}/iteration{' + PDL' if pdl else ''}"
                r = per_round_ratio(res, f"pycudadrv loop {tag}", f"C loop {tag}")
                ratios[f"pycudadrv loop {tag}"] = r
                loop_over_c.append(statistics.median(r))
        pdl_over_c[n] = statistics.median(ratios["pycudadrv graph + PDL"])
        for name in sorted(us, key=lambda k: (not k.startswith("C"), k)):
            rr = ratios.get(name)
            print(f"{n:>9} {name:<40} {us[name]:>9.3f} {statistics.median(rr) if rr else float('nan'):>9.3f}")
        report["sizes"][str(n)] = {"us_per_step": us, "ratios": {k: summarize(v) for k, v in ratios.items()},
                                   "rounds": {k: list(v) for k, v in res.rows.items()},
                                   "floor_ns": list(res.floor_ns)}
        if n == 1024:
            report["summary"]["pdl_graph_speedup"] = statistics.median(ratios["PDL speedup"])
            report["summary"]["pdl_graph_over_c"] = pdl_over_c[n]
        del keep
    report["summary"]["device_loop_over_c"] = max(loop_over_c)
    sres, _ = sequence_rows(b, cd, mod, args.rounds)
    seq_ratio = per_round_ratio_floor(sres, "LaunchSequence")
    report["summary"]["sequence_over_c"] = statistics.median(seq_ratio)
    ires, same, pdl_twin, _ = indirect_rows(b, cd, mod, args.rounds)
    dev_ratio = per_round_ratio_floor(ires, "device-updated grid")
    pers_ratio = per_round_ratio_floor(ires, "persistent blocks")
    twin_ratio = per_round_ratio_floor(ires, "C twin")
    full_ratio = per_round_ratio_floor(ires, "C twin, full edges")
    dev_over_twin = per_round_ratio(ires, "device-updated grid", "C twin")
    report["summary"]["indirect_device_over_direct"] = statistics.median(dev_ratio)
    report["summary"]["indirect_device_over_c_twin"] = statistics.median(dev_over_twin)
    report["summary"]["indirect_c_twin_over_direct"] = statistics.median(twin_ratio)
    report["indirect"] = {"device_over_direct": summarize(dev_ratio), "persistent_over_direct": summarize(pers_ratio),
                          "device_over_c_twin": summarize(dev_over_twin), "c_twin_over_direct": summarize(twin_ratio),
                          "c_twin_full_edges_over_direct": summarize(full_ratio),
                          "c_twin_programmatic_edge": pdl_twin,
                          "results_equal_reference": same,
                          "us_per_dispatch_direct": statistics.median(ires.floor_ns) / 5 / 20 / 1e3}
    conv, host, dev, steps = convergence(args.rounds)
    report["summary"]["convergence_speedup"] = statistics.median(conv)
    report["convergence"] = {"host_s": host, "device_s": dev, "steps": sorted(steps)}
    report["sequence"] = {"over_c": summarize(seq_ratio)}
    print(f"\nlaunch sequence / C loop per launch: {report['summary']['sequence_over_c']:.3f}")
    print(f"indirect: device-updated / direct {statistics.median(dev_ratio):.3f}, persistent / direct "
          f"{statistics.median(pers_ratio):.3f}, C twin{' (PDL edge)' if pdl_twin else ''} / direct "
          f"{statistics.median(twin_ratio):.3f}, C twin with full edges / direct {statistics.median(full_ratio):.3f}, "
          f"device-updated / C twin {statistics.median(dev_over_twin):.3f}; results equal the reference: {same}")
    print(f"convergence: device loop {statistics.median(dev) * 1e3:.2f} ms vs host loop "
          f"{statistics.median(host) * 1e3:.2f} ms -> {report['summary']['convergence_speedup']:.2f}x "
          f"(steps {sorted(steps)})")
    missed = []
    print("\nsummary:")
    for k, v in report["summary"].items():
        if k not in TARGETS:
            print(f"  {k:<30} {v:8.3f}   (no target)")
            continue
        op, t = TARGETS[k]
        ok = v >= t if op == ">=" else v <= t
        if k == "indirect_device_over_direct" and not ok:
            # issue 22: within 1.10x of direct, or within 1.03x of a C twin whose floor is higher
            twin = report["summary"]["indirect_c_twin_over_direct"]
            ok = twin > t and report["summary"]["indirect_device_over_c_twin"] <= TARGETS[
                "indirect_device_over_c_twin"][1]
            print(f"  {k:<30} {v:8.3f}   target {op} {t}, or the C twin's floor ({twin:.3f}) higher and "
                  f"within 1.03x of it  {'PASS' if ok else 'MISS'}")
            missed += [] if ok else [k]
            continue
        missed += [] if ok else [k]
        print(f"  {k:<30} {v:8.3f}   target {op} {t}  {'PASS' if ok else 'MISS'}")
    data = {**b.report_header(), **report}
    write_report(args.results_dir, "graph_loops", data, None if args.no_plot else lambda p: plot(p, report, b.title))
    return 1 if (args.strict and missed) else 0


def per_round_ratio_floor(res, name):
    return [t / f for t, f in zip(res.rows[name], res.floor_ns)]


def plot(path, report, title):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 5))
    sizes = list(report["sizes"])
    names = list(report["sizes"][sizes[0]]["us_per_step"])
    w = 0.8 / len(sizes)
    for j, n in enumerate(sizes):
        vals = [report["sizes"][n]["us_per_step"][k] for k in names]
        ax.barh([i + j * w for i in range(len(names))], vals, w, label=f"N = {n}")
    ax.set_yticks([i + w for i in range(len(names))])
    ax.set_yticklabels(names, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("us per step (4 dependent kernels), lower is better")
    ax.legend()
    save_figure(fig, path, title, fontsize=9)


if __name__ == "__main__":
    sys.exit(main())
