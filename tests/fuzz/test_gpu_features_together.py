"""The seams: memory from another library's stream, every launch path, a
feature used twice in one process, a captured multi-stream queue, a kernel
with no parameters, refused updates that change nothing, copies and their
host sources, GPU-driven dispatch beyond the grid limits.

Every test here was written from a report of ordinary user code that gave a
wrong number or crashed while the rest of the suite passed. Values are
checked against NumPy float64 on fresh random input, outputs are poisoned
first, and the cases that crashed the interpreter run in a child process."""
import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import aio

pytestmark = pytest.mark.gpu

N = 1 << 16

SRC = r"""
// Busy-waits for `cycles` clock ticks (a slow producer).
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void copy_f(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
extern "C" __global__ void twice(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}
// twice over a 1-D tensor argument (pointer, shape, stride in elements: LaunchBuilder.push_tensor).
extern "C" __global__ void twice_t(float* out, const float* x, long long n, long long stride) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i * stride];
}
extern "C" __global__ void affine(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
extern "C" __global__ void combine(float* w, const float* u, const float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] = u[i] * v[i] + u[i];
}
// A body step of a device loop: v[k] -= step for every k, after a short spin.
extern "C" __global__ void count_down_all(float* v, float step, int n, long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] -= step;
}
// No parameters at all (NVIDIA's binomialOptions_nvrtc kernel has this shape): it reads and
// writes __device__ globals.
__device__ float g_in[256];
__device__ float g_out[256];
extern "C" __global__ void no_params() {
    int i = threadIdx.x;
    g_out[i] = 2.0f * g_in[i] + 1.0f;
}
// Dispatch convention: out (ptr, len), then (indirect, indirect_len); marks every workgroup of
// a 3-D count with its flat index + 1.
extern "C" __global__ void mark_flat(unsigned int* out, unsigned long long out_len,
                                     const unsigned int* indirect, unsigned long long indirect_len) {
    unsigned gx = indirect_len ? indirect[0] : gridDim.x;
    unsigned gy = indirect_len ? indirect[1] : gridDim.y;
    unsigned gz = indirect_len ? indirect[2] : gridDim.z;
    unsigned long long groups = (unsigned long long)gx * gy * gz;
    unsigned long long first = indirect_len ? blockIdx.x
        : blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    unsigned long long stride = indirect_len ? gridDim.x : groups;
    for (unsigned long long wg = first; wg < groups; wg += stride) {
        if (threadIdx.x == 0 && wg < out_len / 4) out[wg] = (unsigned int)(wg + 1);
    }
}
"""


@pytest.fixture(scope="module")
def mod():
    m = cd.compile(SRC).load()
    # Launch every kernel once: the driver loads a kernel lazily at its first launch, which can
    # serialise that launch with the work in flight and hide a missing wait.
    s = cd.Stream()
    z = cd.Buffer.zeros(64, np.float32, stream=s)
    for name, args in (("spin", (0,)), ("copy_f", (z, z, 0)), ("twice", (z, z, 0)), ("affine", (z, z, 1.0, 0.0, 0)),
                       ("combine", (z, z, z, 0)),
                       ("twice_t", (z, z, 0, 1)), ("count_down_all", (z, 0.0, 0, 0)), ("no_params", ()),
                       ("mark_flat", (z.view(np.uint32), 0, None, 0))):
        m.function(name).launch(1, 32, *args, stream=s)
    s.synchronize()
    return m


def grid_of(n):
    return (n + 255) // 256


def cycles(ms):
    return int(ms * cd.Device(0).attribute("clock_rate"))


def nan_buffer(n=N, stream=None):
    b = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=stream)
    (stream or b.stream).synchronize()
    return b


def run_child(script, env=None, timeout=300):
    """Run ``script`` in a fresh interpreter (a crash fails one test, not the run)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + e.get("PYTHONPATH", "")
    e["PYTHONFAULTHANDLER"] = "1"
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                       timeout=timeout, env=e)
    assert r.returncode == 0, f"child exited with {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r.stdout


# --- 1. foreign memory is ordered after its producer's stream, on every launch path --------------

class _CAIv3:
    """Another library's array: CAI v3 naming its producer's stream."""

    def __init__(self, buf, stream):
        self._buf = buf
        self._stream = stream

    @property
    def __cuda_array_interface__(self):
        d = dict(self._buf.__cuda_array_interface__)
        d["stream"] = self._stream.handle
        return d


class _DLPackOnly:
    """Another library's array that speaks DLPack only: its __dlpack__(stream=s) orders its
    producer's pending work before `s`, as the DLPack specification asks of producers."""

    def __init__(self, buf, stream):
        self._buf = buf
        self._stream = stream
        self.requests = []

    def __dlpack__(self, *, stream=None, **kw):
        self.requests.append(stream)
        if stream is not None and stream != -1:
            ev = cd.Event(timing=False).record(self._stream)
            cd.Stream.from_handle(int(stream)).wait(ev)
        return self._buf.__dlpack__(stream=-1)

    def __dlpack_device__(self):
        return self._buf.__dlpack_device__()


