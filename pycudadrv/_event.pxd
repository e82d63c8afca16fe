from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream, EventBase

cdef class Event(EventBase):
    cdef _check_usable(self, str what)
    # record() once the stream is resolved; activate: make the device current first (False only where
    # the caller knows no current context is needed: a record on a real stream handle takes its context)
    cdef int _record_on(self, Stream s, bint activate) except -1
