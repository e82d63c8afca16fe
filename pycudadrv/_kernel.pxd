from cpython.long cimport PyLong_AsLongLongAndOverflow
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
    # The last configuration validate_config passed (grid x 0: none), so an identical generic launch
    # skips the checks; any change of the limits above forgets it.
    cdef unsigned int _ok_grid[3]
    cdef unsigned int _ok_block[3]
    cdef unsigned int _ok_shmem

    # Raises ClosedError once the module was unloaded.
    cdef int ensure_loaded(self) except -1
    cdef int init_kernel(self, CUfunction handle, str name, Device device, Lifetime module_life) except -1
    cdef int _block_threads(self, block, unsigned int shmem) except -1

# The token Function.__new__ needs (make_function passes it; nothing else can make a kernel object).
cdef object kernel_token()

# grid/block/cluster: an int or 1-3 ints -> out[3] (missing ones 1); with allow_zero, 0 is accepted.
cdef int parse_dims(object v, unsigned int* out, str what, bint allow_zero) except -1

# parse_dims's common case, inline at the launch: a Python int in [1, 2**32) (anything else goes
# through parse_dims, which raises for what it refuses).
cdef inline int launch_dims(object v, unsigned int* out, str what) except -1:
    cdef int overflow = 0
    cdef long long c
    if type(v) is int:
        c = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow == 0 and c >= 1 and c <= <long long>4294967295LL:   # C compares (a bare 0xFFFFFFFF made them Python's)
            out[0] = <unsigned int>c
            out[1] = 1
            out[2] = 1
            return 0
    return parse_dims(v, out, what, False)
# Grid, block and dynamic shared memory against the device's and the kernel's limits
# (raises the kernel's dynamic shared memory attribute above 48 KB when allowed).
cdef int validate_config(KernelBase fn, const unsigned int* grid, const unsigned int* block,
                         unsigned int shmem) except -1
