"""Shader-style Dispatch: the parameter convention, direct and indirect launches."""
import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

# Written to the convention of pycudadrv.dispatch: storage (ptr, len), uniform (ptr),
# push constants as u64 words, then the (indirect, indirect_len) pair.
KERNEL = r"""
extern "C" __global__ void axpb(float* out, unsigned long long out_len,
                                const float* in, unsigned long long in_len,
                                const float* uni,
                                unsigned long long pc0,
                                const unsigned int* indirect, unsigned long long indirect_len) {
    unsigned gx = indirect_len ? indirect[0] : gridDim.x;
    unsigned gy = indirect_len ? indirect[1] : gridDim.y;
    unsigned gz = indirect_len ? indirect[2] : gridDim.z;
    unsigned long long groups = (unsigned long long)gx * gy * gz;
    unsigned long long first = indirect_len ? blockIdx.x
        : blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    unsigned long long stride = indirect_len ? gridDim.x : groups;
    float b = __int_as_float((int)(pc0 & 0xffffffffu));
    unsigned limit = (unsigned)(pc0 >> 32);
    unsigned long long n = out_len / sizeof(float);
    if (in_len / sizeof(float) < n) n = in_len / sizeof(float);
    if (limit < n) n = limit;
    for (unsigned long long wg = first; wg < groups; wg += stride) {
        unsigned long long i = wg * blockDim.x + threadIdx.x;
        if (i < n) out[i] = uni[0] * in[i] + b;
    }
}
"""


@pytest.fixture(scope="module")
def fn():
    return cd.compile(KERNEL).load().function("axpb")


def _setup(fn, n, rng, block=64):
    x = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(0.5, 2))
    b = float(rng.uniform(-1, 1))
    xin = cd.Buffer.from_numpy(x)
    out = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    uni = cd.Buffer.from_numpy(np.array([a], np.float32))
    enc = cd.Device(0).encoder()
    with enc.pass_("axpb") as p:
        d = p.dispatch(fn, block=(block, 1, 1))
    d.set_arg((0, 1), xin)              # bound out of order on purpose: sorted at launch
    d.set_arg((0, 0), out)
    d.set_arg((1, 0), uni, kind="uniform")
    d.set_push_constants(np.float32(b).tobytes() + np.uint32(n).tobytes())   # pc0 = (n << 32) | bits(b)
    ref = a * x.astype(np.float64) + np.float32(b)
    return d, out, ref, enc


def test_arguments_follow_the_convention(fn, rng):
    d, out, _, _ = _setup(fn, 100, rng)
    args = d.arguments()
    assert args[0] is out and args[1] == 400 and args[3] == 400 and len(args) == 8
    assert args[-2] is None and args[-1] == 0
    d.set_push_constants(b"\x01\x02\x03")
    assert d.arguments()[5] == np.uint64(0x030201)


@pytest.mark.parametrize("n", [1, 1000, 64 * 132 * 16, 64 * 132 * 16 * 5 + 3])
def test_direct_indirect_and_debug_modes_agree(fn, rng, n, monkeypatch):
    d, out, ref, enc = _setup(fn, n, rng)
    groups = -(-n // 64)
    results = []
    for mode in ("grid", "threads", "indirect", "indirect_sync"):
        out.fill(np.float32(np.nan))
        if mode == "grid":
            d.dispatch(grid=(groups, 1, 1))
        elif mode == "threads":
            d.dispatch(threads=n)
        else:
            counts = cd.Buffer.from_numpy(np.array([groups, 1, 1], np.uint32))
            if mode == "indirect_sync":
                monkeypatch.setenv("PYCUDADRV_INDIRECT_SYNC", "1")
            d.dispatch(indirect=counts)
            monkeypatch.delenv("PYCUDADRV_INDIRECT_SYNC", raising=False)
        got = out.to_numpy()
        assert np.abs(got - ref).max() <= 1e-6 * max(1.0, np.abs(ref).max()), mode
        results.append(got)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_persistent_block_count_can_be_overridden(fn, rng, monkeypatch):
    d, out, ref, _ = _setup(fn, 50_000, rng)
    monkeypatch.setenv("PYCUDADRV_PERSISTENT_BLOCKS", "3")
    d.dispatch(indirect=cd.Buffer.from_numpy(np.array([-(-50_000 // 64), 1, 1], np.uint32)))
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-6, atol=1e-6)


def test_zero_grid_and_empty_indirect_are_no_ops(fn, rng):
    d, out, _, _ = _setup(fn, 64, rng)
    d.dispatch(grid=(0, 1, 1))
    d.dispatch(indirect=cd.Buffer.empty(0))
    assert np.isnan(out.to_numpy()).all()
    with pytest.raises(ValueError, match="exactly one"):
        d.dispatch()
    with pytest.raises(ValueError, match="12 bytes"):
        d.dispatch(indirect=cd.Buffer.empty(8))


def test_pass_timing_and_copy_and_submit(fn, rng):
    d, out, ref, enc = _setup(fn, 4096, rng)
    ts = cd.Timestamps(enc.stream)
    with enc.pass_("step", timestamps=ts):
        d.dispatch(threads=4096)
    copy = cd.Buffer.from_numpy(np.full(4096, np.nan, np.float32))
    enc.copy_buffer_to_buffer(out, 0, copy, 0, 4096 * 4)
    enc.submit().synchronize()
    np.testing.assert_allclose(copy.to_numpy(), ref, rtol=1e-6, atol=1e-6)
    (label, ms), = ts.read()
    assert label == "step" and ms > 0


def test_bad_bindings_are_rejected(fn, rng):
    d, _, _, _ = _setup(fn, 16, rng)
    with pytest.raises(TypeError, match="Buffer"):
        d.set_arg((0, 0), np.zeros(4))
    with pytest.raises(ValueError, match="kind"):
        d.set_arg((0, 0), cd.Buffer.empty(4), kind="texture")
    with pytest.raises(ValueError, match="slot"):
        d.set_arg(3, cd.Buffer.empty(4))
