"""The generic launch's memory of the arguments it packed last (pycudadrv/argcache.h): one scan of
the kept objects against the arguments given finds what changed; Buffers are marked by address
(held by nothing) and packed again at every launch. CPU: the scan itself. GPU: values after
Buffers that come and go at recycled addresses, change places, become ints or None, or close."""
import gc
import sys

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv._launch import _first_diff_for_tests

COMBINE = r"""
extern "C" __global__ void combine(float* w, const float* u, const float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] = u[i] * v[i] + u[i];
}
"""
AFFINE = r"""
extern "C" __global__ void affine(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"""


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 15, 16, 17, 31, 64, 67, 200])
def test_the_scan_finds_every_changed_parameter_in_order_from_any_start(n):
    objs = [object() for _ in range(n)]
    for changed in ([], [0], [n - 1], list(range(0, n, 7)), list(range(n))):
        changed = sorted({k for k in changed if 0 <= k < n})
        other = list(objs)
        for k in changed:
            other[k] = object()
        found, k = [], 0
        while True:
            fast, plain = _first_diff_for_tests(objs, other, k)
            assert fast == plain
            if fast >= n:
                break
            found.append(fast)
            k = fast + 1
        assert found == changed


def test_the_scan_clamps_its_start_to_the_arrays():
    a = [1, 2, 3]
    assert _first_diff_for_tests(a, list(a), -5) == (3, 3)
    assert _first_diff_for_tests(a, list(a), 10) == (3, 3)
    assert _first_diff_for_tests(a, [1, 2, 4], -5) == (2, 2)


def _fresh(rng, n):
    return rng.standard_normal(n).astype(np.float32)


@pytest.mark.gpu
def test_fresh_buffers_at_recycled_addresses_each_get_their_own_pointer(rng):
    fn = cd.compile(COMBINE).load().function("combine")
    n, seen, reused = 256, set(), 0
    for _ in range(2):
        for _ in range(12):
            uv, vv = _fresh(rng, n), _fresh(rng, n)
            u, v = cd.Buffer.from_numpy(uv), cd.Buffer.from_numpy(vv)
            w = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
            reused += id(u) in seen
            seen.update((id(u), id(v), id(w)))
            fn.launch(2, 128, w, u, v, n)
            ref = uv.astype(np.float64) * vv + uv
            np.testing.assert_allclose(w.to_numpy(), ref, rtol=1e-5, atol=1e-6)
            del u, v, w
            gc.collect()
    assert reused > 0      # CPython gave a freed Buffer's address to a new one: the case under test


@pytest.mark.gpu
def test_buffers_that_change_places_or_become_raw_pointers_are_read_anew(rng):
    fn = cd.compile(COMBINE).load().function("combine")
    n = 128
    vals = [_fresh(rng, n) for _ in range(3)]
    bufs = [cd.Buffer.from_numpy(x) for x in vals]
    for _ in range(2):
        for w, u, v in [(0, 1, 2), (1, 0, 2), (2, 1, 0), (0, 2, 1), (0, 2, 1)]:
            bufs[w].write(np.full(n, np.nan, np.float32))
            uarg = bufs[u] if w != 2 else bufs[u].ptr          # a raw pointer where a Buffer was
            fn.launch(1, n, bufs[w], uarg, bufs[v], n)
            vals[w] = (vals[u].astype(np.float64) * vals[v] + vals[u]).astype(np.float32)
            np.testing.assert_allclose(bufs[w].to_numpy(), vals[w], rtol=1e-5, atol=1e-6)
            bufs[w].write(vals[w])


@pytest.mark.gpu
def test_scalars_that_change_between_unchanged_ones_arrive(rng):
    fn = cd.compile(AFFINE).load().function("affine")
    n = 64
    xv = _fresh(rng, n)
    x, y = cd.Buffer.from_numpy(xv), cd.Buffer.zeros(n, np.float32)
    b = float(rng.uniform(-2, 2))
    for k in range(8):
        a = float(rng.uniform(-2, 2))
        if k % 3 == 0:
            b = np.float32(rng.uniform(-2, 2))
        y.write(np.full(n, np.nan, np.float32))
        fn.launch(1, n, y, x, a, b, n)
        np.testing.assert_allclose(y.to_numpy(), np.float32(a) * xv.astype(np.float64) + np.float64(b), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.gpu
def test_a_buffer_closed_after_a_launch_raises_naming_the_parameter_at_the_next(rng):
    fn = cd.compile(AFFINE).load().function("affine")
    n = 32
    for _ in range(2):
        xv = _fresh(rng, n)
        x, y = cd.Buffer.from_numpy(xv), cd.Buffer.zeros(n, np.float32)
        fn.launch(1, n, y, x, 2.0, 1.0, n)
        x.close()
        with pytest.raises(cd.ClosedError, match=r"kernel 'affine', parameter #1"):
            fn.launch(1, n, y, x, 2.0, 1.0, n)
        x2 = cd.Buffer.from_numpy(xv)
        y.write(np.full(n, np.nan, np.float32))
        fn.launch(1, n, y, x2, 2.0, 1.0, n)
        np.testing.assert_allclose(y.to_numpy(), 2.0 * xv.astype(np.float64) + 1.0, rtol=1e-6)


@pytest.mark.gpu
def test_a_generic_launch_holds_no_buffer_alive(rng):
    fn = cd.compile(AFFINE).load().function("affine")
    x, y = cd.Buffer.from_numpy(_fresh(rng, 16)), cd.Buffer.zeros(16, np.float32)
    before = (sys.getrefcount(x), sys.getrefcount(y))
    for _ in range(3):
        fn.launch(1, 16, y, x, 1.5, 0.5, 16)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before
