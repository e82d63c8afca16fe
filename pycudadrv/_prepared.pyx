# cython: language_level=3, boundscheck=False, wraparound=False
"""PreparedLaunch (``fn.bind``): a kernel's launch with its configuration validated once and its
arguments packed once into an arena of its own; each launch checks the bound buffers are open and
calls the driver (issue_launch / launch_now of _launch)."""
cimport cython
from libc.stdint cimport uint32_t, uintptr_t
from libc.stdlib cimport malloc, calloc, free
from cpython.object cimport PyObject
from libc.string cimport memcpy, memset

from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check
from pycudadrv._device cimport Device, make_current
from pycudadrv._stream cimport Stream, Capture, resolve_stream, active_captures
from pycudadrv._memory cimport Buffer
from pycudadrv._interop cimport (read_cai, is_foreign_memory, is_dlpack_only, dlpack_owners, dlpack_mark,
                                 settle_dlpack_owners, take_dlpack_owners)
from pycudadrv._marshal cimport (ParamLayout, ParamSpec, pack_arg, marshal, infer_layout, args_summary,
                                 pycudadrv_arena, pycudadrv_arena_init, pycudadrv_arena_release,
                                 pycudadrv_arena_push, pycudadrv_arena_at, pycudadrv_arena_finish,
                                 pycudadrv_arena_is_spilled, pycudadrv_arena_copy_slots, ANY, FLOAT, BYTES)
from pycudadrv._launch cimport (Function, LaunchConfig, issue_launch, launch_now, flag_arg, shared_mem_arg,
                                vec_tuple)

import numpy as np
from pycudadrv import _signature
from pycudadrv._interop import asbuffer
from pycudadrv._launch import _timed
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, ArgumentIndexError, ClosedError,
                               NotSupportedError, StateError)

__all__ = ["PreparedLaunch"]

cdef list _dl_owners = dlpack_owners()


cdef inline bint _prepared_ready(PreparedLaunch p) noexcept:
    """The hot path of _prepared_checks, C tests alone (inlined): bound, module loaded, stream open,
    no bound Buffer flagged (closed, or its allocation asks for attention)."""
    cdef Py_ssize_t j
    if p.fn is None or p._held is None or p.fn._module_life.ended or p._stream._closed:
        return False
    for j in range(p._n_flags):
        if p._watch_flags[j][0]:
            return False
    return True


