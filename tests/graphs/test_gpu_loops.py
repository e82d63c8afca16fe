"""Step loops with the host out of the way: PDL-chained graphs, device-side
loops (conditional WHILE nodes), GPU-driven indirect dispatch and launch
sequences, checked against NumPy on fresh random input."""
import numpy as np
import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

SRC = r"""
// The PDL contract: a kernel launched as a programmatic dependent waits for its producer's
// grid before reading what it wrote (griddepcontrol.wait), and may let its own dependents start
// early once it no longer needs to (griddepcontrol.launch_dependents).
__device__ __forceinline__ void wait_producer() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void release_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }

extern "C" __global__ void affine(float* y, const float* x, float a, float b, int n) {
    wait_producer();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
    release_dependents();
}
extern "C" __global__ void add_scalar(float* x, float c, int n) {
    wait_producer();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += c;
}
extern "C" __global__ void count_down(float* v, float step) {
    wait_producer();
    if (blockIdx.x == 0 && threadIdx.x == 0) v[0] -= step;
}
// Dispatch convention (pycudadrv.dispatch): out (ptr, len), then (indirect, indirect_len).
extern "C" __global__ void mark_groups(unsigned int* out, unsigned long long out_len,
                                       const unsigned int* indirect, unsigned long long indirect_len) {
    unsigned gx = indirect_len ? indirect[0] : gridDim.x;
    unsigned long long groups = gx;
    unsigned long long first = blockIdx.x;
    unsigned long long stride = indirect_len ? gridDim.x : groups;
    for (unsigned long long wg = first; wg < groups; wg += stride) {
        unsigned long long i = wg * blockDim.x + threadIdx.x;
        if (i < out_len / 4) out[i] = (unsigned int)wg + 1u;
    }
}
"""


@pytest.fixture(scope="module")
def mod():
    return cd.compile(SRC).load()


# --- PDL in captured graphs -------------------------------------------------------------

