"""Timestamps: labelled passes, request_read / try_take / read as khal has them.

The first part runs anywhere: a pretend stream whose events complete when the
test says so (each event records a tick; a pass lasts end - start ticks, as
milliseconds). The second part (marked gpu) uses real events and kernels."""
import numpy as np
import pytest

import pycudadrv as cd
import pycudadrv.timestamps as tsmod

from _fakes import GPU, FakeEvent, FakeStream


@pytest.fixture
def ts(monkeypatch):
    GPU.reset()
    monkeypatch.setattr(tsmod, "Event", FakeEvent)
    return cd.Timestamps(FakeStream())


def gpu_catches_up():
    GPU.catch_up()


# --- semantics (CPU) ----------------------------------------------------------------------------

def test_try_take_is_none_until_the_gpu_finishes_then_gives_labels_in_order(ts):
    with ts.measure("a"):
        pass
    with ts.measure("b"):
        GPU.recorded += 2                      # two ticks of work inside b
    assert ts.try_take() is None
    gpu_catches_up()
    assert ts.try_take() == [("a", 1.0), ("b", 3.0)]
    assert ts.try_take() == [] and ts.is_idle
    assert GPU.syncs == 0


def test_a_steady_loop_takes_every_event_from_the_pool_and_keeps_the_open_stack_right(ts):
    for _ in range(2):                            # the first frames make the events
        with ts.measure("a"):
            with ts.measure("b"):
                assert [e[0] for e in ts._open] == ["a", "b"]
            assert [e[0] for e in ts._open] == ["a"]
        assert ts._open == []
        gpu_catches_up()
        assert [label for label, _ in ts.try_take()] == ["a", "b"]
    made = GPU.created
    for _ in range(50):
        with ts.measure("a"):
            with ts.measure("b"):
                pass
        gpu_catches_up()
        assert ts.try_take() == [("a", 3.0), ("b", 1.0)]
    assert GPU.created == made                  # every event came back to the pool and out again
    with pytest.raises(ZeroDivisionError):
        with ts.measure("c"):
            1 / 0
    assert ts._open == [] and not ts.is_idle
    ts.reset()                                    # the dropped pass's events go back too
    with ts.measure("a"):
        with ts.measure("b"):
            pass
    assert GPU.created == made
    gpu_catches_up()
    assert [label for label, _ in ts.read()] == ["a", "b"]


def test_is_idle_only_once_the_results_are_taken(ts):
    assert ts.is_idle
    with ts.measure("a"):
        assert not ts.is_idle
    gpu_catches_up()
    assert not ts.is_idle                        # finished on the GPU, but not taken
    assert ts.try_take() == [("a", 1.0)]
    assert ts.is_idle


def test_try_take_never_blocks_and_reports_closed_inner_passes_while_the_outer_is_open(ts):
    with ts.measure("frame"):
        with ts.measure("inner"):
            pass
        assert ts.try_take() is None             # inner asked for, not finished yet
        gpu_catches_up()
        assert ts.try_take() == [("inner", 1.0)]
        assert ts.try_take() is None             # only the open outer pass is left
    assert ts.try_take() is None                 # the outer pass: asked for now, still running
    gpu_catches_up()
    assert ts.try_take() == [("frame", 3.0)]       # ticks 1 (start) to 4 (end)
    assert GPU.syncs == 0


def test_nested_passes_come_back_in_order_of_their_start(ts):
    with ts.measure("outer"):
        with ts.measure("a"):
            pass
        with ts.measure("b"):
            pass
    gpu_catches_up()
    assert [label for label, _ in ts.try_take()] == ["outer", "a", "b"]


def test_request_read_takes_what_is_closed_now_and_later_passes_wait_for_the_next(ts):
    with ts.measure("first"):
        pass
    ts.request_read()
    with ts.measure("second"):
        pass
    GPU.completed = 2                          # the GPU finished "first" only
    assert ts.try_take() == [("first", 1.0)]
    assert ts.try_take() is None
    gpu_catches_up()
    assert ts.try_take() == [("second", 1.0)]