class _Producer:
    """Writes `src` into a foreign-looking array on its own stream after a slow kernel; the
    consumer runs inside the `with` block (as a torch/CuPy side stream is used)."""

    def __init__(self, mod, kind, src_h):
        self.mod, self.kind, self.src_h = mod, kind, src_h

    def __enter__(self):
        n = self.src_h.size
        spin, copy_f = self.mod.function("spin"), self.mod.function("copy_f")
        if self.kind in ("cai3", "dlpack"):
            self.stream = cd.Stream()
            src = cd.Buffer.from_numpy(self.src_h, stream=self.stream)
            x = nan_buffer(n, self.stream)
            self.stream.synchronize()
            spin.launch(1, 1, cycles(40), stream=self.stream)
            copy_f.launch(grid_of(n), 256, x, src, n, stream=self.stream)
            self.keep = (src, x)
            return _CAIv3(x, self.stream) if self.kind == "cai3" else _DLPackOnly(x, self.stream)
        if self.kind == "torch":
            torch = pytest.importorskip("torch")
            src = torch.from_numpy(self.src_h).cuda()
            x = torch.full((n,), float("nan"), device="cuda")
            torch.cuda.synchronize()
            self.ts = torch.cuda.Stream()
            self.ctx = torch.cuda.stream(self.ts)
            self.ctx.__enter__()
            spin.launch(1, 1, cycles(40), stream=cd.Stream.from_handle(self.ts.cuda_stream))
            x.copy_(src)
            self.keep = (src,)
            return x
        if self.kind == "cupy":
            cp = pytest.importorskip("cupy")
            src = cp.asarray(self.src_h)
            x = cp.full(n, cp.nan, dtype=cp.float32)
            cp.cuda.runtime.deviceSynchronize()
            self.cs = cp.cuda.Stream(non_blocking=True)
            self.cs.__enter__()
            spin.launch(1, 1, cycles(40), stream=cd.Stream.from_handle(self.cs.ptr))
            x[...] = src
            self.keep = (src,)
            return x
        raise AssertionError(self.kind)

    def __exit__(self, *exc):
        if self.kind == "torch":
            self.ctx.__exit__(*exc)
            self.ts.synchronize()
        elif self.kind == "cupy":
            self.cs.__exit__(*exc)
            self.cs.synchronize()
        else:
            self.stream.synchronize()
        return False


def _consume(mod, path, x, out, consumer):
    """Run twice(out, x) on `consumer` through `path`; returns what keeps the work alive."""
    twice = mod.function("twice")
    g = grid_of(N)
    if path == "generic":
        twice.launch(g, 256, out, x, N, stream=consumer)
    elif path == "asbuffer":
        twice.launch(g, 256, out, cd.asbuffer(x), N, stream=consumer)
    elif path == "bind":
        p = twice.bind(g, 256, out, x, N, stream=consumer)
        p.launch()
        return p
    elif path == "bind_asbuffer":
        p = twice.bind(g, 256, stream=consumer)
        p(out, cd.asbuffer(x), N)
        return p
    elif path == "launch_on":
        p = twice.bind(g, 256, out, x, N)
        p.launch_on(consumer)
        return p
    elif path == "builder":
        twice.builder(g, 256, stream=consumer).push_arg(out).push_arg(x).push_arg(N).launch()
    elif path == "builder_tensor":
        twice_t = mod.function("twice_t")
        twice_t.builder(g, 256, stream=consumer).push_arg(out).push_tensor(x).launch()
    elif path == "builder_bind":
        p = twice.builder(g, 256, stream=consumer).push_arg(out).push_arg(x).push_arg(N).bind()
        p.launch()
        return p
    elif path == "builder_await":
        async def go():
            await mod.function("twice_t").builder(g, 256, stream=consumer).push_arg(out).push_tensor(x)
        asyncio.run(go())
    elif path == "queue":
        q = cd.Queue(streams=2)
        q.launch(twice, g, 256, out, x, N)
        q.synchronize()
        return q
    elif path == "aio":
        async def go():
            await aio.launch(twice, g, 256, out, x, N, stream=consumer)
        asyncio.run(go())
    elif path == "sequence":
        seq = cd.LaunchSequence([twice.bind(g, 256, out, x, N, stream=consumer)])
        seq()
        return seq
    elif path == "capture":
        with consumer.capture() as graph:
            twice.launch(g, 256, out, x, N, stream=consumer)
        graph.launch(consumer)
        return graph
    else:
        raise AssertionError(path)


PATHS = ["generic", "asbuffer", "bind", "bind_asbuffer", "launch_on", "queue", "aio", "sequence", "capture", "builder",
         "builder_tensor", "builder_bind", "builder_await"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["cai3", "dlpack", "torch", "cupy"])
def test_foreign_memory_is_read_after_its_producer_wrote_it(mod, rng, kind, path):
    src_h = rng.standard_normal(N).astype(np.float32)
    consumer = cd.Stream()
    out = nan_buffer(N, consumer)
    with _Producer(mod, kind, src_h) as x:
        keep = _consume(mod, path, x, out, consumer)
        got = out.to_numpy(stream=consumer)
    np.testing.assert_allclose(got, 2.0 * src_h.astype(np.float64), rtol=1e-6, atol=0,
                               err_msg=f"{kind} array through {path} read before its producer wrote it")
    del keep


def test_dlpack_only_memory_is_requested_for_the_stream_the_kernel_runs_on(mod, rng):
    src_h = rng.standard_normal(N).astype(np.float32)
    consumer = cd.Stream()
    out = nan_buffer(N, consumer)
    with _Producer(mod, "dlpack", src_h) as x:
        mod.function("twice").launch(grid_of(N), 256, out, x, N, stream=consumer)
        got = out.to_numpy(stream=consumer)
    assert x.requests == [consumer.handle]
    np.testing.assert_allclose(got, 2.0 * src_h.astype(np.float64), rtol=1e-6)


def _allocation_of(buf):
    """The Allocation a Buffer views (its owner object: weakly referable)."""
    return next(r for r in gc.get_referents(buf) if type(r).__name__ == "Allocation")


class _ExportsACopy:
    """A DLPack producer whose __dlpack__ exports a fresh copy owned by the capsule alone:
    its deleter frees the memory (DLPack allows it), so the consumer must keep the capsule
    until its kernel has run. `alive()` says which exports are still held."""

    def __init__(self, host):
        self._copy = cd.Buffer.from_numpy(host)      # made ahead: a capture may ask for it
        self._copy.stream.synchronize()
        self.refs = []

    def __dlpack__(self, *, stream=None, **kw):
        tmp, self._copy = self._copy, None
        assert tmp is not None, "asked twice for one export"
        self.refs.append(weakref.ref(_allocation_of(tmp)))
        return tmp.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return (2, 0)

    def alive(self):
        gc.collect()
        return [r() is not None for r in self.refs]


