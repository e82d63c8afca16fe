# cython: language_level=3
"""Streams and events."""
cimport cython
from libc.stdint cimport uintptr_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, get_device, current_device, as_device

import threading

# Captures in progress (pycudadrv._graph.CapturedGraph objects), for the checks below.
cdef list active_captures = []


cdef int check_not_capturing(Stream stream, str what) except -1:
    if stream is not None and stream._capture is not None:
        raise RuntimeError(f"cannot {what} during {stream._capture!r}: it would invalidate the capture; "
                           "end the `with stream.capture()` block first")
    if active_captures:
        me = threading.get_ident()
        for c in active_captures:
            if c.mode == "global" or (c.mode == "thread_local" and c.thread_id == me):
                raise RuntimeError(f"cannot {what} while {c!r} is active (mode {c.mode!r} forbids it); "
                                   "end the capture first or capture with mode='relaxed'")
    return 0


cdef Stream resolve_stream(object stream, Device device):
    if stream is None:
        return <Stream>device.default_stream
    if type(stream) is Stream:
        return <Stream>stream
    if isinstance(stream, Stream):
        return <Stream>stream
    return Stream.from_handle(stream, device)


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class Stream:
    """An owned CUDA stream (``cuStreamCreate`` with ``CU_STREAM_NON_BLOCKING``).

    Parameters
    ----------
    device : Device or int, optional
        Device whose primary context owns the stream; the current device by default.

    Work on a non-blocking stream never synchronises with the legacy NULL stream,
    and the stream can be captured into a graph. ``close()`` (or leaving a
    ``with`` block) destroys it after its queued work (``cuStreamDestroy``).
    Supports the ``__cuda_stream__`` protocol.
    """

    def __cinit__(self, device=None, *, bint nonblocking=True, _create=True):
        self.handle = NULL
        self.owned = False
        self.closed = False
        if not _create:
            return
        cdef Device dev = as_device(device)
        cdef pycudadrv_driver_api* d = driver()
        dev.activate()
        check(d.p_cuStreamCreate(&self.handle, CU_STREAM_NON_BLOCKING if nonblocking else 0),
              "cuStreamCreate")
        self.device = dev
        self.owned = True

    @staticmethod
    def from_handle(handle, device=None, owner=None):
        """Wrap a stream created elsewhere (CuPy, PyTorch, cuda.core, a raw
        ``CUstream`` as int) without taking ownership; ``close()`` never destroys it.

        ``handle`` may be an int, or any object with ``__cuda_stream__`` (returns
        ``(version, handle)``) or a ``cuda_stream``/``ptr``/``handle`` attribute.
        ``owner`` (default: ``handle`` when it is an object) is kept alive.
        """
        cdef Stream s = Stream.__new__(Stream, _create=False)
        raw = handle
        if hasattr(handle, "__cuda_stream__"):
            raw = handle.__cuda_stream__()[1]
        elif not isinstance(handle, int):
            for attr in ("cuda_stream", "ptr", "handle"):
                if hasattr(handle, attr):
                    raw = getattr(handle, attr)
                    break
        if not isinstance(raw, int):
            raise TypeError(f"cannot interpret {type(handle).__name__} as a CUDA stream handle")
        if raw < 0 or raw >= 2**64:
            raise ValueError(f"stream handle {raw} out of range")
        driver()
        s.handle = <CUstream><uintptr_t>raw
        s.device = as_device(device)
        s._owner = owner if owner is not None else (None if isinstance(handle, int) else handle)
        return s

    cdef int ensure_open(self) except -1:
        if self.closed:
            raise ValueError("stream is closed")
        return 0

    @property
    def handle(self):
        """The ``CUstream`` as an int."""
        return <uintptr_t>self.handle

    @property
    def closed(self):
        return self.closed

    def __cuda_stream__(self):
        return (0, <uintptr_t>self.handle)

    def synchronize(self):
        """Block until all work queued on the stream has finished (``cuStreamSynchronize``).

        Raises
        ------
        RuntimeError
            The stream is being captured into a graph (synchronising would invalidate it).
        CudaError
            A kernel on the stream failed.
        """
        self.ensure_open()
        check_not_capturing(self, "synchronize a stream")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def query(self):
        """True if all queued work has finished, without blocking (``cuStreamQuery``)."""
        self.ensure_open()
        check_not_capturing(self, "query a stream")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        cdef CUresult r = d.p_cuStreamQuery(self.handle)
        if r == CUDA_ERROR_NOT_READY:
            return False
        check(r, "cuStreamQuery")
        return True

    def wait(self, Event event not None):
        """Make future work on this stream wait for ``event`` (``cuStreamWaitEvent``).

        Raises ValueError if the event was never recorded."""
        self.ensure_open()
        if event.closed:
            raise ValueError("event is closed")
        if not event.recorded:
            raise ValueError("stream.wait(event): the event was never recorded; call event.record(stream) first")
        self.device.activate()
        check(driver().p_cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def record(self, Event event=None):
        """Record ``event`` (a new timing Event if None) on this stream; returns it."""
        if event is None:
            event = Event(device=self.device)
        event.record(self)
        return event

    def capture(self, mode="thread_local"):
        """Capture the work launched on this stream into a CUDA graph.

        ``with stream.capture() as graph:`` records every launch and copy on the
        stream (``cuStreamBeginCapture``); leaving the block ends the capture
        (``cuStreamEndCapture``) and instantiates the graph
        (``cuGraphInstantiateWithFlags``); then ``graph.launch()`` replays it.
        ``mode`` is ``"thread_local"`` (default), ``"global"`` or ``"relaxed"``.
        See :class:`pycudadrv.CapturedGraph`.
        """
        from pycudadrv._graph import CapturedGraph
        return CapturedGraph(self, mode)

    def close(self):
        """Destroy an owned stream (``cuStreamDestroy``); queued work still completes.
        A second close is a no-op."""
        if self.closed:
            return
        if self._capture is not None:
            raise RuntimeError(f"cannot close a stream during {self._capture!r}")
        self.closed = True
        if self.owned and self.handle != NULL:
            try:
                self.device.activate()
                check(driver().p_cuStreamDestroy(self.handle), "cuStreamDestroy")
            finally:
                self.handle = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        cdef pycudadrv_driver_api* d
        if self.owned and not self.closed and self.handle != NULL:
            try:
                d = driver()
                d.p_cuStreamDestroy(self.handle)
            except Exception:
                pass

    def __eq__(self, other):
        return isinstance(other, Stream) and (<Stream>other).handle == self.handle

    def __hash__(self):
        return hash(("pycudadrv.Stream", <uintptr_t>self.handle))

    def __repr__(self):
        state = "closed" if self.closed else ("owned" if self.owned else "foreign")
        dev = self.device.ordinal if self.device is not None else "?"
        return f"<Stream 0x{<uintptr_t>self.handle:x} on device {dev}, {state}>"


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class Event:
    """A CUDA event (``cuEventCreate``), for timing (the default) or, with
    ``timing=False``, for synchronisation only (cheaper to record).

    ``end - start`` (or ``Event.elapsed_ms(start, end)``) gives milliseconds
    between two recorded events.
    """

    def __cinit__(self, *, bint timing=True, device=None):
        cdef Device dev = as_device(device)
        cdef pycudadrv_driver_api* d = driver()
        dev.activate()
        check(d.p_cuEventCreate(&self.handle, CU_EVENT_DEFAULT if timing else CU_EVENT_DISABLE_TIMING),
              "cuEventCreate")
        self.device = dev
        self.timing = timing
        self.recorded = False
        self.closed = False

    def record(self, stream=None):
        """Record the event on ``stream`` (the device's default stream if None)
        (``cuEventRecord``); returns self."""
        if self.closed:
            raise ValueError("event is closed")
        cdef Stream s = resolve_stream(stream, self.device)
        s.ensure_open()
        self.device.activate()
        check(driver().p_cuEventRecord(self.handle, s.handle), "cuEventRecord")
        self.recorded = True
        return self

    @property
    def is_recorded(self):
        """Whether ``record()`` was ever called."""
        return self.recorded

    def query(self):
        """True if the work before the event has completed; never blocks (``cuEventQuery``).

        Raises ValueError if the event was never recorded."""
        if self.closed:
            raise ValueError("event is closed")
        if not self.recorded:
            raise ValueError("event.query(): the event was never recorded; call event.record(stream) first")
        check_not_capturing(None, "query an event")
        self.device.activate()
        cdef CUresult r = driver().p_cuEventQuery(self.handle)
        if r == CUDA_ERROR_NOT_READY:
            return False
        check(r, "cuEventQuery")
        return True

    def synchronize(self):
        """Block until the work before the event has completed (``cuEventSynchronize``).

        Raises ValueError if the event was never recorded."""
        if self.closed:
            raise ValueError("event is closed")
        if not self.recorded:
            raise ValueError("event.synchronize(): the event was never recorded; call event.record(stream) first")
        check_not_capturing(None, "synchronize an event")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuEventSynchronize(self.handle), "cuEventSynchronize")

    @staticmethod
    def elapsed_ms(Event start not None, Event end not None, bint wait=True):
        """Milliseconds between two recorded events (``cuEventElapsedTime``).

        With ``wait=True`` (default) blocks until ``end`` has completed; with
        ``wait=False`` returns None while the work is still running.

        Raises
        ------
        ValueError
            Either event was never recorded, or was created with ``timing=False``.
        """
        for name, ev in (("start", start), ("end", end)):
            if ev.closed:
                raise ValueError(f"{name} event is closed")
            if not ev.recorded:
                raise ValueError(f"elapsed_ms: {name} event never recorded; record both events first")
            if not ev.timing:
                raise ValueError(f"elapsed_ms: {name} event created without timing (Event(timing=False)); "
                                 "create it with timing=True to measure time")
        if wait:
            end.synchronize()
        elif not end.query():
            return None
        cdef float ms = 0
        check(driver().p_cuEventElapsedTime(&ms, start.handle, end.handle), "cuEventElapsedTime")
        return ms

    def __sub__(self, other):
        if not isinstance(self, Event) or not isinstance(other, Event):
            return NotImplemented
        return Event.elapsed_ms(other, self)

    @property
    def handle(self):
        """The ``CUevent`` as an int."""
        return <uintptr_t>self.handle

    def close(self):
        """Destroy the event (``cuEventDestroy``); a second close is a no-op."""
        if self.closed:
            return
        self.closed = True
        if self.handle != NULL:
            try:
                check(driver().p_cuEventDestroy(self.handle), "cuEventDestroy")
            finally:
                self.handle = NULL

    def __dealloc__(self):
        if not self.closed and self.handle != NULL:
            try:
                driver().p_cuEventDestroy(self.handle)
            except Exception:
                pass

    def __repr__(self):
        state = "closed" if self.closed else ("recorded" if self.recorded else "not recorded")
        return f"<Event on device {self.device.ordinal}, timing={'on' if self.timing else 'off'}, {state}>"