cdef int _prepared_checks(PreparedLaunch p) except -1:
    """What every launch of `p` checks first: it is bound, its module is loaded, no bound Buffer was
    closed (ClosedError naming the parameter) or needs ordering, its stream is open."""
    cdef Function fn = p.fn
    cdef Py_ssize_t j
    if fn is None:
        raise ArgumentTypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
    if p._held is None:
        raise ArgumentTypeError(f"kernel '{fn.name}': no arguments bound yet; call p(*args) first")
    if fn._module_life.ended:
        fn.ensure_loaded()
    for j in range(p._n_flags):
        if p._watch_flags[j][0]:
            p._check_bound(p._stream)
            break
    if p._stream._closed:
        p._stream.ensure_open()
    return 0


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class PreparedLaunch:
    """A launch of one kernel with its configuration and argument storage
    prepared once (``fn.bind(grid, block, *args, ...)``).

    ``p(*args)`` marshals the arguments into the reused arena and launches;
    ``p()`` launches again with the arguments bound last; ``p.set_arg(i, v)``
    updates one argument without re-marshalling the rest. Nothing is
    allocated per launch. The bound Python objects are kept alive, and each
    launch checks (one C field per bound Buffer) that none was closed since:
    a closed Buffer raises ClosedError naming the kernel and the parameter
    instead of letting the kernel touch freed memory. A rebind or
    ``set_arg`` that fails leaves the previous arguments in place, bit for bit.
    """

    def __cinit__(self):
        pycudadrv_arena_init(&self.arena)
        pycudadrv_arena_init(&self.scratch)
        self._has_scratch = False
        self.specs = NULL
        self.n = 0
        self._watch = []
        self._watch_k = []
        self._watch_flags = NULL
        self._n_flags = 0

    def __init__(self, fn=None, grid=None, block=None, *args, shared_mem_bytes=0, stream=None,
                 cooperative=False, cluster=None, programmatic_dependent=False):
        if self.fn is not None:
            raise StateError(f"this PreparedLaunch of kernel '{self.fn.name}' is already initialised; make another "
                             "with fn.bind(grid, block, *args)")
        try:
            self._init(fn, grid, block, args, shared_mem_bytes, stream, cooperative, cluster, programmatic_dependent)
        except BaseException:
            self._reset()      # a failed __init__ leaves it uninitialised (usable by nothing, initialisable)
            raise

    cdef int _reset(self) except -1:
        free(self.specs)
        self.specs = NULL
        pycudadrv_arena_release(&self.arena)
        pycudadrv_arena_init(&self.arena)
        pycudadrv_arena_release(&self.scratch)
        pycudadrv_arena_init(&self.scratch)
        self._has_scratch = False
        free(self._watch_flags)
        self._watch_flags = NULL
        self._n_flags = 0
        self._watch, self._watch_k = [], []
        self.kernel_params = NULL
        self.fn = None
        self.n = 0
        self._held = None
        self._packed = ()
        self._exports = None
        return 0

    cdef int _init(self, object fn, object grid, object block, tuple args, object shared_mem_bytes, object stream,
                   object cooperative, object cluster, object programmatic_dependent) except -1:
        cdef int k
        if not isinstance(fn, Function):
            raise ArgumentTypeError(f"PreparedLaunch objects come from fn.bind(grid, block, *args) (or "
                                    f"PreparedLaunch(fn, grid, block, *args) with a Function fn), got "
                                    f"{type(fn).__name__} for fn")
        cdef Function f = <Function>fn
        cdef ParamLayout lay = f.layout
        config = LaunchConfig(f, grid, block, shared_mem_bytes, cooperative=cooperative, cluster=cluster,
                              programmatic_dependent=programmatic_dependent)
        cdef Stream s = <Stream>f.device.default_stream if stream is None else resolve_stream(stream, f.device)
        s.ensure_open()
        self.fn, self.config, self._stream = f, config, s
        if lay.n >= 0:
            self.n = lay.n
            if args and len(args) != self.n:
                raise ArgumentTypeError(f"kernel '{fn.name}' takes {self.n} arguments "
                                        f"({_signature.format_layout(lay.params)}), {len(args)} given")
            self.specs = <ParamSpec*>malloc(max(self.n, 1) * sizeof(ParamSpec))
            if self.specs == NULL:
                raise MemoryError()
            memcpy(self.specs, lay.specs, self.n * sizeof(ParamSpec))
        else:
            if not args:
                raise ArgumentTypeError(f"kernel '{fn.name}': its parameter sizes are unknown, so bind() needs the "
                                        "arguments (numpy scalars or Buffers) to fix them")
            self.n = len(args)
            self.specs = infer_layout(lay, args)
        for k in range(self.n):
            if pycudadrv_arena_push(&self.arena, self.specs[k].size) == NULL:
                raise MemoryError("kernel argument arena")
        self.kernel_params = pycudadrv_arena_finish(&self.arena)
        # A kernel without parameters is bound from the start: there is nothing to give it.
        self._held = [] if self.n == 0 else None
        self._packed = ()
        self._exports = None
        if args:
            self._packing = True
            try:
                packed = tuple([self._as_packed(k, args[k]) for k in range(self.n)])
                self._pack_all(packed, &self.arena)
                self._bind(args, packed)
            finally:
                self._packing = False
        return 0

    cdef int _begin_packing(self, str what) except -1:
        """A rebind starts (p(*args), set_arg): refused while one is packing already (Python code of an
        argument, its __cuda_array_interface__ or __dlpack__, or another thread while that code runs:
        the two would pack into one scratch arena and bind bytes that are not the arguments held)."""
        if self._packing:
            raise StateError(f"kernel '{self.fn.name}': {what} of its PreparedLaunch while it is packing other "
                             "arguments (from an argument's __cuda_array_interface__/__dlpack__, or another "
                             "thread); rebind after that call returns")
        self._packing = True
        return 0

    def __dealloc__(self):
        free(self._watch_flags)
        pycudadrv_arena_release(&self.arena)
        pycudadrv_arena_release(&self.scratch)
        if self.specs != NULL:
            free(self.specs)

    cdef int _pack_all(self, tuple args, pycudadrv_arena* arena) except -1:
        """Marshal every argument (for the bound stream) into `arena`."""
        cdef ParamLayout lay = self.fn.layout
        cdef int k
        for k in range(self.n):
            pack_arg(args[k], lay, k, &self.specs[k], pycudadrv_arena_at(arena, <uint32_t>k), self._stream)
        return 0

    cdef object _as_packed(self, Py_ssize_t k, object a):
        """Argument `a` of parameter `k` as it is packed: a DLPack-only array for a pointer
        parameter becomes a Buffer over its export (asbuffer), asked for once, so the bound
        bytes and the watched Buffer are that one export, kept alive while bound (a producer
        may free an export's memory in its deleter)."""
        cdef ParamSpec* p = &self.specs[k]
        if p.size != 8 or p.kind == FLOAT or p.kind == BYTES or not is_dlpack_only(a):
            return a
        try:
            return asbuffer(a, device=self.fn.device)
        except ArgumentTypeError as e:
            raise ArgumentTypeError(f"kernel '{self.fn.name}', parameter #{k}: {e}") from None

    cdef int _hold_exports(self, Stream s) except -1:
        # A capture of the launch: the graph replays the exports' memory, so it keeps them.
        if s._capture is not None:
            s._capture.hold_all(self._exports)
        return 0

    cdef int _bind(self, tuple args, tuple packed) except -1:
        """Keep `args` (marshalled as `packed`) as the bound arguments: each Buffer among them
        is watched, and so is another library's array, through a Buffer over it (its producer
        was ordered before the bound stream when it was marshalled; a launch on another stream
        orders it there too)."""
        cdef list watch = [], ks = [], exports = []
        cdef Buffer fb
        cdef int k
        cdef object a
        for k in range(self.n):
            a = packed[k]
            if isinstance(a, Buffer):
                watch.append(a)
                if a is not args[k]:
                    exports.append(a)
            elif is_foreign_memory(a):
                try:
                    fb = <Buffer>asbuffer(a, device=self.fn.device)
                except ArgumentTypeError as e:
                    raise ArgumentTypeError(f"kernel '{self.fn.name}', parameter #{k}: {e}") from None
                fb._alloc.mark_ordered(self._stream)     # marshalling just ordered it there
                watch.append(fb)
            else:
                continue
            ks.append(k)
        cdef bint** flags = <bint**>malloc(max(2 * len(watch), 1) * sizeof(bint*))
        if flags == NULL:
            raise MemoryError()
        for k in range(len(watch)):
            flags[2 * k] = &(<Buffer>watch[k])._closed
            flags[2 * k + 1] = &(<Buffer>watch[k])._alloc.attention
        for a in watch:
            (<Buffer>a)._alloc.note_use(self._stream)
        self._held = list(args)
        self._packed = packed
        self._exports = tuple(exports) if exports else None
        self._watch = watch
        self._watch_k = ks
        free(self._watch_flags)
        self._watch_flags = flags
        self._n_flags = 2 * len(watch)
        return 0

    cdef int _check_bound(self, Stream s) except -1:
        """Raise ClosedError naming the parameter whose Buffer was closed; order foreign
        memory bound as it is after its producer on `s` (once per stream)."""
        cdef Buffer b
        cdef Py_ssize_t j
        for j in range(len(self._watch)):
            b = <Buffer>self._watch[j]
            if b._closed or b._alloc.attention:
                try:
                    b.ensure_open()
                except ClosedError as e:
                    raise ClosedError(f"kernel '{self.fn.name}', parameter #{self._watch_k[j]}: the bound {e}; bind "
                                      "a live buffer (p.set_arg / p(*args)) before launching again") from None
                b._alloc.order_on(s)
        return 0

    cdef int _launch(self, bint activate=True) except -1:
        # activate=False: the caller has made the function's context current (a launch sequence, once per call)
        cdef Function fn = self.fn
        cdef LaunchConfig c = self.config
        if not _prepared_ready(self):
            _prepared_checks(self)
        if activate:
            launch_now(driver(), fn, c.grid, c.block, c.shared_mem_bytes, self._stream, self.kernel_params, c,
                       self._held)
        else:
            issue_launch(fn, c.grid, c.block, c.shared_mem_bytes, self._stream, self.kernel_params, c, self._held,
                         False)
        if self._exports is not None:
            self._hold_exports(self._stream)
        return 0

    cdef uintptr_t _launch_updatable(self) except? 1:
        """Launch (during a capture) as a device-updatable kernel node; returns
        its device node handle for cudaGraphKernelNodeSetGridDim & co."""
        cdef Function fn = self.fn
        cdef LaunchConfig c = self.config
        _prepared_checks(self)
        fn.device.activate()
        node = issue_launch(fn, c.grid, c.block, c.shared_mem_bytes, self._stream, self.kernel_params, c,
                            self._held, True)
        if self._exports is not None:
            self._hold_exports(self._stream)
        return node

    def _launch_device_updatable(self):
        """Capture this launch as a device-updatable kernel node; returns the
        device node handle (an int) that kernels of the same graph pass to
        ``cudaGraphKernelNodeSetGridDim`` / ``cudaGraphKernelNodeSetEnabled``.

        Raises StateError outside a capture of the stream."""
        return self._launch_updatable()

    cdef int _ensure_scratch(self) except -1:
        cdef int k
        if self._has_scratch:
            return 0
        for k in range(self.n):
            if pycudadrv_arena_push(&self.scratch, self.specs[k].size) == NULL:
                raise MemoryError("kernel argument arena")
        self._has_scratch = True
        return 0

    def __call__(self, *args):
        """Marshal ``args`` (all of them) and launch; with no arguments, launch
        again with those bound last. A bad argument raises (as
        :meth:`Function.launch`) and leaves the previous binding unchanged."""
        cdef Py_ssize_t k, n = len(args)
        cdef Function fn = self.fn
        cdef ParamLayout lay
        if fn is None:
            raise ArgumentTypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        if n:
            if n != self.n:
                raise ArgumentTypeError(f"kernel '{fn.name}' takes {self.n} arguments, {n} given")
            self._ensure_scratch()
            self._begin_packing("a call with arguments")
            try:
                packed = tuple([self._as_packed(k, args[k]) for k in range(n)])
                self._pack_all(packed, &self.scratch)   # a failure leaves the live bytes as they were
                self._bind(args, packed)
                pycudadrv_arena_copy_slots(&self.arena, &self.scratch)
            finally:
                self._packing = False
        self._launch()

    @cython.binding(False)      # a method descriptor (METH_NOARGS): the cheapest call CPython has
    def launch(self):
        """Launch with the arguments bound now (``cuLaunchKernel``)."""
        self._launch()

    def launch_on(self, stream):
        """Launch once, with the arguments bound now, on ``stream`` instead of
        the bound one (``cuLaunchKernel``), for schedulers that pick the stream
        per launch (:class:`pycudadrv.Queue`, :mod:`pycudadrv.aio`). ``stream``
        is noted as a user of every bound Buffer, so their frees wait for it.

        Raises ArgumentValueError for a stream of another device, and as
        :meth:`launch`."""
        cdef Function fn = self.fn
        cdef Stream s
        cdef object o
        if fn is None:
            raise ArgumentTypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        if stream is None:
            raise ArgumentTypeError(f"kernel '{fn.name}': launch_on needs a Stream (launch() uses the bound one)")
        s = resolve_stream(stream, fn.device)
        s.ensure_open()
        if s.device is not None and s.device.ordinal != fn.device.ordinal:
            raise ArgumentValueError(f"kernel '{fn.name}' lives on device {fn.device.ordinal}; launch_on was given "
                                     f"a stream of device {s.device.ordinal}")
        if self._held is None:
            raise ArgumentTypeError(f"kernel '{fn.name}': no arguments bound yet; call p(*args) first")
        if fn._module_life.ended:
            fn.ensure_loaded()
        self._check_bound(s)
        for o in self._watch:
            (<Buffer>o)._alloc.note_use(s)
        fn.device.activate()
        issue_launch(fn, self.config.grid, self.config.block, self.config.shared_mem_bytes, s, self.kernel_params,
                     self.config, self._held, False)
        if self._exports is not None:
            self._hold_exports(s)

    def launch_timed_ns(self):
        """Drain every stream of the device, launch alone between two events,
        return the GPU time in nanoseconds (int)."""
        if self.fn is None:
            raise ArgumentTypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        return _timed(self._stream, self.launch)

    launch_timed = launch_timed_ns

    def set_arg(self, index, value):
        """Replace argument ``index`` (re-marshals that one only); a bad value
        raises and leaves the previous one in place.

        Raises ArgumentIndexError for an index outside ``[0, num_params)`` and
        ArgumentTypeError/ArgumentValueError as :meth:`Function.launch`."""
        cdef unsigned char small[256]
        cdef unsigned char* tmp = small
        cdef size_t size
        if self.fn is None:
            raise ArgumentTypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        if type(index) is not int:
            if isinstance(index, (bool, np.bool_)) or not hasattr(type(index), "__index__"):
                raise ArgumentTypeError(f"kernel '{self.fn.name}': set_arg index must be an int, got "
                                        f"{type(index).__name__}")
            index = index.__index__()
        if index < 0 or index >= self.n:
            raise ArgumentIndexError(f"kernel '{self.fn.name}' has {self.n} parameters; index {index} is out "
                                     "of range")
        if self._held is None:
            raise ArgumentTypeError(f"kernel '{self.fn.name}': bind all arguments first (p(*args)), then set_arg")
        size = (self.specs[index].size + 15) // 16 * 16
        self._begin_packing("set_arg")
        try:
            if size > sizeof(small):
                tmp = <unsigned char*>malloc(size)
                if tmp == NULL:
                    raise MemoryError()
            memset(tmp, 0, size)
            pv = self._as_packed(index, value)
            pack_arg(pv, self.fn.layout, index, &self.specs[index], tmp, self._stream)
            held = list(self._held)
            held[index] = value
            packed = list(self._packed)
            packed[index] = pv
            self._bind(tuple(held), tuple(packed))        # raises before the live bytes change
            memcpy(pycudadrv_arena_at(&self.arena, <uint32_t>index), tmp, size)
        finally:
            self._packing = False
            if tmp != small:
                free(tmp)

    @property
    def function(self):
        """The :class:`Function` launched."""
        return self.fn

    @property
    def stream(self):
        """The Stream the launches go to."""
        return self._stream

    @property
    def config(self):
        """The :class:`LaunchConfig` (grid, block, shared memory, attributes)."""
        return self.config

    @property
    def args(self):
        """The bound arguments (tuple), or None."""
        return None if self._held is None else tuple(self._held)

    def param_bytes(self):
        """The marshalled bytes of each bound argument, as a list of ``bytes``
        (the exact bits the kernel will receive)."""
        cdef int k
        return [(<char*>pycudadrv_arena_at(&self.arena, k))[:self.specs[k].size] for k in range(self.n)]

    @property
    def spilled(self):
        """True if the arguments did not fit the arena's inline storage (heap spill)."""
        return bool(pycudadrv_arena_is_spilled(&self.arena))

    def __repr__(self):
        c = self.config
        if self.fn is None or c is None:
            return "<PreparedLaunch (not initialised)>"
        return (f"<PreparedLaunch '{self.fn.name}' grid={(c.grid[0], c.grid[1], c.grid[2])} "
                f"block={(c.block[0], c.block[1], c.block[2])} shared_mem_bytes={c.shared_mem_bytes}>")
