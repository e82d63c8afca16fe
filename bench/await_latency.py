#!/usr/bin/env python3
"""How long after the GPU finishes an awaited kernel the coroutine resumes,
for each pycudadrv.aio completion mode, against a blocking synchronize() and
against C floors of the same waits.

What is measured
----------------
One kernel (one block spinning on ``%globaltimer`` for ``--kernel-us``) on
an idle owned stream, between two timing events. One sample: host clock
``t0``, record, launch, record, then wait for the stream, host clock ``t1``;
the sample is ``(t1 - t0) - (end - start)``, the round trip minus the
kernel's own GPU time, in microseconds: the launch latency (the same for
every row) plus the time from completion to the waiter running again.

* **blocking synchronize** -- ``stream.synchronize()`` (``cuStreamSynchronize``).
* **await, loop** (the default) -- ``await aio.wait(stream)`` with
  ``aio.set_completion("loop")``: the loop's own thread queries the event
  (``cuEventQuery``) once per loop iteration while it is pending.
* **await, blocking** -- ``aio.set_completion("blocking")``: the device's
  waiter thread sleeps on a ``CU_EVENT_BLOCKING_SYNC`` event recorded behind
  the work, then writes the loop's eventfd.
* **C sync**, **C host_func+eventfd**, **C waiter+eventfd** --
  ``bench/c_await_floor.c`` (compiled in the run, called through ctypes on
  the same function, stream and events): ``cuStreamSynchronize``;
  ``cuLaunchHostFunc`` whose function writes an eventfd the caller
  ``poll()``-s; one waiter thread (asleep on a condition variable when idle)
  that ``cuEventSynchronize``-s the event (made without blocking sync: the
  driver spin-waits) and writes an eventfd the caller ``poll()``-s.
* **C waiter+asyncio** -- the same C waiter thread, its eventfd watched by
  this asyncio loop with a plain ``loop.add_reader`` whose callback drains it
  and sets an asyncio future's result (the task resumes one loop iteration
  later, as for any asyncio future): what asyncio's own wake-up adds to the C
  waiter, with no pycudadrv code on the path.

Samples are taken in blocks: ``--block`` (20) samples of one row in a row,
the first ``--block-warmup`` (2) of each block discarded, the rows' blocks
rotated round by round (the order shifted each round, so drift still
cancels), until each row has ``--samples`` per kernel length. A user sets
the completion mode once: ``aio.set_completion`` is called once per block,
not before every sample (one sample of each row in turn measured each
mode's first await after every other mode and C floor had run, cold).
CPU per await: the
process's CPU time (``time.process_time``, every thread: a waiter thread's
spinning and the driver's host-function thread count) per sample, and the
calling thread's (``time.thread_time``).

Summary keys (at the longest kernel): ``await_resume_us_median`` /
``await_resume_us_p99`` and ``await_cpu_us`` (process CPU us per await) of
the default mode; ``await_<mode>_us_median`` / ``_p99`` / ``_cpu_us`` for
``loop`` and ``blocking``; ``sync_resume_us_*``;
``await_c_sync_us_*``, ``await_c_host_func_us_*``, ``await_c_waiter_us_*``,
``await_c_waiter_asyncio_us_*`` and ``await_c_waiter_cpu_us``; ``await_over_c_waiter`` (default-mode median
over the C waiter's median; the target is <= 1.3, with
``await_resume_us_p99`` <= 100).

``--breakdown`` (off by default; a C flag, nothing is taken when off):
per await sample of the ``"blocking"`` mode, CLOCK_MONOTONIC stamps of (a)
the waiter's ``cuEventSynchronize`` returning, (b) the
eventfd written (``pycudadrv._channel.Channel._timestamps``), (s) the loop's
selector returning with events (the bench wraps ``loop._selector.select``
while ``--breakdown`` is on), (c) the loop's reader entered, (d) the coroutine
resumed; the medians of ``t0 -> a`` less the kernel's GPU time (launch and
completion detection), ``a -> b``, ``b -> s`` (the loop thread's wake-up),
``s -> c`` (asyncio's iteration), ``c -> d`` go in
``results[...]["breakdown"]`` and, at the longest kernel, in
``await_blocking_breakdown_*_us`` summary keys.

Output: the table, ``bench/results/await_latency.json`` and ``.png``. Exit 2
without CUDA or a C compiler.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _cfloor import BENCH_DIR, BenchSetupError, ParamArray, compile_shared, find_cuda_include  # noqa: E402
from _harness import launch_hook, setup, summarize  # noqa: E402
from _report import add_output_args, log, new_parser, pyplot, save_figure, write_report  # noqa: E402

SRC = r"""
extern "C" __global__ void spin(int* flag, long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
    if (threadIdx.x == 0) *flag += 1;
}
"""
SYNC = "blocking synchronize"
MODE_ROWS = {"loop": "await, loop", "blocking": "await, blocking"}
C_ROWS = {"C sync": 0, "C host_func+eventfd": 1, "C waiter+eventfd": 2}     # mode numbers of c_await_floor.c
C_ASYNCIO = "C waiter+asyncio"     # the C waiter thread waking this asyncio loop through a plain add_reader
ROWS = (SYNC, *MODE_ROWS.values(), *C_ROWS, C_ASYNCIO)
ROW_MODE = {row: mode for mode, row in MODE_ROWS.items()}
CHANNEL_MODES = ("blocking",)     # completions through the channel (--breakdown)
GAPS = ("launch_to_wait", "wait_to_signal", "signal_to_select", "select_to_reader", "reader_to_resume")


def p99(v):
    return float(np.percentile(v, 99)) if v else float("nan")


class CAwait:
    """``bench/c_await_floor.c``, compiled now and bound through ctypes."""

    def __init__(self):
        out, cmd, _cc, proc = compile_shared(BENCH_DIR / "c_await_floor.c", "c_await_floor.so",
                                             [f"-I{find_cuda_include()}", "-pthread"], ["-ldl", "-pthread"])
        if proc.returncode != 0:
            raise BenchSetupError(f"compiling bench/c_await_floor.c failed: {' '.join(cmd)}\n{proc.stdout}"
                                  f"{proc.stderr}")
        lib = self.lib = ctypes.CDLL(out)
        P = ctypes.c_void_p
        lib.await_init.argtypes, lib.await_init.restype = [ctypes.c_char_p], ctypes.c_int
        lib.await_init_error.argtypes, lib.await_init_error.restype = [], ctypes.c_char_p
        lib.await_run.argtypes = [ctypes.c_int, P, P, P, P, P, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                                  ctypes.POINTER(ctypes.c_double)]
        lib.await_run.restype = ctypes.c_int
        lib.await_stop.argtypes, lib.await_stop.restype = [], None
        lib.await_arm.argtypes, lib.await_arm.restype = [P, P, P, P, P], ctypes.c_int
        for name in ("await_fd", "await_take"):
            getattr(lib, name).argtypes, getattr(lib, name).restype = [], ctypes.c_int
        lib.await_elapsed_us.argtypes, lib.await_elapsed_us.restype = [P, P], ctypes.c_double
        self._fut = None
        rc = lib.await_init(os.environ.get("PYCUDADRV_LIBCUDA", "libcuda.so.1").encode())
        if rc != 0:
            raise BenchSetupError(f"c_await_floor: await_init = {rc}: {lib.await_init_error().decode()}")
        self.out = (ctypes.c_double * 1)()
        self.cpu = (ctypes.c_double * 2)()

    def sample(self, mode, func, stream, params, start, end):
        """One sample of C mode ``mode``: (latency us, process CPU us, thread CPU us)."""
        rc = self.lib.await_run(mode, func, stream, params.address, start, end, 1, self.out, self.cpu)
        if rc != 0:
            raise RuntimeError(f"c_await_floor: await_run(mode {mode}) failed: {rc}")
        return self.out[0], self.cpu[0], self.cpu[1]

    def watch(self, loop):
        """Make ``loop`` the reader of the C waiter's eventfd (plain ``add_reader``; the callback
        drains it and sets the pending asyncio future's result: the task steps one iteration later,
        as with any asyncio future)."""
        fd = self.lib.await_fd()
        if fd < 0:
            raise RuntimeError("c_await_floor: the waiter thread could not be started")
        loop.add_reader(fd, self._ready)
        return fd

    def _ready(self):
        rc = self.lib.await_take()
        fut, self._fut = self._fut, None
        if fut is not None and not fut.done():
            fut.set_result(rc)

    async def sample_asyncio(self, loop, func, stream, params, start, end):
        """Arm the C waiter (record, launch, record, hand over: ``await_arm``) and await the asyncio
        future its eventfd's reader resolves; the CUresult (the caller times the await)."""
        self._fut = fut = loop.create_future()
        rc = self.lib.await_arm(func, stream, params.address, start, end)
        if rc != 0:
            self._fut = None
            raise RuntimeError(f"c_await_floor: await_arm failed: {rc}")
        rc = await fut
        if rc != 0:
            raise RuntimeError(f"c_await_floor: the waiter's cuEventSynchronize failed: {rc}")


