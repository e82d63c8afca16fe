"""GPU tests of memory: views, copies, pinned memory, CAI/DLPack interop with
CuPy and PyTorch (where installed), and several GPUs (where present)."""
import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

SCALE = r"""
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
"""


@pytest.fixture(scope="module")
def scale():
    return cd.compile(SCALE).load().function("scale")


def test_from_numpy_copies_non_contiguous_input_correctly(rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = cd.Buffer.from_numpy(a[:, ::2])
    np.testing.assert_array_equal(b.to_numpy(), a[:, ::2])


def test_element_slices_copies_with_offsets_and_fill(rng):
    x = rng.standard_normal(100).astype(np.float32)
    src = cd.Buffer.from_numpy(x)
    dst = cd.Buffer.from_numpy(np.full(100, np.nan, np.float32))
    src[10:30].copy_to(dst[50:70])
    src.copy_to(dst, nbytes=40, src_offset=4 * 90, dst_offset=0)
    got = dst.to_numpy()
    np.testing.assert_array_equal(got[50:70], x[10:30])
    np.testing.assert_array_equal(got[:10], x[90:])
    assert np.isnan(got[10:50]).all() and np.isnan(got[70:]).all()
    with pytest.raises(ValueError, match="overruns destination"):
        src.copy_to(dst[90:])
    v = dst[0:4]
    v.fill(np.uint16(0x3C00))
    assert v.to_numpy().view(np.uint16).tolist() == [0x3C00] * 8


def test_view_of_a_closed_buffer_raises():
    b = cd.Buffer.zeros(64, np.float32)
    v = b[8:16]
    b.close()
    with pytest.raises(ValueError, match="view of a closed buffer"):
        v.to_numpy()


def test_pinned_host_buffer_round_trip_async(rng):
    x = rng.standard_normal(1 << 16).astype(np.float32)
    s = cd.Stream()
    h = cd.HostBuffer.empty(x.shape, np.float32)
    h.array[:] = x
    d = cd.Buffer.empty(x.shape, np.float32, stream=s)
    d.write(h.array, stream=s)
    back = cd.HostBuffer.empty(x.shape, np.float32)
    back.array[:] = np.nan
    d.read(out=back.array, stream=s, synchronize=False)
    s.synchronize()
    np.testing.assert_array_equal(back.array, x)
    arr = back.array
    with pytest.raises(BufferError, match="still alive"):
        back.close()
    del arr
    import gc
    gc.collect()


def test_pinned_copies_overlap_with_compute(rng):
    """A pinned DtoH copy on one stream finishes while a long kernel runs on another."""
    spin = cd.compile(r'extern "C" __global__ void spin(long long c) { long long t = clock64();'
                      r' while (clock64() - t < c) {} }').load().function("spin")
    s1, s2 = cd.Stream(), cd.Stream()
    d = cd.Buffer.zeros(1 << 22, np.float32, stream=s2)
    h = cd.HostBuffer.empty(1 << 22, np.float32)
    s2.synchronize()
    clock_khz = cd.Device(0).attribute("clock_rate")
    spin.launch(1, 1, int(300 * clock_khz), stream=s1)   # ~300 ms
    e0 = cd.Event().record(s2)
    d.read(out=h.array, stream=s2, synchronize=False)
    e1 = cd.Event().record(s2)
    e1.synchronize()
    assert not s1.query()              # the kernel is still running: the copy overlapped it
    assert cd.Event.elapsed_ms(e0, e1) < 100
    s1.synchronize()


def test_cuda_array_interface_round_trip_keeps_pointer():
    b = cd.Buffer.zeros((8, 4), np.float32)
    cai = b.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (8, 4) and cai["typestr"] == "<f4"
    w = cd.asbuffer(_CAI(cai))
    assert w.ptr == b.ptr and w.shape == (8, 4) and w.dtype == np.float32


class _CAI:
    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


def test_dlpack_export_round_trips_through_our_own_import(rng):
    x = rng.standard_normal((16, 3)).astype(np.float32)
    b = cd.Buffer.from_numpy(x)
    w = cd.asbuffer(b_as_dlpack_only(b))
    assert w.ptr == b.ptr and w.shape == (16, 3) and w.dtype == np.float32
    np.testing.assert_array_equal(w.to_numpy(), x)


class b_as_dlpack_only:
    def __init__(self, b):
        self.b = b

    def __dlpack__(self, **kw):
        return self.b.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.b.__dlpack_device__()


def test_cupy_round_trip_zero_copy_and_kernel_on_cupy_stream(scale, rng):
    cp = pytest.importorskip("cupy")
    x = rng.standard_normal(4096).astype(np.float32)
    cx = cp.asarray(x)
    bx = cd.asbuffer(cx)
    assert bx.ptr == cx.data.ptr
    out = cp.full(4096, cp.nan, dtype=cp.float32)
    st = cp.cuda.Stream(non_blocking=True)
    scale.launch(16, 256, cd.asbuffer(out), bx, 2.0, 4096, stream=cd.Stream.from_handle(st))
    st.synchronize()
    np.testing.assert_allclose(cp.asnumpy(out), 2.0 * x.astype(np.float64), rtol=1e-6)
    back = cp.asarray(bx)        # CuPy reads our CAI: zero copy
    assert back.data.ptr == bx.ptr
    via_dlpack = cp.from_dlpack(bx)
    assert via_dlpack.data.ptr == bx.ptr


def test_torch_tensor_written_by_a_pycudadrv_kernel_is_seen_by_torch(scale, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = torch.from_numpy(rng.standard_normal(4096).astype(np.float32)).cuda()
    out = torch.full((4096,), float("nan"), device="cuda")
    ts = torch.cuda.Stream()
    torch.cuda.current_stream().synchronize()
    bo, bx = cd.asbuffer(out), cd.asbuffer(x)
    assert bo.ptr == out.data_ptr() and bx.ptr == x.data_ptr()
    scale.launch(16, 256, bo, bx, -3.0, 4096, stream=cd.Stream.from_handle(ts))
    ts.synchronize()
    torch.testing.assert_close(out, -3.0 * x)
    # DLPack both ways keep the pointer
    t2 = torch.from_dlpack(bx)
    assert t2.data_ptr() == bx.ptr
    b3 = cd.asbuffer(_DL(x))
    assert b3.ptr == x.data_ptr()
    # torch can run on a pycudadrv stream
    s = cd.Stream()
    with torch.cuda.stream(torch.cuda.ExternalStream(s.handle)):
        y = x * 2
    s.synchronize()
    torch.testing.assert_close(y, 2 * x)


class _DL:
    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kw):
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_several_gpus_copies_and_peer_checks(scale, rng):
    if cd.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    d0, d1 = cd.Device(0), cd.Device(1)
    x = rng.standard_normal(1 << 16).astype(np.float32)
    a = cd.Buffer.from_numpy(x, device=d0)
    b = cd.Buffer.from_numpy(np.full(x.shape, np.nan, np.float32), device=d1)
    a.copy_to(b)
    a.stream.synchronize()
    np.testing.assert_array_equal(b.to_numpy(), x)
    f1 = cd.compile(SCALE, arch=d1.arch).load(device=d1).function("scale")
    out1 = cd.Buffer.from_numpy(np.full(x.shape, np.nan, np.float32), device=d1)
    if not d1.peer_access_enabled(d0):
        with pytest.raises(ValueError, match="lives on device 0"):
            f1.launch(256, 256, out1, a, 2.0, x.size)
    if d1.can_access_peer(d0):
        d1.enable_peer_access(d0)
        f1.launch(256, 256, out1, a, 2.0, x.size)
        np.testing.assert_allclose(out1.to_numpy(), 2.0 * x.astype(np.float64), rtol=1e-6)