def test_a_steady_loop_gets_every_frame_once_while_the_gpu_lags_behind(ts):
    got = []
    for frame in range(10):
        with ts.measure(f"f{frame}"):
            pass
        GPU.completed = max(0, GPU.recorded - 4)     # the GPU is two frames behind
        r = ts.try_take()
        if r:
            got += r
    gpu_catches_up()
    got += ts.read()
    assert [label for label, _ in got] == [f"f{k}" for k in range(10)]


def test_try_take_once_a_frame_returns_the_frame_before_with_two_frames_of_events_at_most(ts):
    # A call that takes results asks for what closed since: with the GPU one frame behind, each call
    # returns the previous frame, and the events of two frames serve the whole loop (taking every
    # other call, three frames' events were in flight and the pool grew to them).
    got = []
    for frame in range(10):
        for k in range(4):
            with ts.measure(f"f{frame}.{k}"):
                pass
        got.append(ts.try_take())
        gpu_catches_up()                                  # the GPU finishes a frame after its call
    assert got[0] is None
    assert [[label for label, _ in r] for r in got[1:]] == [[f"f{f}.{k}" for k in range(4)] for f in range(9)]
    assert GPU.created == 2 * 4 * 2


def test_taken_events_are_handed_out_again_in_the_order_they_were_recorded(ts):
    for label in ("a", "b"):
        with ts.measure(label):
            pass
    first = [ev for entry in ts._passes for ev in entry[1:]]
    gpu_catches_up()
    assert [label for label, _ in ts.try_take()] == ["a", "b"]
    for label in ("c", "d"):
        with ts.measure(label):
            pass
    assert [ev for entry in ts._passes for ev in entry[1:]] == first     # c.start is a.start, ...


def test_read_blocking_false_raises_not_ready_and_keeps_the_request(ts):
    with ts.measure("a"):
        pass
    with pytest.raises(cd.NotReadyError, match="1 pass"):
        ts.read(blocking=False)
    assert GPU.syncs == 0
    gpu_catches_up()
    assert ts.try_take() == [("a", 1.0)]


class StreamEvent:
    """An event on a pretend stream of its own: done once that stream's work up to it is (``done``)."""

    def __init__(self, timing=True, device=None):
        self.stream = self.t = None

    def record(self, stream):
        stream.n += 1
        self.stream, self.t = stream, stream.n
        return self

    def synchronize(self):
        self.stream.done = max(self.stream.done, self.t)

    queries = 0

    def query(self):
        StreamEvent.queries += 1
        return self.t <= self.stream.done

    @staticmethod
    def elapsed_ms_pairs(starts, ends):
        for e in starts + ends:             # as cuEventElapsedTime: both events complete
            if e.t > e.stream.done:
                raise cd.NotReadyError("cuEventElapsedTime: CUDA_ERROR_NOT_READY")
        return [float(b.t - a.t) if a.stream is b.stream else float(b.t) for a, b in zip(starts, ends)]


class TickStream:
    device = None

    def __init__(self):
        self.n = self.done = 0


def test_passes_on_a_stream_changed_between_them_wait_for_both_and_nothing_is_lost(monkeypatch):
    # The breaker's find: after ts.stream = other, the last end recorded (on the new stream) was taken to
    # finish last; try_take() then raised NotReadyError from the old stream's pass and dropped the results.
    monkeypatch.setattr(tsmod, "Event", StreamEvent)
    s1, s2 = TickStream(), TickStream()
    ts = cd.Timestamps(s1)
    for _ in range(2):
        with ts.measure("slow"):
            s1.n += 5
        ts.stream = s2
        with ts.measure("fast"):
            pass
        s2.done = s2.n                      # the new stream finished, the old one not
        assert ts.try_take() is None
        with pytest.raises(cd.NotReadyError):
            ts.read(blocking=False)
        s1.done = s1.n
        assert ts.try_take() == [("slow", 6.0), ("fast", 1.0)]
        with ts.measure("a"):
            pass
        ts.stream = s1
        with ts.measure("b"):
            pass
        assert ts.read() == [("a", 1.0), ("b", 1.0)] and ts.is_idle      # blocking: waits for both
        assert ts._old_events == {}