def main(argv=None) -> int:
    ap = new_parser(__doc__)
    ap.add_argument("--samples", type=int, default=300, help="samples per row and kernel length")
    ap.add_argument("--kernel-us", type=float, nargs="+", default=[50.0, 1000.0])
    ap.add_argument("--block", type=int, default=20, help="samples of one row in a row")
    ap.add_argument("--block-warmup", type=int, default=2, help="samples discarded at the start of each block")
    ap.add_argument("--breakdown", action="store_true", help="time stamps of each await's wake-up path")
    add_output_args(ap)
    args = ap.parse_args(argv)
    if args.block < 1 or not 0 <= args.block_warmup < args.block:
        ap.error("--block must be >= 1 and --block-warmup in [0, block)")
    b = setup("await_latency", f"{args.samples} samples per row, kernels of "
                               f"{', '.join(f'{k:g}' for k in args.kernel_us)} us")
    if b is None:
        return 2
    cd = b.cd
    from pycudadrv import _waiter, aio
    launch_hook()
    try:
        c_await = CAwait()
    except BenchSetupError as e:
        print(f"await_latency: {e}", file=sys.stderr)
        return 2
    spin = cd.compile(SRC).load().function("spin")
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    start, end = cd.Event(), cd.Event()
    prev = aio.get_completion()
    default = prev["mode"]

    breakdown = {} if args.breakdown else None     # (ns, row) -> {gap: [us]}
    missing = {}                                    # row -> samples whose stamps were incomplete

    async def one(row, ns, c_params, keep=True):
        if row in C_ROWS:
            return c_await.sample(C_ROWS[row], spin.handle, s.handle, c_params, start.handle, end.handle)
        t0 = perf_counter_ns()
        p0 = time.process_time_ns()
        c0 = time.thread_time_ns()
        if row == C_ASYNCIO:
            await c_await.sample_asyncio(loop, spin.handle, s.handle, c_params, start.handle, end.handle)
        else:
            start.record(s)
            spin.launch(1, 32, flag, ns, stream=s)
            end.record(s)
        if row == SYNC:
            s.synchronize()
        elif row != C_ASYNCIO:
            await aio.wait(s)
        t1 = perf_counter_ns()
        c1 = time.thread_time_ns()
        p1 = time.process_time_ns()
        gpu_us = (c_await.lib.await_elapsed_us(start.handle, end.handle) if row == C_ASYNCIO
                  else cd.Event.elapsed_ms(start, end) * 1e3)     # (recorded in C: the Events do not know)
        if keep and breakdown is not None and row in ROW_MODE and ROW_MODE[row] in CHANNEL_MODES:
            ch = aio._completer(asyncio.get_running_loop()).channel
            ta, tb, tc = ch._timestamps() if ch is not None else (0, 0, 0)
            ts = selected[0]
            if t0 < ta <= tb <= ts <= tc <= t1:     # this sample's wake-up; (d) is t1 (the same clock)
                gaps = breakdown.setdefault((ns, row), {k: [] for k in GAPS})
                for key, v in zip(GAPS, ((ta - t0) / 1e3 - gpu_us, (tb - ta) / 1e3, (ts - tb) / 1e3,
                                         (tc - ts) / 1e3, (t1 - tc) / 1e3)):
                    gaps[key].append(v)
            else:
                missing[row] = missing.get(row, 0) + 1
        return (t1 - t0) / 1e3 - gpu_us, (p1 - p0) / 1e3, (c1 - c0) / 1e3

    async def run_all():
        nonlocal loop
        loop = asyncio.get_running_loop()
        fd = c_await.watch(loop)
        if breakdown is not None:            # stamp (s): the selector returning with events
            select = loop._selector.select

            def stamped(timeout=None):
                ready = select(timeout)
                if ready:
                    selected[0] = perf_counter_ns()
                return ready
            loop._selector.select = stamped
        try:
            return await _run_all()
        finally:
            loop.remove_reader(fd)
            if breakdown is not None:
                del loop._selector.select

    loop = None
    selected = [0]

    async def _run_all():
        out = {}
        launches = 0
        for kus in args.kernel_us:
            ns = int(kus * 1e3)
            c_params = ParamArray(ctypes.c_void_p(flag.ptr), ctypes.c_longlong(ns))
            res = {row: [] for row in ROWS}
            cpu = {row: [] for row in ROWS}
            tcpu = {row: [] for row in ROWS}
            kept = args.block - args.block_warmup
            for i in range(-(-args.samples // kept)):       # rounds
                k = i % len(ROWS)
                for row in ROWS[k:] + ROWS[:k]:
                    if row in ROW_MODE:
                        aio.set_completion(ROW_MODE[row])      # once per block, as a user sets it once
                    for j in range(args.block):
                        lat, c, tc = await one(row, ns, c_params, keep=j >= args.block_warmup)
                        launches += 1
                        if j >= args.block_warmup and len(res[row]) < args.samples:
                            res[row].append(lat)
                            cpu[row].append(c)
                            tcpu[row].append(tc)
            out[kus] = (res, cpu, tcpu)
            log(f"  [await] {kus:g} us kernel: " + ", ".join(
                f"{row} {statistics.median(res[row]):.1f} us" for row in ROWS))
        return out, launches

    if args.breakdown and "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
        print("await_latency: --breakdown needs perf_counter on CLOCK_MONOTONIC (the waiter's clock)", file=sys.stderr)
        return 2
    prev_timing = _waiter._set_timing(True) if args.breakdown else None
    try:
        results, launches = asyncio.run(run_all())
    finally:
        aio.set_completion(**prev)
        if prev_timing is not None:
            _waiter._set_timing(prev_timing)
        c_await.lib.await_stop()
    got = int(flag.to_numpy()[0])
    if got != launches:
        print(f"await_latency: the kernel ran {got} times, expected {launches}", file=sys.stderr)
        return 1
    print(f"\n=== await latency: {b.title} ===")
    print("round trip minus the kernel's GPU time (launch latency + completion to resumption), us; "
          "CPU us per await (process, calling thread)")
    print(f"{'kernel':>9} {'row':<22} {'median':>9} {'p99':>9} {'cpu us':>9} {'thread':>9}")
    report = {}
    for kus, (res, cpu, tcpu) in results.items():
        report[f"{kus:g}us"] = {row: {"latency_us": summarize(res[row]), "latency_us_p99": p99(res[row]),
                                      "cpu_us_per_wait": summarize(cpu[row]),
                                      "thread_cpu_us_per_wait": summarize(tcpu[row])} for row in ROWS}
        for row in ROWS:
            print(f"{kus:>7g}us {row:<22} {statistics.median(res[row]):>9.1f} {p99(res[row]):>9.1f} "
                  f"{statistics.fmean(cpu[row]):>9.1f} {statistics.fmean(tcpu[row]):>9.1f}")
        if breakdown is not None:
            report[f"{kus:g}us"]["breakdown"] = bd = {
                row: {gap: statistics.median(v) for gap, v in gaps.items()} | {"n": len(gaps[GAPS[0]])}
                for (ns, row), gaps in breakdown.items() if ns == int(kus * 1e3)}
            for row, med_gaps in bd.items():
                print(f"{'':>9} {row:<22} breakdown (median us): " +
                      ", ".join(f"{gap} {med_gaps[gap]:.1f}" for gap in GAPS) + f" (n {med_gaps['n']})")
    longest = max(results)
    res, cpu, tcpu = results[longest]
    med = {row: statistics.median(res[row]) for row in ROWS}
    mean_cpu = {row: statistics.fmean(cpu[row]) for row in ROWS}
    dflt = MODE_ROWS[default]
    summary = {"await_resume_us_median": med[dflt], "await_resume_us_p99": p99(res[dflt]),
               "await_cpu_us": mean_cpu[dflt], "await_thread_cpu_us": statistics.fmean(tcpu[dflt])}
    for mode, row in MODE_ROWS.items():
        summary.update({f"await_{mode}_us_median": med[row], f"await_{mode}_us_p99": p99(res[row]),
                        f"await_{mode}_cpu_us": mean_cpu[row]})
    summary.update({"sync_resume_us_median": med[SYNC], "sync_resume_us_p99": p99(res[SYNC]),
                    "sync_cpu_us": mean_cpu[SYNC]})
    for key, row in (("c_sync", "C sync"), ("c_host_func", "C host_func+eventfd"), ("c_waiter", "C waiter+eventfd"),
                     ("c_waiter_asyncio", C_ASYNCIO)):
        summary.update({f"await_{key}_us_median": med[row], f"await_{key}_us_p99": p99(res[row]),
                        f"await_{key}_cpu_us": mean_cpu[row]})
    summary["await_over_c_waiter"] = med[dflt] / med["C waiter+eventfd"]
    channel_row = MODE_ROWS["blocking"]
    if breakdown is not None and channel_row in report[f"{longest:g}us"]["breakdown"]:
        summary.update({f"await_blocking_breakdown_{gap}_us": v for gap, v in
                        report[f"{longest:g}us"]["breakdown"][channel_row].items() if gap in GAPS})
    print(f"\nsummary ({longest:g} us kernel, default mode {default!r}): " +
          ", ".join(f"{k} = {v:.2f}" for k, v in summary.items()))
    data = {"summary": summary, **b.report_header()}
    data.update({"samples": args.samples, "block": args.block, "block_warmup": args.block_warmup,
                 "breakdown_incomplete_samples": missing, "kernel_us": args.kernel_us, "default_mode": default,
                 "completion_settings": prev, "results": report})
    write_report(args.results_dir, "await_latency", data,
                 None if args.no_plot else (lambda path: plot(path, results, b.title)))
    return 0


def plot(path, results, title):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (kus, (res, _, _)) in zip(axes[0], results.items()):
        ax.boxplot([res[row] for row in ROWS], showfliers=False)
        ax.set_xticks(range(1, len(ROWS) + 1), ROWS, fontsize=6, rotation=30, ha="right")
        ax.set_ylabel("us after the kernel's GPU time")
        ax.set_title(f"{kus:g} us kernel", fontsize=9)
    save_figure(fig, path, title, fontsize=9)


if __name__ == "__main__":
    sys.exit(main())
