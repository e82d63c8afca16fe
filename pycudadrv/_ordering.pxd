from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream, Capture

# A point in a producer's stream that consumers wait for (an event recorded
# there; destroyed with this object): memory from another library is ordered
# after its producer through one. wait_on(s) makes `s` wait for it; inside a
# capture (pycudadrv's, or a stream joined to one) as an external event node,
# the capture then keeping this object (the event) alive with its graph.
cdef class ReadyEvent:
    cdef CUevent _event
    cdef Device device
    # Returns 1 when the wait was captured (external event node), else 0.
    cdef int wait_on(self, Stream s) except -1
    # Whether the recorded work has completed (cuEventQuery); False while a capture forbids the query.
    cdef bint done(self) except -1

# An event recorded now on the stream `producer` (a CUstream handle of `device`).
cdef ReadyEvent ready_event(CUstream producer, Device device)

# The pycudadrv Capture that `s` is part of right now: its own, or the one it joined by
# waiting on an event recorded inside it (a Queue's lanes); None when `s` is not capturing.
# CaptureError when it captures into a capture pycudadrv did not begin.
cdef Capture capture_of(Stream s)