def test_a_pass_open_while_the_stream_is_changed_waits_for_its_start_on_the_old_stream(monkeypatch):
    # An outer pass started on s1, the stream changed inside it, an inner pass and the outer's end on s2:
    # s2 done while s1 is not -- its start still pending -- try_take() is None (it raised NotReadyError).
    monkeypatch.setattr(tsmod, "Event", StreamEvent)
    s1, s2 = TickStream(), TickStream()
    ts = cd.Timestamps(s1)
    with ts.measure("outer"):
        s1.n += 3
        ts.stream = s2
        with ts.measure("inner"):
            pass
    s2.done = s2.n
    assert ts.try_take() is None
    s1.done = 1                     # the outer's start done (s1's work after it not)
    got = ts.try_take()
    assert [label for label, _ in got] == ["outer", "inner"] and ts.is_idle
    with ts.measure("again"):
        ts.stream = s1              # changed back inside a pass: read() waits for both streams
    assert [label for label, _ in ts.read()] == ["again"] and ts._old_events == {}


def test_after_a_stream_change_a_frame_loop_goes_back_to_one_query_per_take(monkeypatch):
    # The events of the old stream are asked until seen complete, then forgotten: a loop taking once a
    # frame asks one event per call again (the flag kept every end asked for ever).
    monkeypatch.setattr(tsmod, "Event", StreamEvent)
    s1, s2 = TickStream(), TickStream()
    ts = cd.Timestamps(s1)
    with ts.measure("f0"):
        pass
    ts.stream = s2
    for frame in range(1, 8):
        for label in ("a", "b", "c"):
            with ts.measure(label):
                pass
        s1.done, s2.done = s1.n, s2.n
        StreamEvent.queries = 0
        assert ts.try_take() is not None
        if frame > 2:
            assert StreamEvent.queries == 1
    assert ts._old_events == {}


def test_a_frame_loop_over_two_streams_gets_each_frame_one_call_later(monkeypatch):
    # Passes of a frame alternating between two streams (ts.stream set before each), the GPU a frame
    # behind: each try_take() returns the frame before. Waiting for every event recorded before a change
    # -- the current frame's too, never asked for -- starved it (None every frame).
    monkeypatch.setattr(tsmod, "Event", StreamEvent)
    a, b = TickStream(), TickStream()
    ts = cd.Timestamps(a)
    ends = {}
    for frame in range(10):
        for k in range(4):
            ts.stream = a if k % 2 == 0 else b
            with ts.measure(f"p{k}"):
                pass
        ends[frame] = (a.n, b.n)
        if frame >= 1:
            a.done, b.done = ends[frame - 1]                 # the GPU finished the frame before
        got = ts.try_take()
        if frame >= 2:
            assert [label for label, _ in got] == ["p0", "p1", "p2", "p3"]
    assert len(ts._old_events) <= 2 * 8 and len(ts._passes) <= 4


def test_changing_the_stream_before_every_pass_notes_each_event_once(monkeypatch):
    # Each change noted every untaken pass's events again: N passes made N^2/2 entries to ask.
    monkeypatch.setattr(tsmod, "Event", StreamEvent)
    a, b = TickStream(), TickStream()
    ts = cd.Timestamps(a)
    for k in range(400):
        ts.stream = a if k % 2 else b
        with ts.measure(f"p{k}"):
            pass
    assert len(ts._old_events) <= 2 * 400
    a.done, b.done = a.n, b.n
    StreamEvent.queries = 0
    assert len(ts.try_take()) == 400 and StreamEvent.queries <= 2 * 400 + 1 and ts._old_events == {}


def test_read_waits_for_the_gpu_by_default(ts):
    with ts.measure("a"):
        pass
    assert ts.read() == [("a", 1.0)] and GPU.syncs == 1
    assert ts.wait_read() == [] and ts.is_idle