def test_pdl_graph_chains_dependent_kernels_in_order(mod, rng):
    n = 1 << 14
    s = cd.Stream()
    f = mod.function("affine")
    a = rng.standard_normal(n).astype(np.float32)
    bufs = [cd.Buffer.from_numpy(a, stream=s)] + [cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
                                                  for _ in range(4)]
    coeffs = [(1.5, 0.25), (-0.5, 1.0), (2.0, -3.0), (0.75, 0.5)]
    with s.capture(pdl=True) as g:
        for k, (ca, cb) in enumerate(coeffs):
            f.launch(n // 256, 256, bufs[k + 1], bufs[k], ca, cb, n, stream=s)
    assert g.pdl and g.num_kernels == 4
    ref = a.astype(np.float64)
    for ca, cb in coeffs:
        ref = ca * ref + cb
    for _ in range(3):
        bufs[4].fill(np.float32(np.nan), stream=s)
        g.launch()
        np.testing.assert_allclose(bufs[4].to_numpy(stream=s), ref, rtol=1e-5, atol=1e-5)


def test_pdl_capture_below_sm90_is_refused_clearly():
    if cd.Device(0).compute_capability >= (9, 0):
        pytest.skip("the device supports PDL (sm_90+): nothing to refuse")
    with pytest.raises(cd.NotSupportedError, match="compute capability 9.0"):
        with cd.Stream().capture(pdl=True):
            pass


# --- device-side loops --------------------------------------------------------------------

@pytest.mark.parametrize("times", [0, 1, 7, 1000])
def test_loop_times_runs_the_body_exactly_n_times(mod, rng, times):
    n = 1024
    s = cd.Stream()
    a = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    add = mod.function("add_scalar")
    with s.loop(times=times) as loop:
        add.launch(n // 256, 256, x, 1.0, n, stream=s)
        add.launch(n // 256, 256, x, 0.5, n, stream=s)
    loop.launch()
    np.testing.assert_allclose(x.to_numpy(stream=s), a + 1.5 * times, rtol=1e-5)
    assert loop.iterations == times and loop.converged is False
    loop.launch()                 # a relaunch starts again from iteration 0
    np.testing.assert_allclose(x.to_numpy(stream=s), a + 3.0 * times, rtol=1e-5)
    assert loop.iterations == times


@pytest.mark.parametrize("pdl", [False, True])
def test_loop_until_stops_when_the_condition_is_met_mid_way(mod, pdl):
    s = cd.Stream()
    v = cd.Buffer.from_numpy(np.array([10.0], np.float32), stream=s)
    cd_fn = mod.function("count_down")
    with s.loop(until=cd.when(v, "<", 3.5), max_iterations=100, pdl=pdl) as loop:
        cd_fn.launch(1, 1, v, 1.0, stream=s)
    loop.launch()
    assert float(v.to_numpy(stream=s)[0]) == 3.0
    assert loop.iterations == 7 and loop.converged is True


def test_loop_until_stops_at_the_bound_when_the_condition_never_holds(mod):
    s = cd.Stream()
    v = cd.Buffer.from_numpy(np.array([10.0], np.float32), stream=s)
    with s.loop(until=cd.when(v, "<", -1e9), max_iterations=5) as loop:
        mod.function("count_down").launch(1, 1, v, 1.0, stream=s)
    loop.launch()
    assert float(v.to_numpy(stream=s)[0]) == 5.0
    assert loop.iterations == 5 and loop.converged is False


def test_loop_with_a_zero_bound_never_runs_the_body(mod):
    s = cd.Stream()
    v = cd.Buffer.from_numpy(np.array([10.0], np.float32), stream=s)
    with s.loop(until=cd.when(v, "<", 0.0), max_iterations=0) as loop:
        mod.function("count_down").launch(1, 1, v, 1.0, stream=s)
    loop.launch()
    assert float(v.to_numpy(stream=s)[0]) == 10.0 and loop.iterations == 0


def test_integer_flag_conditions(mod):
    s = cd.Stream()
    flag = cd.Buffer.from_numpy(np.array([5], np.int32), stream=s)
    dec = cd.compile('extern "C" __global__ void dec(int* f) { f[0] -= 1; }').load().function("dec")
    with s.loop(until=cd.when(flag, "==", 0), max_iterations=50) as loop:
        dec.launch(1, 1, flag, stream=s)
    loop.launch()
    assert int(flag.to_numpy(stream=s)[0]) == 0 and loop.iterations == 5 and loop.converged


def test_loop_bad_input_is_refused_before_anything_is_built(mod):
    s = cd.Stream()
    v = cd.Buffer.from_numpy(np.array([1.0], np.float32), stream=s)
    with pytest.raises(cd.ArgumentValueError, match="max_iterations"):
        s.loop(until=cd.when(v, "<", 0.0))
    with pytest.raises(cd.ArgumentValueError, match="exactly one of"):
        s.loop()
    with pytest.raises(cd.ArgumentValueError, match="op must be one of"):
        cd.when(v, "<>", 0.0)
    with pytest.raises(cd.ArgumentTypeError, match="compares"):
        cd.when(cd.Buffer.empty(4, np.float16), "<", 0.0)
    with pytest.raises(cd.ArgumentTypeError, match="no dtype"):
        cd.when(cd.Buffer.empty(4), "<", 0.0)
    with pytest.raises(cd.ArgumentValueError, match="beyond the condition buffer"):
        cd.when(v, "<", 0.0, index=1)
    closed = cd.Buffer.empty(4, np.float32)
    closed.close()
    with pytest.raises(cd.ClosedError):
        cd.when(closed, "<", 0.0)
    with pytest.raises(cd.ArgumentValueError, match="not representable"):
        cd.when(cd.Buffer.empty(1, np.int32), "<", 2**40)
    # A numpy index must not wrap in the bound check; a bool is not an index; a threshold is one number.
    with pytest.raises(cd.ArgumentValueError, match="beyond the condition buffer"):
        cd.when(v, "<", 0.0, index=np.uint8(255))
    with pytest.raises(cd.ArgumentValueError, match="non-negative int"):
        cd.when(v, "<", 0.0, index=np.bool_(False))
    with pytest.raises(cd.ArgumentValueError, match="one number"):
        cd.when(v, "<", [0.0, 1.0])


def test_the_condition_kernel_is_not_one_of_the_loops_kernel_launches(mod):
    s = cd.Stream()
    v = cd.Buffer.from_numpy(np.array([10.0], np.float32), stream=s)
    with s.loop(until=cd.when(v, "<", 3.5), max_iterations=100) as loop:
        mod.function("count_down").launch(1, 1, v, 1.0, stream=s)
    # Only the body's launch is the user's to rewrite: the condition kernel's bound keeps the loop finite.
    assert loop.num_kernels == 1
    with pytest.raises(cd.ArgumentIndexError, match="1 captured kernel launches"):
        loop.set_kernel_arg(1, 2, np.uint32(0))
    loop.launch()
    assert float(v.to_numpy(stream=s)[0]) == 3.0 and loop.iterations == 7


def test_a_loop_body_that_allocates_synchronizes_or_uses_another_stream_is_refused(mod):
    s, other = cd.Stream(), cd.Stream()
    x = cd.Buffer.zeros(256, np.float32, stream=s)
    add = mod.function("add_scalar")
    for bad in ("alloc", "sync", "other"):
        with pytest.raises(cd.CaptureError):
            with s.loop(times=3):
                add.launch(1, 256, x, 1.0, 256, stream=s)
                if bad == "alloc":
                    cd.Buffer.empty(64, stream=s)
                elif bad == "sync":
                    s.synchronize()
                else:
                    add.launch(1, 256, x, 1.0, 256, stream=other)
    s.synchronize()               # the stream is usable again after each refusal
    assert (x.to_numpy(stream=s) == 0.0).all()


# --- GPU-driven indirect dispatch --------------------------------------------------------

def _dispatch(mod, stream, out):
    d = cd.dispatch.Pass(cd.Encoder(stream=stream), "p").dispatch(mod.function("mark_groups"), block=(32, 1, 1))
    d.set_arg((0, 0), out)
    return d


@pytest.mark.parametrize("relative", ["smaller", "equal", "larger"])
def test_indirect_dispatch_in_a_graph_runs_the_exact_grid_set_on_the_gpu(mod, relative):
    s = cd.Stream()
    persistent = cd.Device(0).multiprocessor_count * 16
    groups = {"smaller": persistent // 3, "equal": persistent, "larger": persistent * 3 + 5}[relative]
    out = cd.Buffer.zeros((groups + 8) * 32, np.uint32, stream=s)
    counts = cd.Buffer.from_numpy(np.array([groups, 1, 1], np.uint32), stream=s)
    d = _dispatch(mod, s, out)
    with s.capture() as g:
        d.dispatch(indirect=counts)
    g.launch()
    got = out.to_numpy(stream=s).reshape(-1, 32)
    np.testing.assert_array_equal(got[:groups], np.repeat(np.arange(1, groups + 1, dtype=np.uint32)[:, None], 32, 1))
    assert (got[groups:] == 0).all()
    # new counts, written outside the graph, take effect at the next replay with no host read-back
    out.fill(np.uint32(0), stream=s)
    counts.write(np.array([3, 1, 1], np.uint32), stream=s)
    g.launch()
    got = out.to_numpy(stream=s).reshape(-1, 32)
    assert (got[:3] == np.arange(1, 4, dtype=np.uint32)[:, None]).all() and (got[3:] == 0).all()
    counts.write(np.array([0, 1, 1], np.uint32), stream=s)     # zero groups: the node is disabled
    out.fill(np.uint32(7), stream=s)
    g.launch()
    assert (out.to_numpy(stream=s) == 7).all()


@pytest.mark.parametrize("relative", ["smaller", "equal", "larger"])
def test_indirect_dispatch_outside_a_graph_uses_persistent_blocks(mod, relative):
    s = cd.Stream()
    persistent = cd.Device(0).multiprocessor_count * 16
    groups = {"smaller": persistent // 3, "equal": persistent, "larger": persistent * 3 + 5}[relative]
    out = cd.Buffer.zeros((groups + 8) * 32, np.uint32, stream=s)
    counts = cd.Buffer.from_numpy(np.array([groups, 1, 1], np.uint32), stream=s)
    _dispatch(mod, s, out).dispatch(indirect=counts)
    got = out.to_numpy(stream=s).reshape(-1, 32)
    assert (got[:groups] == np.arange(1, groups + 1, dtype=np.uint32)[:, None]).all() and (got[groups:] == 0).all()


# --- launch sequences ---------------------------------------------------------------------

def test_a_launch_sequence_does_what_its_launches_do(mod, rng):
    n = 2048
    s = cd.Stream()
    a = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
    f, add = mod.function("affine"), mod.function("add_scalar")
    ev = cd.Event(timing=False)
    seq = cd.LaunchSequence([f.bind(n // 256, 256, y, x, 2.0, 1.0, n, stream=s),
                             add.bind(n // 256, 256, y, 0.5, n, stream=s)]).record(ev, s)
    assert len(seq) == 3
    seq.launch(repeat=4)
    ev.synchronize()
    np.testing.assert_allclose(y.to_numpy(stream=s), 2.0 * a + 1.5, rtol=1e-6)
    x.close()
    with pytest.raises(cd.ClosedError, match="kernel 'affine', parameter #1"):
        seq()


# --- the main job's workload, every way -------------------------------------------------

def test_heat_job_gives_the_same_bits_every_way_and_matches_numpy():
    from pycudadrv import heat

    n, steps = 128, 250          # not a multiple of the graph's 100 steps: a prepared tail follows
    ref = heat.reference(heat.initial_grid(n), steps)
    out = {m: heat.run(n, steps, mode=m)[0] for m in heat.MODES}
    for m in heat.MODES:
        np.testing.assert_array_equal(out[m], out["prepared"], err_msg=m)
    assert heat.rel_error(out["prepared"], ref) < 1e-5


def test_a_loops_iterations_are_read_after_the_stream_of_its_last_launch_was_closed(mod):
    s = cd.Stream()
    v = cd.Buffer.from_numpy(np.array([10.0], np.float32), stream=s)
    with s.loop(until=cd.when(v, "<", 3.5), max_iterations=100) as loop:
        mod.function("count_down").launch(1, 1, v, 1.0, stream=s)
    other = cd.Stream()
    other.wait(cd.Event(timing=False).record(s))
    loop.launch(other)
    other.close()              # its work still completes; the count is read after it, on the capture stream
    assert loop.iterations == 7 and loop.converged is True
    assert float(v.to_numpy(stream=s)[0]) == 3.0
