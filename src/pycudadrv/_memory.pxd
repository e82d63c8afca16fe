from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream

cdef class Buffer:
    cdef CUdeviceptr ptr
    cdef size_t nbytes
    cdef readonly Device device
    cdef Stream stream          # allocation stream: frees are ordered after its work
    cdef Buffer root            # the allocation a view points into (self for owners)
    cdef object owner           # foreign owner kept alive (asbuffer), or None
    cdef bint owned
    cdef bint async_alloc
    cdef bint closed
    cdef public object dtype
    cdef public object shape

    # Raises ValueError if this buffer or the allocation it views was closed.
    cdef int ensure_open(self) except -1
    cdef _host_view(self, obj, bint writable, name)

# The data pointer of a __cuda_array_interface__ dict, as an int in [0, 2**64);
# ValueError saying what is wrong otherwise.
cdef object cai_data_pointer(object cai)
