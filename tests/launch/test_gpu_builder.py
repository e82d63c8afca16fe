"""The launch builder (issue 23, cuda-async's kernel-launch builder): fn.builder(grid, block)
with push_arg / push_tensor, launch(), bind(), submit() and await. Real kernels compiled by
pycudadrv.compile, values against a NumPy float64 reference on fresh random input, outputs
poisoned (NaN) before each run. Foreign arrays through the builder are ordered after their
producer in fuzz/test_gpu_features_together.py (paths builder*)."""
import asyncio

import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

SRC = r"""
extern "C" __global__ void affine(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
// out (C order, contiguous) = x read through its shape and strides (in elements), times a
extern "C" __global__ void gather1(float* out, const float* x, long long n0, long long s0, float a) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n0) out[i] = a * x[i * s0];
}
extern "C" __global__ void gather2(float* out, const float* x, long long n0, long long n1,
                                   long long s0, long long s1, float a) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n0 * n1) out[i] = a * x[(i / n1) * s0 + (i % n1) * s1];
}
extern "C" __global__ void gather3(float* out, const float* x, long long n0, long long n1, long long n2,
                                   long long s0, long long s1, long long s2, float a) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n0 * n1 * n2) {
        long long k = i % n2, j = (i / n2) % n1, h = i / (n1 * n2);
        out[i] = a * x[h * s0 + j * s1 + k * s2];
    }
}
// the same with 32-bit shape and strides: the declaration decides their width
extern "C" __global__ void gather2i(float* out, const float* x, int n0, int n1, int s0, int s1, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n0 * n1) out[i] = a * x[(i / n1) * s0 + (i % n1) * s1];
}
extern "C" __global__ void gather1u(float* out, const float* x, unsigned int n0, unsigned int s0, float a) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n0) out[i] = a * x[i * s0];
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(SRC).load()


class _View:
    """Another library's (strided) array: CAI v3 over device memory at a byte offset into `buf`."""

    def __init__(self, buf, offset, shape, strides, stream=None):
        self.buf = buf
        cai = dict(buf.__cuda_array_interface__)
        cai.update(data=(buf.ptr + offset, False), shape=tuple(shape), strides=tuple(strides))
        if stream is not None:
            cai["stream"] = stream.handle
        self.__cuda_array_interface__ = cai


def _poisoned(n):
    out = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    out.stream.synchronize()
    return out


def _device_view(host_base, view):
    """A device copy of `host_base` and a _View of it matching the numpy view `view` of it."""
    base = cd.Buffer.from_numpy(host_base)
    offset = view.__array_interface__["data"][0] - host_base.__array_interface__["data"][0]
    return base, _View(base, offset, view.shape, view.strides)


def grid_of(n):
    return (n + 255) // 256


# --- scalars and pointers ---------------------------------------------------------------------

def test_push_arg_scalars_and_pointers_launch_the_kernel(mod, rng):
    fn = mod.function("affine")
    n = 3000
    for _ in range(2):                  # twice in one process, after the previous run
        xh = rng.standard_normal(n).astype(np.float32)
        a, b = float(rng.standard_normal()), float(rng.standard_normal())
        x, y = cd.Buffer.from_numpy(xh), _poisoned(n)
        builder = fn.builder(grid_of(n), 256).push_arg(y).push_arg(x).push_arg(a).push_arg(b).push_arg(n)
        assert builder.num_pushed == 5 and builder.args[0] is y
        builder.launch()
        np.testing.assert_allclose(y.to_numpy(), a * xh.astype(np.float64) + b, rtol=1e-5, atol=1e-6)


def test_push_arg_bytes_are_the_generic_launchs(mod, rng):
    fn = mod.function("affine")
    x, y = cd.Buffer.from_numpy(rng.standard_normal(8).astype(np.float32)), _poisoned(8)
    builder = fn.builder(1, 32).push_arg(y).push_arg(x).push_arg(1.5).push_arg(np.float32(-2.0)).push_arg(8)
    assert builder.param_bytes() == fn.bind(1, 32, y, x, 1.5, np.float32(-2.0), 8).param_bytes()
    assert builder.param_bytes()[2] == np.float32(1.5).tobytes()      # the declared width, not a double


