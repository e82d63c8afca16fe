# cython: language_level=3
"""Streams, the capture state of a stream being recorded into a graph, and the destruction
of driver handles that a capture in progress forbids until it ends."""
cimport cython
from libc.stdint cimport uintptr_t
from cpython.ref cimport Py_INCREF, Py_DECREF
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, get_device, current_device, as_device

import os
import sys
import threading
import traceback
from pycudadrv._env import env_flag
from pycudadrv._textargs import stream_arguments
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CaptureError, ClosedError, StateError,
                               EventNotRecordedError)

__all__ = ["Stream", "Capture", "synchronize_context"]

# Captures in progress, for the checks below (a global-mode capture forbids
# unsafe calls on every thread; a thread-local one on its own thread).
cdef list _active = []

cdef dict _MODES = {"global": CU_STREAM_CAPTURE_MODE_GLOBAL, "thread_local": CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                    "relaxed": CU_STREAM_CAPTURE_MODE_RELAXED}


cdef Capture forbidding_capture(Stream stream):
    cdef Capture c
    if stream is not None and stream._capture is not None:
        return stream._capture
    if _active:
        me = threading.get_ident()
        for c in _active:
            if c.mode == "global" or (c.mode == "thread_local" and c.thread_id == me):
                return c
    return None


cdef bint captures_active() noexcept:
    return len(_active) > 0


cdef list active_captures():
    return _active


cdef int check_launch_outside_capture(Stream s) except -1:
    cdef Capture c
    me = threading.get_ident()
    for c in _active:
        if c.body and c.thread_id == me and c.stream is not s:
            raise CaptureError(f"cannot launch on {s!r} while the body of a device loop is being captured on "
                               f"{c.stream!r}: the work would not repeat with the loop; launch on the loop's stream")
    return 0


cdef int check_not_capturing(Stream stream, str what) except -1:
    cdef Capture c = forbidding_capture(stream)
    if c is None:
        return 0
    if stream is not None and c is stream._capture:
        raise CaptureError(f"cannot {what} during {c!r}: it would invalidate the capture; end the `with stream.capture()` block first")
    raise CaptureError(f"cannot {what} while {c!r} is active (mode {c.mode!r} forbids it); "
                       "end the capture first or capture with mode='relaxed'")


cdef void _host_trampoline(void* data) noexcept nogil:
    with gil:
        obj = <object>data
        try:
            obj()
        except BaseException:
            traceback.print_exc()
        finally:
            Py_DECREF(obj)


cdef Stream resolve_stream(object stream, Device device):
    if stream is None:
        return <Stream>device.default_stream
    if type(stream) is Stream:
        return <Stream>stream
    if isinstance(stream, Stream):
        return <Stream>stream
    return Stream.from_handle(stream, device)


