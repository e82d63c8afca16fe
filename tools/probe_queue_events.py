#!/usr/bin/env python3
"""Where the Queue's cost over hand-placed events comes from on the GPU machine (a probe, not a
benchmark): bench/queue_dag.py's DAG (4 chains of ``mix`` kernels, each reading its chain's previous
step and the next chain's) issued by hand with the driver-call pattern of the Queue varied one part
at a time, against the bench's hand-placed floor (fresh events per step), interleaved and paired:

* by hand on the Queue's own streams (``q.streams``): stream creation alike;
* by hand plus one ``cuEventQuery`` of a stream's last event every 16 kernels (what the Queue's
  completion check asks);
* by hand with its events drawn from one pool as the Queue's is, every 64 kernels each stream's last
  event asked and, when done, that stream's events back in the pool in recording order; the pool
  hands out the newest first (last in, first out, as the Queue's pool does) or the oldest first
  (first in, first out);
* the Queue itself: ``q.launch`` and ``q.submit(prepared)``.

Prints each row's median us per kernel and its ratio to the floor."""
import sys
from collections import deque
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import numpy as np  # noqa: E402

from _harness import Row, median_or_nan, run_interleaved, setup  # noqa: E402
from queue_dag import N, SRC, W  # noqa: E402


def main(argv=None):
    rounds = int(argv[0]) if argv else 9
    launches = 2048
    b = setup("probe_queue_events", "probe")
    if b is None:
        return 2
    cd = b.cd
    steps = launches // W
    mix = cd.compile(SRC).load().function("mix")
    grid, block = (N + 255) // 256, 256
    rng = np.random.default_rng(0)
    bufs = [[cd.Buffer.from_numpy(rng.standard_normal(N).astype(np.float32)) for _ in range(steps + 1)]
            for _ in range(W)]
    cd.Device(0).synchronize()
    q = cd.Queue(streams=W)
    hs = [cd.Stream() for _ in range(W)]
    qs = list(q.streams)
    fresh = [[cd.Event(timing=False) for _ in range(steps + 1)] for _ in range(W)]
    prepared = [[mix.bind(grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N)
                 for i in range(W)] for t in range(1, steps + 1)]
    launch = mix.launch

    def by_hand(streams, query_every=0):
        def run(n):
            t0 = perf_counter_ns()
            for i in range(W):
                fresh[i][0].record(streams[i])
            c = 0
            for t in range(1, steps + 1):
                for i in range(W):
                    s = streams[i]
                    s.wait(fresh[(i + 1) % W][t - 1])
                    launch(grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N, stream=s)
                    fresh[i][t].record(s)
                    c += 1
                    if query_every and c % query_every == 0:
                        fresh[(c // query_every) % W][t].query()
            return perf_counter_ns() - t0
        return run

    def pooled(fifo):
        pool = deque()
        inflight = [[] for _ in range(W)]
        take = pool.popleft if fifo else pool.pop

        def ev():
            return take() if pool else cd.Event(timing=False)

        def run(n):
            t0 = perf_counter_ns()
            last = [None] * W
            for i in range(W):
                e = ev()
                e.record(hs[i])
                inflight[i].append(e)
                last[i] = e
            c = 0
            for t in range(1, steps + 1):
                for i in range(W):
                    s = hs[i]
                    s.wait(last[(i + 1) % W])
                    launch(grid, block, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N, stream=s)
                    e = ev()
                    e.record(s)
                    inflight[i].append(e)
                    c += 1
                    last[i] = e
                    if c % 64 == 0:
                        for k in range(W):
                            if inflight[k] and inflight[k][-1].query():
                                pool.extend(inflight[k][:-1])   # the newest stays: the next kernel waits on it
                                del inflight[k][:-1]
            return perf_counter_ns() - t0

        def sync():
            for s in hs:
                s.synchronize()
            for k in range(W):
                pool.extend(inflight[k])
                inflight[k] = []
        return run, sync

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

    def sync_on(streams):
        def sync():
            for s in streams:
                s.synchronize()
        return sync

    lifo_run, lifo_sync = pooled(False)
    fifo_run, fifo_sync = pooled(True)
    rows = [Row("by hand on the Queue's streams", by_hand(qs), sync_on(qs)),
            Row("by hand + a query every 16", by_hand(hs, 16), sync_on(hs)),
            Row("by hand, pooled events, newest first", lifo_run, lifo_sync),
            Row("by hand, pooled events, oldest first", fifo_run, fifo_sync),
            Row("Queue q.launch", queued, q.synchronize),
            Row("Queue q.submit(prepared)", queued_prepared, q.synchronize)]
    floor = "by hand (the bench's floor)"
    res = run_interleaved(Row(floor, by_hand(hs), sync_on(hs)), rows, rounds=rounds, launches=launches,
                          paired=True, label="probe", log=lambda m: None)
    fl = median_or_nan(res.per_launch_us(res.floor_ns))
    print(f"{floor:44s} {fl:7.3f} us/kernel")
    for r in rows:
        us = median_or_nan(res.per_launch_us(res.rows[r.name]))
        ratio = median_or_nan(res.ratios(r.name))
        print(f"{r.name:44s} {us:7.3f} us/kernel  {ratio:6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
