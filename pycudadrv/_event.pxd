from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream, EventBase

cdef class Event(EventBase):
    cdef _check_usable(self, str what)
    # record() once the stream is resolved; activate: make the device current first (False only where
    # the caller knows no current context is needed: a record on a real stream handle takes its context)
    cdef int _record_on(self, Stream s, bint activate) except -1

# cuEventQuery of `ev` when it may be asked now, without Event.query's call: 1 done, 0 not yet; -1 not
# asked (not an Event, closed, never recorded, or a capture in progress, which the query would
# invalidate: ev.query() says why) or the query failed (r[0]; CUDA_SUCCESS when not asked).
# activate: make the event's device current first.
cdef int query_now(object ev, bint activate, CUresult* r) except -2
