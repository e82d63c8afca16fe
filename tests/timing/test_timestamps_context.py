"""Timestamps and the calling thread's current context: a pass checks the context once, on entry.

Its end is recorded on the stream's own context whatever another library made current inside the
block (``cuEventRecord`` takes the context from the stream handle); a stream named by a NULL, legacy
or per-thread handle has no context of its own, so its end record makes the device current first.
The block here clears the current context (``cuCtxSetCurrent(NULL)``, as another library may) after
its launch; each case runs twice, after a plain pass, with values against a NumPy float64 reference."""
import ctypes
import os

import numpy as np
import pytest

import pycudadrv as cd

SAXPY = r'''
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''


def _clear_current_context():
    """cuCtxSetCurrent(NULL) through the driver pycudadrv loaded (cuGetProcAddress_v2)."""
    lib = ctypes.CDLL(os.environ.get("PYCUDADRV_LIBCUDA") or "libcuda.so.1")
    fn = ctypes.c_void_p()
    status = ctypes.c_int()
    r = lib.cuGetProcAddress_v2(b"cuCtxSetCurrent", ctypes.byref(fn), 4000, ctypes.c_uint64(0), ctypes.byref(status))
    assert r == 0 and fn.value, f"cuGetProcAddress_v2(cuCtxSetCurrent) returned {r}"
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(fn.value)(None) == 0


@pytest.fixture(scope="module")
def saxpy():
    return cd.compile(SAXPY).load().function("saxpy")


def _passes_with_the_context_cleared(saxpy, rng, stream):
    n, block = 2000, 128
    grid = (n + block - 1) // block
    ts = cd.Timestamps(stream)
    for rep in range(2):
        x = rng.standard_normal(n).astype(np.float32)
        y0 = rng.standard_normal(n).astype(np.float32)
        xb = cd.Buffer.from_numpy(x, stream=stream)
        yb = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=stream)     # poisoned, then y0
        yb.copy_from(cd.Buffer.from_numpy(y0, stream=stream))
        p = saxpy.bind(grid, block, yb, xb, 1.5, n, stream=stream)
        with ts.measure("plain"):
            p.launch()
        with ts.measure("cleared"):
            p.launch()
            _clear_current_context()
        got = ts.read()
        assert [label for label, _ in got] == ["plain", "cleared"], f"rep {rep}"
        assert all(ms >= 0 for _, ms in got), f"rep {rep}: {got}"
        assert ts.is_idle
        x64, y64 = x.astype(np.float64), y0.astype(np.float64)
        np.testing.assert_allclose(yb.to_numpy(), 3.0 * x64 + y64, rtol=1e-5, atol=1e-5, err_msg=f"rep {rep}")


@pytest.mark.gpu
def test_gpu_a_pass_records_its_end_on_its_stream_while_the_block_left_no_context_current(saxpy, rng):
    _passes_with_the_context_cleared(saxpy, rng, cd.Stream())


@pytest.mark.gpu
@pytest.mark.parametrize("handle", [0, 1, 2], ids=["null", "legacy", "per-thread"])
def test_gpu_a_pass_on_a_default_stream_handle_makes_its_device_current_for_the_end_record(saxpy, rng, handle):
    _passes_with_the_context_cleared(saxpy, rng, cd.Stream.from_handle(handle, device=0))


@pytest.mark.gpu
def test_gpu_a_pass_whose_stream_is_closed_inside_it_raises_closed_error_at_its_end():
    s = cd.Stream()
    ts = cd.Timestamps(s)
    with pytest.raises(cd.ClosedError, match="stream is closed"):
        with ts.measure("x"):
            s.close()
    t2 = cd.Timestamps(cd.Stream())
    with t2.measure("y"):
        pass
    assert [label for label, _ in t2.read()] == ["y"]