def test_a_builder_launches_again_and_after_a_generic_launch(mod, rng):
    fn = mod.function("affine")
    n = 1000
    xh = rng.standard_normal(n).astype(np.float32)
    x, y = cd.Buffer.from_numpy(xh), _poisoned(n)
    fn.launch(grid_of(n), 256, y, x, 3.0, 1.0, n)            # a generic launch first
    np.testing.assert_allclose(y.to_numpy(), 3.0 * xh.astype(np.float64) + 1.0, rtol=1e-5, atol=1e-6)
    builder = fn.builder(grid_of(n), 256).push_arg(y).push_arg(x).push_arg(-2.0).push_arg(0.5).push_arg(n)
    for _ in range(2):
        y.fill(np.float32(np.nan))
        builder.launch()
        np.testing.assert_allclose(y.to_numpy(), -2.0 * xh.astype(np.float64) + 0.5, rtol=1e-5, atol=1e-6)


# --- tensors --------------------------------------------------------------------------------------

def _expect_tensor_slots(builder, first, shape, strides):
    got = [int(np.frombuffer(v, np.int64)[0]) for v in builder.param_bytes()[first:first + 2 * len(shape)]]
    assert got == list(shape) + list(strides)


@pytest.mark.parametrize("layout", ["buffer", "c", "f", "strided"])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_push_tensor_gives_pointer_shape_and_strides_in_elements(mod, rng, rank, layout):
    fn = mod.function(f"gather{rank}")
    for _ in range(2):
        shape = tuple(int(v) for v in rng.integers(2, 9, size=rank))
        if layout == "strided":          # every other element of a larger array, from an offset
            big = rng.standard_normal(tuple(2 * s + 1 for s in shape)).astype(np.float32)
            view = big[(slice(1, None, 2),) * rank]
        elif layout == "f":
            big = np.asfortranarray(rng.standard_normal(shape).astype(np.float32))
            view = big
        else:
            big = rng.standard_normal(shape).astype(np.float32)
            view = big
        if layout == "buffer":
            base = x = cd.Buffer.from_numpy(big)
        elif layout == "f":
            base, x = _device_view_f(big)
        else:
            base, x = _device_view(big, view)
        n = view.size
        a = float(rng.standard_normal())
        out = _poisoned(n)
        builder = fn.builder(grid_of(n), 256).push_arg(out).push_tensor(x).push_arg(a)
        assert builder.num_pushed == 3 + 2 * rank
        _expect_tensor_slots(builder, 2, view.shape, [s // 4 for s in view.strides])
        builder.launch()
        np.testing.assert_allclose(out.to_numpy(), a * view.astype(np.float64).ravel(), rtol=1e-5, atol=1e-6)
        del base


def _device_view_f(f_host):
    """A device copy of Fortran-ordered `f_host` and a _View of it with its (column-major) strides."""
    base = cd.Buffer.from_numpy(f_host.reshape(-1, order="F"))
    return base, _View(base, 0, f_host.shape, f_host.strides)


def test_push_tensor_of_a_buffer_view_and_of_raw_bytes(mod, rng):
    fn = mod.function("gather2")
    xh = rng.standard_normal((6, 5)).astype(np.float32)
    x = cd.Buffer.from_numpy(xh)
    out = _poisoned(30)
    builder = fn.builder(1, 64).push_arg(out).push_tensor(x.view(np.float32, (6, 5))).push_arg(1.0)
    _expect_tensor_slots(builder, 2, (6, 5), (5, 1))
    builder.launch()
    np.testing.assert_allclose(out.to_numpy(), xh.astype(np.float64).ravel(), rtol=1e-6)
    raw = mod.function("gather1").builder(1, 1).push_arg(out).push_tensor(x.view(None))
    _expect_tensor_slots(raw, 2, (120,), (1,))          # no dtype: bytes


def test_push_tensor_takes_the_width_the_kernel_declares(mod, rng):
    xh = rng.standard_normal((4, 7)).astype(np.float32)
    x = cd.Buffer.from_numpy(xh)
    out = _poisoned(28)
    builder = mod.function("gather2i").builder(1, 64).push_arg(out).push_tensor(x).push_arg(2.0)
    assert [np.frombuffer(v, np.int32)[0] for v in builder.param_bytes()[2:6]] == [4, 7, 7, 1]
    assert all(len(v) == 4 for v in builder.param_bytes()[2:6])
    builder.launch()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * xh.astype(np.float64).ravel(), rtol=1e-6)
    ub = mod.function("gather1u").builder(1, 32).push_arg(out).push_tensor(x[0:7]).push_arg(1.0)
    assert [np.frombuffer(v, np.uint32)[0] for v in ub.param_bytes()[2:4]] == [7, 1]


# --- bind, await, capture ---------------------------------------------------------------------------

def test_bind_gives_a_prepared_launch_that_launches_twice(mod, rng):
    fn = mod.function("gather2")
    big = rng.standard_normal((9, 8)).astype(np.float32)
    view = big[1::2, ::3]
    base, x = _device_view(big, view)
    out = _poisoned(view.size)
    a = float(rng.standard_normal())
    p = fn.builder(1, 64).push_arg(out).push_tensor(x).push_arg(a).bind()
    assert isinstance(p, cd.PreparedLaunch)
    for launch in (p, p.launch):
        out.fill(np.float32(np.nan))
        launch()
        np.testing.assert_allclose(out.to_numpy(), a * view.astype(np.float64).ravel(), rtol=1e-5, atol=1e-6)


def test_await_a_builder_and_its_submit(mod, rng):
    fn = mod.function("affine")
    n = 2048
    xh = rng.standard_normal(n).astype(np.float32)
    x, y1, y2 = cd.Buffer.from_numpy(xh), _poisoned(n), _poisoned(n)
    cd.Device(0).synchronize()
    s = cd.Stream()

    async def main():
        await fn.builder(grid_of(n), 256).push_arg(y1).push_arg(x).push_arg(2.0).push_arg(1.0).push_arg(n)
        fut = fn.builder(grid_of(n), 256).push_arg(y2).push_arg(x).push_arg(-1.0).push_arg(0.0).push_arg(n).submit(
            stream=s)
        await fut
        return fut

    for _ in range(2):
        y1.fill(np.float32(np.nan))
        y2.fill(np.float32(np.nan))
        cd.Device(0).synchronize()
        fut = asyncio.run(main())
        assert fut.stream is s and fut.done()
        np.testing.assert_allclose(y1.to_numpy(), 2.0 * xh.astype(np.float64) + 1.0, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y2.to_numpy(), -xh.astype(np.float64), rtol=1e-6)


def test_a_builder_launch_inside_a_capture_replays(mod, rng):
    fn = mod.function("gather1")
    n = 500
    xh = rng.standard_normal(2 * n).astype(np.float32)
    base, x = _device_view(xh, xh[::2])
    out = _poisoned(n)
    s = cd.Stream()
    fn.launch(grid_of(n), 256, out, cd.Buffer.from_numpy(xh[::2].copy()), n, 1, 1.0, stream=s)   # a neighbour
    builder = fn.builder(grid_of(n), 256, stream=s).push_arg(out).push_tensor(x).push_arg(3.0)
    with s.capture() as graph:
        builder.launch()
    for _ in range(2):
        out.fill(np.float32(np.nan), stream=s)
        graph.launch(s)
        s.synchronize()
        np.testing.assert_allclose(out.to_numpy(), 3.0 * xh[::2].astype(np.float64), rtol=1e-6)


# --- errors -------------------------------------------------------------------------------------

def test_too_few_arguments_at_launch_name_the_kernel_and_the_count(mod):
    y = cd.Buffer.empty(4, np.float32)
    b = mod.function("affine").builder(1, 32).push_arg(y).push_arg(y)
    for call in (b.launch, b.bind):
        with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'affine' takes 5 arguments .*, 2 pushed"):
            call()


def test_too_many_arguments_name_the_kernel_and_the_count(mod):
    y = cd.Buffer.empty(4, np.float32)
    b = mod.function("affine").builder(1, 32).push_arg(y).push_arg(y).push_arg(1.0).push_arg(1.0).push_arg(4)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'affine' takes 5 arguments .*argument #5"):
        b.push_arg(1)
    b2 = mod.function("gather2").builder(1, 32).push_arg(y)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'gather2' takes 7 arguments .*rank-3 tensor at #1 "
                                                   r"needs 7 .*6 are left"):
        b2.push_tensor(cd.Buffer.empty((2, 2, 2), np.float32))
    assert b.num_pushed == 5 and b2.num_pushed == 1


