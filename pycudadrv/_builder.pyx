# cython: language_level=3
"""The launch builder (cuda-async's kernel-launch builder, in pycudadrv's idiom):
``fn.builder(grid, block, ...)`` gives a LaunchBuilder whose ``push_arg`` /
``push_tensor`` marshal each argument into its 16-byte-slot arena as it is
pushed (pycudadrv._marshal's rules), launched by ``launch()``, made a
PreparedLaunch by ``bind()``, awaited through pycudadrv.aio."""
cimport cython
from libc.stdint cimport uint32_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset

from pycudadrv._cuda cimport *
from pycudadrv._stream cimport Stream, resolve_stream
from pycudadrv._memory cimport Buffer
from pycudadrv._host cimport keep_until_done
from pycudadrv._interop cimport read_cai, cai_extent, cai_buffer
from pycudadrv._marshal cimport (ParamLayout, ParamSpec, pack_arg, infer_layout, describe_value, pycudadrv_arena,
                                 pycudadrv_arena_init, pycudadrv_arena_release, pycudadrv_arena_layout,
                                 pycudadrv_arena_push, pycudadrv_arena_at, pycudadrv_arena_finish,
                                 pycudadrv_arena_is_spilled, ANY, INT, UINT, INTEGER, FLOAT, BYTES)
from pycudadrv._launch cimport Function, LaunchConfig, issue_launch
from pycudadrv._interop cimport is_foreign_memory

import numpy as np
from pycudadrv import _signature, aio
from pycudadrv._interop import asbuffer
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, StateError

__all__ = ["LaunchBuilder"]

# Making a LaunchBuilder takes this token (Function.builder passes it).
cdef object _TOKEN = object()


