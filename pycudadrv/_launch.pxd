from libc.stdint cimport uint32_t, uintptr_t
from cpython.object cimport PyObject
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport Lifetime
from pycudadrv._kernel cimport KernelBase
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream
from pycudadrv._driver_api cimport pycudadrv_driver_api
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

    cdef int _drop_cache(self) except -1

cdef class LaunchConfig:
    cdef unsigned int grid[3]
    cdef unsigned int block[3]
    cdef unsigned int shared_mem_bytes
    cdef bint cooperative
    cdef bint programmatic
    cdef unsigned int cluster[3]
    cdef bint use_ex

# The call site of the driver's launch every launch kind goes through (cuLaunchKernel, or
# cuLaunchKernelEx when the configuration has launch attributes or the stream's capture asks for
# PDL or a device-updatable node). Checks the result, records the launch in the stream's
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


# A tuple of items[0:n] (new references; the items borrowed).
cdef tuple vec_tuple(PyObject** items, Py_ssize_t n)

# The generic launch of Function.launch over items[0:n] (borrowed), called from C by the Queue:
# shmem and lc (None, or a LaunchConfig when a launch attribute is asked for) as Function.launch makes them.
cdef object launch_items(Function fn, object grid, object block, PyObject** items, Py_ssize_t n,
                         unsigned int shmem, object stream, LaunchConfig lc)

cdef bint flag_arg(object v, str name, str where) except -1

# issue_launch for the common case (no capture, no hook, no attribute, the GIL held, an own
# stream: cuLaunchKernel here), else issue_launch; the function's context made current first.
cdef int launch_now(pycudadrv_driver_api* d, Function fn, const unsigned int* grid,
                    const unsigned int* block, unsigned int shmem, Stream s, void** kp, LaunchConfig lc,
                    object args, PyObject** items=*, Py_ssize_t nitems=*) except -1
# ``shared_mem_bytes`` as given: an int in [0, 2**32) (ArgumentTypeError / ArgumentValueError).
cdef unsigned int shared_mem_arg(object v, str where) except? 0xFFFFFFFF
