# cython: language_level=3
"""Page-locked (pinned) host memory, and objects (the host memory of asynchronous copies, and
what launches use) kept alive until the work that uses them has run."""
cimport cython
from libc.stdint cimport uintptr_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, as_device
from pycudadrv._stream cimport Stream, captures_active, forbidding_capture

import numpy as np
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, BufferInUseError, ClosedError

__all__ = ["HostBuffer", "shape_and_nbytes"]


cdef bint is_pinned(const void* ptr) except -1:
    cdef unsigned int kind = 0
    if ptr == NULL:
        return False
    cdef CUresult r = driver().p_cuPointerGetAttribute(&kind, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                      <CUdeviceptr><uintptr_t>ptr)
    return r == CUDA_SUCCESS and kind == CU_MEMORYTYPE_HOST


cdef int _free_host(void* p, bint raise_errors) except -1:
    """cuMemFreeHost without the GIL: it waits for the device, and a host function queued
    before it (aio's completions) needs the GIL to finish."""
    cdef pycudadrv_driver_api* d = driver()
    cdef CUresult r
    with nogil:
        r = d.p_cuMemFreeHost(p)
    if raise_errors:
        check(r, "cuMemFreeHost")
    elif r != CUDA_SUCCESS:
        warn_dealloc_failure("HostBuffer", make_error(r, "cuMemFreeHost"))
    return 0


# Objects kept alive until the work queued when they were kept has run, (event handle, object) in
# call order: host memory of asynchronous copies, DLPack exports of generic launches, arguments a
# graph update replaced.
cdef list _host_keep = []
cdef list _keep_events = []          # spare events (as ints) for the list above


cdef int _prune_kept() except -1:
    cdef pycudadrv_driver_api* d = driver()
    cdef Py_ssize_t k = 0, scanned = 0
    cdef CUresult r
    limit = 8 if len(_host_keep) < 1024 else len(_host_keep)
    while k < len(_host_keep) and scanned < limit:
        ev = _host_keep[k][0]
        scanned += 1
        r = d.p_cuEventQuery(<CUevent><uintptr_t>ev)
        if r == CUDA_ERROR_NOT_READY:
            k += 1
            continue
        del _host_keep[k]            # done (or failed: the error surfaces at the next sync)
        _keep_events.append(ev)
    return 0