cdef int order_after(Stream consumer, Stream producer) except -1:
    cdef pycudadrv_driver_api* d
    cdef CUevent ev = NULL
    if producer is None or consumer is None or (producer._handle == consumer._handle and not producer._closed):
        return 0
    d = driver()
    if producer._closed:
        if producer._final != NULL:
            consumer.device.activate()
            check(d.p_cuStreamWaitEvent(consumer._handle, producer._final, 0), "cuStreamWaitEvent")
        return 0
    producer.device.activate()    # the event belongs to the producer's context
    check(d.p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        check(d.p_cuEventRecord(ev, producer._handle), "cuEventRecord")
        consumer.device.activate()
        check(d.p_cuStreamWaitEvent(consumer._handle, ev, 0), "cuStreamWaitEvent")
    finally:
        d.p_cuEventDestroy(ev)   # released once the wait is satisfied
    return 0


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class _DeferredDestroy(CaptureWork):
    """A handle whose destruction a capture forbade: destroyed when it ends."""
    cdef int kind
    cdef void* handle
    cdef Device device

    cdef int capture_ended(self) except -1:
        _destroy_now(self.kind, self.handle, self.device, False)
        self.handle = NULL
        return 0


cdef int _destroy_now(int kind, void* handle, Device device, bint raise_errors) except -1:
    cdef pycudadrv_driver_api* d = driver()
    cdef CUresult r
    if device is not None:
        device.activate()
    call = ("", "cuStreamDestroy", "cuEventDestroy", "cuGraphDestroy", "cuGraphExecDestroy", "cuModuleUnload")[kind]
    # Without the GIL: a destruction may wait for the device (a module's unload does), and a host
    # function queued before it (aio's completions) needs the GIL to finish.
    with nogil:
        if kind == DESTROY_STREAM:
            r = d.p_cuStreamDestroy(<CUstream>handle)
        elif kind == DESTROY_EVENT:
            r = d.p_cuEventDestroy(<CUevent>handle)
        elif kind == DESTROY_GRAPH:
            r = d.p_cuGraphDestroy(<CUgraph>handle)
        elif kind == DESTROY_GRAPH_EXEC:
            r = d.p_cuGraphExecDestroy(<CUgraphExec>handle)
        else:
            r = d.p_cuModuleUnload(<CUmodule>handle)
    if r != CUDA_SUCCESS:
        if raise_errors:
            check(r, call.encode())
        warn_dealloc_failure(call, make_error(r, call))
    return 0


cdef int destroy_handle(int kind, void* handle, Device device, bint raise_errors) except -1:
    cdef Capture c
    cdef _DeferredDestroy w
    if handle == NULL:
        return 0
    if _active:
        c = forbidding_capture(None)
        if c is not None:
            w = _DeferredDestroy.__new__(_DeferredDestroy)
            w.kind, w.handle, w.device = kind, handle, device
            c.defer(w)
            return 0
    return _destroy_now(kind, handle, device, raise_errors)


cdef int order_after_uses(Stream consumer, Stream producer) except -1:
    if producer is None or producer._owned or producer._closed or producer._handle == NULL:
        # (the NULL handle, the legacy stream: mark_use records nothing there; an event recorded now
        # covers everything queued on it so far)
        return order_after(consumer, producer)
    if producer._last_use == NULL:
        return 0                  # pycudadrv queued nothing on it
    consumer.device.activate()
    check(driver().p_cuStreamWaitEvent(consumer._handle, producer._last_use, 0), "cuStreamWaitEvent")
    return 0


def synchronize_context(device=None):
    """Wait for every stream of ``device``'s primary context (``cuCtxSynchronize``).

    Raises CaptureError during a capture that forbids it."""
    cdef Device dev = as_device(device, "synchronize_context")
    check_not_capturing(None, "synchronize the device")
    cdef pycudadrv_driver_api* d = driver()
    dev.activate()
    with nogil:
        check(d.p_cuCtxSynchronize(), "cuCtxSynchronize")


# Passed to Stream.__new__ by from_handle: the fields are filled there, no stream is created.
cdef object _WRAP = object()


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class Stream:
    """An owned CUDA stream (``cuStreamCreateWithPriority``, with ``CU_STREAM_NON_BLOCKING`` by default).

    Parameters
    ----------
    device : Device or int, optional
        Device whose primary context owns the stream; the current device by default.
    nonblocking : bool, keyword-only
        True (default): the stream never synchronises with the legacy NULL
        stream (``CU_STREAM_NON_BLOCKING``). False: a blocking stream.
    priority : int, keyword-only
        The stream's scheduling priority. Lower numbers are higher priority in
        CUDA: 0 is the default (the lowest priority on current GPUs) and the
        highest is negative (e.g. -5; :meth:`priority_range` gives the
        device's range). Pending work of a higher-priority stream is
        scheduled first.

    Raises
    ------
    ArgumentTypeError
        A priority that is not an int (a bool included), more than one
        positional argument, or an unknown keyword; checked before any
        driver call.
    ArgumentValueError
        A priority outside the device's range (``cuCtxGetStreamPriorityRange``),
        which the driver would silently clamp; the message gives the range.

    Work on a non-blocking stream never synchronises with the legacy NULL stream,
    and the stream can be captured into a graph. ``close()`` (or leaving a
    ``with`` block) destroys it after its queued work (``cuStreamDestroy``).
    Supports the ``__cuda_stream__`` protocol.
    """

    def __cinit__(self, *args, **kwargs):
        self._handle = NULL
        self._owned = False
        self._closed = False
        self._final = NULL
        self._last_use = NULL
        self._capture = None
        if len(args) == 1 and args[0] is _WRAP and not kwargs:
            return     # from_handle: no stream of our own
        device, nonblocking, priority = stream_arguments(args, kwargs)
        cdef Device dev = as_device(device, "Stream")
        cdef pycudadrv_driver_api* d = driver()
        least, greatest = dev.stream_priority_range()       # activates dev's context
        if not greatest <= priority <= least:
            raise ArgumentValueError(f"Stream: priority {priority} is outside the range of device {dev.ordinal}: "
                                     f"{greatest} (highest) to {least} (lowest); lower numbers are higher "
                                     "priority in CUDA, 0 is the default")
        check(d.p_cuStreamCreateWithPriority(&self._handle, CU_STREAM_NON_BLOCKING if nonblocking else 0,
                                             <int>priority), "cuStreamCreateWithPriority")
        self.device = dev
        self._owned = True

    @staticmethod
    def priority_range(device=None):
        """``(least, greatest)``: the lowest and the highest stream priority of
        ``device`` (the current one by default), as CUDA numbers them, e.g.
        ``(0, -5)``: lower numbers are higher priority, so ``greatest`` is the
        most negative; both are 0 where the device has no priorities
        (``cuCtxGetStreamPriorityRange``)."""
        return as_device(device, "Stream.priority_range").stream_priority_range()

    @property
    def priority(self):
        """The stream's priority as the driver has it (``cuStreamGetPriority``):
        an int, lower numbers higher priority, 0 the default. Raises
        ClosedError after :meth:`close`."""
        self.ensure_open()
        cdef int p = 0
        self.device.activate()
        check(driver().p_cuStreamGetPriority(self._handle, &p), "cuStreamGetPriority")
        return p

    @staticmethod
    def from_handle(handle, device=None, owner=None):
        """Wrap a stream created elsewhere (CuPy, PyTorch, cuda.core, a raw
        ``CUstream`` as int) without taking ownership; ``close()`` never destroys it.

        ``handle`` may be an int, or any object with ``__cuda_stream__`` (returns
        ``(version, handle)``) or a ``cuda_stream``/``ptr``/``handle`` attribute.
        ``owner`` (default: ``handle`` when it is an object) is kept alive.

        Raises ArgumentTypeError when ``handle`` is none of these, and
        ArgumentValueError for a handle outside ``[0, 2**64)``.
        """
        cdef Stream s = Stream.__new__(Stream, _WRAP)
        raw = handle
        if hasattr(handle, "__cuda_stream__"):
            got = handle.__cuda_stream__()
            if not isinstance(got, tuple) or len(got) != 2:
                raise ArgumentTypeError(f"Stream.from_handle: {type(handle).__name__}.__cuda_stream__() must return "
                                        f"(version, handle), got {type(got).__name__} {got!r:.60}")
            raw = got[1]
        elif not isinstance(handle, int):
            for attr in ("cuda_stream", "ptr", "handle"):
                if hasattr(handle, attr):
                    raw = getattr(handle, attr)
                    break
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ArgumentTypeError(f"cannot interpret {type(handle).__name__} as a CUDA stream handle")
        if raw < 0 or raw >= 2**64:
            raise ArgumentValueError(f"stream handle {raw} out of range")
        driver()
        s._handle = <CUstream><uintptr_t>raw
        s.device = as_device(device, "Stream.from_handle")
        s._owner = owner if owner is not None else (None if isinstance(handle, int) else handle)
        return s

    cdef int ensure_open(self) except -1:
        if self._closed:
            raise ClosedError("stream is closed")
        return 0

    cdef int mark_use(self) except -1:
        cdef pycudadrv_driver_api* d
        if self._owned or self._handle == NULL:
            return 0
        d = driver()
        if self._last_use == NULL:
            check(d.p_cuEventCreate(&self._last_use, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        check(d.p_cuEventRecord(self._last_use, self._handle), "cuEventRecord")
        return 0

    @property
    def handle(self):
        """The ``CUstream`` as an int."""
        return <uintptr_t>self._handle

    @property
    def closed(self):
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def capturing(self):
        """Whether pycudadrv is capturing this stream into a graph right now."""
        return self._capture is not None

    @property
    def capture_state(self):
        """The :class:`Capture` in progress on this stream, or None."""
        return self._capture

    def __cuda_stream__(self):
        return (0, <uintptr_t>self._handle)

    def synchronize(self):
        """Block until all work queued on the stream has finished (``cuStreamSynchronize``).

        Raises
        ------
        CaptureError
            The stream is being captured into a graph (synchronising would invalidate it).
        CudaError
            A kernel on the stream failed.
        """
        self.ensure_open()
        check_not_capturing(self, "synchronize a stream")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuStreamSynchronize(self._handle), "cuStreamSynchronize")

    def query(self):
        """True if all queued work has finished, without blocking (``cuStreamQuery``)."""
        self.ensure_open()
        check_not_capturing(self, "query a stream")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        cdef CUresult r = d.p_cuStreamQuery(self._handle)
        if r == CUDA_ERROR_NOT_READY:
            return False
        check(r, "cuStreamQuery")
        return True

    def wait(self, EventBase event not None):
        """Make future work on this stream wait for ``event`` (``cuStreamWaitEvent``).

        Raises StateError if the event was never recorded."""
        self.ensure_open()
        if event._closed:
            raise ClosedError("event is closed")
        if not event._recorded:
            raise EventNotRecordedError("stream.wait(event): the event was never recorded; call event.record(stream) first")
        self.device.activate()
        check(driver().p_cuStreamWaitEvent(self._handle, event._handle, 0), "cuStreamWaitEvent")

    def wait_stream(self, Stream other not None):
        """Make future work on this stream wait for the work queued so far on
        ``other`` (an event recorded on ``other``, then ``cuStreamWaitEvent``)."""
        self.ensure_open()
        order_after(self, other)

    def record(self, event=None):
        """Record ``event`` (a new timing Event if None) on this stream; returns it."""
        from pycudadrv._event import Event
        if event is None:
            event = Event(device=self.device)
        elif not isinstance(event, Event):
            raise ArgumentTypeError(f"Stream.record: event must be a pycudadrv Event, got {type(event).__name__}")
        event.record(self)
        return event

    def launch_host_func(self, callback):
        """Run the Python callable ``callback()`` on a driver thread once the
        work queued so far on the stream has finished (``cuLaunchHostFunc``).
        The callable must not make CUDA calls; an exception it raises is
        printed and dropped. It takes the GIL on the driver thread, so a
        thread that holds the GIL in a driver call meanwhile (``cuStreamCreate``
        is one that can wait for a running host function) deadlocks with it
        (:mod:`pycudadrv.aio` uses no host function).

        Raises CaptureError during a capture of this stream (it would become a
        host node that holds the interpreter inside the graph)."""
        self.ensure_open()
        check_not_capturing(self, "enqueue a host function")
        if not callable(callback):
            raise ArgumentTypeError(f"launch_host_func: callback must be callable, got {type(callback).__name__}")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        Py_INCREF(callback)
        cdef CUresult r = d.p_cuLaunchHostFunc(self._handle, _host_trampoline, <void*>callback)
        if r != CUDA_SUCCESS:
            Py_DECREF(callback)
            check(r, "cuLaunchHostFunc")

    def capture(self, mode="thread_local", *, pdl=False):
        """Capture the work launched on this stream into a CUDA graph.

        ``with stream.capture() as graph:`` records every launch and copy on the
        stream (``cuStreamBeginCapture``); leaving the block ends the capture
        (``cuStreamEndCapture``) and instantiates the graph
        (``cuGraphInstantiateWithFlags``); then ``graph.launch()`` replays it.
        ``mode`` is ``"thread_local"`` (default), ``"global"`` or ``"relaxed"``.
        With ``pdl=True`` every kernel captured is launched with programmatic
        stream serialization, so consecutive kernels are joined by programmatic
        edges (compute capability 9.0+; see docs/graphs.md for the kernel-side
        contract). See :class:`pycudadrv.CapturedGraph`.
        """
        from pycudadrv._graph import CapturedGraph
        return CapturedGraph(self, mode, pdl=pdl)

    def loop(self, mode="thread_local", *, pdl=False, times=None, until=None, max_iterations=None):
        """A device-side loop: ``with stream.loop(times=N) as loop:`` (or
        ``until=pycudadrv.when(buf, "<", tol), max_iterations=M``) captures the
        body once; ``loop.launch()`` then repeats it on the GPU through a
        conditional WHILE node, with no host round trip between iterations.
        See :class:`pycudadrv.DeviceLoop`."""
        from pycudadrv._loops import DeviceLoop
        return DeviceLoop(self, mode, pdl=pdl, times=times, until=until, max_iterations=max_iterations)

    def close(self):
        """Destroy an owned stream (``cuStreamDestroy``); queued work still completes.
        A second close is a no-op.

        Raises CaptureError while the stream is being captured."""
        if self._closed:
            return
        if self._capture is not None:
            raise CaptureError(f"cannot close a stream during {self._capture!r}")
        cdef pycudadrv_driver_api* d
        self._closed = True
        if self._owned and self._handle != NULL:
            d = driver()
            try:
                self.device.activate()
                # Frees of memory this stream used wait for this event, not for a stream that is gone.
                if d.p_cuEventCreate(&self._final, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS:
                    if d.p_cuEventRecord(self._final, self._handle) != CUDA_SUCCESS:
                        d.p_cuEventDestroy(self._final)
                        self._final = NULL
                else:
                    self._final = NULL
                destroy_handle(DESTROY_STREAM, <void*>self._handle, self.device, True)
            finally:
                self._handle = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        cdef pycudadrv_driver_api* d
        cdef CUresult r
        try:
            if self._owned and not self._closed and self._handle != NULL:
                destroy_handle(DESTROY_STREAM, <void*>self._handle, self.device, False)
            if self._final != NULL:
                destroy_handle(DESTROY_EVENT, <void*>self._final, self.device, False)
            if self._last_use != NULL:
                destroy_handle(DESTROY_EVENT, <void*>self._last_use, self.device, False)
        except Exception as e:
            warn_dealloc_failure("Stream", e)

    def __eq__(self, other):
        return isinstance(other, Stream) and (<Stream>other)._handle == self._handle

    def __hash__(self):
        return hash(("pycudadrv.Stream", <uintptr_t>self._handle))

    def __repr__(self):
        state = "closed" if self._closed else ("owned" if self._owned else "foreign")
        if self._capture is not None:
            state += ", capturing"
        dev = self.device.ordinal if self.device is not None else "?"
        return f"<Stream 0x{<uintptr_t>self._handle:x} on device {dev}, {state}>"


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class EventBase:
    """The fields of an Event (internal: see pycudadrv.Event)."""


cdef Capture begin_capture(Stream stream, str mode, bint pdl, CUgraph target):
    if mode not in _MODES:
        raise ArgumentValueError(f"capture mode must be one of {sorted(_MODES)}, got {mode!r}")
    stream.ensure_open()
    if stream._capture is not None:
        raise CaptureError(f"stream is already being captured ({stream._capture!r})")
    if stream._handle == NULL:
        raise ArgumentValueError("the legacy default (NULL) stream cannot be captured; capture an owned Stream "
                                 "(e.g. device.default_stream or Stream())")
    if pdl and stream.device.cc_major < 9:
        from pycudadrv._errors import NotSupportedError
        raise NotSupportedError(f"capture(pdl=True): programmatic dependent launch needs compute capability "
                                f"9.0 or newer; device {stream.device.ordinal} is "
                                f"{stream.device.cc_major}.{stream.device.cc_minor}")
    cdef pycudadrv_driver_api* d = driver()
    cdef Capture c = Capture.__new__(Capture)
    c.stream = stream
    c.mode = mode
    c._mode = <CUstreamCaptureMode>_MODES[mode]
    c.pdl = pdl
    c.body = False
    c.held = []
    c.kernels = []
    c._deferred = []
    c._allocations = []
    c.finalizers = []
    c.body_waits = []
    c._target = target
    stream.device.activate()
    if target != NULL:
        if d.p_cuStreamBeginCaptureToGraph == NULL:
            from pycudadrv._errors import NotSupportedError
            raise NotSupportedError("capturing into an existing graph needs cuStreamBeginCaptureToGraph "
                                    "(a CUDA 12.3+ driver)")
        check(d.p_cuStreamBeginCaptureToGraph(stream._handle, target, NULL, NULL, 0, c._mode),
              "cuStreamBeginCaptureToGraph")
    else:
        check(d.p_cuStreamBeginCapture(stream._handle, c._mode), "cuStreamBeginCapture")
    c._active = True
    c.thread_id = threading.get_ident()
    c.capture_id = _capture_id(stream)
    stream._capture = c
    _active.append(c)
    return c


cdef unsigned long long _capture_id(Stream s) except? 0:
    cdef cuuint64_t cid = 0
    capture_info(s, &cid, NULL)
    return cid


cdef CUstreamCaptureStatus capture_info(Stream s, cuuint64_t* cid, CUgraphNode* last) except? -1:
    return handle_capture_info(s._handle, cid, last)


cdef CUstreamCaptureStatus handle_capture_info(CUstream h, cuuint64_t* cid, CUgraphNode* last) except? -1:
    cdef pycudadrv_driver_api* d = driver()
    cdef CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE
    cdef cuuint64_t id_ = 0
    cdef CUgraph g = NULL
    cdef const CUgraphNode* deps = NULL
    cdef const CUgraphEdgeData* edges = NULL
    cdef size_t ndeps = 0
    if d.p_cuStreamGetCaptureInfo == NULL:
        check(d.p_cuStreamIsCapturing(h, &st), "cuStreamIsCapturing")
    else:
        check(d.p_cuStreamGetCaptureInfo(h, &st, &id_, &g, &deps, &edges, &ndeps), "cuStreamGetCaptureInfo")
    if cid != NULL:
        cid[0] = id_
    if last != NULL:
        last[0] = <CUgraphNode>deps[0] if ndeps == 1 else NULL
    return st


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class CaptureWork:
    """Work a capture runs when it ends (internal): see _stream.pxd."""

    cdef int capture_ending(self, Capture c, bint discard) except -1:
        return 0

    cdef int capture_ended(self) except -1:
        return 0


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class Capture:
    """The state of a stream capture in progress (made by ``stream.capture()``
    and the device-loop builders; not constructed directly)."""

    def __init__(self, *args, **kwargs):
        raise ArgumentTypeError("captures begin with stream.capture()")

    cdef int hold(self, object obj) except -1:
        self.held.append(obj)
        return 0

    cdef int hold_all(self, tuple objs) except -1:
        self.held.extend(objs)
        return 0

    cdef object last_node(self):
        """The node the next captured work depends on when there is exactly one, as int."""
        cdef CUgraphNode last = NULL
        capture_info(self.stream, NULL, &last)
        return <uintptr_t>last if last != NULL else None

    cdef int on_launch(self, object fn, const unsigned int* grid, const unsigned int* block, unsigned int shmem,
                       tuple args, CUgraphDeviceNode devnode) except -1:
        """Called by every launch captured on the stream: keep the arguments alive
        and remember the kernel node (for set_kernel_args and device updates)."""
        self.held.extend(args)
        self.kernels.append((self.last_node(), fn, (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]),
                             shmem, args, <uintptr_t>devnode))
        return 0

    cdef int defer(self, CaptureWork w) except -1:
        self._deferred.append(w)
        return 0

    cdef int on_alloc(self, CaptureWork w) except -1:
        self._allocations.append(w)
        return 0

    cdef CUgraph end(self, bint discard) except? NULL:
        cdef pycudadrv_driver_api* d = driver()
        cdef Stream s = self.stream
        cdef CUgraph g = NULL
        cdef CUresult r
        err = None
        s.device.activate()
        # Allocations made inside the capture become graph memory nodes; free them inside
        # the graph too, so each replay starts and ends with the same memory.
        for w in self._allocations:
            try:
                (<CaptureWork>w).capture_ending(self, discard)
            except Exception as e:   # the capture must end whatever happens
                err = e
        self._allocations = []
        r = d.p_cuStreamEndCapture(s._handle, &g)
        self._active = False
        s._capture = None
        if self in _active:
            _active.remove(self)
        deferred = self._deferred
        self._deferred = []
        for w in deferred:
            try:
                (<CaptureWork>w).capture_ended()
            except Exception as e:   # every deferred piece runs; the first failure is reported
                warn_dealloc_failure("deferred work of a capture", e)
        if discard or err is not None:
            if g != NULL and self._target == NULL:
                d.p_cuGraphDestroy(g)
            if err is not None:
                raise err
            return NULL
        if r != CUDA_SUCCESS:
            if g != NULL and self._target == NULL:
                d.p_cuGraphDestroy(g)
            raise make_error(r, "cuStreamEndCapture", f"ending {self!r}")
        return g

    @property
    def active(self):
        """Whether the capture is still in progress."""
        return self._active

    def add_finalizer(self, fn):
        """Run ``fn(graph)`` once the capture has ended, before the graph is
        instantiated (used to patch captured nodes, e.g. for GPU-driven
        indirect dispatch)."""
        if not callable(fn):
            raise ArgumentTypeError(f"add_finalizer: expected a callable, got {type(fn).__name__}")
        self.finalizers.append(fn)

    def last_kernel_node(self):
        """The graph node (as int) of the last kernel launch captured, or None."""
        return self.kernels[-1][0] if self.kernels else None

    def __repr__(self):
        where = f"0x{<uintptr_t>self.stream._handle:x}" if self.stream is not None else "(none)"
        return (f"<Capture mode={self.mode!r}{', pdl' if self.pdl else ''} on stream {where}, "
                f"{'active' if self._active else 'ended'}, {len(self.kernels or ())} kernel launches>")
