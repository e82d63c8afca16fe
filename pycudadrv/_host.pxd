from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device

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