def test_a_wrong_kind_names_the_parameter_and_leaves_the_builder_as_it_was(mod, rng):
    fn = mod.function("affine")
    xh = rng.standard_normal(16).astype(np.float32)
    x, y = cd.Buffer.from_numpy(xh), _poisoned(16)
    b = fn.builder(1, 32).push_arg(y)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'affine', parameter #1 \(8-byte pointer parameter\)"):
        b.push_arg(2.5)
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #1 .*host numpy array"):
        b.push_arg(xh)
    assert b.num_pushed == 1
    b.push_arg(x).push_arg(2.0)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'affine', parameter #3 .*None"):
        b.push_arg(None)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'affine', parameter #4 .*out of range"):
        b.push_arg(1.0).push_arg(2**40)
    b.push_arg(16).launch()                   # the failed pushes left nothing behind
    np.testing.assert_allclose(y.to_numpy(), 2.0 * xh.astype(np.float64) + 1.0, rtol=1e-5, atol=1e-6)


def test_push_tensor_errors_name_the_kernel_and_the_parameter(mod):
    y = cd.Buffer.empty(64, np.float32)
    g2 = mod.function("gather2")
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'gather2', parameter #1: push_tensor takes a device "
                                                   r"array.*Buffer.from_numpy"):
        g2.builder(1, 1).push_arg(y).push_tensor(np.zeros((2, 2), np.float32))
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #1: push_tensor takes a device array"):
        g2.builder(1, 1).push_arg(y).push_tensor(3)
    with pytest.raises(cd.ArgumentValueError, match=r"kernel 'gather2', parameter #1: strides \(24, 6\) .*not whole"):
        g2.builder(1, 1).push_arg(y).push_tensor(_View(y, 0, (2, 3), (24, 6)))
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'gather2', parameter #1: .*negative stride"):
        g2.builder(1, 1).push_arg(y).push_tensor(_View(y, 64, (2, 3), (-24, 8)))
    # a shape or stride needs an integer parameter: affine's #2 is a float
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'affine', parameter #2: the tensor pushed at #1 gives "
                                                   r"its shape\[0\] here, which needs an integer parameter"):
        mod.function("affine").builder(1, 1).push_arg(y).push_tensor(y)
    # a shape beyond the declared 32-bit width
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'gather1u', parameter #2 .*out of range"):
        mod.function("gather1u").builder(1, 1).push_arg(y).push_tensor(_View(y, 0, (2**33,), (4,)))
    b = g2.builder(1, 1).push_arg(y)
    with pytest.raises(cd.ArgumentTypeError):
        b.push_tensor(object())
    assert b.num_pushed == 1


