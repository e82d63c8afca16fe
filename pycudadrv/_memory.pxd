from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream
from pycudadrv._alloc cimport Allocation

# A view of (part of) one Allocation: the bytes [_ptr, _ptr + _nbytes) with optional
# dtype/shape metadata. The Allocation owns the memory and its lifetime; the Buffer made
# by an allocating factory (_parent None, `_alloc.owned`) frees it on close().
cdef class Buffer:
    cdef CUdeviceptr _ptr
    cdef size_t _nbytes
    cdef readonly Device device
    cdef Allocation _alloc
    cdef Buffer _parent          # the buffer a view was made from (kept alive); None for the allocation's own
    cdef bint _closed            # this view was closed (the allocation may live on)
    cdef object _dtype
    cdef object _shape

    # Raises ClosedError (naming why) if this buffer or the allocation it views was closed.
    cdef int ensure_open(self) except -1
    cdef Stream _copy_stream(self, object stream)
    # Whether the allocation's usage has every bit of `needed` (BufferUsages bits).
    cpdef bint _has_usage(self, unsigned int needed)

# The one way to make a Buffer: a view of `alloc` over [ptr, ptr + nbytes) (a sub-range of
# it), with metadata; `parent` (the buffer it is a view of, or None) is kept alive.
cdef Buffer buffer_over(Allocation alloc, CUdeviceptr ptr, size_t nbytes, object dtype, object shape, Buffer parent)
