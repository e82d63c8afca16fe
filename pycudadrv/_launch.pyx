# cython: language_level=3, boundscheck=False, wraparound=False
"""Kernel launches: Function and its generic launch (``fn.launch``), LaunchConfig (validated
once), the launch hook and GIL switch, and issue_launch: the call site of cuLaunchKernel(Ex) every
launch kind goes through (the common case inlined as launch_now). PreparedLaunch is in _prepared,
Triton's launch in _tritonlaunch."""
cimport cython
from libc.stdint cimport uint32_t, uintptr_t
from libc.stdlib cimport malloc, calloc, free
from cpython.ref cimport Py_DECREF
from cpython.object cimport PyObject
from libc.string cimport memcpy, memset

from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, Lifetime
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, make_current
from pycudadrv._kernel cimport KernelBase, kernel_token, parse_dims, launch_dims, validate_config
from pycudadrv._event cimport Event
from pycudadrv._stream cimport (Stream, Capture, resolve_stream, active_captures,
                                check_launch_outside_capture)
from pycudadrv._memory cimport Buffer
from pycudadrv._interop cimport read_cai, dlpack_owners, dlpack_mark, settle_dlpack_owners, take_dlpack_owners
from pycudadrv._marshal cimport (ParamLayout, ParamSpec, new_layout, pack_arg, marshal, marshal_cached, infer_layout,
                                 args_summary, pycudadrv_arena_layout,
                                 pycudadrv_arena, pycudadrv_arena_init, pycudadrv_arena_release,
                                 pycudadrv_arena_push, pycudadrv_arena_at, pycudadrv_arena_finish,
                                 pycudadrv_arena_is_spilled, pycudadrv_arena_copy_slots, ANY, FLOAT, BYTES,
                                 pycudadrv_argcache, pycudadrv_argcache_zero, pycudadrv_argcache_init,
                                 pycudadrv_argcache_release, pycudadrv_pick_first_diff, pycudadrv_first_diff_plain)

import numpy as np
from pycudadrv import _signature
from pycudadrv._interop import asbuffer
from pycudadrv._textargs import yes_no
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, ArgumentIndexError, ClosedError,
                               NotSupportedError, StateError)

__all__ = ["Function", "LaunchConfig", "set_release_gil", "get_release_gil", "set_launch_hook",
           "get_launch_hook"]

# Launches hold the GIL by default: releasing and re-taking it costs more than a
# third of pycudadrv's own overhead per launch (measured by bench/launch_overhead.py,
# "prepared, GIL held" row). Blocking calls (synchronize, copies to the host) always
# release it.
cdef bint _release_gil = False
# Instrumentation (profiling / tracing): an object with before(fn, stream) -> token and
# after(token, fn, stream, grid, block, shared_mem_bytes), or None (the fast path).
cdef object _hook = None
# Attributes of a launch made during a capture that asked for PDL, or for a device-updatable node.
cdef enum:
    _EX_ATTRS = 4


def set_launch_hook(hook):
    """Install (or, with None, remove) the launch instrumentation hook used by
    pycudadrv.profile; returns the previous one. ``hook`` is None or an
    object with callable ``before(fn, stream)`` (returns a token) and
    ``after(token, fn, stream, grid, block, shared_mem_bytes)``;
    ArgumentTypeError otherwise."""
    global _hook
    if hook is not None and not (callable(getattr(hook, "before", None)) and callable(getattr(hook, "after", None))):
        raise ArgumentTypeError(f"set_launch_hook: the hook must be None or an object with callable before(fn, "
                                f"stream) and after(token, fn, stream, grid, block, shared_mem_bytes), got "
                                f"{type(hook).__name__}")
    prev = _hook
    _hook = hook
    return prev


def get_launch_hook():
    """The installed launch instrumentation hook, or None."""
    return _hook


def set_release_gil(flag):
    """Whether kernel and graph launches release the GIL around the driver
    call (default False: a launch returns in microseconds, and holding the
    GIL is measurably faster). Turn it on when other Python threads must run
    during launches. Returns the previous setting. Raises ArgumentTypeError
    for anything but True or False (``"no"`` would otherwise turn it on)."""
    global _release_gil
    if not isinstance(flag, (bool, np.bool_)):
        raise ArgumentTypeError(f"set_release_gil: flag must be True or False, got {type(flag).__name__} "
                                f"{flag!r:.40}")
    prev = _release_gil
    _release_gil = bool(flag)
    return prev


