#!/usr/bin/env python3
"""cuDNN matmul plans of pycudadrv against torch.matmul, and the host cost of one execution against C.

What is measured
----------------
1. **Throughput.** Square products ``out = a @ b`` of size n = 256 ... 8192 in
   float32, float16 and bfloat16 (compute float32; float32 without TF32),
   through ``plan = pycudadrv.cudnn.matmul_plan((n, n), (n, n), dtype)`` and
   ``torch.matmul(a, b, out=c)``. Both work on the very same memory (torch
   tensors, wrapped for pycudadrv with ``asbuffer``; bfloat16 as int16 views)
   and on the same CUDA stream (a pycudadrv Stream, given to torch as an
   ``ExternalStream``); torch's float32 TF32 and reduced-precision-reduction
   switches are turned off so both compute the same thing. A time is CUDA
   events around ``reps`` back-to-back executions (about 10 ms of GPU work),
   divided by ``reps``. ``--rounds`` rounds alternate which of the two goes
   first; the ratio pycudadrv / torch is taken within each round, and the
   median over rounds is reported, with TFLOP/s (2 n^3 / time). The outputs
   of the two are compared once (relative Frobenius difference). Rows marked
   "autotuned" (sizes >= 2048, ``--no-autotune`` to skip) use
   ``matmul_plan(..., autotune=True)``; rows "float32+TF32" (``--no-tf32`` to
   skip) allow TF32 on both sides.
   Target (H200): pycudadrv within 1.10x of torch's time at sizes >= 2048.

2. **Host cost of one execution.** A 64 x 64 x 64 float16 plan executed
   ``--launches`` times per row per round on one stream (in batches of
   ``--batch``, the stream synchronised between batches outside the timing,
   so a full launch queue never throttles the host), against the C floor of
   ``bench/launch_overhead.py``: a C loop of ``cuLaunchKernel`` of an empty
   kernel (``bench/c_floor.c``, built in this run). Rows: ``plan(a, b, out,
   stream=s)``; the plan captured once into a graph and replayed with
   ``g.launch()``; ``torch.matmul(a, b, out=c)`` on the same stream (peer).
   Interleaved rounds (``bench/_common.run_interleaved``: the floor first and
   last in each round, the other rows rotated), same-round ratios, medians.
   Target (H200): ``plan(...)`` under 2x the C floor.

Output: the tables on stdout (last), ``bench/results/matmul.json`` (device,
versions, every per-round figure; ``summary`` holds
``worst_time_vs_torch_ge2048`` -- the largest median pycudadrv / torch time
ratio over the three dtypes at sizes >= 2048, default plans -- and
``host_us_per_execute_over_c``) and ``bench/results/matmul.png``.

Usage: ``python bench/matmul.py [--sizes 256,...,8192] [--rounds 5]`` (``--help``).
Exits 2 when CUDA, cuDNN or a C compiler is missing; with ``--strict``, 1 when
a target is missed.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter, perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _cfloor/_harness/_report, wherever run from

import numpy as np  # noqa: E402

from _cfloor import kernel_params  # noqa: E402
from _harness import KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, loop_call0, run_interleaved, setup, summarize  # noqa: E402
from _report import add_output_args, log, new_parser, pyplot, save_figure, write_report  # noqa: E402

SIZES = (256, 512, 1024, 2048, 4096, 8192)
DTYPES = ("float32", "float16", "bfloat16")
TF32 = "float32+TF32"
TARGET_TIME_RATIO = 1.10          # pycudadrv / torch at sizes >= 2048
TARGET_HOST_RATIO = 2.0           # one execution / one cuLaunchKernel
HOST_SHAPE = (64, 64, 64)
FLOOR = "C floor (cuLaunchKernel loop)"
PLAN_ROW = "pycudadrv plan(a, b, out, stream=s)"
GRAPH_ROW = "pycudadrv graph of one plan, g.launch()"
TORCH_ROW = "torch.matmul(a, b, out=c)"


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
        else:
            dt = np.float32 if dtype == "float32" else (np.float16 if dtype == "float16" else np.uint16)
            host = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(2)]
            if dtype == "bfloat16":
                host = [(h.view(np.uint32) >> 16).astype(np.uint16) for h in host]
            self.a, self.b = (cd.Buffer.from_numpy(h.astype(dt)) for h in host)
            self.out = cd.Buffer.empty((n, n), dt)
            cd.Device(0).synchronize()


@contextlib.contextmanager
def _nothing():
    yield


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

def measure_size(cd, cudnn, torch, s, ext, n, dtype, rounds, rng, autotune, target_ms):
    """One (size, dtype) row: per-round times of pycudadrv (default and
    autotuned plans) and torch, their ratios, TFLOP/s."""
    plan_dtype = "float32" if dtype == TF32 else dtype
    tf32 = dtype == TF32
    t0 = perf_counter()
    plan = cudnn.matmul_plan((n, n), (n, n), plan_dtype, allow_tf32=tf32)
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
    with (torch.cuda.stream(ext) if torch is not None else _nothing()):
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
        plan(a, b, out, stream=s)
        with torch.cuda.stream(ext):
            torch_call()
        s.synchronize()
        rep["rel_diff_vs_torch"] = rel_diff(torch, ops.tc, ops.tc_torch)
    return rep


# --------------------------------------------------------------------------- host cost

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

    def batched(run_batch):
        def run(count):
            total = done = 0
            while done < count:
                step = min(args.batch if args.batch > 0 else count, count - done)
                total += run_batch(step)
                done += step
                if done < count:
                    s.synchronize()
            return total
        return run

    def c_floor(count):
        pdev.set_current()       # untimed: the C loop times itself
        return batched(lambda c: floor.launch_loop(fn.handle, s.handle, c_params, c))(count)

    def plan_loop(count):
        it = repeat(None, count)
        t0 = perf_counter_ns()
        for _ in it:
            plan(a, b, out, stream=s)
        return perf_counter_ns() - t0

    rows = [Row(PLAN_ROW, batched(plan_loop), s.synchronize, target=TARGET_HOST_RATIO),
            Row(GRAPH_ROW, batched(loop_call0(g.launch)), s.synchronize)]
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
        rows.append(Row(TORCH_ROW, batched(torch_loop), s.synchronize, essential=False, keep=(ta, tb, tc, ext)))
        peer = {"status": "ok"}
    res = run_interleaved(Row(FLOOR, c_floor, s.synchronize), rows, rounds=args.host_rounds,
                          launches=args.launches, warmup_rounds=1, sync_all=s.synchronize, label="host",
                          log=lambda msg: None)
    rep = {"shape": HOST_SHAPE, "dtype": "float16", "launches_per_round": args.launches, "batch": args.batch,
           "floor": {"per_launch_us": res.per_launch_us(res.floor_ns),
                     "per_launch_us_summary": summarize(res.per_launch_us(res.floor_ns))},
           "rows": {}, "torch": peer, "dropped_rows": dict(res.dropped), "engine": plan.engine}
    for name in res.rows:
        us = res.per_launch_us(res.rows[name])
        rep["rows"][name] = {"per_launch_us": us, "per_launch_us_summary": summarize(us),
                             "ratio_to_floor": res.ratios(name), "ratio_summary": summarize(res.ratios(name))}
    g.close()
    return rep


# --------------------------------------------------------------------------- report

def worst_ratio(results, dtypes, row):
    vals = [r["rows"][row]["time_vs_torch_summary"]["median"] for r in results
            if r["n"] >= 2048 and r["dtype"] in dtypes and row in r["rows"]
            and "time_vs_torch_summary" in r["rows"][row]]
    return max(vals) if vals else None


def print_tables(results, host, summary):
    print()
    print(f"{'dtype':<14}{'n':>6}{'pycudadrv':>11}{'torch':>9}{'x torch':>9}{'tuned':>9}{'x torch':>9}"
          f"{'rel diff':>10}  engine")
    print(f"{'':<14}{'':>6}{'TFLOP/s':>11}{'TFLOP/s':>9}{'(time)':>9}{'TFLOP/s':>9}{'(time)':>9}")
    print("-" * 92)
    for r in results:
        rows = r["rows"]
        p, t, q = rows.get("pycudadrv"), rows.get("torch"), rows.get("pycudadrv autotuned")

        def ratio(x):
            return f"{x['time_vs_torch_summary']['median']:>9.3f}" if x and "time_vs_torch_summary" in x \
                else f"{'-':>9}"
        print(f"{r['dtype']:<14}{r['n']:>6}{p['tflops']:>11.1f}"
              f"{(t['tflops'] if t else float('nan')):>9.1f}{ratio(p)}"
              f"{(q['tflops'] if q else float('nan')):>9.1f}{ratio(q)}"
              f"{r.get('rel_diff_vs_torch', float('nan')):>10.1e}  {r['engine'].get('engine')}")
    print()
    fl = host["floor"]["per_launch_us_summary"]["median"]
    print(f"host cost of one execution ({'x'.join(map(str, HOST_SHAPE))} float16), median over rounds:")
    print(f"  {FLOOR:<44}{fl:>8.3f} us   1.000x")
    for name, r in host["rows"].items():
        print(f"  {name:<44}{r['per_launch_us_summary']['median']:>8.3f} us   "
              f"{r['ratio_summary']['median']:.3f}x")
    print()
    w, h = summary["worst_time_vs_torch_ge2048"], summary["host_us_per_execute_over_c"]
    print(f"worst pycudadrv/torch time at n >= 2048: {w if w is None else round(w, 3)} (target <= "
          f"{TARGET_TIME_RATIO}: {summary['pass_time']}); autotuned: "
          f"{summary['worst_time_vs_torch_ge2048_autotuned']}; host cost: {h:.3f}x the C floor "
          f"(target < {TARGET_HOST_RATIO}: {summary['pass_host']})")


def plot(path, results, host, title):
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    colors = {"float32": "tab:blue", "float16": "tab:orange", "bfloat16": "tab:green", TF32: "tab:purple"}
    for dtype in colors:
        rs = [r for r in results if r["dtype"] == dtype]
        if not rs:
            continue
        xs = [r["n"] for r in rs]
        ax1.plot(xs, [r["rows"]["pycudadrv"]["tflops"] for r in rs], "o-", color=colors[dtype],
                 label=f"pycudadrv {dtype}")
        if "torch" in rs[0]["rows"]:
            ax1.plot(xs, [r["rows"]["torch"]["tflops"] for r in rs], "s--", color=colors[dtype], alpha=0.6,
                     label=f"torch {dtype}")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("n (a, b, out are n x n)")
    ax1.set_ylabel("TFLOP/s (median over rounds)")
    ax1.legend(fontsize=7)
    ax1.set_title("matmul throughput: cuDNN plan vs torch.matmul, same stream and memory", fontsize=10)
    names = [FLOOR, *host["rows"]]
    vals = [host["floor"]["per_launch_us_summary"]["median"]] + \
        [host["rows"][n]["per_launch_us_summary"]["median"] for n in host["rows"]]
    ax2.barh(range(len(names)), vals, color=["0.5"] + ["tab:blue"] * (len(names) - 1))
    ax2.set_yticks(range(len(names)))
    ax2.set_yticklabels(names, fontsize=7)
    ax2.invert_yaxis()
    ax2.axvline(vals[0] * TARGET_HOST_RATIO, color="red", ls="--", lw=1.2)
    ax2.set_xlabel("host us per call (red: 2x the C floor)")
    ax2.set_title("host cost of one execution", fontsize=10)
    save_figure(fig, path, title)


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="square sizes n (default 256..8192)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="default float32,float16,bfloat16")
    ap.add_argument("--rounds", type=int, default=5, help="throughput rounds per size (default 5)")
    ap.add_argument("--target-ms", type=float, default=10.0, help="GPU ms per timing (default 10)")
    ap.add_argument("--no-autotune", action="store_true", help="skip the autotuned plans (sizes >= 2048)")
    ap.add_argument("--no-tf32", action="store_true", help="skip the float32+TF32 rows")
    ap.add_argument("--host-rounds", type=int, default=15, help="host-cost rounds (default 15)")
    ap.add_argument("--launches", type=int, default=10_000, help="executions per host row per round")
    ap.add_argument("--batch", type=int, default=500, help="executions per timed batch (0: all at once)")
    add_output_args(ap)
    args = ap.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    args.dtypes = [x.strip() for x in args.dtypes.split(",") if x.strip()]
    if any(d not in DTYPES for d in args.dtypes) or args.rounds < 1 or not args.sizes:
        ap.error(f"--dtypes from {DTYPES}, --rounds >= 1, at least one size")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    bench = setup("matmul", f"sizes {args.sizes[0]}..{args.sizes[-1]}, {args.rounds} rounds")
    if bench is None:
        return 2
    cd, floor, pdev, title = bench.cd, bench.floor, bench.pdev, bench.title
    from pycudadrv import cudnn
    reason = cudnn.unavailable_reason()
    if reason is not None:
        print(f"matmul: cuDNN is not available: {reason}", file=sys.stderr)
        return 2
    log(f"  cuDNN {'.'.join(map(str, cudnn.version()))} at {cudnn.library_path()}")
    torch, torch_info = torch_peer(pdev)
    log(f"  torch: {torch_info}")
    s = cd.Stream()
    ext = torch.cuda.ExternalStream(s.handle) if torch is not None else None
    rng = np.random.default_rng(2024)
    dtypes = list(args.dtypes) + ([] if args.no_tf32 or "float32" not in args.dtypes else [TF32])
    results = []
    t_start = perf_counter()
    for dtype in dtypes:
        for n in args.sizes:
            r = measure_size(cd, cudnn, torch, s, ext, n, dtype, args.rounds, rng,
                             autotune=not args.no_autotune and n >= 2048, target_ms=args.target_ms)
            results.append(r)
            p = r["rows"]["pycudadrv"]
            ratio = p.get("time_vs_torch_summary", {}).get("median")
            log(f"  {dtype:<13} n={n:<5} pycudadrv {p['tflops']:7.1f} TFLOP/s"
                + (f", x{ratio:.3f} torch's time" if ratio is not None else "")
                + f"  (plan {r['plan_build_s'] * 1e3:.0f} ms)")
            cudnn.clear_cache()
    log(f"  throughput done in {perf_counter() - t_start:.1f} s; host cost ...")
    host = host_cost(cd, cudnn, torch, floor, pdev, args)
    plan_ratio = host["rows"][PLAN_ROW]["ratio_summary"]["median"]
    worst = worst_ratio(results, DTYPES, "pycudadrv")
    summary = {
        "worst_time_vs_torch_ge2048": worst,
        "host_us_per_execute_over_c": plan_ratio,
        "worst_time_vs_torch_ge2048_autotuned": worst_ratio(results, DTYPES, "pycudadrv autotuned"),
        "worst_time_vs_torch_ge2048_tf32": worst_ratio(results, (TF32,), "pycudadrv"),
        "host_us_per_execute": host["rows"][PLAN_ROW]["per_launch_us_summary"]["median"],
        "c_floor_us": host["floor"]["per_launch_us_summary"]["median"],
        "target_time_vs_torch": TARGET_TIME_RATIO,
        "target_host_over_c": TARGET_HOST_RATIO,
        "pass_time": worst is not None and worst <= TARGET_TIME_RATIO,
        "pass_host": plan_ratio < TARGET_HOST_RATIO,
    }
    data = {
        "summary": summary,
        **bench.report_header(),
        "cudnn_version": ".".join(map(str, cudnn.version())),
        "cudnn_library": cudnn.library_path(),
        "torch": torch_info,
        "config": {"sizes": args.sizes, "dtypes": dtypes, "rounds": args.rounds, "target_ms": args.target_ms,
                   "autotune": not args.no_autotune, "host_shape": HOST_SHAPE, "host_rounds": args.host_rounds,
                   "launches": args.launches, "batch": args.batch,
                   "torch_switches": "allow_tf32 off (on for float32+TF32), fp16/bf16 reduced-precision "
                                     "reduction off"},
        "throughput": results,
        "host": host,
    }
    write_report(args.results_dir, "matmul", data,
                 None if args.no_plot else lambda path: plot(path, results, host, title))
    print_tables(results, host, summary)
    passed = summary["pass_host"] and (summary["pass_time"] or worst is None)
    return 1 if (args.strict and not passed) else 0


if __name__ == "__main__":
    sys.exit(main())
