#!/usr/bin/env python3
"""Cost of a Timestamps pass against a C loop of event-record + launch + event-record.

What is measured
----------------
The launch_overhead kernel (``bench_kernel``, n = 0, grid 1, block 32) on one
owned stream, timed per pass:

* **C floor** -- a C loop of ``cuEventRecord(start[k])``, ``cuLaunchKernel``,
  ``cuEventRecord(end[k])``, cycling over 256 event pairs created by pycudadrv
  (``floor_timed_launch_loop`` in ``bench/c_floor.c``, same process).
* **pycudadrv Timestamps pass** -- ``with ts.measure("step"): p.launch()``
  with ``p`` a prepared launch, plus one non-blocking ``ts.try_take()`` every
  256 passes, outside the timed region (the C floor reads no times either); a
  second row times the ``try_take()`` calls too (one ``cuEventElapsedTime``
  per pass: the price of reading the results) (what a simulation loop would do once a frame: it takes the
  passes asked for at the previous call once the GPU has finished them, so
  their events go back to the pool while the GPU stays busy); events come
  from the Timestamps pool, and after each row the passes are read
  (untimed), so every row starts from the same pool.
* **pycudadrv events by hand** -- ``start.record(s); p.launch(); end.record(s)``.
* **references** -- a C ``cuLaunchKernel`` loop and ``p.launch()`` alone, so
  the cost of the timing itself (row minus its launch-only reference) shows.

Interleaved rounds as in launch_overhead (the floor also between every two rows); ratios to the adjacent C floor runs.
Summary key: ``timestamps_pass_over_c`` (target <= 1.10, issue 12).
Output: the table, ``bench/results/timestamps_cost.json``. Exit 2 without CUDA.
"""
from __future__ import annotations

import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cfloor import kernel_params  # noqa: E402
from _harness import KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, launch_hook, loop_call0, median_or_nan, run_interleaved, setup, summarize  # noqa: E402
from _report import add_output_args, log, new_parser, write_report  # noqa: E402

N_EVENTS = 256
FLOOR = "C: event record + launch + event record"
C_LAUNCH = "C: launch only"
TS = "pycudadrv Timestamps pass (measure + launch)"
TS_READS = "pycudadrv Timestamps pass + try_take() timed"
BY_HAND = "pycudadrv Event.record + launch + Event.record"
PREPARED = "pycudadrv prepared launch only"


def main(argv=None) -> int:
    ap = new_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--unpaired", action="store_true",
                    help="the floor only first and last in each round, not between every two rows")
    add_output_args(ap)
    args = ap.parse_args(argv)
    b = setup("timestamps_cost", f"{args.rounds} rounds x {args.launches:,} passes")
    if b is None:
        return 2
    cd = b.cd
    launch_hook()
    s = cd.Stream()
    a = cd.Buffer.zeros(N_ELEMS, "float32", stream=s)
    bb = cd.Buffer.zeros(N_ELEMS, "float32", stream=s)
    fn = cd.compile(KERNEL_SRC).load().function(KERNEL_NAME)
    p = fn.bind(1, 32, a, bb, 0, 1.0, stream=s)
    starts = [cd.Event(device=b.pdev) for _ in range(N_EVENTS)]
    ends = [cd.Event(device=b.pdev) for _ in range(N_EVENTS)]
    c_params = kernel_params(a.ptr, bb.ptr, 0, 1.0)
    s.synchronize()

    def c_timed(n):
        return b.floor.timed_launch_loop(fn.handle, s.handle, c_params, [e.handle for e in starts],
                                         [e.handle for e in ends], n)

    def c_launch(n):
        return b.floor.launch_loop(fn.handle, s.handle, c_params, n)

    ts = cd.Timestamps(s)

    def ts_run(n):
        """The passes alone, as the C floor does them: the try_take() every
        N_EVENTS passes (reading the times, returning the events to the pool)
        runs outside the timed region, as the C floor reads nothing."""
        measure, launch, take, clock = ts.measure, p.launch, ts.try_take, perf_counter_ns
        untimed = 0
        t0 = clock()
        for _ in repeat(None, n // N_EVENTS):      # the loop shape of by_hand: no per-pass test
            for _ in repeat(None, N_EVENTS):
                with measure("step"):
                    launch()
            t1 = clock()
            take()
            untimed += clock() - t1
        return clock() - t0 - untimed

    def ts_run_reads(n):
        """The passes and the reading of their times (one cuEventElapsedTime per pass)."""
        measure, launch, take = ts.measure, p.launch, ts.try_take
        t0 = perf_counter_ns()
        for _ in repeat(None, n // N_EVENTS):
            for _ in repeat(None, N_EVENTS):
                with measure("step"):
                    launch()
            take()
        return perf_counter_ns() - t0

    def ts_sync():
        s.synchronize()
        ts.read()

    def by_hand(n):
        launch = p.launch
        it = repeat(None, n // N_EVENTS)
        t0 = perf_counter_ns()
        for _ in it:
            for st, en in zip(starts, ends):
                st.record(s)
                launch()
                en.record(s)
        return perf_counter_ns() - t0

    if args.launches % N_EVENTS:
        args.launches -= args.launches % N_EVENTS
    rows = [Row(C_LAUNCH, c_launch, s.synchronize), Row(TS, ts_run, ts_sync), Row(TS_READS, ts_run_reads, ts_sync),
            Row(BY_HAND, by_hand, s.synchronize), Row(PREPARED, loop_call0(p.launch), s.synchronize)]
    res = run_interleaved(Row(FLOOR, c_timed, s.synchronize), rows, rounds=args.rounds, launches=args.launches,
                          label="timestamps", log=log, paired=not args.unpaired)
    us = {name: res.per_launch_us(v) for name, v in res.rows.items()}
    us[FLOOR] = res.per_launch_us(res.floor_ns)
    med = {k: median_or_nan(v) for k, v in us.items()}
    print(f"\n=== timestamps cost: {b.title} ===")
    print(f"{'row':<50} {'us/pass':>9} {'x C timed':>10} {'timing adds us':>15}")
    ref = {FLOOR: C_LAUNCH, TS: PREPARED, TS_READS: PREPARED, BY_HAND: PREPARED}
    for name in (FLOOR, TS, TS_READS, BY_HAND, C_LAUNCH, PREPARED):
        ratio = median_or_nan(res.ratios(name)) if name != FLOOR else 1.0
        adds = f"{med[name] - med[ref[name]]:>15.3f}" if name in ref else ""
        print(f"{name:<50} {med[name]:>9.3f} {ratio:>10.3f} {adds}")
    ts_ratio = median_or_nan(res.ratios(TS))
    print(f"\nTimestamps pass / C event+launch+event: {ts_ratio:.3f}x")
    data = {"summary": {"timestamps_pass_over_c": ts_ratio,
                        "timestamps_pass_with_reads_over_c": median_or_nan(res.ratios(TS_READS)),
                        "events_by_hand_over_c": median_or_nan(res.ratios(BY_HAND))},
            **b.report_header()}
    data.update({"rounds": args.rounds, "passes_per_round": args.launches, "event_pairs": N_EVENTS,
                 "us_per_pass": {k: summarize(v) for k, v in us.items()},
                 "ratio_to_c_timed": {k: summarize(res.ratios(k)) for k in res.rows},
                 "timestamps_pass_ratio": ts_ratio})
    write_report(args.results_dir, "timestamps_cost", data, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
