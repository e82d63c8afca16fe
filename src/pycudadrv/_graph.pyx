# cython: language_level=3
"""CUDA graph capture and replay (``with stream.capture() as graph``)."""
cimport cython
from libc.stdint cimport uintptr_t
from libc.string cimport memset
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._stream cimport Stream, resolve_stream, active_captures
from libc.stdlib cimport free
from pycudadrv._launch cimport (Function, ParamSpec, marshal, infer_layout, launch_releases_gil,
                                pycudadrv_arena, pycudadrv_arena_init, pycudadrv_arena_release)

import threading
from pycudadrv._launch import NotSupportedError

cdef dict _MODES = {"global": CU_STREAM_CAPTURE_MODE_GLOBAL,
                    "thread_local": CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                    "relaxed": CU_STREAM_CAPTURE_MODE_RELAXED}


cdef pycudadrv_driver_api* _d = NULL


class GraphUpdateError(RuntimeError):
    """The driver refused to update an instantiated graph; the message says why."""


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class CapturedGraph:
    """A CUDA graph captured from a stream, instantiated for replay.

    Made by ``with stream.capture(mode) as graph:``. While the block runs,
    every launch on the stream is recorded (not executed); on a normal exit
    the graph is instantiated. Then:

    * ``graph.launch(stream=None)`` replays it with one ``cuGraphLaunch``
      (on the capture stream by default);
    * ``graph.upload(stream=None)`` pre-uploads it (``cuGraphUpload``);
    * ``graph.set_kernel_args(i, *args)`` changes the arguments of the i-th
      captured kernel launch without re-capture
      (``cuGraphExecKernelNodeSetParams``);
    * ``graph.debug_dot(path)`` writes the driver's DOT description.

    The graph keeps alive every Buffer its launches were given, so replay
    after the caller dropped them still reads valid memory.

    Raises
    ------
    ValueError
        Unknown mode; the capture recorded nothing (empty capture).
    RuntimeError
        The stream is already capturing, or the graph is used before the
        ``with`` block ended or after ``close()``.
    CudaError
        The driver refused to capture (e.g. an illegal call invalidated it).
    """

    def __cinit__(self, Stream stream not None, str mode="thread_local"):
        if mode not in _MODES:
            raise ValueError(f"capture mode must be one of {sorted(_MODES)}, got {mode!r}")
        self.stream = stream
        self.mode = mode
        self.graph = NULL
        self.exec_ = NULL
        self._held = []
        self._kernels = []
        self.capturing = False
        self.closed = False

    def __enter__(self):
        cdef Stream s = self.stream
        s.ensure_open()
        if s._capture is not None:
            raise RuntimeError(f"stream is already being captured ({s._capture!r})")
        if s.handle == NULL:
            raise ValueError("the legacy default (NULL) stream cannot be captured; capture an owned Stream "
                             "(e.g. device.default_stream or Stream())")
        if self.graph != NULL or self.exec_ != NULL:
            raise RuntimeError("this CapturedGraph was already captured; call stream.capture() again")
        s.device.activate()
        check(driver().p_cuStreamBeginCapture(s.handle, <CUstreamCaptureMode>_MODES[self.mode]),
              "cuStreamBeginCapture")
        self.capturing = True
        self.thread_id = threading.get_ident()
        s._capture = self
        active_captures.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        cdef Stream s = self.stream
        cdef CUgraph g = NULL
        cdef CUresult r
        cdef size_t n = 0
        cdef pycudadrv_driver_api* d = driver()
        s.device.activate()
        r = d.p_cuStreamEndCapture(s.handle, &g)
        self.capturing = False
        s._capture = None
        if self in active_captures:
            active_captures.remove(self)
        from pycudadrv._memory import flush_deferred_frees
        flush_deferred_frees()
        if exc_type is not None:
            # Discard whatever was captured; the stream is usable again.
            if g != NULL:
                d.p_cuGraphDestroy(g)
            self._held = []
            self._kernels = []
            self.closed = True
            return False
        if r != CUDA_SUCCESS:
            if g != NULL:
                d.p_cuGraphDestroy(g)
            raise make_error(r, "cuStreamEndCapture", f"ending {self!r}")
        self.graph = g
        check(d.p_cuGraphGetNodes(g, NULL, &n), "cuGraphGetNodes")
        if n == 0:
            d.p_cuGraphDestroy(g)
            self.graph = NULL
            self.closed = True
            raise ValueError("empty capture: nothing was launched on the stream inside the `with` block")
        self.n_nodes = <int>n
        check(d.p_cuGraphInstantiateWithFlags(&self.exec_, g, 0), "cuGraphInstantiateWithFlags")
        return False

    def _hold(self, objs):
        self._held.extend(objs)

    def _on_launch(self, Function fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                   unsigned int by, unsigned int bz, unsigned int shmem, args):
        """Called by every launch on the capturing stream: keep the arguments
        alive and remember the kernel node for set_kernel_args()."""
        cdef pycudadrv_driver_api* d = driver()
        cdef CUstreamCaptureStatus status
        cdef cuuint64_t cid = 0
        cdef CUgraph g = NULL
        cdef const CUgraphNode* deps = NULL
        cdef const CUgraphEdgeData* edges = NULL
        cdef size_t ndeps = 0
        args = tuple(args)
        self._held.extend(args)
        node = None
        if d.p_cuStreamGetCaptureInfo != NULL:
            check(d.p_cuStreamGetCaptureInfo(self.stream.handle, &status, &cid, &g, &deps, &edges, &ndeps),
                  "cuStreamGetCaptureInfo")
            if ndeps == 1:
                node = <uintptr_t>deps[0]
        self._kernels.append((node, fn, (gx, gy, gz), (bx, by, bz), shmem, args))

    cdef int _ready(self) except -1:
        if self.closed:
            raise RuntimeError("graph is closed (or its capture failed)")
        if self.capturing or self.exec_ == NULL:
            raise RuntimeError("graph is still being captured: launch it after the `with` block")
        return 0

    def launch(self, stream=None):
        """Replay the graph (``cuGraphLaunch``) on ``stream`` (default: the
        capture stream). Asynchronous, like a kernel launch."""
        global _d
        if self.exec_ == NULL or self.closed:
            self._ready()
        cdef Stream s = self.stream if stream is None else resolve_stream(stream, self.stream.device)
        cdef CUresult r
        if _d == NULL:
            _d = driver()
        cdef pycudadrv_driver_api* d = _d
        if s.closed:
            s.ensure_open()
        s.device.activate()
        if launch_releases_gil():
            with nogil:
                r = d.p_cuGraphLaunch(self.exec_, s.handle)
        else:
            r = d.p_cuGraphLaunch(self.exec_, s.handle)
        if r != CUDA_SUCCESS:
            raise make_error(r, "cuGraphLaunch", f"replaying {self!r}")

    def upload(self, stream=None):
        """Upload the graph's work descriptors to the device ahead of the
        first launch (``cuGraphUpload``)."""
        self._ready()
        cdef Stream s = self.stream if stream is None else resolve_stream(stream, self.stream.device)
        s.device.activate()
        check(driver().p_cuGraphUpload(self.exec_, s.handle), "cuGraphUpload")

    @property
    def num_nodes(self):
        """Number of nodes in the captured graph."""
        return self.n_nodes

    @property
    def num_kernels(self):
        """Number of kernel launches recorded during capture."""
        return len(self._kernels)

    def kernel(self, Py_ssize_t index):
        """``(kernel name, grid, block, shared_mem_bytes, args)`` of the i-th captured launch."""
        node, fn, grid, block, shmem, args = self._kernels[index]
        return (fn.name, grid, block, shmem, args)

    def set_kernel_args(self, Py_ssize_t index, *args):
        """Replace all arguments of the ``index``-th captured kernel launch in
        the instantiated graph (``cuGraphExecKernelNodeSetParams``); the next
        ``launch()`` uses them. Arguments follow the same rules as
        :meth:`Function.launch` and are kept alive by the graph.

        Raises
        ------
        IndexError
            No such captured launch.
        TypeError
            Wrong count or widths (checked before the driver).
        GraphUpdateError
            The driver refused the update (says why), or the node is unknown.
        """
        self._ready()
        if index < 0 or index >= len(self._kernels):
            raise IndexError(f"graph has {len(self._kernels)} captured kernel launches; index {index} is out of range")
        node, fn_obj, grid, block, shmem, old = self._kernels[index]
        cdef Function fn = <Function>fn_obj
        if node is None:
            raise GraphUpdateError(
                f"cannot update launch #{index} ('{fn.name}'): its graph node was not identified at capture "
                "(needs cuStreamGetCaptureInfo from a CUDA 12.3+ driver and a linear capture)")
        if len(args) != len(old):
            raise TypeError(f"kernel '{fn.name}' was captured with {len(old)} arguments, {len(args)} given")
        cdef pycudadrv_arena arena
        cdef ParamSpec* specs = fn.params
        cdef ParamSpec* inferred = NULL
        cdef CUDA_KERNEL_NODE_PARAMS_v2 params
        cdef CUresult r
        pycudadrv_arena_init(&arena)
        try:
            if fn.n_params < 0:  # sizes of the captured arguments; the new ones must match them
                specs = inferred = infer_layout(fn, old)
            memset(&params, 0, sizeof(params))
            params.func = fn.handle
            params.gridDimX, params.gridDimY, params.gridDimZ = grid
            params.blockDimX, params.blockDimY, params.blockDimZ = block
            params.sharedMemBytes = shmem
            params.kernelParams = marshal(&arena, fn, args, specs)
            self.stream.device.activate()
            r = driver().p_cuGraphExecKernelNodeSetParams(self.exec_, <CUgraphNode><uintptr_t>node, &params)
            if r != CUDA_SUCCESS:
                err = make_error(r, "cuGraphExecKernelNodeSetParams",
                                 f"updating launch #{index} ('{fn.name}') of {self!r}")
                raise GraphUpdateError(f"the driver refused the update: {err}")
        finally:
            pycudadrv_arena_release(&arena)
            free(inferred)
        self._held.extend(args)
        self._kernels[index] = (node, fn, grid, block, shmem, tuple(args))

    def debug_dot(self, path, bint verbose=True):
        """Write the driver's DOT description of the graph to ``path``
        (``cuGraphDebugDotPrint``); returns the path."""
        if self.graph == NULL:
            raise RuntimeError("no graph captured")
        cdef bytes p = str(path).encode()
        check(driver().p_cuGraphDebugDotPrint(self.graph, p, 1 if verbose else 0), "cuGraphDebugDotPrint")
        return path

    def close(self):
        """Destroy the executable graph and the graph (``cuGraphExecDestroy``,
        ``cuGraphDestroy``) and release the held buffers. A second close is a no-op."""
        if self.capturing:
            raise RuntimeError("cannot close a graph while it is being captured")
        cdef pycudadrv_driver_api* d
        if self.exec_ != NULL or self.graph != NULL:
            d = driver()
            self.stream.device.activate()
            if self.exec_ != NULL:
                check(d.p_cuGraphExecDestroy(self.exec_), "cuGraphExecDestroy")
                self.exec_ = NULL
            if self.graph != NULL:
                check(d.p_cuGraphDestroy(self.graph), "cuGraphDestroy")
                self.graph = NULL
        self.closed = True
        self._held = []

    def __dealloc__(self):
        cdef pycudadrv_driver_api* d
        if self.exec_ != NULL or self.graph != NULL:
            try:
                d = driver()
                if self.exec_ != NULL:
                    d.p_cuGraphExecDestroy(self.exec_)
                if self.graph != NULL:
                    d.p_cuGraphDestroy(self.graph)
            except Exception:
                pass

    def __repr__(self):
        state = ("capturing" if self.capturing else "closed" if self.closed else
                 "instantiated" if self.exec_ != NULL else "empty")
        return (f"<CapturedGraph mode={self.mode!r} on stream 0x{<uintptr_t>self.stream.handle:x}, {state}, "
                f"{len(self._kernels)} kernel launches>")
