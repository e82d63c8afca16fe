# cython: language_level=3
"""cuDNN matmul through the backend (graph) API, driven from Cython.

pycudadrv/cudnn.py opens libcudnn.so.9 with ctypes and hands the addresses of
the entry points to :func:`bind`; nothing here links against cuDNN or reads a
cuDNN header. A :class:`MatmulPlan` is built once (tensor descriptors with
row-major strides, a matmul operation with its compute type, an operation
graph, the engine heuristics, an execution plan and its workspace) and executed
with one ``cudnnBackendExecute`` per call. The cuDNN calls and their errors (_status_name, _error,
_ok, _set, _create) are in _cudnn_build.pxi. See docs/cudnn.md.
"""
cimport cython
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, warn_dealloc_failure
from pycudadrv._device cimport Device, as_device
from pycudadrv._stream cimport (Stream, Capture, resolve_stream, captures_active, check_launch_outside_capture,
                                forbidding_capture, order_after, order_after_uses)
from pycudadrv._memory cimport Buffer

import sys
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CaptureError, ClosedError, CudnnError,
                               CudnnUnavailableError, Error, NotSupportedError)
from pycudadrv._interop import asbuffer

__all__ = ["MatmulPlan"]

cdef extern from "cuda.h":
    enum:
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL

#: Entry points bind() takes, in the order of pycudadrv_cudnn_api.
ENTRY_POINTS = ("cudnnGetVersion", "cudnnGetErrorString", "cudnnGetLastErrorString", "cudnnCreate",
                "cudnnSetStream", "cudnnBackendCreateDescriptor", "cudnnBackendDestroyDescriptor",
                "cudnnBackendSetAttribute", "cudnnBackendGetAttribute", "cudnnBackendFinalize",
                "cudnnBackendExecute")

#: cudnnBackendNumericalNote_t and cudnnBackendBehaviorNote_t names (cudnn_graph.h, cuDNN 9.28.1).
NUMERICAL_NOTES = {0: "TENSOR_CORE", 1: "DOWN_CONVERT_INPUTS", 2: "REDUCED_PRECISION_REDUCTION", 3: "FFT",
                   4: "NONDETERMINISTIC", 5: "WINOGRAD", 6: "WINOGRAD_TILE_4x4", 7: "WINOGRAD_TILE_6x6",
                   8: "WINOGRAD_TILE_13x13", 9: "STRICT_NAN_PROP"}
BEHAVIOR_NOTES = {0: "RUNTIME_COMPILATION", 1: "REQUIRES_FILTER_INT8x32_REORDER",
                  2: "REQUIRES_BIAS_INT8x32_REORDER", 3: "SUPPORTS_CUDA_GRAPH_NATIVE_API", 4: "CUBLASLT_DEPENDENCY"}

#: Byte alignment declared for every tensor (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT); operands must honour it.
ALIGNMENT = ALIGN_BYTES

cdef pycudadrv_cudnn_api _api
cdef bint _bound = False
cdef dict _handles = {}
cdef dict _DATA_TYPES = {"float32": CUDNN_DATA_FLOAT, "float16": CUDNN_DATA_HALF, "bfloat16": CUDNN_DATA_BFLOAT16}
cdef tuple _OPERANDS = ("a", "b", "out")
cdef dict _HEUR_MODES = {CUDNN_HEUR_MODE_INSTANT: "instant", CUDNN_HEUR_MODE_B: "B", CUDNN_HEUR_MODE_FALLBACK: "fallback"}
cdef object _is_finalizing = sys.is_finalizing


