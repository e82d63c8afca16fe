#!/usr/bin/env python3
"""Instructions per Queue submission (run under valgrind --tool=callgrind --separate-threads=yes with
PYCUDADRV_LIBCUDA=/work/fakecuda/libcuda.so.1; argument: hand, launch, submit, or one of them + "-busy") under the fake driver (callgrind proxy): the bench/queue_dag.py DAG
(4 chains, each kernel reads its chain's previous step and the next chain's), issued by q.launch, by
q.submit(prepared), and by hand-placed events (the floor). "-busy": every stream is blocked by a host
function for the whole measured pass (the GPU far behind: no work completes, every edge is a wait)."""
import ctypes, os, sys, threading
import numpy as np
import pycudadrv as cd
fake = ctypes.CDLL(os.environ["PYCUDADRV_LIBCUDA"])
SRC = r'''extern "C" __global__ void mix(float* out, const float* a, const float* b, int n) {}'''
mix = cd.compile(SRC, arch="sm_90").load().function("mix")
W, N, STEPS = 4, 1024, 256
bufs = [[cd.Buffer.from_numpy(np.zeros(N, np.float32)) for _ in range(STEPS + 1)] for _ in range(W)]
cd.Device(0).synchronize()
q = cd.Queue(streams=W)
prepared = [[mix.bind(4, 256, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N) for i in range(W)]
            for t in range(1, STEPS + 1)]
hs = [cd.Stream() for _ in range(W)]
he = [[cd.Event(timing=False) for _ in range(STEPS + 1)] for _ in range(W)]

def queued():
    ql = q.launch
    for t in range(1, STEPS + 1):
        for i in range(W):
            ql(mix, 4, 256, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N)

def queued_prepared():
    sub = q.submit
    for row in prepared:
        for p in row:
            sub(p)

def hand():
    launch = mix.launch
    for i in range(W):
        he[i][0].record(hs[i])
    for t in range(1, STEPS + 1):
        for i in range(W):
            s = hs[i]
            s.wait(he[(i + 1) % W][t - 1])
            launch(4, 256, bufs[i][t], bufs[i][t - 1], bufs[(i + 1) % W][t - 1], N, stream=s)
            he[i][t].record(s)

def drain():
    q.synchronize()
    for s in hs:
        s.synchronize()

which = sys.argv[1]
busy = which.endswith("-busy")
f = {"launch": queued, "submit": queued_prepared, "hand": hand}[which.split("-")[0]]
def block():
    g = threading.Event()
    if busy:
        for s in [*q.streams, *hs]:
            s.launch_host_func(g.wait)
    return g
for _ in range(3):        # warm-up in the same regime (the event pool fills to what is in flight)
    g = block()
    f()
    g.set()
    drain()
gate = block()
w0 = q.stats()["waits"]
fake.fakecuda_callgrind_start()
f()
fake.fakecuda_callgrind_stop(which.encode())
gate.set()
w1 = q.stats()["waits"]
drain()
print(which, "submissions", W * STEPS, "queue waits", w1 - w0)