cdef inline bint _pointer_slot(ParamSpec* p) noexcept:
    return p.size == 8 and p.kind != FLOAT and p.kind != BYTES


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class LaunchBuilder:
    """A launch of one kernel whose arguments are pushed one at a time
    (``fn.builder(grid, block, ...)``, the cuda-async launch builder).

    ``push_arg(v)`` takes one parameter, ``push_tensor(a)`` ``1 + 2 * rank``
    of them (pointer, shape, strides in elements); both return the builder,
    so calls chain. Each value is checked against the kernel's declared
    parameter (kind, width, range, contiguity: the rules of
    :meth:`Function.launch`) and its bytes are written into the builder's
    argument arena (16-byte slots, inline for up to 64 parameters) when it is
    pushed; another library's array is ordered after its producer on the
    builder's stream then, as a generic launch orders it when it marshals.
    :meth:`launch` launches from that arena (any number of times),
    :meth:`bind` gives a :class:`PreparedLaunch` of the pushed arguments,
    :meth:`submit` and ``await builder`` launch through
    :func:`pycudadrv.aio.submit`.

    A push that raises leaves the builder as it was.
    """

    def __cinit__(self, *args, **kwargs):
        pycudadrv_arena_init(&self.arena)
        self.specs = NULL
        self.n = -1
        self.count = 0

    def __init__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("LaunchBuilder objects come from fn.builder(grid, block, ...) on a Function")

    def __dealloc__(self):
        pycudadrv_arena_release(&self.arena)
        free(self.specs)
        self.specs = NULL

    cdef int _check(self) except -1:
        if self.fn is None:
            raise ArgumentTypeError("LaunchBuilder is not initialised: make one with fn.builder(grid, block)")
        return 0

    cdef int _begin_push(self) except -1:
        """A push starts: refused while another push to this builder is packing its value (Python code
        of that value, its __cuda_array_interface__ or __dlpack__, pushing again: the two would write
        one parameter slot and count it twice)."""
        self._check()
        if self._pushing:
            raise StateError(f"kernel '{self.fn.name}': a push to its LaunchBuilder while another push to it is "
                             "packing its value (from that value's __cuda_array_interface__/__dlpack__); push "
                             "after that push returns")
        self._pushing = True
        return 0

    cdef ParamSpec* _spec(self, Py_ssize_t i, object v) except NULL:
        """The parameter `i` a value `v` goes to: the kernel's (copied at creation), or for a
        kernel of unknown layout one inferred from the value and pushed onto the arena."""
        cdef ParamSpec* one
        cdef ParamSpec* grown
        if self.n >= 0:
            if i >= self.n:
                raise ArgumentTypeError(f"kernel '{self.fn.name}' takes {self.n} arguments "
                                        f"({_signature.format_layout(self.fn.layout.params)}); pushing "
                                        f"{describe_value(v)} would make argument #{i}")
            return &self.specs[i]
        one = infer_layout(self.fn.layout, (v,))          # raises naming the value (a Python int has no width)
        grown = <ParamSpec*>realloc(self.specs, (i + 1) * sizeof(ParamSpec))
        if grown == NULL:
            free(one)
            raise MemoryError()
        self.specs = grown
        self.specs[i] = one[0]
        free(one)
        if pycudadrv_arena_push(&self.arena, self.specs[i].size) == NULL:
            raise MemoryError("kernel argument arena")
        return &self.specs[i]

    cdef int _push_one(self, object v) except -1:
        """Marshal `v` as argument #count (for the builder's stream) and keep it."""
        cdef Py_ssize_t i = self.count
        cdef ParamSpec* p = self._spec(i, v)
        if _pointer_slot(p) and is_foreign_memory(v) and read_cai(v) is None and not isinstance(v, np.ndarray):
            # A DLPack-only array: a Buffer over one export, as a prepared launch binds it (the export
            # lives as long as the builder, and a launch keeps it until the kernel has run); a host
            # numpy array goes to pack_arg, which says what to do with it
            try:
                v = asbuffer(v, device=self.fn.device)
            except ArgumentTypeError as e:
                raise ArgumentTypeError(f"kernel '{self.fn.name}', parameter #{i}: {e}") from None
            self._exports.append(v)
        cdef unsigned char* dst = pycudadrv_arena_at(&self.arena, <uint32_t>i)
        memset(dst, 0, max((p.size + 15) // 16, 1) * 16)     # a re-push after a failed one starts clean
        pack_arg(v, self.fn.layout, i, p, dst, self._stream)
        self._values.append(v)
        self.count += 1
        return 0

    cdef int _rollback(self, Py_ssize_t count, Py_ssize_t n_exports, unsigned int n_params,
                       unsigned int n_slots) except -1:
        self.count = count
        del self._values[count:]
        del self._exports[n_exports:]
        if self.n < 0:
            self.arena.n_params = n_params
            self.arena.n_slots = n_slots
        return 0

    def push_arg(self, value):
        """Push one argument (any value :meth:`Function.launch` takes for one
        parameter: a Buffer, None, a numpy or Python scalar, bytes, another
        library's contiguous array); returns the builder.

        Raises ArgumentTypeError/ArgumentValueError as :meth:`Function.launch`
        (naming the kernel, the parameter index, its size and the value), and
        ArgumentTypeError when the kernel has no parameter left for it."""
        self._begin_push()
        cdef Py_ssize_t count = self.count, n_exports = len(self._exports)
        cdef uint32_t n_params = self.arena.n_params, n_slots = self.arena.n_slots
        try:
            self._push_one(value)
        except BaseException:
            self._rollback(count, n_exports, n_params, n_slots)
            raise
        finally:
            self._pushing = False
        return self

    def push_tensor(self, array):
        """Push a device array as ``1 + 2 * rank`` arguments: its data pointer,
        its shape (``rank`` values), its strides in elements (``rank``
        values), for a kernel declared e.g.
        ``(float* x, long long n0, long long n1, long long s0, long long s1)``;
        returns the builder.

        ``array`` is a Buffer or view (C-contiguous; its ``shape``, or its
        length in elements, bytes when it has no dtype), an object with
        ``__cuda_array_interface__`` (C-contiguous or strided, strides a
        multiple of the item size and not negative), or a DLPack-only array
        (C-contiguous). The shape and stride values take the width and
        signedness the kernel declares for their parameters (8-byte integers
        where the layout is unknown); they must be integer parameters. The
        pointer is ordered after the array's producer as :meth:`push_arg`
        orders it.

        Raises ArgumentTypeError for anything but a device array, a
        non-integer parameter for a shape or stride, a negative stride, or
        too few parameters left; ArgumentValueError for a stride that is not
        a whole number of elements; for each value, what
        :meth:`Function.launch` raises (a shape beyond its parameter's range:
        ArgumentTypeError). Each names the kernel and the parameter."""
        self._begin_push()
        try:
            return self._push_tensor(array)
        finally:
            self._pushing = False

    cdef object _push_tensor(self, object array):
        cdef Py_ssize_t i = self.count
        name = self.fn.name
        ptr, shape, strides = self._geometry(array, i)
        cdef Py_ssize_t k, rank = len(shape)
        if self.n >= 0 and i + 1 + 2 * rank > self.n:
            raise ArgumentTypeError(f"kernel '{name}' takes {self.n} arguments "
                                    f"({_signature.format_layout(self.fn.layout.params)}); a rank-{rank} tensor "
                                    f"at #{i} needs {1 + 2 * rank} (pointer, shape, strides), {self.n - i} are left")
        cdef Py_ssize_t count = self.count, n_exports = len(self._exports)
        cdef uint32_t n_params = self.arena.n_params, n_slots = self.arena.n_slots
        cdef ParamSpec* p
        if isinstance(ptr, Buffer) and ptr is not array and read_cai(array) is None:
            self._exports.append(ptr)         # a DLPack export (see _push_one)
        try:
            self._push_one(ptr)
            for k in range(2 * rank):
                v = shape[k] if k < rank else strides[k - rank]
                if self.n < 0:
                    v = np.int64(v)
                else:
                    p = &self.specs[self.count]
                    if p.kind != INT and p.kind != UINT and p.kind != INTEGER and p.kind != ANY:
                        raise ArgumentTypeError(
                            f"kernel '{name}', parameter #{self.count}: the tensor pushed at #{i} gives its "
                            f"{'shape' if k < rank else 'stride'}[{k % rank}] here, which needs an integer "
                            f"parameter; the kernel declares a {p.size}-byte "
                            f"{_signature.format_layout([self.fn.layout.params[self.count]])}")
                self._push_one(v)
        except BaseException:
            self._rollback(count, n_exports, n_params, n_slots)
            raise
        return self

    cdef tuple _geometry(self, object a, Py_ssize_t i):
        """(pointer argument, shape, strides in elements) of a tensor for parameter #i."""
        cdef Buffer b
        name = self.fn.name
        if isinstance(a, Buffer):
            b = <Buffer>a
            b.ensure_open()
            shape = tuple(b._shape) if b._shape is not None else (b.size,)
            return a, shape, _c_strides(shape)
        try:
            cai = read_cai(a)
        except ArgumentTypeError as e:
            raise ArgumentTypeError(f"kernel '{name}', parameter #{i}: {e}") from e.__cause__
        if cai is None:
            if not hasattr(a, "__dlpack__") or isinstance(a, np.ndarray):
                raise ArgumentTypeError(
                    f"kernel '{name}', parameter #{i}: push_tensor takes a device array (a Buffer, an object with "
                    f"__cuda_array_interface__ or __dlpack__), got {describe_value(a)}"
                    + ("; copy a host array to the device with Buffer.from_numpy(array)"
                       if isinstance(a, np.ndarray) else ""))
            try:
                b = <Buffer>asbuffer(a, device=self.fn.device)     # DLPack: C-contiguous only
            except ArgumentTypeError as e:
                raise ArgumentTypeError(f"kernel '{name}', parameter #{i}: {e}") from None
            shape = tuple(b._shape)
            return b, shape, _c_strides(shape)
        if not isinstance(cai, dict):
            raise ArgumentTypeError(f"kernel '{name}', parameter #{i}: push_tensor: its __cuda_array_interface__ "
                                    f"must be a dict, got {type(cai).__name__}")
        try:
            contiguous, shape, strides, dt = cai_extent(cai)[3:]
        except ArgumentValueError as e:
            raise ArgumentValueError(f"kernel '{name}', parameter #{i}: {e}") from None
        if contiguous:
            return a, shape, _c_strides(shape)      # packed as a generic launch packs it
        itemsize = dt.itemsize
        bad = [st for st in strides if st % itemsize]
        if bad:
            raise ArgumentValueError(f"kernel '{name}', parameter #{i}: strides {strides} (bytes) are not whole "
                                     f"elements of {itemsize} bytes ({dt})")
        try:
            b = cai_buffer(a, cai, self.fn.device, True, "push_tensor")
        except (ArgumentTypeError, ArgumentValueError) as e:
            raise type(e)(f"kernel '{name}', parameter #{i}: {e}") from e.__cause__
        return b, shape, tuple(st // itemsize for st in strides)

    cdef int _launch_checks(self, Stream s) except -1:
        cdef Function fn = self.fn
        cdef Py_ssize_t k
        cdef Buffer b
        self._check()
        if self.n >= 0 and self.count != self.n:
            raise ArgumentTypeError(f"kernel '{fn.name}' takes {self.n} arguments "
                                    f"({_signature.format_layout(fn.layout.params)}), {self.count} pushed")
        if self.n < 0 and self.count:
            free(infer_layout(fn.layout, tuple(self._values)))      # the parameter-space limit, over all of them
        if fn._module_life.ended:
            fn.ensure_loaded()
        if s._closed:
            s.ensure_open()
        for k in range(self.count):
            v = self._values[k]
            if type(v) is Buffer:
                b = <Buffer>v
                if b._closed or b._alloc.attention:      # closed since the push (raises naming it), or ordering
                    pack_arg(b, fn.layout, k, &self.specs[k], pycudadrv_arena_at(&self.arena, <uint32_t>k), s)
        return 0

    def launch(self):
        """Launch with the pushed arguments on the builder's stream
        (``cuLaunchKernel``; ``cuLaunchKernelEx`` for launch attributes), from
        the builder's arena; may be called again.

        Raises ArgumentTypeError when fewer arguments were pushed than the
        kernel takes (naming the kernel and both counts), ClosedError when a
        pushed Buffer (or the module) was closed since, CudaError when the
        driver refuses (naming kernel, grid, block, shared memory and the
        arguments)."""
        cdef Stream s = self._stream
        cdef Function fn = self.fn
        cdef LaunchConfig c = self.config
        cdef Py_ssize_t k
        self._launch_checks(s)
        for k in range(self.count):
            v = self._values[k]
            if type(v) is Buffer:
                (<Buffer>v)._alloc.note_use(s)           # its free waits for this launch
        fn.device.activate()
        issue_launch(fn, c.grid, c.block, c.shared_mem_bytes, s, pycudadrv_arena_finish(&self.arena), c,
                     self._values, False)
        if self._exports:
            # DLPack exports live until the kernel has run (the graph's life, in a capture)
            if s._capture is not None:
                s._capture.hold_all(tuple(self._exports))
            else:
                keep_until_done(s, tuple(self._exports))

    def bind(self):
        """A :class:`PreparedLaunch` of the pushed arguments, with the
        builder's configuration and stream (``fn.bind(grid, block, *args,
        ...)``): a tensor's pointer is bound as the pushed Buffer (a strided
        array: a Buffer over the bytes it spans). Raises as :meth:`launch`."""
        self._launch_checks(self._stream)
        cdef LaunchConfig c = self.config
        return self.fn.bind((c.grid[0], c.grid[1], c.grid[2]), (c.block[0], c.block[1], c.block[2]),
                            *self._values, shared_mem_bytes=c.shared_mem_bytes,
                            stream=self._stream, cooperative=c.cooperative,
                            cluster=(c.cluster[0], c.cluster[1], c.cluster[2]),
                            programmatic_dependent=c.programmatic)

    def submit(self, *, stream=None):
        """Launch now through :func:`pycudadrv.aio.submit` (of :meth:`bind`)
        and return its :class:`pycudadrv.aio.GpuFuture`, which keeps the
        arguments alive until the GPU is done. The stream: ``stream`` if
        given, else the one given to ``fn.builder(stream=...)``, else the
        device policy's next stream (as :func:`pycudadrv.aio.launch`).
        ``await builder`` is ``await builder.submit()``. Raises as
        :meth:`launch` and :func:`pycudadrv.aio.submit`."""
        prepared = self.bind()
        if stream is None and not self._stream_given:
            stream = aio.policy(self.fn.device).next_stream()
        return aio.submit(prepared, stream=stream)

    def __await__(self):
        return self.submit().__await__()

    @property
    def function(self):
        """The :class:`Function` launched."""
        return self.fn

    @property
    def stream(self):
        """The Stream :meth:`launch` and :meth:`bind` use (the given one, or the device's default stream)."""
        return self._stream

    @property
    def config(self):
        """The :class:`LaunchConfig` (grid, block, shared memory, attributes), validated at creation."""
        return self.config

    @property
    def args(self):
        """The pushed arguments as a tuple, one per parameter (a tensor's
        pointer as the Buffer or array pushed, its shape and strides as ints)."""
        return tuple(self._values)

    @property
    def num_pushed(self):
        """How many parameters have arguments (a tensor counts ``1 + 2 * rank``)."""
        return self.count

    def param_bytes(self):
        """The marshalled bytes of each pushed argument, as a list of ``bytes``
        (the exact bits the kernel receives)."""
        cdef Py_ssize_t k
        return [(<char*>pycudadrv_arena_at(&self.arena, <uint32_t>k))[:self.specs[k].size]
                for k in range(self.count)]

    @property
    def spilled(self):
        """True if the arguments did not fit the arena's inline storage (heap spill)."""
        return bool(pycudadrv_arena_is_spilled(&self.arena))

    def __repr__(self):
        if self.fn is None:
            return "<LaunchBuilder (not initialised)>"
        c = self.config
        n = "?" if self.n < 0 else str(self.n)
        return (f"<LaunchBuilder '{self.fn.name}' grid={(c.grid[0], c.grid[1], c.grid[2])} "
                f"block={(c.block[0], c.block[1], c.block[2])} shared_mem_bytes={c.shared_mem_bytes}, "
                f"{self.count}/{n} arguments pushed>")


cdef tuple _c_strides(tuple shape):
    """Row-major strides in elements of `shape`."""
    cdef list out = []
    acc = 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


cdef LaunchBuilder new_builder(Function fn, object grid, object block, object shared_mem_bytes, object stream,
                               object cooperative, object cluster, object programmatic_dependent):
    cdef LaunchBuilder lb = LaunchBuilder.__new__(LaunchBuilder, _TOKEN)
    cdef ParamLayout lay = fn.layout
    lb.config = LaunchConfig(fn, grid, block, shared_mem_bytes, cooperative=cooperative, cluster=cluster,
                             programmatic_dependent=programmatic_dependent)
    cdef Stream s = <Stream>fn.device.default_stream if stream is None else resolve_stream(stream, fn.device)
    s.ensure_open()
    lb.fn = fn
    lb._stream = s
    lb._stream_given = stream is not None
    lb._values = []
    lb._exports = []
    lb.n = lay.n
    if lay.n >= 0:
        lb.specs = <ParamSpec*>malloc(max(lay.n, 1) * sizeof(ParamSpec))
        if lb.specs == NULL:
            raise MemoryError()
        memcpy(lb.specs, lay.specs, lay.n * sizeof(ParamSpec))
        if lay.n and pycudadrv_arena_layout(&lb.arena, <const unsigned char*>&lb.specs[0].size, sizeof(ParamSpec),
                                            <uint32_t>lay.n) != 0:
            raise MemoryError("kernel argument arena")
    return lb


def _make_builder(fn, grid, block, shared_mem_bytes, stream, cooperative, cluster, programmatic_dependent):
    """Function.builder's body (internal)."""
    return new_builder(<Function>fn, grid, block, shared_mem_bytes, stream, cooperative, cluster,
                       programmatic_dependent)
