"""Function.launch (the generic path) across parameter counts and kinds: 0, 1, 64 and the most
parameters the driver takes, mixed scalar kinds, Python and numpy scalars, None, checked against
NumPy float64 on fresh random values; each twice in one process and right after a prepared launch
of the same kernel (the generic path keeps its own argument arena per function)."""
import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv._signature import param_limit

pytestmark = pytest.mark.gpu

ZERO = r"""
__device__ int hits;
extern "C" __global__ void zero() { if (threadIdx.x == 0 && blockIdx.x == 0) hits += 7; }
"""
ONE = r"""
extern "C" __global__ void one(float* y) { int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 2.0f * i; }
"""
MIXED = r"""
extern "C" __global__ void mixed(double* out, signed char a, short b, int c, long long d, unsigned char e,
                                 unsigned int f, float g, double h, const float* x, const float* maybe_null) {
    if (threadIdx.x || blockIdx.x) return;
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f; out[6] = g; out[7] = h;
    out[8] = x[0]; out[9] = maybe_null == 0 ? 1.0 : 0.0;
}
"""


def many(name, n):
    """A kernel ``name(int* y, int a1, ..., int a<n>)`` writing y[k - 1] = a<k>."""
    params = ", ".join(["int* y"] + [f"int a{k}" for k in range(1, n + 1)])
    body = " ".join(f"y[{k - 1}] = a{k};" for k in range(1, n + 1))
    return f'extern "C" __global__ void {name}({params}) {{ if (threadIdx.x == 0 && blockIdx.x == 0) {{ {body} }} }}'


def max_ints():
    """Int parameters after one pointer that fill the driver's parameter space exactly."""
    import pycudadrv._driver as drv
    major, minor = drv.driver_version()
    return (param_limit(major * 1000 + minor * 10, cd.Device(0).compute_capability[0]) - 8) // 4


def test_a_kernel_without_parameters_launches_twice_and_after_a_prepared_launch():
    mod = cd.compile(ZERO).load()
    fn = mod.function("zero")
    hits = mod.get_global("hits", np.int32)
    hits.write(np.zeros(1, np.int32))
    fn.launch(1, 32)
    fn.launch(1, 32)
    fn.bind(1, 32).launch()
    fn.launch((1, 1, 1), (32, 1, 1))
    assert hits.to_numpy().tolist() == [28]


def test_one_pointer_parameter_twice_with_other_buffers(rng):
    fn = cd.compile(ONE).load().function("one")
    for _ in range(2):
        n = int(rng.integers(1, 9)) * 64
        y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
        fn.launch(n // 64, 64, y)
        np.testing.assert_array_equal(y.to_numpy(), 2.0 * np.arange(n, dtype=np.float64))
        z = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
        fn.bind(n // 64, 64, z)()
        fn.launch(n // 64, 64, y)                 # the generic arena after a prepared launch
        np.testing.assert_array_equal(z.to_numpy(), y.to_numpy())


@pytest.mark.parametrize("count", [64, "max"])
def test_many_int_parameters_arrive_in_order(count, rng):
    n = max_ints() if count == "max" else count
    fn = cd.compile(many("many", n)).load().function("many")
    for _ in range(2):
        vals = rng.integers(-2 ** 31, 2 ** 31, size=n)
        y = cd.Buffer.from_numpy(np.full(n, -1, np.int32))
        args = [int(v) for v in vals]
        if count == 64:
            args[::3] = [np.int32(v) for v in vals[::3]]     # mixed Python and numpy ints
        fn.launch(1, 32, y, *args)
        np.testing.assert_array_equal(y.to_numpy(), vals)
        same = cd.Buffer.from_numpy(np.full(n, -1, np.int32))
        fn.launch(1, 32, same, *args)             # the same scalar objects again: their bytes are kept
        np.testing.assert_array_equal(same.to_numpy(), vals)


def test_mixed_scalar_kinds_python_and_numpy_and_a_null_pointer(rng):
    fn = cd.compile(MIXED).load().function("mixed")
    out = cd.Buffer.from_numpy(np.full(10, np.nan))
    for round_ in range(3):
        a, b = int(rng.integers(-128, 128)), int(rng.integers(-2 ** 15, 2 ** 15))
        c, d = int(rng.integers(-2 ** 31, 2 ** 31)), int(rng.integers(-2 ** 53, 2 ** 53))
        e, f = int(rng.integers(0, 256)), int(rng.integers(0, 2 ** 32))
        g, h = float(np.float32(rng.standard_normal())), float(rng.standard_normal())
        x0 = rng.standard_normal(1).astype(np.float32)
        x = cd.Buffer.from_numpy(x0)
        if round_ == 1:
            args = (np.int8(a), np.int16(b), np.int32(c), np.int64(d), np.uint8(e), np.uint32(f), np.float32(g),
                    np.float64(h), x, None)
        else:
            args = (a, b, c, d, e, f, g, h, x, None)
        out.write(np.full(10, np.nan))
        fn.launch(1, 32, out, *args)
        want = np.array([a, b, c, d, e, f, g, h, x0[0], 1.0], np.float64)
        np.testing.assert_array_equal(out.to_numpy(), want)
        if round_ == 2:
            p = fn.bind(1, 32, out, *args)
            out.write(np.full(10, np.nan))
            p()
            np.testing.assert_array_equal(out.to_numpy(), want)
        with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'mixed', parameter #1 .*out of range"):
            fn.launch(1, 32, out, 128, *args[1:])
        with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'mixed', parameter #9"):
            fn.launch(1, 32, out, *args[:8], 1.5, None)
