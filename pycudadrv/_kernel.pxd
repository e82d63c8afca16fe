from pycudadrv._cuda cimport *
from pycudadrv._driver cimport Lifetime
from pycudadrv._device cimport Device

# A kernel handle with what launches are validated against (its limits), its
# function attributes and its occupancy queries; Function builds on it.
cdef class KernelBase:
    cdef CUfunction _handle
    cdef readonly str name
    cdef readonly Device device
    cdef Lifetime _module_life      # ended when the module is unloaded
    cdef int max_threads
    cdef int static_shared
    cdef int max_dynamic_shared

    # Raises ClosedError once the module was unloaded.
    cdef int ensure_loaded(self) except -1
    cdef int init_kernel(self, CUfunction handle, str name, Device device, Lifetime module_life) except -1
    cdef int _block_threads(self, block, unsigned int shmem) except -1

# The token Function.__new__ needs (make_function passes it; nothing else can make a kernel object).
cdef object kernel_token()

# grid/block/cluster: an int or 1-3 ints -> out[3] (missing ones 1); with allow_zero, 0 is accepted.
cdef int parse_dims(object v, unsigned int* out, str what, bint allow_zero) except -1
# Grid, block and dynamic shared memory against the device's and the kernel's limits
# (raises the kernel's dynamic shared memory attribute above 48 KB when allowed).
cdef int validate_config(KernelBase fn, const unsigned int* grid, const unsigned int* block,
                         unsigned int shmem) except -1