@pytest.mark.parametrize("path", ["generic", "bind", "set_arg", "capture"])
def test_a_dlpack_export_lives_until_the_kernel_that_reads_it_has_run(mod, rng, path):
    from pycudadrv import _host
    src_h = rng.standard_normal(N).astype(np.float32)
    x = _ExportsACopy(src_h)
    consumer = cd.Stream()
    out = nan_buffer(N, consumer)
    twice, spin = mod.function("twice"), mod.function("spin")
    spin.launch(1, 1, cycles(40), stream=consumer)      # the kernel reads the export 40 ms from now
    if path == "generic":
        twice.launch(grid_of(N), 256, out, x, N, stream=consumer)
    elif path == "bind":
        keep = twice.bind(grid_of(N), 256, out, x, N, stream=consumer)
        keep()
    elif path == "set_arg":
        keep = twice.bind(grid_of(N), 256, out, out, N, stream=consumer)
        keep.set_arg(1, x)
        keep()
    else:
        with consumer.capture() as keep:
            twice.launch(grid_of(N), 256, out, x, N, stream=consumer)
        keep.launch()
    assert len(x.refs) == 1, f"{path}: the producer was asked {len(x.refs)} times for one argument"
    assert x.alive() == [True], f"{path}: the export was let go of before the kernel that reads it ran"
    got = out.to_numpy(stream=consumer)
    np.testing.assert_allclose(got, 2.0 * src_h.astype(np.float64), rtol=1e-6)
    if path == "generic":
        for _ in range(64):               # kept until its launch is seen complete, then let go of
            if _host._host_keep_count() == 0:
                break
        assert x.alive() == [False], "the export outlived the launch that used it"
    else:
        del keep
        assert x.alive() == [False], f"{path}: the export outlived the object that launched it"


def test_foreign_memory_ordering_applies_twice_in_one_process(mod, rng):
    """The same foreign object, written again by its producer, is ordered again at the next launch."""
    consumer = cd.Stream()
    out = nan_buffer(N, consumer)
    p = cd.Stream()
    x = nan_buffer(N, p)
    arr = _CAIv3(x, p)
    spin, copy_f, twice = (mod.function(k) for k in ("spin", "copy_f", "twice"))
    for _ in range(2):
        src_h = rng.standard_normal(N).astype(np.float32)
        src = cd.Buffer.from_numpy(src_h, stream=p)
        spin.launch(1, 1, cycles(30), stream=p)
        copy_f.launch(grid_of(N), 256, x, src, N, stream=p)
        twice.launch(grid_of(N), 256, out, arr, N, stream=consumer)
        np.testing.assert_allclose(out.to_numpy(stream=consumer), 2.0 * src_h.astype(np.float64), rtol=1e-6)


SYNC_OFF_SCRIPT = r"""
import numpy as np
import pycudadrv as cd
src = '''
extern "C" __global__ void gate(volatile int* flag, long long max_cycles) {
    long long t0 = clock64();
    while (flag[0] == 0 && clock64() - t0 < max_cycles) { }
}
extern "C" __global__ void twice(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}'''
mod = cd.compile(src).load()
p, c, g = cd.Stream(), cd.Stream(), cd.Stream()
flag = cd.Buffer.zeros(1, np.int32, stream=p)
x = cd.Buffer.from_numpy(np.ones(256, np.float32), stream=p)
out = cd.Buffer.zeros(256, np.float32, stream=c)
mod.function("gate").launch(1, 1, flag, 0, stream=p)     # load both kernels now: a kernel's first launch
mod.function("twice").launch(1, 256, out, x, 0, stream=c)  # may wait for the device (lazy loading)
p.synchronize(); c.synchronize()
class Arr:
    __cuda_array_interface__ = dict(x.__cuda_array_interface__, stream=p.handle)
mod.function("gate").launch(1, 1, flag, int(5 * 1000 * cd.Device(0).attribute("clock_rate")), stream=p)
mod.function("twice").launch(1, 256, out, Arr(), 256, stream=c)
c.synchronize()                   # returns while the producer is still held at the gate
held = not p.query()
flag.write(np.array([1], np.int32), stream=g)
p.synchronize()
print("consumer-waited" if not held else "consumer-did-not-wait")
"""


def test_the_interface_sync_switch_turns_consumer_ordering_off():
    out = run_child(SYNC_OFF_SCRIPT, env={"PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC": "0", "CUDA_MODULE_LOADING": "EAGER"})
    assert out.strip().endswith("consumer-did-not-wait")
    out = run_child(SYNC_OFF_SCRIPT, env={"PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC": "1", "CUDA_MODULE_LOADING": "EAGER"})
    assert out.strip().endswith("consumer-waited")


# --- 2. two device loops in one process ------------------------------------------------------

TWO_LOOPS_SCRIPT = r"""
import numpy as np
import pycudadrv as cd
mod = cd.compile('''
extern "C" __global__ void dec(DT* v, DT step, int n) {
    int i = threadIdx.x;
    if (i < n) v[i] -= step;
}''', options=["-DDT=" + CTYPE]).load()
s = cd.Stream()
rng = np.random.default_rng(SEED)
for op, thr in (OPS):
    start = rng.integers(20, 40, size=8).astype(DTYPE)
    buf = cd.Buffer.from_numpy(start, stream=s)
    with s.loop(until=cd.when(buf, op, thr, index=3), max_iterations=60) as lp:
        mod.function("dec").launch(1, 32, buf, DTYPE(1), 8, stream=s)
    lp.launch()
    got = buf.to_numpy(stream=s)
    # the loop stops after the first iteration at whose end buf[3] OP thr holds
    k = 0
    v = start.astype(np.float64)
    while True:
        k += 1
        v = v - 1
        if eval(f"v[3] {op} thr") or k >= 60:
            break
    assert np.array_equal(got, v.astype(DTYPE)), (op, got, v)
    assert lp.iterations == k, (op, lp.iterations, k)
print("two loops OK")
"""


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_two_device_loops_one_after_the_other_in_one_process(dtype, rng):
    ctype = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}[dtype]
    # the ops of the report (>= then >), then more: each loop is built right after the one before
    ops = ("[('>=', 30), ('>', 12), ('<', 10), ('<=', 25)]" if dtype.startswith("int") else
           "[('>=', 30.0), ('>', 12.5), ('<', 10.0), ('<=', 25.5)]")
    script = (TWO_LOOPS_SCRIPT.replace("CTYPE", repr(ctype)).replace("DTYPE", f"np.{dtype}")
              .replace("SEED", str(int(rng.integers(1 << 30)))).replace("(OPS)", ops))
    assert run_child(script).strip().endswith("two loops OK")


