# cython: language_level=3
"""Device-side loops: a captured body repeated on the GPU by a conditional
WHILE node (one cuGraphLaunch for many iterations), with the condition kernel
supplied by pycudadrv; and patching captured kernel nodes (GPU-driven
indirect dispatch)."""
cimport cython
from libc.stdint cimport uintptr_t, uint32_t
from libc.string cimport memset
from libc.stdlib cimport free
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream, Capture, begin_capture, order_after
from pycudadrv._ordering cimport ReadyEvent
from pycudadrv._memory cimport Buffer
from pycudadrv._marshal cimport (ParamLayout, marshal, pycudadrv_arena, pycudadrv_arena_init,
                                 pycudadrv_arena_release)
from pycudadrv._launch cimport Function
from pycudadrv._graph cimport CapturedGraph
from pycudadrv._interop cimport take_dlpack_owners

import threading
import numpy as np
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, ClosedError, NotSupportedError, StateError,
                               CaptureError)

__all__ = ["DeviceLoop", "Condition", "when", "LOOP_DTYPES", "LOOP_OPS"]

#: Element types a loop condition can compare (the device value and the threshold).
LOOP_DTYPES = {"float32": "float", "float64": "double", "int32": "int", "uint32": "unsigned int",
               "int64": "long long", "uint64": "unsigned long long"}
#: Comparisons a loop condition can make: the loop stops once ``value OP threshold`` holds.
LOOP_OPS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}

_LOOP_SOURCE = r"""
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(cudaGraphConditionalHandle h,
                                                                              unsigned int value);
__device__ __forceinline__ void pycudadrv_wait_producer() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");   // a no-op unless launched as a PDL dependent
#endif
}
// state[0]: iterations done in the current launch; state[1]: iterations of the last finished launch;
// state[2]: 1 when the last launch stopped because the condition held, 0 when the bound stopped it.
extern "C" __global__ void pycudadrv_loop_times(cudaGraphConditionalHandle h, unsigned int* state,
                                               unsigned int n) {
    pycudadrv_wait_producer();
    unsigned int it = state[0] + 1u;
    if (it >= n) { state[1] = it; state[2] = 0u; state[0] = 0u; cudaGraphSetConditional(h, 0u); }
    else { state[0] = it; cudaGraphSetConditional(h, 1u); }
}
extern "C" __device__ __cudart_builtin__ cudaError_t CUDARTAPI cudaGraphKernelNodeSetGridDim(
    cudaGraphDeviceNode_t node, dim3 gridDim);
extern "C" __device__ __cudart_builtin__ cudaError_t CUDARTAPI cudaGraphKernelNodeSetEnabled(
    cudaGraphDeviceNode_t node, bool enable);
// GPU-driven indirect dispatch: the grid of a device-updatable kernel node (launched with the indirect
// pointer, so it walks the workgroups from blockIdx.x with a stride of gridDim.x) from three counts on the
// device: one block per workgroup, up to the device's grid limit in x (beyond it, each block takes several);
// no workgroup at all disables the node for this replay. No count is ever too large to run.
// On sm_90+ the node is this kernel's programmatic dependent: the fence makes the update visible to its
// launch (cuda_device_runtime_api.h's rule for updating an immediate PDL dependent), and the trigger then
// lets it launch while this kernel retires instead of after it.
extern "C" __global__ void pycudadrv_indirect_update(cudaGraphDeviceNode_t node, const unsigned int* counts,
                                                    unsigned int max_x) {
    pycudadrv_wait_producer();
    unsigned long long groups = (unsigned long long)counts[0] * counts[1] * counts[2];
    bool on = groups != 0;
    if (on) cudaGraphKernelNodeSetGridDim(node, dim3(groups < max_x ? (unsigned int)groups : max_x, 1, 1));
    cudaGraphKernelNodeSetEnabled(node, on);
    __threadfence();
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#define PYCUDADRV_UNTIL(T, NAME, OP) \
extern "C" __global__ void pycudadrv_loop_until_##NAME(cudaGraphConditionalHandle h, unsigned int* state, \
                                                       unsigned int max_iterations, const T* value, T threshold) { \
    pycudadrv_wait_producer(); \
    unsigned int it = state[0] + 1u; \
    bool met = (*(const volatile T*)value) OP threshold; \
    if (met || it >= max_iterations) { \
        state[1] = it; state[2] = met ? 1u : 0u; state[0] = 0u; cudaGraphSetConditional(h, 0u); \
    } else { state[0] = it; cudaGraphSetConditional(h, 1u); } \
}
"""
_kernels_lock = threading.Lock()
cdef dict _kernel_modules = {}     # device ordinal -> Module


