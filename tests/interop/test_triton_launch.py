"""TritonKernel.launch's prepared path: one validated configuration per (grid, stream), the
arguments updated in place, Triton's arguments mapped onto the kernel's parameters in C.

Triton is not needed: a Triton 3.x ``CompiledKernel`` is stood in for by what
:func:`pycudadrv.triton.triton_convention` reads from one (``src.signature``, ``constants``,
``attrs``, ``metadata``), over a CUBIN compiled by NVRTC from CUDA source that computes what
the Triton kernel would (``y = a * x + b`` for ``i < n``, one element per thread). Without
scratch attributes in the metadata the convention is Triton 3.2's: no scratch pointers."""
from types import SimpleNamespace

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv.triton import _fast_plan, triton_convention

AFFINE = r"""
extern "C" __global__ void affine(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"""
SIGNATURE = {"y": "*fp32", "x": "*fp32", "a": "fp32", "b": "fp32", "n": "i32", "BLOCK": "constexpr"}
BLOCK = 128                       # threads per program: num_warps = 4


def compiled_kernel(image=b"", ptx=None, signature=SIGNATURE, constants=None, attrs=None, **metadata):
    """What triton_convention reads from a CompiledKernel."""
    md = dict(name="affine", num_warps=BLOCK // 32, shared=0)
    md.update(metadata)
    return SimpleNamespace(kernel=image, asm={"ptx": ptx},
                           src=SimpleNamespace(signature=dict(signature), attrs=dict(attrs or {}), fn=None,
                                               constants=dict({"BLOCK": BLOCK} if constants is None else constants)),
                           metadata=SimpleNamespace(**md))


# --- the argument map, on the CPU ---------------------------------------------------------------

def test_the_c_path_maps_every_argument_and_runtime_only_calls_onto_the_parameters():
    conv = triton_convention(compiled_kernel())
    fn = object()
    got = _fast_plan(conv, fn)
    assert got[0] is fn
    assert got[1:] == ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], 6, 5, [], [], [5], [BLOCK], [True])


def test_scratch_parameters_are_null_and_divisible_ones_are_listed():
    sig = {"x": "*fp32", "BLOCK": "constexpr", "n": "i32"}
    conv = triton_convention(compiled_kernel(signature=sig, attrs={(0,): [["tt.divisibility", 16]],
                                                                   (2,): [["tt.divisibility", 16]]},
                                             global_scratch_size=0, profile_scratch_size=0))
    fn = object()
    got = _fast_plan(conv, fn)
    assert got[0] is fn
    assert got[1:6] == ([0, 2, -1, -1], [0, 1, -1, -1], 3, 2, [0, 1])
    assert got[6] == [1]


@pytest.mark.parametrize("case", ["scratch", "tuple", "bf16"])
def test_what_the_c_path_does_not_follow_stays_on_the_python_path(case):
    if case == "scratch":
        ck = compiled_kernel(global_scratch_size=256, global_scratch_align=128, profile_scratch_size=0)
    elif case == "tuple":
        ck = compiled_kernel(signature={"t": ("*fp32", "i32"), "BLOCK": "constexpr"})
    else:
        ck = compiled_kernel(signature={"y": "*fp32", "a": "bf16", "BLOCK": "constexpr"})
    assert _fast_plan(triton_convention(ck), object())[0] is None



@pytest.mark.parametrize("grid", [None, 2.0, object(), lambda meta: None])
def test_a_grid_that_is_not_ints_is_an_argument_type_error(grid):
    conv = triton_convention(compiled_kernel())
    with pytest.raises(cd.ArgumentTypeError, match="Triton kernel 'affine': grid must be 1 to 3 ints, got"):
        conv.launch_grid(grid, (None, None, 1.0, 2.0, 8))

# --- on the GPU (or the fake driver with its kernel emulations) ----------------------------------

gpu = pytest.mark.gpu


@pytest.fixture(scope="module")
def obj():
    return cd.compile(AFFINE)


def load(obj, **kwargs):
    return cd.from_triton(compiled_kernel(obj.image, obj.ptx, **kwargs))


