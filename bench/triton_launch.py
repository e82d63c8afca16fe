#!/usr/bin/env python3
"""Launch cost of one Triton kernel: Triton's own paths against pycudadrv's launches of the same CUBIN.

What is measured
----------------
One Triton kernel, ``bench_kernel(a, b, n, s, BLOCK: tl.constexpr)`` (``a[i] = s * b[i] + a[i]``
for ``i < n``), compiled once by Triton (``num_warps=1``: block 32) and launched with ``n = 0``
(no thread touches memory) and grid 1. Every row launches that CUBIN with the same arguments;
what differs is the code between the Python caller and the driver:

* **C floor** -- a C loop of ``cuLaunchKernel`` (``bench/c_floor.c``, compiled in this run)
  over the CUfunction pycudadrv loaded from Triton's CUBIN, with a prebuilt ``void* params[]``
  in Triton's calling convention (``a, b, n, s, global_scratch, profile_scratch``).
* **Triton kernel[grid](...)** -- the JIT entry: argument binding, specialisation key, cache
  look-up, then its launcher; torch tensors, on a torch stream made current (untimed).
* **Triton CompiledKernel[grid](...)** -- the compiled object's runner (current stream, launch
  metadata, then ``run``).
* **Triton launcher (CompiledKernel.run)** -- Triton's generated C launcher called directly
  with every argument precomputed (its Python scratch-allocation wrapper included): the
  cheapest way Triton launches.
* **pycudadrv TritonKernel.launch** -- ``tk.launch(1, a, b, 0, 1.0, stream=s)`` of
  ``tk = pycudadrv.from_triton(compiled)``: Triton's convention translated in Python, then
  pycudadrv's generic launch.
* **pycudadrv Function.launch** -- the generic launch of ``tk.function`` with the kernel's
  own parameters (the scratch pointers as None).
* **pycudadrv prepared** -- ``p = tk.bind(1, a, b, 0, 1.0, stream=s)`` once, then ``p.launch()``.
* **pycudadrv graph replay** -- a graph captured from one ``p()`` on ``s``, replayed with
  ``g.launch()`` (one kernel per replay).

pycudadrv rows get pycudadrv Buffers; Triton rows torch tensors over equal memory.

Method
------
As ``bench/launch_overhead.py``: each round times ``--launches`` launches of every row in
turn, the C floor first and last (the round's floor is their mean), the other rows in an
order rotated by one each round; each row's stream is synchronised after its launches,
outside the timing. One warm-up round, then ``--rounds`` rounds. Ratios are taken within
a round only; the tables give medians over rounds.

Targets (H200): prepared <= 0.75x Triton's launcher (``CompiledKernel.run``) and <= 0.35x
``kernel[grid](...)``. The JSON ``summary`` holds ``prepared_over_triton_launcher`` and
``prepared_over_triton_jit`` (medians over rounds of the same-round ratios) and more.

Output: the table on stdout, ``bench/results/triton_launch.json``, ``bench/results/triton_launch.png``.

Usage: ``python bench/triton_launch.py [--rounds 15] [--launches 20000]``. Exits 2 when CUDA,
a C compiler, Triton or PyTorch is missing; with ``--strict``, 1 when a target is missed.
"""
from __future__ import annotations

import ctypes
import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _cfloor/_harness/_report, wherever we are run from

import numpy as np  # noqa: E402

from _cfloor import BenchSetupError, ParamArray  # noqa: E402
from _harness import Row, loop_call0, median_or_nan, run_interleaved, setup, summarize, sync_all_streams  # noqa: E402
from _report import add_output_args, log, new_parser, pyplot, save_figure, write_report  # noqa: E402

N_ELEMS = 32
BLOCK_ELEMS = 32      # the kernel's BLOCK constexpr
NUM_WARPS = 1         # block = 32 threads, as launch_overhead.py