def test_two_loops_and_a_captured_graph_in_one_process(mod, rng):
    """Loops and plain graphs built and replayed one after the other, each twice."""
    s = cd.Stream()
    for _ in range(2):
        a = rng.standard_normal(N).astype(np.float32)
        x = cd.Buffer.from_numpy(a, stream=s)
        y = nan_buffer(N, s)
        with s.capture() as g:
            mod.function("affine").launch(grid_of(N), 256, y, x, 2.0, 1.0, N, stream=s)
        v = cd.Buffer.from_numpy(np.array([10.0], np.float32), stream=s)
        with s.loop(until=cd.when(v, "<", 4.5), max_iterations=50) as lp:
            mod.function("count_down_all").launch(1, 32, v, 1.0, 1, 0, stream=s)
        g.launch()
        lp.launch()
        np.testing.assert_allclose(y.to_numpy(stream=s), 2.0 * a.astype(np.float64) + 1.0, rtol=1e-6)
        assert lp.iterations == 6 and float(v.to_numpy(stream=s)[0]) == 4.0


# --- 3. iterations of a loop launched on another stream -------------------------------------------

def test_loop_iterations_after_a_launch_on_another_stream_reflect_that_launch(mod):
    s, other = cd.Stream(), cd.Stream()
    v = cd.Buffer.from_numpy(np.array([5.0], np.float32), stream=s)
    with s.loop(until=cd.when(v, "<=", 0.0), max_iterations=100) as lp:
        mod.function("count_down_all").launch(1, 32, v, 1.0, 1, cycles(2), stream=s)
    lp.launch()
    assert lp.iterations == 5
    v.write(np.array([12.0], np.float32), stream=s)
    s.synchronize()
    lp.launch(other)             # 12 slow iterations on another stream
    assert lp.iterations == 12 and lp.converged
    assert float(v.to_numpy(stream=other)[0]) == 0.0


# --- 4. a Queue with several streams, captured -------------------------------------------------------

@pytest.mark.parametrize("streams", [1, 2, 4])
def test_a_captured_multi_stream_queue_dag_replays_right(mod, rng, streams):
    x_h = rng.standard_normal(N).astype(np.float32)
    q = cd.Queue(streams=streams)
    x = q.from_numpy(x_h)
    y, u, v, w, z = (q.from_numpy(np.full(N, np.nan, np.float32)) for _ in range(5))
    q.synchronize()
    aff, comb, g = mod.function("affine"), mod.function("combine"), grid_of(N)
    graph = None
    for _ in range(2):       # the second capture drops the first graph while it records (the report's case)
        with q.capture() as graph:
            q.launch(aff, g, 256, y, x, 2.0, 1.0, N)        # y = 2x + 1
            q.launch(aff, g, 256, u, y, -0.5, 3.0, N)       # u, v read y: side by side
            q.launch(aff, g, 256, v, y, 1.5, -2.0, N)
            q.launch(aff, g, 256, z, x, 0.25, 0.0, N)       # independent of y
            q.launch(comb, g, 256, w, u, v, N)              # w waits for u and v
            q.launch(aff, g, 256, y, w, 1.0, 1.0, N)        # overwrites y: after u and v read it
            q.launch(comb, g, 256, u, y, z, N)              # u = y*z + y
    x64 = x_h.astype(np.float64)
    y64 = 2 * x64 + 1
    u64, v64, z64 = -0.5 * y64 + 3, 1.5 * y64 - 2, 0.25 * x64
    w64 = u64 * v64 + u64
    y64 = w64 + 1
    u64 = y64 * z64 + y64
    for _ in range(2):
        for b in (y, u, v, w, z):
            b.fill(np.float32(np.nan))
        q.synchronize()
        q.launch_graph(graph)
        got = {k: q.read(b) for k, b in (("u", u), ("w", w), ("y", y), ("z", z))}
        np.testing.assert_allclose(got["w"], w64, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got["y"], y64, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got["z"], z64, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["u"], u64, rtol=1e-4, atol=1e-4)
    graph.close()
    q.close()


@pytest.mark.parametrize("what", ["graph", "loop", "event", "stream", "module", "buffer"])
def test_an_object_dropped_while_another_graph_is_captured_leaves_that_capture_intact(mod, rng, what):
    """Destroying a handle inside a capture would invalidate it (the driver refuses the call): the
    destruction waits for the capture's end."""
    s = cd.Stream()
    a = rng.standard_normal(N).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    y = nan_buffer(N, s)
    victim = None
    if what == "graph":
        with s.capture() as victim:
            mod.function("affine").launch(grid_of(N), 256, y, x, 1.0, 0.0, N, stream=s)
    elif what == "loop":
        with s.loop(times=2) as victim:
            mod.function("affine").launch(grid_of(N), 256, y, x, 1.0, 0.0, N, stream=s)
    elif what == "event":
        victim = cd.Event().record(s)
    elif what == "stream":
        victim = cd.Stream()
    elif what == "module":
        victim = cd.compile('extern "C" __global__ void k_%d(int* x) { x[0] = %d; }' % ((n := int(rng.integers(1 << 30))), n)).load()
    else:
        victim = cd.Buffer.from_numpy(a, stream=cd.Stream())
    with s.capture() as g:
        mod.function("affine").launch(grid_of(N), 256, y, x, 3.0, -1.0, N, stream=s)
        if what == "module":
            victim.unload()
        elif what in ("event", "stream", "buffer"):
            victim.close()
        del victim
        import gc
        gc.collect()
        mod.function("affine").launch(grid_of(N), 256, y, y, 0.5, 2.0, N, stream=s)
    g.launch()
    np.testing.assert_allclose(y.to_numpy(stream=s), 0.5 * (3.0 * a.astype(np.float64) - 1.0) + 2.0, rtol=1e-6,
                               atol=1e-6)        # float32: 3a - 1 cancels near a = 1/3


