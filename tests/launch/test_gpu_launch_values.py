"""GPU tests: real driver, real NVRTC, real kernels, values checked against
NumPy float64 on fresh random input, outputs poisoned first."""
import re
import struct
import threading

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import heat

pytestmark = pytest.mark.gpu

SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
"""


@pytest.fixture(scope="module")
def saxpy_module():
    return cd.compile(SAXPY).load()


def rel_err(out, ref):
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


# --- devices, streams, buffers ---------------------------------------------------

def test_device_properties_are_real():
    d = cd.Device(0)
    assert cd.device_count() >= 1
    assert d.name and d.multiprocessor_count > 0 and d.total_memory > 2**30
    assert d.compute_capability >= (7, 0)
    assert d.attribute("multiprocessor_count") == d.multiprocessor_count
    assert d.attribute("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK") == 1024
    assert cd.driver_version() >= (12, 0)
    with pytest.raises(ValueError, match="unknown device attribute"):
        d.attribute("warp_drive")
    with pytest.raises(ValueError, match="out of range"):
        cd.Device(cd.device_count())


def test_default_stream_is_owned_nonblocking_and_shared():
    s = cd.Device(0).default_stream
    assert s is cd.Device(0).default_stream and s.handle != 0


def test_stream_priority_range_is_cudas_numbering_with_the_default_0_inside():
    least, greatest = cd.Stream.priority_range()
    assert greatest <= 0 <= least          # lower numbers are higher priority; 0 is the default
    assert cd.Stream.priority_range(cd.Device(0)) == (least, greatest)


def test_a_stream_reports_the_priority_it_was_created_with():
    least, greatest = cd.Stream.priority_range()
    assert cd.Stream().priority == 0
    assert cd.Device(0).default_stream.priority == 0
    for p in sorted({least, greatest, (least + greatest) // 2}):
        with cd.Stream(priority=p) as s:
            assert s.priority == p
    with cd.Stream(priority=np.int32(greatest), nonblocking=False) as s:
        assert s.priority == greatest


@pytest.mark.parametrize("outside", ["above", "below"])
def test_a_priority_outside_the_range_is_refused_naming_the_range_not_clamped(outside):
    least, greatest = cd.Stream.priority_range(0)
    p = least + 1 if outside == "above" else greatest - 1
    with pytest.raises(cd.ArgumentValueError) as ei:
        cd.Stream(0, priority=p)
    assert str(ei.value) == (f"Stream: priority {p} is outside the range of device 0: {greatest} (highest) to "
                             f"{least} (lowest); lower numbers are higher priority in CUDA, 0 is the default")
    with pytest.raises(cd.ArgumentValueError, match="is outside the range of device 0"):
        cd.Stream(0, priority=2**70 if outside == "above" else -2**70)      # never truncated to a C int


def test_a_priority_stream_is_closed_like_any_other():
    s = cd.Stream(priority=cd.Stream.priority_range()[1])
    s.close()
    with pytest.raises(cd.ClosedError, match="stream is closed"):
        s.priority


def test_kernels_on_a_highest_priority_stream_match_numpy(saxpy_module, rng):
    n = 50_001
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(-3, 3))
    with cd.Stream(priority=cd.Stream.priority_range()[1]) as s:
        bx, by = cd.Buffer.from_numpy(x, stream=s), cd.Buffer.from_numpy(y, stream=s)
        saxpy_module.function("saxpy").launch((n + 255) // 256, 256, by, bx, a, n, stream=s)
        out = by.to_numpy(out=np.full(n, np.nan, np.float32), stream=s)
    assert rel_err(out, a * x.astype(np.float64) + y) < 1e-6


def test_buffer_round_trip_and_out(rng):
    a = rng.standard_normal(1000).astype(np.float32)
    b = cd.Buffer.from_numpy(a)
    assert b.nbytes == 4000 and b.ptr != 0 and b.dtype == np.float32 and b.shape == (1000,)
    np.testing.assert_array_equal(b.to_numpy(), a)
    out = np.full(1000, np.nan, dtype=np.float32)
    assert b.to_numpy(out=out) is out
    np.testing.assert_array_equal(out, a)


def test_buffer_zeros_and_fill(rng):
    z = cd.Buffer.zeros(64, np.float32)
    poison = np.full(64, np.nan, np.float32)
    np.testing.assert_array_equal(z.to_numpy(out=poison), np.zeros(64, np.float32))
    z.fill(np.float32(1.5))
    assert (z.to_numpy() == 1.5).all()


def test_buffer_close_is_idempotent_and_use_after_close_raises():
    b = cd.Buffer.empty(16)
    b.close()
    b.close()
    with pytest.raises(ValueError, match="closed"):
        b.ptr
    with pytest.raises(ValueError, match="closed"):
        b.to_numpy()


def test_empty_buffer_has_null_pointer():
    b = cd.Buffer.empty(0)
    assert b.ptr == 0 and b.nbytes == 0 and b.to_numpy().size == 0


def test_read_write_out_of_range_raise():
    b = cd.Buffer.empty(16)
    with pytest.raises(ValueError, match="overruns"):
        b.write(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="overruns"):
        b.read(offset=8, nbytes=16)
    with pytest.raises(ValueError, match="C-contiguous"):
        b.read(out=np.zeros((4, 4), np.uint8)[:, ::4])


def test_out_of_memory_says_bytes_asked_and_free():
    with pytest.raises(cd.CudaError) as ei:
        cd.Buffer.empty(1 << 50)
    assert ei.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert str(1 << 50) in str(ei.value) and "bytes free" in str(ei.value)


# --- modules ---------------------------------------------------------------------

def test_saxpy_matches_numpy_on_random_input(saxpy_module, rng):
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(-3, 3))
    bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y)
    saxpy_module.function("saxpy").launch((n + 255) // 256, 256, by, bx, a, n)
    ref = a * x.astype(np.float64) + y
    assert rel_err(by.to_numpy(), ref) < 1e-6


def test_loading_the_same_bytes_returns_the_cached_module():
    obj = cd.compile(SAXPY)
    m1 = cd.load_module(obj)
    m2 = cd.load_module(bytes(obj.image), ptx=obj.ptx, source_decls=obj.source_decls)
    assert m1 is m2 and m1.hash == cd._driver.fnv1a64(obj.image)
    # without the source's declarations the layouts may differ (signedness), so it is another entry
    assert cd.load_module(bytes(obj.image), ptx=obj.ptx) is not m1
    other = cd.compile(SAXPY.replace("a * x[i] + y[i]", "a * x[i] - y[i]"))
    assert cd.load_module(other) is not m1


def test_ptx_text_loads_and_gives_typed_parameters():
    obj = cd.compile(SAXPY, target="ptx", arch="compute_%d%d" % cd.Device(0).compute_capability)
    try:
        m = cd.load_module(obj.image)
    except cd.CudaError as e:
        assert e.name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
        pytest.skip("NVRTC is newer than the driver; covered by test_ptx_newer_than_driver")
    f = m.function("saxpy")
    assert m.kind == "ptx" and f.layout_source == "ptx" and f.num_params == 4


def test_missing_entry_point_names_it_and_lists_exports(saxpy_module):
    with pytest.raises(cd.CudaError) as ei:
        saxpy_module.function("saxpyy")
    msg = str(ei.value)
    assert ei.value.name == "CUDA_ERROR_NOT_FOUND" and "'saxpyy'" in msg
    assert "saxpy" in msg.split("exports:")[1] and "scale" in msg.split("exports:")[1]


def test_invalid_ptx_raises_with_the_jit_log():
    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry bad() {\n  bogus.instr %r1;\n}\n"
    with pytest.raises(cd.CudaError) as ei:
        cd.load_module(ptx)
    assert "JIT error log" in str(ei.value) and "bogus" in str(ei.value)


def test_ptx_newer_than_driver_fails_clearly_and_cubin_for_the_device_works(rng):
    # Make PTX that claims an ISA version far beyond any driver: the driver refuses it, exactly as it
    # refuses PTX from an NVRTC newer than itself.
    obj = cd.compile(SAXPY, target="ptx", arch="compute_%d%d" % cd.Device(0).compute_capability)
    newer = re.sub(rb"\.version \d+\.\d+", b".version 99.9", obj.image)
    with pytest.raises(cd.CudaError) as ei:
        cd.load_module(newer)
    assert ei.value.name in ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_INVALID_PTX")
    assert "compile to CUBIN" in str(ei.value) or "JIT error log" in str(ei.value)
    # The default target, CUBIN for this device's arch, loads whatever NVRTC's version is.
    m = cd.compile(SAXPY).load()
    x = rng.standard_normal(64).astype(np.float32)
    out = cd.Buffer.from_numpy(np.full(64, np.nan, np.float32))
    m.function("scale").launch(1, 64, out, cd.Buffer.from_numpy(x), 3.0, 64)
    assert rel_err(out.to_numpy(), 3.0 * x.astype(np.float64)) < 1e-6


def test_launch_from_a_new_thread_just_works(saxpy_module, rng):
    x = rng.standard_normal(4096).astype(np.float32)
    bx = cd.Buffer.from_numpy(x)
    out = cd.Buffer.from_numpy(np.full(4096, np.nan, np.float32))
    errors = []

    def worker():
        try:
            s = cd.Stream()
            saxpy_module.function("scale").launch(16, 256, out, bx, -2.0, 4096, stream=s)
            s.synchronize()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert not errors, errors
    assert rel_err(out.to_numpy(), -2.0 * x.astype(np.float64)) < 1e-6


def test_heat_diffusion_matches_numpy_reference_in_both_launch_modes():
    n, steps = 256, 300
    ref = heat.reference(heat.initial_grid(n), steps)
    out_launch, _ = heat.run(n, steps, mode="launch")
    out_prepared, _ = heat.run(n, steps, mode="prepared")
    assert heat.rel_error(out_launch, ref) < 1e-5
    np.testing.assert_array_equal(out_launch, out_prepared)


# --- marshalling on the device ----------------------------------------------------

ECHO_TYPES = {
    "bool": np.bool_, "signed char": np.int8, "unsigned char": np.uint8, "short": np.int16,
    "unsigned short": np.uint16, "int": np.int32, "unsigned int": np.uint32, "long long": np.int64,
    "unsigned long long": np.uint64, "__half": np.float16, "float": np.float32, "double": np.float64,
    "float2": np.complex64, "double2": np.complex128,
}


@pytest.fixture(scope="module")
def echo_module():
    src = ["#include <cuda_fp16.h>"]
    for i, t in enumerate(ECHO_TYPES):
        src.append(f'extern "C" __global__ void echo{i}(unsigned char* out, {t} v) {{'
                   f' const unsigned char* p = (const unsigned char*)&v;'
                   f' for (int k = 0; k < (int)sizeof(v); ++k) out[k] = p[k]; }}')
    return cd.compile("\n".join(src)).load()


@pytest.mark.parametrize("i, ctype", list(enumerate(ECHO_TYPES)))
def test_each_scalar_type_reaches_the_kernel_bit_for_bit(echo_module, i, ctype, rng):
    dt = np.dtype(ECHO_TYPES[ctype])
    raw = rng.integers(0, 256, dt.itemsize, dtype=np.uint8)
    if dt.kind == "b":
        raw[:] = 1
    value = raw.view(dt)[0]
    out = cd.Buffer.from_numpy(np.full(16, 0xAB, np.uint8))
    echo_module.function(f"echo{i}").launch(1, 1, out, value)
    assert out.to_numpy()[: dt.itemsize].tobytes() == raw.tobytes()


def test_float16_one_and_a_half_arrives_as_0x3e00(echo_module):
    i = list(ECHO_TYPES).index("__half")
    out = cd.Buffer.from_numpy(np.full(16, 0xAB, np.uint8))
    echo_module.function(f"echo{i}").launch(1, 1, out, np.float16(1.5))
    assert out.to_numpy()[:2].tobytes() == b"\x00\x3e"
    # __half is a 2-byte struct to the kernel (PTX .b8[2]): a Python float is ambiguous there
    with pytest.raises(TypeError, match="np.float16"):
        echo_module.function(f"echo{i}").launch(1, 1, out, 1.5)


def test_issue_example_float_and_char_from_python_values():
    m = cd.compile('extern "C" __global__ void k(float* out, char* out2, float f, char c)'
                   ' { *out = f; *out2 = c; }').load()
    out = cd.Buffer.from_numpy(np.array([np.nan], np.float32))
    out2 = cd.Buffer.from_numpy(np.array([99], np.int8))
    m.function("k").launch(1, 1, out, out2, 2.0, 7)
    assert out.to_numpy()[0] == 2.0 and out2.to_numpy()[0] == 7


def test_struct_parameter_reaches_the_kernel():
    m = cd.compile('struct P { char a; double b; int c; };\n'
                   'extern "C" __global__ void k(double* out, P p) { out[0] = p.a + p.b + p.c; }').load()
    dt = np.dtype([("a", np.int8), ("b", np.float64), ("c", np.int32)], align=True)
    v = np.zeros((), dt)
    v["a"], v["b"], v["c"] = 3, 0.25, 1000
    out = cd.Buffer.from_numpy(np.array([np.nan]))
    m.function("k").launch(1, 1, out, v[()])
    assert out.to_numpy()[0] == 1003.25


def test_buffer_slice_is_a_pointer_at_its_offset(saxpy_module, rng):
    x = rng.standard_normal(256).astype(np.float32)
    bx = cd.Buffer.from_numpy(x)
    out = cd.Buffer.from_numpy(np.full(256, np.nan, np.float32))
    saxpy_module.function("scale").launch(1, 128, out[128:], bx[64:192], 2.0, 128)
    got = out.to_numpy()
    assert np.isnan(got[:128]).all()
    assert rel_err(got[128:], 2.0 * x[64:192].astype(np.float64)) < 1e-6


def test_wrong_arguments_are_caught_before_the_driver(saxpy_module):
    f = saxpy_module.function("saxpy")
    b = cd.Buffer.empty(16)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        f.launch(1, 1, b, b, 1.0)
    with pytest.raises(TypeError, match=r"parameter #2 .*expected exactly 4 bytes, the value has 8"):
        f.launch(1, 1, b, b, np.float64(1.0), 4)
    with pytest.raises(TypeError, match=r"parameter #0 .*float"):
        f.launch(1, 1, 1.0, b, 1.0, 4)


def test_launch_configuration_beyond_limits_is_a_value_error(saxpy_module):
    f = saxpy_module.function("saxpy")
    b = cd.Buffer.empty(16)
    with pytest.raises(ValueError, match="MAX_THREADS_PER_BLOCK"):
        f.launch(1, (32, 33), b, b, 1.0, 0)
    with pytest.raises(ValueError, match="gridy = 65536 exceeds the device limit 65535"):
        f.launch((1, 65536), 1, b, b, 1.0, 0)
    with pytest.raises(ValueError, match="blockz = 65 exceeds"):
        f.launch(1, (1, 1, 65), b, b, 1.0, 0)
    with pytest.raises(ValueError, match=r"grid dimension must be in \[1"):
        f.launch(0, 1, b, b, 1.0, 0)


SHMEM = r"""
extern "C" __global__ void shm(float* out, int n) {
    extern __shared__ float dyn[];
    __shared__ float stat[1024];
    int t = threadIdx.x;
    stat[t] = (float)t;
    for (int i = t; i < n; i += blockDim.x) dyn[i] = (float)i;
    __syncthreads();
    float s = 0;
    for (int i = t; i < n; i += blockDim.x) s += dyn[i];
    out[t] = s + stat[t];
}
"""


@pytest.mark.parametrize("dyn_bytes", [48 * 1024, 96 * 1024])
def test_dynamic_shared_memory_above_48k_opts_in_automatically(dyn_bytes):
    f = cd.compile(SHMEM).load().function("shm")
    assert f.static_shared_bytes == 4096
    n = dyn_bytes // 4
    out = cd.Buffer.from_numpy(np.full(256, np.nan, np.float32))
    f.launch(1, 256, out, n, shared_mem_bytes=dyn_bytes)
    t = np.arange(256)
    ref = np.array([np.arange(k, n, 256, dtype=np.float64).sum() + k for k in t])
    assert rel_err(out.to_numpy(), ref) < 1e-6


def test_shared_memory_beyond_the_opt_in_limit_gives_requested_static_and_limit():
    f = cd.compile(SHMEM).load().function("shm")
    limit = cd.Device(0).attribute("max_shared_memory_per_block_optin")
    with pytest.raises(ValueError) as ei:
        f.launch(1, 32, cd.Buffer.empty(1024), 8, shared_mem_bytes=limit)
    msg = str(ei.value)
    assert f"{limit} bytes of dynamic shared memory requested" in msg and "4096 bytes static" in msg
    assert f"at most {limit - 4096} dynamic" in msg


def test_prepared_launch_reuses_config_and_updates_one_argument(saxpy_module, rng):
    f = saxpy_module.function("scale")
    x = rng.standard_normal(512).astype(np.float32)
    bx = cd.Buffer.from_numpy(x)
    out = cd.Buffer.from_numpy(np.full(512, np.nan, np.float32))
    p = f.bind(2, 256, out, bx, 2.0, 512)
    p()
    assert rel_err(out.to_numpy(), 2.0 * x.astype(np.float64)) < 1e-6
    p.set_arg(2, -0.5)
    p.launch()
    assert rel_err(out.to_numpy(), -0.5 * x.astype(np.float64)) < 1e-6
    p(out, bx, 4.0, 256)
    got = out.to_numpy()
    assert rel_err(got[:256], 4.0 * x[:256].astype(np.float64)) < 1e-6
    assert rel_err(got[256:], -0.5 * x[256:].astype(np.float64)) < 1e-6
    with pytest.raises(TypeError, match="parameter #2"):
        p.set_arg(2, np.float64(1.0))
    with pytest.raises(IndexError):
        p.set_arg(4, 1)


def test_explicit_signature_over_the_parameter_limit_lists_each_parameter():
    f = cd.compile('extern "C" __global__ void k(int a) {}').load().function("k")
    with pytest.raises(ValueError, match="disagrees"):
        f.set_signature("int, int")
    g = cd.compile('struct Big { double v[4090]; };\n'
                   'extern "C" __global__ void big(Big b, double* out) { out[0] = b.v[4089]; }').load()
    fb = g.function("big")
    assert fb.param_layout[0].size == 32720
    out = cd.Buffer.from_numpy(np.array([np.nan]))
    payload = np.zeros(4090)
    payload[-1] = 42.5
    fb.launch(1, 1, payload.tobytes(), out)
    assert out.to_numpy()[0] == 42.5


COOP = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void coop_sum(const float* x, float* partial, float* out, int n) {
    cg::grid_group g = cg::this_grid();
    float s = 0;
    for (int i = g.thread_rank(); i < n; i += g.size()) s += x[i];
    atomicAdd(&partial[blockIdx.x], s);
    g.sync();
    if (g.thread_rank() == 0) { float t = 0; for (int b = 0; b < gridDim.x; ++b) t += partial[b]; *out = t; }
}
extern "C" __global__ void __cluster_dims__(1,1,1) cluster_rank(unsigned int* out) {
    unsigned int r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    out[blockIdx.x] = r;
}
extern "C" __global__ void cluster_rank_dyn(unsigned int* out) {
    unsigned int r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    out[blockIdx.x] = r;
}
"""