def programs(n):
    return ((n + BLOCK - 1) // BLOCK,)


def want(a, x, b, n, poison):
    out = np.full(len(x), poison, np.float64)
    out[:n] = a * x[:n].astype(np.float64) + b
    return out


@gpu
def test_two_grids_alternating_each_get_their_own_plan_and_right_values(obj, rng):
    tk = load(obj)
    s = cd.Stream()
    for _ in range(2):
        for n in (1000, 300, 1000, 300):
            x0 = rng.standard_normal(1024).astype(np.float32)
            a, b = float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1))
            x = cd.Buffer.from_numpy(x0, stream=s)
            y = cd.Buffer.from_numpy(np.full(1024, np.nan, np.float32), stream=s)
            tk.launch(programs(n), y, x, a, b, n, stream=s)
            np.testing.assert_allclose(y.to_numpy(stream=s), want(a, x0, b, n, np.nan), rtol=1e-6, atol=1e-6)


@gpu
def test_arguments_change_in_place_between_launches_of_one_plan(obj, rng):
    tk = load(obj)
    s = cd.Stream()
    n = 512
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    bx = [cd.Buffer.from_numpy(v, stream=s) for v in xs]
    ys = [cd.Buffer.from_numpy(np.full(n, -7.0, np.float32), stream=s) for _ in range(2)]
    grid = programs(n)
    for k in range(6):          # buffers swapped, scalars new objects each time, n the same int
        a, b = float(k) + 0.5, -float(k)
        tk.launch(grid, ys[k % 2], bx[(k + 1) % 2], a, b, n, stream=s)
        np.testing.assert_allclose(ys[k % 2].to_numpy(stream=s), a * xs[(k + 1) % 2].astype(np.float64) + b,
                                   rtol=1e-6, atol=1e-6)
    # every argument given (the constexpr too), then runtime-only again: one plan serves both
    tk.launch(grid, ys[0], bx[0], np.float32(3.0), 1.0, n, BLOCK, stream=s)
    np.testing.assert_allclose(ys[0].to_numpy(stream=s), 3.0 * xs[0].astype(np.float64) + 1.0, rtol=1e-6, atol=1e-6)
    tk[grid](ys[1], bx[1], 2.0, 0.25, n, stream=s)
    np.testing.assert_allclose(ys[1].to_numpy(stream=s), 2.0 * xs[1].astype(np.float64) + 0.25, rtol=1e-6, atol=1e-6)


@gpu
def test_a_smaller_grid_covers_fewer_elements(obj, rng):
    tk = load(obj)
    n = 1024
    x0 = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(x0)
    for g in (8, 2, (8, 1, 1), 1):
        y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
        tk.launch(g, y, x, 2.0, 1.0, n)
        covered = min(n, (g if isinstance(g, int) else g[0]) * BLOCK)
        np.testing.assert_allclose(y.to_numpy(), want(2.0, x0, 1.0, covered, np.nan), rtol=1e-6, atol=1e-6)


@gpu
def test_a_buffer_closed_between_launches_raises_naming_kernel_and_parameter(obj, rng):
    tk = load(obj)
    n = 256
    x0 = rng.standard_normal(n).astype(np.float32)
    x, y = cd.Buffer.from_numpy(x0), cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    tk.launch(programs(n), y, x, 1.0, 0.0, n)
    x.close()
    with pytest.raises(cd.ClosedError, match=r"kernel 'affine', parameter #1"):
        tk.launch(programs(n), y, x, 1.0, 0.0, n)
    x2 = cd.Buffer.from_numpy(x0)
    tk.launch(programs(n), y, x2, 4.0, 0.0, n)            # the plan still works with a live buffer
    np.testing.assert_allclose(y.to_numpy(), 4.0 * x0.astype(np.float64), rtol=1e-6, atol=1e-6)


@gpu
def test_the_plans_hold_no_buffer_alive(obj):
    import sys
    tk = load(obj)
    x, y = cd.Buffer.empty(4096), cd.Buffer.empty(4096)
    before = sys.getrefcount(x), sys.getrefcount(y)
    for _ in range(3):
        tk.launch(1, y, x, 1.0, 0.0, 16)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before


