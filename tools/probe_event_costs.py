#!/usr/bin/env python3
"""Host cost of the driver calls a Queue submission chooses between (H200 probe, not a benchmark):
per call, median of 7 rounds of 20,000 calls, microseconds. cuEventQuery of a completed event (what
the queue asks before ordering on another stream's work), cuStreamWaitEvent on such an event (what
hand-placed events do instead), cuEventRecord, and a generic launch, each alone, then a launch with
each of the two orderings around it as the DAG bench interleaves them."""
import statistics
import sys
import time

import numpy as np

import pycudadrv as cd

N = 20000
SRC = r'''extern "C" __global__ void mix(float* out, const float* a, const float* b, int n) {}'''
fn = cd.compile(SRC).load().function("mix")
s, t = cd.Stream(), cd.Stream()
bufs = [cd.Buffer.zeros(1024, np.float32) for _ in range(3)]
done = cd.Event(timing=False)
done.record(t)
t.synchronize()
pool = [cd.Event(timing=False) for _ in range(64)]
launch = fn.launch


def rows():
    def query(n):
        q = done.query
        for _ in range(n):
            q()

    def wait(n):
        w = s.wait
        for _ in range(n):
            w(done)

    def record(n):
        for k in range(n):
            pool[k & 63].record(s)

    def launch_only(n):
        a, b, c = bufs
        for _ in range(n):
            launch(4, 256, a, b, c, 1024, stream=s)

    def launch_query_record(n):
        a, b, c = bufs
        q = done.query
        for k in range(n):
            q()
            launch(4, 256, a, b, c, 1024, stream=s)
            pool[k & 63].record(s)

    def launch_wait_record(n):
        a, b, c = bufs
        w = s.wait
        for k in range(n):
            w(done)
            launch(4, 256, a, b, c, 1024, stream=s)
            pool[k & 63].record(s)

    def query_inflight(n):
        # a query of the event just recorded behind a launch (work maybe in flight)
        a, b, c = bufs
        for k in range(n):
            launch(4, 256, a, b, c, 1024, stream=s)
            e = pool[k & 63]
            e.record(s)
            e.query()

    return [query, wait, record, launch_only, launch_query_record, launch_wait_record, query_inflight]


res = {f.__name__: [] for f in rows()}
for r in range(7):
    for f in rows():
        s.synchronize()
        t0 = time.perf_counter_ns()
        f(N)
        dt = time.perf_counter_ns() - t0
        res[f.__name__].append(dt / N / 1000)
        s.synchronize()
for k, v in res.items():
    print(f"{k:24s} median {statistics.median(v):7.3f} us  min {min(v):7.3f}  max {max(v):7.3f}")
sys.stdout.flush()