def test_a_graph_in_a_garbage_cycle_collected_inside_another_capture_leaves_it_intact(mod, rng):
    """The collector clears the lists of objects in a cycle (a graph's held buffers) before any
    __dealloc__ runs: the memory those held is freed when the capture in progress ends."""
    import gc
    a = rng.standard_normal(N).astype(np.float32)

    def garbage():
        s0 = cd.Stream()
        x0, y0 = cd.Buffer.from_numpy(a, stream=s0), nan_buffer(N, s0)
        with s0.capture() as g0:
            mod.function("affine").launch(grid_of(N), 256, y0, x0, 1.0, 0.0, N, stream=s0)
        g0.launch()
        box = [g0]
        box.append(box)                   # a cycle: only the collector frees it

    s = cd.Stream()
    x, y = cd.Buffer.from_numpy(a, stream=s), nan_buffer(N, s)
    was = gc.isenabled()
    gc.disable()
    try:
        garbage()
        with s.capture() as g:
            mod.function("affine").launch(grid_of(N), 256, y, x, 3.0, -1.0, N, stream=s)
            gc.collect()
            mod.function("affine").launch(grid_of(N), 256, y, y, 0.5, 2.0, N, stream=s)
    finally:
        if was:
            gc.enable()
    g.launch()
    np.testing.assert_allclose(y.to_numpy(stream=s), 0.5 * (3.0 * a.astype(np.float64) - 1.0) + 2.0, rtol=1e-6,
                               atol=1e-6)


def test_a_device_loop_body_reads_foreign_memory_after_its_producer(mod, rng):
    src_h = rng.standard_normal(N).astype(np.float32)
    s = cd.Stream()
    out = nan_buffer(N, s)
    with _Producer(mod, "cai3", src_h) as x:
        with s.loop(times=3) as lp:
            mod.function("twice").launch(grid_of(N), 256, out, x, N, stream=s)
        lp.launch()
        got = out.to_numpy(stream=s)
    np.testing.assert_allclose(got, 2.0 * src_h.astype(np.float64), rtol=1e-6)


FOREIGN_STREAM_GONE_SCRIPT = r"""
import gc
import numpy as np
import pycudadrv as cd
mod = cd.compile('extern "C" __global__ void twice(float* o, const float* x, int n) '
                 '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = 2.0f * x[i]; }').load()
rng = np.random.default_rng(SEED)
for rep in range(3):
    a = rng.standard_normal(4096).astype(np.float32)
    lib = cd.Stream()                        # stands for another library's stream ...
    theirs = cd.Stream.from_handle(lib.handle)   # ... that pycudadrv knows only by its handle
    x = cd.Buffer.from_numpy(a)
    out = cd.Buffer.empty(4096, np.float32, stream=theirs)     # allocated on it, too
    mod.function("twice").launch(16, 256, out, x, 4096, stream=theirs)
    x.copy_to(cd.Buffer.empty(4096, np.float32), stream=theirs)
    got = out.to_numpy(stream=theirs)
    assert np.array_equal(got, 2 * a), rep
    lib.close()                              # the library destroys its stream ...
    gc.collect()
    x.close(); out.close()                   # ... and pycudadrv's frees, ordered after its work, follow
    del theirs
    gc.collect()
cd._stream.synchronize_context()
print("foreign stream gone: OK")
"""


def test_frees_after_work_on_another_librarys_stream_survive_that_stream_being_destroyed(rng):
    script = FOREIGN_STREAM_GONE_SCRIPT.replace("SEED", str(int(rng.integers(1 << 30))))
    assert run_child(script).strip().endswith("foreign stream gone: OK")


# --- 5. a kernel with no parameters, on every path -------------------------------------------

@pytest.mark.parametrize("path", ["launch", "bind", "call", "graph", "sequence", "queue", "aio"])
def test_a_kernel_with_no_parameters_launches_on_every_path(mod, rng, path):
    fn = mod.function("no_params")
    assert fn.num_params == 0
    a = rng.standard_normal(256).astype(np.float32)
    g_in, g_out = mod.get_global("g_in", np.float32), mod.get_global("g_out", np.float32)
    s = cd.Stream()
    g_in.write(a, stream=s)
    g_out.fill(np.float32(np.nan), stream=s)
    s.synchronize()
    if path == "launch":
        fn.launch(1, 256, stream=s)
    else:
        p = fn.bind(1, 256, stream=s)
        if path == "bind":
            p.launch()
        elif path == "call":
            p()
        elif path == "graph":
            with s.capture() as graph:
                p.launch()
            graph.launch()
            graph.launch()
        elif path == "sequence":
            cd.LaunchSequence([p, p])()
        elif path == "queue":
            q = cd.Queue(streams=2)
            q.submit(p, writes=g_out, reads=g_in)
            q.synchronize()
        elif path == "aio":
            async def go():
                await aio.submit(p)
            asyncio.run(go())
    s.synchronize()
    cd._stream.synchronize_context()
    np.testing.assert_allclose(g_out.to_numpy(stream=s), 2.0 * a.astype(np.float64) + 1.0, rtol=1e-6)


