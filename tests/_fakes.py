"""The pretend GPU of the CPU tests: one fake of each kind (device, stream, event, graph capture,
kernel), shared by the Queue, aio, Timestamps, NVTX and config tests.

They stand in for pycudadrv's Python-level classes (``qmod.Stream``, ``aio.Event``,
``tsmod.Event``, ``cd.Device``), never for the driver. Everything they are asked to do is
written to one world, ``GPU``: the log of stream work in order, the label of the last work queued
on each stream, a fault every query raises (a poisoned context), and a tick clock (each recorded
event takes the next tick; ``GPU.completed`` is the tick the GPU has finished up to, for tests
that let the GPU catch up all at once). A test's fixture calls ``GPU.reset()``; the objects are
module globals, so ``from _fakes import GPU`` stays valid across resets.

Completion follows the real rule: an event is done once the test completes it (``complete``),
the clock passes its tick, or it or a later event of its stream is synchronized (work on one
stream finishes in order).
"""
import numpy as np

import pycudadrv as cd
from pycudadrv._signature import parse_signature


class FakeGpu:
    """What every pretend stream and event was asked to do."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.log = []           # ("launch" | "wait" | "wait_stream" | "record" | "begin_capture" | ..., stream id, ...)
        self.last = {}          # stream id -> label of the last work queued on it
        self.fault = None       # a CudaError every query and synchronize raises (a poisoned context)
        self.queries = 0        # event queries asked (cuEventQuery)
        self.syncs = 0          # blocking waits (cuEventSynchronize)
        self.recorded = 0       # the tick of the latest recorded event
        self.completed = 0      # the GPU has finished everything up to this tick
        self.created = 0        # FakeEvents made since the reset
        self.waiter = None      # aio's device waiter, where a test installs one
        return self

    def catch_up(self):
        """The GPU finishes everything recorded so far."""
        self.completed = self.recorded


GPU = FakeGpu()


class FakeDevice:
    """A device (ordinal 0, an H200 by its attributes) that needs no driver."""

    def __init__(self, ordinal=0):
        self.ordinal = ordinal
        self.name = "NVIDIA H200"
        self.compute_capability = (9, 0)
        self.arch = "sm_90"
        self.total_memory = 150_109_880_320
        self.multiprocessor_count = 132


class FakeStream:
    count = 0

    def __init__(self, device=None):
        FakeStream.count += 1
        self.id = FakeStream.count
        self.handle = 0x1000 + self.id
        self.device = FakeDevice()
        self.closed = False
        self.events = []
        self.busy = False

    def wait(self, ev):
        GPU.log.append(("wait", self.id, ev.after))

    def wait_stream(self, other):
        GPU.log.append(("wait_stream", self.id, other.id))

    def synchronize(self):
        if self.closed:
            raise cd.ClosedError("stream is closed")       # as Stream.synchronize
        if GPU.fault is not None:
            raise GPU.fault
        for ev in self.events:
            if ev.stream is self:       # a pooled event recorded on another stream since is that one's
                ev._finish()

    def query(self):
        return not self.busy

    def close(self):
        self.closed = True

    def capture(self, mode="thread_local"):
        return FakeGraph(self)


class FakeEvent:
    def __init__(self, timing=True, device=None):
        GPU.created += 1
        self.device = FakeDevice()
        self.done = False
        self.is_recorded = False
        self.stream = None
        self.after = None       # the label of the work it follows on its stream
        self.tick = None
        self.flag = np.zeros(1, np.int32)     # what aio's test waiter thread spins on: 1 done, else a CUresult

    def record(self, stream):
        if getattr(stream, "closed", False):
            raise cd.ClosedError("stream is closed")       # as Event.record on a closed Stream
        if GPU.fault is not None:
            raise GPU.fault
        GPU.recorded += 1
        self.tick = GPU.recorded
        self.stream = stream
        self.done = False
        self.is_recorded = True
        self.flag[0] = 0
        self.after = GPU.last.get(getattr(stream, "id", None))
        if isinstance(stream, FakeStream):
            stream.events.append(self)
            GPU.log.append(("record", stream.id, self.after))
        return self

    def _finish(self):
        self.done = True
        self.flag[0] = 1

    def query(self):
        GPU.queries += 1
        if GPU.fault is not None:
            raise GPU.fault
        return self.done or (self.tick is not None and self.tick <= GPU.completed)

    def synchronize(self):
        GPU.syncs += 1
        if GPU.fault is not None:
            raise GPU.fault
        events = self.stream.events if isinstance(self.stream, FakeStream) else [self]
        for ev in events:               # its stream's earlier work is done too
            if ev.stream is self.stream and ev.tick is not None and self.tick is not None and ev.tick <= self.tick:
                ev._finish()
        self._finish()

    @staticmethod
    def elapsed_ms(start, end):
        """One tick is one millisecond."""
        assert end.query(), "elapsed time asked of an event the GPU has not reached"
        return float(end.tick - start.tick)

    @staticmethod
    def elapsed_ms_pairs(starts, ends):
        return [FakeEvent.elapsed_ms(a, b) for a, b in zip(starts, ends)]


def complete(*events):
    """The GPU finishes `events`: each is done, and aio's waiter thread sees its flag (1, or the
    fault's code)."""
    for ev in events:
        ev.done = True
        ev.flag[0] = 1 if GPU.fault is None else GPU.fault.code


class FakeGraph:
    """``stream.capture()``: logs its begin and end."""

    def __init__(self, stream):
        self.stream = stream
        self.held = []
        self.entered = self.exited = False

    def __enter__(self):
        self.entered = True
        GPU.log.append(("begin_capture", self.stream.id))
        return self

    def __exit__(self, *exc):
        self.exited = True
        GPU.log.append(("end_capture", self.stream.id))
        return False

    def hold(self, *objs):
        self.held.extend(objs)


class FakeKernel:
    """A Function: each launch is logged on its stream; with ``record``, each is also kept in
    ``calls`` as (grid, block, args, stream, other keywords); ``fail``: an exception every launch raises."""

    def __init__(self, name="k", signature=None, fail=None, record=False):
        self.name = name
        self.device = FakeDevice()
        self.param_layout = None if signature is None else parse_signature(signature)
        self.layout_source = "signature" if signature else "unknown"
        self.calls = [] if record else None
        self.fail = fail

    def launch(self, grid, block, *args, stream=None, **kw):
        if self.calls is not None:
            self.calls.append((grid, block, args, stream, kw))
        if self.fail is not None:
            raise self.fail
        if stream is not None and hasattr(stream, "id"):
            GPU.log.append(("launch", stream.id, self.name))
            GPU.last[stream.id] = self.name
