from libc.stdint cimport uint32_t
from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream

cdef extern from "pycudadrv/arena.h" nogil:
    ctypedef struct pycudadrv_arena:
        uint32_t n_params
        uint32_t n_slots
    void pycudadrv_arena_init(pycudadrv_arena* a)
    void pycudadrv_arena_release(pycudadrv_arena* a)
    void pycudadrv_arena_reset(pycudadrv_arena* a)
    int pycudadrv_arena_is_spilled(const pycudadrv_arena* a)
    unsigned char* pycudadrv_arena_push(pycudadrv_arena* a, size_t nbytes)
    unsigned char* pycudadrv_arena_at(pycudadrv_arena* a, uint32_t i)
    void** pycudadrv_arena_finish(pycudadrv_arena* a)

ctypedef struct ParamSpec:
    int kind
    size_t size
    size_t offset

cdef class Function:
    cdef CUfunction handle
    cdef readonly str name
    cdef readonly object module
    cdef readonly Device device
    cdef Stream default_stream
    cdef int n_params              # -1: layout unknown (sizes come from the values)
    cdef ParamSpec* params
    cdef object _layout            # list of _signature.Param, or None
    cdef readonly str layout_source
    cdef int max_threads
    cdef int static_shared
    cdef int max_dynamic_shared
    cdef size_t param_limit

    cdef int set_layout(self, layout, str source) except -1

cdef class LaunchConfig:
    cdef unsigned int grid[3]
    cdef unsigned int block[3]
    cdef unsigned int shared_mem_bytes
    cdef bint cooperative
    cdef bint programmatic
    cdef unsigned int cluster[3]
    cdef bint use_ex

cdef class PreparedLaunch:
    cdef Function fn
    cdef Stream stream
    cdef LaunchConfig config
    cdef pycudadrv_arena arena
    cdef void** kernel_params
    cdef ParamSpec* specs          # layout used (the function's, or inferred at bind)
    cdef int n
    cdef list _held                # the Python objects currently bound, kept alive
    cdef CUlaunchConfig ex_config
    cdef CUlaunchAttribute ex_attrs[3]

    cdef int _launch(self) except -1

# Marshal every argument for its parameter specs[i] into a freshly initialised arena;
# returns the void* array for cuLaunchKernel. Raises TypeError for a bad value.
cdef void** marshal(pycudadrv_arena* arena, Function fn, tuple args, ParamSpec* specs) except NULL
# Layout unknown: parameter sizes from the values (malloc'd, the caller frees), checked
# against the parameter-space limit.
cdef ParamSpec* infer_layout(Function fn, tuple args) except NULL
# Whether launches release the GIL around the driver call (set_release_gil).
cdef bint launch_releases_gil() noexcept

cdef Function make_function(CUfunction handle, str name, object module, Device device, object layout,
                            str layout_source)
