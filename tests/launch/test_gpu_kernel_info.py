"""What CuPy and cuda.core users reach for: module globals, occupancy, function
attributes, and a module cache whose key covers what decides the layout."""
import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

SRC = r"""
__constant__ float coeff[4];
__device__ int counter;
__device__ float table[256];
extern "C" __global__ void poly(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = ((coeff[3] * v + coeff[2]) * v + coeff[1]) * v + coeff[0];
        atomicAdd(&counter, 1);
    }
}
extern "C" __global__ void lookup(float* y, const int* idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = table[idx[i] & 255];
}
extern "C" __global__ void __launch_bounds__(256) heavy(float* y, int n) {
    __shared__ float tile[1024];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = (float)i;
    __syncthreads();
    if (i < n) y[i] = tile[(threadIdx.x + 1) % blockDim.x];
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(SRC).load()


# --- module globals -----------------------------------------------------------------------

def test_constant_and_device_globals_are_writable_buffers_kernels_see(mod, rng):
    c = rng.standard_normal(4).astype(np.float32)
    g = mod.get_global("coeff", np.float32)
    assert g.nbytes == 16 and g.shape == (4,)
    g.write(c)
    counter = mod.get_global("counter", np.int32)
    counter.fill(np.int32(0))
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    mod.function("poly").launch((n + 255) // 256, 256, y, cd.Buffer.from_numpy(x), n)
    ref = np.polyval(c[::-1].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-5, atol=1e-5)
    assert int(counter.to_numpy()[0]) == n
    np.testing.assert_array_equal(g.to_numpy(), c)


def test_a_device_table_global_round_trips(mod, rng):
    t = rng.standard_normal(256).astype(np.float32)
    table = mod.get_global("table", np.float32)
    table.write(t)
    idx = rng.integers(0, 256, 512).astype(np.int32)
    y = cd.Buffer.from_numpy(np.full(512, np.nan, np.float32))
    mod.function("lookup").launch(2, 256, y, cd.Buffer.from_numpy(idx), 512)
    np.testing.assert_array_equal(y.to_numpy(), t[idx])


def test_an_unknown_global_lists_the_modules_globals(mod):
    with pytest.raises(cd.ArgumentValueError, match=r"no __device__/__constant__ variable 'coef'.*coeff.*counter.*table"):
        mod.get_global("coef")
    with pytest.raises(cd.ArgumentValueError, match="whole number of"):
        mod.get_global("coeff", np.dtype((np.float32, 3)))


def test_globals_close_with_their_module(rng):
    # a kernel more, so the image differs: the same bytes would return the shared cached module
    m = cd.compile(SRC + 'extern "C" __global__ void own_module() {}\n').load()
    assert m is not cd.compile(SRC).load()
    g = m.get_global("coeff", np.float32)
    m.unload()
    with pytest.raises(cd.ClosedError, match="module was unloaded"):
        g.write(np.zeros(4, np.float32))


# --- occupancy and attributes ---------------------------------------------------------------

def test_occupancy_queries_agree_with_the_device_limits(mod):
    fn = mod.function("heavy")
    dev = cd.Device(0)
    per_sm = fn.max_active_blocks_per_multiprocessor(256)
    assert 1 <= per_sm <= dev.attribute("max_blocks_per_multiprocessor")
    assert fn.max_cooperative_grid(256) == per_sm * dev.multiprocessor_count
    min_grid, block = fn.max_potential_block_size()
    assert 32 <= block <= 256 and block % 32 == 0 and min_grid >= dev.multiprocessor_count
    seen = []
    mg2, b2 = fn.max_potential_block_size(lambda bs: seen.append(bs) or 4 * bs)
    assert seen and all(s > 0 for s in seen) and b2 <= 256
    more_smem = fn.max_active_blocks_per_multiprocessor(256, shared_mem_bytes=48 * 1024)
    assert more_smem <= per_sm
    assert fn.available_dynamic_shared_memory(1, 256) > 0
    with pytest.raises(cd.ArgumentValueError, match="MAX_THREADS_PER_BLOCK = 256"):
        fn.max_active_blocks_per_multiprocessor(512)
    with pytest.raises(cd.ArgumentTypeError):
        fn.max_potential_block_size(lambda bs: "many")


def test_function_attributes_by_name(mod):
    fn = mod.function("heavy")
    assert fn.attribute("max_threads_per_block") == 256
    assert fn.attribute("shared_size_bytes") == 4096 == fn.static_shared_bytes
    assert fn.attribute("NUM_REGS") > 0 and fn.attribute("CU_FUNC_ATTRIBUTE_PTX_VERSION") >= 80
    attrs = fn.attributes
    assert attrs["binary_version"] == 90 and attrs["local_size_bytes"] == 0
    fn.set_attribute("max_dynamic_shared_size_bytes", 64 * 1024)
    assert fn.attribute("max_dynamic_shared_size_bytes") == 64 * 1024
    fn.set_attribute("preferred_shared_memory_carveout", 50)
    fn.set_cache_preference("shared")
    with pytest.raises(cd.ArgumentValueError, match="read-only"):
        fn.set_attribute("num_regs", 32)
    with pytest.raises(cd.ArgumentValueError, match="unknown function attribute 'registers'"):
        fn.attribute("registers")
    with pytest.raises(cd.ArgumentValueError, match="cache preference"):
        fn.set_cache_preference("huge")
    with pytest.raises(cd.ArgumentValueError, match="max_dynamic_shared_size_bytes must be in"):
        fn.set_attribute("max_dynamic_shared_size_bytes", 10**7)


# --- the module cache key covers what decides the layout -----------------------------------

def test_the_same_cubin_with_and_without_its_ptx_are_separate_cache_entries():
    obj = cd.compile(r'extern "C" __global__ void k(float* y, int n) { if (n > 0) y[0] = 1.0f; }')
    bare = cd.load_module(obj.image)                      # CUBIN alone: sizes from the driver
    typed = cd.load_module(obj.image, ptx=obj.ptx)        # the same CUBIN with its PTX
    assert bare is not typed
    assert bare.function("k").layout_source in ("cuFuncGetParamInfo", "unknown")
    assert typed.function("k").layout_source.endswith("ptx")
    assert cd.load_module(obj.image, ptx=obj.ptx) is typed


def test_a_devices_limits_are_read_only():
    """Launch validation reads Device.max_threads_per_block: a user's write would change what every
    later launch on that device is checked against, so it is refused."""
    dev = cd.Device(0)
    limit = dev.max_threads_per_block
    assert limit == dev.attribute("max_threads_per_block")
    with pytest.raises(AttributeError):
        dev.max_threads_per_block = 4 * limit
    assert cd.Device(0).max_threads_per_block == limit
