"""A random walk through the lifetime rules: allocate, view, close, bind,
launch, capture, replay and copy across streams, interleaved at random, with
a NumPy model of every live buffer. After every step no kernel may have
written outside live memory: each allocation carries guard words on both
sides, freed memory is poisoned before its free, and every live buffer must
equal its model. 40 walks of 60 steps (2,400 steps) on the GPU machine."""
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

import pycudadrv as cd

pytestmark = pytest.mark.gpu

GUARD = 64                      # float32 words on each side of every allocation
GUARD_VALUE = np.float32(-12345.0)
SRC = r"""
extern "C" __global__ void add(float* x, float c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += c;
}
"""


class Slot:
    """A model buffer: the guarded allocation, the user's view of it, the NumPy model."""

    def __init__(self, raw, view, model, stream, root):
        self.raw, self.view, self.model, self.stream, self.root = raw, view, model, stream, root

    @property
    def closed(self):
        return self.root.raw.closed


class LifetimeMachine(RuleBasedStateMachine):
    slots = Bundle("slots")
    launches = Bundle("launches")
    graphs = Bundle("graphs")

    def __init__(self):
        super().__init__()
        self.fn = _kernel()
        self.streams = [cd.Stream(), cd.Stream()]
        self.roots = []

    # -- memory ---------------------------------------------------------------------------
    @rule(target=slots, n=st.integers(1, 2000), si=st.integers(0, 1), seed=st.integers(0, 2**31 - 1))
    def allocate(self, n, si, seed):
        s = self.streams[si]
        raw = cd.Buffer.empty(n + 2 * GUARD, np.float32, stream=s)
        init = np.random.default_rng(seed).integers(-50, 50, n).astype(np.float32)
        raw.write(np.concatenate([np.full(GUARD, GUARD_VALUE), init, np.full(GUARD, GUARD_VALUE)]), stream=s)
        slot = Slot(raw, raw[GUARD:GUARD + n], init.copy(), s, None)
        slot.root = slot
        self.roots.append(slot)
        return slot

    @rule(target=slots, parent=slots, a=st.integers(0, 1999), b=st.integers(1, 2000))
    def view(self, parent, a, b):
        n = parent.view.size
        a, b = min(a, n - 1), min(max(b, a + 1), n)
        if parent.closed:
            with pytest.raises(cd.ClosedError):
                parent.view[a:b]
            return Slot(parent.raw, parent.view, parent.model, parent.stream, parent.root)
        v = parent.view[a:b]
        return Slot(parent.raw, v, parent.model[a:b], parent.stream, parent.root)   # NumPy view: shared model

    @rule(slot=slots)
    def close(self, slot):
        root = slot.root
        if not root.raw.closed:
            root.raw.fill(np.float32(np.nan), stream=root.stream)    # poison before the free
        root.raw.close()
        root.raw.close()          # a second close is a no-op

    # -- launches -------------------------------------------------------------------------
    @rule(slot=slots, c=st.integers(-3, 3))
    def launch(self, slot, c):
        n = slot.view.size
        args = ((n + 255) // 256, 256, slot.view, float(c), n)
        if slot.closed:
            with pytest.raises(cd.ClosedError):
                self.fn.launch(*args, stream=slot.stream)
            return
        self.fn.launch(*args, stream=slot.stream)
        slot.model += np.float32(c)

    @rule(target=launches, slot=slots, c=st.integers(-3, 3))
    def bind(self, slot, c):
        n = slot.view.size
        if slot.closed:
            with pytest.raises(cd.ClosedError):
                self.fn.bind((n + 255) // 256, 256, slot.view, float(c), n, stream=slot.stream)
            return None
        return (self.fn.bind((n + 255) // 256, 256, slot.view, float(c), n, stream=slot.stream), slot, c)

    @rule(item=launches)
    def relaunch(self, item):
        if item is None:
            return
        p, slot, c = item
        if slot.closed:
            with pytest.raises(cd.ClosedError, match="parameter #0"):
                p()
            return
        p()
        slot.model += np.float32(c)

    @rule(item=launches, bad=st.sampled_from(["x", None, 1j]))
    def failed_rebind(self, item, bad):
        if item is None:
            return
        p, slot, c = item
        before = p.param_bytes()
        with pytest.raises(cd.Error):
            p(slot.view, bad, slot.view.size)
        assert p.param_bytes() == before

    # -- graphs ---------------------------------------------------------------------------
    @rule(target=graphs, slot=slots, c=st.integers(-3, 3), reps=st.integers(1, 3))
    def capture(self, slot, c, reps):
        if slot.closed:
            return None
        n = slot.view.size
        with slot.stream.capture() as g:
            for _ in range(reps):
                self.fn.launch((n + 255) // 256, 256, slot.view, float(c), n, stream=slot.stream)
        return (g, slot, c * reps)

    @rule(item=graphs)
    def replay(self, item):
        if item is None:
            return
        g, slot, total = item
        if g.stream.closed:
            return
        g.launch()                # always valid: the graph keeps its memory even when the buffer is closed
        if not slot.closed:
            slot.model += np.float32(total)

    @rule(item=consumes(graphs))
    def close_graph(self, item):
        if item is not None:
            item[0].close()

    # -- copies across streams ------------------------------------------------------------
    @rule(src=slots, dst=slots)
    def copy(self, src, dst):
        if src.closed or dst.closed:
            with pytest.raises(cd.ClosedError):
                src.view.copy_to(dst.view, nbytes=4)
            return
        m = min(src.view.size, dst.view.size)
        if src.root is dst.root:
            return                # overlapping copies within one allocation are not modelled
        dst.stream.wait_stream(src.stream)
        src.view.copy_to(dst.view, nbytes=4 * m, stream=dst.stream)
        src.stream.wait_stream(dst.stream)   # later writes to src wait for the copy's read
        dst.model[:m] = src.model[:m]

    # -- the check after every step -------------------------------------------------------
    @invariant()
    def memory_matches_the_model_and_guards_are_intact(self):
        for s in self.streams:
            s.synchronize()
        for root in self.roots:
            if root.raw.closed:
                continue
            data = root.raw.to_numpy(stream=root.stream)
            assert (data[:GUARD] == GUARD_VALUE).all() and (data[-GUARD:] == GUARD_VALUE).all(), \
                "a kernel wrote outside its allocation"
            np.testing.assert_array_equal(data[GUARD:-GUARD], root.model)

    def teardown(self):
        for s in self.streams:
            s.synchronize()


_fn = None


def _kernel():
    global _fn
    if _fn is None:
        _fn = cd.compile(SRC).load().function("add")
    return _fn


LifetimeMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=60, deadline=None,
                                             database=None, suppress_health_check=list(HealthCheck))
TestLifetimes = LifetimeMachine.TestCase
