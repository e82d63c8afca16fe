"""GPU tests of events, Timestamps, timing helpers, profiling and graph capture."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import heat

pytestmark = pytest.mark.gpu

KERNELS = r"""
extern "C" __global__ void spin(long long cycles, int* flag) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    if (threadIdx.x == 0) *flag = 1;
}
extern "C" __global__ void axpb(float* out, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + b;
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(KERNELS).load()


def spin_cycles(ms):
    clock_khz = cd.Device(0).attribute("clock_rate")
    return int(ms * clock_khz)


# --- events ----------------------------------------------------------------------

def test_event_errors_are_distinct_and_say_what_to_do(mod):
    s = cd.Stream()
    a, b = cd.Event(), cd.Event()
    with pytest.raises(ValueError, match="start event never recorded"):
        cd.Event.elapsed_ms(a, b)
    a.record(s)
    with pytest.raises(ValueError, match="end event never recorded"):
        cd.Event.elapsed_ms(a, b)
    nt = cd.Event(timing=False).record(s)
    with pytest.raises(ValueError, match="end event created without timing"):
        cd.Event.elapsed_ms(a, nt)
    with pytest.raises(ValueError, match="never recorded"):
        cd.Event().query()
    with pytest.raises(ValueError, match="never recorded"):
        s.wait(cd.Event())


def test_elapsed_nonblocking_form_reports_not_ready_then_the_time(mod):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    start = cd.Event().record(s)
    mod.function("spin").launch(1, 1, spin_cycles(200), flag, stream=s)
    end = cd.Event().record(s)
    assert cd.Event.elapsed_ms(start, end, wait=False) is None
    assert end.query() is False
    ms = cd.Event.elapsed_ms(start, end)
    assert ms > 50
    assert end.query() is True and end - start == pytest.approx(ms)


def test_stream_wait_orders_work_across_streams(mod, rng):
    s1, s2 = cd.Stream(), cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s1)
    s1.synchronize()
    mod.function("spin").launch(1, 1, spin_cycles(100), flag, stream=s1)
    done = cd.Event(timing=False).record(s1)
    s2.wait(done)
    out = np.full(1, -1, np.int32)
    flag.read(out=out, stream=s2)  # ordered after the spin kernel, which sets the flag
    assert out[0] == 1


# --- Timestamps ----------------------------------------------------------------------

def test_try_take_is_none_while_a_pass_runs_then_gives_labels_in_order(mod):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    ts = cd.Timestamps(s)
    with ts.measure("first"):
        mod.function("spin").launch(1, 1, spin_cycles(5), flag, stream=s)
    with ts.pass_("long"):
        mod.function("spin").launch(1, 1, spin_cycles(200), flag, stream=s)
    assert ts.try_take() is None
    assert not ts.is_idle
    s.synchronize()
    got = ts.try_take()
    assert [label for label, _ in got] == ["first", "long"]
    assert got[1][1] > 50 and got[0][1] < got[1][1]
    assert ts.try_take() == [] and ts.is_idle


def test_timestamps_read_waits_and_reset_clears(mod):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    ts = cd.Timestamps(s)
    with ts.measure("a"):
        mod.function("spin").launch(1, 1, spin_cycles(20), flag, stream=s)
    res = ts.read()
    assert len(res) == 1 and res[0][0] == "a" and res[0][1] > 5
    with ts.measure("b"):
        pass
    ts.reset()
    assert ts.read() == []


# --- timing helpers ----------------------------------------------------------------------

def test_launch_timed_returns_nanoseconds_of_the_kernel_alone(mod):
    flag = cd.Buffer.zeros(1, np.int32)
    ns = mod.function("spin").launch_timed(1, 1, spin_cycles(10), flag)
    assert isinstance(ns, int) and 5_000_000 < ns < 100_000_000
    p = mod.function("spin").bind(1, 1, spin_cycles(10), flag)
    assert 5_000_000 < p.launch_timed() < 100_000_000