def test_cooperative_launch_grid_sync(rng):
    m = cd.compile(COOP).load()
    f = m.function("coop_sum")
    x = rng.standard_normal(100_000).astype(np.float32)
    nblocks = cd.Device(0).multiprocessor_count
    partial = cd.Buffer.zeros(nblocks, np.float32)
    out = cd.Buffer.from_numpy(np.array([np.nan], np.float32))
    f.launch(nblocks, 256, cd.Buffer.from_numpy(x), partial, out, x.size, cooperative=True)
    assert abs(out.to_numpy()[0] - x.astype(np.float64).sum()) < 1e-3 * np.abs(x).sum() / np.sqrt(x.size)
    with pytest.raises(ValueError, match="cooperative launch of"):
        f.launch(nblocks * 1000, 256, cd.Buffer.from_numpy(x), partial, out, x.size, cooperative=True)


def test_cluster_launch_gives_ranks_within_each_cluster():
    if cd.Device(0).compute_capability < (9, 0):
        f = cd.compile(COOP).load().function("cluster_rank_dyn")
        with pytest.raises(cd.NotSupportedError):
            f.launch(4, 32, cd.Buffer.empty(16), cluster=2)
        return
    f = cd.compile(COOP).load().function("cluster_rank_dyn")
    out = cd.Buffer.from_numpy(np.full(8, 0xFFFFFFFF, np.uint32))
    f.launch(8, 32, out, cluster=(2, 1, 1))
    np.testing.assert_array_equal(out.to_numpy(), [0, 1] * 4)
    with pytest.raises(ValueError, match="not a multiple of cluster"):
        f.launch(7, 32, out, cluster=2)


