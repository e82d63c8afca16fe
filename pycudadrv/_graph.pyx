# cython: language_level=3
"""CUDA graph capture and replay (``with stream.capture() as graph``), built on
the stream's Capture state."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memset
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, warn_dealloc_failure, Lifetime
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, as_device
from pycudadrv._stream cimport (Stream, Capture, begin_capture, resolve_stream, destroy_handle, DESTROY_GRAPH,
                                DESTROY_GRAPH_EXEC)
from pycudadrv._alloc cimport Allocation
from pycudadrv._memory cimport Buffer
from pycudadrv._marshal cimport (ParamLayout, ParamSpec, marshal, infer_layout, pycudadrv_arena,
                                 pycudadrv_arena_init, pycudadrv_arena_release)
from pycudadrv._launch cimport Function, launch_releases_gil
from pycudadrv._interop cimport is_foreign_memory
from pycudadrv._interop cimport take_dlpack_owners
from pycudadrv._host cimport keep_until_done
from pycudadrv._kernel cimport KernelBase

import numpy as np
import os
import sys
import threading
import warnings
from pycudadrv._textargs import yes_no
from pycudadrv._errors import (ArgumentIndexError, ArgumentTypeError, ArgumentValueError, GraphUpdateError,
                               StateError, CudaError, ClosedError)

__all__ = ["CapturedGraph", "GraphUpdateError", "graph_memory_used"]

cdef int _dot_count = 0
_dot_lock = threading.Lock()


def _dot_path():
    """The DOT file for the next instantiated graph under PYCUDADRV_GRAPH_DOT, or None."""
    global _dot_count
    pattern = os.environ.get("PYCUDADRV_GRAPH_DOT")
    if not pattern:
        return None
    with _dot_lock:
        n = _dot_count
        _dot_count += 1
    if "{n}" in pattern:
        return pattern.replace("{n}", str(n))
    root, ext = os.path.splitext(pattern)
    return pattern if n == 0 else f"{root}-{n}{ext or '.dot'}"


def _dump_dot(graph, path):
    """PYCUDADRV_GRAPH_DOT's dump of an instantiated graph: one stderr line saying where it went; a dump
    that cannot be written is a RuntimeWarning naming the path and the reason, and the graph is kept
    (a debugging aid never costs the program its graph)."""
    try:
        graph.debug_dot(path)
    except (CudaError, ValueError) as e:
        warnings.warn(f"PYCUDADRV_GRAPH_DOT: could not write the graph to {path!r} ({e}); the graph is "
                      "instantiated all the same", RuntimeWarning, stacklevel=3)
        return
    try:
        print(f"[pycudadrv] graph DOT: {graph.num_nodes} nodes written to {os.path.abspath(path)}", file=sys.stderr,
              flush=True)
    except (OSError, ValueError):
        pass        # no stderr to say it on: the file is there all the same


def graph_memory_used(device=None):
    """Bytes of device memory that graph memory nodes hold on ``device``
    right now (``cuDeviceGetGraphMemAttribute``, ``USED_MEM_CURRENT``)."""
    cdef Device dev = as_device(device, "graph_memory_used")
    cdef uint64_t v = 0
    check(driver().p_cuDeviceGetGraphMemAttribute(dev._handle, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v),
          "cuDeviceGetGraphMemAttribute")
    return v


cdef int _hold(CapturedGraph g, Allocation a) except -1:
    """The graph keeps `a`: its free waits until the graph is closed."""
    a.add_hold()
    g._roots.append(a)
    return 0


cdef int _release_roots(list roots, list streams, bint raise_errors) except -1:
    """Release a graph's hold on each allocation in `roots`, its free first ordered after every
    stream in `streams` (those the graph ran on). Without raise_errors (a destructor) a failure
    is warned about and the rest are still released."""
    cdef Allocation a
    for obj in roots:
        a = <Allocation>obj
        try:
            for s in streams:
                a.note_use(<Stream>s)
            a.release_hold()
        except Exception as e:
            if raise_errors:
                raise
            warn_dealloc_failure("CapturedGraph", e)
    return 0


cdef object _index_arg(object v, str what, str who):
    """A launch or argument index: an int (numpy ints too), as a Python int; bools, floats and
    strings are refused (ArgumentTypeError) rather than truncated or parsed."""
    if isinstance(v, (bool, np.bool_)) or not hasattr(type(v), "__index__"):
        raise ArgumentTypeError(f"{who}: {what} must be an int, got {type(v).__name__} {v!r:.40}")
    return v.__index__()


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class CapturedGraph:
    """A CUDA graph captured from a stream, instantiated for replay.

    Made by ``with stream.capture(mode, pdl=False) as graph:``. While the
    block runs, every launch and copy on the stream is recorded (not
    executed); on a normal exit the graph is instantiated. Then:

    * ``graph.launch(stream=None)`` replays it with one ``cuGraphLaunch``
      (on the capture stream by default);
    * ``graph.upload(stream=None)`` pre-uploads it (``cuGraphUpload``);
    * ``graph.set_kernel_args(i, *args)`` changes the arguments of the i-th
      captured kernel launch without re-capture
      (``cuGraphExecKernelNodeSetParams``), whole or not at all;
    * ``graph.debug_dot(path)`` writes the driver's DOT description
      (``PYCUDADRV_GRAPH_DOT=path`` does it for every graph at instantiation).

    Lifetimes: the graph keeps alive every Buffer, host array and object its
    captured work was given; a ``close()`` of such a Buffer meanwhile only
    marks it closed, and the memory is freed when the graph is closed (after
    the work of every stream the graph was launched on). Memory allocated
    inside the capture is a graph memory node that the graph frees at its end,
    so every replay starts and ends with the same memory. Host copies inside
    the capture must come from pinned memory (HostBuffer), which the graph
    keeps alive.

    Raises
    ------
    ArgumentValueError
        Unknown mode; the capture recorded nothing (empty capture).
    StateError
        The graph is used before the ``with`` block ended or after ``close()``.
    CaptureError
        The stream is already capturing.
    CudaError
        The driver refused to capture (e.g. an illegal call invalidated it).
    """

    def __cinit__(self, *args, **kwargs):
        # Every field is set here, so a graph is never half made; what is given is checked
        # here too (DeviceLoop's own arguments come on top, for its __init__).
        self._held, self._kernels, self._roots, self._launch_streams = [], [], [], []
        self._module_lives = ()
        self._updates = {}
        stream = args[0] if args else kwargs.get("stream")
        mode = args[1] if len(args) > 1 else kwargs.get("mode", "thread_local")
        if not isinstance(stream, Stream):
            raise ArgumentTypeError(f"{type(self).__name__} objects come from stream.capture(mode) (or "
                                    f"stream.loop(...) for a DeviceLoop), made on a Stream; got "
                                    f"{type(stream).__name__} for the stream")
        if not isinstance(mode, str):
            raise ArgumentTypeError(f"stream.capture(): mode must be a str, got {type(mode).__name__}")
        self._stream = stream
        self.mode = mode
        self.pdl = yes_no(kwargs.get("pdl", False), "pdl", "stream.loop()" if "times" in kwargs or "until" in kwargs
                         else "stream.capture()")
        self._graph = NULL
        self._exec = NULL
        self._closed = False
        self._device_updated = False
        self._upload_first = False

    def __enter__(self):
        if self._graph != NULL or self._exec != NULL or self._closed:
            raise StateError("this CapturedGraph was already captured; call stream.capture() again")
        self._capture = begin_capture(self._stream, self.mode, self.pdl, NULL)
        return self

    def __exit__(self, exc_type, exc, tb):
        cdef Capture c = self._capture
        cdef CUgraph g
        self._capture = None
        if c is None:
            return False
        if exc_type is not None:
            # Discard whatever was captured; the stream is usable again.
            c.end(True)
            self._closed = True
            return False
        g = c.end(False)
        self.adopt(g, c)
        return False

    cdef int adopt(self, CUgraph g, Capture c) except -1:
        cdef pycudadrv_driver_api* d = driver()
        cdef size_t n = 0
        cdef CUresult r
        self._graph = g
        self._held = list(c.held)
        self._kernels = list(c.kernels)
        lives = []
        for k in self._kernels:
            fn = k[1]
            if isinstance(fn, KernelBase) and (<KernelBase>fn)._module_life is not None:
                life = (<KernelBase>fn)._module_life
                if not any(life is other for other in lives):
                    lives.append(life)
        self._module_lives = tuple(lives)
        for obj in self._held:
            if isinstance(obj, Buffer):
                _hold(self, (<Buffer>obj)._alloc)
        check(d.p_cuGraphGetNodes(g, NULL, &n), "cuGraphGetNodes")
        if n == 0:
            self._release(False)
            self._closed = True
            raise ArgumentValueError("empty capture: nothing was launched on the stream inside the `with` block")
        self._n_nodes = <int>n
        for hook in list(c.finalizers):
            hook(self)
        self._stream.device.activate()
        check(d.p_cuGraphInstantiateWithFlags(&self._exec, g, 0), "cuGraphInstantiateWithFlags")
        # Nodes updated from the device need the graph uploaded before its first launch
        # (and again after a host-side update of such a node).
        self._device_updated = any(k[6] for k in self._kernels)
        if self._device_updated:
            check(d.p_cuGraphUpload(self._exec, self._stream._handle), "cuGraphUpload")
        path = _dot_path()
        if path is not None:
            _dump_dot(self, path)
        return 0

    def hold(self, *objs):
        """Keep ``objs`` alive as long as the graph, and make the frees of the
        Buffers among them wait for the graph, as for what is launched on the
        capture stream itself. For work captured on streams that joined this
        capture through an event (``stream.wait(event)``, as
        :meth:`pycudadrv.Queue.capture` forks it), which the launch path does not
        attribute to the capture.

        Raises StateError outside the ``with`` block of the capture."""
        if self._capture is None:
            raise StateError("CapturedGraph.hold(): call it inside the `with stream.capture()` block, while the "
                             "graph is being captured")
        self._capture.hold_all(objs)

    def _graph_handle(self):
        return <uintptr_t>self._graph

    cdef int _ready(self) except -1:
        if self._closed:
            raise StateError("graph is closed (or its capture failed)")
        if self._capture is not None or self._exec == NULL:
            raise StateError("graph is still being captured: launch it after the `with` block")
        return self._check_modules()

    cdef int _check_modules(self) except -1:
        # The executable graph names its kernels' CUfunctions; once their module is unloaded
        # those handles are dangling, so a replay is refused as a launch of the function is.
        cdef Lifetime life
        for obj in self._module_lives:
            life = <Lifetime>obj
            if life.ended:
                names = sorted({k[1].name for k in self._kernels
                                if isinstance(k[1], KernelBase) and (<KernelBase>k[1])._module_life is life})
                raise ClosedError(f"{self!r}: the module of its kernel {', '.join(repr(n) for n in names)} was "
                                  "unloaded (Module.unload()) after the capture; load the module again and "
                                  "capture a new graph")
        return 0

    def launch(self, stream=None):
        """Replay the graph (``cuGraphLaunch``) on ``stream`` (default: the
        capture stream). Asynchronous, like a kernel launch.

        Raises StateError before the ``with`` block ended or after ``close()``;
        ClosedError once the module of one of its kernels was unloaded
        (``Module.unload()``), whose handles the graph would otherwise run."""
        if self._exec == NULL or self._closed:
            self._ready()
        if self._module_lives:
            self._check_modules()
        cdef Stream s = self._stream if stream is None else resolve_stream(stream, self._stream.device)
        cdef CUresult r
        cdef pycudadrv_driver_api* d = driver()
        if s._closed:
            s.ensure_open()
        if s is not self._last_launch:
            if s is not self._stream and s not in self._launch_streams:
                self._launch_streams.append(s)
            self._last_launch = s
        s.device.activate()
        if self._upload_first:
            check(d.p_cuGraphUpload(self._exec, s._handle), "cuGraphUpload")
            self._upload_first = False
        if launch_releases_gil():
            with nogil:
                r = d.p_cuGraphLaunch(self._exec, s._handle)
        else:
            r = d.p_cuGraphLaunch(self._exec, s._handle)
        if r != CUDA_SUCCESS:
            raise make_error(r, "cuGraphLaunch", f"replaying {self!r}")
        if not s._owned:
            s.mark_use()

    def upload(self, stream=None):
        """Upload the graph's work descriptors to the device ahead of the
        first launch (``cuGraphUpload``)."""
        self._ready()
        cdef Stream s = self._stream if stream is None else resolve_stream(stream, self._stream.device)
        s.device.activate()
        check(driver().p_cuGraphUpload(self._exec, s._handle), "cuGraphUpload")

    @property
    def stream(self):
        """The Stream the graph was captured on (the default launch stream)."""
        return self._stream

    @property
    def num_nodes(self):
        """Number of nodes in the captured graph (a conditional node counts as one)."""
        return self._n_nodes

    @property
    def num_kernels(self):
        """Number of kernel launches recorded during capture."""
        return len(self._kernels)

    cdef object _launch_index(self, object index, str who):
        """`index` of a captured kernel launch, checked: an int in [0, num_kernels)."""
        index = _index_arg(index, "index", who)
        if index < 0 or index >= len(self._kernels):
            raise ArgumentIndexError(f"graph has {len(self._kernels)} captured kernel launches; index {index} is "
                                     "out of range")
        return index

    def kernel(self, index):
        """``(kernel name, grid, block, shared_mem_bytes, args)`` of the i-th captured launch."""
        index = self._launch_index(index, "CapturedGraph.kernel")
        node, fn, grid, block, shmem, args, devnode = self._kernels[index]
        return (fn.name, grid, block, shmem, args)

    def set_kernel_args(self, index, *args):
        """Replace all arguments of the ``index``-th captured kernel launch in
        the instantiated graph (``cuGraphExecKernelNodeSetParams``); the next
        ``launch()`` uses them. Arguments follow the same rules as
        :meth:`Function.launch` and are kept alive by the graph until a later
        update of the same launch replaces them (then their memory is let go
        of after the launches queued so far, so a loop of updates keeps one
        set, not all). Either the update applies whole or nothing changes.

        Raises
        ------
        ArgumentIndexError
            No such captured launch.
        ArgumentTypeError
            Wrong count or widths (checked before the driver).
        GraphUpdateError
            The driver refused the update (says why; ``code`` is its result),
            or the node is unknown.
        """
        self._ready()
        index = self._launch_index(index, "CapturedGraph.set_kernel_args")
        node, fn_obj, grid, block, shmem, old, devnode = self._kernels[index]
        cdef Function fn = <Function>fn_obj
        if node is None:
            raise GraphUpdateError(
                f"cannot update launch #{index} ('{fn.name}'): its graph node was not identified at capture "
                "(needs cuStreamGetCaptureInfo from a CUDA 12.3+ driver and a linear capture)")
        if len(args) != len(old):
            raise ArgumentTypeError(f"kernel '{fn.name}' was captured with {len(old)} arguments, {len(args)} given")
        fn.ensure_loaded()
        cdef pycudadrv_arena arena
        cdef ParamLayout lay = fn.layout
        cdef ParamSpec* specs = lay.specs
        cdef ParamSpec* inferred = NULL
        cdef CUDA_KERNEL_NODE_PARAMS_v2 params
        cdef CUresult r
        pycudadrv_arena_init(&arena)
        try:
            if lay.n < 0:  # sizes of the captured arguments; the new ones must match them
                specs = inferred = infer_layout(lay, old)
            memset(&params, 0, sizeof(params))
            params.func = fn._handle
            params.gridDimX, params.gridDimY, params.gridDimZ = grid
            params.blockDimX, params.blockDimY, params.blockDimZ = block
            params.sharedMemBytes = shmem
            params.kernelParams = marshal(&arena, lay, args, specs, None)
            self._stream.device.activate()
            r = driver().p_cuGraphExecKernelNodeSetParams(self._exec, <CUgraphNode><uintptr_t>node, &params)
            if r != CUDA_SUCCESS:
                err = make_error(r, "cuGraphExecKernelNodeSetParams",
                                 f"updating launch #{index} ('{fn.name}') of {self!r}")
                raise GraphUpdateError(f"the driver refused the update: {err}", code=r) from err
        finally:
            pycudadrv_arena_release(&arena)
            free(inferred)
            exports = take_dlpack_owners()      # the node now uses them: kept as long as the graph
        # What the node now reads: Buffers' allocations (held) and other libraries' arrays and their
        # exports (kept alive); scalars are bytes in the node already. The previous update's are let go
        # of once the launches so far have run, so a loop of updates does not grow the graph.
        cdef Allocation alloc
        roots = []
        objs = list(exports)
        for a in args:
            if isinstance(a, Buffer):
                alloc = (<Buffer>a)._alloc
                alloc.add_hold()
                roots.append(alloc)
            elif is_foreign_memory(a):
                objs.append(a)
        old_entry = self._updates.get(index)
        self._updates[index] = (objs, roots)
        self._kernels[index] = (node, fn, grid, block, shmem, tuple(args), devnode)
        if old_entry is not None:
            self._let_go(<tuple>old_entry)
        if self._device_updated:
            self._upload_first = True

    def set_kernel_arg(self, index, arg, value):
        """Replace argument ``arg`` of the ``index``-th captured kernel launch
        (the others stay as captured), as :meth:`PreparedLaunch.set_arg` does
        for a prepared launch (``cuGraphExecKernelNodeSetParams``); whole or
        not at all.

        Raises ArgumentIndexError for no such launch or argument, and as
        :meth:`set_kernel_args`."""
        self._ready()
        index = self._launch_index(index, "CapturedGraph.set_kernel_arg")
        arg = _index_arg(arg, "arg", "CapturedGraph.set_kernel_arg")
        args = list(self._kernels[index][5])
        if arg < 0 or arg >= len(args):
            raise ArgumentIndexError(f"launch #{index} ('{self._kernels[index][1].name}') has {len(args)} arguments; "
                                     f"argument {arg} is out of range")
        args[arg] = value
        self.set_kernel_args(index, *args)

    def debug_dot(self, path, verbose=True):
        """Write the driver's DOT description of the graph to ``path``
        (``cuGraphDebugDotPrint``); returns the path. Raises
        ArgumentValueError when the folder of ``path`` does not exist,
        CudaError when the driver cannot write the file."""
        verbose = yes_no(verbose, "verbose", "CapturedGraph.debug_dot")
        if self._graph == NULL:
            raise StateError("no graph captured")
        where = os.fspath(path)
        cdef bytes p = os.fsencode(where)
        folder = os.path.dirname(os.path.abspath(where))
        if not os.path.isdir(folder):
            raise ArgumentValueError(f"CapturedGraph.debug_dot: the folder {folder!r} of {where!r} does not exist")
        check(driver().p_cuGraphDebugDotPrint(self._graph, p, 1 if verbose else 0), "cuGraphDebugDotPrint")
        return path

    cdef int _let_go(self, tuple entry) except -1:
        """Let go of what an earlier update installed, after the launches queued so far: the
        frees of its allocations wait for every stream the graph ran on, its objects are kept
        until those streams pass this point (forever where one of them is closed)."""
        objs, roots = entry
        streams = list(self._launch_streams) + [self._stream]
        _release_roots(roots, streams, True)
        if objs:
            if any((<Stream>s)._closed for s in streams):
                self._held.extend(objs)
                return 0
            kept = tuple(objs)
            for s in streams:
                if not keep_until_done(<Stream>s, kept):
                    self._held.extend(objs)      # a capture forbids the event: kept with the graph
                    return 0
        return 0

    cdef int _release(self, bint raise_errors) except -1:
        """Let go of the held allocations: frees wait for every stream the graph ran on."""
        updates, self._updates = self._updates, {}
        for objs, entry_roots in updates.values():
            self._roots.extend(entry_roots)      # each carries its own hold, released below
        roots, self._roots = self._roots, []
        streams, self._launch_streams = self._launch_streams, []
        _release_roots(roots, streams + [self._stream], raise_errors)
        self._held = []
        return 0

    def close(self):
        """Destroy the executable graph and the graph (``cuGraphExecDestroy``,
        ``cuGraphDestroy``) and release the held buffers (their deferred frees
        run, ordered after the graph's launches). A second close is a no-op.

        Raises StateError while the graph is being captured."""
        if self._capture is not None:
            raise StateError("cannot close a graph while it is being captured")
        self._destroy(True)
        self._closed = True
        self._release(True)

    cdef int _destroy(self, bint raise_errors) except -1:
        # While a capture forbids it on this thread (another graph being recorded), the driver
        # would invalidate that capture: destroy_handle defers both to its end.
        cdef CUgraphExec e = self._exec
        cdef CUgraph g = self._graph
        self._exec = NULL
        self._graph = NULL
        cdef Device dev = self._stream.device if self._stream is not None else None
        destroy_handle(DESTROY_GRAPH_EXEC, <void*>e, dev, raise_errors)
        destroy_handle(DESTROY_GRAPH, <void*>g, dev, raise_errors)
        return 0

    def __dealloc__(self):
        try:
            self._destroy(False)
            self._release(False)
        except Exception as e:
            warn_dealloc_failure("CapturedGraph", e)

    def __repr__(self):
        state = ("capturing" if self._capture is not None else "closed" if self._closed else
                 "instantiated" if self._exec != NULL else "empty")
        where = f"0x{<uintptr_t>self._stream._handle:x}" if self._stream is not None else "(none)"
        return (f"<CapturedGraph mode={self.mode!r}{' pdl' if self.pdl else ''} on stream "
                f"{where}, {state}, {len(self._kernels or ())} kernel launches>")
