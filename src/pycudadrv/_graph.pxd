from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream

cdef class CapturedGraph:
    cdef CUgraph graph
    cdef CUgraphExec exec_
    cdef Stream stream
    cdef readonly str mode
    cdef readonly object thread_id
    cdef list _held
    cdef list _kernels
    cdef bint capturing
    cdef bint closed
    cdef int n_nodes

    cdef int _ready(self) except -1
