from pycudadrv._cuda cimport *
from pycudadrv._driver cimport check
from pycudadrv._driver_api cimport pycudadrv_driver_api

cdef class Device:
    cdef readonly int ordinal
    cdef CUdevice _handle
    cdef CUcontext _context
    # Limits read once (cuDeviceGetAttribute) and used by launch validation.
    cdef readonly int max_threads_per_block
    cdef int max_block[3]
    cdef int max_grid[3]
    cdef int max_shared_per_block
    cdef int max_shared_optin
    cdef readonly int multiprocessor_count
    cdef int cc_major, cc_minor
    cdef object _default_stream

    # Make this device's primary context current on the calling thread (one
    # cuCtxGetCurrent; cuCtxSetCurrent only when it differs).
    cdef int activate(self) except -1
    # (least, greatest) stream priority of the primary context (cuCtxGetStreamPriorityRange).
    cdef tuple stream_priority_range(self)
    cdef int _attr(self, int attr) except? -1

# Device.activate's body, inlined where a call per launch counts (pycudadrv._launch): one
# cuCtxGetCurrent; cuCtxSetCurrent only when the device's primary context is not current.
cdef inline int make_current(pycudadrv_driver_api* d, Device dev) except -1:
    cdef CUcontext cur = NULL
    if d.p_cuCtxGetCurrent(&cur) != CUDA_SUCCESS or cur != dev._context:
        check(d.p_cuCtxSetCurrent(dev._context), "cuCtxSetCurrent")
    return 0

# The canonical Device object of an ordinal (created on first use).
cdef Device get_device(int ordinal)
# None -> the current device; a Device -> the canonical object of its ordinal; an int -> that ordinal's.
cdef Device as_device(object device, str where=*)
cdef bint peer_enabled(int device, int peer)
cdef Device current_device()
