"""Lifetimes and ordering you cannot get wrong: every rule of the lifetimes
issue, each with the test that proves it (real driver, real kernels, values
checked against NumPy on fresh random input, outputs poisoned)."""
import gc
import weakref

import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

SRC = r"""
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
extern "C" __global__ void spin_then_fill(float* out, float v, int n, long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
// Spins, then scales: a slow reader of x (its read comes at the end).
extern "C" __global__ void spin_then_scale(float* out, const float* x, float a, int n, long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
extern "C" __global__ void widths(signed char* out8, short* out16, int* out32, signed char a, short b, int c,
                                  unsigned char ua) {
    *out8 = a; *out16 = b; *out32 = c + ua;
}
template <typename T> __global__ void tscale(T* out, const T* x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(SRC, name_expressions=["tscale<float>", "tscale<short>"]).load()


def spin_cycles(ms):
    return int(ms * cd.Device(0).attribute("clock_rate"))


def poisoned(n, stream=None):
    return cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=stream)


# --- issue 10: defects found in review -------------------------------------------------

def test_with_device_makes_it_current_and_restores_the_previous_one():
    d0 = cd.Device(0)
    before = cd.get_current_device()
    with d0 as d:
        assert d is d0 and cd.get_current_device() == d0
        with cd.Device(0):
            assert cd.get_current_device() == d0
    assert cd.get_current_device() == before
    assert d0.use() is d0


def test_device_objects_of_one_ordinal_are_equal_and_pycudadrv_hands_out_one():
    b = cd.Buffer.empty(16)
    assert cd.Device(0) == cd.Device(0) and hash(cd.Device(0)) == hash(cd.Device(0))
    assert b.device is cd.get_current_device()


def test_buffer_metadata_is_read_only_and_view_validates_it(rng):
    a = rng.standard_normal(64).astype(np.float32)
    b = cd.Buffer.from_numpy(a)
    with pytest.raises(AttributeError):
        b.dtype = np.float64
    with pytest.raises(AttributeError):
        b.shape = (8, 8)
    v = b.view(np.float32, (8, 8))
    assert v.shape == (8, 8) and v.dtype == np.float32
    assert np.array_equal(v.to_numpy(), a.reshape(8, 8))
    u = b.view(np.uint32)
    assert np.array_equal(u.to_numpy(), a.view(np.uint32))
    with pytest.raises(cd.ArgumentValueError, match="the buffer has 256"):
        b.view(np.float64, (64,))
    with pytest.raises(cd.ArgumentValueError):
        cd.Buffer.empty(10).view(np.float32)


def test_a_function_of_an_unloaded_module_refuses_to_launch(mod, rng):
    m = cd.compile(SRC + "\n// another module\n").load()
    fn = m.function("scale")
    x = cd.Buffer.from_numpy(rng.standard_normal(32).astype(np.float32))
    out = poisoned(32)
    p = fn.bind(1, 32, out, x, 2.0, 32)
    m.unload()
    with pytest.raises(cd.ClosedError, match="kernel 'scale': its module was unloaded"):
        fn.launch(1, 32, out, x, 2.0, 32)
    with pytest.raises(cd.ClosedError, match="module was unloaded"):
        p()
    assert np.isnan(out.to_numpy()).all()


def test_a_graph_or_device_loop_of_an_unloaded_module_refuses_to_replay(rng):
    m = cd.compile(SRC + "\n// a module to unload under a graph\n").load()
    fn = m.function("scale")
    s = cd.Stream()
    a = rng.standard_normal(256).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    out = poisoned(256, stream=s)
    with s.capture() as g:
        fn.launch(1, 256, out, x, 2.0, 256, stream=s)
    with s.loop(times=3) as loop:
        fn.launch(1, 256, out, out, 2.0, 256, stream=s)
    g.launch()
    loop.launch()
    np.testing.assert_allclose(out.to_numpy(stream=s), a.astype(np.float64) * 16.0, rtol=1e-6)
    out.fill(np.nan, stream=s)
    m.unload()
    # The executable graphs name the unloaded module's CUfunctions: a replay would run dangling handles.
    for graph in (g, loop):
        with pytest.raises(cd.ClosedError, match="'scale' was unloaded"):
            graph.launch()
        with pytest.raises(cd.ClosedError, match="was unloaded"):
            graph.upload()
    assert np.isnan(out.to_numpy(stream=s)).all()
    g.close()
    loop.close()


def test_graph_updates_let_go_of_the_buffers_they_replaced(rng):
    """A simulation loop that points a graph at a fresh buffer each step keeps one, not all."""
    m = cd.compile(SRC).load()
    fn = m.function("scale")
    s = cd.Stream()
    n = 256
    out = poisoned(n, stream=s)
    with s.capture() as g:
        fn.launch(1, n, out, cd.Buffer.zeros(n, np.float32, stream=s), 2.0, n, stream=s)
    refs = []
    for step in range(6):
        a = rng.standard_normal(n).astype(np.float32)
        x = cd.Buffer.from_numpy(a, stream=s)
        refs.append(weakref.ref(next(r for r in gc.get_referents(x) if type(r).__name__ == "Allocation")))
        g.set_kernel_arg(0, 1, x)
        out.fill(np.float32(np.nan), stream=s)
        g.launch()
        np.testing.assert_allclose(out.to_numpy(stream=s), 2.0 * a.astype(np.float64), rtol=1e-6)
        del x
    s.synchronize()
    gc.collect()
    assert [r() is not None for r in refs] == [False] * 5 + [True]
    g.close()


# --- rule: nothing holds a dangling pointer ---------------------------------------------

@pytest.mark.parametrize("async_alloc", [True, False])
def test_prepared_launch_of_a_closed_buffer_raises_and_never_writes_the_reused_address(mod, rng, async_alloc):
    n = 4096
    fn = mod.function("scale")
    x = cd.Buffer.from_numpy(rng.standard_normal(n).astype(np.float32), async_alloc=async_alloc)
    out = cd.Buffer.empty(n, np.float32, async_alloc=async_alloc)
    p = fn.bind(n // 256, 256, out, x, 3.0, n)
    p()
    out.close()
    fresh = cd.Buffer.from_numpy(np.full(n, 7.0, np.float32), async_alloc=async_alloc)  # may get the old address
    with pytest.raises(cd.ClosedError, match=r"kernel 'scale', parameter #0: the bound buffer is closed"):
        p()
    with pytest.raises(cd.ClosedError, match="parameter #0"):
        p.launch_timed_ns()
    assert (fresh.to_numpy() == 7.0).all()
    p.set_arg(0, fresh)           # rebinding a live buffer makes it usable again
    p()
    np.testing.assert_allclose(fresh.to_numpy(), 3.0 * x.to_numpy(), rtol=1e-6)


def test_a_view_of_a_closed_buffer_is_refused_by_prepared_and_generic_launches(mod, rng):
    fn = mod.function("scale")
    parent = cd.Buffer.empty(1024, np.float32)
    view = parent[256:512]
    x = cd.Buffer.from_numpy(rng.standard_normal(256).astype(np.float32))
    p = fn.bind(1, 256, view, x, 1.0, 256)
    parent.close()
    with pytest.raises(cd.ClosedError, match="view of a closed buffer"):
        p()
    with pytest.raises(cd.ClosedError, match="parameter #0"):
        fn.launch(1, 256, view, x, 1.0, 256)


def test_dispatch_bound_to_a_closed_buffer_raises(mod, rng):
    kern = cd.compile(r'''
    extern "C" __global__ void k(float* out, unsigned long long out_len, const unsigned int* ind,
                                 unsigned long long ind_len) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < out_len / 4) out[i] = 1.0f;
    }''').load().function("k")
    out = cd.Buffer.empty(256, np.float32)
    enc = cd.Device(0).encoder()
    with enc.pass_("p") as ps:
        d = ps.dispatch(kern, block=(64, 1, 1))
        d.set_arg((0, 0), out)
        d.dispatch(grid=(4, 1, 1))
        out.close()
        with pytest.raises(cd.ClosedError, match="kernel 'k', parameter #0"):
            d.dispatch(grid=(4, 1, 1))


def test_graph_keeps_closed_buffers_alive_until_it_is_closed(mod, rng):
    n = 2048
    s = cd.Stream()
    fn = mod.function("scale")
    a = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    out = poisoned(n, stream=s)
    with s.capture() as g:
        fn.launch(n // 256, 256, out, x, 2.0, n, stream=s)
    x.close()                     # the graph still reads it: the free waits for the graph
    g.launch()
    np.testing.assert_allclose(out.to_numpy(stream=s), 2.0 * a, rtol=1e-6)
    used = cd.Device(0).memory_info()[0]
    g.close()                     # now the deferred free runs
    s.synchronize()
    assert cd.Device(0).memory_info()[0] >= used - 2**20


def test_dlpack_export_keeps_the_memory_until_the_consumer_releases_it(rng):
    torch = pytest.importorskip("torch")
    a = rng.standard_normal(1000).astype(np.float32)
    b = cd.Buffer.from_numpy(a)
    t = torch.from_dlpack(b)
    b.close()
    assert b.closed
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), a)   # still valid memory
    del t
    gc.collect()


# --- rule: a failed update changes nothing ----------------------------------------------

def test_a_failed_rebind_leaves_the_prepared_launch_bit_for_bit(mod, rng):
    n = 512
    fn = mod.function("scale")
    x = cd.Buffer.from_numpy(rng.standard_normal(n).astype(np.float32))
    out = poisoned(n)
    p = fn.bind(2, 256, out, x, 2.0, n)
    before_bytes, before_args = p.param_bytes(), p.args
    other = cd.Buffer.empty(n, np.float32)
    with pytest.raises(cd.ArgumentTypeError, match="parameter #2"):
        p(other, x, "not a float", n)
    with pytest.raises(cd.ArgumentTypeError, match="parameter #3"):
        p.set_arg(3, 2.5)
    assert p.param_bytes() == before_bytes and p.args == before_args
    p()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * x.to_numpy(), rtol=1e-6)


def test_a_failed_graph_update_leaves_the_graph_as_it_was(mod, rng):
    n = 256
    s = cd.Stream()
    fn = mod.function("scale")
    a = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    out = poisoned(n, stream=s)
    with s.capture() as g:
        fn.launch(1, n, out, x, 4.0, n, stream=s)
    with pytest.raises(cd.ArgumentTypeError, match="parameter #2"):
        g.set_kernel_args(0, out, x, None, n)
    assert g.kernel(0)[4][2] == 4.0
    g.launch()
    np.testing.assert_allclose(out.to_numpy(stream=s), 4.0 * a, rtol=1e-6)


def test_a_failed_dispatch_binding_changes_nothing(mod):
    kern = cd.compile('extern "C" __global__ void k(float* o, unsigned long long n, const unsigned* i, '
                      'unsigned long long m) { if (threadIdx.x < n / 4) o[threadIdx.x] = 2.0f; }').load().function("k")
    out = poisoned(64)
    with cd.Device(0).encoder().pass_("p") as ps:
        d = ps.dispatch(kern, block=(64, 1, 1))
        d.set_arg((0, 0), out)
        with pytest.raises(cd.ArgumentTypeError):
            d.set_arg((0, 0), np.zeros(4))
        with pytest.raises(cd.ArgumentValueError):
            d.set_arg((-1, 0), out)
        d.dispatch(grid=(1, 1, 1))
    assert (out.to_numpy() == 2.0).all()


# --- rule: frees never run under work that uses the memory --------------------------------

def test_a_free_waits_for_another_stream_still_using_the_memory(mod):
    n = 1 << 16
    a_stream, b_stream = cd.Stream(), cd.Stream()
    fn = mod.function("spin_then_fill")
    x = cd.Buffer.empty(n, np.float32, stream=a_stream)
    a_stream.synchronize()
    fn.launch(n // 256, 256, x, -1.0, n, spin_cycles(100), stream=b_stream)   # writes late, on stream B
    x.close()                                                 # freed on stream A: must wait for B
    y = cd.Buffer.empty(n, np.float32, stream=a_stream)      # may reuse x's memory, in A's order
    y.fill(np.float32(5.0))
    b_stream.synchronize()
    assert (y.to_numpy(stream=a_stream) == 5.0).all()


def test_a_free_after_the_allocation_stream_is_closed_still_orders_after_it(mod):
    n = 1 << 16
    s = cd.Stream()
    fn = mod.function("spin_then_fill")
    x = cd.Buffer.empty(n, np.float32, stream=s)
    fn.launch(n // 256, 256, x, -1.0, n, spin_cycles(100), stream=s)   # writes late
    s.close()                     # its final event orders the free (now on the device's default stream)
    x.close()
    y = cd.Buffer.empty(n, np.float32)                       # may reuse x's memory, after that event
    y.fill(np.float32(5.0))
    cd.Device(0).synchronize_all()
    assert (y.to_numpy() == 5.0).all()


# --- rule: graphs are replay-safe or refused ----------------------------------------------

def test_allocation_inside_a_capture_is_freed_inside_the_graph_and_replays(mod, rng):
    n = 1024
    s = cd.Stream()
    fn = mod.function("scale")
    a = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    out = poisoned(n, stream=s)
    with s.capture() as g:
        tmp = cd.Buffer.empty(n, np.float32, stream=s)      # a graph memory node
        fn.launch(n // 256, 256, tmp, x, 2.0, n, stream=s)
        fn.launch(n // 256, 256, out, tmp, 3.0, n, stream=s)
    with pytest.raises(cd.ClosedError, match="allocated inside a graph capture"):
        tmp.ptr
    for _ in range(3):            # replay after replay: the graph frees what it allocates
        out.fill(np.float32(np.nan), stream=s)
        g.launch()
        np.testing.assert_allclose(out.to_numpy(stream=s), 6.0 * a, rtol=1e-6)


def test_ten_thousand_replays_leave_device_memory_flat(mod):
    n = 1 << 16
    s = cd.Stream()
    fn = mod.function("scale")
    x = cd.Buffer.zeros(n, np.float32, stream=s)
    with s.capture() as g:
        tmp = cd.Buffer.empty(n, np.float32, stream=s)
        fn.launch(n // 256, 256, tmp, x, 1.0, n, stream=s)
    g.launch()
    s.synchronize()
    free0, graph0 = cd.Device(0).memory_info()[0], cd.graph_memory_used()
    for _ in range(10_000):
        g.launch()
    s.synchronize()
    assert cd.graph_memory_used() <= graph0
    assert cd.Device(0).memory_info()[0] >= free0 - 2**20


def test_pinned_host_copies_inside_a_capture_replay_from_the_pinned_memory(mod, rng):
    n = 4096
    s = cd.Stream()
    h = cd.HostBuffer.empty(n, np.float32)
    d = poisoned(n, stream=s)
    out = cd.HostBuffer.empty(n, np.float32)
    with s.capture() as g:
        d.write(h.array, stream=s)
        d.read(out=out.array, stream=s, synchronize=False)
    for _ in range(2):
        v = rng.standard_normal(n).astype(np.float32)
        h.array[:] = v
        g.launch()
        s.synchronize()
        np.testing.assert_array_equal(out.array, v)
    with pytest.raises(cd.BufferInUseError):
        h.close()                 # the graph holds an array over it
    g.close()


def test_pageable_host_copies_inside_a_capture_are_refused_as_pageable(mod):
    s = cd.Stream()
    d = cd.Buffer.empty(64, np.float32, stream=s)
    fn = mod.function("scale")
    with s.capture() as g:
        fn.launch(1, 64, d, d, 1.0, 64, stream=s)
        with pytest.raises(cd.CaptureError, match="pageable host memory"):
            d.write(np.ones(64, np.float32), stream=s)
        with pytest.raises(cd.CaptureError, match="pageable host memory"):
            d.read(out=np.empty(64, np.float32), stream=s, synchronize=False)
    g.launch()


# --- rule: strided memory is never read as contiguous ------------------------------------

def test_a_strided_tensor_argument_is_refused_unless_asked_for(mod):
    cupy = pytest.importorskip("cupy")
    fn = mod.function("scale")
    base = cupy.arange(64, dtype=cupy.float32)
    strided = base[::2]
    out = cupy.full(32, cupy.nan, dtype=cupy.float32)
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #1 .*strided memory .*data_pointer"):
        fn.launch(1, 32, out, strided, 1.0, 32)
    assert cupy.isnan(out).all()
    with pytest.raises(cd.ArgumentTypeError, match="not C-contiguous"):
        cd.asbuffer(strided)
    ptr = cd.data_pointer(strided, strided=True)      # the explicit opt-in: the kernel reads 32 floats from there
    fn.launch(1, 32, out, ptr, 1.0, 32)
    cupy.cuda.Device(0).synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), np.arange(32, dtype=np.float32))


# --- rule: signedness from the kernel wherever it can be known ---------------------------

def test_source_declarations_give_extern_c_kernels_exact_integer_ranges(mod):
    fn = mod.function("widths")
    assert fn.layout_source == "source+ptx"
    o8, o16, o32 = cd.Buffer.empty(1, np.int8), cd.Buffer.empty(1, np.int16), cd.Buffer.empty(1, np.int32)
    for bad, param in ((200, 3), (-129, 3)):
        with pytest.raises(cd.ArgumentTypeError, match=f"parameter #{param}.*8-bit signed"):
            fn.launch(1, 1, o8, o16, o32, bad, 0, 0, 0)
    with pytest.raises(cd.ArgumentTypeError, match="parameter #4.*16-bit signed"):
        fn.launch(1, 1, o8, o16, o32, 0, 40000, 0, 0)
    with pytest.raises(cd.ArgumentTypeError, match="parameter #5.*32-bit signed"):
        fn.launch(1, 1, o8, o16, o32, 0, 0, 2**31, 0)
    with pytest.raises(cd.ArgumentTypeError, match="parameter #6.*8-bit unsigned"):
        fn.launch(1, 1, o8, o16, o32, 0, 0, 0, -1)
    fn.launch(1, 1, o8, o16, o32, -56, -30000, 2**31 - 201, 200)
    assert (int(o8.to_numpy()[0]), int(o16.to_numpy()[0]), int(o32.to_numpy()[0])) == (-56, -30000, 2**31 - 1)


def test_mangled_names_give_cpp_kernels_exact_types_and_constness(mod, rng):
    fn = mod.function("tscale<short>")
    assert fn.layout_source == "mangled+ptx"
    kinds = [(p.kind.name, p.size, p.const) for p in fn.param_layout]
    assert kinds == [("POINTER", 8, False), ("POINTER", 8, True), ("INT", 2, None), ("INT", 4, None)]
    out = cd.Buffer.empty(4, np.int16)
    x = cd.Buffer.from_numpy(np.array([1, -2, 3, -4], np.int16))
    with pytest.raises(cd.ArgumentTypeError, match="parameter #2.*16-bit signed"):
        fn.launch(1, 4, out, x, 40000, 4)
    fn.launch(1, 4, out, x, -3, 4)
    assert out.to_numpy().tolist() == [-3, 6, -9, 12]


# --- rule: instrumentation is bounded ----------------------------------------------------

def test_profiling_a_million_launches_keeps_memory_flat(mod):
    from pycudadrv import profile

    fn = mod.function("scale")
    x = cd.Buffer.zeros(32, np.float32)
    p = fn.bind(1, 32, x, x, 1.0, 0)
    profile.reset()
    profile.enable()
    try:
        for _ in range(1_000_000):
            p()
            assert profile.pending() <= profile.MAX_PENDING
        pool = len(profile._profiler.pool) + 2 * profile.pending()
        assert pool <= 2 * profile.MAX_PENDING + 16       # events recycled, not accumulated
        assert profile.stats()["scale"][1] == 1_000_000
    finally:
        profile.disable()
        profile.reset()


# --- the breaker's finds of 2026-12-02: a free must wait for every stream that used the memory -----

def _input_on_its_stream(rng, n):
    """A stream of its own, fresh random float32 input x (and its host copy h) and a poisoned output y,
    both made on that stream and ready: (stream, h, x, y)."""
    a = cd.Stream()
    h = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(h, stream=a)
    y = poisoned(n, stream=a)
    a.synchronize()
    return a, h, x, y


def test_a_wrapper_of_an_owned_streams_handle_never_hides_that_stream_from_a_free(mod, rng):
    # A stream that comes back wrapped (Stream.from_handle(o.handle): through torch or CuPy, say) took the
    # owned stream's place among the allocation's users, and the owned stream's later uses, on the fast
    # path, were recorded nowhere: the free waited only for an event recorded before its last kernel.
    scale = mod.function("scale")
    n = 4096
    for _ in range(2):
        (a, h, x, y), o = _input_on_its_stream(rng, n), cd.Stream()
        scale.launch(16, 256, y, x, 2.0, n, stream=o)                 # x's users: o
        f = cd.Stream.from_handle(o.handle)
        scale.launch(16, 256, y, x, 3.0, n, stream=f)                 # the same stream, wrapped
        scale.launch(16, 256, y, x, -1.0, n, stream=o)                # o again (the fast path)
        assert any(u is o for u in x._user_streams()) and any(u is f for u in x._user_streams())
        got = y.to_numpy(stream=o)
        np.testing.assert_allclose(got, -1.0 * h.astype(np.float64), rtol=1e-6, atol=1e-6)
        x.close()
        y.close()
        o.close()
        a.close()


def test_a_closed_owned_stream_stays_a_user_when_the_legacy_stream_uses_the_memory(mod, rng):
    # A closed stream's handle reads NULL, the legacy stream's too: a use on Stream.from_handle(0) took
    # the closed stream's place (its final event no longer waited for) and recorded no event of its own,
    # so the free waited for nothing. Now the closed stream stays and the legacy stream's work is waited
    # for by an event recorded on it at the free.
    scale = mod.function("scale")
    n = 4096
    for _ in range(2):
        (a, h, x, y), o = _input_on_its_stream(rng, n), cd.Stream()
        scale.launch(16, 256, y, x, 2.0, n, stream=o)
        o.close()
        legacy = cd.Stream.from_handle(0)
        scale.launch(16, 256, y, x, 0.5, n, stream=legacy)
        users = x._user_streams()
        assert any(u is o for u in users) and any(u is legacy for u in users)
        legacy.synchronize()
        got = y.to_numpy(stream=a)
        np.testing.assert_allclose(got, 0.5 * h.astype(np.float64), rtol=1e-6, atol=1e-6)
        x.close()
        y.close()
        a.close()


def test_a_free_waits_for_a_kernel_on_the_legacy_stream_that_reads_the_memory(mod, rng):
    # The legacy stream (handle 0, torch's default stream) records no last-use event of its own: a free
    # after a use there waited for nothing, so memory handed out again on the allocation stream could be
    # overwritten while the kernel still read it. The free records an event on it now.
    slow = mod.function("spin_then_scale")
    n = 4096
    legacy = cd.Stream.from_handle(0)
    for _ in range(2):
        a, h, x, y = _input_on_its_stream(rng, n)
        slow.launch(16, 256, y, x, 0.5, n, spin_cycles(50), stream=legacy)    # reads x after 50 ms
        x.close()                                  # the free: after that kernel
        z = cd.Buffer.empty(n, np.float32, stream=a)
        z.fill(np.float32(np.nan), stream=a)       # x's memory again, most likely: NaN over it
        legacy.synchronize()
        a.synchronize()
        np.testing.assert_allclose(y.to_numpy(stream=a), 0.5 * h.astype(np.float64), rtol=1e-6, atol=1e-6)
        z.close()
        y.close()
        a.close()