# --- 7. copies: every stream that used either side, and pinned host sources kept alive --------------

def _pinned_source_reused(kind, n):
    """A pinned host array from an allocator that hands freed memory straight to its next
    allocation of the same size (torch's and CuPy's pinned caches do)."""
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return lambda: torch.empty(n, dtype=torch.float32, pin_memory=True).numpy()
    cp = pytest.importorskip("cupy")

    def make():
        mem = cp.cuda.alloc_pinned_memory(n * 4)
        return np.frombuffer(mem, np.float32, n)
    return make


@pytest.mark.parametrize("via", ["write", "queue"])
@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_a_pinned_host_source_is_kept_alive_until_its_copy_ran(mod, rng, kind, via):
    n = 1 << 20
    make = _pinned_source_reused(kind, n)
    a = rng.standard_normal(n).astype(np.float32)
    s = cd.Stream()
    dst = nan_buffer(n, s)
    host = make()
    host[:] = a
    q = cd.Queue(streams=1) if via == "queue" else None
    if q is not None:
        s = q.streams[0]
    mod.function("spin").launch(1, 1, cycles(60), stream=s)     # the copy waits behind a slow kernel
    if q is None:
        dst.write(host, stream=s)
    else:
        q.copy(host, dst)
    del host
    gc.collect()
    again = make()                # the allocator's cache gives the same pinned block back, if it was freed
    again[:] = -7.0
    s.synchronize()
    np.testing.assert_array_equal(dst.to_numpy(stream=s), a)
    del again


def test_copy_to_another_device_waits_for_every_stream_that_used_either_buffer(mod, rng):
    if cd.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    d0, d1 = cd.Device(0), cd.Device(1)
    n = N
    a = rng.standard_normal(n).astype(np.float32)
    w0 = cd.Stream(d0)
    src = nan_buffer(n)
    srcb = cd.Buffer.from_numpy(a, stream=w0)
    mod.function("spin").launch(1, 1, cycles(40), stream=w0)
    mod.function("copy_f").launch(grid_of(n), 256, src, srcb, n, stream=w0)   # a writer on another stream
    dst = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), device=d1)
    src.copy_to(dst)
    np.testing.assert_array_equal(dst.to_numpy(), a)


# --- 8. smaller ones from NVIDIA's samples -----------------------------------------------------------

def test_a_launch_bounds_kernel_keeps_its_declared_parameter_types():
    src = r'''extern "C" __launch_bounds__(128) __global__ void bs(float* call, const float* s, float r, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) call[i] = s[i] * r;
    }'''
    fn = cd.compile(src).load().function("bs")
    assert fn.layout_source == "source+ptx"
    assert [p.const for p in fn.param_layout][:2] == [False, True]


def test_fill_sets_a_float64_nan_and_other_8_byte_patterns(rng):
    s = cd.Stream()
    b = cd.Buffer.from_numpy(rng.standard_normal(1001), stream=s)
    b.fill(np.nan, stream=s)
    assert np.isnan(b.to_numpy(stream=s)).all()
    b.fill(np.float64(-1.25), stream=s)
    assert (b.to_numpy(stream=s) == -1.25).all()
    c = cd.Buffer.from_numpy(rng.integers(0, 100, 77).astype(np.int64), stream=s)
    c.fill(-(1 << 40) - 3, stream=s)
    assert (c.to_numpy(stream=s) == -(1 << 40) - 3).all()
    v = b[10:20]
    v.fill(3.5, stream=s)
    got = b.to_numpy(stream=s)
    assert (got[10:20] == 3.5).all() and (got[:10] == -1.25).all() and (got[20:] == -1.25).all()


def test_set_kernel_arg_changes_one_argument_of_a_captured_launch(mod, rng):
    s = cd.Stream()
    a = rng.standard_normal(N).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    y = nan_buffer(N, s)
    with s.capture() as g:
        mod.function("affine").launch(grid_of(N), 256, y, x, 2.0, 1.0, N, stream=s)
    g.set_kernel_arg(0, 2, -3.0)
    g.launch()
    np.testing.assert_allclose(y.to_numpy(stream=s), -3.0 * a.astype(np.float64) + 1.0, rtol=1e-6)
    with pytest.raises(cd.ArgumentIndexError):
        g.set_kernel_arg(0, 5, 1.0)
    with pytest.raises(cd.ArgumentTypeError):
        g.set_kernel_arg(0, 2, "x")
    g.launch()                                   # a refused update changed nothing
    np.testing.assert_allclose(y.to_numpy(stream=s), -3.0 * a.astype(np.float64) + 1.0, rtol=1e-6)


def test_buffer_offsets_are_bytes_and_a_float_offset_is_refused(rng):
    s = cd.Stream()
    a = rng.standard_normal(16).astype(np.float32)
    b = cd.Buffer.from_numpy(a, stream=s)
    b.write(np.float32([9.0]), offset=8, stream=s)      # byte 8: element 2
    got = b.to_numpy(stream=s)
    assert got[2] == 9.0 and (np.delete(got, 2) == np.delete(a, 2)).all()
    for bad in (8.0, 1.5):
        with pytest.raises(cd.ArgumentTypeError, match="bytes"):
            b.write(np.float32([1.0]), offset=bad, stream=s)
        with pytest.raises(cd.ArgumentTypeError, match="bytes"):
            b.read(offset=bad, stream=s)


# --- 9. GPU-driven indirect dispatch beyond the grid limits --------------------------------------------

