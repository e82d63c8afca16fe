from libc.stdint cimport uint32_t, uintptr_t
from cpython.object cimport PyObject
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport Lifetime
from pycudadrv._kernel cimport KernelBase
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream
from pycudadrv._marshal cimport ParamLayout, ParamSpec, pycudadrv_arena, pycudadrv_argcache

cdef class Function(KernelBase):
    cdef readonly object module
    cdef Stream _default_stream
    cdef ParamLayout layout
    # Generic launches of a known layout marshal into this arena, repacking only the Buffers and
    # the arguments that are not the previous call's very (immutable) objects.
    cdef pycudadrv_arena _arena
    cdef bint _arena_ready
    cdef pycudadrv_argcache _args   # the objects packed last (owned scalars, borrowed Buffer addresses)
    cdef bint _busy                 # a launch is packing into _arena (Python code may run there)
    cdef unsigned long _layout_version   # counts set_signature calls (TritonLaunchBase's plans follow it)
    cdef bint _launch_dict_calls    # launch was called with a dict of keywords: bind for tp_call (_launchmethod.pxi)

    cdef int _drop_cache(self) except -1

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
    cdef Stream _stream
    cdef LaunchConfig config
    cdef pycudadrv_arena arena
    cdef pycudadrv_arena scratch    # same layout as `arena`: a rebind is packed here first, then copied
    cdef bint _has_scratch
    cdef bint _packing              # arguments are being packed (a rebind from their Python code is refused)
    cdef void** kernel_params
    cdef ParamSpec* specs           # layout used (the function's, or inferred at bind)
    cdef int n
    cdef list _held                 # the Python objects currently bound, kept alive
    cdef tuple _packed              # what was packed: _held, with each DLPack-only array a Buffer over
                                    # its export (the bytes and the watched Buffer come from one export)
    cdef tuple _exports             # those Buffers (a capture of a launch holds them), or None
    cdef list _watch                # the bound Buffers: each launch checks they are still open (foreign
                                    # memory bound as it is is watched through a Buffer over it)
    cdef list _watch_k              # the parameter index of each
    # Per watched Buffer, the addresses of its `_closed` and its allocation's `attention` flags
    # (2 per buffer; the objects are kept alive by _watch): the launch checks read these alone.
    cdef bint** _watch_flags
    cdef Py_ssize_t _n_flags
    cdef CUlaunchConfig ex_config
    cdef CUlaunchAttribute ex_attrs[4]

    cdef int _launch(self, bint activate=*) except -1
    cdef uintptr_t _launch_updatable(self) except? 1
    cdef int _check_bound(self, Stream s) except -1
    cdef int _ensure_scratch(self) except -1
    cdef int _pack_all(self, tuple args, pycudadrv_arena* arena) except -1
    cdef int _bind(self, tuple args, tuple packed) except -1
    cdef int _begin_packing(self, str what) except -1
    cdef int _reset(self) except -1
    cdef int _init(self, object fn, object grid, object block, tuple args, object shared_mem_bytes, object stream,
                   object cooperative, object cluster, object programmatic_dependent) except -1
    cdef object _as_packed(self, Py_ssize_t k, object a)
    cdef int _hold_exports(self, Stream s) except -1

# The one place kernels are launched (cuLaunchKernel, or cuLaunchKernelEx when the
# configuration has launch attributes or the stream's capture asks for PDL or a
# device-updatable node). Checks the result, records the launch in the stream's
# capture and returns the device-updatable node handle (0 unless asked for). `args` are the
# arguments for messages and the capture's record; or, with `items`, items[0:nitems] are (a
# tuple of them is built only for an error message or a capture).
cdef uintptr_t issue_launch(Function fn, const unsigned int* grid, const unsigned int* block, unsigned int shmem,
                            Stream s, void** kp, LaunchConfig lc, object args, bint device_updatable,
                            PyObject** items=*, Py_ssize_t nitems=*) except? 1

# Whether launches release the GIL around the driver call (set_release_gil).
cdef bint launch_releases_gil() noexcept
# The installed launch instrumentation hook, or None.
cdef object get_launch_hook_c()

cdef Function make_function(CUfunction handle, str name, object module, Device device, object layout,
                            str layout_source, Lifetime module_life)

# Another library's array given as it is (CAI or DLPack; not a Buffer, None or a scalar).
cdef bint is_foreign_memory(object a)

# A tuple of items[0:n] (new references; the items borrowed from a METH_FASTCALL array).
cdef tuple vec_tuple(PyObject** items, Py_ssize_t n)

# Function.launch (grid, block, *args, **keywords) called from C with a METH_FASTCALL array:
# argv[0:nargs] positional, then one value per name of the tuple kwnames (NULL: none).
cdef object launch_vector(Function fn, PyObject** argv, Py_ssize_t nargs, PyObject* kwnames)

cdef bint flag_arg(object v, str name, str where) except -1