@pytest.mark.parametrize("graph", [False, True])
def test_do_bench_statistics(mod, graph):
    n = 1 << 20
    x = cd.Buffer.zeros(n, np.float32)
    out = cd.Buffer.empty(n, np.float32)
    f = mod.function("axpb").bind(n // 256, 256, out, x, 1.0, 2.0, n)
    r = cd.bench.do_bench(f.launch, warmup=5, rep=20, flush_l2=True, graph=graph, stream=f.stream)
    assert 0 < r.min <= r.median <= r.max and r.reps >= 1 and set(r.quantiles) == {0.2, 0.5, 0.8}
    assert r.median < 1.0  # 8 MB read+write: microseconds, not milliseconds


def test_profile_table_and_trace_mode():
    code = (f"import pycudadrv as cd, numpy as np\n"
            f"m = cd.compile({KERNELS!r}).load()\n"
            "x = cd.Buffer.zeros(1024, np.float32); out = cd.Buffer.empty(1024, np.float32)\n"
            "for _ in range(7):\n"
            "    m.function('axpb').launch(4, 256, out, x, 1.0, 2.0, 1024)\n"
            "cd.Device(0).synchronize()\n")
    env = dict(os.environ, PYCUDADRV_PROFILE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "us/call" in r.stderr
    row = [ln for ln in r.stderr.splitlines() if ln.startswith("axpb")][0].split()
    assert int(row[2]) == 7 and float(row[1]) > 0
    env = dict(os.environ, PYCUDADRV_TRACE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("[pycudadrv trace] axpb grid=(4, 1, 1) block=(256, 1, 1)") == 7


# --- graph capture ----------------------------------------------------------------------

def _stencil_setup(n):
    fn = cd.compile(heat.SOURCE).load().function("heat_step")
    s = cd.Stream()
    a = cd.Buffer.from_numpy(heat.initial_grid(n), stream=s)
    b = cd.Buffer.from_numpy(np.full((n, n), np.nan, np.float32), stream=s)
    return fn, s, a, b


def test_captured_stencil_replays_to_the_same_grid_as_eager_launches():
    n, k, reps = 128, 10, 5
    ref = heat.reference(heat.initial_grid(n), k * reps)
    fn, s, a, b = _stencil_setup(n)
    grid = heat.grid_for(n)
    with s.capture() as g:
        src, dst = a, b
        for _ in range(k):
            fn.launch(grid, heat.BLOCK, dst, src, n, n, heat.ALPHA, stream=s)
            src, dst = dst, src
    assert g.num_kernels == k and g.num_nodes == k
    g.upload()
    for _ in range(reps):
        g.launch()
    out_graph = (a if k % 2 == 0 else b).to_numpy()
    eager, _ = heat.run(n, k * reps, mode="launch")
    np.testing.assert_array_equal(out_graph, eager)
    assert heat.rel_error(out_graph, ref) < 1e-5


def test_graph_keeps_dropped_buffers_alive_for_replay(rng):
    m = cd.compile(KERNELS).load()
    x = rng.standard_normal(4096).astype(np.float32)
    s = cd.Stream()
    out = cd.Buffer.from_numpy(np.full(4096, np.nan, np.float32), stream=s)
    xb = cd.Buffer.from_numpy(x, stream=s)
    with s.capture() as g:
        m.function("axpb").launch(16, 256, out, xb, 3.0, -1.0, 4096, stream=s)
    del xb
    gc.collect()
    # Reuse freed memory aggressively: if the graph's input had been freed, it would be overwritten here.
    junk = [cd.Buffer.from_numpy(np.full(4096, 7.0, np.float32), stream=s) for _ in range(8)]
    g.launch()
    got = out.to_numpy()
    np.testing.assert_allclose(got, 3.0 * x.astype(np.float64) - 1.0, rtol=1e-6, atol=1e-6)
    del junk


def test_kernel_arguments_can_be_changed_between_replays(mod, rng):
    x1 = rng.standard_normal(1024).astype(np.float32)
    x2 = rng.standard_normal(1024).astype(np.float32)
    s = cd.Stream()
    b1, b2 = cd.Buffer.from_numpy(x1, stream=s), cd.Buffer.from_numpy(x2, stream=s)
    out = cd.Buffer.from_numpy(np.full(1024, np.nan, np.float32), stream=s)
    with s.capture() as g:
        mod.function("axpb").launch(4, 256, out, b1, 2.0, 0.0, 1024, stream=s)
    g.launch()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * x1, rtol=1e-6)
    g.set_kernel_args(0, out, b2, -1.0, 0.5, 1024)
    g.launch()
    np.testing.assert_allclose(out.to_numpy(), -x2.astype(np.float64) + 0.5, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="parameter #2"):
        g.set_kernel_args(0, out, b2, np.float64(1.0), 0.5, 1024)
    with pytest.raises(IndexError):
        g.set_kernel_args(1, out, b2, 1.0, 0.5, 1024)


def test_stencil_buffer_swap_through_argument_update():
    n = 64
    fn, s, a, b = _stencil_setup(n)
    c = cd.Buffer.from_numpy(heat.initial_grid(n), stream=s)
    d = cd.Buffer.from_numpy(np.full((n, n), np.nan, np.float32), stream=s)
    grid = heat.grid_for(n)
    with s.capture() as g:
        fn.launch(grid, heat.BLOCK, b, a, n, n, heat.ALPHA, stream=s)
    g.set_kernel_args(0, d, c, n, n, heat.ALPHA)
    g.launch()
    ref = heat.reference(heat.initial_grid(n), 1)
    assert heat.rel_error(d.to_numpy(), ref) < 1e-6
    assert np.isnan(b.to_numpy()).all()  # the original target was not written


def test_empty_capture_raises_and_stream_stays_usable(mod):
    s = cd.Stream()
    with pytest.raises(ValueError, match="empty capture"):
        with s.capture():
            pass
    s.synchronize()


def test_exception_inside_capture_ends_it_and_discards_the_graph(mod):
    s = cd.Stream()
    out = cd.Buffer.empty(1024, np.float32, stream=s)
    x = cd.Buffer.zeros(1024, np.float32, stream=s)
    with pytest.raises(KeyError):
        with s.capture() as g:
            mod.function("axpb").launch(4, 256, out, x, 1.0, 5.0, 1024, stream=s)
            raise KeyError("user error")
    with pytest.raises(RuntimeError, match="closed"):
        g.launch()
    mod.function("axpb").launch(4, 256, out, x, 1.0, 5.0, 1024, stream=s)
    assert (out.to_numpy() == 5.0).all()


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_illegal_calls_during_capture_name_the_capture_and_mode(mod, mode):
    s = cd.Stream()
    other = cd.Stream()
    x = cd.Buffer.zeros(1024, np.float32, stream=s)
    out = cd.Buffer.empty(1024, np.float32, stream=s)
    early = cd.Buffer.zeros(4096, np.float32, stream=other)
    ev = cd.Event().record(other)
    other.synchronize()
    s.synchronize()
    with s.capture(mode=mode) as g:
        mod.function("axpb").launch(4, 256, out, x, 1.0, 1.0, 1024, stream=s)
        with pytest.raises(RuntimeError, match="synchronize a stream during <Capture "):
            s.synchronize()
        with pytest.raises(RuntimeError, match="during <Capture "):
            out.to_numpy()
        if mode != "relaxed":
            with pytest.raises(RuntimeError, match=f"mode '{mode}' forbids it"):
                ev.query()
            with pytest.raises(RuntimeError, match=f"mode '{mode}' forbids it"):
                cd.Buffer.empty(64, async_alloc=False)
            # allocating on another stream would break the capture: refused before the driver sees it
            with pytest.raises(RuntimeError, match="allocate device memory on a stream outside the capture"):
                cd.Buffer.empty(256, stream=other)
        else:
            assert ev.query() is True
        # freeing a buffer during the capture never breaks it (deferred until the capture ends)
        early.close()
    g.launch()
    assert (out.to_numpy() == 1.0).all()


def test_legacy_null_stream_cannot_be_captured():
    with pytest.raises(ValueError, match="legacy default"):
        with cd.Stream.from_handle(0).capture():
            pass


def test_debug_dot_writes_the_graph(mod, tmp_path):
    s = cd.Stream()
    x = cd.Buffer.zeros(256, np.float32, stream=s)
    with s.capture() as g:
        mod.function("axpb").launch(1, 256, x, x, 1.0, 1.0, 256, stream=s)
    path = g.debug_dot(tmp_path / "g.dot")
    text = open(path).read()
    assert "digraph" in text and "axpb" in text
