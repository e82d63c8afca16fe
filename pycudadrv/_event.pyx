# cython: language_level=3
"""CUDA events: record, query, synchronize, elapsed time."""
cimport cython
from libc.stdint cimport uintptr_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, as_device
from pycudadrv._stream cimport (Stream, EventBase, resolve_stream, check_not_capturing, destroy_handle,
                                DESTROY_EVENT, captures_active)

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, ClosedError, EventNotRecordedError, short_repr
from pycudadrv._textargs import yes_no

__all__ = ["Event"]


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class Event(EventBase):
    """A CUDA event (``cuEventCreate``), for timing (the default) or, with
    ``timing=False``, for synchronisation only (cheaper to record).

    ``end - start`` (or ``Event.elapsed_ms(start, end)``) gives milliseconds
    between two recorded events.
    """

    def __cinit__(self, *args, timing=True, device=None):
        if args:
            raise ArgumentTypeError(f"Event takes keywords only: Event(timing=True, device=None), got "
                                    f"{len(args)} positional argument{'s' if len(args) > 1 else ''} "
                                    f"({args[0]!r:.40})")
        timing = yes_no(timing, "timing", "Event")
        cdef Device dev = as_device(device, "Event")
        cdef pycudadrv_driver_api* d = driver()
        dev.activate()
        check(d.p_cuEventCreate(&self._handle, CU_EVENT_DEFAULT if timing else CU_EVENT_DISABLE_TIMING),
              "cuEventCreate")
        self.device = dev
        self.timing = timing
        self._recorded = False
        self._closed = False

    def record(self, stream=None):
        """Record the event on ``stream`` (the device's default stream if None)
        (``cuEventRecord``); returns self."""
        self._record_on(resolve_stream(stream, self.device), True)
        return self

    cdef int _record_on(self, Stream s, bint activate) except -1:
        if self._closed:
            raise ClosedError("event is closed")
        if s._closed:
            s.ensure_open()
        if activate:
            self.device.activate()
        check(driver().p_cuEventRecord(self._handle, s._handle), "cuEventRecord")
        self._recorded = True
        return 0

    @property
    def is_recorded(self):
        """Whether ``record()`` was ever called."""
        return self._recorded

    @property
    def closed(self):
        """Whether :meth:`close` was called."""
        return self._closed

    cdef _check_usable(self, str what):
        if self._closed:
            raise ClosedError(f"event.{what}(): the event is closed")
        if not self._recorded:
            raise EventNotRecordedError(f"event.{what}(): the event was never recorded; call event.record(stream) first")
        check_not_capturing(None, f"{what} an event")

    def query(self):
        """True if the work before the event has completed; never blocks (``cuEventQuery``).

        Raises StateError if the event was never recorded."""
        self._check_usable("query")
        self.device.activate()
        cdef CUresult r = driver().p_cuEventQuery(self._handle)
        if r == CUDA_ERROR_NOT_READY:
            return False
        check(r, "cuEventQuery")
        return True

    def synchronize(self):
        """Block until the work before the event has completed (``cuEventSynchronize``).

        Raises StateError if the event was never recorded."""
        self._check_usable("synchronize")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuEventSynchronize(self._handle), "cuEventSynchronize")

    @staticmethod
    def elapsed_ms(start, end, wait=True):
        """Milliseconds between two recorded events (``cuEventElapsedTime``).

        With ``wait=True`` (default) blocks until ``end`` has completed; with
        ``wait=False`` returns None while the work is still running.

        Raises
        ------
        ArgumentTypeError
            ``start`` or ``end`` is not an Event; ``wait`` is not True or False.
        EventNotRecordedError
            Either event was never recorded.
        ArgumentValueError
            Either event was created with ``timing=False``.
        """
        wait = yes_no(wait, "wait", "Event.elapsed_ms")
        for name, ev in (("start", start), ("end", end)):
            if not isinstance(ev, Event):
                raise ArgumentTypeError(f"Event.elapsed_ms: {name} must be a pycudadrv Event (recorded on a stream), "
                                        f"got {type(ev).__name__} {short_repr(ev)}")
            if (<Event>ev)._closed:
                raise ClosedError(f"{name} event is closed")
            if not (<Event>ev)._recorded:
                raise EventNotRecordedError(f"elapsed_ms: {name} event never recorded; record both events first")
            if not (<Event>ev).timing:
                raise ArgumentValueError(f"elapsed_ms: {name} event created without timing (timing=False); use timing=True")
        if wait:
            end.synchronize()
        elif not end.query():
            return None
        cdef float ms = 0
        check(driver().p_cuEventElapsedTime(&ms, (<Event>start)._handle, (<Event>end)._handle), "cuEventElapsedTime")
        return ms

    @staticmethod
    def elapsed_ms_pairs(list starts not None, list ends not None):
        """Milliseconds from ``starts[k]`` to ``ends[k]`` for each k, one ``cuEventElapsedTime`` each (many timed
        passes read at once); raises as :meth:`elapsed_ms`, ArgumentValueError for lists of unequal length."""
        cdef float ms = 0
        out = []
        if len(starts) != len(ends):
            raise ArgumentValueError(f"Event.elapsed_ms_pairs: {len(starts)} start events but {len(ends)} end events")
        for a, b in zip(starts, ends):
            if not (type(a) is Event is type(b) and (<Event>a)._recorded and (<Event>b)._recorded and (<Event>a).timing
                    and (<Event>b).timing and not (<Event>a)._closed and not (<Event>b)._closed):
                Event.elapsed_ms(a, b, False)        # raises the error that applies
            check(driver().p_cuEventElapsedTime(&ms, (<Event>a)._handle, (<Event>b)._handle), "cuEventElapsedTime")
            out.append(ms)
        return out

    def __sub__(self, other):
        if not isinstance(self, Event) or not isinstance(other, Event):
            return NotImplemented
        return Event.elapsed_ms(other, self)

    @property
    def handle(self):
        """The ``CUevent`` as an int."""
        return <uintptr_t>self._handle

    def close(self):
        """Destroy the event (``cuEventDestroy``); a second close is a no-op."""
        if self._closed:
            return
        self._closed = True
        if self._handle != NULL:
            try:
                destroy_handle(DESTROY_EVENT, <void*>self._handle, self.device, True)
            finally:
                self._handle = NULL

    def __dealloc__(self):
        if not self._closed and self._handle != NULL:
            try:
                destroy_handle(DESTROY_EVENT, <void*>self._handle, self.device, False)
            except Exception as e:
                warn_dealloc_failure("Event", e)

    def __repr__(self):
        state = "closed" if self._closed else ("recorded" if self._recorded else "not recorded")
        return f"<Event on device {self.device.ordinal}, timing={'on' if self.timing else 'off'}, {state}>"


cdef int query_now(object ev, bint activate, CUresult* r) except -2:
    cdef Event e
    r[0] = CUDA_SUCCESS
    if type(ev) is not Event or captures_active():
        return -1
    e = <Event>ev
    if e._closed or not e._recorded:
        return -1
    if activate:
        e.device.activate()
    r[0] = driver().p_cuEventQuery(e._handle)
    if r[0] == CUDA_ERROR_NOT_READY:
        return 0
    return 1 if r[0] == CUDA_SUCCESS else -1