@pytest.mark.parametrize("counts", [(70000, 1, 1), (1, 70000, 1), (3, 2, 70001), (0, 5, 1)])
def test_gpu_driven_indirect_dispatch_never_silently_drops_work(mod, counts):
    s = cd.Stream()
    groups = counts[0] * counts[1] * counts[2]
    out = cd.Buffer.zeros(max(groups, 1) + 64, np.uint32, stream=s)
    ind = cd.Buffer.from_numpy(np.array(counts, np.uint32), stream=s)
    d = cd.dispatch.Pass(cd.Encoder(stream=s), "p").dispatch(mod.function("mark_flat"), block=(32, 1, 1))
    d.set_arg((0, 0), out)
    with s.capture() as g:
        d.dispatch(indirect=ind)
    for _ in range(2):
        out.fill(np.uint32(0), stream=s)
        g.launch()
        got = out.to_numpy(stream=s)
        np.testing.assert_array_equal(got[:groups], np.arange(1, groups + 1, dtype=np.uint32))
        assert (got[groups:] == 0).all()


# --- 10. what another library's array says about itself is believed only where it holds -------------

class _CAIDict:
    """An array described by a hand-written __cuda_array_interface__ dict."""

    def __init__(self, **cai):
        self.cai = dict(version=3, strides=None, **cai)

    @property
    def __cuda_array_interface__(self):
        return self.cai


def test_a_read_only_foreign_array_is_never_written_by_pycudadrv(rng):
    a = rng.standard_normal(64).astype(np.float32)
    src = cd.Buffer.from_numpy(a)
    src.stream.synchronize()
    x = cd.asbuffer(_CAIDict(shape=(64,), typestr="<f4", data=(src.ptr, True), stream=None))
    assert x.readonly and not src.readonly
    other = cd.Buffer.from_numpy(np.zeros(64, np.float32))
    for attempt in (lambda: x.fill(np.float32(7)), lambda: x.write(np.ones(64, np.float32)),
                    lambda: other.copy_to(x), lambda: x.copy_from(other)):
        with pytest.raises(cd.ArgumentValueError, match="read-only"):
            attempt()
    assert np.array_equal(src.to_numpy(), a)
    assert x.__cuda_array_interface__["data"] == (src.ptr, True)   # and it says so to the next consumer
    x.copy_to(other)                                                # reading it is fine
    assert np.array_equal(other.to_numpy(), a)


def test_a_cai_descr_of_another_element_size_than_its_typestr_is_refused():
    real = cd.Buffer.zeros(64, np.float32)
    lying = _CAIDict(shape=(64,), typestr="<f4", data=(real.ptr, False), stream=None,
                     descr=[("a", "<f8"), ("b", "<f8")])
    with pytest.raises(cd.ArgumentValueError, match="16 bytes an element"):
        cd.asbuffer(lying)
    fine = cd.asbuffer(_CAIDict(shape=(32,), typestr="|V8", data=(real.ptr, False), stream=None,
                                descr=[("a", "<f4"), ("b", "<f4")]))
    assert fine.nbytes == 256 and fine.dtype.names == ("a", "b")


def test_an_array_whose_producer_stream_is_capturing_is_refused_outside_that_capture(mod):
    b = cd.Buffer.zeros(N, np.float32)
    s, p = cd.Stream(), cd.Stream()
    twice = mod.function("twice")
    with pytest.raises(cd.CaptureError, match="being captured"):
        with p.capture():
            twice.launch(grid_of(N), 256, b, b, N, stream=p)
            twice.launch(grid_of(N), 256, b, _CAIv3(b, p), N, stream=s)   # s is not in p's capture
    assert not s.capturing and not p.capturing
    with pytest.raises(cd.CaptureError, match="being captured"):
        with p.capture():
            twice.launch(grid_of(N), 256, b, b, N, stream=p)
            cd.asbuffer(_CAIv3(b, p))
    # Both streams in one capture: the wait joins them, as a fork does.
    src = cd.Buffer.from_numpy(np.arange(N, dtype=np.float32), stream=p)
    out = nan_buffer(N, p)
    with p.capture() as g:
        mod.function("copy_f").launch(grid_of(N), 256, b, src, N, stream=p)
        twice.launch(grid_of(N), 256, out, _CAIv3(b, p), N, stream=p)
    g.launch()
    np.testing.assert_array_equal(out.to_numpy(stream=p), 2.0 * np.arange(N, dtype=np.float64))


def test_a_graph_update_checks_a_foreign_arrays_stream_as_a_launch_does(mod):
    b = cd.Buffer.zeros(N, np.float32)
    s = cd.Stream()
    with s.capture() as g:
        mod.function("twice").launch(grid_of(N), 256, b, b, N, stream=s)
    for bad in (0, -1, True, "1"):
        with pytest.raises(cd.ArgumentTypeError, match="'stream' must be None or a CUstream handle"):
            g.set_kernel_arg(0, 1, _CAIDict(shape=(N,), typestr="<f4", data=(b.ptr, False), stream=bad))


