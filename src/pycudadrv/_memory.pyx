# cython: language_level=3
"""Device memory: Buffer (device allocation or a view of one) and asbuffer()."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t, uint8_t, uint16_t, uint32_t, int32_t, int64_t
from libc.stdlib cimport malloc, free
from cpython.pycapsule cimport (PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer, PyCapsule_SetName)
from cpython.ref cimport Py_INCREF, Py_DECREF, PyObject
from cpython.buffer cimport PyBUF_WRITABLE
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, get_device, current_device, as_device
from pycudadrv._stream cimport Stream, Event, resolve_stream, check_not_capturing

import numpy as np

cdef extern from "cuda.h":
    enum:
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD

cdef extern from "pycudadrv/dlpack.h" nogil:
    enum:
        PYCUDADRV_kDLCPU
        PYCUDADRV_kDLCUDA
        PYCUDADRV_kDLCUDAHost
        PYCUDADRV_kDLCUDAManaged
        PYCUDADRV_kDLInt
        PYCUDADRV_kDLUInt
        PYCUDADRV_kDLFloat
        PYCUDADRV_kDLBfloat
        PYCUDADRV_kDLComplex
        PYCUDADRV_kDLBool
    ctypedef struct pycudadrv_DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct pycudadrv_DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct pycudadrv_DLTensor:
        void* data
        pycudadrv_DLDevice device
        int32_t ndim
        pycudadrv_DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct pycudadrv_DLManagedTensor:
        pycudadrv_DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(pycudadrv_DLManagedTensor*) noexcept nogil

ctypedef void* CUmemoryPool_p

cdef set _pools_configured = set()
cdef object cai_data_pointer(object cai):
    data = cai.get("data") if isinstance(cai, dict) else None
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError("its __cuda_array_interface__ has no valid 'data': (pointer, read_only)")
    ptr = data[0]
    if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0 or ptr >= 2**64:
        raise ValueError(f"its __cuda_array_interface__ data pointer {ptr!r} is not an address")
    return ptr


cdef int _order_after(Stream producer, Stream consumer, Device dev) except -1:
    """Make work queued from now on `consumer` wait for the work queued so far on
    `producer` (cuEventRecord + cuStreamWaitEvent); nothing when they are one stream."""
    if producer.handle != consumer.handle:
        consumer.wait(Event(timing=False, device=dev).record(producer))
    return 0


# Frees that a capture forbade at the time (ptr, device, stream); done when it ends.
cdef list _deferred_frees = []


cdef bint _capture_forbids_free(Stream s):
    try:
        check_not_capturing(s if s is not None and s._capture is None else None, "free")
    except RuntimeError:
        return True
    return False


cdef int _release_allocation(CUdeviceptr ptr, Device dev, Stream s, bint raise_errors) except -1:
    """Free a device allocation: ``cuMemFreeAsync`` on ``s`` (after its queued work) while
    ``s`` is open, else ``cuMemFree``; deferred to the end of a capture that forbids it.
    Driver errors raise CudaError only with ``raise_errors``."""
    if _capture_forbids_free(s):
        _deferred_frees.append((ptr, dev, s))
        return 0
    cdef pycudadrv_driver_api* d = driver()
    cdef CUresult r = d.p_cuCtxSetCurrent(dev.context)
    if s is not None and not s.closed:
        r = d.p_cuMemFreeAsync(ptr, s.handle)
        call = b"cuMemFreeAsync"
    else:
        r = d.p_cuMemFree(ptr)
        call = b"cuMemFree"
    if raise_errors:
        check(r, call)
    return 0


def flush_deferred_frees():
    """Free the allocations whose release a capture deferred (called when a capture ends)."""
    pending = list(_deferred_frees)
    _deferred_frees.clear()
    for ptr, dev, s in pending:
        _release_allocation(ptr, dev, s, False)


cdef int _configure_pool(Device dev) except -1:
    """Keep freed memory in the device's default pool instead of returning it to
    the OS at every synchronize, so stream-ordered allocation reuses it."""
    if dev.ordinal in _pools_configured:
        return 0
    cdef pycudadrv_driver_api* d = driver()
    cdef void* pool = NULL
    cdef uint64_t threshold = <uint64_t>-1
    check(d.p_cuDeviceGetDefaultMemPool(<CUmemoryPool*>&pool, dev.handle), "cuDeviceGetDefaultMemPool")
    check(d.p_cuMemPoolSetAttribute(<CUmemoryPool>pool, <CUmemPool_attribute>CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                     &threshold), "cuMemPoolSetAttribute")
    _pools_configured.add(dev.ordinal)
    return 0


def _shape_dtype(shape, dtype):
    import operator
    dt = np.dtype(dtype) if dtype is not None else None
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}")
    shape = tuple(operator.index(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    count = 1
    for s in shape:
        count *= s
    return shape, dt, count * (dt.itemsize if dt is not None else 1)


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class Buffer:
    """A device allocation, or a view of part of one.

    Create with :meth:`empty`, :meth:`zeros` or :meth:`from_numpy`. ``nbytes``
    is the size in bytes, ``ptr`` the device pointer as int; optional ``dtype``
    and ``shape`` metadata let :meth:`to_numpy` work without arguments and make
    slicing count elements.

    Allocation is stream-ordered by default (``cuMemAllocAsync`` on the
    device's default pool, whose release threshold is raised so freed memory is
    reused); ``close()`` frees it with ``cuMemFreeAsync`` on the allocation
    stream, ordered after the work already queued there. ``async_alloc=False``
    uses ``cuMemAlloc``/``cuMemFree``. A zero-length buffer has a null pointer
    and costs no driver call. Double close is a no-op; any use after close
    raises ValueError.

    Exposes ``__cuda_array_interface__`` (version 3).
    """

    def __cinit__(self):
        self.ptr = 0
        self.nbytes = 0
        self.owned = False
        self.closed = False
        self.root = None

    def __init__(self, *args, **kwargs):
        raise TypeError("create Buffers with Buffer.empty(), Buffer.zeros(), Buffer.from_numpy() or asbuffer()")

    @staticmethod
    def empty(shape, dtype=None, *, device=None, stream=None, bint async_alloc=True):
        """Uninitialised device memory.

        ``shape`` is a byte count when ``dtype`` is None, else an element shape
        (int or tuple) of ``dtype`` elements.

        Raises
        ------
        ValueError
            Negative size.
        CudaError
            ``CUDA_ERROR_OUT_OF_MEMORY`` (the message gives the bytes asked for
            and the bytes free).
        """
        shape, dt, nbytes = _shape_dtype(shape, dtype)
        cdef Device dev = as_device(device)
        cdef Stream s = resolve_stream(stream, dev)
        if s.device is not None and s.device.ordinal != dev.ordinal:
            raise ValueError(f"Buffer.empty: stream belongs to device {s.device.ordinal}, not device {dev.ordinal}")
        cdef Buffer b = Buffer.__new__(Buffer)
        b.device = dev
        b.stream = s
        b.root = b
        b.dtype = dt
        b.shape = shape if dt is not None else None
        b.nbytes = nbytes
        b.owned = True
        b.async_alloc = async_alloc
        if nbytes == 0:
            return b
        cdef pycudadrv_driver_api* d = driver()
        dev.activate()
        cdef CUresult r
        if not async_alloc:
            check_not_capturing(None, "allocate with cuMemAlloc (async_alloc=False)")
        elif s._capture is None:
            # On a stream that is not the one being captured, the driver refuses
            # cuMemAllocAsync during a global or thread-local capture (and that
            # would invalidate the capture): refuse first, leaving it intact.
            check_not_capturing(None, "allocate device memory on a stream outside the capture "
                                "(allocate before the capture, or on the capturing stream)")
        if async_alloc:
            _configure_pool(dev)
            r = d.p_cuMemAllocAsync(&b.ptr, nbytes, s.handle)
            call = "cuMemAllocAsync"
        else:
            r = d.p_cuMemAlloc(&b.ptr, nbytes)
            call = "cuMemAlloc"
        if r != CUDA_SUCCESS:
            b.owned = False
            b.closed = True
            ctx = f"allocating {nbytes} bytes on device {dev.ordinal}"
            if r == CUDA_ERROR_OUT_OF_MEMORY:
                try:
                    free, total = dev.memory_info()
                    ctx += f"; the device has {free} bytes free of {total}"
                except Exception:
                    pass
            raise make_error(r, call, ctx)
        return b

    @staticmethod
    def zeros(shape, dtype=None, *, device=None, stream=None, bint async_alloc=True):
        """Like :meth:`empty`, then set to zero (``cuMemsetD8Async``)."""
        b = Buffer.empty(shape, dtype, device=device, stream=stream, async_alloc=async_alloc)
        b.fill(0)
        return b

    @staticmethod
    def from_numpy(array, *, device=None, stream=None, bint async_alloc=True):
        """A new Buffer holding a copy of ``array`` (any buffer-protocol object;
        non-contiguous input is first copied to C order). Keeps its dtype and
        shape (``cuMemcpyHtoDAsync``; pageable source memory may be reused as
        soon as this returns)."""
        arr = np.ascontiguousarray(array)
        b = Buffer.empty(arr.shape, arr.dtype, device=device, stream=stream, async_alloc=async_alloc)
        b.write(arr)
        return b

    cdef int ensure_open(self) except -1:
        if self.closed or (self.root is not None and self.root.closed):
            raise ValueError("buffer is closed" if self.closed else "buffer is a view of a closed buffer")
        return 0

    @property
    def ptr(self):
        """Device pointer as int (0 for an empty buffer). Raises ValueError after close."""
        self.ensure_open()
        return self.ptr

    @property
    def nbytes(self):
        """Size in bytes."""
        return self.nbytes

    @property
    def size(self):
        """Number of elements (bytes when no dtype is set)."""
        return self.nbytes // (self.dtype.itemsize if self.dtype is not None else 1)

    @property
    def closed(self):
        return self.closed or (self.root is not None and self.root.closed)

    @property
    def stream(self):
        """The Stream this buffer's allocation, free and default copies are ordered on."""
        return self.stream

    def __len__(self):
        return self.size

    cdef _host_view(self, obj, bint writable, name):
        arr = np.asarray(obj)
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name}: host array must be C-contiguous (got strides {arr.strides}); "
                             "a solid copy would overwrite its neighbours")
        if writable and not arr.flags.writeable:
            raise ValueError(f"{name}: host array is read-only")
        return arr

    def write(self, data, size_t offset=0, stream=None):
        """Copy host ``data`` (buffer-protocol, contiguous) into this buffer at
        byte ``offset`` (``cuMemcpyHtoDAsync``). From pinned memory
        (:class:`HostBuffer`) the copy is asynchronous: keep the data unchanged
        until the stream has passed it; from pageable memory it returns once
        the data is staged, so the source may be reused at once.

        Raises ValueError when ``offset + data.nbytes > nbytes``."""
        self.ensure_open()
        src = np.ascontiguousarray(data)
        cdef size_t n = src.nbytes
        if offset > self.nbytes or n > self.nbytes - offset:
            raise ValueError(f"write of {n} bytes at offset {offset} overruns buffer of {self.nbytes} bytes")
        if n == 0:
            return
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self.stream
        if s._capture is not None:
            raise RuntimeError(f"cannot copy from pageable host memory during {s._capture!r}; "
                               "write the data before the capture")
        cdef const unsigned char[::1] view = src.reshape(-1).view(np.uint8)
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuMemcpyHtoDAsync(self.ptr + offset, &view[0], n, s.handle), "cuMemcpyHtoDAsync")

    def read(self, out=None, size_t offset=0, nbytes=None, stream=None, bint synchronize=True):
        """Copy ``nbytes`` (default: to the end) from byte ``offset`` to the
        host and wait for it (``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize``).

        Returns ``out`` (a C-contiguous writable array of exactly that many
        bytes) or a new uint8 array. With ``synchronize=False`` (only sensible
        when ``out`` is pinned, e.g. ``HostBuffer.array``) the copy is left
        running on the stream: synchronise before reading ``out``.

        Raises ValueError for a range outside the buffer or an unsuitable ``out``."""
        self.ensure_open()
        if offset > self.nbytes:
            raise ValueError(f"read offset {offset} beyond buffer of {self.nbytes} bytes")
        cdef size_t n = (self.nbytes - offset) if nbytes is None else nbytes
        if n > self.nbytes - offset:
            raise ValueError(f"read of {n} bytes at offset {offset} overruns buffer of {self.nbytes} bytes")
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        dst = self._host_view(out, True, "read")
        if dst.nbytes != n:
            raise ValueError(f"read: out has {dst.nbytes} bytes, expected {n}")
        if n == 0:
            return out
        cdef unsigned char[::1] view = dst.reshape(-1).view(np.uint8)
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self.stream
        if synchronize:
            check_not_capturing(s, "copy device memory to the host (it synchronizes)")
        elif s._capture is not None:
            raise RuntimeError(f"cannot copy to host memory during {s._capture!r}")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuMemcpyDtoHAsync(&view[0], self.ptr + offset, n, s.handle), "cuMemcpyDtoHAsync")
            if synchronize:
                check(d.p_cuStreamSynchronize(s.handle), "cuStreamSynchronize")
        return out

    def to_numpy(self, out=None, stream=None):
        """The whole buffer as a host numpy array (waits for the copy).

        With ``out`` (C-contiguous, writable, exactly ``nbytes`` bytes) copies
        into it and returns it; otherwise returns a new array of this buffer's
        ``dtype``/``shape`` (uint8 bytes when none is set)."""
        if out is None:
            if self.dtype is not None:
                out = np.empty(self.shape if self.shape is not None else (self.size,), dtype=self.dtype)
            else:
                out = np.empty(self.nbytes, dtype=np.uint8)
        return self.read(out=out, stream=stream)

    def copy_to(self, Buffer dst not None, nbytes=None, size_t src_offset=0, size_t dst_offset=0, stream=None):
        """Device-to-device copy of ``nbytes`` (default: all of this buffer from
        ``src_offset``) into ``dst`` at ``dst_offset`` (``cuMemcpyDtoDAsync``;
        ``cuMemcpyPeerAsync`` when ``dst`` is on another device, direct where
        peer access is possible and staged by the driver where not).

        Raises ValueError when either range falls outside its buffer."""
        self.ensure_open()
        dst.ensure_open()
        if src_offset > self.nbytes:
            raise ValueError(f"copy src_offset {src_offset} beyond source of {self.nbytes} bytes")
        cdef size_t n = (self.nbytes - src_offset) if nbytes is None else nbytes
        if n > self.nbytes - src_offset:
            raise ValueError(f"copy of {n} bytes at src_offset {src_offset} overruns source of {self.nbytes} bytes")
        if dst_offset > dst.nbytes or n > dst.nbytes - dst_offset:
            raise ValueError(f"copy of {n} bytes at dst_offset {dst_offset} overruns destination of {dst.nbytes} bytes")
        if n == 0:
            return
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self.stream
        if s._capture is not None:
            s._capture._hold((self, dst))
        self.device.activate()
        if dst.device.ordinal != self.device.ordinal:
            # Direct over NVLink/PCIe when peer access is possible, staged by the driver otherwise.
            check(driver().p_cuMemcpyPeerAsync(dst.ptr + dst_offset, dst.device.context,
                                               self.ptr + src_offset, self.device.context, n, s.handle),
                  "cuMemcpyPeerAsync")
            return
        check(driver().p_cuMemcpyDtoDAsync(dst.ptr + dst_offset, self.ptr + src_offset, n, s.handle),
              "cuMemcpyDtoDAsync")

    def copy_from(self, Buffer src not None, nbytes=None, size_t src_offset=0, size_t dst_offset=0, stream=None):
        """Device-to-device copy from ``src`` into this buffer; see :meth:`copy_to`."""
        src.copy_to(self, nbytes, src_offset, dst_offset, stream)

    def fill(self, value, stream=None):
        """Set every element to ``value`` (``cuMemsetD8/D16/D32Async``).

        ``value`` is a numpy scalar of 1, 2 or 4 bytes, or a Python number
        converted to this buffer's dtype (uint8 bytes when none is set).
        ``nbytes`` must be a multiple of the value's size.

        Raises ValueError for 8-byte or larger patterns (unless every 4-byte
        half is equal) and sizes that do not divide."""
        self.ensure_open()
        if isinstance(value, np.generic):
            v = value
        else:
            dt = self.dtype if self.dtype is not None else np.dtype(np.uint8)
            v = np.array(value).astype(dt, casting="unsafe") if dt.kind not in "iub" else np.array(value, dtype=dt)
            v = v.reshape(()).astype(dt)[()]
        raw = np.asarray(v).tobytes()
        if len(raw) == 8 and raw[:4] == raw[4:]:
            raw = raw[:4]
        if len(raw) == 4 and raw[:2] == raw[2:]:
            raw = raw[:2]
        if len(raw) == 2 and raw[:1] == raw[1:]:
            raw = raw[:1]
        cdef size_t size = len(raw)
        if size not in (1, 2, 4):
            raise ValueError(f"fill: a {len(np.asarray(v).tobytes())}-byte pattern {value!r} cannot be set with "
                             "cuMemsetD8/D16/D32; use 1-, 2- or 4-byte values")
        if self.nbytes % size:
            raise ValueError(f"fill: buffer of {self.nbytes} bytes is not a multiple of the {size}-byte pattern")
        if self.nbytes == 0:
            return
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self.stream
        if s._capture is not None:
            s._capture._hold((self,))
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        cdef size_t count = self.nbytes // size
        if size == 1:
            check(d.p_cuMemsetD8Async(self.ptr, (<uint8_t*><char*>raw)[0], count, s.handle), "cuMemsetD8Async")
        elif size == 2:
            check(d.p_cuMemsetD16Async(self.ptr, (<uint16_t*><char*>raw)[0], count, s.handle), "cuMemsetD16Async")
        else:
            check(d.p_cuMemsetD32Async(self.ptr, (<uint32_t*><char*>raw)[0], count, s.handle), "cuMemsetD32Async")

    def __getitem__(self, key):
        """``buf[a:b]``: a view (no copy) of elements a..b (bytes when no dtype
        is set). Keeps the parent alive; usable as a kernel argument and in copies."""
        self.ensure_open()
        if not isinstance(key, slice):
            raise TypeError("Buffer supports slices only, e.g. buf[16:32]")
        itemsize = self.dtype.itemsize if self.dtype is not None else 1
        start, stop, step = key.indices(self.nbytes // itemsize)
        if step != 1:
            raise ValueError("Buffer slices must be contiguous (step 1)")
        if stop < start:
            stop = start
        cdef Buffer v = Buffer.__new__(Buffer)
        v.device = self.device
        v.stream = self.stream
        v.root = self.root if self.root is not None else self
        v.owner = self
        v.ptr = self.ptr + start * itemsize
        v.nbytes = (stop - start) * itemsize
        v.dtype = self.dtype
        v.shape = (stop - start,) if self.dtype is not None else None
        return v

    @property
    def __cuda_array_interface__(self):
        self.ensure_open()
        shape = self.shape if self.shape is not None else (self.size,)
        typestr = self.dtype.str if self.dtype is not None else "|u1"
        d = {"shape": tuple(shape), "typestr": typestr, "data": (int(self.ptr), False),
             "strides": None, "version": 3}
        if self.stream is not None:
            d["stream"] = int(<uintptr_t>self.stream.handle) or None
        if self.dtype is not None and self.dtype.fields is not None:
            d["descr"] = self.dtype.descr
        return d

    def __dlpack_device__(self):
        """``(kDLCUDA = 2, device ordinal)``."""
        return (PYCUDADRV_kDLCUDA, self.device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (``"dltensor"``), zero-copy; the capsule
        keeps this buffer alive.

        ``stream`` is the consumer's stream as an int (1: legacy default, 2:
        per-thread default, -1: no synchronisation): work already queued on
        this buffer's stream is made to precede the consumer's
        (``cuEventRecord`` + ``cuStreamWaitEvent``).

        Raises ValueError for a closed buffer, ``copy=True``, or a ``dl_device``
        other than this buffer's."""
        self.ensure_open()
        if copy:
            raise ValueError("Buffer.__dlpack__: copy=True is not supported (export is zero-copy)")
        if dl_device is not None and tuple(dl_device) != (PYCUDADRV_kDLCUDA, self.device.ordinal):
            raise ValueError(f"Buffer.__dlpack__: buffer lives on {(PYCUDADRV_kDLCUDA, self.device.ordinal)}, "
                             f"not {tuple(dl_device)}")
        if stream is not None and stream != -1:
            _order_after(self.stream, Stream.from_handle(int(stream), self.device), self.device)
        dt = self.dtype if self.dtype is not None else np.dtype(np.uint8)
        shape = tuple(self.shape) if self.shape is not None else (self.size,)
        code = {"i": PYCUDADRV_kDLInt, "u": PYCUDADRV_kDLUInt, "f": PYCUDADRV_kDLFloat,
                "c": PYCUDADRV_kDLComplex, "b": PYCUDADRV_kDLBool}.get(dt.kind)
        if code is None:
            raise TypeError(f"Buffer.__dlpack__: dtype {dt} has no DLPack equivalent")
        cdef int ndim = len(shape)
        cdef pycudadrv_DLManagedTensor* m = <pycudadrv_DLManagedTensor*>malloc(
            sizeof(pycudadrv_DLManagedTensor) + max(ndim, 1) * sizeof(int64_t))
        if m == NULL:
            raise MemoryError()
        m.dl_tensor.data = <void*><uintptr_t>self.ptr
        m.dl_tensor.device.device_type = PYCUDADRV_kDLCUDA
        m.dl_tensor.device.device_id = self.device.ordinal
        m.dl_tensor.ndim = ndim
        m.dl_tensor.dtype.code = code
        m.dl_tensor.dtype.bits = dt.itemsize * 8
        m.dl_tensor.dtype.lanes = 1
        m.dl_tensor.shape = <int64_t*>(<char*>m + sizeof(pycudadrv_DLManagedTensor))
        for k in range(ndim):
            m.dl_tensor.shape[k] = shape[k]
        m.dl_tensor.strides = NULL
        m.dl_tensor.byte_offset = 0
        m.manager_ctx = <void*>self
        m.deleter = _dl_deleter
        Py_INCREF(self)
        return PyCapsule_New(m, "dltensor", _dl_capsule_destructor)

    def close(self):
        """Free an owned allocation (``cuMemFreeAsync`` on the allocation stream,
        after its queued work; ``cuMemFree`` for ``async_alloc=False``). Views
        and foreign buffers just detach. A second close is a no-op."""
        if self.closed:
            return
        self.closed = True
        self.owner = None
        if self.owned and self.ptr != 0:
            ptr = self.ptr
            self.ptr = 0
            _release_allocation(ptr, self.device, self.stream if self.async_alloc else None, True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        if self.owned and not self.closed and self.ptr != 0 and self.device is not None:
            try:
                _release_allocation(self.ptr, self.device, self.stream if self.async_alloc else None, False)
            except Exception:
                pass

    def __repr__(self):
        kind = "view" if (self.root is not None and self.root is not self) else ("owned" if self.owned else "foreign")
        if self.closed:
            return f"<Buffer closed, {self.nbytes} bytes>"
        meta = f", dtype={self.dtype}, shape={self.shape}" if self.dtype is not None else ""
        return (f"<Buffer 0x{self.ptr:x}, {self.nbytes} bytes{meta}, device {self.device.ordinal}, {kind}>")


cdef void _dl_deleter(pycudadrv_DLManagedTensor* m) noexcept nogil:
    with gil:
        Py_DECREF(<object>m.manager_ctx)
    free(m)


cdef void _dl_capsule_destructor(object capsule) noexcept:
    cdef pycudadrv_DLManagedTensor* m
    if PyCapsule_IsValid(capsule, "dltensor"):  # never consumed: we still own it
        m = <pycudadrv_DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
        if m != NULL and m.deleter != NULL:
            m.deleter(m)


cdef class _DLPackOwner:
    """Keeps an imported DLPack tensor alive; calls its deleter when dropped."""
    cdef pycudadrv_DLManagedTensor* m
    cdef object producer

    def __dealloc__(self):
        if self.m != NULL and self.m.deleter != NULL:
            self.m.deleter(self.m)
        self.m = NULL


_DL_KIND = {PYCUDADRV_kDLInt: "i", PYCUDADRV_kDLUInt: "u", PYCUDADRV_kDLFloat: "f",
            PYCUDADRV_kDLComplex: "c", PYCUDADRV_kDLBool: "b"}


cdef Buffer _from_dlpack(obj, device):
    cdef Device dev = as_device(device)
    try:
        dl_dev = obj.__dlpack_device__()
    except AttributeError:
        dl_dev = None
    if dl_dev is not None and int(dl_dev[0]) not in (PYCUDADRV_kDLCUDA, PYCUDADRV_kDLCUDAManaged):
        raise TypeError(f"asbuffer: {type(obj).__name__} lives on DLPack device {tuple(dl_dev)}, not CUDA")
    if dl_dev is not None and device is None:
        dev = get_device(int(dl_dev[1]))
    capsule = obj.__dlpack__(stream=int(<uintptr_t>(<Stream>dev.default_stream).handle))
    if not PyCapsule_IsValid(capsule, "dltensor"):
        raise TypeError("asbuffer: __dlpack__ did not return an unconsumed 'dltensor' capsule")
    cdef pycudadrv_DLManagedTensor* m = <pycudadrv_DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
    cdef _DLPackOwner owner = _DLPackOwner.__new__(_DLPackOwner)
    owner.m = m
    owner.producer = obj
    PyCapsule_SetName(capsule, "used_dltensor")
    cdef pycudadrv_DLTensor* t = &m.dl_tensor
    if t.device.device_type not in (PYCUDADRV_kDLCUDA, PYCUDADRV_kDLCUDAManaged):
        raise TypeError(f"asbuffer: DLPack tensor on device type {t.device.device_type}, not CUDA")
    if t.dtype.lanes != 1 or t.dtype.code not in _DL_KIND:
        raise TypeError(f"asbuffer: unsupported DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, "
                        f"lanes {t.dtype.lanes})")
    dt = np.dtype(f"{_DL_KIND[t.dtype.code]}{t.dtype.bits // 8}") if t.dtype.code != PYCUDADRV_kDLBool \
        else np.dtype(np.bool_)
    shape = tuple(t.shape[k] for k in range(t.ndim))
    count = 1
    for s in shape:
        count *= s
    if t.strides != NULL and count > 1:
        expect = 1
        for k in reversed(range(t.ndim)):
            if shape[k] != 1 and t.strides[k] != expect:
                raise ValueError(f"asbuffer: non-contiguous DLPack tensor (shape {shape}, strides "
                                 f"{tuple(t.strides[j] for j in range(t.ndim))} in elements)")
            expect *= shape[k]
    cdef Buffer b = Buffer.__new__(Buffer)
    b.device = get_device(t.device.device_id)
    b.stream = <Stream>b.device.default_stream
    b.root = b
    b.owner = owner
    b.ptr = <CUdeviceptr><uintptr_t>t.data + t.byte_offset
    b.nbytes = count * dt.itemsize
    b.dtype = dt
    b.shape = shape
    return b


def asbuffer(obj, *, device=None):
    """Wrap a device array from another library as a Buffer, zero-copy,
    keeping it alive: anything exporting ``__cuda_array_interface__`` (CuPy,
    PyTorch, Numba) or ``__dlpack__`` (PyTorch, JAX, CuPy, ...).

    The data must be C-contiguous; the buffer records the object's dtype and
    shape. With DLPack, the producer orders its pending work before this
    device's default stream.

    Raises
    ------
    TypeError
        ``obj`` exports neither protocol, or lives on the host.
    ValueError
        Non-contiguous strides.
    """
    if isinstance(obj, Buffer):
        return obj
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        if hasattr(obj, "__dlpack__"):
            return _from_dlpack(obj, device)
        raise TypeError(f"{type(obj).__name__} exports neither __cuda_array_interface__ nor __dlpack__")
    try:
        ptr = cai_data_pointer(cai)
    except ValueError as e:
        raise TypeError(f"asbuffer: {type(obj).__name__}: {e}") from None
    dt = np.dtype(cai.get("descr", cai["typestr"])) if "descr" in cai and len(cai["descr"]) > 1 else np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is not None:
        expect = []
        acc = dt.itemsize
        for s in reversed(shape):
            expect.append(acc)
            acc *= s
        if tuple(reversed(expect)) != tuple(strides) and int(np.prod(shape)) > 1:
            raise ValueError(f"asbuffer: non-contiguous strides {strides} for shape {shape}")
    cdef Buffer b = Buffer.__new__(Buffer)
    b.device = as_device(device)
    b.stream = <Stream>b.device.default_stream
    producer_stream = cai.get("stream")
    if producer_stream:  # CAI v3: order the producer's pending work before ours
        _order_after(Stream.from_handle(int(producer_stream), b.device), b.stream, b.device)
    b.root = b
    b.owner = obj
    b.ptr = <CUdeviceptr>ptr
    b.nbytes = int(np.prod(shape)) * dt.itemsize
    b.dtype = dt
    b.shape = shape
    return b


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class HostBuffer:
    """Page-locked (pinned) host memory (``cuMemHostAlloc``), exposed as a numpy array.

    Copies between a pinned buffer and a device Buffer are truly asynchronous
    (``cuMemcpyHtoDAsync``/``cuMemcpyDtoHAsync`` return at once and overlap
    with kernels on other streams); copies from ordinary pageable numpy
    memory are synchronous with respect to the host.

    >>> h = HostBuffer.empty((1024,), np.float32)
    >>> h.array[:] = 1.0
    >>> d_buf.write(h.array, stream=s)        # returns immediately

    ``close()`` frees the memory (``cuMemFreeHost``); it raises BufferError
    while numpy arrays made from it are still alive, so freed memory can
    never be read through them.
    """
    cdef void* ptr
    cdef size_t nbytes
    cdef bint closed
    cdef Py_ssize_t exports
    cdef public object dtype
    cdef public object shape
    cdef readonly Device device
    cdef Py_ssize_t _shape1[1]
    cdef Py_ssize_t _strides1[1]

    def __init__(self, *args, **kwargs):
        raise TypeError("create pinned memory with HostBuffer.empty(shape, dtype)")

    @staticmethod
    def empty(shape, dtype=np.uint8, *, device=None):
        """Pinned host memory of ``shape`` elements of ``dtype`` (uninitialised).

        Raises CudaError (``CUDA_ERROR_OUT_OF_MEMORY``) when the pinned
        allocation fails."""
        shape, dt, nbytes = _shape_dtype(shape, dtype)
        cdef HostBuffer h = HostBuffer.__new__(HostBuffer)
        cdef Device dev = as_device(device)
        h.device = dev
        h.dtype = dt
        h.shape = shape
        h.nbytes = nbytes
        if nbytes:
            dev.activate()
            check(driver().p_cuMemHostAlloc(&h.ptr, nbytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc")
        return h

    @property
    def nbytes(self):
        """Size in bytes."""
        return self.nbytes

    @property
    def ptr(self):
        """Host address as int."""
        if self.closed:
            raise ValueError("host buffer is closed")
        return <uintptr_t>self.ptr

    @property
    def array(self):
        """A numpy array over the pinned memory (no copy; keeps this buffer alive)."""
        if self.closed:
            raise ValueError("host buffer is closed")
        return np.frombuffer(self, dtype=self.dtype).reshape(self.shape)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.closed:
            raise ValueError("host buffer is closed")
        self._shape1[0] = <Py_ssize_t>self.nbytes
        self._strides1[0] = 1
        view.buf = self.ptr if self.ptr != NULL else <void*>&self._shape1[0]
        view.obj = self
        view.len = self.nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = "B"
        view.ndim = 1
        view.shape = self._shape1
        view.strides = self._strides1
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1

    def close(self):
        """Free the pinned memory (``cuMemFreeHost``). A second close is a no-op.

        Raises BufferError while arrays made from it are alive."""
        if self.closed:
            return
        if self.exports:
            raise BufferError(f"HostBuffer.close(): {self.exports} numpy view(s) of it are still alive")
        self.closed = True
        if self.ptr != NULL:
            p = <uintptr_t>self.ptr
            self.ptr = NULL
            check(driver().p_cuMemFreeHost(<void*>p), "cuMemFreeHost")

    def __dealloc__(self):
        if not self.closed and self.ptr != NULL:
            try:
                driver().p_cuMemFreeHost(self.ptr)
            except Exception:
                pass

    def __repr__(self):
        if self.closed:
            return "<HostBuffer closed>"
        return f"<HostBuffer pinned, {self.nbytes} bytes, dtype={self.dtype}, shape={self.shape}>"
