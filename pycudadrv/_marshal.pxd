from libc.stdint cimport uint32_t
from cpython.object cimport PyObject
from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream

cdef extern from "pycudadrv/arena.h" nogil:
    ctypedef struct pycudadrv_arena:
        void** params            # filled by pycudadrv_arena_layout and pycudadrv_arena_finish
        uint32_t n_params
        uint32_t n_slots
    void pycudadrv_arena_init(pycudadrv_arena* a)
    void pycudadrv_arena_release(pycudadrv_arena* a)
    void pycudadrv_arena_reset(pycudadrv_arena* a)
    int pycudadrv_arena_is_spilled(const pycudadrv_arena* a)
    unsigned char* pycudadrv_arena_push(pycudadrv_arena* a, size_t nbytes)
    int pycudadrv_arena_layout(pycudadrv_arena* a, const unsigned char* first_size, size_t stride, uint32_t n)
    unsigned char* pycudadrv_arena_at(pycudadrv_arena* a, uint32_t i)
    void** pycudadrv_arena_finish(pycudadrv_arena* a)
    size_t pycudadrv_arena_slot_bytes(const pycudadrv_arena* a)
    int pycudadrv_arena_copy_slots(pycudadrv_arena* dst, const pycudadrv_arena* src)

# The kinds of kernel parameter: which Python values a parameter accepts and how
# they become bytes (the one definition; pycudadrv._signature uses it too).
cpdef enum ParamKind:
    ANY = 0        # size known only (cuFuncGetParamInfo)
    INT = 1        # signed integer of `size` bytes
    UINT = 2       # unsigned integer of `size` bytes
    FLOAT = 3      # IEEE float of `size` bytes (2 = half)
    POINTER = 4    # device pointer (8 bytes)
    BYTES = 5      # raw bytes: structs, arrays, vector types
    INTEGER = 6    # integer of `size` bytes, signedness unknown (PTX)
    BOOL = 7       # C++ bool (1 byte): True/False, 0 or 1 only
    BFLOAT16 = 8   # __nv_bfloat16 (2 bytes): floats converted, float16 refused (other bits)

ctypedef struct ParamSpec:
    int kind
    size_t size
    size_t offset

# What decides a kernel's argument bytes: each parameter's kind, size and
# offset (n = -1 when unknown: sizes then come from the values), the kernel's
# name and device (for messages and peer checks) and the parameter-space limit.
cdef class ParamLayout:
    cdef ParamSpec* specs
    cdef readonly int n
    cdef readonly str name
    cdef readonly Device device
    cdef size_t limit
    cdef readonly str source
    cdef object params           # list of pycudadrv._signature.Param, or None
    cdef int packing             # launches packing with `specs` now (Function.set_signature refuses then)

    cdef int set(self, object layout, str source) except -1

cdef ParamLayout new_layout(str name, Device device, size_t limit)

# Write argument `a` for parameter `p` (index i) into `dst` (at least p.size
# bytes, zeroed), for a launch on `s`: memory from another library is ordered after
# its producer on `s`, and so is a Buffer over such memory (None: no ordering, for
# graph updates). Raises ArgumentTypeError/ArgumentValueError naming the kernel,
# the parameter and the value.
cdef int pack_arg(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst, Stream s) except -1
# Marshal every argument for specs[i] into a freshly initialised arena (for a launch on `s`,
# as pack_arg); returns the void* array for cuLaunchKernel.
cdef void** marshal(pycudadrv_arena* arena, ParamLayout lay, tuple args, ParamSpec* specs, Stream s) except NULL
# The objects a generic launch packed last (pycudadrv/argcache.h): per parameter an owned
# reference to an immutable scalar, or the borrowed address of an exact Buffer (holds nothing alive).
cdef extern from "pycudadrv/argcache.h":
    ctypedef struct pycudadrv_argcache:
        void** keep
        Py_ssize_t* bufs
        void** gather            # room for a mapped launch's argument array (n entries)
        unsigned char* isbuf
        Py_ssize_t n
        Py_ssize_t nbuf
        int stale
    ctypedef Py_ssize_t (*pycudadrv_first_diff_fn)(void** a, void** b, Py_ssize_t i, Py_ssize_t n) noexcept
    void pycudadrv_argcache_zero(pycudadrv_argcache* c) noexcept
    int pycudadrv_argcache_init(pycudadrv_argcache* c, Py_ssize_t n) noexcept
    void pycudadrv_argcache_release(pycudadrv_argcache* c) noexcept
    void pycudadrv_argcache_forget(pycudadrv_argcache* c, Py_ssize_t i) noexcept
    void pycudadrv_argcache_rebuild(pycudadrv_argcache* c) noexcept
    pycudadrv_first_diff_fn pycudadrv_pick_first_diff() noexcept
    Py_ssize_t pycudadrv_first_diff_plain(void** a, void** b, Py_ssize_t i, Py_ssize_t n) noexcept

# Marshal into an arena laid out for lay.specs (pycudadrv_arena_layout), skipping the arguments
# that are the very immutable scalar object kept in `c` (pycudadrv_argcache_init'd for lay.n
# parameters; updated here); repacks every Buffer argument and notes `s` as a user of it. A
# failure leaves arena and `c` consistent with each other. The values are `items[0:c.n]`
# (borrowed: a vectorcall's argument array, a tuple's items, or c.gather filled by the caller).
# Returns the arena's void* array.
cdef void** marshal_cached(pycudadrv_arena* arena, ParamLayout lay, PyObject** items, Py_ssize_t nitems,
                           pycudadrv_argcache* c, Stream s) except NULL
# Layout unknown: parameter sizes from the values (malloc'd, the caller frees),
# checked against the parameter-space limit.
cdef ParamSpec* infer_layout(ParamLayout lay, tuple args) except NULL
cdef str describe_value(object a)
cdef str args_summary(tuple args)
