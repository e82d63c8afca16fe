from pycudadrv._stream cimport Stream
from pycudadrv._marshal cimport ParamSpec, pycudadrv_arena
from pycudadrv._launch cimport Function, LaunchConfig

# fn.builder(...): arguments pushed one at a time, each marshalled into `arena` as it comes.
cdef class LaunchBuilder:
    cdef Function fn
    cdef LaunchConfig config        # validated at creation
    cdef Stream _stream             # the given stream, or the device's default stream
    cdef bint _stream_given         # submit() without one uses the aio device policy's next stream
    cdef pycudadrv_arena arena      # laid out for the kernel's layout (known), or grown per push (unknown)
    cdef ParamSpec* specs           # the kernel's layout copied at creation, or inferred per push
    cdef int n                      # the kernel's parameter count, -1 when its layout is unknown
    cdef Py_ssize_t count           # parameters pushed so far
    cdef list _values               # the pushed arguments, one per parameter (kept alive)
    cdef list _exports              # Buffers over DLPack exports among them (kept until a launch has run)
    cdef bint _pushing              # a push is packing its value (a push from its property is refused)

    cdef int _check(self) except -1
    cdef int _begin_push(self) except -1
    cdef ParamSpec* _spec(self, Py_ssize_t i, object v) except NULL
    cdef int _push_one(self, object v) except -1
    cdef object _push_tensor(self, object array)
    cdef int _rollback(self, Py_ssize_t count, Py_ssize_t n_exports, unsigned int n_params,
                       unsigned int n_slots) except -1
    cdef tuple _geometry(self, object a, Py_ssize_t i)
    cdef int _launch_checks(self, Stream s) except -1

cdef LaunchBuilder new_builder(Function fn, object grid, object block, object shared_mem_bytes, object stream,
                               object cooperative, object cluster, object programmatic_dependent)
