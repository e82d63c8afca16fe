"""Function.launch (the generic path) across parameter counts and kinds: 0, 1, 64 and the most
parameters the driver takes, mixed scalar kinds, Python and numpy scalars, None, checked against
NumPy float64 on fresh random values; each twice in one process and right after a prepared launch
of the same kernel (the generic path keeps its own argument arena per function)."""
import os

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv._signature import param_limit

from _reentrant import SCALE, _ReentrantCAI   # tests/ is on sys.path (conftest.py)

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


# One parameter of every kind the generic launch packs, each copied byte for byte into `out` at its
# own offset (the expected bytes are numpy's), plus a Buffer, a view and a null pointer.
KINDS = [("bool", np.bool_), ("signed char", np.int8), ("unsigned char", np.uint8), ("short", np.int16),
         ("unsigned short", np.uint16), ("int", np.int32), ("unsigned int", np.uint32), ("long long", np.int64),
         ("unsigned long long", np.uint64), ("__half", np.float16), ("float", np.float32),
         ("double", np.float64), ("float2", np.complex64), ("S", np.dtype([("a", np.int32), ("b", np.float32)],
                                                                          align=True))]
# S has no padding: a kernel's read of a struct's padding bytes is undefined (on the H200 the fill
# byte stayed there: the copy of a padding byte was not made), so only bytes of values are compared.
ECHO_ALL = "#include <cuda_fp16.h>\nstruct S { int a; float b; };\n" + (
    'extern "C" __global__ void echo_all(unsigned char* out, const double* x, const double* xv, const double* nul, '
    + ", ".join(f"{t} v{k}" for k, (t, _) in enumerate(KINDS)) + ") {\n"
    "  if (threadIdx.x || blockIdx.x) return;\n  int o = 0;\n"
    + "".join(f"  for (int k = 0; k < (int)sizeof(v{k}); ++k) out[o++] = ((const unsigned char*)&v{k})[k];\n"
              for k in range(len(KINDS)))
    + "  double extra[3] = {x[0], xv[0], nul == 0 ? 1.0 : 0.0};\n"
    "  for (int k = 0; k < 24; ++k) out[o++] = ((const unsigned char*)extra)[k];\n}\n")


def _random_kinds(rng, python_values):
    """(arguments, expected bytes) for KINDS: numpy scalars of fresh random bits, or, with
    python_values, the Python int/float/bool/complex the same bits come from where one exists."""
    args, raw = [], b""
    for _, t in KINDS:
        dt = np.dtype(t)
        if dt.kind == "b":
            v = np.bool_(rng.integers(0, 2))
        elif dt.kind == "V":
            v = np.zeros((), dt)[()]
            v["a"], v["b"] = int(rng.integers(-2**31, 2**31)), float(rng.standard_normal())
        elif dt.kind == "f":
            v = dt.type(rng.standard_normal())
        elif dt.kind == "c":
            v = dt.type(complex(rng.standard_normal(), rng.standard_normal()))
        else:
            v = rng.integers(0, 256, dt.itemsize, dtype=np.uint8).view(dt)[0]
        raw += np.asarray(v).tobytes()
        if python_values and dt.kind in "iub":
            v = v.item()                     # Python int / bool: packed at the parameter's width
        elif python_values and dt.kind == "f" and dt.itemsize >= 4:
            v = float(v)                     # exact in the parameter's width
        args.append(v)
    return args, raw


@pytest.mark.parametrize("python_values", [False, True])
def test_every_kind_in_one_generic_launch_arrives_bit_for_bit_twice_and_after_bind(python_values, rng):
    fn = cd.compile(ECHO_ALL).load().function("echo_all")
    x0 = rng.standard_normal(8)
    x = cd.Buffer.from_numpy(x0)
    nbytes = sum(np.dtype(t).itemsize for _, t in KINDS) + 24
    kept = None
    for round_ in range(3):
        args, raw = _random_kinds(rng, python_values)
        if round_ == 2:                      # the previous call's very objects for half of them
            args[::2] = kept[0][::2]
            raw = b"".join(np.asarray(a if not isinstance(a, (int, float, bool)) else
                                      np.dtype(KINDS[k][1]).type(a)).tobytes()
                           for k, a in enumerate(args))
        out = cd.Buffer.from_numpy(np.full(nbytes + 8, 0xAB, np.uint8))
        fn.launch(1, 32, out, x, x[3:], None, *args)
        want = raw + np.array([x0[0], x0[3], 1.0]).tobytes()
        assert out.to_numpy()[:nbytes].tobytes() == want
        assert out.to_numpy()[nbytes:].tolist() == [0xAB] * 8
        kept = (args, raw)
    p = fn.bind(1, 32, out, x, x[3:], None, *kept[0])
    out.write(np.full(nbytes + 8, 0xAB, np.uint8))
    p()
    fn.launch(1, 32, out, x, x[3:], None, *kept[0])     # the generic arena right after the prepared launch
    assert out.to_numpy()[:nbytes].tobytes() == kept[1] + np.array([x0[0], x0[3], 1.0]).tobytes()


COMBINE = r"""
extern "C" __global__ void combine(float* w, const float* u, const float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] = u[i] * v[i] + u[i];
}
"""