def test_fill_refuses_values_it_would_silently_change(rng):
    f32 = cd.Buffer.from_numpy(rng.standard_normal(8).astype(np.float32))
    u8 = cd.Buffer.zeros(32, np.uint8)
    before = f32.to_numpy()
    for value, err, match in [(None, cd.ArgumentTypeError, "must be a number"),
                              ("1", cd.ArgumentTypeError, "must be a number"),
                              ([1, 2], cd.ArgumentTypeError, "must be a number"),
                              (1 + 2j, cd.ArgumentTypeError, "imaginary"),
                              (1e300, cd.ArgumentValueError, "overflows float32"),
                              (10 ** 400, cd.ArgumentValueError, "overflows"),
                              (np.longdouble(1), cd.ArgumentTypeError, "not a type of device data")]:
        with pytest.raises(err, match=match):
            f32.fill(value)
    assert np.array_equal(f32.to_numpy(), before)
    for value in (256, -1, float("nan")):
        with pytest.raises(cd.ArgumentValueError, match="not representable as uint8"):
            u8.fill(value)
    # A 2- or 4-byte pattern needs its own alignment (the driver would refuse it with a bare code).
    with pytest.raises(cd.ArgumentValueError, match="a 2-byte pattern needs a 2-byte aligned"):
        u8[1:3].view(np.uint16).fill(np.uint16(7))
    with pytest.raises(cd.ArgumentValueError, match="a 4-byte pattern needs a 4-byte aligned"):
        u8[2:6].view(np.float32).fill(np.float32(1))
    with pytest.raises(cd.ArgumentValueError, match="a 16-byte pattern needs a 4-byte aligned"):
        u8[1:17].view(np.complex128).fill(np.complex128(1 + 2j))
    assert (u8.to_numpy() == 0).all()
    # What numpy's fill accepts still works: inf itself, a float truncated into integers, bools.
    f32.fill(float("inf"))
    assert np.isinf(f32.to_numpy()).all()
    u8.fill(2.75)
    assert (u8.to_numpy() == 2).all()
    u8.fill(True)
    assert (u8.to_numpy() == 1).all()
    f32.fill(np.array(2.5))                  # a 0-d array is its value; a 1-d one is not a fill value
    assert (f32.to_numpy() == 2.5).all()
    with pytest.raises(cd.ArgumentValueError, match="8 bytes.*4-byte elements"):
        f32.fill(np.float64(2.5))            # its 8 bytes would straddle two float32 elements
    f32.fill(np.uint32(0x7FC00000))          # a bit pattern of the element size is taken as it is
    assert np.isnan(f32.to_numpy()).all()
    with pytest.raises(cd.ArgumentTypeError, match="must be a number"):
        f32.fill(np.array([1.0, 2.0]))


# --- 11. bad input is a pycudadrv error naming what is wrong, never a bare TypeError ----------------

class _RaisingProducer:
    def __init__(self, where):
        self.where = where

    def __dlpack__(self, *, stream=None, **kw):
        if self.where == "dlpack":
            raise RuntimeError("producer exploded")
        return cd.Buffer.zeros(4, np.float32).__dlpack__(stream=stream)

    def __dlpack_device__(self):
        if self.where == "device":
            raise RuntimeError("producer exploded")
        return (2, 2 ** 70) if self.where == "huge" else (2, 0)


class _OldDLPack:
    """A producer older than DLPack 0.6: __dlpack__ takes no stream keyword."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self):
        return self.buf.__dlpack__()

    def __dlpack_device__(self):
        return (2, 0)


def test_bad_input_gets_a_pycudadrv_error_naming_what_is_wrong(mod, rng):
    b = cd.Buffer.zeros(16, np.float32)
    s = cd.Stream()
    with s.capture() as g:
        mod.function("twice").launch(1, 16, b, b, 16, stream=s)
    q = cd.Queue(streams=2)
    cases = [
        (lambda: b.write(None), cd.ArgumentTypeError, "numbers or bytes"),
        (lambda: b.write([object()]), cd.ArgumentTypeError, "numbers or bytes"),
        (lambda: b.read(out=[0] * 64), cd.ArgumentTypeError, "writable host memory"),
        (lambda: b.read(out=bytes(64)), cd.ArgumentValueError, "read-only"),
        (lambda: b.copy_to(None), cd.ArgumentTypeError, "dst must be a Buffer"),
        (lambda: b.copy_to(np.zeros(16, np.float32)), cd.ArgumentTypeError, "dst must be a Buffer"),
        (lambda: b.copy_from([1.0]), cd.ArgumentTypeError, "src must be a Buffer"),
        (lambda: b["a":], cd.ArgumentTypeError, "slice bounds must be ints"),
        (lambda: b[1.5:], cd.ArgumentTypeError, "slice bounds must be ints"),
        (lambda: b[::0], cd.ArgumentValueError, "step 1"),
        (lambda: cd.Stream(2 ** 70), cd.ArgumentValueError, "out of range"),
        (lambda: cd.Buffer.empty(4, device=2 ** 70), cd.ArgumentValueError, "out of range"),
        (lambda: g.set_kernel_arg("0", 0, b), cd.ArgumentTypeError, "index must be an int"),
        (lambda: g.set_kernel_arg(0, 1.0, b), cd.ArgumentTypeError, "arg must be an int"),
        (lambda: g.set_kernel_arg(2 ** 70, 0, b), cd.ArgumentIndexError, "out of range"),
        (lambda: g.kernel(0.0), cd.ArgumentTypeError, "index must be an int"),
        (lambda: q.launch(None, 1, 1), cd.ArgumentTypeError, "Queue.launch takes a Function"),
        (lambda: q.copy(b, b, nbytes="x"), cd.ArgumentTypeError, "nbytes counts bytes"),
        (lambda: q.copy(b, b, nbytes=1.9), cd.ArgumentTypeError, "nbytes counts bytes"),
        (lambda: q.copy([object()], b), cd.ArgumentTypeError, "numbers or bytes"),
        (lambda: q.copy(b, np.zeros(4)), cd.ArgumentTypeError, "dst must be a Buffer"),
    ]
    for where in ("dlpack", "device", "huge"):
        x = _RaisingProducer(where)
        match = "names device" if where == "huge" else "raised RuntimeError: producer exploded"
        cases += [(lambda x=x: mod.function("twice").launch(1, 16, b, x, 16), cd.ArgumentTypeError, match),
                  (lambda x=x: cd.asbuffer(x), cd.ArgumentTypeError, match)]
    for k, (call, err, match) in enumerate(cases):
        with pytest.raises(err, match=match):
            call()
    assert (b.to_numpy() == 0).all()
    q.synchronize()


def test_a_producer_older_than_dlpack_0_6_is_used_as_it_is(mod, rng):
    a = rng.standard_normal(N).astype(np.float32)
    src = cd.Buffer.from_numpy(a)
    src.stream.synchronize()
    out = nan_buffer(N)
    mod.function("twice").launch(grid_of(N), 256, out, _OldDLPack(src), N)
    np.testing.assert_allclose(out.to_numpy(), 2.0 * a.astype(np.float64), rtol=1e-6)
    assert np.array_equal(cd.asbuffer(_OldDLPack(src)).to_numpy().view(np.float32), a)