def test_read_inside_an_open_pass_is_refused(ts):
    with ts.measure("outer"):
        with pytest.raises(cd.StateError, match="inside the open pass 'outer'"):
            ts.read()
        with pytest.raises(RuntimeError):
            ts.reset()


def test_a_pass_that_raises_still_records_its_end(ts):
    with pytest.raises(KeyError):
        with ts.measure("boom"):
            raise KeyError("x")
    gpu_catches_up()
    assert ts.try_take() == [("boom", 1.0)]


def test_a_pass_whose_end_cannot_be_recorded_is_closed_without_a_result(ts):
    # Its stream closed inside the block: the end record raises, and the pass must not stay open
    # (read() and reset() refused forever, every later pass nested in a dead one).
    with ts.measure("kept"):
        pass
    with pytest.raises(cd.ClosedError):
        with ts.measure("outer"):
            with ts.measure("lost"):
                ts.stream.closed = True
    assert ts._open == []
    ts.stream.closed = False
    with ts.measure("after"):
        pass
    gpu_catches_up()
    assert [label for label, _ in ts.read()] == ["kept", "after"]
    made = GPU.created
    for _ in range(4):                          # 8 events: every one made so far (the dropped passes'
        with ts.measure("x"):                   # too, back in the pool) and 3 new
            pass
    assert GPU.created == made + 3 == 8
    ts.reset()


def test_a_pass_whose_end_event_cannot_be_made_is_closed_without_a_result(ts, monkeypatch):
    # The pool empty and cuEventCreate failing (after a fault, out of memory): the pass is dropped
    # like one whose end record fails, instead of staying open.
    def refuse(*a, **k):
        raise MemoryError("cuEventCreate: out of memory")
    with pytest.raises(MemoryError):
        with ts.measure("outer"):
            monkeypatch.setattr(tsmod, "Event", refuse)
    assert ts._open == []
    monkeypatch.setattr(tsmod, "Event", FakeEvent)
    with ts.measure("after"):
        pass
    gpu_catches_up()
    assert [label for label, _ in ts.read()] == ["after"]


def test_reset_drops_everything_and_events_are_reused(ts):
    for _ in range(3):
        with ts.measure("a"):
            pass
    ts.reset()
    assert ts.is_idle and ts.read() == []
    made = GPU.created
    for _ in range(100):
        with ts.measure("step"):
            pass
        gpu_catches_up()
        assert len(ts.try_take()) == 1
    assert GPU.created == made                 # a steady loop creates no events
    assert ts.measure("step") is ts.measure("step")