def _loop_source():
    lines = [_LOOP_SOURCE]
    for dt, ctype in LOOP_DTYPES.items():
        for op, opname in LOOP_OPS.items():
            lines.append(f"PYCUDADRV_UNTIL({ctype}, {dt}_{opname}, {op})")
    return "\n".join(lines) + "\n"


def loop_kernel(device, str name):
    """pycudadrv's condition kernel ``name`` for ``device`` (compiled once per
    device with NVRTC, through the compile cache)."""
    cdef Device dev = <Device>device
    with _kernels_lock:
        mod = _kernel_modules.get(dev.ordinal)
        if mod is None:
            from pycudadrv.nvrtc import compile as _compile    # the Python layer, loaded on first use
            mod = _compile(_loop_source(), name="pycudadrv_loops.cu", arch=dev.arch).load(device=dev)
            _kernel_modules[dev.ordinal] = mod
    return mod.function(name)


class Condition:
    """``value[index] OP threshold`` on the device, the stopping rule of a
    :class:`DeviceLoop` (made by :func:`when`, or the same arguments given
    to ``Condition``). Raises as :func:`when`."""

    def __init__(self, buffer=None, op=None, threshold=None, index=0):
        if not isinstance(buffer, Buffer):
            raise ArgumentTypeError(f"when(buffer, op, threshold): the condition value must be a pycudadrv Buffer "
                                    f"(or view), got {type(buffer).__name__}; conditions come from "
                                    "pycudadrv.when(buffer, op, threshold)")
        if not isinstance(op, str) or op not in LOOP_OPS:
            raise ArgumentValueError(f"when(): op must be one of {sorted(LOOP_OPS)}, got {op!r}")
        dt = buffer.dtype
        if dt is None:
            raise ArgumentTypeError("when(): the buffer has no dtype; make a typed view with buffer.view(dtype)")
        if dt.name not in LOOP_DTYPES:
            raise ArgumentTypeError(f"when(): the condition kernel compares {sorted(LOOP_DTYPES)}, not {dt}")
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)) or index < 0:
            raise ArgumentValueError(f"when(): index must be a non-negative int, got {index!r}")
        index = int(index)            # numpy integers would wrap in the bound check below
        if buffer.closed:
            raise ClosedError("when(): the condition buffer is closed")
        if (index + 1) * dt.itemsize > buffer.nbytes:
            raise ArgumentValueError(f"when(): element {index} of {dt} is beyond the condition buffer of "
                                     f"{buffer.nbytes} bytes")
        if np.ndim(threshold) != 0:
            raise ArgumentValueError(f"when(): threshold must be one number, got {threshold!r:.60}")
        try:
            with np.errstate(over="raise", invalid="raise"):
                thr = np.array(threshold).astype(dt, casting="same_kind" if dt.kind == "f" else "unsafe")[()]
        except (TypeError, ValueError, FloatingPointError, OverflowError) as e:
            raise ArgumentValueError(f"when(): threshold {threshold!r} is not representable as {dt}") from e
        if dt.kind in "iu" and thr != threshold:
            raise ArgumentValueError(f"when(): threshold {threshold!r} is not representable as {dt}")
        self.buffer = buffer
        self.op = op
        self.threshold = thr
        self.index = int(index)
        self.dtype = dt

    @property
    def kernel_name(self):
        # (getattr: a Condition made by Condition.__new__ has no fields)
        if getattr(self, "dtype", None) is None or getattr(self, "op", None) is None:
            raise StateError("this Condition is not initialised: make one with pycudadrv.when(buffer, op, threshold)")
        return f"pycudadrv_loop_until_{self.dtype.name}_{LOOP_OPS[self.op]}"

    def __repr__(self):
        if getattr(self, "buffer", None) is None:
            return "<Condition (not initialised)>"
        return f"when({self.buffer!r}[{self.index}] {self.op} {self.threshold!r})"


