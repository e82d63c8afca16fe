#!/usr/bin/env python3
"""The self-ordering Queue on a DAG of kernels: its host cost per submission
against hand-placed events and one stream, and the overlap it finds.

What is measured
----------------
**Host cost** -- a DAG of ``W`` = 4 chains of small kernels
(``mix(out, a, b, n)``: ``out = (a + b) / 2 + 1`` over 1,024 floats); step
``t`` of chain ``i`` reads chain ``i``'s step ``t - 1`` and chain
``(i + 1) % W``'s, so every kernel has one edge inside its chain and one
across. Each row issues ``--launches`` kernels of it; the timing covers the
issuing only (the drain after it is recorded apart):

* **hand-placed events** (the floor of the table) -- chain ``i`` on stream
  ``i``, an event recorded after every kernel and one ``Stream.wait(Event)``
  per cross-chain edge, placed by the benchmark (``fn.launch``, generic).
* **Queue** -- ``q.launch(fn, ...)`` on ``Queue(streams=4)``: the queue finds
  the edges from the ``const`` parameters, picks the streams and places the
  waits itself.
* **Queue, prepared** -- ``q.submit(p)`` with the launches bound beforehand.
* **one stream** -- the same launches on one stream (no events at all).

Interleaved rounds (``bench/_harness.run_interleaved``, paired: the hand-placed
row also runs between every two rows), ratios to the hand-placed runs just
before and after each row, medians over rounds (``--unpaired``: first and last only).

**Overlap** -- ``K`` = 8 independent kernels of about 2 ms each (one block
spinning on ``%globaltimer``, then a copy), issued and waited for (host wall
time from the first issue to the end of the synchronize): on one stream,
through ``Queue(streams=4)`` and through ``Queue(streams=8)``. The speedup
is one stream's time over the queue's (same round).

Summary keys: ``queue_host_us_per_submit`` (the Queue row, us per
submission), ``queue_over_hand_events`` (its ratio to hand-placed events),
``queue_overlap_speedup`` (one stream over ``Queue(streams=4)``).

Output: the tables, ``bench/results/queue_dag.json`` and ``.png``. Exit 2
without CUDA.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _harness import Row, launch_hook, median_or_nan, run_interleaved, setup, summarize  # noqa: E402
from _report import add_output_args, log, new_parser, pyplot, save_figure, write_report  # noqa: E402

W = 4
N = 1024
SPIN_MS = 2.0
K_INDEPENDENT = 8
SRC = r"""
__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void mix(float* out, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.5f * (a[i] + b[i]) + 1.0f;
}
extern "C" __global__ void spin_copy(float* out, const float* in, long long ns, int n) {
    unsigned long long t0 = now_ns();
    if (threadIdx.x == 0) { while (now_ns() - t0 < (unsigned long long)ns) { } }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}
