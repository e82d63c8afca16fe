# cython: language_level=3
"""Device memory: Buffer (a device allocation or a view of one), its lifetime
(frees ordered after every stream that used it, deferred while a graph or an
export holds it) and its copies."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t, uint8_t, uint16_t, uint32_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, get_device, as_device
from pycudadrv._stream cimport (Stream, Capture, resolve_stream, check_not_capturing, forbidding_capture,
                                order_after)
from pycudadrv._host cimport HostBuffer, is_pinned
from pycudadrv._dlpack cimport export_capsule, check_export_request

import numpy as np
from pycudadrv._host import shape_and_nbytes
from pycudadrv._stream import alloc_trace
from pycudadrv._dlpack import KDL_CUDA
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CaptureError, ClosedError)

__all__ = ["Buffer"]

cdef extern from "cuda.h":
    enum:
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD

cdef set _pools_configured = set()
# Legacy and per-thread default stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD): always valid.
cdef tuple _SPECIAL_STREAMS = (1, 2)


cdef int _configure_pool(Device dev) except -1:
    """Keep freed memory in the device's default pool instead of returning it to
    the OS at every synchronize, so stream-ordered allocation reuses it."""
    if dev.ordinal in _pools_configured:
        return 0
    cdef pycudadrv_driver_api* d = driver()
    cdef CUmemoryPool pool = NULL
    cdef uint64_t threshold = <uint64_t>-1
    check(d.p_cuDeviceGetDefaultMemPool(&pool, dev._handle), "cuDeviceGetDefaultMemPool")
    check(d.p_cuMemPoolSetAttribute(pool, <CUmemPool_attribute>CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
          "cuMemPoolSetAttribute")
    _pools_configured.add(dev.ordinal)
    return 0


cdef object _TOKEN = object()   # only new_buffer() makes Buffers: one made otherwise would crash on use


cdef Buffer new_buffer():
    return Buffer.__new__(Buffer, _TOKEN)


cdef Buffer _new_view(Buffer parent, CUdeviceptr ptr, size_t nbytes, object dtype, object shape):
    cdef Buffer v = new_buffer()
    v.device = parent.device
    v._stream = parent._stream
    v._root = parent._root
    v._owner = parent
    v._ptr = ptr
    v._nbytes = nbytes
    v._dtype = dtype
    v._shape = shape
    return v


cdef class _DeferredFree:
    """An allocation to free: with ``cuMemFreeAsync`` on ``free_stream`` after the
    work of the allocation stream and of every stream that used it, or with
    ``cuMemFree`` (``free_stream`` None). Kept by a capture that forbade the
    free until it ends."""
    cdef CUdeviceptr ptr
    cdef Device device
    cdef Stream alloc_stream
    cdef Stream free_stream
    cdef list users

    cdef int free(self, bint raise_errors) except -1:
        cdef pycudadrv_driver_api* d = driver()
        cdef Stream fs = self.free_stream
        cdef CUresult r
        self.device.activate()
        if fs is None:
            r = d.p_cuMemFree(self.ptr)
            call = "cuMemFree"
        else:
            if fs._closed:
                fs = <Stream>self.device.default_stream
            try:
                if fs is not self.alloc_stream:
                    order_after(fs, self.alloc_stream)
                for u in (self.users or ()):
                    order_after(fs, <Stream>u)
            except Exception:
                if raise_errors:
                    raise
            self.device.activate()
            r = d.p_cuMemFreeAsync(self.ptr, fs._handle)
            call = "cuMemFreeAsync"
        self.ptr = 0
        if raise_errors:
            check(r, call.encode())
        elif r != CUDA_SUCCESS:
            warn_dealloc_failure("Buffer", make_error(r, call))
        return 0

    def _release_deferred(self):
        """Called when the capture that deferred this free ends."""
        if self.ptr != 0:
            self.free(False)


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class Buffer:
    """A device allocation, or a view of part of one.

    Create with :meth:`empty`, :meth:`zeros` or :meth:`from_numpy`. ``nbytes``
    is the size in bytes, ``ptr`` the device pointer as int; optional ``dtype``
    and ``shape`` metadata (read-only; :meth:`view` gives other metadata over
    the same bytes) let :meth:`to_numpy` work without arguments and make
    slicing count elements.

    Allocation is stream-ordered by default (``cuMemAllocAsync`` on the
    device's default pool, whose release threshold is raised so freed memory is
    reused). ``close()`` frees it with ``cuMemFreeAsync`` on the allocation
    stream, ordered after the work queued there and on every other stream that
    used it (one event per stream, no host synchronisation). While a captured
    graph or a DLPack consumer holds the memory, the free waits until they
    release it; once ``__cuda_array_interface__`` was read, until the last
    reference to this object goes. ``async_alloc=False`` uses
    ``cuMemAlloc``/``cuMemFree``. Allocated on a stream that is being captured,
    the buffer is a graph memory node: the graph frees it at its end, so it
    exists only inside each replay. A zero-length buffer has a null pointer
    and costs no driver call. Double close is a no-op; any use after close
    raises ClosedError.

    Exposes ``__cuda_array_interface__`` (version 3) and DLPack.
    """

    def __cinit__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("create Buffers with Buffer.empty(), Buffer.zeros(), Buffer.from_numpy() or "
                                    "asbuffer()")
        self._ptr = 0
        self._nbytes = 0
        self._owned = False
        self._closed = False
        self._root = None
        self._holds = 0

    @staticmethod
    def empty(shape, dtype=None, *, device=None, stream=None, bint async_alloc=True):
        """Uninitialised device memory.

        ``shape`` is a byte count when ``dtype`` is None, else an element shape
        (int or tuple) of ``dtype`` elements.

        Raises
        ------
        ArgumentValueError
            Negative size, or a stream of another device.
        CaptureError
            A capture in progress forbids the allocation (``async_alloc=False``,
            or a stream outside the capture).
        OutOfMemoryError
            ``CUDA_ERROR_OUT_OF_MEMORY`` (a CudaError and a MemoryError; the
            message gives the bytes asked for and the bytes free).
        """
        shape, dt, nbytes = shape_and_nbytes(shape, dtype)
        cdef Device dev = as_device(device)
        cdef Stream s = resolve_stream(stream, dev)
        if s.device is not None and s.device.ordinal != dev.ordinal:
            raise ArgumentValueError(f"Buffer.empty: stream belongs to device {s.device.ordinal}, "
                                     f"not device {dev.ordinal}")
        cdef Buffer b = new_buffer()
        b.device = dev
        b._stream = s
        b._root = b
        b._dtype = dt
        b._shape = shape if dt is not None else None
        b._nbytes = nbytes
        b._owned = True
        b._async_alloc = async_alloc
        b._users = []
        if nbytes == 0:
            return b
        alloc_trace("device allocation", nbytes, s)
        if s._capture is not None and s._capture.body:
            raise CaptureError(f"cannot allocate {nbytes} bytes inside the body of a device loop (each iteration "
                               "would allocate again); allocate before building the loop")
        if not async_alloc:
            check_not_capturing(None, "allocate with cuMemAlloc (async_alloc=False)")
        elif s._capture is None:
            # On a stream that is not the one being captured, the driver refuses
            # cuMemAllocAsync during a global or thread-local capture (and that
            # would invalidate the capture): refuse first, leaving it intact.
            check_not_capturing(None, "allocate device memory on a stream outside the capture "
                                "(allocate before the capture, or on the capturing stream)")
        cdef pycudadrv_driver_api* d = driver()
        dev.activate()
        cdef CUresult r
        if async_alloc:
            _configure_pool(dev)
            r = d.p_cuMemAllocAsync(&b._ptr, nbytes, s._handle)
            call = "cuMemAllocAsync"
        else:
            r = d.p_cuMemAlloc(&b._ptr, nbytes)
            call = "cuMemAlloc"
        if r != CUDA_SUCCESS:
            b._owned = False
            b._closed = True
            ctx = f"allocating {nbytes} bytes on device {dev.ordinal}"
            if r == CUDA_ERROR_OUT_OF_MEMORY:
                try:
                    free, total = dev.memory_info()
                    ctx += f"; the device has {free} bytes free of {total}"
                except Exception:
                    pass
            raise make_error(r, call, ctx)
        if s._capture is not None:
            b._born_in = s._capture
            s._capture.on_alloc(b)
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
        soon as this returns). Raises as :meth:`empty` and :meth:`write`."""
        arr = np.ascontiguousarray(array)
        b = Buffer.empty(arr.shape, arr.dtype, device=device, stream=stream, async_alloc=async_alloc)
        b.write(arr)
        return b

    cdef int ensure_open(self) except -1:
        if self._closed or (self._root is not None and self._root._closed):
            why = self._closed_why if self._closed else self._root._closed_why
            msg = "buffer is closed" if self._closed else "buffer is a view of a closed buffer"
            raise ClosedError(msg + (f" ({why})" if why else ""))
        return 0

    cdef int note_use(self, Stream s) except -1:
        cdef Buffer r = self._root
        if r is None or s is r._stream or s is r._last_user:
            return 0
        if r._users is None:
            r._users = []
        if s not in r._users:
            r._users.append(s)
        r._last_user = s
        return 0

    cdef int add_hold(self) except -1:
        self._root._holds += 1
        return 0

    cdef int release_hold(self) except -1:
        cdef Buffer r = self._root
        r._holds -= 1
        if r._holds <= 0 and r._free_pending:
            r._release(True, False)
        return 0

    def _dlpack_released(self):
        """Called when a DLPack consumer releases its tensor of this buffer."""
        self.release_hold()

    def _free_in_capture(self):
        """Called when the capture that allocated this buffer ends: free it
        inside the graph (a graph memory free node) and close it."""
        cdef Capture c = self._born_in
        if not self._owned or self._ptr == 0 or c is None:
            return
        ptr = self._ptr
        self._ptr = 0
        self._owned = False
        self._closed = True
        self._closed_why = ("it was allocated inside a graph capture, so it exists only while each replay "
                            "runs; allocate it before the capture to use it outside the graph")
        c.stream.device.activate()
        check(driver().p_cuMemFreeAsync(ptr, c.stream._handle), "cuMemFreeAsync")

    def _abandon(self):
        """Called when the capture that allocated this buffer is discarded: the
        allocation never happened outside the (destroyed) graph."""
        self._ptr = 0
        self._owned = False
        self._closed = True
        self._closed_why = "it was allocated inside a graph capture that was discarded"

    cdef int _release(self, bint raise_errors, bint in_dealloc) except -1:
        """Free the allocation of this root once nothing holds it: ordered after
        every stream that used it; deferred to the end of a capture that would
        otherwise record (or forbid) the free."""
        cdef Stream fs, u
        cdef Capture c
        cdef _DeferredFree rec
        if not self._owned or self._ptr == 0:
            return 0
        if self._holds > 0 or (self._cai_exported and not in_dealloc):
            self._free_pending = True
            return 0
        if self._born_in is not None and self._born_in._active:
            # Freed inside the graph that allocated it (a graph memory free node).
            self._free_in_capture()
            return 0
        fs = self._stream if self._async_alloc else None
        if fs is not None and fs._closed:
            fs = <Stream>self.device.default_stream
        c = forbidding_capture(fs)
        if c is None and self._users:
            for u in self._users:
                if u._capture is not None:
                    c = u._capture
                    break
        rec = _DeferredFree.__new__(_DeferredFree)
        rec.ptr, rec.device, rec.alloc_stream, rec.free_stream = self._ptr, self.device, self._stream, fs
        rec.users = self._users
        self._ptr = 0
        self._owned = False
        self._free_pending = False
        self._users = None
        if c is not None:
            c.defer(rec)              # freed when the capture ends, in the same order
            return 0
        return rec.free(raise_errors)

    @property
    def ptr(self):
        """Device pointer as int (0 for an empty buffer). Raises ClosedError after close."""
        self.ensure_open()
        return self._ptr

    @property
    def nbytes(self):
        """Size in bytes."""
        return self._nbytes

    @property
    def dtype(self):
        """Element type (a numpy dtype), or None for raw bytes."""
        return self._dtype

    @property
    def shape(self):
        """Element shape (tuple), or None for raw bytes."""
        return self._shape

    @property
    def size(self):
        """Number of elements (bytes when no dtype is set)."""
        return self._nbytes // (self._dtype.itemsize if self._dtype is not None else 1)

    @property
    def closed(self):
        """Whether this buffer, or the allocation it views, was closed."""
        return self._closed or (self._root is not None and self._root._closed)

    @property
    def stream(self):
        """The Stream this buffer's allocation, free and default copies are ordered on."""
        return self._stream

    def __len__(self):
        return self.size

    cdef _host_view(self, obj, bint writable, name):
        arr = np.asarray(obj)
        if not arr.flags.c_contiguous:
            raise ArgumentValueError(f"{name}: host array must be C-contiguous (got strides {arr.strides}); "
                                     "a solid copy would overwrite its neighbours")
        if writable and not arr.flags.writeable:
            raise ArgumentValueError(f"{name}: host array is read-only")
        return arr

    cdef Stream _copy_stream(self, object stream):
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self._stream
        s.ensure_open()
        if s._capture is not None:
            s._capture.hold(self)
        self.note_use(s)
        return s

    def write(self, data, size_t offset=0, stream=None):
        """Copy host ``data`` (buffer-protocol, C-contiguous) into this buffer at
        byte ``offset`` (``cuMemcpyHtoDAsync``). From pinned memory
        (:class:`HostBuffer`, or any page-locked array) the copy is
        asynchronous: keep the data unchanged until the stream has passed it;
        from pageable memory it returns once the data is staged, so the source
        may be reused at once.

        During a capture of the stream, only pinned memory may be copied (the
        graph keeps it alive and reads it at every replay).

        Raises
        ------
        ArgumentValueError
            ``offset + data.nbytes > nbytes``, or non-contiguous data.
        CaptureError
            Pageable host memory while the stream (or a global capture) is capturing.
        """
        self.ensure_open()
        src = self._host_view(data, False, "write")
        cdef size_t n = src.nbytes
        if offset > self._nbytes or n > self._nbytes - offset:
            raise ArgumentValueError(f"write of {n} bytes at offset {offset} overruns buffer of "
                                     f"{self._nbytes} bytes")
        if n == 0:
            return
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self._stream
        cdef const unsigned char[::1] view = src.reshape(-1).view(np.uint8)
        cdef bint pinned = is_pinned(&view[0])
        if s._capture is not None or forbidding_capture(s) is not None:
            alloc_trace("host-to-device upload", n, s)
            if not pinned:
                check_not_capturing(s, "copy from pageable host memory (pass a pinned HostBuffer's array "
                                    "to capture the upload, or write the data before the capture)")
        s = self._copy_stream(s)
        if s._capture is not None:
            s._capture.hold(data)        # keeps the pinned memory (and its HostBuffer) alive
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuMemcpyHtoDAsync(self._ptr + offset, &view[0], n, s._handle), "cuMemcpyHtoDAsync")

    def read(self, out=None, size_t offset=0, nbytes=None, stream=None, bint synchronize=True):
        """Copy ``nbytes`` (default: to the end) from byte ``offset`` to the
        host and wait for it (``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize``).

        Returns ``out`` (a C-contiguous writable array of exactly that many
        bytes) or a new uint8 array. With ``synchronize=False`` (only sensible
        when ``out`` is pinned, e.g. ``HostBuffer.array``) the copy is left
        running on the stream: synchronise before reading ``out``; such a copy
        into pinned memory may be captured into a graph.

        Raises ArgumentValueError for a range outside the buffer or an
        unsuitable ``out``, CaptureError for a synchronising read (or a
        pageable ``out``) during a capture."""
        self.ensure_open()
        if offset > self._nbytes:
            raise ArgumentValueError(f"read offset {offset} beyond buffer of {self._nbytes} bytes")
        cdef size_t n = (self._nbytes - offset) if nbytes is None else nbytes
        if n > self._nbytes - offset:
            raise ArgumentValueError(f"read of {n} bytes at offset {offset} overruns buffer of "
                                     f"{self._nbytes} bytes")
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        dst = self._host_view(out, True, "read")
        if dst.nbytes != n:
            raise ArgumentValueError(f"read: out has {dst.nbytes} bytes, expected {n}")
        if n == 0:
            return out
        cdef unsigned char[::1] view = dst.reshape(-1).view(np.uint8)
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self._stream
        if synchronize:
            check_not_capturing(s, "copy device memory to the host (it synchronizes)")
        elif (s._capture is not None or forbidding_capture(s) is not None) and not is_pinned(&view[0]):
            check_not_capturing(s, "copy into pageable host memory (read into a pinned HostBuffer's array "
                                "with synchronize=False to capture it)")
        s = self._copy_stream(s)
        if s._capture is not None:
            s._capture.hold(out)
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuMemcpyDtoHAsync(&view[0], self._ptr + offset, n, s._handle), "cuMemcpyDtoHAsync")
            if synchronize:
                check(d.p_cuStreamSynchronize(s._handle), "cuStreamSynchronize")
        return out

    def to_numpy(self, out=None, stream=None):
        """The whole buffer as a host numpy array (waits for the copy).

        With ``out`` (C-contiguous, writable, exactly ``nbytes`` bytes) copies
        into it and returns it; otherwise returns a new array of this buffer's
        ``dtype``/``shape`` (uint8 bytes when none is set)."""
        if out is None:
            if self._dtype is not None:
                out = np.empty(self._shape if self._shape is not None else (self.size,), dtype=self._dtype)
            else:
                out = np.empty(self._nbytes, dtype=np.uint8)
        return self.read(out=out, stream=stream)

    def copy_to(self, Buffer dst not None, nbytes=None, size_t src_offset=0, size_t dst_offset=0, stream=None):
        """Device-to-device copy of ``nbytes`` (default: all of this buffer from
        ``src_offset``) into ``dst`` at ``dst_offset`` (``cuMemcpyDtoDAsync``;
        ``cuMemcpyPeerAsync`` when ``dst`` is on another device, direct where
        peer access is possible and staged by the driver where not). A copy
        across devices waits for the work queued on ``dst``'s stream, and
        ``dst``'s stream waits for the copy.

        Raises ArgumentValueError when either range falls outside its buffer."""
        self.ensure_open()
        dst.ensure_open()
        if src_offset > self._nbytes:
            raise ArgumentValueError(f"copy src_offset {src_offset} beyond source of {self._nbytes} bytes")
        cdef size_t n = (self._nbytes - src_offset) if nbytes is None else nbytes
        if n > self._nbytes - src_offset:
            raise ArgumentValueError(f"copy of {n} bytes at src_offset {src_offset} overruns source of "
                                     f"{self._nbytes} bytes")
        if dst_offset > dst._nbytes or n > dst._nbytes - dst_offset:
            raise ArgumentValueError(f"copy of {n} bytes at dst_offset {dst_offset} overruns destination of "
                                     f"{dst._nbytes} bytes")
        if n == 0:
            return
        cdef Stream s = self._copy_stream(stream)
        cdef bint cross = dst.device.ordinal != self.device.ordinal
        dst.note_use(s)
        if s._capture is not None:
            s._capture.hold(dst)
        if cross:
            order_after(s, dst._stream)       # pending work on the destination device first
        self.device.activate()
        if cross:
            # Direct over NVLink/PCIe when peer access is possible, staged by the driver otherwise.
            check(driver().p_cuMemcpyPeerAsync(dst._ptr + dst_offset, dst.device._context,
                                               self._ptr + src_offset, self.device._context, n, s._handle),
                  "cuMemcpyPeerAsync")
            order_after(dst._stream, s)       # later work on the destination sees the copy
            return
        check(driver().p_cuMemcpyDtoDAsync(dst._ptr + dst_offset, self._ptr + src_offset, n, s._handle),
              "cuMemcpyDtoDAsync")

    def copy_from(self, Buffer src not None, nbytes=None, size_t src_offset=0, size_t dst_offset=0, stream=None):
        """Device-to-device copy from ``src`` into this buffer; see :meth:`copy_to`."""
        src.copy_to(self, nbytes, src_offset, dst_offset, stream)

    def fill(self, value, stream=None):
        """Set every element to ``value`` (``cuMemsetD8/D16/D32Async``).

        ``value`` is a numpy scalar of 1, 2 or 4 bytes, or a Python number
        converted to this buffer's dtype (uint8 bytes when none is set).
        ``nbytes`` must be a multiple of the value's size.

        Raises ArgumentValueError for 8-byte or larger patterns (unless every
        4-byte half is equal) and sizes that do not divide."""
        self.ensure_open()
        if isinstance(value, np.generic):
            v = value
        else:
            dt = self._dtype if self._dtype is not None else np.dtype(np.uint8)
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
            raise ArgumentValueError(f"fill: a {len(np.asarray(v).tobytes())}-byte pattern {value!r} cannot be "
                                     "set with cuMemsetD8/D16/D32; use 1-, 2- or 4-byte values")
        if self._nbytes % size:
            raise ArgumentValueError(f"fill: buffer of {self._nbytes} bytes is not a multiple of the "
                                     f"{size}-byte pattern")
        if self._nbytes == 0:
            return
        cdef Stream s = self._copy_stream(stream)
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        cdef size_t count = self._nbytes // size
        if size == 1:
            check(d.p_cuMemsetD8Async(self._ptr, (<uint8_t*><char*>raw)[0], count, s._handle), "cuMemsetD8Async")
        elif size == 2:
            check(d.p_cuMemsetD16Async(self._ptr, (<uint16_t*><char*>raw)[0], count, s._handle),
                  "cuMemsetD16Async")
        else:
            check(d.p_cuMemsetD32Async(self._ptr, (<uint32_t*><char*>raw)[0], count, s._handle),
                  "cuMemsetD32Async")

    def __getitem__(self, key):
        """``buf[a:b]``: a view (no copy) of elements a..b (bytes when no dtype
        is set). Keeps the parent alive; usable as a kernel argument and in
        copies; closed when the allocation is."""
        self.ensure_open()
        if not isinstance(key, slice):
            raise ArgumentTypeError("Buffer supports slices only, e.g. buf[16:32]")
        itemsize = self._dtype.itemsize if self._dtype is not None else 1
        start, stop, step = key.indices(self._nbytes // itemsize)
        if step != 1:
            raise ArgumentValueError("Buffer slices must be contiguous (step 1)")
        if stop < start:
            stop = start
        return _new_view(self, self._ptr + start * itemsize, (stop - start) * itemsize, self._dtype,
                         (stop - start,) if self._dtype is not None else None)

    def view(self, dtype=None, shape=None):
        """The same bytes with other metadata: ``dtype`` (None: raw bytes) and
        ``shape`` (default: as many ``dtype`` elements as fit, 1-D). No copy;
        a view like ``buf[a:b]``.

        Raises ArgumentValueError when ``shape`` x the item size is not
        exactly ``nbytes`` (or ``nbytes`` is not a multiple of it)."""
        self.ensure_open()
        _, dt, _ = shape_and_nbytes((), dtype)
        itemsize = dt.itemsize if dt is not None else 1
        if shape is None:
            if self._nbytes % itemsize:
                raise ArgumentValueError(f"view: {self._nbytes} bytes are not a whole number of {dt} elements")
            shape = (self._nbytes // itemsize,)
        shape, _, nbytes = shape_and_nbytes(shape, dt)
        if nbytes != self._nbytes:
            raise ArgumentValueError(f"view: shape {shape} of {dt if dt is not None else 'bytes'} is {nbytes} "
                                     f"bytes, the buffer has {self._nbytes}")
        return _new_view(self, self._ptr, self._nbytes, dt, shape if dt is not None else None)

    @property
    def __cuda_array_interface__(self):
        self.ensure_open()
        if self._root is not None:
            self._root._cai_exported = True   # the free now waits for the last reference to the buffer
        shape = self._shape if self._shape is not None else (self.size,)
        typestr = self._dtype.str if self._dtype is not None else "|u1"
        d = {"shape": tuple(shape), "typestr": typestr, "data": (int(self._ptr), False),
             "strides": None, "version": 3}
        if self._stream is not None:
            d["stream"] = int(<uintptr_t>self._stream._handle) or None
        if self._dtype is not None and self._dtype.fields is not None:
            d["descr"] = self._dtype.descr
        return d

    def __dlpack_device__(self):
        """``(kDLCUDA = 2, device ordinal)``."""
        return (KDL_CUDA, self.device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (``"dltensor"``), zero-copy; the capsule
        keeps this buffer alive, and a ``close()`` meanwhile waits for the
        consumer to release the tensor before the memory is freed.

        ``stream`` is the consumer's stream as an int (1: legacy default, 2:
        per-thread default, -1: no synchronisation): work already queued on
        this buffer's streams is made to precede the consumer's
        (``cuEventRecord`` + ``cuStreamWaitEvent``), and the eventual free
        waits for the consumer's stream.

        Raises ArgumentValueError for ``copy=True`` or a ``dl_device`` other
        than this buffer's, ClosedError for a closed buffer."""
        self.ensure_open()
        check_export_request(stream, dl_device, copy, self.device.ordinal)
        cdef Stream consumer
        if stream is not None and stream != -1:
            consumer = Stream.from_handle(int(stream), self.device)
            order_after(consumer, self._stream)
            for u in (self._root._users or ()):
                order_after(consumer, <Stream>u)
            self.note_use(consumer)
        dt = self._dtype if self._dtype is not None else np.dtype(np.uint8)
        shape = tuple(self._shape) if self._shape is not None else (self.size,)
        cap = export_capsule(self, self._ptr, self.device.ordinal, dt, shape)
        self.add_hold()
        return cap

    def close(self):
        """Free an owned allocation (``cuMemFreeAsync`` on the allocation
        stream, after its queued work and the work of every other stream that
        used it; ``cuMemFree`` for ``async_alloc=False``); deferred while a
        graph or export holds it (see the class docs). Views and foreign
        buffers just detach. A second close is a no-op."""
        if self._closed:
            return
        self._closed = True
        if self._owned and self._ptr != 0:
            self._release(True, False)
        elif self._root is not self:
            self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        if self._owned and self._ptr != 0 and self.device is not None and self._root is self:
            try:
                self._holds = 0
                self._release(False, True)
            except Exception as e:
                warn_dealloc_failure("Buffer", e)

    def __repr__(self):
        kind = "view" if (self._root is not None and self._root is not self) else ("owned" if self._owned else "foreign")
        if self.closed:
            return f"<Buffer closed, {self._nbytes} bytes>"
        meta = f", dtype={self._dtype}, shape={self._shape}" if self._dtype is not None else ""
        return f"<Buffer 0x{self._ptr:x}, {self._nbytes} bytes{meta}, device {self.device.ordinal}, {kind}>"