def test_a_buffer_closed_after_its_push_is_refused_at_launch(mod):
    y, x = cd.Buffer.empty(8, np.float32), cd.Buffer.empty(8, np.float32)
    b = mod.function("affine").builder(1, 32).push_arg(y).push_arg(x).push_arg(1.0).push_arg(0.0).push_arg(8)
    x.close()
    with pytest.raises(cd.ClosedError, match=r"kernel 'affine', parameter #1"):
        b.launch()


def test_a_builder_is_made_by_function_builder_only_and_checks_its_configuration(mod):
    with pytest.raises(cd.ArgumentTypeError, match="fn.builder"):
        cd.LaunchBuilder()
    fn = mod.function("affine")
    with pytest.raises(cd.ArgumentValueError, match="affine"):
        fn.builder(1, 100000)
    with pytest.raises(cd.ArgumentTypeError):
        fn.builder(1, 32, shared_mem_bytes="4")
    assert "affine" in repr(fn.builder(2, 64)) and "0/5 arguments pushed" in repr(fn.builder(2, 64))


class _NotADictCAI:
    __cuda_array_interface__ = 5


def test_push_tensor_refuses_a_cuda_array_interface_that_is_not_a_dict(mod):
    out = cd.Buffer.empty(4, np.float32)
    b = mod.function("gather1").builder(1, 4).push_arg(out)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'gather1', parameter #1: push_tensor: its "
                                                   r"__cuda_array_interface__ must be a dict, got int"):
        b.push_tensor(_NotADictCAI())
    assert b.num_pushed == 1