FLOOR = "C floor (cuLaunchKernel loop)"
T_JIT = "Triton kernel[grid](...)"
T_COMPILED = "Triton CompiledKernel[grid](...)"
T_LAUNCHER = "Triton launcher (CompiledKernel.run)"
P_TK = "pycudadrv TritonKernel.launch"
P_GENERIC = "pycudadrv Function.launch"
P_PREPARED = "pycudadrv prepared"
P_GRAPH = "pycudadrv graph replay"
TARGETS = {T_LAUNCHER: 0.75, T_JIT: 0.35}   # prepared time over that row's time, same round


def import_peers():
    """triton, triton.language and torch (with a CUDA device), or a reason they cannot be used."""
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as e:
        return None, f"Triton and PyTorch are needed ({e})"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA device (Triton launches through it)"
    return (triton, tl, torch), None


def make_kernel(triton, tl):
    @triton.jit
    def bench_kernel(a, b, n, s, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(a + offs, s * tl.load(b + offs, mask=m) + tl.load(a + offs, mask=m), mask=m)
    return bench_kernel


def loop(f, *args, **kwargs):
    """A row's run(n): n x f(*args, **kwargs), the launches only timed."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            f(*args, **kwargs)
        return perf_counter_ns() - t0
    return run


def check_same_results(cd, kernel, tk, torch, ts, s):
    """One launch through Triton and one through pycudadrv with n = N_ELEMS, s = 2 on equal inputs:
    the outputs must be bit-identical and equal 2 b + a."""
    rng = np.random.default_rng(7)
    a0 = rng.standard_normal(N_ELEMS).astype(np.float32)
    b0 = rng.standard_normal(N_ELEMS).astype(np.float32)
    at, bt = torch.from_numpy(a0).cuda(), torch.from_numpy(b0).cuda()
    torch.cuda.synchronize()
    with torch.cuda.stream(ts):
        kernel[(1,)](at, bt, N_ELEMS, 2.0, BLOCK=BLOCK_ELEMS, num_warps=NUM_WARPS)
    ts.synchronize()
    ab, bb = cd.Buffer.from_numpy(a0, stream=s), cd.Buffer.from_numpy(b0, stream=s)
    tk.launch(1, ab, bb, N_ELEMS, 2.0, stream=s)
    got_p = ab.to_numpy(stream=s)
    got_t = at.cpu().numpy()
    if not np.array_equal(got_t.view(np.uint32), got_p.view(np.uint32)):
        raise BenchSetupError(f"Triton and pycudadrv launches of the same CUBIN disagree: {got_t[:4]} vs {got_p[:4]}")
    ref = 2.0 * b0.astype(np.float64) + a0
    if not np.allclose(got_p, ref, rtol=1e-6, atol=1e-6):
        raise BenchSetupError(f"bench kernel computed {got_p[:4]}, expected {ref[:4]}")


def ratio_lists(res, num, den):
    return [a / b for a, b in zip(res.rows[num], res.rows[den])]


def print_table(rep, order, summary):
    w = max(len(n) for n in [FLOOR, *order]) + 2
    print()
    print(f"{'row':<{w}}{'us/launch':>10}{'x floor':>9}{'min':>8}{'max':>8}{'x prepared':>12}")
    print("-" * (w + 47))
    fl = rep["floor"]["per_launch_us_summary"]["median"]
    prep = rep["rows"][P_PREPARED]["per_launch_us_summary"]["median"]
    print(f"{FLOOR:<{w}}{fl:>10.3f}{1.0:>9.3f}{'':>16}{fl / prep:>12.2f}")
    for name in order:
        r = rep["rows"][name]
        us, rt = r["per_launch_us_summary"]["median"], r["ratio_summary"]
        print(f"{name:<{w}}{us:>10.3f}{rt['median']:>9.3f}{rt['min']:>8.3f}{rt['max']:>8.3f}{us / prep:>12.2f}")
    print()
    for key, target in (("prepared_over_triton_launcher", TARGETS[T_LAUNCHER]),
                        ("prepared_over_triton_jit", TARGETS[T_JIT])):
        v = summary[key]
        print(f"{key}: {v:.3f} (target <= {target:.2f}: {'PASS' if v <= target else 'FAIL'})")


def plot(path, rep, order, title):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    names = [FLOOR, *order]
    med = [rep["floor"]["per_launch_us_summary"]["median"]] + \
        [rep["rows"][n]["per_launch_us_summary"]["median"] for n in order]
    colors = ["0.5" if n == FLOOR else ("tab:blue" if n.startswith("pycudadrv") else "tab:orange") for n in names]
    y = list(range(len(names)))
    ax.barh(y, med, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    for i, v in enumerate(med):
        ax.text(v * 1.01, i, f"{v:.2f} us", va="center", fontsize=8)
    ax.set_xlabel("us per launch (median over rounds), host side; kernel with n = 0")
    ax.set_xlim(0, max(med) * 1.2)
    ax.set_title("one Triton kernel: Triton's launch paths (orange) vs pycudadrv's (blue)", fontsize=10)
    save_figure(fig, path, title)


def parse_args(argv=None):
    ap = new_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=15, help="counted rounds (default 15)")
    ap.add_argument("--launches", type=int, default=20_000, help="launches per row per round (default 20000)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="uncounted rounds first (default 1)")
    ap.add_argument("--no-rotate", action="store_true", help="same row order every round")
    add_output_args(ap)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.launches < 1 or args.warmup_rounds < 0:
        ap.error("--rounds and --launches must be >= 1, --warmup-rounds >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    peers, why = import_peers()
    if peers is None:
        print(f"triton_launch: {why}", file=sys.stderr)
        return 2
    triton, tl, torch = peers
    bench = setup("triton_launch", f"{args.rounds} rounds x {args.launches:,} launches")
    if bench is None:
        return 2
    cd, floor, pdev, title = bench.cd, bench.floor, bench.pdev, bench.title
    torch.cuda.init()
    pdev.set_current()

    kernel = make_kernel(triton, tl)
    ts = torch.cuda.Stream()
    a_t = torch.zeros(N_ELEMS, dtype=torch.float32, device="cuda")
    b_t = torch.ones(N_ELEMS, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(ts):
        compiled = kernel[(1,)](a_t, b_t, 0, 1.0, BLOCK=BLOCK_ELEMS, num_warps=NUM_WARPS)
    ts.synchronize()
    pdev.set_current()
    tk = cd.from_triton(compiled)
    s = cd.Stream()
    check_same_results(cd, kernel, tk, torch, ts, s)

    a = cd.Buffer.zeros(N_ELEMS, np.float32, stream=s)
    b = cd.Buffer.from_numpy(np.ones(N_ELEMS, np.float32), stream=s)
    s.synchronize()
    fn = tk.function
    c_params = ParamArray(ctypes.c_void_p(a.ptr), ctypes.c_void_p(b.ptr), ctypes.c_int(0), ctypes.c_float(1.0),
                          ctypes.c_void_p(0), ctypes.c_void_p(0))
    grid_x, block_x, shmem = 1, tk.block[0], tk.shared_mem_bytes

    def floor_run(n):
        pdev.set_current()
        return floor.launch_loop_dims(fn.handle, grid_x, block_x, shmem, s.handle, c_params, n)
    floor_row = Row(FLOOR, floor_run, s.synchronize)

    prepared = tk.bind(1, a, b, 0, 1.0, stream=s)
    graph_launch = tk.bind(1, a, b, 0, 1.0, stream=s)
    with s.capture() as g:
        graph_launch()
    stream_handle = ts.cuda_stream
    run = compiled.run
    fn_handle, packed = compiled.function, compiled.packed_metadata
    enter, leave = None, None
    runner = compiled[(1, 1, 1)]     # CompiledKernel.__getitem__ reads grid[0..2]

    def in_torch_stream(inner):
        def run_n(n):
            with torch.cuda.stream(ts):   # untimed: only the launches inside are timed
                return inner(n)
        return run_n

    rows = [
        Row(T_JIT, in_torch_stream(loop(kernel[(1,)], a_t, b_t, 0, 1.0, BLOCK=BLOCK_ELEMS, num_warps=NUM_WARPS)),
            ts.synchronize),
        Row(T_COMPILED, in_torch_stream(loop(runner, a_t, b_t, 0, 1.0, BLOCK_ELEMS)), ts.synchronize),
        Row(T_LAUNCHER, loop(run, 1, 1, 1, stream_handle, fn_handle, packed, None, enter, leave, a_t, b_t, 0, 1.0,
                             BLOCK_ELEMS), ts.synchronize),
        Row(P_TK, loop(tk.launch, 1, a, b, 0, 1.0, stream=s), s.synchronize),
        Row(P_GENERIC, loop(fn.launch, grid_x, block_x, a, b, 0, 1.0, None, None, stream=s), s.synchronize),
        Row(P_PREPARED, loop_call0(prepared.launch), s.synchronize),
        Row(P_GRAPH, loop_call0(g.launch), s.synchronize),
    ]
    sync_all = sync_all_streams([s.synchronize, ts.synchronize], pdev)
    sync_all()
    log(f"rows: {len(rows) + 1}")
    res = run_interleaved(floor_row, rows, rounds=args.rounds, launches=args.launches,
                          warmup_rounds=args.warmup_rounds, rotate=not args.no_rotate, sync_all=sync_all,
                          label="triton", log=log)
    order = [r.name for r in rows]
    per_launch_floor = res.per_launch_us(res.floor_ns)
    rep = {"floor": {"per_launch_us": per_launch_floor, "per_launch_us_summary": summarize(per_launch_floor),
                     "first_ns": res.floor_first_ns, "last_ns": res.floor_last_ns},
           "rows": {n: res.row_report(n) for n in order}}
    over_launcher = ratio_lists(res, P_PREPARED, T_LAUNCHER)
    over_jit = ratio_lists(res, P_PREPARED, T_JIT)
    summary = {
        "prepared_over_triton_launcher": median_or_nan(over_launcher),
        "prepared_over_triton_jit": median_or_nan(over_jit),
        "prepared_over_triton_compiled_getitem": median_or_nan(ratio_lists(res, P_PREPARED, T_COMPILED)),
        "tritonkernel_launch_over_triton_launcher": median_or_nan(ratio_lists(res, P_TK, T_LAUNCHER)),
        "graph_replay_over_triton_launcher": median_or_nan(ratio_lists(res, P_GRAPH, T_LAUNCHER)),
        "prepared_over_floor": median_or_nan(res.ratios(P_PREPARED)),
        "triton_launcher_us": median_or_nan(rep["rows"][T_LAUNCHER]["per_launch_us"]),
        "triton_jit_us": median_or_nan(rep["rows"][T_JIT]["per_launch_us"]),
        "prepared_us": median_or_nan(rep["rows"][P_PREPARED]["per_launch_us"]),
        "floor_us": median_or_nan(per_launch_floor),
    }
    summary["pass"] = bool(summary["prepared_over_triton_launcher"] <= TARGETS[T_LAUNCHER]
                           and summary["prepared_over_triton_jit"] <= TARGETS[T_JIT])

    print(f"\n=== Triton kernel launch: {title} ===")
    print_table(rep, order, summary)
    data = {
        "summary": summary,
        **bench.report_header(),
        "triton_version": triton.__version__,
        "torch_version": torch.__version__,
        "config": {"rounds": args.rounds, "launches_per_round": args.launches, "warmup_rounds": args.warmup_rounds,
                   "rotate": not args.no_rotate, "grid": 1, "block": tk.block[0], "n": 0, "num_warps": NUM_WARPS,
                   "kernel_signature": tk.convention.signature},
        "targets": {"prepared_over_triton_launcher": TARGETS[T_LAUNCHER],
                    "prepared_over_triton_jit": TARGETS[T_JIT]},
        "same_round_ratios": {"prepared_over_triton_launcher": over_launcher, "prepared_over_triton_jit": over_jit},
        "main": rep,
    }
    write_report(args.results_dir, "triton_launch", data,
                 None if args.no_plot else lambda path: plot(path, rep, order, title))
    return 1 if (args.strict and not summary["pass"]) else 0


if __name__ == "__main__":
    sys.exit(main())