def test_the_pass_enter_and_exit_descriptors_refuse_what_is_not_a_pass_instead_of_crashing():
    """Pass.__enter__/__exit__ are descriptors: called by hand on another object they raise
    ArgumentTypeError (they cast to Pass unchecked, a segfault: run in a child process)."""
    import subprocess
    import sys
    code = ("from pycudadrv._timing import Pass\n"
            "from pycudadrv._errors import ArgumentTypeError\n"
            "for name in ('__enter__', '__exit__'):\n"
            "    for obj in (5, 'x', object()):\n"
            "        try:\n"
            "            Pass.__dict__[name].__get__(obj, type(obj))\n"
            "        except ArgumentTypeError as e:\n"
            "            print('REFUSED', name, e)\n"
            "    print('SLOT', Pass.__dict__[name].__get__(None, Pass) is Pass.__dict__[name])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("REFUSED") == 6 and r.stdout.count("SLOT True") == 2, r.stdout


def test_a_pass_by_hand_nested_and_raising_keeps_the_open_stack(ts):
    p = ts.measure("outer")
    with pytest.raises(cd.ArgumentTypeError):
        p.__enter__(1)
    with pytest.raises(cd.ArgumentTypeError):
        p.__exit__()
    with pytest.raises(cd.StateError):
        p.__exit__(None, None, None)                 # no pass open
    with pytest.raises(KeyError):
        with p:
            with ts.measure("inner"):
                with p:
                    raise KeyError("x")
    assert p.__enter__() is ts
    assert p.__exit__(None, None, None) is False
    gpu_catches_up()
    assert [label for label, _ in ts.read()] == ["outer", "inner", "outer", "outer"]


# --- on the GPU ---------------------------------------------------------------------------------

KERNEL = r"""
extern "C" __global__ void spin(long long ns, int* flag) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
    if (threadIdx.x == 0) *flag = 1;
}
"""
MS = 1_000_000


@pytest.fixture(scope="module")
def spin():
    return cd.compile(KERNEL).load().function("spin")


@pytest.mark.gpu
def test_gpu_try_take_is_none_while_a_pass_runs_and_idle_only_after_taking(spin):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    ts = cd.Timestamps(s)
    with ts.measure("short"):
        spin.launch(1, 1, 1 * MS, flag, stream=s)
    with ts.measure("long"):
        spin.launch(1, 1, 100 * MS, flag, stream=s)
    assert ts.try_take() is None and not ts.is_idle
    s.synchronize()
    assert not ts.is_idle
    got = ts.try_take()
    assert [label for label, _ in got] == ["short", "long"]
    assert got[1][1] > 90 and got[0][1] < got[1][1]
    assert ts.is_idle


@pytest.mark.gpu
def test_gpu_read_not_ready_then_blocking_read(spin):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    ts = cd.Timestamps(s)
    with ts.measure("long"):
        spin.launch(1, 1, 100 * MS, flag, stream=s)
    with pytest.raises(cd.NotReadyError):
        ts.read(blocking=False)
    ((label, ms),) = ts.read()
    assert label == "long" and ms > 90


@pytest.mark.gpu
def test_gpu_nested_passes_never_block_and_the_outer_spans_the_inner(spin):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    ts = cd.Timestamps(s)
    with ts.measure("outer"):
        with ts.measure("inner"):
            spin.launch(1, 1, 50 * MS, flag, stream=s)
        assert ts.try_take() is None            # inner still running: no wait
        spin.launch(1, 1, 10 * MS, flag, stream=s)
    s.synchronize()
    first = ts.try_take()                       # inner (asked for inside the outer pass)
    second = ts.try_take()                      # then outer, asked for now and already finished
    assert [label for label, _ in first] == ["inner"] and [label for label, _ in second] == ["outer"]
    assert second[0][1] >= first[0][1] + 9


@pytest.mark.gpu
def test_gpu_elapsed_ms_pairs_measures_each_pair_and_refuses_unequal_lists(spin):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    starts = [cd.Event(), cd.Event()]
    ends = [cd.Event(), cd.Event()]
    for k, ns in enumerate((1 * MS, 20 * MS)):
        starts[k].record(s)
        spin.launch(1, 1, ns, flag, stream=s)
        ends[k].record(s)
    s.synchronize()
    short, long_ = cd.Event.elapsed_ms_pairs(starts, ends)
    assert 0.9 < short < long_ and long_ > 19
    with pytest.raises(cd.ArgumentValueError, match="2 start events but 1 end events"):
        cd.Event.elapsed_ms_pairs(starts, ends[:1])
    never = cd.Event()
    with pytest.raises(cd.EventNotRecordedError):
        cd.Event.elapsed_ms_pairs([never], [ends[0]])


@pytest.mark.parametrize("how", ["twice", "never entered", "one more than opened"])
def test_leaving_a_pass_that_is_not_open_raises_and_changes_nothing(ts, how):
    for _ in range(3):                        # a deeper open stack than the passes below use
        with ts.measure("outer"):
            with ts.measure("inner"):
                with ts.measure("innermost"):
                    pass
    GPU.completed = GPU.recorded
    assert len(ts.read()) == 9
    p = ts.measure("p")
    if how == "twice":
        with p:
            pass
    elif how == "one more than opened":
        ts.measure("q").__enter__()
        with p:
            pass
        ts.measure("q").__exit__(None, None, None)
    recorded = GPU.recorded
    with pytest.raises(cd.StateError, match="not open"):
        p.__exit__(None, None, None)
    assert GPU.recorded == recorded         # no event recorded
    assert ts._open == []
    GPU.completed = GPU.recorded
    got = ts.read()
    assert [label for label, _ in got] == {"twice": ["p"], "never entered": [], "one more than opened": ["q", "p"]}[how]
    assert all(ms > 0 for _, ms in got)
    with ts.measure("after"):
        pass
    GPU.completed = GPU.recorded
    assert ts.read() == [("after", 1.0)] and ts.is_idle


@pytest.mark.parametrize("stream", [5, "s", 1.5])
def test_a_stream_that_is_not_a_stream_is_refused_at_construction(stream):
    with pytest.raises(cd.ArgumentTypeError, match="Timestamps: stream must be a pycudadrv Stream, got"):
        cd.Timestamps(stream)


@pytest.mark.parametrize("stream", [12345, "s", None])
def test_a_stream_that_is_not_a_stream_is_refused_by_the_setter_too_and_the_old_one_kept(ts, stream):
    old = ts.stream
    with ts.measure("a"):
        pass
    with pytest.raises(cd.ArgumentTypeError, match=f"Timestamps: stream must be a pycudadrv Stream, got "
                                                   f"{type(stream).__name__}"):
        ts.stream = stream
    assert ts.stream is old
    gpu_catches_up()
    assert ts.read() == [("a", 1.0)]


@pytest.mark.parametrize("blocking", ["no", None, 2, np.array([True])])
def test_read_refuses_a_blocking_that_is_not_a_bool_and_keeps_the_results(ts, blocking):
    with ts.measure("a"):
        pass
    gpu_catches_up()
    with pytest.raises(cd.ArgumentTypeError, match="Timestamps.read: blocking must be True or False"):
        ts.read(blocking=blocking)
    assert ts.read(blocking=0) == [("a", 1.0)]


SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.mark.gpu
def test_gpu_passes_right_after_a_graph_capture_and_a_queue_submission_time_the_kernel_and_keep_its_result(rng):
    """Twice in one process: a graph captured and replayed on the stream, a Queue submission, then
    passes (one prepared launch in each of two passes, inside an outer pass) on the same stream: each
    kernel's result is a * x + y (NumPy float64 reference, outputs poisoned before), and the passes
    come back in order of their start, each non-negative, the outer spanning each inner one."""
    fn = cd.compile(SAXPY).load().function("saxpy")
    n, block = 3000, 256
    grid = (n + block - 1) // block
    s = cd.Stream()
    for rep in range(2):
        x = rng.standard_normal(n).astype(np.float32)
        y0 = rng.standard_normal(n).astype(np.float32)
        xb = cd.Buffer.from_numpy(x, stream=s)

        gy = cd.Buffer.from_numpy(y0, stream=s)
        with s.capture() as g:
            fn.launch(grid, block, gy, xb, 2.0, n, stream=s)
        g.launch(stream=s)
        q = cd.Queue(streams=2)
        qy = cd.Buffer.from_numpy(y0, stream=s)
        s.synchronize()
        q.launch(fn, grid, block, qy, xb, 3.0, n)
        q.synchronize()

        ts = cd.Timestamps(s)
        ya = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)     # poisoned, then y0
        ya.copy_from(cd.Buffer.from_numpy(y0, stream=s))
        yb = cd.Buffer.from_numpy(y0, stream=s)
        pa = fn.bind(grid, block, ya, xb, 0.5, n, stream=s)
        pb = fn.bind(grid, block, yb, xb, -1.5, n, stream=s)
        with ts.measure("frame"):
            with ts.measure("a"):
                pa.launch()
            with ts.measure("b"):
                pb.launch()
        got = ts.read()
        assert [label for label, _ in got] == ["frame", "a", "b"]
        assert all(ms >= 0 for _, ms in got)
        assert got[0][1] >= max(got[1][1], got[2][1])
        assert ts.is_idle

        x64, y64 = x.astype(np.float64), y0.astype(np.float64)
        for buf, a in ((gy, 2.0), (qy, 3.0), (ya, 0.5), (yb, -1.5)):
            np.testing.assert_allclose(buf.to_numpy(), a * x64 + y64, rtol=1e-6, atol=1e-6, err_msg=f"rep {rep}, a={a}")
        q.close()


