"""The khal and zyx backend behaviours: debug switches, traces, device selection
and timed launches that are never contended."""
import os
import subprocess
import sys

import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

SRC = r"""
extern "C" __global__ void fill(float* y, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
extern "C" __global__ void groups(float* out, unsigned long long out_len, const unsigned int* ind,
                                  unsigned long long ind_len) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && out_len) out[0] = 1.0f;
}
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(SRC).load()


def run_python(code, **env):
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


def test_graph_dot_dumps_every_instantiated_graph(mod, tmp_path, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_GRAPH_DOT", str(tmp_path / "g{n}.dot"))
    s = cd.Stream()
    y = cd.Buffer.empty(256, np.float32, stream=s)
    for _ in range(2):
        with s.capture():
            mod.function("fill").launch(1, 256, y, 1.0, 256, stream=s)
    dots = sorted(os.listdir(tmp_path))
    assert len(dots) >= 2 and all(d.endswith(".dot") for d in dots)
    assert "fill" in open(tmp_path / dots[-1]).read()


def test_each_graph_dot_dump_says_where_it_went(mod, tmp_path, monkeypatch, capfd, rng):
    monkeypatch.setenv("PYCUDADRV_GRAPH_DOT", str(tmp_path / "said{n}.dot"))
    s = cd.Stream()
    y = cd.Buffer.empty(256, np.float32, stream=s)
    with s.capture():
        mod.function("fill").launch(1, 256, y, 1.0, 256, stream=s)
    err = capfd.readouterr().err
    written = [f for f in os.listdir(tmp_path) if f.startswith("said")]
    assert len(written) == 1
    assert f"[pycudadrv] graph DOT: 1 nodes written to {tmp_path / written[0]}" in err


def test_a_graph_dot_dump_that_cannot_be_written_warns_and_the_graph_runs(mod, tmp_path, monkeypatch, rng):
    monkeypatch.setenv("PYCUDADRV_GRAPH_DOT", str(tmp_path / "no" / "such" / "dir" / "g.dot"))
    s = cd.Stream()
    y = cd.Buffer.from_numpy(np.full(256, np.nan, np.float32), stream=s)
    v = float(rng.standard_normal())
    for _ in range(2):          # twice: the second capture after a failed dump too
        with pytest.warns(RuntimeWarning, match="PYCUDADRV_GRAPH_DOT: could not write the graph to .*no/such/dir"):
            with s.capture() as graph:
                mod.function("fill").launch(1, 256, y, v, 256, stream=s)
        graph.launch(s)
        np.testing.assert_array_equal(y.to_numpy(stream=s), np.full(256, v, np.float32))
    assert not (tmp_path / "no").exists()


def test_indirect_trace_names_the_kernel_of_every_indirect_dispatch(mod, capfd, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_INDIRECT_TRACE", "1")
    out = cd.Buffer.zeros(4, np.float32)
    counts = cd.Buffer.from_numpy(np.array([2, 1, 1], np.uint32))
    d = cd.dispatch.Pass(cd.Encoder(), "p").dispatch(mod.function("groups"), block=(32, 1, 1))
    d.set_arg((0, 0), out)
    d.dispatch(indirect=counts)
    d.dispatch(indirect=counts)
    cd.Device(0).synchronize()
    err = capfd.readouterr().err
    assert err.count("[pycudadrv indirect] groups") == 2


def test_invalid_persistent_blocks_falls_back_with_one_warning(mod, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_PERSISTENT_BLOCKS", "many")
    out = cd.Buffer.zeros(4, np.float32)
    counts = cd.Buffer.from_numpy(np.array([3, 1, 1], np.uint32))
    d = cd.dispatch.Pass(cd.Encoder(), "p").dispatch(mod.function("groups"), block=(32, 1, 1))
    d.set_arg((0, 0), out)
    with pytest.warns(RuntimeWarning, match="PYCUDADRV_PERSISTENT_BLOCKS='many' is not an integer"):
        d.dispatch(indirect=counts)
    assert out.to_numpy()[0] == 1.0


def test_allocation_trace_reports_allocations_attempted_while_capturing(mod, capfd, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_ALLOC_TRACE", "1")
    s = cd.Stream()
    y = cd.Buffer.empty(64, np.float32, stream=s)
    with s.capture():
        mod.function("fill").launch(1, 64, y, 1.0, 64, stream=s)
        cd.Buffer.empty(4096, stream=s)            # a graph memory node: reported
    err = capfd.readouterr().err
    assert "[pycudadrv alloc-trace] device allocation of 4096 bytes during a capture" in err
    assert "test_gpu_khal.py" in err


def test_device_selection_from_the_environment_and_an_empty_one_is_an_error():
    r = run_python("import pycudadrv as cd; print([d.ordinal for d in cd.selected_devices()], "
                   "cd.get_current_device().ordinal)", PYCUDADRV_DEVICES="0")
    assert r.returncode == 0 and r.stdout.split() == ["[0]", "0"], r.stderr
    r = run_python("import pycudadrv as cd; cd.Buffer.empty(16)", PYCUDADRV_DEVICES=" , ")
    assert r.returncode != 0 and "the device selection is empty" in r.stderr
    r = run_python("import pycudadrv as cd; cd.select_devices([99])")
    assert r.returncode != 0 and "device 99 does not exist" in r.stderr


def test_debug_log_reports_the_driver_and_every_device():
    r = run_python("import pycudadrv as cd; cd.device_count()", PYCUDADRV_DEBUG="1")
    assert r.returncode == 0, r.stderr
    assert "[pycudadrv] driver CUDA" in r.stderr and "device 0:" in r.stderr and "sm_" in r.stderr


def test_launch_timed_drains_every_stream_of_the_device_first(mod):
    other = cd.Stream()
    mod.function("spin").launch(1, 1, int(100 * cd.Device(0).attribute("clock_rate")), stream=other)  # ~100 ms
    y = cd.Buffer.empty(1 << 20, np.float32)
    ns = mod.function("fill").launch_timed_ns(4096, 256, y, 2.0, 1 << 20)
    assert other.query()            # the spin on the other stream was drained before timing
    assert isinstance(ns, int) and ns > 0
    assert (y.to_numpy() == 2.0).all()


# --- khal's context(): the primary CUcontext as an int ---------------------------------------

def _driver_fn(name, *argtypes):
    """A driver entry point through ctypes (cuGetProcAddress_v2, as pycudadrv resolves its own), from the
    library pycudadrv loaded: one process, one driver state."""
    import ctypes

    lib = ctypes.CDLL(os.environ.get("PYCUDADRV_LIBCUDA") or "libcuda.so.1")
    gpa = lib.cuGetProcAddress_v2
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                    ctypes.POINTER(ctypes.c_int)]
    p, status = ctypes.c_void_p(), ctypes.c_int()
    assert gpa(name.encode(), ctypes.byref(p), 4000, 0, ctypes.byref(status)) == 0 and p.value
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)


def _current_context():
    import ctypes

    ctx = ctypes.c_void_p()
    assert _driver_fn("cuCtxGetCurrent", ctypes.POINTER(ctypes.c_void_p))(ctypes.byref(ctx)) == 0
    return ctx.value or 0


def test_context_is_the_primary_context_cuctxgetcurrent_reports():
    import ctypes

    dev = cd.Device(0)
    ctx = dev.context
    assert isinstance(ctx, int) and ctx != 0
    for _ in range(2):
        dev.set_current()
        assert _current_context() == ctx
        assert cd.context() == cd.context(0) == cd.context(dev) == cd.Device(0).context == ctx
    # Another context current (none at all here), then any pycudadrv call: the same context again.
    assert _driver_fn("cuCtxSetCurrent", ctypes.c_void_p)(None) == 0
    assert _current_context() == 0 and dev.context == ctx
    y = cd.Buffer.zeros(4, np.float32)
    assert _current_context() == ctx and y.device.context == ctx


def test_each_device_has_its_own_context_and_using_one_leaves_the_other_unchanged():
    if cd.device_count() < 2 or len(cd.selected_devices()) < 2:
        pytest.skip("needs two devices")
    d0, d1 = cd.Device(0), cd.Device(1)
    c0, c1 = d0.context, d1.context
    assert c0 != c1
    for _ in range(2):
        d1.set_current()
        assert _current_context() == c1
        cd.Buffer.zeros(4, np.float32, device=d1)
        d0.set_current()
        assert _current_context() == c0 and d0.context == c0 and cd.context(1) == c1


def test_context_of_a_bad_device_is_a_pycudadrv_error():
    with pytest.raises(cd.ArgumentValueError, match="device ordinal 4096 out of range"):
        cd.context(4096)
    with pytest.raises(cd.ArgumentTypeError, match="context: device must be a Device or an int ordinal, got str 'gpu0'"):
        cd.context("gpu0")


# --- BufferUsages on buffers -------------------------------------------------------------------

U = cd.BufferUsages


def test_usage_is_set_at_creation_read_back_and_shared_by_views():
    for _ in range(2):
        b = cd.Buffer.empty(16, np.float32, usage=U.STORAGE | U.INDIRECT)
        assert b.usage == U.STORAGE | U.INDIRECT
        assert b[2:6].usage == b.view(np.uint32).usage == b[2:6][1:2].usage == U.STORAGE | U.INDIRECT
        assert "usage=STORAGE|INDIRECT" in repr(b) and "usage=STORAGE|INDIRECT" in repr(b[1:2])
        assert cd.Buffer.zeros(4, np.float32, usage=U.COPY_DST).usage == U.COPY_DST
        assert cd.Buffer.from_numpy(np.arange(3, dtype=np.uint32), usage=U.INDIRECT).usage == U.INDIRECT
        plain = cd.Buffer.empty(8)
        assert plain.usage == U.ALL and plain[0:4].usage == U.ALL and "usage" not in repr(plain)
        assert cd.asbuffer(plain).usage == U.ALL


def test_usage_is_metadata_for_copies_and_fills_as_in_khals_cuda_backend(rng):
    # khal's CUDA backend checks no usage on copies, writes, reads or kernel arguments: neither does pycudadrv.
    x = rng.standard_normal(64).astype(np.float32)
    src = cd.Buffer.from_numpy(x, usage=U.STORAGE)
    dst = cd.Buffer.from_numpy(np.full(64, np.nan, np.float32), usage=U.STORAGE)
    src.copy_to(dst)
    np.testing.assert_array_equal(dst.to_numpy(), x)
    dst.fill(1.5)
    assert (dst.to_numpy() == 1.5).all()


def _groups_dispatch(mod):
    out = cd.Buffer.from_numpy(np.full(4, np.nan, np.float32))
    d = cd.dispatch.Pass(cd.Encoder(), "p").dispatch(mod.function("groups"), block=(32, 1, 1))
    d.set_arg((0, 0), out)
    return d, out


def test_an_indirect_dispatch_needs_the_indirect_usage(mod):
    d, out = _groups_dispatch(mod)
    counts = cd.Buffer.from_numpy(np.array([2, 1, 1], np.uint32), usage=U.STORAGE | U.COPY_DST)
    for view in (counts, counts[0:3]):
        with pytest.raises(cd.ArgumentValueError, match=r"Dispatch of 'groups', indirect=: <Buffer .*usage="
                           r"COPY_DST\|STORAGE.*> needs usage INDIRECT, it has COPY_DST\|STORAGE \(the usage is "
                           r"fixed when the allocation is made"):
            d.dispatch(indirect=view)
    assert np.isnan(out.to_numpy()).all()               # nothing was launched
    ok = cd.Buffer.from_numpy(np.array([2, 1, 1], np.uint32), usage=U.INDIRECT | U.STORAGE)
    for _ in range(2):
        out.fill(np.float32(np.nan))
        d.dispatch(indirect=ok)
        assert out.to_numpy()[0] == 1.0
    empty = cd.Buffer.empty(0, usage=U.STORAGE)         # even an empty one (a no-op) is checked
    with pytest.raises(cd.ArgumentValueError, match="needs usage INDIRECT"):
        d.dispatch(indirect=empty)


def test_a_queue_indirect_dispatch_is_checked_the_same_way(mod):
    d, out = _groups_dispatch(mod)
    q = cd.Queue()
    counts = cd.Buffer.from_numpy(np.array([1, 1, 1], np.uint32), usage=U.UNIFORM)
    with pytest.raises(cd.ArgumentValueError, match="needs usage INDIRECT, it has UNIFORM"):
        q.dispatch(d, indirect=counts).wait()


# --- profile mode: khal's serialised host clock, a clearing report, trace and profile together ----

PROFILED = (f"import pycudadrv as cd, numpy as np\n"
            f"m = cd.compile({SRC!r}).load()\n"
            "y = cd.Buffer.empty(1024, np.float32)\n"
            "cycles = int(20 * cd.Device(0).attribute('clock_rate'))\n"
            "for _ in range(3):\n"
            "    m.function('spin').launch(1, 1, cycles)\n"
            "for _ in range(7):\n"
            "    m.function('fill').launch(4, 256, y, 2.0, 1024)\n"
            "cd.Device(0).synchronize()\n"
            "assert (y.to_numpy() == 2.0).all()\n")


def _profile_rows(stderr):
    return {ln.split()[0]: ln.split() for ln in stderr.splitlines() if ln.split() and ln.split()[0] in ("spin", "fill")}


def test_host_clock_profile_serialises_each_launch_and_reports_at_exit():
    r = run_python(PROFILED, PYCUDADRV_PROFILE="host")
    assert r.returncode == 0, r.stderr
    assert "pycudadrv profile: 2 kernel(s)" in r.stderr and "(host clock, serialised: sync, launch, sync)" in r.stderr
    rows = _profile_rows(r.stderr)
    assert int(rows["spin"][2]) == 3 and int(rows["fill"][2]) == 7
    # Serialised: each spin call's time holds the whole 20 ms kernel (an event-free lower bound).
    assert float(rows["spin"][3]) > 10_000
    assert list(rows)[0] == "spin"                       # sorted by total time


def test_profile_and_trace_from_the_environment_are_both_active():
    for clock in ("1", "host"):
        r = run_python(PROFILED, PYCUDADRV_PROFILE=clock, PYCUDADRV_TRACE="1")
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("[pycudadrv trace] fill grid=(4, 1, 1) block=(256, 1, 1)") == 7
        assert r.stderr.count("[pycudadrv trace] spin grid=(1, 1, 1)") == 3
        rows = _profile_rows(r.stderr)
        assert int(rows["fill"][2]) == 7 and int(rows["spin"][2]) == 3 and float(rows["spin"][1]) > 30


@pytest.mark.parametrize("clock", ["events", "host"])
def test_in_process_profile_report_clears_unless_kept(mod, clock):
    import io

    from pycudadrv import _launch, profile

    prev = _launch.get_launch_hook()
    profile.disable()
    profile.reset()
    try:
        profile.enable(clock)
        y = cd.Buffer.empty(256, np.float32)
        for _ in range(2):
            for _ in range(5):
                mod.function("fill").launch(1, 256, y, 3.0, 256)
            assert (y.to_numpy() == 3.0).all()
            text = profile.report(io.StringIO(), keep=True)
            assert text.splitlines()[2].split()[:1] + text.splitlines()[2].split()[2:3] == ["fill", "5"]
            assert profile.report(io.StringIO()) == text
            assert profile.stats() == {} and profile.report(io.StringIO()) == ""
    finally:
        profile.disable()
        profile.reset()
        _launch.set_launch_hook(prev)