"""
HAND = "hand-placed events (4 streams)"
QUEUE = "Queue(streams=4), q.launch"
QUEUE_PREP = "Queue(streams=4), q.submit(prepared)"
ONE = "one stream, no events"
OV_ONE = "one stream"
OV_Q4 = "Queue(streams=4)"
OV_Q8 = "Queue(streams=8)"


def main(argv=None) -> int:
    ap = new_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--launches", type=int, default=2048, help="kernels per DAG row per round (multiple of 4)")
    ap.add_argument("--unpaired", action="store_true",
                    help="the floor only first and last in each round, not between every two rows")
    ap.add_argument("--overlap-rounds", type=int, default=7)
    add_output_args(ap)
    args = ap.parse_args(argv)
    b = setup("queue_dag", f"{args.rounds} rounds x {args.launches:,} kernels; overlap {K_INDEPENDENT} x "
                           f"{SPIN_MS} ms kernels")
    if b is None:
        return 2
    cd = b.cd
    launch_hook()
    args.launches -= args.launches % W
    steps = args.launches // W
    mod = cd.compile(SRC).load()
    mix, spin = mod.function("mix"), mod.function("spin_copy")
    grid, block = (N + 255) // 256, 256
    rng = np.random.default_rng(0)
    # out[i][t]: chain i's value after step t (t = 0 is the input).
    bufs = [[cd.Buffer.from_numpy(rng.standard_normal(N).astype(np.float32)) for _ in range(steps + 1)]
            for _ in range(W)]
    cd.Device(0).synchronize()
    hand_streams = [cd.Stream() for _ in range(W)]
    hand_events = [[cd.Event(timing=False) for _ in range(steps + 1)] for _ in range(W)]
    one = cd.Stream()
    q = cd.Queue(streams=W)
    prepared = [[mix.bind(grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N)
                 for i in range(W)] for t in range(1, steps + 1)]
    launch = mix.launch

    def hand(n):
        t0 = perf_counter_ns()
        for i in range(W):
            hand_events[i][0].record(hand_streams[i])
        for t in range(1, steps + 1):
            for i in range(W):
                s = hand_streams[i]
                s.wait(hand_events[(i + 1) % W][t - 1])
                launch(grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N, stream=s)
                hand_events[i][t].record(s)
        return perf_counter_ns() - t0

    def hand_sync():
        for s in hand_streams:
            s.synchronize()

    def queued(n):
        ql = q.launch
        t0 = perf_counter_ns()
        for t in range(1, steps + 1):
            for i in range(W):
                ql(mix, grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N)
        return perf_counter_ns() - t0

    def queued_prepared(n):
        sub = q.submit
        t0 = perf_counter_ns()
        for row in prepared:
            for p in row:
                sub(p)
        return perf_counter_ns() - t0

    def one_stream(n):
        t0 = perf_counter_ns()
        for t in range(1, steps + 1):
            for i in range(W):
                launch(grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N, stream=one)
        return perf_counter_ns() - t0

    waits_before = q.stats()["waits"]
    queued(args.launches)
    q.synchronize()
    waits_per_dag = q.stats()["waits"] - waits_before
    rows = [Row(QUEUE, queued, q.synchronize), Row(QUEUE_PREP, queued_prepared, q.synchronize),
            Row(ONE, one_stream, one.synchronize)]
    res = run_interleaved(Row(HAND, hand, hand_sync), rows, rounds=args.rounds, launches=args.launches,
                          label="dag", log=log, paired=not args.unpaired)
    us = {name: res.per_launch_us(v) for name, v in res.rows.items()}
    us[HAND] = res.per_launch_us(res.floor_ns)
    ratios = {name: res.ratios(name) for name in res.rows}

    # -- overlap of independent kernels ------------------------------------------------------
    spin_ns = int(SPIN_MS * 1e6)
    ins = [cd.Buffer.from_numpy(rng.standard_normal(256).astype(np.float32)) for _ in range(K_INDEPENDENT)]
    outs = [cd.Buffer.from_numpy(np.full(256, np.nan, np.float32)) for _ in range(K_INDEPENDENT)]
    cd.Device(0).synchronize()
    q8 = cd.Queue(streams=8)

    def ov_one():
        t0 = perf_counter_ns()
        for k in range(K_INDEPENDENT):
            spin.launch(1, 256, outs[k], ins[k], spin_ns, 256, stream=one)
        one.synchronize()
        return perf_counter_ns() - t0

    def ov_queue(qq):
        def run():
            t0 = perf_counter_ns()
            for k in range(K_INDEPENDENT):
                qq.launch(spin, 1, 256, outs[k], ins[k], spin_ns, 256)
            qq.synchronize()
            return perf_counter_ns() - t0
        return run

    ov_rows = [(OV_ONE, ov_one), (OV_Q4, ov_queue(q)), (OV_Q8, ov_queue(q8))]
    for _, f in ov_rows:
        f()   # warm-up
    ov = {name: [] for name, _ in ov_rows}
    for r in range(args.overlap_rounds):
        order = ov_rows[r % 3:] + ov_rows[:r % 3]
        for name, f in order:
            ov[name].append(f() / 1e6)
        log(f"  [overlap] round {r + 1}/{args.overlap_rounds}: " +
            ", ".join(f"{name} {ov[name][-1]:.2f} ms" for name, _ in ov_rows))
    speed4 = [a / c for a, c in zip(ov[OV_ONE], ov[OV_Q4])]
    speed8 = [a / c for a, c in zip(ov[OV_ONE], ov[OV_Q8])]
    for k in range(K_INDEPENDENT):
        np.testing.assert_array_equal(outs[k].to_numpy(), ins[k].to_numpy())

    med = {k: median_or_nan(v) for k, v in us.items()}
    print(f"\n=== queue DAG, host cost: {b.title} ===")
    print(f"{'row':<42} {'us/kernel':>10} {'x hand events':>14}")
    for name in (HAND, QUEUE, QUEUE_PREP, ONE):
        ratio = median_or_nan(ratios[name]) if name != HAND else 1.0
        print(f"{name:<42} {med[name]:>10.3f} {ratio:>14.3f}")
    print(f"event waits per DAG of {args.launches} kernels: queue {waits_per_dag}, hand-placed {args.launches}")
    print(f"\n=== overlap: {K_INDEPENDENT} independent {SPIN_MS} ms kernels ===")
    print(f"{'row':<20} {'ms':>8} {'speedup':>8}")
    print(f"{OV_ONE:<20} {statistics.median(ov[OV_ONE]):>8.2f} {1.0:>8.2f}")
    print(f"{OV_Q4:<20} {statistics.median(ov[OV_Q4]):>8.2f} {statistics.median(speed4):>8.2f}")
    print(f"{OV_Q8:<20} {statistics.median(ov[OV_Q8]):>8.2f} {statistics.median(speed8):>8.2f}")
    summary = {"queue_host_us_per_submit": med[QUEUE],
               "queue_prepared_host_us_per_submit": med[QUEUE_PREP],
               "hand_events_host_us_per_kernel": med[HAND],
               "queue_over_hand_events": median_or_nan(ratios[QUEUE]),
               "queue_overlap_speedup": statistics.median(speed4),
               "queue8_overlap_speedup": statistics.median(speed8)}
    print("\nsummary: " + ", ".join(f"{k} = {v:.3f}" for k, v in summary.items()))
    data = {"summary": summary, **b.report_header()}
    data.update({"dag": {"chains": W, "kernels_per_round": args.launches, "elements": N, "rounds": args.rounds,
                         "queue_waits_per_dag": waits_per_dag, "hand_waits_per_dag": args.launches,
                         "us_per_kernel": {k: summarize(v) for k, v in us.items()},
                         "ratio_to_hand_events": {k: summarize(v) for k, v in ratios.items()},
                         "drain_ms": {k: summarize([x / 1e6 for x in v]) for k, v in res.drain_ns.items()}},
                 "overlap": {"kernels": K_INDEPENDENT, "spin_ms": SPIN_MS, "rounds": args.overlap_rounds,
                             "wall_ms": {k: summarize(v) for k, v in ov.items()},
                             "speedup_queue4": summarize(speed4), "speedup_queue8": summarize(speed8)}})
    write_report(args.results_dir, "queue_dag", data,
                 None if args.no_plot else (lambda path: plot(path, med, ov, b.title)))
    q.close()
    q8.close()
    return 0


def plot(path, med, ov, title):
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    names = [HAND, QUEUE, QUEUE_PREP, ONE]
    a1.barh(range(len(names)), [med[n] for n in names], color=["#888", "#2a7", "#4c9", "#58c"])
    a1.set_yticks(range(len(names)), names, fontsize=8)
    a1.invert_yaxis()
    a1.set_xlabel("host us per kernel (DAG of 4 chains)")
    names = [OV_ONE, OV_Q4, OV_Q8]
    a2.bar(range(len(names)), [statistics.median(ov[n]) for n in names], color=["#58c", "#2a7", "#4c9"])
    a2.set_xticks(range(len(names)), names, fontsize=8)
    a2.set_ylabel(f"ms for {K_INDEPENDENT} independent {SPIN_MS} ms kernels")
    save_figure(fig, path, title, fontsize=9)


if __name__ == "__main__":
    sys.exit(main())