def when(buffer, op, threshold, index=0):
    """The condition ``buffer[index] OP threshold`` for
    ``stream.loop(until=...)``: the loop stops after the first iteration at
    whose end it holds. ``buffer`` is a typed Buffer (float32, float64, int32,
    uint32, int64, uint64) that a kernel of the body writes; ``op`` one of
    ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``.

    Raises ArgumentTypeError for an untyped buffer or an unsupported dtype,
    ArgumentValueError for an unknown op, an element beyond the buffer or a
    threshold the dtype cannot hold, ClosedError for a closed buffer."""
    return Condition(buffer, op, threshold, index)


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class DeviceLoop(CapturedGraph):
    """A captured body run repeatedly on the GPU by one graph launch, through
    a conditional WHILE node (``cuGraphConditionalHandleCreate``,
    ``cuGraphAddNode``, the body captured with ``cuStreamBeginCaptureToGraph``).

    Made by ``with stream.loop(times=N) as loop:`` (the body runs N times) or
    ``with stream.loop(until=when(buf, "<", tol), max_iterations=M) as loop:``
    (the body runs until the condition holds at the end of an iteration, at
    most M times, at least once unless M is 0). After the block, ``loop.launch()`` runs the
    whole loop with one ``cuGraphLaunch``; ``loop.iterations`` and
    ``loop.converged`` tell (reading a device word: they synchronize the loop's
    stream) how many iterations the last launch made and whether the condition
    stopped it. With ``pdl=True`` the body's consecutive kernels (and the
    condition kernel) are joined by programmatic edges.

    The body may launch kernels and copy or fill memory on the loop's stream;
    it may not allocate (each iteration would allocate again), synchronize, or
    launch on another stream: those are refused (CaptureError) while the body
    is captured.

    Raises
    ------
    NotSupportedError
        The driver has no conditional nodes (CUDA 12.3+ needed) or PDL was
        asked below compute capability 9.0.
    ArgumentValueError
        Neither or both of ``times``/``until``; a missing or negative bound.
    """
    cdef readonly object times
    cdef readonly object condition
    cdef readonly unsigned int max_iterations
    cdef Buffer _state
    cdef CUgraph _outer
    cdef CUgraph _body
    cdef CUgraphConditionalHandle _cond
    cdef CUgraphNode _cond_node
    cdef object _cond_fn

    def __init__(self, Stream stream not None, str mode="thread_local", *, pdl=False, times=None,
                 until=None, max_iterations=None):
        if (times is None) == (until is None):
            raise ArgumentValueError("stream.loop(): give exactly one of times=N or until=when(...)")
        if times is not None:
            if isinstance(times, bool) or not isinstance(times, (int, np.integer)) or not 0 <= times < 2**32:
                raise ArgumentValueError(f"stream.loop(times=...) must be an int in [0, 2**32), got {times!r}")
            if max_iterations is not None and max_iterations != times:
                raise ArgumentValueError("stream.loop(times=N): the bound is N; do not also give max_iterations")
            self.times = int(times)
            self.max_iterations = <unsigned int>int(times)
        else:
            if not isinstance(until, Condition):
                raise ArgumentTypeError(f"stream.loop(until=...) takes pycudadrv.when(buffer, op, value), got "
                                        f"{type(until).__name__}")
            if max_iterations is None:
                raise ArgumentValueError("stream.loop(until=...) needs max_iterations: a loop must have an upper "
                                         "bound so it can never spin forever")
            if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)) or \
                    not 0 <= max_iterations < 2**32:
                raise ArgumentValueError(f"max_iterations must be an int in [0, 2**32), got {max_iterations!r}")
            if until.buffer.device != stream.device:
                raise ArgumentValueError(f"stream.loop(): the condition buffer is on device {until.buffer.device.ordinal}, "
                                         f"the stream on device {stream.device.ordinal}")
            self.condition = until
            self.max_iterations = <unsigned int>int(max_iterations)
        cdef pycudadrv_driver_api* d = driver()
        if d.p_cuGraphConditionalHandleCreate == NULL or d.p_cuGraphAddNode == NULL or \
                d.p_cuStreamBeginCaptureToGraph == NULL:
            raise NotSupportedError("device loops need conditional graph nodes: a CUDA 12.3 or newer driver")
        self._state = Buffer.zeros(4, np.uint32, device=stream.device, stream=stream)
        self._held.append(self._state)

    def __enter__(self):
        cdef pycudadrv_driver_api* d = driver()
        cdef Stream s = self._stream
        cdef CUgraphNodeParams params
        cdef CUgraphNode node = NULL
        cdef unsigned int default = 1 if self.max_iterations > 0 else 0
        if self._state is None:
            raise StateError("this DeviceLoop is not initialised: make one with stream.loop(times=N) or "
                             "stream.loop(until=when(...), max_iterations=M)")
        if self._graph != NULL or self._exec != NULL or self._closed:
            raise StateError("this DeviceLoop was already built; call stream.loop() again")
        s.device.activate()
        # The kernel is compiled (and loaded) before the capture begins: neither may happen inside it.
        name = "pycudadrv_loop_times" if self.condition is None else self.condition.kernel_name
        self._cond_fn = loop_kernel(s.device, name)
        check(d.p_cuGraphCreate(&self._outer, 0), "cuGraphCreate")
        try:
            check(d.p_cuGraphConditionalHandleCreate(&self._cond, self._outer, s.device._context, default,
                                                     CU_GRAPH_COND_ASSIGN_DEFAULT),
                  "cuGraphConditionalHandleCreate")
            memset(&params, 0, sizeof(params))
            params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL
            params.conditional.handle = self._cond
            params.conditional.type = CU_GRAPH_COND_TYPE_WHILE
            params.conditional.size = 1
            params.conditional.ctx = s.device._context
            check(d.p_cuGraphAddNode(&node, self._outer, NULL, NULL, 0, &params), "cuGraphAddNode")
            self._cond_node = node
            self._body = params.conditional.phGraph_out[0]
            self._capture = begin_capture(s, self.mode, self.pdl, self._body)
            self._capture.body = True
        except BaseException:
            d.p_cuGraphDestroy(self._outer)
            self._outer = NULL
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        cdef Capture c = self._capture
        cdef pycudadrv_driver_api* d = driver()
        if c is None:
            return False
        try:
            if exc_type is None:
                self._launch_condition(c)
        except BaseException:
            c.end(True)
            self._capture = None
            d.p_cuGraphDestroy(self._outer)
            self._outer = NULL
            self._closed = True
            raise
        self._capture = None
        if exc_type is not None:
            c.end(True)
            d.p_cuGraphDestroy(self._outer)
            self._outer = NULL
            self._closed = True
            return False
        try:
            c.end(False)
            self._wait_before_loop(c)
        except BaseException:
            d.p_cuGraphDestroy(self._outer)
            self._outer = NULL
            self._closed = True
            raise
        g, self._outer = self._outer, NULL
        self.adopt(g, c)
        return False

    cdef int _wait_before_loop(self, Capture c) except -1:
        """Event-wait nodes in front of the conditional node for the producers of foreign
        memory the body reads (a body graph holds no event nodes): each launch of the loop
        first waits for the producers' work queued when the body was captured."""
        cdef pycudadrv_driver_api* d = driver()
        cdef CUgraphNode w = NULL
        cdef ReadyEvent r
        if not c.body_waits:
            return 0
        if d.p_cuGraphAddDependencies == NULL:
            raise NotSupportedError("a device loop whose body reads another library's array needs "
                                    "cuGraphAddDependencies (a CUDA 12.3+ driver)")
        for obj in c.body_waits:
            r = <ReadyEvent>obj
            check(d.p_cuGraphAddEventWaitNode(&w, self._outer, NULL, 0, r._event), "cuGraphAddEventWaitNode")
            check(d.p_cuGraphAddDependencies(self._outer, &w, &self._cond_node, NULL, 1), "cuGraphAddDependencies")
        return 0

    cdef int _launch_condition(self, Capture c) except -1:
        fn = self._cond_fn
        if self.condition is None:
            fn.launch(1, 1, np.uint64(self._cond), self._state, np.uint32(self.max_iterations), stream=self._stream)
        else:
            cond = self.condition
            value = cond.buffer[cond.index:cond.index + 1] if cond.buffer.dtype is not None else cond.buffer
            fn.launch(1, 1, np.uint64(self._cond), self._state, np.uint32(self.max_iterations), value,
                      cond.threshold, stream=self._stream)
            c.hold(cond.buffer)
        # The condition kernel is the loop's own: not a launch set_kernel_args may rewrite (its handle, its
        # state and its bound are what keeps the loop finite), nor one num_kernels counts.
        c.kernels.pop()
        return 0

    def _state_words(self):
        if self._state is None:
            raise StateError("this DeviceLoop is not initialised: make one with stream.loop(...)")
        # On the stream of the last launch (which may be another than the capture stream): the words
        # are those that launch wrote. Once that stream is closed, the capture stream waits for its
        # last work (the event its close recorded) and reads.
        cdef Stream last = self._last_launch if self._last_launch is not None else self._stream
        if last._closed and last is not self._stream and not self._stream._closed:
            order_after(self._stream, last)
            last = self._stream
        if last._closed:
            raise ClosedError(f"{self!r}: the stream its last launch ran on ({last!r}) is closed, and so is its "
                              "capture stream: nothing is left to read its iteration count on")
        return self._state.to_numpy(stream=last)

    @property
    def iterations(self):
        """Iterations the last launch made (0 before any launch); reads a
        device word, so it waits for the stream that launch ran on."""
        if self.max_iterations == 0:
            return 0
        return int(self._state_words()[1])

    @property
    def converged(self):
        """Whether the last launch stopped because the condition held (False
        for ``times=`` loops and when the bound stopped it)."""
        if self.condition is None:
            return False
        return bool(self._state_words()[2])

    def __repr__(self):
        what = f"times={self.times}" if self.condition is None else f"until={self.condition!r}"
        return f"<DeviceLoop {what} max_iterations={self.max_iterations}{' pdl' if self.pdl else ''}>"


