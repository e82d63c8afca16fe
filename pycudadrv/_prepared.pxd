from libc.stdint cimport uintptr_t
from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream
from pycudadrv._marshal cimport ParamSpec, pycudadrv_arena
from pycudadrv._launch cimport Function, LaunchConfig

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
