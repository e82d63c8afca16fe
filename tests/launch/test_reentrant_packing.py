"""Python code that runs while pycudadrv packs a launch's arguments (an argument's
``__cuda_array_interface__`` or ``__dlpack__``, read during the packing) and calls back into the
object being packed: the same Function's ``set_signature``, the same LaunchBuilder's ``push_arg``, the
same PreparedLaunch, the same Queue, or closes a Buffer packed just before. Each was a crash, a launch
with freed or wrong pointers, or lost Queue ordering (a breaker's finds); each must be refused with a
clear error, leave the object as it was, and the next ordinary launch must compute the right values
(checked against NumPy float64). A refused launch must also let go of the DLPack exports it took.
Crash-prone cases run in a child process."""
import gc
import weakref

import numpy as np
import pytest

import pycudadrv as cd

from _children import run_child
from _children import fresh_saxpy as _fresh


def fresh_saxpy(tag):
    return _fresh("reent", tag)


def _child(code):
    """Run ``code`` in a child interpreter (a crash fails one test); its (returncode, output)."""
    return run_child("import sys\nimport numpy as np\nimport pycudadrv as cd\n", code)


def _data(rng, n=300):
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    a = float(np.float32(rng.standard_normal()))
    return x, y0, a


def _want(a, x, y0):
    return np.float32(a) * x.astype(np.float64) + y0.astype(np.float64)


def _check(got, a, x, y0):
    np.testing.assert_allclose(got, _want(a, x, y0), rtol=1e-5, atol=1e-6)


class _Reads:
    """A stand-in array (CAI) over ``buf`` whose first read of ``__cuda_array_interface__`` runs
    ``during()`` and records what it raised."""

    def __init__(self, buf, during):
        self.buf, self.during, self.raised = buf, during, []

    @property
    def __cuda_array_interface__(self):
        if self.during is not None:
            during, self.during = self.during, None
            try:
                during()
            except Exception as e:           # noqa: BLE001 - recorded for the test to check
                self.raised.append(e)
        return self.buf.__cuda_array_interface__


@pytest.mark.gpu
def test_set_signature_during_a_launch_of_it_is_refused_before_anything_changes():
    """It freed the parameter layout the launch was packing with (a SIGSEGV, in a child here), and the
    refused signature stayed applied."""
    rc, out = _child("""
        fn = cd.compile(SAXPY + "__device__ int reent_sig;\\n").load().function("saxpy")
        n = 300
        rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
        x = rng.standard_normal(n).astype(np.float32); y0 = rng.standard_normal(n).astype(np.float32)
        bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0)
        before = fn.layout_source
        raised = []
        class Sig:
            @property
            def __cuda_array_interface__(self):
                try:
                    fn.set_signature("float*, const float*, float, unsigned int")   # same sizes
                except Exception as e:
                    raised.append(type(e).__name__)
                return bx.__cuda_array_interface__
        fn.launch(2, 256, by, Sig(), 1.5, n)
        got = by.to_numpy()
        want = np.float32(1.5) * x.astype(np.float64) + y0
        print("raised", raised, "source", fn.layout_source == before,
              "values", bool(np.allclose(got, want, rtol=1e-5, atol=1e-6)))
        fn.set_signature("float*, const float*, float, unsigned int")     # outside a launch: accepted
        print("after", fn.layout_source)
    """)
    assert rc == 0, out
    assert "raised ['StateError'] source True values True" in out, out
    assert "after signature" in out, out


@pytest.mark.gpu
def test_a_builder_push_made_while_the_builder_packs_is_refused(rng):
    """The inner push counted a parameter the kernel does not have (a read past the spec array) and
    the bytes launched were not the arguments the builder reported."""
    fn = fresh_saxpy("builder push")
    x, y0, a = _data(rng)
    bx, by, other = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0), cd.Buffer.zeros(300, np.float32)
    b = fn.builder(2, 256)
    sneaky = _Reads(by, lambda: b.push_arg(other))
    b.push_arg(sneaky)
    assert [type(e) for e in sneaky.raised] == [cd.StateError], sneaky.raised
    assert "push" in str(sneaky.raised[0]) and "saxpy" in str(sneaky.raised[0])
    assert b.num_pushed == 1 and b.args[0] is sneaky
    b.push_arg(bx).push_arg(a).push_arg(300)
    assert b.num_pushed == 4
    assert int.from_bytes(b.param_bytes()[0], "little") == by.ptr
    assert int.from_bytes(b.param_bytes()[1], "little") == bx.ptr
    b.launch()
    _check(by.to_numpy(), a, x, y0)
    # a 1-parameter kernel: never more pushed than it takes
    k1 = cd.compile('extern "C" __global__ void k1(float* p) {}\n__device__ int reent_k1;').load().function("k1")
    b1 = k1.builder(1, 1)
    s1 = _Reads(by, lambda: b1.push_arg(other))
    b1.push_arg(s1)
    assert b1.num_pushed == 1 and [type(e) for e in s1.raised] == [cd.StateError]
    assert len(b1.param_bytes()) == 1


