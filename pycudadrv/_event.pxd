from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream, EventBase

cdef class Event(EventBase):
    cdef _check_usable(self, str what)
    cdef int _record_on(self, Stream s) except -1   # record() once the stream is resolved
