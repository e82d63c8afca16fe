from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream

cdef class HostBuffer:
    cdef void* _ptr
    cdef size_t _nbytes
    cdef bint _closed
    cdef Py_ssize_t _exports
    cdef object _dtype
    cdef object _shape
    cdef readonly Device device
    cdef Py_ssize_t _shape1[1]
    cdef Py_ssize_t _strides1[1]

# Whether host address `ptr` lies in page-locked memory the driver knows
# (cuMemHostAlloc, cuMemHostRegister, another library's pinned allocator):
# cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) says host.
cdef bint is_pinned(const void* ptr) except -1

# Keep `obj` (host memory a copy on `s` reads or writes, or anything else work queued on `s`
# uses) alive until the work queued on `s` so far has completed: an event recorded now,
# checked at later calls; returns 1. Nothing (returns 0) while `s` is captured (the capture
# holds what its work uses) or another capture forbids the event record.
cdef int keep_until_done(Stream s, object obj) except -1
# Wait for the work of everything kept (keep_until_done), then let go of it all.
cdef int drain_host_keeps() except -1