@pytest.mark.gpu
def test_a_prepared_launch_called_while_it_packs_is_refused(rng):
    """The inner call's bytes stayed bound while p.args named the outer arguments: parameter #0
    pointed at a Buffer nothing held (freed), and p.launch() accepted it."""
    fn = fresh_saxpy("prepared reentry")
    x, y0, a = _data(rng)
    bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0)
    p = fn.bind(2, 256, cd.Buffer.zeros(300, np.float32), bx, 0.0, 300)
    inner = cd.Buffer.zeros(300, np.float32)
    sneaky = _Reads(bx, lambda: p(inner, bx, 3.0, 300))
    p(by, sneaky, a, 300)
    assert [type(e) for e in sneaky.raised] == [cd.StateError], sneaky.raised
    assert p.args[0] is by and p.args[1] is sneaky
    assert int.from_bytes(p.param_bytes()[0], "little") == by.ptr
    _check(by.to_numpy(), a, x, y0)           # the outer call launched once, with its own arguments
    p.launch()
    _check(by.to_numpy(), a, x, _want(a, x, y0).astype(np.float32))
    s2 = _Reads(bx, lambda: p.set_arg(0, inner))
    p(by, s2, a, 300)
    assert [type(e) for e in s2.raised] == [cd.StateError]
    assert int.from_bytes(p.param_bytes()[0], "little") == by.ptr


@pytest.mark.gpu
def test_a_prepared_launch_cannot_be_initialised_twice(rng):
    """A second __init__ pushed the new parameters after the old slots while packing by index: an int
    overwrote bytes of a struct argument, and the launch was accepted."""
    fn = fresh_saxpy("prepared reinit")
    x, y0, a = _data(rng)
    bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0)
    p = fn.bind(2, 256, by, bx, a, 300)
    with pytest.raises(cd.StateError, match="already"):
        p.__init__(fn, 1, 1, bx, by, 2.0, 5)
    assert p.args == (by, bx, a, 300)
    p.launch()
    _check(by.to_numpy(), a, x, y0)


@pytest.mark.gpu
@pytest.mark.parametrize("release_gil", [False, True])
def test_a_buffer_closed_by_a_later_argument_is_never_launched(rng, release_gil):
    """With the GIL released around the driver call (and for kernels of unknown layout, and re-entrant
    launches: the same path) the launch went ahead with the freed pointer."""
    fn = fresh_saxpy(f"closed later {release_gil}")
    x, y0, a = _data(rng)
    bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0)
    victim = cd.Buffer.zeros(300, np.float32)
    prev = cd.set_release_gil(release_gil)
    try:
        with pytest.raises(cd.ClosedError, match=r"saxpy.*parameter #0"):
            fn.launch(2, 256, victim, _Reads(bx, victim.close), a, 300)
        fn.launch(2, 256, by, bx, a, 300)
    finally:
        cd.set_release_gil(prev)
    _check(by.to_numpy(), a, x, y0)


@pytest.mark.gpu
def test_a_queue_submission_made_while_another_is_being_built_is_refused(rng):
    """The inner submission reset the outer one's access list: the outer kernel then waited for
    nothing it depended on (a race on the GPU) and later writers did not wait for it."""
    q = cd.Queue(streams=4, policy="round_robin")
    try:
        fn = fresh_saxpy("queue reentry")
        x, y0, a = _data(rng)
        bx, by = q.from_numpy(x), q.from_numpy(y0)
        q.synchronize()
        noop = cd.compile('extern "C" __global__ void noop() {}\n__device__ int reent_q;').load().function("noop")
        w0 = q.stats()["waits"]
        q.launch(fn, 2, 256, bx, by, 1.0, 300)                    # x += y0: writes bx
        sneaky = _Reads(bx, lambda: q.launch(noop, 1, 1))
        q.launch(fn, 2, 256, by, sneaky, a, 300)                  # reads bx (RAW), writes by (WAR)
        assert [type(e) for e in sneaky.raised] == [cd.StateError], sneaky.raised
        assert "Queue" in str(sneaky.raised[0])
        assert q.stats()["waits"] - w0 >= 1
        q.launch(noop, 1, 1)                                     # outside a submission: fine
        q.synchronize()
        x1 = x.astype(np.float64) + y0
        np.testing.assert_allclose(by.to_numpy(), np.float32(a) * x1.astype(np.float32) + y0, rtol=1e-5, atol=1e-5)
    finally:
        q.close()


class _DLOnly:
    """A DLPack-only device array (as a JAX array is) over a Buffer."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self, stream=None, **kw):
        return self.buf.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


@pytest.mark.gpu
def test_a_refused_launch_lets_go_of_the_dlpack_exports_it_took(rng):
    """Each launch refused after a DLPack argument was packed kept that export (and its producer)
    alive, without bound."""
    fn = fresh_saxpy("dlpack refused")
    x, y0, a = _data(rng)
    bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0)
    refs = []
    for _ in range(200):
        d = _DLOnly(by)
        refs.append(weakref.ref(d))
        with pytest.raises(cd.ArgumentTypeError, match="parameter #1"):
            fn.launch(2, 256, d, "not a pointer", a, 300)
        del d
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    d = _DLOnly(by)
    fn.launch(2, 256, d, bx, a, 300)
    _check(by.to_numpy(), a, x, y0)


@pytest.mark.gpu
def test_a_launch_refused_inside_another_launchs_packing_keeps_the_outer_exports(rng):
    """A launch made (and refused) by an argument's Python code took every DLPack export of the
    thread, the outer launch's too: the outer producer was let go before the outer kernel ran."""
    fn = fresh_saxpy("dlpack nested outer")
    other = fresh_saxpy("dlpack nested inner")
    x, y0, a = _data(rng)
    bx, by = cd.Buffer.from_numpy(x), cd.Buffer.from_numpy(y0)

    def refused():
        other.launch(1, 32, _DLOnly(bx), "not a pointer", 1.0, 1)

    sneaky = _Reads(bx, refused)
    outer = _DLOnly(by)
    ref = weakref.ref(outer)
    fn.launch(2, 256, outer, sneaky, a, 300)
    del outer
    assert [type(e) for e in sneaky.raised] == [cd.ArgumentTypeError]
    assert ref() is not None, "the outer launch's DLPack export was let go before its kernel ran"
    _check(by.to_numpy(), a, x, y0)