def test_a_pass_enter_and_exit_are_made_once_and_refuse_wrong_arguments(ts):
    p = ts.measure("a")
    assert p.__enter__ is p.__enter__ and p.__exit__ is ts.measure("b").__exit__    # a `with` makes nothing
    with pytest.raises(cd.ArgumentTypeError, match=r"__enter__\(\) takes no arguments"):
        p.__enter__(1)
    for args, kw in (((None,), {}), ((None, None, None, None), {}), ((None, None, None), {"tb": None})):
        with pytest.raises(cd.ArgumentTypeError, match=r"__exit__\(exc_type, exc, tb\) takes 3 positional"):
            p.__exit__(*args, **kw)
    assert GPU.recorded == 0 and ts.is_idle          # nothing was recorded
    assert p.__enter__() is ts and ts._open[0][0] == "a"
    assert p.__exit__(None, None, None) is False and ts._open == []
    gpu_catches_up()
    assert ts.read() == [("a", 1.0)]


@pytest.mark.gpu
def test_gpu_a_pass_whose_stream_is_closed_inside_it_is_dropped_and_the_next_pass_times(spin):
    s = cd.Stream()
    flag = cd.Buffer.zeros(1, np.int32, stream=s)
    ts = cd.Timestamps(s)
    with pytest.raises(cd.ClosedError):
        with ts.measure("closed"):
            s.synchronize()
            s.close()
    assert ts._open == [] and ts.read() == []
    other = cd.Stream()
    ts.stream = other
    with ts.measure("spin"):
        spin.launch(1, 1, 5 * MS, flag, stream=other)
    (label, ms), = ts.read()
    assert label == "spin" and 4.5 < ms < 500


