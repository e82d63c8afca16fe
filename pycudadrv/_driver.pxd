from pycudadrv._cuda cimport *
from pycudadrv._driver_api cimport pycudadrv_driver_api

# The loaded driver table. Raises CudaUnavailableError (with the reason) if the
# driver cannot be used; never returns NULL otherwise. After the first call it is
# one flag test: callers need not cache the pointer.
cdef pycudadrv_driver_api* driver() except NULL

# Turn a failing CUresult into CudaError. Returns 0 on CUDA_SUCCESS; callable
# without the GIL (takes it only to raise).
cdef int check(CUresult status, const char* call) except -1 nogil

# Build (without raising) the CudaError for `status`; `context` is appended to
# the message (kernel name, grid, ...).
cdef object make_error(CUresult status, str call, str context=*)

# Called by __dealloc__ methods whose driver call failed: warns once per kind of
# object (cuda.core's rule), never raises.
cdef void warn_dealloc_failure(str what, object err) noexcept

# A liveness flag shared by a handle's owner and what depends on it (a Module and
# its Functions): the owner sets `ended` when it releases the handle; a dependent
# tests one C field before using it.
cdef class Lifetime:
    cdef bint ended
    cdef str what