def test_four_parameters_buffers_views_and_a_changing_int_twice_on_two_streams(rng):
    fn = cd.compile(COMBINE).load().function("combine")
    s = cd.Stream()
    for round_ in range(2):
        n = int(rng.integers(100, 1000))
        u0, v0 = rng.standard_normal(n + 7).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        u, v = cd.Buffer.from_numpy(u0), cd.Buffer.from_numpy(v0)
        w = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
        want = u0[7:].astype(np.float64) * v0 + u0[7:]
        fn.launch((n + 127) // 128, 128, w, u[7:], v, n)
        np.testing.assert_allclose(w.to_numpy(), want, rtol=1e-5, atol=1e-5)
        w.write(np.full(n, np.nan, np.float32))
        fn.launch((n + 127) // 128, 128, w, u[7:], v, n - 1, stream=s, shared_mem_bytes=0)
        s.synchronize()
        got = w.to_numpy()
        np.testing.assert_allclose(got[:n - 1], want[:n - 1], rtol=1e-5, atol=1e-5)
        assert np.isnan(got[n - 1])          # the new int (n - 1) was packed, not the previous call's


def test_the_keywords_of_the_generic_launch_and_their_errors():
    fn = cd.compile(COMBINE).load().function("combine")
    w = cd.Buffer.from_numpy(np.full(64, np.nan, np.float32))
    u = cd.Buffer.from_numpy(np.arange(64, dtype=np.float32))
    with pytest.raises(TypeError, match=r"launch\(\) got an unexpected keyword argument 'strm'"):
        fn.launch(1, 64, w, u, u, 64, strm=None)
    with pytest.raises(TypeError, match=r"takes at least 2 positional arguments \(1 given\)"):
        fn.launch(1)
    with pytest.raises(TypeError, match=r"takes at least 2 positional arguments \(0 given\)"):
        fn.launch()
    with pytest.raises(TypeError, match=r"multiple values for keyword argument 'grid'"):
        fn.launch(1, 64, w, u, u, 64, grid=2)
    with pytest.raises(cd.ArgumentValueError, match=r"kernel 'combine': shared_mem_bytes must be in \[0, 2\*\*32-1\]"):
        fn.launch(1, 64, w, u, u, 64, shared_mem_bytes=-1)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'combine': shared_mem_bytes must be an int of bytes"):
        fn.launch(1, 64, w, u, u, 64, shared_mem_bytes=1.5)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'combine' takes 4 arguments .* 3 given"):
        fn.launch(1, 64, w, u, u)
    with pytest.raises(cd.ArgumentTypeError, match=r"kernel 'combine', parameter #3 .*got str 'x'"):
        fn.launch(1, 64, w, u, u, "x")
    assert np.isnan(w.to_numpy()).all()      # nothing above launched
    fn.launch(1, 64, w, u, u, 64, stream=cd.Device(0).default_stream, shared_mem_bytes=0, cooperative=False)
    cd.Device(0).default_stream.synchronize()
    np.testing.assert_allclose(w.to_numpy(), np.arange(64.0) ** 2 + np.arange(64.0))


def test_grid_and_block_by_keyword_as_the_signature_names_them():
    mod = cd.compile(ZERO).load()
    fn = mod.function("zero")
    hits = mod.get_global("hits", np.int32)
    hits.write(np.zeros(1, np.int32))
    fn.launch(grid=1, block=32)
    fn.launch(1, block=32, stream=None)
    fn.launch(block=(32, 1), grid=(1, 1, 1), shared_mem_bytes=0)
    assert hits.to_numpy().tolist() == [21]
    with pytest.raises(TypeError, match=r"takes at least 2 positional arguments \(0 given\)"):
        fn.launch(block=32)


def test_a_launch_of_the_same_kernel_from_inside_an_arguments_interface_keeps_both_launches_arguments(rng):
    """The generic launch packs into the function's own arena: a launch of the same function made
    while an argument is being read (a CAI property, or another thread at that moment) must not
    overwrite the outer launch's already-packed arguments."""
    fn = cd.compile(SCALE).load().function("scale")
    n = 64
    for _ in range(2):
        xv = rng.standard_normal(n).astype(np.float32)
        a, b = float(rng.uniform(1, 2)), float(rng.uniform(3, 4))
        x = cd.Buffer.from_numpy(xv)
        y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
        z = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
        fn.launch(1, n, y, x, 1.0, n)          # the arena holds y, x, 1.0, n
        fn.launch(1, n, y, _ReentrantCAI(x, lambda: fn.launch(1, n, z, x, b, n)), a, n)
        np.testing.assert_allclose(y.to_numpy(), a * xv.astype(np.float64), rtol=1e-6)
        np.testing.assert_allclose(z.to_numpy(), b * xv.astype(np.float64), rtol=1e-6)


def test_set_signature_from_inside_an_arguments_interface_is_refused_not_a_crash():
    """set_signature drops the generic launch's arena; from inside that launch's marshalling it
    would free the arena under it (a crash): run in a child process, expect a pycudadrv error (the
    StateError, wrapped as the argument's ArgumentTypeError) and a working launch after it."""
    import subprocess
    import sys
    code = (
        "import numpy as np, pycudadrv as cd\n"
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})\n"
        "from _reentrant import SCALE, _ReentrantCAI\n"
        "fn = cd.compile(SCALE).load().function('scale')\n"
        "x = cd.Buffer.from_numpy(np.ones(8, np.float32)); y = cd.Buffer.zeros(8, np.float32)\n"
        "fn.launch(1, 8, y, x, 1.0, 8)\n"
        "h = _ReentrantCAI(x, lambda: fn.set_signature('float*, const float*, float, int'))\n"
        "try:\n    fn.launch(1, 8, y, h, 2.0, 8)\nexcept cd.Error as e:\n    print('REFUSED', e)\n"
        "fn.launch(1, 8, y, x, 3.0, 8)\n"
        "print('Y', y.to_numpy()[0])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "REFUSED" in r.stdout and "set_signature" in r.stdout, r.stdout + r.stderr
    assert "Y 3.0" in r.stdout, r.stdout
