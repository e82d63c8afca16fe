from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device

cdef class Stream:
    cdef CUstream handle
    cdef readonly Device device
    cdef bint owned
    cdef bint closed
    cdef object _owner          # keeps a foreign stream's owner alive
    cdef public object _capture  # the capture in progress on this stream, if any

    cdef int ensure_open(self) except -1

cdef class Event:
    cdef CUevent handle
    cdef readonly Device device
    cdef readonly bint timing
    cdef bint recorded
    cdef bint closed

# Raise RuntimeError if `what` (a host-synchronising or unsafe call) is illegal now
# because a capture is active: on `stream` itself, any global-mode capture, or a
# thread-local one on this thread.
cdef int check_not_capturing(Stream stream, str what) except -1
cdef list active_captures

# The stream to use when the user passed `stream` (None -> the device's default).
cdef Stream resolve_stream(object stream, Device device)
