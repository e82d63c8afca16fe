#!/usr/bin/env python3
"""How long after the GPU finishes an awaited kernel the coroutine resumes,
for each pycudadrv.aio completion mode, against a blocking synchronize().

What is measured
----------------
One kernel (one block spinning on ``%globaltimer`` for ``--kernel-us``) on
an idle owned stream, between two timing events. One sample: host clock
``t0``, record, launch, record, then wait for the stream, host clock ``t1``;
the sample is ``(t1 - t0) - (end - start)``, the round trip minus the
kernel's own GPU time, in microseconds: the launch latency (the same for
every row) plus the time from completion to the waiter running again.

* **blocking synchronize** -- ``stream.synchronize()`` (``cuStreamSynchronize``).
* **await, host_func** -- ``await aio.wait(stream)`` with
  ``aio.set_completion("host_func")``: a private stream waits for the event
  and runs a host function (``cuLaunchHostFunc``) that wakes the loop.
* **await, poll** -- the same with ``"poll"``: the loop queries the event,
  ``asyncio.sleep(0)`` for ``spin_us`` (200) after the last completion, then
  every ``interval_ms`` (1).

Samples of the three rows are interleaved (one of each in turn, the order
rotated), ``--samples`` per row and kernel length. Also the thread's CPU time
per wait (``time.thread_time``), which shows what polling costs.

Summary keys: ``await_resume_us_median`` and ``await_resume_us_p99`` (the
default mode, ``"host_func"``, at the longest kernel), the same for
``poll`` and for the blocking synchronize, and the CPU us per wait.

Output: the table, ``bench/results/await_latency.json`` and ``.png``. Exit 2
without CUDA.
"""
from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

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
HOST = "await, host_func"
POLL = "await, poll"
ROWS = (SYNC, HOST, POLL)


def p99(v):
    return float(np.percentile(v, 99)) if v else float("nan")


def main(argv=None) -> int:
    ap = new_parser(__doc__)
    ap.add_argument("--samples", type=int, default=300, help="samples per row and kernel length")
    ap.add_argument("--kernel-us", type=float, nargs="+", default=[50.0, 1000.0])
    add_output_args(ap)
    args = ap.parse_args(argv)
    b = setup("await_latency", f"{args.samples} samples per row, kernels of "
                               f"{', '.join(f'{k:g}' for k in args.kernel_us)} us")
    if b is None:
        return 2
    cd = b.cd
    from pycudadrv import aio
    launch_hook()
    spin = cd.compile(SRC).load().function("spin")
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    start, end = cd.Event(), cd.Event()
    prev = aio.get_completion()

    async def one(row, ns):
        t0 = perf_counter_ns()
        c0 = time.thread_time_ns()
        start.record(s)
        spin.launch(1, 32, flag, ns, stream=s)
        end.record(s)
        if row == SYNC:
            s.synchronize()
        else:
            await aio.wait(s)
        t1 = perf_counter_ns()
        c1 = time.thread_time_ns()
        return (t1 - t0) / 1e3 - cd.Event.elapsed_ms(start, end) * 1e3, (c1 - c0) / 1e3

    async def run_all():
        out = {}
        launches = 0
        for kus in args.kernel_us:
            ns = int(kus * 1e3)
            res = {row: [] for row in ROWS}
            cpu = {row: [] for row in ROWS}
            for i in range(args.samples + 5):
                k = i % 3
                for row in ROWS[k:] + ROWS[:k]:
                    if row != SYNC:
                        aio.set_completion(row.split(", ")[1])
                    lat, c = await one(row, ns)
                    launches += 1
                    if i >= 5:           # warm-up samples
                        res[row].append(lat)
                        cpu[row].append(c)
            out[kus] = (res, cpu)
            log(f"  [await] {kus:g} us kernel: " + ", ".join(
                f"{row} {statistics.median(res[row]):.1f} us" for row in ROWS))
        return out, launches

    try:
        results, launches = asyncio.run(run_all())
    finally:
        aio.set_completion(**prev)
    got = int(flag.to_numpy()[0])
    if got != launches:
        print(f"await_latency: the kernel ran {got} times, expected {launches}", file=sys.stderr)
        return 1
    print(f"\n=== await latency: {b.title} ===")
    print("round trip minus the kernel's GPU time (launch latency + completion to resumption), us; CPU us per wait")
    print(f"{'kernel':>9} {'row':<22} {'median':>9} {'p99':>9} {'cpu us':>9}")
    report = {}
    for kus, (res, cpu) in results.items():
        report[f"{kus:g}us"] = {row: {"latency_us": summarize(res[row]), "latency_us_p99": p99(res[row]),
                                      "cpu_us_per_wait": summarize(cpu[row])} for row in ROWS}
        for row in ROWS:
            print(f"{kus:>7g}us {row:<22} {statistics.median(res[row]):>9.1f} {p99(res[row]):>9.1f} "
                  f"{statistics.median(cpu[row]):>9.1f}")
    longest = max(results)
    res, cpu = results[longest]
    default = HOST if prev["mode"] == "host_func" else POLL
    summary = {"await_resume_us_median": statistics.median(res[default]),
               "await_resume_us_p99": p99(res[default]),
               "await_host_func_us_median": statistics.median(res[HOST]), "await_host_func_us_p99": p99(res[HOST]),
               "await_poll_us_median": statistics.median(res[POLL]), "await_poll_us_p99": p99(res[POLL]),
               "sync_resume_us_median": statistics.median(res[SYNC]), "sync_resume_us_p99": p99(res[SYNC]),
               "await_host_func_cpu_us": statistics.median(cpu[HOST]),
               "await_poll_cpu_us": statistics.median(cpu[POLL])}
    print(f"\nsummary ({longest:g} us kernel, default mode {prev['mode']!r}): " +
          ", ".join(f"{k} = {v:.1f}" for k, v in summary.items()))
    data = {"summary": summary, **b.report_header()}
    data.update({"samples": args.samples, "kernel_us": args.kernel_us, "default_mode": prev["mode"],
                 "completion_settings": prev, "results": report})
    write_report(args.results_dir, "await_latency", data,
                 None if args.no_plot else (lambda path: plot(path, results, b.title)))
    return 0


def plot(path, results, title):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (kus, (res, _)) in zip(axes[0], results.items()):
        ax.boxplot([res[row] for row in ROWS], showfliers=False)
        ax.set_xticks(range(1, len(ROWS) + 1), ROWS, fontsize=8)
        ax.set_ylabel("us after the kernel's GPU time")
        ax.set_title(f"{kus:g} us kernel", fontsize=9)
    save_figure(fig, path, title, fontsize=9)


if __name__ == "__main__":
    sys.exit(main())