cdef bint launch_releases_gil() noexcept:
    return _release_gil


cdef object get_launch_hook_c():
    return _hook


def get_release_gil():
    """Whether launches release the GIL (see :func:`set_release_gil`)."""
    return _release_gil


cdef Function make_function(CUfunction handle, str name, object module, Device device, object layout,
                            str layout_source, Lifetime module_life):
    cdef Function f = Function.__new__(Function, kernel_token())
    f.init_kernel(handle, name, device, module_life)
    f.module = module
    import pycudadrv._driver as _drvmod
    dv = _drvmod.driver_version()
    f.layout = new_layout(name, device, _signature.param_limit(dv[0] * 1000 + dv[1] * 10, device.cc_major))
    if layout is not None:
        f.layout.set(layout, layout_source)
    return f


cdef void _free_kept(Function f) noexcept:
    """Drop the scalar objects a generic launch kept (and the arena's readiness with them)."""
    pycudadrv_argcache_release(&f._args)
    f._arena_ready = False


cdef object _launch_error(CUresult r, str call, Function fn, const unsigned int* grid, const unsigned int* block,
                          unsigned int shmem, object args):
    return make_error(r, call,
                      f"launching kernel '{fn.name}' grid=({grid[0]}, {grid[1]}, {grid[2]}) "
                      f"block=({block[0]}, {block[1]}, {block[2]}) shared_mem_bytes={shmem} "
                      f"args={args_summary(tuple(args))}")


cdef unsigned int _fill_ex(CUlaunchConfig* cfg, CUlaunchAttribute* attrs, const unsigned int* grid,
                           const unsigned int* block, unsigned int shmem, LaunchConfig lc, CUstream stream,
                           bint pdl, bint device_updatable):
    """Fill a cuLaunchKernelEx configuration; returns the index of the
    device-updatable attribute (or _EX_ATTRS when there is none)."""
    cdef unsigned int n = 0, dev_at = _EX_ATTRS
    cfg.gridDimX = grid[0]
    cfg.gridDimY = grid[1]
    cfg.gridDimZ = grid[2]
    cfg.blockDimX = block[0]
    cfg.blockDimY = block[1]
    cfg.blockDimZ = block[2]
    cfg.sharedMemBytes = shmem
    cfg.hStream = stream
    memset(attrs, 0, _EX_ATTRS * sizeof(CUlaunchAttribute))
    if lc is not None and lc.cooperative:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attrs[n].value.cooperative = 1
        n += 1
    if lc is not None and lc.cluster[0] * lc.cluster[1] * lc.cluster[2] > 1:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[n].value.clusterDim.x = lc.cluster[0]
        attrs[n].value.clusterDim.y = lc.cluster[1]
        attrs[n].value.clusterDim.z = lc.cluster[2]
        n += 1
    if pdl or (lc is not None and lc.programmatic):
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attrs[n].value.programmaticStreamSerializationAllowed = 1
        n += 1
    if device_updatable:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE
        attrs[n].value.deviceUpdatableKernelNode.deviceUpdatable = 1
        dev_at = n
        n += 1
    cfg.attrs = attrs
    cfg.numAttrs = n
    return dev_at


# The list of running captures (pycudadrv._stream's own object, never rebound there): a launch
# outside any capture tests its length inline instead of calling captures_active().
cdef list _captures = active_captures()

# The DLPack exports of the arguments just packed (pycudadrv._interop): a launch that packed
# one hands them to settle_dlpack_owners (an empty list is one C test on the fast path).
cdef list _dl_owners = dlpack_owners()


cdef inline bint _plain_launch(Stream s, LaunchConfig lc) noexcept:
    """The common launch: no capture anywhere, no hook, no launch attribute, the GIL held, a stream
    of pycudadrv's own (nothing of issue_launch's general path applies)."""
    return (s._capture is None and _hook is None and not _release_gil and s._owned
            and (lc is None or not lc.use_ex) and not _captures)