@gpu
def test_errors_are_the_python_path_s(obj):
    tk = load(obj, attrs={(4,): [["tt.divisibility", 16]]})
    x, y = cd.Buffer.empty(4096), cd.Buffer.empty(4096)
    tk.launch(1, y, x, 1.0, 0.0, 32)
    with pytest.raises(cd.ArgumentValueError, match=r"argument 'n' was compiled for a value divisible by 16.*0x3e8"):
        tk.launch(8, y, x, 1.0, 0.0, 1000)
    with pytest.raises(cd.ArgumentValueError, match=r"'BLOCK' was compiled as the constant 128"):
        tk.launch(1, y, x, 1.0, 0.0, 32, 64)
    with pytest.raises(cd.ArgumentTypeError, match=r"takes 6 arguments .* or the 5 that are not constexpr"):
        tk.launch(1, y, x, 1.0, 0.0)
    with pytest.raises(cd.ArgumentTypeError, match="grid must be 1 to 3 ints"):
        tk.launch(True, y, x, 1.0, 0.0, 32)                 # not the plan of grid 1
    with pytest.raises(cd.ArgumentTypeError, match="grid must be 1 to 3 ints"):
        tk.launch((True,), y, x, 1.0, 0.0, 32)
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #2"):
        tk.launch(1, y, x, "one", 0.0, 32)
    tk.launch((0,), y, x, 1.0, 0.0, 32)                     # an empty grid launches nothing
    with pytest.raises(cd.ArgumentValueError, match="compiled as the constant"):
        tk.launch((0,), y, x, 1.0, 0.0, 32, 64)             # ... but still checks the arguments
    tk.launch(1, y, x, 1.0, 0.0, 48)                        # and the plan is as it was


@gpu
def test_launches_on_two_streams_and_a_captured_launch(obj, rng):
    tk = load(obj)
    n = 640
    x0 = rng.standard_normal(n).astype(np.float32)
    s1, s2 = cd.Stream(), cd.Stream()
    x = cd.Buffer.from_numpy(x0, stream=s1)
    y1 = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s1)
    y2 = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s2)
    s1.synchronize()
    s2.synchronize()
    tk.launch(programs(n), y1, x, 2.0, 0.0, n, stream=s1)
    tk.launch(programs(n), y2, x, 3.0, 0.0, n, stream=s2)
    np.testing.assert_allclose(y1.to_numpy(stream=s1), 2.0 * x0.astype(np.float64), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y2.to_numpy(stream=s2), 3.0 * x0.astype(np.float64), rtol=1e-6, atol=1e-6)
    y3 = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s1)
    s1.synchronize()
    with s1.capture() as g:
        tk.launch(programs(n), y3, x, 5.0, 1.0, n, stream=s1)
    assert np.isnan(y3.to_numpy(stream=s1)).all()           # captured, not run
    g.launch()
    g.launch()
    np.testing.assert_allclose(y3.to_numpy(stream=s1), 5.0 * x0.astype(np.float64) + 1.0, rtol=1e-6, atol=1e-6)


@gpu
def test_with_the_gil_released_around_launches_each_launch_packs_its_own_arguments(obj, rng):
    tk = load(obj)
    n = 256
    x0 = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(x0)
    prev = cd.set_release_gil(True)
    try:
        for a in (2.0, 3.0):
            y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
            tk.launch(programs(n), y, x, a, 0.5, n)
            np.testing.assert_allclose(y.to_numpy(), a * x0.astype(np.float64) + 0.5, rtol=1e-6, atol=1e-6)
    finally:
        cd.set_release_gil(prev)


@gpu
def test_a_launch_of_the_same_triton_kernel_from_inside_an_arguments_interface_keeps_both_launches(obj, rng):
    """The prepared path packs into its plan's arena: a launch of the same kernel made while an
    argument is read (a CAI property, as torch's is) must not overwrite the outer launch's
    already-packed arguments; the outer launch, and launches after it, keep their values."""
    from _reentrant import _ReentrantCAI
    tk = load(obj)
    s = cd.Stream()
    n = 256
    for _ in range(2):
        x0 = rng.standard_normal(n).astype(np.float32)
        a, b, a2, b2 = (float(v) for v in rng.uniform(0.5, 2, 4))
        x = cd.Buffer.from_numpy(x0, stream=s)
        y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
        z = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
        tk.launch(programs(n), y, x, 1.0, 0.0, n, stream=s)      # the plan's arena holds y, x, 1, 0, n
        inner = _ReentrantCAI(x, lambda: tk.launch(programs(n), z, x, a2, b2, n, stream=s))
        tk.launch(programs(n), y, inner, a, b, n, stream=s)
        np.testing.assert_allclose(y.to_numpy(stream=s), want(a, x0, b, n, np.nan), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(z.to_numpy(stream=s), want(a2, x0, b2, n, np.nan), rtol=1e-6, atol=1e-6)
        tk.launch(programs(n), z, x, b, a, n, stream=s)
        np.testing.assert_allclose(z.to_numpy(stream=s), want(b, x0, a, n, np.nan), rtol=1e-6, atol=1e-6)
