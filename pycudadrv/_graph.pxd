from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream, Capture

cdef class CapturedGraph:
    cdef CUgraph _graph
    cdef CUgraphExec _exec
    cdef Stream _stream
    cdef readonly str mode
    cdef readonly bint pdl
    cdef Capture _capture            # while the `with` block runs
    cdef list _held                  # objects the graph keeps alive
    cdef list _kernels               # per captured launch: (node, fn, grid, block, shmem, args, devnode)
    cdef tuple _module_lives         # the Lifetimes of the modules its kernels come from (one per module)
    cdef list _roots                 # Allocations whose frees wait until the graph is closed
    cdef dict _updates               # per launch index: (objects, Allocations) its last set_kernel_args
                                     # installed, let go of (after the launches so far) by the next one
    cdef list _launch_streams        # streams it was launched on (frees of held memory wait for them)
    cdef Stream _last_launch
    cdef bint _closed
    cdef bint _device_updated        # has device-updatable kernel nodes
    cdef bint _upload_first          # upload before the next launch (after a host update of such a graph)
    cdef int _n_nodes

    cdef int _ready(self) except -1
    # Raises ClosedError when a module of one of its kernels was unloaded since the capture.
    cdef int _check_modules(self) except -1
    # Take over an ended capture's graph: hold its buffers, run the after-end
    # hooks, instantiate (and upload). `g` is owned from here on.
    cdef int adopt(self, CUgraph g, Capture c) except -1
    cdef int _release(self, bint raise_errors) except -1
    cdef int _let_go(self, tuple entry) except -1
    cdef object _launch_index(self, object index, str who)
    cdef int _destroy(self, bint raise_errors) except -1