cdef inline int _launch_plain(pycudadrv_driver_api* d, Function fn, const unsigned int* grid,
                              const unsigned int* block, unsigned int shmem, Stream s, void** kp, object args,
                              PyObject** items, Py_ssize_t nitems) except -1:
    """The cuLaunchKernel of the common launch (_plain_launch), its failure named."""
    cdef CUresult r = d.p_cuLaunchKernel(fn._handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                         shmem, s._handle, kp, NULL)
    if r != CUDA_SUCCESS:
        raise _launch_error(r, "cuLaunchKernel", fn, grid, block, shmem, _args_of(args, items, nitems))
    return 0


cdef int launch_now(pycudadrv_driver_api* d, Function fn, const unsigned int* grid,
                           const unsigned int* block, unsigned int shmem, Stream s, void** kp, LaunchConfig lc,
                           object args, PyObject** items=NULL, Py_ssize_t nitems=0) except -1:
    """Make the function's context current and launch (issue_launch), the common launch inlined at
    the hot call sites (the prepared and the generic launch) instead of a call of the general one."""
    make_current(d, fn.device)
    if _plain_launch(s, lc):
        return _launch_plain(d, fn, grid, block, shmem, s, kp, args, items, nitems)
    issue_launch(fn, grid, block, shmem, s, kp, lc, args, False, items, nitems)
    return 0


cdef uintptr_t issue_launch(Function fn, const unsigned int* grid, const unsigned int* block, unsigned int shmem,
                            Stream s, void** kp, LaunchConfig lc, object args, bint device_updatable,
                            PyObject** items=NULL, Py_ssize_t nitems=0) except? 1:
    cdef pycudadrv_driver_api* d = driver()
    cdef CUresult r
    if not device_updatable and _plain_launch(s, lc):
        _launch_plain(d, fn, grid, block, shmem, s, kp, args, items, nitems)
        return 0
    cdef Capture cap = s._capture
    cdef CUlaunchConfig cfg
    cdef CUlaunchAttribute attrs[_EX_ATTRS]
    cdef unsigned int dev_at
    cdef uintptr_t devnode = 0
    cdef bint pdl = cap is not None and cap.pdl
    tok = None
    if _hook is not None and cap is None:
        tok = _hook.before(fn, s)
    if cap is None and _captures:
        check_launch_outside_capture(s)
    if device_updatable and cap is None:
        raise StateError(f"kernel '{fn.name}': a device-updatable launch exists only inside a graph capture")
    if not pdl and not device_updatable and (lc is None or not lc.use_ex):
        # The cuLaunchKernel call of every launch path (GIL held unless set_release_gil(True)).
        if _release_gil:
            with nogil:
                r = d.p_cuLaunchKernel(fn._handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem,
                                       s._handle, kp, NULL)
        else:
            r = d.p_cuLaunchKernel(fn._handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem,
                                   s._handle, kp, NULL)
        if r != CUDA_SUCCESS:
            raise _launch_error(r, "cuLaunchKernel", fn, grid, block, shmem,
                                _args_of(args, items, nitems))
    else:
        dev_at = _fill_ex(&cfg, attrs, grid, block, shmem, lc, s._handle, pdl, device_updatable)
        r = d.p_cuLaunchKernelEx(&cfg, fn._handle, kp, NULL)
        if r != CUDA_SUCCESS:
            raise _launch_error(r, "cuLaunchKernelEx", fn, grid, block, shmem,
                                _args_of(args, items, nitems))
        if dev_at < _EX_ATTRS:
            devnode = <uintptr_t>attrs[dev_at].value.deviceUpdatableKernelNode.devNode
    if not s._owned:
        s.mark_use()             # another library's stream: frees wait for this launch through it
    if tok is not None:
        _hook.after(tok, fn, s, (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), shmem)
    if cap is not None:
        cap.on_launch(fn, grid, block, shmem, _args_of(args, items, nitems),
                      <CUgraphDeviceNode>devnode)
    return devnode


def _timed(Stream s, launch, *args, **kwargs):
    from pycudadrv._stream import synchronize_context
    synchronize_context(s.device)      # every stream of the device drained: the timing is never contended
    start = Event(device=s.device)
    end = Event(device=s.device)
    start.record(s)
    launch(*args, **kwargs)
    end.record(s)
    return int(round(Event.elapsed_ms(start, end) * 1e6))


