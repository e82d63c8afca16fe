from pycudadrv._cuda cimport *
from pycudadrv._driver_api cimport pycudadrv_driver_api

# The loaded driver table. Raises CudaUnavailableError (with the reason) if the
# driver cannot be used; never returns NULL otherwise.
cdef pycudadrv_driver_api* driver() except NULL

# Turn a failing CUresult into CudaError. Returns 0 on CUDA_SUCCESS; callable
# without the GIL (takes it only to raise).
cdef int check(CUresult status, const char* call) except -1 nogil

# Build (without raising) the CudaError for `status`; `context` is appended to
# the message (kernel name, grid, ...).
cdef object make_error(CUresult status, str call, str context=*)