def test_failing_kernel_names_the_launch_in_the_error():
    m = cd.compile('extern "C" __global__ void boom(int* p) { if (threadIdx.x == 0) __trap(); }').load()
    # A trap poisons the context for the process: run it in a subprocess.
    import subprocess
    import sys
    code = ("import pycudadrv as cd\n"
            "m = cd.compile('extern \"C\" __global__ void boom(int* p) { __trap(); }').load()\n"
            "m.function('boom').launch(1, 1, None)\n"
            "try:\n    cd.Device(0).synchronize()\nexcept cd.CudaError as e:\n    print('ERR', e.name)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ERR CUDA_ERROR_" in r.stdout, r.stdout + r.stderr
    assert m.function("boom").num_params == 1


def test_events_time_a_kernel(saxpy_module):
    f = saxpy_module.function("scale")
    n = 1 << 22
    x = cd.Buffer.zeros(n, np.float32)
    out = cd.Buffer.empty(n, np.float32)
    s = cd.Device(0).default_stream
    start, end = cd.Event(), cd.Event()
    start.record(s)
    for _ in range(10):
        f.launch(n // 256, 256, out, x, 1.0, n, stream=s)
    end.record(s)
    ms = end - start
    assert ms > 0
    with pytest.raises(ValueError, match="never recorded"):
        cd.Event.elapsed_ms(cd.Event(), end)
    nt = cd.Event(timing=False).record(s)
    with pytest.raises(ValueError, match="without timing"):
        cd.Event.elapsed_ms(nt, end)


def test_template_kernels_through_name_expressions(rng):
    src = "template <typename T> __global__ void fill(T* p, T v, int n) { int i = threadIdx.x; if (i < n) p[i] = v; }"
    m = cd.compile(src, name_expressions=("fill<float>", "fill<double>")).load()
    f32, f64 = m.function("fill<float>"), m.function("fill<double>")
    assert f32.name.startswith("_Z") and f32 is not f64
    a = cd.Buffer.from_numpy(np.full(32, np.nan, np.float32))
    b = cd.Buffer.from_numpy(np.full(32, np.nan, np.float64))
    v = float(rng.standard_normal())
    f32.launch(1, 32, a, v, 32)
    f64.launch(1, 32, b, v, 32)
    assert (a.to_numpy() == np.float32(v)).all() and (b.to_numpy() == v).all()


def test_a_name_expression_is_found_in_any_spelling_the_compiler_takes(rng):
    src = ("template <typename T, int N, bool Neg> __global__ void put(T* p, T v) "
           "{ int i = threadIdx.x; if (i < N) p[i] = Neg ? -v : v; }")
    m = cd.compile(src, name_expressions=("put<float, 32, true>",)).load()
    f = m.function("put<float,32,true>")
    assert f is m.function("put< float , 32 , true >") is m.function("put<float, 32, true>")
    for _ in range(2):
        a = cd.Buffer.from_numpy(np.full(32, np.nan, np.float32))
        v = float(rng.standard_normal())
        f.launch(1, 32, a, v)
        np.testing.assert_array_equal(a.to_numpy(), np.full(32, -np.float32(v)))
    with pytest.raises(ValueError):
        m.function("put<float, 32, false>")      # another instantiation, never lowered


def test_programmatic_dependent_launch_runs_in_order(rng):
    if cd.Device(0).compute_capability < (9, 0):
        pytest.skip("programmatic dependent launch needs sm_90")
    m = cd.compile(r'''
extern "C" __global__ void produce(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 2.0f * i;
    asm volatile("griddepcontrol.launch_dependents;");
}
extern "C" __global__ void consume(float* y, const float* x, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + 1.0f;
}''').load()
    n = 1 << 16
    x = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    s = cd.Stream()
    m.function("produce").launch(n // 256, 256, x, n, stream=s)
    m.function("consume").launch(n // 256, 256, y, x, n, stream=s, programmatic_dependent=True)
    np.testing.assert_array_equal(y.to_numpy(stream=s), 2.0 * np.arange(n, dtype=np.float32) + 1.0)


def test_fatbin_image_loads_and_runs(rng, tmp_path):
    import shutil
    import subprocess
    nvcc = shutil.which("nvcc") or (shutil.which("/usr/local/cuda/bin/nvcc"))
    if nvcc is None:
        pytest.skip("nvcc not available to build a fatbin")
    cu = tmp_path / "k.cu"
    cu.write_text(SAXPY)
    fat = tmp_path / "k.fatbin"
    cc = "%d%d" % cd.Device(0).compute_capability
    subprocess.run([nvcc, "-fatbin", f"-gencode=arch=compute_{cc},code=sm_{cc}", "-o", str(fat), str(cu)],
                   check=True, capture_output=True, timeout=300)
    data = fat.read_bytes()
    assert cd.image_kind(data) == "fatbin"
    m = cd.load_module(data)
    assert m.kind == "fatbin"
    f = m.function("scale")
    assert f.layout_source == "cuFuncGetParamInfo" and f.num_params == 4
    x = rng.standard_normal(256).astype(np.float32)
    out = cd.Buffer.from_numpy(np.full(256, np.nan, np.float32))
    f.launch(1, 256, out, cd.Buffer.from_numpy(x), np.float32(1.5), np.int32(256))
    assert rel_err(out.to_numpy(), 1.5 * x.astype(np.float64)) < 1e-6


def test_a_launch_the_driver_refuses_names_kernel_grid_block_and_arguments():
    if cd.Device(0).compute_capability < (9, 0):
        pytest.skip("needs thread-block clusters")
    f = cd.compile(COOP).load().function("cluster_rank_dyn")
    out = cd.Buffer.empty(64, np.uint32)
    with pytest.raises(cd.CudaError) as ei:
        f.launch(64, 1024, out, cluster=64)   # beyond any cluster size the driver allows
    msg = str(ei.value)
    assert ei.value.call == "cuLaunchKernelEx"
    assert "launching kernel 'cluster_rank_dyn' grid=(64, 1, 1) block=(1024, 1, 1) shared_mem_bytes=0" in msg
    assert "Buffer(256 bytes)" in msg