cdef bint flag_arg(object v, str name, str where) except -1:
    """A yes/no argument under pycudadrv._textargs.yes_no's rule (True, False, a numpy bool, 0, 1;
    anything else an ArgumentTypeError naming it), with True and False answered here in C."""
    if v is True or v is False:
        return v is True
    return yes_no(v, name, where)


cdef unsigned int shared_mem_arg(object v, str where) except? 0xFFFFFFFF:
    """``shared_mem_bytes`` as given to bind() or LaunchConfig: an int in [0, 2**32)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ArgumentTypeError(f"{where}: shared_mem_bytes must be an int of bytes, got {type(v).__name__} "
                                f"{v!r:.40}")
    if not 0 <= v <= 0xFFFFFFFF:
        raise ArgumentValueError(f"{where}: shared_mem_bytes must be in [0, 2**32-1] bytes, got {v!r:.40}")
    return <unsigned int>v


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class LaunchConfig:
    """Grid, block, dynamic shared memory and launch attributes of a kernel,
    validated once against the device and the kernel (the limits named in
    :meth:`Function.launch`). Made by ``fn.bind(...)`` (its ``config``), or
    directly: ``LaunchConfig(fn, grid, block, shared_mem_bytes=0, ...)``
    with the keywords of :meth:`Function.launch`.

    Raises ArgumentTypeError when ``fn`` is not a Function, ArgumentValueError
    beyond a limit, NotSupportedError for clusters or PDL below compute
    capability 9.0 or a cooperative launch the device cannot do."""

    def __init__(self, fn=None, grid=None, block=None, shared_mem_bytes=0, *,
                 cooperative=False, cluster=None, programmatic_dependent=False):
        if not isinstance(fn, Function):
            raise ArgumentTypeError(f"LaunchConfig(fn, grid, block, shared_mem_bytes=0, ...) takes the Function "
                                    f"first, got {type(fn).__name__}; a prepared launch's configuration is "
                                    "fn.bind(grid, block).config")
        cdef Function f = <Function>fn
        cdef unsigned int shmem = shared_mem_arg(shared_mem_bytes, f"kernel '{f.name}'")
        f.ensure_loaded()
        parse_dims(grid, self.grid, "grid", False)
        parse_dims(block, self.block, "block", False)
        self.shared_mem_bytes = shmem
        self.cooperative = flag_arg(cooperative, "cooperative", f"kernel '{f.name}'")
        self.programmatic = flag_arg(programmatic_dependent, "programmatic_dependent", f"kernel '{f.name}'")
        self.cluster[0] = self.cluster[1] = self.cluster[2] = 1
        if cluster is not None:
            parse_dims(cluster, self.cluster, "cluster", False)
        validate_config(f, self.grid, self.block, shmem)
        cdef Device dev = f.device
        cdef int k
        if self.cluster[0] * self.cluster[1] * self.cluster[2] > 1 or programmatic_dependent:
            if dev.cc_major < 9:
                raise NotSupportedError(
                    f"kernel '{f.name}': thread-block clusters and programmatic dependent launch need compute "
                    f"capability 9.0 or newer; device {dev.ordinal} is {dev.cc_major}.{dev.cc_minor}")
            for k in range(3):
                if self.grid[k] % self.cluster[k]:
                    raise ArgumentValueError(f"kernel '{f.name}': grid ({self.grid[0]}, {self.grid[1]}, "
                                             f"{self.grid[2]}) is not a multiple of cluster ({self.cluster[0]}, "
                                             f"{self.cluster[1]}, {self.cluster[2]})")
        if cooperative:
            limit = f.max_cooperative_grid(self.block, shmem)
            nblocks = <unsigned long long>self.grid[0] * self.grid[1] * self.grid[2]
            if nblocks > limit:
                raise ArgumentValueError(f"kernel '{f.name}': cooperative launch of {nblocks} blocks exceeds the "
                                         f"{limit} that can be resident at once on device {dev.ordinal}")
        self.use_ex = cooperative or programmatic_dependent or (self.cluster[0] * self.cluster[1] * self.cluster[2] > 1)

    @property
    def grid(self):
        """``(x, y, z)`` in blocks."""
        return (self.grid[0], self.grid[1], self.grid[2])

    @property
    def block(self):
        """``(x, y, z)`` in threads."""
        return (self.block[0], self.block[1], self.block[2])

    @property
    def shared_mem_bytes(self):
        """Dynamic shared memory per block, in bytes."""
        return self.shared_mem_bytes

    def __repr__(self):
        g, b = (self.grid[0], self.grid[1], self.grid[2]), (self.block[0], self.block[1], self.block[2])
        return (f"<LaunchConfig grid={g} block={b} shared_mem_bytes={self.shared_mem_bytes}"
                f"{' cooperative' if self.cooperative else ''}{' pdl' if self.programmatic else ''}>")


cdef extern from *:
    PyObject** _seq_items "PySequence_Fast_ITEMS"(object t)       # a tuple's items (borrowed)
    PyObject** _tuple_items "PySequence_Fast_ITEMS"(tuple t)


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class Function(KernelBase):
    """A kernel entry point of a loaded Module (``cuModuleGetFunction``).

    Call :meth:`launch` to run it, or :meth:`bind` for a prepared launch that
    caches everything that does not change between launches. Occupancy
    queries and function attributes are methods of its base.

    The parameter layout (count, size and kind of each parameter) comes from
    the strictest information available: an explicit signature, the C++
    mangled name or the ``compile()`` source (signedness and constness), the
    module's PTX ``.entry`` (sizes, float or integer), ``cuFuncGetParamInfo``
    (sizes only); ``layout_source`` says which decided. See the
    kernel-parameter rules in the docs for which Python value becomes which bytes.
    """

    def __cinit__(self, *args, **kwargs):
        pycudadrv_arena_init(&self._arena)
        self._arena_ready = False
        pycudadrv_argcache_zero(&self._args)
        self._busy = False

    def __dealloc__(self):
        # No cdef method here: when KernelBase.__cinit__ refuses (no token) the object is
        # freed before its Function vtable is set.
        _free_kept(self)
        pycudadrv_arena_release(&self._arena)

    cdef int _drop_cache(self) except -1:
        _free_kept(self)
        return 0

    def __init__(self, *args, **kwargs):
        raise ArgumentTypeError("Function objects come from Module.function(name)")

    def set_signature(self, signature):
        """Declare the parameter types explicitly (overrides what the driver or
        PTX reported): a C-like string ``"float*, const float*, int, float"`` or
        a sequence of type names / numpy dtypes. Raises ArgumentValueError when
        the count or sizes disagree with the layout the kernel already has
        (from its PTX or ``cuFuncGetParamInfo``)."""
        layout = _signature.parse_signature(signature)
        cdef ParamLayout lay = self.layout
        if lay.n >= 0:
            if len(layout) != lay.n or any(layout[k].size != lay.specs[k].size for k in range(lay.n)):
                raise ArgumentValueError(
                    f"kernel '{self.name}': signature {signature!r} ({_signature.format_layout(layout)}) "
                    f"disagrees with the kernel's own parameter info ({lay.source}): "
                    f"({_signature.format_layout(lay.params)})")
        if self._busy or lay.packing:       # refused before anything changes
            raise StateError(f"kernel '{self.name}': set_signature while a launch of it is packing its arguments "
                             "(from an argument's __cuda_array_interface__/__dlpack__ or a hook) would free the "
                             "layout and the argument arena that launch uses; change the signature outside the launch")
        lay.set(layout, "signature")
        self._drop_cache()
        self._layout_version += 1
        return self

    @property
    def param_layout(self):
        """List of ``Param(kind, size, align, offset, const)``, or None when unknown."""
        return None if self.layout.params is None else list(self.layout.params)

    @property
    def layout_source(self):
        """Which information decided the parameter layout: ``"signature"``,
        ``"mangled+ptx"``, ``"source+ptx"``, ``"ptx"``, ``"cuFuncGetParamInfo"`` or ``"unknown"``."""
        return self.layout.source

    @property
    def num_params(self):
        """Number of kernel parameters, or None when unknown."""
        return None if self.layout.n < 0 else self.layout.n

    @property
    def max_threads_per_block(self):
        """``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`` for this kernel."""
        return self.max_threads

    @property
    def static_shared_bytes(self):
        """Static shared memory per block in bytes (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``)."""
        return self.static_shared

    @property
    def handle(self):
        """The ``CUfunction`` as an int."""
        return <uintptr_t>self._handle

    @cython.embedsignature.format("clinic")     # a method descriptor: inspect.signature reads its text signature
    def launch(self, grid, block, *args, shared_mem_bytes=0, stream=None, cooperative=False, cluster=None,
               programmatic_dependent=False):
        """Launch the kernel (``cuLaunchKernel``; ``cuLaunchKernelEx`` when a
        launch attribute is asked for, or the stream's capture joins kernels by PDL).

        Parameters
        ----------
        grid, block : int or tuple of 1-3 ints
            Grid size in blocks; block size in threads. Checked against the
            device (block x/y/z, grid x/y/z, 65,535 in y and z) and the
            kernel's MAX_THREADS_PER_BLOCK before any driver call.
        *args
            One value per kernel parameter: Buffer or view (device pointer),
            None (null pointer), numpy scalars (bit-for-bit; the width must
            match), Python int/float/complex/bool (take the parameter's width),
            bytes-like or structured numpy scalars for structs, any object with
            ``__cuda_array_interface__`` or ``__dlpack__`` (C-contiguous only).
        shared_mem_bytes : int
            Dynamic shared memory per block in bytes. Above the default 48 KB
            the kernel's max-dynamic-shared-size attribute is raised
            automatically up to the opt-in limit minus static shared memory.
        stream : Stream, optional
            Defaults to the device's default stream (owned, non-blocking).
        cooperative, cluster, programmatic_dependent
            Launch attributes (``cuLaunchKernelEx``): cooperative launch,
            thread-block cluster dimensions, programmatic dependent launch
            (clusters and PDL need compute capability 9.0+).

        Raises
        ------
        ArgumentTypeError
            Wrong argument count, a value of the wrong kind or width, an
            integer out of the parameter's range (its width is part of its
            type), strided memory (message names the kernel, the parameter
            index, its size and the value).
        ArgumentValueError
            Grid/block/shared memory beyond the limits (names the limit).
        ClosedError
            A Buffer argument (or the module) was closed.
        NotSupportedError
            Clusters or PDL below compute capability 9.0.
        CudaError
            The driver rejected the launch (names kernel, grid, block, shared
            memory and the arguments).
        """
        cdef unsigned int shmem = 0
        cdef LaunchConfig lc = None
        if shared_mem_bytes is not 0:
            shmem = shared_mem_arg(shared_mem_bytes, f"kernel '{self.name}'")
        if cluster is not None or cooperative is not False or programmatic_dependent is not False:
            lc = LaunchConfig(self, grid, block, shmem, cooperative=cooperative, cluster=cluster,
                              programmatic_dependent=programmatic_dependent)      # checked once, here
        return launch_items(self, grid, block, _tuple_items(args), len(args), shmem, stream, lc)

    def __call__(self, grid, block, *args, **kwargs):
        """Same as :meth:`launch`."""
        return self.launch(grid, block, *args, **kwargs)

    def launch_timed_ns(self, grid, block, *args, **kwargs):
        """Run the kernel alone and return its GPU time in nanoseconds (int).

        Drains every stream of the device first (``cuCtxSynchronize``, as the
        zyx backend's timed launch does, so the timing is never contended),
        then records an event, launches (as :meth:`launch`, same arguments),
        records a second event and waits for it (``cuEventElapsedTime``;
        resolution about 0.5 us)."""
        stream = kwargs.get("stream")
        cdef Stream s = <Stream>self.device.default_stream if stream is None else resolve_stream(stream, self.device)
        return _timed(s, self.launch, grid, block, *args, **kwargs)

    launch_timed = launch_timed_ns

    def bind(self, grid, block, *args, shared_mem_bytes=0, stream=None,
             cooperative=False, cluster=None, programmatic_dependent=False):
        """A :class:`PreparedLaunch` of this kernel with a fixed configuration.

        The grid, block, shared memory, stream and launch attributes are
        validated once here; ``args`` (optional) are bound now. Raises as
        :meth:`launch`.
        """
        from pycudadrv._prepared import PreparedLaunch      # upward: prepared launches are built on this module
        return PreparedLaunch(self, grid, block, *args, shared_mem_bytes=shared_mem_bytes, stream=stream,
                              cooperative=cooperative, cluster=cluster,
                              programmatic_dependent=programmatic_dependent)

    def builder(self, grid, block, *, shared_mem_bytes=0, stream=None, cooperative=False, cluster=None,
                programmatic_dependent=False):
        """A :class:`pycudadrv.LaunchBuilder` of this kernel (the cuda-async
        launch builder): arguments are pushed one at a time
        (``push_arg``, ``push_tensor``), then ``launch()``, ``bind()`` or
        ``await``. The configuration (the keywords of :meth:`launch`) is
        validated here; raises as :class:`LaunchConfig`."""
        from pycudadrv._builder import _make_builder     # upward: the builder is built on this module
        return _make_builder(self, grid, block, shared_mem_bytes, stream, cooperative, cluster,
                             programmatic_dependent)

    def __repr__(self):
        n = "?" if self.layout is None or self.layout.n < 0 else str(self.layout.n)
        if self.device is None:
            return f"<Function '{self.name}', {n} params, not loaded>"
        state = ", module unloaded" if self._module_life is not None and self._module_life.ended else ""
        return f"<Function '{self.name}', {n} params ({self.layout.source}), device {self.device.ordinal}{state}>"





cdef tuple vec_tuple(PyObject** items, Py_ssize_t n):
    """A tuple of items[0:n] (new references): what the slow paths and the messages take."""
    return tuple([<object>items[k] for k in range(n)])


cdef tuple _args_of(object args, PyObject** items, Py_ssize_t n):
    """issue_launch's arguments as a tuple (for a message or a capture record): ``args``, or, from
    the generic launch, its caller's array ``items[0:n]``."""
    return tuple(args) if items == NULL else vec_tuple(items, n)


cdef object launch_items(Function fn, object grid, object block, PyObject** items, Py_ssize_t n,
                         unsigned int shmem, object stream, LaunchConfig lc):
    """The generic launch: ``fn`` over ``items[0:n]`` (borrowed from the caller for the call's length:
    the argument tuple of :meth:`Function.launch`, or the Queue's array), on ``stream`` (None: the
    function's device's default stream). ``lc``: a LaunchConfig of the same grid, block and shared
    memory when a launch attribute was asked for (then cuLaunchKernelEx), else None."""
    cdef unsigned int g[3]
    cdef unsigned int b[3]
    cdef Stream s
    cdef ParamLayout lay = fn.layout
    cdef void** kp
    cdef Py_ssize_t mark            # this thread's DLPack exports taken before this launch packs
    cdef bint launched
    if fn._module_life.ended:
        fn.ensure_loaded()
    if lc is not None:
        memcpy(g, lc.grid, sizeof(g))
        memcpy(b, lc.block, sizeof(b))
    else:
        launch_dims(grid, g, "grid")
        launch_dims(block, b, "block")
        if (g[0] != fn._ok_grid[0] or g[1] != fn._ok_grid[1] or g[2] != fn._ok_grid[2] or
                b[0] != fn._ok_block[0] or b[1] != fn._ok_block[1] or b[2] != fn._ok_block[2] or
                shmem != fn._ok_shmem):
            validate_config(fn, g, b, shmem)
            memcpy(fn._ok_grid, g, sizeof(g))         # the configuration last validated: the next
            memcpy(fn._ok_block, b, sizeof(b))        # identical launch skips the checks
            fn._ok_shmem = shmem
    if lay.n >= 0 and n != lay.n:
        raise ArgumentTypeError(f"kernel '{fn.name}' takes {lay.n} arguments "
                                f"({_signature.format_layout(lay.params)}), {n} given")
    if stream is None:
        s = fn._default_stream
        if s is None:
            s = fn._default_stream = <Stream>fn.device.default_stream
    else:
        s = resolve_stream(stream, fn.device)
    if s._closed:
        s.ensure_open()
    if lay.n >= 0 and not _release_gil and not fn._busy:
        # The common case: the layout is known and the GIL is held for the whole launch, so the
        # function's own arena is safe to reuse; unchanged immutable arguments keep their bytes.
        # _busy: Python code run while packing (a CAI property, a hook; another thread taking the
        # GIL there) may launch this function again: that launch packs apart, never in this arena.
        if not fn._arena_ready:
            _ready_arena(fn, n)
        mark = dlpack_mark() if _dl_owners else 0     # exports an outer launch took are its own
        fn._busy = True
        launched = False            # (a flag, not an except clause: that would save the exception state)
        try:
            kp = marshal_cached(&fn._arena, lay, items, n, &fn._args, s)
            launch_now(driver(), fn, g, b, shmem, s, kp, lc, None, items, n)
            launched = True
        finally:
            fn._busy = False
            if not launched and _dl_owners:
                take_dlpack_owners(mark)    # refused, nothing launched: the DLPack exports taken may go
        if _dl_owners:
            settle_dlpack_owners(s, mark)   # a DLPack argument's export lives until the kernel has run
        return None
    _launch_apart(fn, g, b, shmem, s, lc, vec_tuple(items, n))
    return None


cdef int _ready_arena(Function fn, Py_ssize_t n) except -1:
    """Lay the function's own arena out for its parameters (the cache of the generic launch)."""
    cdef ParamLayout lay = fn.layout
    fn._drop_cache()
    if pycudadrv_argcache_init(&fn._args, n) != 0 or (n and pycudadrv_arena_layout(
            &fn._arena, <const unsigned char*>&lay.specs[0].size, sizeof(ParamSpec), <uint32_t>n) != 0):
        pycudadrv_argcache_release(&fn._args)
        raise MemoryError("kernel argument arena")
    fn._arena_ready = True
    return 0


def _first_diff_for_tests(list a, list b, Py_ssize_t start):
    """(the scan marshal_cached uses on this CPU, the plain C scan): each the first index k >=
    ``start`` with ``a[k] is not b[k]`` (identity), or the common length. For the CPU tests."""
    cdef Py_ssize_t k, n = min(len(a), len(b))
    cdef void** pa = <void**>calloc(max(n, 1), sizeof(void*))
    cdef void** pb = <void**>calloc(max(n, 1), sizeof(void*))
    try:
        if pa == NULL or pb == NULL:
            raise MemoryError()
        for k in range(n):
            pa[k] = <void*>a[k]
            pb[k] = <void*>b[k]
        start = min(max(start, 0), n)
        return pycudadrv_pick_first_diff()(pa, pb, start, n), pycudadrv_first_diff_plain(pa, pb, start, n)
    finally:
        free(pa)
        free(pb)


cdef int _launch_apart(Function fn, unsigned int* g, unsigned int* b, unsigned int shmem, Stream s,
                       LaunchConfig lc, tuple args) except -1:
    """A generic launch in an arena of its own: the layout is unknown (sizes from the values),
    or the GIL is released around the driver call (another thread may use the function's)."""
    cdef pycudadrv_arena arena
    cdef ParamLayout lay = fn.layout
    cdef ParamSpec* specs = lay.specs
    cdef ParamSpec* inferred = NULL
    cdef Py_ssize_t k
    cdef void** kp
    cdef Py_ssize_t mark = dlpack_mark() if _dl_owners else 0
    cdef bint launched = False
    pycudadrv_arena_init(&arena)
    lay.packing += 1            # set_signature waits: `specs` is the layout's own
    try:
        if lay.n < 0:
            specs = inferred = infer_layout(lay, args)
        kp = marshal(&arena, lay, args, specs, s)
        for k in range(len(args)):
            if type(args[k]) is Buffer:
                (<Buffer>args[k])._alloc.note_use(s)
        fn.device.activate()
        issue_launch(fn, g, b, shmem, s, kp, lc, args, False)
        launched = True
    finally:
        lay.packing -= 1
        pycudadrv_arena_release(&arena)
        free(inferred)
        if not launched and _dl_owners:
            take_dlpack_owners(mark)    # refused, nothing launched: the DLPack exports taken may go
    if _dl_owners:
        settle_dlpack_owners(s, mark)
    return 0