def bind(dict addresses):
    """Take cuDNN's entry points: ``{name: address}`` for every name of
    :data:`ENTRY_POINTS` (pycudadrv.cudnn opens the library). All or nothing.

    Raises CudnnUnavailableError naming the entry points that are missing."""
    global _api, _bound
    missing = [n for n in ENTRY_POINTS if not addresses.get(n)]
    if missing:
        raise CudnnUnavailableError("the cuDNN library lacks " + ", ".join(missing) + " (not a cuDNN 9 library?)")
    cdef pycudadrv_cudnn_api api
    api.GetVersion = <cudnn_version_fn><void*><uintptr_t>addresses["cudnnGetVersion"]
    api.GetErrorString = <cudnn_error_string_fn><void*><uintptr_t>addresses["cudnnGetErrorString"]
    api.GetLastErrorString = <cudnn_last_error_fn><void*><uintptr_t>addresses["cudnnGetLastErrorString"]
    api.Create = <cudnn_create_fn><void*><uintptr_t>addresses["cudnnCreate"]
    api.SetStream = <cudnn_set_stream_fn><void*><uintptr_t>addresses["cudnnSetStream"]
    api.CreateDescriptor = <cudnn_create_descriptor_fn><void*><uintptr_t>addresses["cudnnBackendCreateDescriptor"]
    api.DestroyDescriptor = <cudnn_descriptor_fn><void*><uintptr_t>addresses["cudnnBackendDestroyDescriptor"]
    api.SetAttribute = <cudnn_set_attribute_fn><void*><uintptr_t>addresses["cudnnBackendSetAttribute"]
    api.GetAttribute = <cudnn_get_attribute_fn><void*><uintptr_t>addresses["cudnnBackendGetAttribute"]
    api.Finalize = <cudnn_descriptor_fn><void*><uintptr_t>addresses["cudnnBackendFinalize"]
    api.Execute = <cudnn_execute_fn><void*><uintptr_t>addresses["cudnnBackendExecute"]
    _api = api
    _bound = True


cdef inline bint _overlaps(Buffer x, Buffer y) noexcept:
    return x._ptr < y._ptr + y._nbytes and y._ptr < x._ptr + x._nbytes


# --------------------------------------------------------------------------- handles

@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class _Handle:
    """The cuDNN handle of one device (``cudnnCreate``), kept for the process."""

    def __repr__(self):
        return f"<cudnn handle 0x{<uintptr_t>self.handle:x} of device {self.device.ordinal}>"


cdef _Handle _handle_for(Device dev):
    cdef _Handle h = _handles.get(dev.ordinal)
    if h is not None:
        return h
    h = _Handle.__new__(_Handle)
    dev.activate()            # cuDNN's runtime works in the context current on the thread
    _ok(_api.Create(&h.handle), "cudnnCreate", f"creating the cuDNN handle of device {dev.ordinal}")
    h.device = dev
    h.stream = NULL           # a new handle works on the NULL stream
    _handles[dev.ordinal] = h
    return h


# --------------------------------------------------------------------------- lifetime in graphs

@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class _PlanUse:
    """Held by a captured graph that executes a plan: the plan's execution
    plan and descriptors outlive the graph (a close() meanwhile waits)."""
    cdef MatmulPlan plan

    def __dealloc__(self):
        cdef MatmulPlan p = self.plan
        if p is None:
            return
        p._graph_uses -= 1
        if p._graph_uses <= 0 and p._closed and not p._destroyed:
            try:
                p._destroy(False)
            except Exception as e:
                warn_dealloc_failure("MatmulPlan", e)


# --------------------------------------------------------------------------- the plan

# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class MatmulPlan:
    """A cuDNN matmul ``out = a @ b``, planned once for fixed shapes, dtype,
    compute type and device; made by :func:`pycudadrv.cudnn.matmul_plan`.

    Calling it, ``plan(a, b, out, stream=None)``, checks the three operands
    (open, on the plan's device, dtype, shape, size in bytes, 16-byte aligned
    device pointers, ``out`` not overlapping ``a`` or ``b``) before cuDNN sees
    them, then makes one ``cudnnBackendExecute`` on ``stream`` (the device's
    default Stream when None); ``cudnnSetStream`` runs only when the stream
    changes. Operands are row-major, C-contiguous: ``a`` is ``a_shape``, ``b``
    is ``b_shape``, ``out`` is ``out_shape`` (a leading batch dimension when
    batched). Buffers (raw-byte ones are checked by size) or any object with
    ``__cuda_array_interface__`` or ``__dlpack__`` are accepted.

    Inside ``with stream.capture() as g`` the execution is recorded into the
    graph: the graph keeps the operands, the plan and (when the plan needs
    one) a workspace of its own (a graph memory node) alive.

    Raises
    ------
    ClosedError
        The plan, the stream or an operand was closed.
    ArgumentTypeError
        An operand of the wrong dtype, one that is not device memory or not
        C-contiguous.
    ArgumentValueError
        An operand of the wrong shape or size, on another device, misaligned,
        or ``out`` overlapping an input; a stream of another device.
    CudnnError
        cuDNN refused the execution (the ``cudnnStatus_t`` name and cuDNN's
        last error message).
    """

    def __cinit__(self):
        memset(self._owned, 0, sizeof(self._owned))
        memset(self._cand_plan, 0, sizeof(self._cand_plan))
        memset(self._cand_cfg, 0, sizeof(self._cand_cfg))
        memset(self._packs, 0, sizeof(self._packs))
        self._n_owned = 0
        self._n_cand = 0
        self._plan = NULL
        self._ws_ptr = NULL
        self._closed = False
        self._destroyed = False
        self._graph_uses = 0
        self._streams = []
        self._cand_info = []
        self.engines_considered = []
        self.engine = None

    def __init__(self, *args, **kwargs):
        raise ArgumentTypeError("make plans with pycudadrv.cudnn.matmul_plan()")

    @staticmethod
    def _create(device, str dtype, str compute_dtype, bint allow_tf32, bint tf32_override, tuple a_dims,
                tuple b_dims, tuple c_dims, tuple a_shape, tuple b_shape, tuple out_shape, tuple accepted,
                int candidates):
        """Build a plan (pycudadrv.cudnn.matmul_plan validates the arguments).
        ``*_dims`` are the 3-D cuDNN dimensions (batch, rows, columns);
        ``tf32_override``: NVIDIA_TF32_OVERRIDE=0 is in effect (cuBLASLt
        engines then compute float32 in float32); ``device`` None builds the
        operation graph and asks the heuristics only (no handle, no execution
        plan: a diagnostic that needs no GPU). A float32 plan without TF32
        keeps at least STRICT_CANDIDATES engines for the precision check."""
        if not _bound:
            raise CudnnUnavailableError("cuDNN is not loaded (plans come from pycudadrv.cudnn.matmul_plan)")
        cdef MatmulPlan p = MatmulPlan.__new__(MatmulPlan)
        p.dtype = dtype
        p.compute_dtype = compute_dtype
        p.allow_tf32 = allow_tf32
        p.tf32_override = tf32_override
        if dtype == "float32" and not allow_tf32:
            candidates = max(candidates, STRICT_CANDIDATES)
        p.a_shape, p.b_shape, p.out_shape = a_shape, b_shape, out_shape
        p.batch, p.m, p.n, p.k = c_dims[0], a_dims[1], b_dims[2], a_dims[2]
        p._accepted = accepted
        itemsize = 4 if dtype == "float32" else 2
        p._nbytes[0] = a_dims[0] * a_dims[1] * a_dims[2] * itemsize
        p._nbytes[1] = b_dims[0] * b_dims[1] * b_dims[2] * itemsize
        p._nbytes[2] = c_dims[0] * c_dims[1] * c_dims[2] * itemsize
        p._label = (f"cudnn matmul plan {a_shape} @ {b_shape} -> {out_shape} ({dtype}, compute {compute_dtype}"
                    + (", TF32 allowed)" if allow_tf32 and dtype == "float32" else ")"))
        if device is not None and forbidding_capture(None) is not None:
            raise CaptureError(f"cannot build a cuDNN plan during {forbidding_capture(None)!r}: building allocates "
                               "the workspace (and may create the cuDNN handle); build it before the capture")
        try:
            if device is not None:
                p.device = as_device(device)
                p._default_stream = <Stream>p.device.default_stream
                p._h = _handle_for(p.device)
            _build(p, a_dims, b_dims, c_dims, max(1, min(candidates, CANDIDATES_MAX)))
        except BaseException:
            p._closed = True
            p._destroy(False)
            raise
        return p

    # -- workspace, candidates, variant packs ---------------------------------------------------

    cdef int _flush_packs(self) except -1:
        cdef int i
        for i in range(PACKS_KEPT - 1, -1, -1):
            if self._packs[i].desc != NULL:
                _api.DestroyDescriptor(self._packs[i].desc)
                self._packs[i].desc = NULL
        self._last_pack = 0
        self._next_pack = 0
        return 0

    cdef int _use(self, int i, bint exact) except -1:
        """Execute with candidate ``i`` from now on; the workspace grows to its
        size (``exact``: becomes exactly its size)."""
        cdef int64_t need = self._cand_ws[i]
        cdef Buffer old = self._workspace
        cdef int64_t have = <int64_t>old._nbytes if old is not None else 0
        self._plan = self._cand_plan[i]
        self.engine = self._cand_info[i]
        if have == need or (not exact and have > need):
            return 0
        self._flush_packs()                    # they point at the old workspace
        self._workspace = None
        self._ws_ptr = NULL
        self.workspace_nbytes = 0
        if old is not None:
            old.close()
        if need > 0:
            self._workspace = Buffer.empty(need, device=self.device, async_alloc=False)
            self._ws_ptr = <void*>self._workspace._ptr
        self.workspace_nbytes = need
        return 0

    cdef cudnnBackendDescriptor_t _make_pack(self, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                                             void* ws) except NULL:
        cdef int64_t uids[3]
        cdef void* ptrs[3]
        uids[0], uids[1], uids[2] = 1, 2, 3
        ptrs[0], ptrs[1], ptrs[2] = <void*>a, <void*>b, <void*>c
        what = f"variant pack of {self._label}"
        cdef cudnnBackendDescriptor_t d = _create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what)
        try:
            _set(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, what)
            _set(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, what)
            _set(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, what)
            _ok(_api.Finalize(d), "cudnnBackendFinalize", what)
        except BaseException:
            _api.DestroyDescriptor(d)
            raise
        return d

    cdef cudnnBackendDescriptor_t _pack(self, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c) except NULL:
        """The finalized variant pack of this pointer triple: cuDNN refuses to
        change a finalized pack, so one is kept per triple (the last few)."""
        cdef pycudadrv_cudnn_pack* p = &self._packs[self._last_pack]
        cdef int i
        if p.desc != NULL and p.ptrs[0] == <void*>a and p.ptrs[1] == <void*>b and p.ptrs[2] == <void*>c:
            return p.desc
        for i in range(PACKS_KEPT):
            p = &self._packs[i]
            if p.desc != NULL and p.ptrs[0] == <void*>a and p.ptrs[1] == <void*>b and p.ptrs[2] == <void*>c:
                self._last_pack = i
                return p.desc
        cdef cudnnBackendDescriptor_t d = self._make_pack(a, b, c, self._ws_ptr)
        i = self._next_pack
        self._next_pack = (i + 1) % PACKS_KEPT
        p = &self._packs[i]
        if p.desc != NULL:
            _api.DestroyDescriptor(p.desc)
        p.desc = d
        p.ptrs[0], p.ptrs[1], p.ptrs[2] = <void*>a, <void*>b, <void*>c
        self._last_pack = i
        return d

    def _candidates(self):
        """The engines kept for autotuning (pycudadrv.cudnn), best ranked first."""
        return [dict(x) for x in self._cand_info]

    def _try_candidate(self, int i):
        """Execute with candidate ``i`` until the next call (autotuning)."""
        if i < 0 or i >= self._n_cand:
            raise ArgumentValueError(f"candidate {i} out of range [0, {self._n_cand})")
        self._use(i, False)

    def _keep_candidate(self, int i):
        """Keep candidate ``i``, destroy the others (reverse order), shrink the workspace."""
        self._keep_candidates([i])

    def _keep_candidates(self, list keep):
        """Keep the candidates ``keep`` (indices, in that order; at least one),
        destroy the others (reverse order), use the first, workspace exactly its size."""
        cdef int j, n = len(keep)
        cdef cudnnBackendDescriptor_t plans[CANDIDATES_MAX]
        cdef cudnnBackendDescriptor_t cfgs[CANDIDATES_MAX]
        cdef int64_t wss[CANDIDATES_MAX]
        if n < 1 or len(set(keep)) != n or any(not (0 <= i < self._n_cand) for i in keep):
            raise ArgumentValueError(f"candidates {keep!r}: distinct indices in [0, {self._n_cand}), at least one")
        for j in range(n):
            plans[j], cfgs[j], wss[j] = self._cand_plan[keep[j]], self._cand_cfg[keep[j]], self._cand_ws[keep[j]]
        infos = [self._cand_info[i] for i in keep]
        for j in range(self._n_cand - 1, -1, -1):
            if j not in keep:
                _api.DestroyDescriptor(self._cand_plan[j])
                _api.DestroyDescriptor(self._cand_cfg[j])
            self._cand_plan[j] = NULL
            self._cand_cfg[j] = NULL
        for j in range(n):
            self._cand_plan[j], self._cand_cfg[j], self._cand_ws[j] = plans[j], cfgs[j], wss[j]
        self._cand_info = infos
        self._n_cand = n
        self._use(0, True)

    def _annotate_candidate(self, int i, str key, value):
        """Record ``key: value`` in candidate ``i``'s engine dict (``plan.engine`` once it is used)."""
        if i < 0 or i >= self._n_cand:
            raise ArgumentValueError(f"candidate {i} out of range [0, {self._n_cand})")
        self._cand_info[i][key] = value

    # -- execution --------------------------------------------------------------------------------

    cdef int _closed_operand(self, Buffer buf, int which) except -1:
        try:
            buf.ensure_open()
        except ClosedError as e:
            raise ClosedError(f"{self._label}: {_OPERANDS[which]}: {e}") from None
        return 0

    cdef Buffer _wrap(self, object x, int which):
        """A foreign array (CAI or DLPack) as a Buffer, its device checked."""
        name = _OPERANDS[which]
        cdef Buffer buf
        cdef int ordinal = -1
        try:
            buf = asbuffer(x, device=self.device)
        except (ArgumentTypeError, ArgumentValueError) as e:
            raise type(e)(f"{self._label}: {name}: {e}") from e
        except Error:
            raise
        except Exception as e:        # the producer's own protocol refused (e.g. PyTorch's CAI for bfloat16)
            hint = " (pass a PyTorch bfloat16 tensor as t.view(torch.int16))" if "bfloat16" in str(e) else ""
            raise ArgumentTypeError(f"{self._label}: {name} ({type(x).__name__}) cannot be used as device memory: "
                                    f"{type(e).__name__}: {e}{hint}") from e
        if buf._ptr != 0 and driver().p_cuPointerGetAttribute(&ordinal, <CUpointer_attribute>
                                                              CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                              buf._ptr) == CUDA_SUCCESS:
            if ordinal != self.device.ordinal:
                raise ArgumentValueError(f"{self._label}: {name} ({type(x).__name__}) lives on device {ordinal}, "
                                         f"the plan runs on device {self.device.ordinal}")
        return buf

    cdef int _check_operand(self, Buffer buf, int which) except -1:
        name = _OPERANDS[which]
        expect = (self.a_shape, self.b_shape, self.out_shape)[which]
        if buf._closed or buf._alloc.freed:
            self._closed_operand(buf, which)
        if buf.device is None or buf.device.ordinal != self.device.ordinal:
            raise ArgumentValueError(f"{self._label}: {name} is on device "
                                     f"{buf.device.ordinal if buf.device is not None else '?'}, the plan runs on "
                                     f"device {self.device.ordinal}; copy it there first (Buffer.copy_to)")
        dt = buf._dtype
        if dt is not None and dt not in self._accepted:
            raise ArgumentTypeError(f"{self._label}: {name} has dtype {dt}, expected "
                                    + " or ".join(str(x) for x in self._accepted)
                                    + " (or a raw-byte Buffer)")
        if dt is not None and buf._shape is not None and tuple(buf._shape) != expect:
            raise ArgumentValueError(f"{self._label}: {name} has shape {tuple(buf._shape)}, expected {expect}")
        if buf._nbytes != self._nbytes[which]:
            raise ArgumentValueError(f"{self._label}: {name} has {buf._nbytes} bytes, expected "
                                     f"{self._nbytes[which]} (shape {expect} of {self.dtype})")
        if (<uintptr_t>buf._ptr) % ALIGN_BYTES:
            raise ArgumentValueError(f"{self._label}: {name}'s device pointer 0x{<uintptr_t>buf._ptr:x} is not "
                                     f"{ALIGNMENT}-byte aligned, as the plan's tensors are declared; use a Buffer of "
                                     f"its own (allocations are 256-byte aligned) or a view at a multiple of "
                                     f"{ALIGNMENT} bytes")
        return 0

    cdef Buffer _operand(self, object x, int which):
        cdef Buffer buf
        cdef Buffer seen = self._seen_a if which == 0 else (self._seen_b if which == 1 else self._seen_c)
        if type(x) is Buffer:
            buf = <Buffer>x
            if buf is seen:                    # validated before: shape, dtype, device and pointer are fixed
                if buf._closed or buf._alloc.freed:
                    self._closed_operand(buf, which)
                return buf
            self._check_operand(buf, which)
            if which == 0:
                self._seen_a = buf
            elif which == 1:
                self._seen_b = buf
            else:
                self._seen_c = buf
            return buf
        buf = x if isinstance(x, Buffer) else self._wrap(x, which)
        self._check_operand(buf, which)
        return buf

    cdef int _switch_stream(self, Stream s) except -1:
        """A new stream for eager executions: it waits for the last one's work
        (they share the workspace), and the workspace's free waits for it."""
        cdef Stream last = self._last_stream
        cdef Stream t
        if last is not None and not (last._handle == s._handle and not last._closed):
            if self.workspace_nbytes > 0 and last._capture is None:
                order_after_uses(s, last)
        for t in self._streams:
            if t._handle == s._handle and not t._closed:
                break
        else:
            self._streams.append(s)
        if self._workspace is not None:
            self._workspace._alloc.use_on(s)
        self._last_stream = s
        return 0

    cdef int _set_stream(self, Stream s) except -1:
        cdef _Handle h = self._h
        if h.stream != s._handle:
            _ok(_api.SetStream(h.handle, s._handle), "cudnnSetStream", f"{self._label} on {s!r}")
            h.stream = s._handle
        return 0

    cdef int _execute_captured(self, Buffer a, Buffer b, Buffer out, Stream s, Capture cap) except -1:
        """Record the execution into ``cap``'s graph: a variant pack of its own,
        over a workspace of its own (a graph memory node) unless the capture
        is a device-loop body; the graph holds the operands and the plan."""
        cdef cudnnBackendDescriptor_t pack
        cdef cudnnStatus_t st
        cdef void* ws = self._ws_ptr
        cdef Buffer gws = None
        cdef _PlanUse use
        if self.workspace_nbytes > 0 and not cap.body:
            gws = Buffer.empty(self.workspace_nbytes, device=self.device, stream=s)
            ws = <void*>gws._ptr
        pack = self._make_pack(a._ptr, b._ptr, out._ptr, ws)
        try:
            self._set_stream(s)
            st = _api.Execute(self._h.handle, self._plan, pack)
            if st != CUDNN_STATUS_SUCCESS:
                raise _error(st, "cudnnBackendExecute", f"capturing {self!r} on {s!r}")
        finally:
            _api.DestroyDescriptor(pack)
        use = _PlanUse.__new__(_PlanUse)
        use.plan = self
        self._graph_uses += 1
        cap.hold(a)
        cap.hold(b)
        cap.hold(out)
        cap.hold(use)
        if gws is None and self._workspace is not None:
            cap.hold(self._workspace)
        return 0

    cdef int _check_stream(self, Buffer a, Buffer b, Buffer out, Stream s) except -1:
        """The stream open and of the plan's device; out apart from a and b."""
        if s._closed:
            s.ensure_open()
        if s.device is not self.device and (s.device is None or s.device.ordinal != self.device.ordinal):
            raise ArgumentValueError(f"{self._label}: stream {s!r} belongs to device "
                                     f"{s.device.ordinal if s.device is not None else '?'}, the plan runs on "
                                     f"device {self.device.ordinal}")
        if _overlaps(out, a) or _overlaps(out, b):
            raise ArgumentValueError(f"{self._label}: out overlaps {'a' if _overlaps(out, a) else 'b'} "
                                     "(cuDNN would read what it already overwrote); give out its own memory")
        return 0

    cdef int _execute(self, Buffer a, Buffer b, Buffer out, Stream s) except -1:
        """Execute on ``s`` (the caller checked that the plan is open)."""
        cdef cudnnBackendDescriptor_t pack
        cdef cudnnStatus_t st
        cdef Capture cap
        self._check_stream(a, b, out, s)
        cap = s._capture
        if cap is None and captures_active():
            check_launch_outside_capture(s)
        self.device.activate()
        if cap is not None:
            return self._execute_captured(a, b, out, s, cap)
        if s is not self._last_stream:
            self._switch_stream(s)
        pack = self._pack(a._ptr, b._ptr, out._ptr)
        if self._h.stream != s._handle:
            self._set_stream(s)
        st = _api.Execute(self._h.handle, self._plan, pack)
        if st != CUDNN_STATUS_SUCCESS:
            raise _error(st, "cudnnBackendExecute", f"executing {self!r} on {s!r}")
        s.mark_use()
        a._alloc.use_on(s)
        b._alloc.use_on(s)
        out._alloc.use_on(s)
        return 0

    def __call__(self, a, b, out, stream=None):
        """``out = a @ b`` on ``stream`` (the device's default Stream when None):
        one ``cudnnBackendExecute`` after the checks listed in the class docs;
        asynchronous, like a kernel launch."""
        if self._closed:
            raise ClosedError(f"{self._label}: the plan is closed")
        cdef Buffer ba = self._operand(a, 0)
        cdef Buffer bb = self._operand(b, 1)
        cdef Buffer bc = self._operand(out, 2)
        cdef Stream s
        if stream is None:
            s = self._default_stream
        elif type(stream) is Stream:
            s = <Stream>stream
        else:
            s = resolve_stream(stream, self.device)
        self._execute(ba, bb, bc, s)

    def _raw_handles(self, a, b, out, stream=None):
        """``(cudnnHandle_t, execution plan, variant pack)`` as ints: what
        ``plan(a, b, out, stream=stream)`` hands to ``cudnnBackendExecute``,
        after the same checks, with ``cudnnSetStream(handle, stream)`` done and
        the use of the operands and the workspace on the stream recorded. For C
        code that calls ``cudnnBackendExecute`` itself (bench/matmul.py's cuDNN
        floor), on that stream only; valid until the plan is closed or executes
        on 4 other pointer triples (its variant packs are kept per triple).

        Raises as ``plan(...)``, and CaptureError while a capture is active."""
        if self._closed:
            raise ClosedError(f"{self._label}: the plan is closed")
        cdef Buffer ba = self._operand(a, 0)
        cdef Buffer bb = self._operand(b, 1)
        cdef Buffer bc = self._operand(out, 2)
        cdef Stream s = self._default_stream if stream is None else resolve_stream(stream, self.device)
        self._check_stream(ba, bb, bc, s)
        if s._capture is not None or captures_active():
            raise CaptureError(f"{self._label}: _raw_handles() is for eager executions; no capture may be active")
        self.device.activate()
        if s is not self._last_stream:
            self._switch_stream(s)
        cdef cudnnBackendDescriptor_t pack = self._pack(ba._ptr, bb._ptr, bc._ptr)
        self._set_stream(s)
        ba._alloc.use_on(s)
        bb._alloc.use_on(s)
        bc._alloc.use_on(s)
        return (<uintptr_t>self._h.handle, <uintptr_t>self._plan, <uintptr_t>pack)

    # -- lifetime ---------------------------------------------------------------------------------

    cdef int _destroy(self, bint raise_errors) except -1:
        """Wait for the executions queued so far, then destroy every descriptor
        in the reverse order of creation and free the workspace."""
        cdef Stream s
        cdef int j
        cdef cudnnStatus_t st, first = CUDNN_STATUS_SUCCESS
        if self._destroyed:
            return 0
        self._destroyed = True
        errors = []
        if self._streams and not _is_finalizing():
            # Engines compiled at run time unload their code with the plan: let queued work finish first.
            for s in self._streams:
                try:
                    if not s._closed and forbidding_capture(s) is None:
                        s.device.activate()
                        check(driver().p_cuStreamSynchronize(s._handle), "cuStreamSynchronize")
                    elif s._closed and s._final != NULL:
                        check(driver().p_cuEventSynchronize(s._final), "cuEventSynchronize")
                except Exception as e:
                    errors.append(e)
        self._streams = []
        self._last_stream = None
        if _bound:
            for j in range(PACKS_KEPT - 1, -1, -1):
                if self._packs[j].desc != NULL:
                    st = _api.DestroyDescriptor(self._packs[j].desc)
                    if first == CUDNN_STATUS_SUCCESS:
                        first = st
                    self._packs[j].desc = NULL
            for j in range(self._n_cand - 1, -1, -1):
                if self._cand_plan[j] != NULL:
                    st = _api.DestroyDescriptor(self._cand_plan[j])
                    if first == CUDNN_STATUS_SUCCESS:
                        first = st
                if self._cand_cfg[j] != NULL:
                    st = _api.DestroyDescriptor(self._cand_cfg[j])
                    if first == CUDNN_STATUS_SUCCESS:
                        first = st
                self._cand_plan[j] = NULL
                self._cand_cfg[j] = NULL
            for j in range(self._n_owned - 1, -1, -1):
                st = _api.DestroyDescriptor(self._owned[j])
                if first == CUDNN_STATUS_SUCCESS:
                    first = st
                self._owned[j] = NULL
        self._n_cand = 0
        self._n_owned = 0
        self._plan = NULL
        if first != CUDNN_STATUS_SUCCESS:
            errors.append(_error(first, "cudnnBackendDestroyDescriptor", f"destroying {self._label}"))
        ws, self._workspace, self._ws_ptr = self._workspace, None, NULL
        self._seen_a = self._seen_b = self._seen_c = None
        if ws is not None:
            try:
                ws.close()
            except Exception as e:
                errors.append(e)
        if errors and raise_errors:
            raise errors[0]
        for e in errors:
            warn_dealloc_failure("MatmulPlan", e)
        return 0

    def close(self):
        """Destroy the plan's cuDNN descriptors (reverse order of creation) and
        free its workspace, after the executions queued so far have finished
        (``cuStreamSynchronize`` of the streams it ran on). While a captured
        graph holds the plan this only marks it closed: the graph keeps it
        until it is closed itself. A second close is a no-op; calling a closed
        plan raises ClosedError (``matmul_plan`` builds a new one)."""
        if self._closed:
            return
        self._closed = True
        if self._graph_uses <= 0:
            self._destroy(True)

    @property
    def closed(self):
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def flops(self):
        """Floating-point operations of one execution: ``2 * batch * m * n * k``."""
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def workspace(self):
        """The scratch Buffer eager executions write (None when none is needed); Queue.matmul tracks it."""
        return self._workspace

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        if not self._destroyed:
            try:
                self._destroy(False)
            except Exception as e:
                warn_dealloc_failure("MatmulPlan", e)

    def __repr__(self):
        state = "closed" if self._closed else (f"engine {self.engine['engine']}, workspace {self.workspace_nbytes} "
                                               "bytes" if self.engine is not None else "not built")
        dev = self.device.ordinal if self.device is not None else "-"
        return f"<MatmulPlan {self._label.removeprefix('cudnn matmul plan ')} on device {dev}, {state}>"


include "_cudnn_build.pxi"
