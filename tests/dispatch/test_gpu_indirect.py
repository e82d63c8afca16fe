"""GPU-driven indirect dispatch inside graphs, as pipelines use it: the counts written on the GPU by
the work before the dispatch (a kernel, a copy, the dispatch before), the dispatch's output read by
the work after it, and (sm_90+) the dispatch's node launched as the programmatic dependent of its
update kernel. Checked against NumPy float64 on fresh random input, replayed with new counts."""
import ctypes
import os

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv.dispatch import Encoder, Pass

pytestmark = pytest.mark.gpu

BLOCK = 64

SRC = r"""
__device__ __forceinline__ void wait_producer() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");   // the PDL contract, for pdl=True captures
#endif
}
// x = a * src + b over n elements, and the counts of the next dispatch from a device word.
extern "C" __global__ void produce(float* x, const float* src, float a, float b, int n,
                                   unsigned int* counts, const unsigned int* groups) {
    wait_producer();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * src[i] + b;
    if (i == 0) { counts[0] = groups[0]; counts[1] = 1u; counts[2] = 1u; }
}
// z = y - x over n elements (reads what the dispatch wrote).
extern "C" __global__ void consume(float* z, const float* y, const float* x, int n) {
    wait_producer();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = y[i] - x[i];
}
// Dispatch convention: y (ptr, len), x (ptr, len), then (indirect, indirect_len).
extern "C" __global__ void twice_plus_one(float* y, unsigned long long y_len, const float* x,
                                          unsigned long long x_len, const unsigned int* indirect,
                                          unsigned long long indirect_len) {
    wait_producer();
    unsigned long long groups = indirect_len ? indirect[0] : gridDim.x;
    unsigned long long stride = indirect_len ? gridDim.x : groups;
    for (unsigned long long wg = blockIdx.x; wg < groups; wg += stride) {
        unsigned long long i = wg * blockDim.x + threadIdx.x;
        if (i < y_len / 4) y[i] = 2.0f * x[i] + 1.0f;
    }
}
// Dispatch convention: out (ptr, len), next (ptr, len), then (indirect, indirect_len). Marks each
// workgroup with its number + 1 and writes the next dispatch's counts: half as many groups, at least 1.
extern "C" __global__ void mark_then_halve(unsigned int* out, unsigned long long out_len, unsigned int* next,
                                           unsigned long long next_len, const unsigned int* indirect,
                                           unsigned long long indirect_len) {
    wait_producer();
    unsigned long long groups = indirect_len ? indirect[0] : gridDim.x;
    unsigned long long stride = indirect_len ? gridDim.x : groups;
    for (unsigned long long wg = blockIdx.x; wg < groups; wg += stride) {
        unsigned long long i = wg * blockDim.x + threadIdx.x;
        if (i < out_len / 4) out[i] = (unsigned int)wg + 1u;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int h = (unsigned int)(groups / 2);
        next[0] = h ? h : 1u; next[1] = 1u; next[2] = 1u;
    }
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(SRC).load()


def _pdl_or_skip(pdl):
    if pdl and cd.Device(0).compute_capability < (9, 0):
        pytest.skip("pdl=True captures need compute capability 9.0+")


def _dispatch(fn, s, *bindings):
    d = Pass(Encoder(stream=s), "indirect").dispatch(fn, block=(BLOCK, 1, 1), indirect_mode="device")
    for k, b in enumerate(bindings):
        d.set_arg((0, k), b)
    return d


@pytest.mark.parametrize("pdl", [False, True])
def test_counts_written_by_a_kernel_in_the_graph_size_the_dispatch_and_the_next_kernel_reads_its_output(
        mod, rng, pdl):
    _pdl_or_skip(pdl)
    n = BLOCK * 300
    s = cd.Stream()
    src = cd.Buffer.from_numpy(rng.standard_normal(n).astype(np.float32), stream=s)
    x, y, y2, z = (cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s) for _ in range(4))
    counts = cd.Buffer.zeros(3, np.uint32, stream=s)
    groups = cd.Buffer.from_numpy(np.array([7], np.uint32), stream=s)
    a, b = float(rng.uniform(0.5, 2.0)), float(rng.uniform(-1.0, 1.0))
    d = _dispatch(mod.function("twice_plus_one"), s, y, x)
    d2 = _dispatch(mod.function("twice_plus_one"), s, y2, x)
    with s.capture(pdl=pdl) as g:
        mod.function("produce").launch(n // BLOCK, BLOCK, x, src, a, b, n, counts, groups, stream=s)
        d.dispatch(indirect=counts)
        d2.dispatch(indirect=counts)        # after a node that zero counts disable
        mod.function("consume").launch(n // BLOCK, BLOCK, z, y, x, n, stream=s)
    for k in (7, 300, 1, 0, 123):       # new counts each replay, written on the device before it
        src_np = rng.standard_normal(n).astype(np.float32)
        src.write(src_np, stream=s)
        groups.write(np.array([k], np.uint32), stream=s)
        for buf in (y, y2, z):
            buf.fill(np.float32(np.nan), stream=s)
        g.launch()
        xr = a * src_np.astype(np.float64) + b
        yr = np.full(n, np.nan)
        yr[:k * BLOCK] = 2.0 * xr[:k * BLOCK] + 1.0
        np.testing.assert_allclose(y.to_numpy(stream=s), yr, rtol=1e-5, atol=1e-5, err_msg=f"{k} groups")
        np.testing.assert_allclose(y2.to_numpy(stream=s), yr, rtol=1e-5, atol=1e-5, err_msg=f"{k} groups")
        np.testing.assert_allclose(z.to_numpy(stream=s), yr - xr, rtol=1e-4, atol=1e-4, err_msg=f"{k} groups")


@pytest.mark.parametrize("pdl", [False, True])
def test_each_dispatch_of_a_chain_runs_the_counts_the_dispatch_before_it_wrote(mod, rng, pdl):
    _pdl_or_skip(pdl)
    s = cd.Stream()
    first = int(rng.integers(40, 400))
    outs = [cd.Buffer.zeros((first + 8) * BLOCK, np.uint32, stream=s) for _ in range(4)]
    counts = [cd.Buffer.from_numpy(np.array([first, 1, 1], np.uint32), stream=s)] + \
        [cd.Buffer.from_numpy(np.array([999_999, 1, 1], np.uint32), stream=s) for _ in range(4)]  # poisoned
    fn = mod.function("mark_then_halve")
    ds = [_dispatch(fn, s, outs[k], counts[k + 1]) for k in range(4)]
    with s.capture(pdl=pdl) as g:
        for k in range(4):
            ds[k].dispatch(indirect=counts[k])
    for start in (first, int(rng.integers(1, 40))):
        counts[0].write(np.array([start, 1, 1], np.uint32), stream=s)
        for o in outs:
            o.fill(np.uint32(0), stream=s)
        g.launch()
        expect = start
        for k in range(4):
            got = outs[k].to_numpy(stream=s).reshape(-1, BLOCK)
            np.testing.assert_array_equal(got[:expect, 0], np.arange(1, expect + 1, dtype=np.uint32),
                                          err_msg=f"dispatch {k} of a chain started at {start} groups")
            assert (got[expect:] == 0).all(), f"dispatch {k} ran more than {expect} groups"
            expect = max(expect // 2, 1)


def test_counts_copied_in_the_graph_just_before_the_dispatch_size_it(mod, rng):
    n = BLOCK * 200
    s = cd.Stream()
    x_np = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(x_np, stream=s)
    y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
    source = cd.Buffer.from_numpy(np.array([11, 1, 1], np.uint32), stream=s)
    counts = cd.Buffer.zeros(3, np.uint32, stream=s)
    d = _dispatch(mod.function("twice_plus_one"), s, y, x)
    with s.capture() as g:
        source.copy_to(counts, stream=s)
        d.dispatch(indirect=counts)
    for k in (11, 200, 3):
        source.write(np.array([k, 1, 1], np.uint32), stream=s)
        y.fill(np.float32(np.nan), stream=s)
        g.launch()
        ref = np.full(n, np.nan)
        ref[:k * BLOCK] = 2.0 * x_np[:k * BLOCK].astype(np.float64) + 1.0
        np.testing.assert_allclose(y.to_numpy(stream=s), ref, rtol=1e-6, err_msg=f"{k} groups")


# --- the graph's shape --------------------------------------------------------------------------------

CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1


class _EdgeData(ctypes.Structure):       # CUgraphEdgeData
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]


def _edges(graph):
    """(from, to, edge type) of every edge of a captured graph (cuGraphGetEdges, CUDA 12.3+)."""
    lib = ctypes.CDLL(os.environ.get("PYCUDADRV_LIBCUDA", "libcuda.so.1"))
    fn = ctypes.c_void_p()
    status = ctypes.c_int()
    getproc = lib.cuGetProcAddress_v2
    getproc.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                        ctypes.POINTER(ctypes.c_int)]
    if getproc(b"cuGraphGetEdges", ctypes.byref(fn), 12030, 0, ctypes.byref(status)) != 0 or not fn.value:
        pytest.skip("the driver has no cuGraphGetEdges with edge data (CUDA 12.3+)")
    get = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_size_t))(fn.value)
    num = ctypes.c_size_t(0)
    assert get(graph._graph_handle(), None, None, None, ctypes.byref(num)) == 0
    frm, to = (ctypes.c_void_p * num.value)(), (ctypes.c_void_p * num.value)()
    data = (_EdgeData * num.value)()
    assert get(graph._graph_handle(), frm, to, data, ctypes.byref(num)) == 0
    return [(frm[i], to[i], data[i].type) for i in range(num.value)]


def _chain(edges):
    """The edge types along a graph that is one chain of nodes, first node to last."""
    nxt = {f: (t, ty) for f, t, ty in edges}
    assert len(nxt) == len(edges), f"not a chain: {edges}"
    node = ({f for f, _, _ in edges} - {t for _, t, _ in edges}).pop()
    types = []
    while node in nxt:
        node, ty = nxt[node]
        types.append(ty)
    assert len(types) == len(edges), f"not a chain: {edges}"
    return types


def test_the_dispatch_node_is_the_programmatic_dependent_of_its_update_kernel_on_sm90(mod):
    if cd.Device(0).compute_capability < (9, 0):
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    n = BLOCK * 16
    s = cd.Stream()
    x = cd.Buffer.zeros(n, np.float32, stream=s)
    y = cd.Buffer.zeros(n, np.float32, stream=s)
    counts = cd.Buffer.from_numpy(np.array([16, 1, 1], np.uint32), stream=s)
    source = cd.Buffer.from_numpy(np.array([16, 1, 1], np.uint32), stream=s)
    d = _dispatch(mod.function("twice_plus_one"), s, y, x)
    with s.capture() as g:
        mod.function("consume").launch(n // BLOCK, BLOCK, y, x, x, n, stream=s)
        d.dispatch(indirect=counts)                   # after a kernel
        source.copy_to(counts, stream=s)
        d.dispatch(indirect=counts)                   # after a copy
    # consume -> update -> node -> copy -> update -> node. Programmatic: each node after its update kernel
    # (it launches once its grid is set) and an update kernel after a kernel (it waits for it on the GPU);
    # full: whatever follows a node, and an update kernel after a copy.
    prog = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    assert [ty == prog for ty in _chain(_edges(g))] == [True, True, False, False, True]


def test_the_update_kernel_is_not_one_of_the_graphs_kernel_launches(mod):
    n = BLOCK * 16
    s = cd.Stream()
    x, y = cd.Buffer.zeros(n, np.float32, stream=s), cd.Buffer.zeros(n, np.float32, stream=s)
    counts = cd.Buffer.from_numpy(np.array([16, 1, 1], np.uint32), stream=s)
    d = _dispatch(mod.function("twice_plus_one"), s, y, x)
    with s.capture() as g:
        d.dispatch(indirect=counts)
        d.dispatch(indirect=counts)
    # Only the dispatches are the user's to inspect and rewrite: the update kernel's first argument is the
    # device handle of the node it sizes.
    assert g.num_kernels == 2 and g.num_nodes == 4
    assert [g.kernel(i)[0] for i in range(2)] == ["twice_plus_one", "twice_plus_one"]
    with pytest.raises(cd.ArgumentIndexError, match="2 captured kernel launches"):
        g.kernel(2)
    g.launch()
    np.testing.assert_array_equal(y.to_numpy(stream=s), np.ones(n, np.float32))


def test_an_update_kernel_follows_a_kernel_only_when_the_capture_last_recorded_one(mod):
    from pycudadrv._loops import follows_kernel

    n = BLOCK * 4
    s = cd.Stream()
    x, y = cd.Buffer.zeros(n, np.float32, stream=s), cd.Buffer.zeros(n, np.float32, stream=s)
    consume = mod.function("consume")
    assert follows_kernel(s) is False                         # no capture
    with s.capture():
        seen = [follows_kernel(s)]                            # nothing captured yet
        consume.launch(n // BLOCK, BLOCK, y, x, x, n, stream=s)
        seen.append(follows_kernel(s))
        x.copy_to(y, stream=s)
        seen.append(follows_kernel(s))
        consume.launch(n // BLOCK, BLOCK, y, x, x, n, stream=s)
        seen.append(follows_kernel(s))
        y.fill(np.float32(0.0), stream=s)
        seen.append(follows_kernel(s))
    assert seen == [False, True, False, True, False]