@pytest.mark.gpu
def test_gpu_passes_on_a_stream_changed_between_them_wait_for_the_slower_stream(spin):
    # A 100 ms pass on one stream, then a short one on another (ts.stream changed between them): the
    # results wait for both (the short one finishing first made try_take raise and lose them).
    a, b = cd.Stream(), cd.Stream()
    flag = cd.Buffer.zeros(2, np.int32, stream=a)
    a.synchronize()
    for _ in range(2):
        ts = cd.Timestamps(a)
        with ts.measure("long"):
            spin.launch(1, 1, 100 * MS, flag[0:1], stream=a)
        ts.stream = b
        with ts.measure("short"):
            spin.launch(1, 1, 1 * MS, flag[1:2], stream=b)
        b.synchronize()
        assert ts.try_take() is None
        a.synchronize()
        got = dict(ts.try_take())
        assert list(got) == ["long", "short"] and 95 < got["long"] < 5000 and 0.9 < got["short"] < 500
        assert ts.is_idle


@pytest.mark.gpu
def test_gpu_a_pass_open_across_a_stream_change_waits_for_its_start(spin):
    # An outer pass whose start is recorded on a behind a 300 ms kernel, ended on b after ts.stream = b:
    # b done first, try_take() is None (it raised NotReadyError) and read() waits for a.
    a, b = cd.Stream(), cd.Stream()
    flag = cd.Buffer.zeros(2, np.int32, stream=a)
    a.synchronize()
    for how in ("try_take", "read"):
        ts = cd.Timestamps(a)
        spin.launch(1, 1, 300 * MS, flag[0:1], stream=a)
        with ts.measure("frame"):
            ts.stream = b
            with ts.measure("inner"):
                spin.launch(1, 1, 1 * MS, flag[1:2], stream=b)
        b.synchronize()
        if how == "try_take":
            assert ts.try_take() is None
            a.synchronize()
            got = dict(ts.try_take())
        else:
            got = dict(ts.read())
        # (the frame's end on b may come before its start on a: cuEventElapsedTime's sign is not ours)
        assert list(got) == ["frame", "inner"] and 0.9 < got["inner"] < 500 and np.isfinite(got["frame"])
        assert ts.is_idle and ts._old_events == {}