cdef int keep_until_done(Stream s, object obj) except -1:
    cdef pycudadrv_driver_api* d = driver()
    cdef CUevent ev = NULL
    if s._capture is not None or (captures_active() and forbidding_capture(s) is not None):
        return 0
    if _host_keep:
        _prune_kept()
    s.device.activate()
    if _keep_events:
        ev = <CUevent><uintptr_t>_keep_events.pop()
    else:
        check(d.p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        check(d.p_cuEventRecord(ev, s._handle), "cuEventRecord")
    except BaseException:
        d.p_cuEventDestroy(ev)
        raise
    _host_keep.append((<uintptr_t>ev, obj))
    return 1


def _host_keep_count():
    """How many host objects are kept alive for copies not yet seen complete (tests)."""
    if _host_keep:
        _prune_kept()
    return len(_host_keep)


cdef int drain_host_keeps() except -1:
    """Wait (without the GIL) for every copy whose host memory is kept, then let go of it all:
    HostBuffer.close() does this before refusing because views of it are alive."""
    cdef pycudadrv_driver_api* d = driver()
    cdef CUevent ev
    cdef CUresult r
    if captures_active() and forbidding_capture(None) is not None:
        return 0                      # a capture forbids the waits; the views stay
    while _host_keep:
        ev = <CUevent><uintptr_t>_host_keep[0][0]
        with nogil:
            r = d.p_cuEventSynchronize(ev)
        del _host_keep[0]              # done (a failure surfaces at the next synchronisation)
        _keep_events.append(<uintptr_t>ev)
    return 0


# HostBuffers are made only by HostBuffer.empty (which passes this token).
cdef object _TOKEN = object()


def shape_and_nbytes(shape, dtype):
    """``(shape tuple, numpy dtype or None, nbytes)`` for ``shape`` (an int or
    a sequence of ints) elements of ``dtype`` (bytes when None).

    Raises ArgumentTypeError for a shape that is not ints or a ``dtype``
    numpy does not know, holding Python objects or of zero size;
    ArgumentValueError for a negative dimension or 2**64 bytes or more."""
    import operator
    dt = None
    if dtype is not None:
        try:
            dt = np.dtype(dtype)
        except (TypeError, ValueError) as e:
            raise ArgumentTypeError(f"dtype {dtype!r:.60} is not a numpy dtype ({e})") from None
        if dt.hasobject:
            raise ArgumentTypeError(f"dtype {dt} holds Python objects, which device or pinned memory cannot hold")
        if dt.itemsize == 0:
            raise ArgumentTypeError(f"dtype {dt} has zero-size elements; give a size (e.g. 'U8', 'S16', 'V4')")
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ArgumentTypeError(f"shape must be an int or a tuple of ints, got {shape!r}")
    try:
        shape = tuple(shape)
        bad = any(isinstance(s, (bool, np.bool_)) for s in shape)
        shape = shape if bad else tuple(operator.index(s) for s in shape)
    except TypeError:
        bad = True
    if bad:
        raise ArgumentTypeError(f"shape must be an int or a tuple of ints, got {shape!r:.80}")
    if any(s < 0 for s in shape):
        raise ArgumentValueError(f"negative dimension in shape {shape}")
    count = 1
    for s in shape:
        count *= s
    nbytes = count * (dt.itemsize if dt is not None else 1)
    if nbytes >= 2**64:
        raise ArgumentValueError(f"shape {shape} of {dt if dt is not None else 'bytes'} is {nbytes} bytes, more than "
                                 "any memory holds")
    return shape, dt, nbytes


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class HostBuffer:
    """Page-locked (pinned) host memory (``cuMemHostAlloc``), exposed as a numpy array.

    Copies between a pinned buffer and a device Buffer are truly asynchronous
    (``cuMemcpyHtoDAsync``/``cuMemcpyDtoHAsync`` return at once and overlap
    with kernels on other streams), and they may be captured into a graph
    (the graph keeps the pinned memory alive); copies from ordinary pageable
    numpy memory are synchronous with respect to the host.

    >>> h = HostBuffer.empty((1024,), np.float32)
    >>> h.array[:] = 1.0
    >>> d_buf.write(h.array, stream=s)        # returns immediately

    ``close()`` frees the memory (``cuMemFreeHost``); it raises
    BufferInUseError while numpy arrays made from it are still alive, so freed
    memory can never be read through them.
    """

    def __cinit__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("create pinned memory with HostBuffer.empty(shape, dtype)")

    @staticmethod
    def empty(shape, dtype=np.uint8, *, device=None):
        """Pinned host memory of ``shape`` elements of ``dtype`` (uninitialised).

        Raises OutOfMemoryError (a CudaError and a MemoryError) when the
        pinned allocation fails."""
        shape, dt, nbytes = shape_and_nbytes(shape, dtype)
        cdef HostBuffer h = HostBuffer.__new__(HostBuffer, _TOKEN)
        cdef Device dev = as_device(device, "HostBuffer.empty")
        h.device = dev
        h._dtype = dt
        h._shape = shape
        h._nbytes = nbytes
        cdef pycudadrv_driver_api* d
        cdef CUresult r
        cdef size_t n = h._nbytes
        cdef void* p = NULL
        if n:
            dev.activate()
            d = driver()
            with nogil:            # pinning may wait for the device: never with the GIL held
                r = d.p_cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE)
            check(r, "cuMemHostAlloc")
            h._ptr = p
        return h

    @property
    def nbytes(self):
        """Size in bytes."""
        return self._nbytes

    @property
    def dtype(self):
        """Element type (numpy dtype)."""
        return self._dtype

    @property
    def shape(self):
        """Element shape (tuple)."""
        return self._shape

    @property
    def closed(self):
        """Whether :meth:`close` freed the memory."""
        return self._closed

    @property
    def ptr(self):
        """Host address as int. Raises ClosedError after close."""
        if self._closed:
            raise ClosedError("host buffer is closed")
        return <uintptr_t>self._ptr

    @property
    def array(self):
        """A numpy array over the pinned memory (no copy; keeps this buffer alive)."""
        if self._closed:
            raise ClosedError("host buffer is closed")
        return np.frombuffer(self, dtype=self._dtype).reshape(self._shape)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self._closed:
            raise ClosedError("host buffer is closed")
        self._shape1[0] = <Py_ssize_t>self._nbytes
        self._strides1[0] = 1
        view.buf = self._ptr if self._ptr != NULL else <void*>&self._shape1[0]
        view.obj = self
        view.len = self._nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = "B"
        view.ndim = 1
        view.shape = self._shape1
        view.strides = self._strides1
        view.suboffsets = NULL
        view.internal = NULL
        self._exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._exports -= 1

    def close(self):
        """Free the pinned memory (``cuMemFreeHost``). A second close is a no-op.

        Raises BufferInUseError while arrays made from it are alive (a graph
        that copies from it holds one)."""
        if self._closed:
            return
        if self._exports:
            drain_host_keeps()         # copies pycudadrv keeps a view of it for: wait for them, let go
        if self._exports:
            raise BufferInUseError(f"HostBuffer.close(): {self._exports} numpy view(s) of it are still alive "
                                   "(yours, or a graph's that captured a copy from or to it: graph.close() lets "
                                   "go of those)")
        self._closed = True
        if self._ptr != NULL:
            _free_host(self._ptr, True)
            self._ptr = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        if not self._closed and self._ptr != NULL:
            try:
                _free_host(self._ptr, False)
            except Exception as e:
                warn_dealloc_failure("HostBuffer", e)

    def __repr__(self):
        if self._closed:
            return "<HostBuffer closed>"
        return f"<HostBuffer pinned, {self._nbytes} bytes, dtype={self._dtype}, shape={self._shape}>"
