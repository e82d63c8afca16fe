"""Instructions per launch of pycudadrv's launch layers under callgrind with the fake driver (no GPU):
the proxy for host cost used by the launch work of issue 22. One row per run:

    tools/cg_launch_layers.sh WORKTREE prepared generic generic64 triton tsprep events

(the .sh runs this script under valgrind for each row, then an empty loop, and prints main-thread
instructions per iteration minus the empty loop's, and the fake driver's own fk_cu* share: what a
C loop making the same driver calls would cost.) Rows: ``prepared`` p.launch() of a 4-parameter
kernel; ``generic`` f.launch(4, 256, y, x, 2.0, 1024, stream=s); ``generic64`` a kernel of 64
parameters (a pointer, 63 ints) called g.launch(1, 32, *args64, stream=s); ``generic_hoisted`` and
``generic64_hoisted`` the same calls through ``launch = fn.launch`` fetched once (as bench/launch_overhead.py
calls them); ``triton`` TritonKernel.launch(1, y, x, 0, 1.0, stream=s) over a
stand-in CompiledKernel (Triton's 3.5 convention, no scratch needed) of an NVRTC CUBIN; ``tsprep``
``with ts.measure("step"): p.launch()`` with a try_take() every 256 passes; ``tspass`` the same passes
without try_take (the bench's timed row); ``events`` two
Event.record calls around p.launch()."""
import ctypes, os, sys
from types import SimpleNamespace
import numpy as np
import pycudadrv as cd
fake = ctypes.CDLL(os.environ["PYCUDADRV_LIBCUDA"])
SRC = r'''
extern "C" __global__ void k(float* y, const float* x, float a, int n) {}
extern "C" __global__ void bench_kernel(float* a, float* b, int n, float s, void* gs, void* ps) {}
extern "C" __global__ void k64(''' + ", ".join(["float* a0"] + [f"int a{i}" for i in range(1, 64)]) + ''') {}
'''
obj = cd.compile(SRC, arch="sm_90")
mod = obj.load()
f = mod.function("k")
g = mod.function("k64")
s = cd.Stream()
x = cd.Buffer.zeros(1024, np.float32, stream=s); y = cd.Buffer.zeros(1024, np.float32, stream=s)
p = f.bind(4, 256, y, x, 2.0, 1024, stream=s)
args64 = [y] + list(range(1, 64))
ck = SimpleNamespace(
    kernel=obj.image, asm={"ptx": obj.ptx},
    src=SimpleNamespace(signature={"a": "*fp32", "b": "*fp32", "n": "i32", "s": "fp32", "BLOCK": "constexpr"},
                        constants={"BLOCK": 32}, attrs={}, fn=None),
    metadata=SimpleNamespace(name="bench_kernel", num_warps=1, shared=0, global_scratch_size=0,
                             global_scratch_align=1, profile_scratch_size=0, profile_scratch_align=1, num_ctas=1))
tk = cd.from_triton(ck)
ts = cd.Timestamps(s)
N = int(os.environ.get("CGN", 20000))
which = sys.argv[1]
def run(n):
    if which == "prepared":
        for _ in range(n): p.launch()
    elif which == "generic":
        for _ in range(n): f.launch(4, 256, y, x, 2.0, 1024, stream=s)
    elif which == "generic_hoisted":      # launch = f.launch; launch(...): the bench's main generic row
        launch = f.launch
        for _ in range(n): launch(4, 256, y, x, 2.0, 1024, stream=s)
    elif which == "generic64_hoisted":    # the bench's parameter-count rows
        launch = g.launch
        for _ in range(n): launch(1, 32, *args64, stream=s)
    elif which == "generic64":
        for _ in range(n): g.launch(1, 32, *args64, stream=s)
    elif which == "triton":
        for _ in range(n): tk.launch(1, y, x, 0, 1.0, stream=s)
    elif which == "tsprep":      # Timestamps pass around a prepared launch
        m = ts.measure
        for i in range(n):
            with m("step"):
                p.launch()
            if not i & 255:
                ts.try_take()
    elif which == "tspass":      # Timestamps passes alone (the pool filled beforehand; no try_take timed)
        m = ts.measure
        for i in range(n):
            with m("step"):
                p.launch()
    elif which == "events":      # Event.record by hand around a prepared launch
        e0, e1 = cd.Event(), cd.Event()
        for _ in range(n):
            e0.record(s); p.launch(); e1.record(s)
    elif which == "empty":
        for _ in range(n): pass
run(N if which == "tspass" else 2000)   # tspass: fills the pool with the 2 N events the timed passes take
s.synchronize()
ts.read()
fake.fakecuda_callgrind_start()
run(N)
fake.fakecuda_callgrind_stop(which.encode())