def follows_kernel(Stream stream not None):
    """Whether the next work captured on ``stream`` depends on exactly one node, the
    kernel launch captured last (so a kernel launched now with programmatic stream
    serialization gets a programmatic edge from a kernel, never from a copy, a set or
    several joined streams). False outside a capture."""
    cdef Capture c = stream._capture
    if c is None or not c.kernels:
        return False
    last = c.last_node()
    return last is not None and last == c.kernels[-1][0]


def patch_kernel_node(graph, node, Function fn not None, grid, block, unsigned int shared_mem_bytes, args):
    """Set the kernel parameters of captured ``node`` (an int, from
    ``Capture.kernels``) of ``graph``'s not yet instantiated CUgraph to ``args``
    (``cuGraphKernelNodeSetParams``). Used by a capture finalizer."""
    cdef CapturedGraph g = <CapturedGraph>graph
    cdef pycudadrv_arena arena
    cdef CUDA_KERNEL_NODE_PARAMS_v2 params
    cdef ParamLayout lay = fn.layout
    if g._graph == NULL or g._exec != NULL:
        raise StateError("patch_kernel_node: only a captured graph that is not instantiated yet can be patched")
    if lay.n < 0 or lay.n != len(args):
        raise ArgumentTypeError(f"kernel '{fn.name}' takes {lay.n} arguments, {len(args)} given")
    pycudadrv_arena_init(&arena)
    try:
        memset(&params, 0, sizeof(params))
        params.func = fn._handle
        params.gridDimX, params.gridDimY, params.gridDimZ = grid
        params.blockDimX, params.blockDimY, params.blockDimZ = block
        params.sharedMemBytes = shared_mem_bytes
        params.kernelParams = marshal(&arena, lay, tuple(args), lay.specs, None)
        fn.device.activate()
        check(driver().p_cuGraphKernelNodeSetParams(<CUgraphNode><uintptr_t>node, &params),
              "cuGraphKernelNodeSetParams")
    finally:
        pycudadrv_arena_release(&arena)
        g._held.extend(take_dlpack_owners())    # DLPack exports the node uses: as long as the graph
