# cython: language_level=3
"""Ordering after work queued elsewhere: a producer's ready point (an event that
consumers wait for, as an external event node inside a capture), the capture a
stream is part of, and the allocation trace of captures."""
cimport cython
from libc.stdint cimport uintptr_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device
from pycudadrv._stream cimport (Stream, Capture, captures_active, active_captures, forbidding_capture,
                                destroy_handle, capture_info, DESTROY_EVENT)

import os
import sys
import traceback
from pycudadrv._env import env_flag
from pycudadrv._errors import CaptureError

__all__ = ["alloc_trace"]

cdef str _PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

cdef extern from "cuda.h":
    enum:
        CU_EVENT_WAIT_EXTERNAL


def alloc_trace(str what, size_t nbytes, stream=None):
    """With ``PYCUDADRV_ALLOC_TRACE=1``: report on stderr an allocation or host
    upload of ``nbytes`` attempted while ``stream`` (or any stream, for a
    capture pycudadrv did not begin: ``cuStreamIsCapturing``) is capturing,
    with the Python line that asked for it. Returns whether it reported."""
    if not env_flag("PYCUDADRV_ALLOC_TRACE"):
        return False
    cdef Stream s = stream if isinstance(stream, Stream) else None
    cdef CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE
    capturing = forbidding_capture(s) is not None
    if not capturing and s is not None and s._handle != NULL:
        if driver().p_cuStreamIsCapturing(s._handle, &st) == CUDA_SUCCESS:
            capturing = st != CU_STREAM_CAPTURE_STATUS_NONE
    if not capturing:
        return False
    where = "?"
    for f in reversed(traceback.extract_stack()):
        if not os.path.abspath(f.filename).startswith(_PKG_DIR):
            where = f"{f.filename}:{f.lineno}"
            break
    print(f"[pycudadrv alloc-trace] {what} of {nbytes} bytes during a capture, at {where}", file=sys.stderr)
    return True


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class ReadyEvent:
    """A point in a producer's stream that consumers wait for (internal; see
    ``ready_event``). Destroys its event when dropped."""

    def __cinit__(self):
        self._event = NULL

    cdef int wait_on(self, Stream s) except -1:
        cdef pycudadrv_driver_api* d = driver()
        cdef Capture c = capture_of(s)
        s.device.activate()
        if c is None:
            check(d.p_cuStreamWaitEvent(s._handle, self._event, 0), "cuStreamWaitEvent")
            return 0
        c.hold(self)
        if c.body:
            # A device loop's body holds no event nodes: the loop waits for it, once, in front of its
            # conditional node (DeviceLoop adds the node when the body is captured).
            c.body_waits.append(self)
            return 1
        # A wait on an event recorded outside the capture would invalidate it; as an external
        # event node the graph waits for the event's record of now (done after the first replay).
        check(d.p_cuStreamWaitEvent(s._handle, self._event, CU_EVENT_WAIT_EXTERNAL), "cuStreamWaitEvent")
        return 1

    cdef bint done(self) except -1:
        cdef CUresult r
        if captures_active() and forbidding_capture(None) is not None:
            return False
        r = driver().p_cuEventQuery(self._event)
        if r == CUDA_ERROR_NOT_READY:
            return False
        check(r, "cuEventQuery")
        return True

    def __dealloc__(self):
        if self._event != NULL:
            try:
                destroy_handle(DESTROY_EVENT, <void*>self._event, self.device, False)
            except Exception as e:
                warn_dealloc_failure("ReadyEvent", e)
            self._event = NULL


cdef ReadyEvent ready_event(CUstream producer, Device device):
    cdef pycudadrv_driver_api* d = driver()
    cdef ReadyEvent r = ReadyEvent.__new__(ReadyEvent)
    r.device = device
    device.activate()
    check(d.p_cuEventCreate(&r._event, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    check(d.p_cuEventRecord(r._event, producer), "cuEventRecord")
    return r


cdef Capture capture_of(Stream s):
    cdef cuuint64_t cid = 0
    cdef Capture c
    if s._capture is not None:
        return s._capture
    cdef list active = active_captures()
    if not active or s._handle == NULL:
        return None
    if capture_info(s, &cid, NULL) == CU_STREAM_CAPTURE_STATUS_NONE:
        return None
    for c in active:
        if cid != 0 and c.capture_id == cid:
            return c
    raise CaptureError(f"{s!r} is capturing into a graph pycudadrv did not begin (capture id {cid}); pycudadrv "
                       "cannot keep what that graph needs alive: begin the capture with stream.capture()")
