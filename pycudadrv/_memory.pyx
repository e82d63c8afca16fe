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
from pycudadrv._stream cimport (Stream, Capture, resolve_stream, check_not_capturing, forbidding_capture, order_after,
                                order_after_uses)
from pycudadrv._host cimport keep_until_done
from pycudadrv._host cimport HostBuffer, is_pinned
from pycudadrv._alloc cimport Allocation, allocate
from pycudadrv._dlpack cimport export_capsule, check_export_request

import math
import numpy as np
from pycudadrv._host import shape_and_nbytes
from pycudadrv._textargs import yes_no
from pycudadrv._ordering import alloc_trace
from pycudadrv._dlpack import KDL_CUDA
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CaptureError, ClosedError, short_repr)
from pycudadrv._usage import BufferUsages, usage_bits, names as usage_names

__all__ = ["Buffer"]

# Legacy and per-thread default stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD): always valid.
cdef tuple _SPECIAL_STREAMS = (1, 2)
cdef object _TOKEN = object()   # only buffer_over() makes Buffers: one made otherwise would crash on use


cdef Buffer buffer_over(Allocation alloc, CUdeviceptr ptr, size_t nbytes, object dtype, object shape, Buffer parent):
    cdef Buffer b = Buffer.__new__(Buffer, _TOKEN)
    b.device = alloc.device
    b._alloc = alloc
    b._parent = parent
    b._ptr = ptr
    b._nbytes = nbytes
    b._dtype = dtype
    b._shape = shape
    return b


cpdef object _host_array(object obj, bint writable, str name):
    """`obj` (host data to copy from, or with `writable` memory to copy into) as a C-contiguous
    numpy array over the same memory; ArgumentTypeError/ArgumentValueError naming `name` and
    what is wrong otherwise. Used by Buffer's copies and Queue.copy."""
    if writable and not isinstance(obj, np.ndarray):
        # Memory to write into: anything numpy would copy first (a list) would lose the data.
        try:
            obj = memoryview(obj)
        except TypeError:
            arr = np.asarray(obj) if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__") else None
            if arr is None or arr.base is None:       # no memory of its own to share: a copy
                raise ArgumentTypeError(f"{name}: out must be writable host memory (a numpy array, "
                                        f"bytearray, HostBuffer.array), got {type(obj).__name__}") from None
            obj = arr
    arr = np.asarray(obj)
    if arr.dtype.hasobject or arr.dtype.kind in "OUSM":
        raise ArgumentTypeError(f"{name}: host data must be numbers or bytes (buffer protocol), got "
                                f"{type(obj).__name__} {short_repr(obj)}")
    if not arr.flags.c_contiguous:
        raise ArgumentValueError(f"{name}: host array must be C-contiguous (got strides {arr.strides}); "
                                 "a solid copy would overwrite its neighbours")
    if writable and not arr.flags.writeable:
        raise ArgumentValueError(f"{name}: host array is read-only")
    return arr


cpdef size_t _byte_arg(object v, str name, str who) except? 0xFFFFFFFFFFFFFFFF:
    """An offset or size argument of the copy family: an int (numpy ints too) of bytes, never
    negative; a float or bool is refused (slicing counts elements, these count bytes)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ArgumentTypeError(f"{who}: {name} counts bytes and must be an int, got {type(v).__name__} {v!r:.40}"
                                " (slicing, buf[a:b], counts elements)")
    if v < 0 or v >= 2**64:
        raise ArgumentValueError(f"{who}: {name} must be a non-negative number of bytes, got {v}")
    return <size_t>v


cdef int _check_writable(Buffer b, str who) except -1:
    if b._alloc.read_only:
        raise ArgumentValueError(f"{who}: the buffer is read-only (its producer exported it with "
                                 "__cuda_array_interface__ data=(ptr, True)); pycudadrv writes nothing into it")
    return 0


# Fill values that are numbers (numpy scalars of these kinds keep their own bytes).
cdef tuple _FILL_KINDS = ("b", "i", "u", "f", "c")


cdef object _fill_value(object value, object dtype):
    """`value` as the numpy scalar whose bytes fill() repeats (Buffer.fill's rules) for a buffer
    of `dtype` (None: raw bytes)."""
    dt = dtype if dtype is not None else np.dtype(np.uint8)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()           # a 0-d array is its value, converted as a Python number is
    if isinstance(value, np.generic):
        if value.dtype.kind not in _FILL_KINDS or value.dtype in (np.longdouble, np.clongdouble):
            raise ArgumentTypeError(f"fill: a {value.dtype} value is not a type of device data; give a numpy "
                                    "scalar of a bool, integer, float or complex type of 1-16 bytes")
        if dtype is not None and value.dtype.itemsize > dt.itemsize:
            raise ArgumentValueError(f"fill: a {value.dtype} value ({value.dtype.itemsize} bytes) for a buffer of "
                                     f"{dt} ({dt.itemsize}-byte elements) would repeat its bytes across elements; "
                                     f"give {dt.type.__name__}(v) or a Python number (or fill a raw view for a "
                                     "bit pattern)")
        return value
    if not isinstance(value, (int, float, complex)):
        raise ArgumentTypeError(f"fill: the value must be a number (int, float, complex, bool) or a numpy scalar, "
                                f"got {type(value).__name__} {value!r:.40}")
    if isinstance(value, complex) and dt.kind != "c":
        raise ArgumentTypeError(f"fill: a complex value {value!r} for a buffer of {dt} would lose its imaginary "
                                "part; give a real value, or view the buffer as a complex dtype")
    if dt.kind in "iub":
        if isinstance(value, float) and not math.isfinite(value):
            raise ArgumentValueError(f"fill: {value!r} is not representable as {dt}")
        v = int(value)                # a float is truncated, as numpy's fill does
        if dt.kind == "b":
            return np.bool_(v != 0)
        info = np.iinfo(dt)
        if not info.min <= v <= info.max:
            raise ArgumentValueError(f"fill: {value!r} is not representable as {dt} (range [{info.min}, "
                                     f"{info.max}])")
        return np.array(v, dtype=dt)[()]
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            v = np.array(value, dtype=np.complex128 if isinstance(value, complex) else np.float64).astype(dt)[()]
    except OverflowError:
        raise ArgumentValueError(f"fill: {value!r:.40} overflows {dt}") from None
    if dt.kind in "fc" and np.isinf(v).any() and not np.isinf(np.array(value)).any():
        raise ArgumentValueError(f"fill: {value!r} overflows {dt} (it would become inf)")
    return v


cdef Buffer _new_buffer(object shape, object dtype, object device, object stream, object async_alloc, object usage,
                        str who):
    """Buffer.empty's allocation, its arguments checked in the name of ``who`` (empty, zeros, from_numpy)."""
    cdef bint from_pool = yes_no(async_alloc, "async_alloc", who)
    shape, dt, nbytes = shape_and_nbytes(shape, dtype)
    cdef unsigned int bits = usage_bits(usage, who)
    cdef Device dev = as_device(device, who)
    cdef Stream s = resolve_stream(stream, dev)
    if s.device is not None and s.device.ordinal != dev.ordinal:
        raise ArgumentValueError(f"{who}: stream belongs to device {s.device.ordinal}, not device {dev.ordinal}")
    cdef Allocation a = allocate(nbytes, dev, s, from_pool)
    a.usage = bits
    return buffer_over(a, a.ptr, nbytes, dt, shape if dt is not None else None, None)


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
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
        self._closed = False

    @staticmethod
    def empty(shape, dtype=None, *, device=None, stream=None, async_alloc=True, usage=None):
        """Uninitialised device memory.

        ``shape`` is a byte count when ``dtype`` is None, else an element shape
        (int or tuple) of ``dtype`` elements. ``usage`` (a
        :class:`BufferUsages` set; None: ``ALL``) is what the buffer may be
        used for, read back as :attr:`usage` and shared by its views.

        Raises
        ------
        ArgumentTypeError
            A ``usage`` that is not a BufferUsages set.
        ArgumentValueError
            Negative size, a stream of another device, or an empty ``usage``.
        CaptureError
            A capture in progress forbids the allocation (``async_alloc=False``,
            or a stream outside the capture).
        OutOfMemoryError
            ``CUDA_ERROR_OUT_OF_MEMORY`` (a CudaError and a MemoryError; the
            message gives the bytes asked for and the bytes free).
        """
        return _new_buffer(shape, dtype, device, stream, async_alloc, usage, "Buffer.empty")

    @staticmethod
    def zeros(shape, dtype=None, *, device=None, stream=None, async_alloc=True, usage=None):
        """Like :meth:`empty`, then set to zero (``cuMemsetD8Async``)."""
        b = _new_buffer(shape, dtype, device, stream, async_alloc, usage, "Buffer.zeros")
        b.fill(0)
        return b

    @staticmethod
    def from_numpy(array, *, device=None, stream=None, async_alloc=True, usage=None):
        """A new Buffer holding a copy of ``array`` (any buffer-protocol object;
        non-contiguous input is first copied to C order). Keeps its dtype and
        shape (``cuMemcpyHtoDAsync``; pageable source memory may be reused as
        soon as this returns); ``usage`` as in :meth:`empty`. Raises as
        :meth:`empty` and :meth:`write`."""
        arr = None if isinstance(array, str) else np.ascontiguousarray(array)
        if arr is None or arr.dtype.hasobject:
            raise ArgumentTypeError(f"Buffer.from_numpy: array must be an array of numbers (a numpy array or any "
                                    f"buffer-protocol object), got {type(array).__name__} {short_repr(array)}")
        b = _new_buffer(arr.shape, arr.dtype, device, stream, async_alloc, usage, "Buffer.from_numpy")
        b.write(arr)
        return b

    cdef int ensure_open(self) except -1:
        if self._closed:
            raise ClosedError("buffer is closed")
        cdef Allocation a = self._alloc
        if a.freed:
            why = f" ({a.why})" if a.why else ""
            raise ClosedError(("buffer is closed" if self._parent is None else "buffer is a view of a closed buffer")
                              + why)
        return 0

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
        return self._closed or self._alloc.freed

    @property
    def readonly(self):
        """Whether the memory is read-only to pycudadrv: another library's array
        exported with ``__cuda_array_interface__`` ``data=(ptr, True)``
        (``asbuffer``). ``write``, ``fill`` and copies into it raise
        ArgumentValueError; kernels are not checked (a kernel's writes are
        not known)."""
        return self._alloc.read_only

    @property
    def stream(self):
        """The Stream this buffer's allocation, free and default copies are ordered on."""
        return self._alloc.stream

    @property
    def usage(self):
        """What the buffer may be used for (:class:`BufferUsages`), given at
        creation (default ``ALL``; another library's memory: ``ALL``) and
        shared by every view of the allocation. An indirect dispatch needs
        ``INDIRECT``; nothing else is checked."""
        return BufferUsages(self._alloc.usage)

    cpdef bint _has_usage(self, unsigned int needed):
        """Whether the allocation has every usage bit of ``needed`` (one C test)."""
        return (self._alloc.usage & needed) == needed

    def __len__(self):
        return self.size

    cdef Stream _copy_stream(self, object stream):
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self._alloc.stream
        s.ensure_open()
        if s._capture is not None:
            s._capture.hold(self)
        self._alloc.use_on(s)
        return s

    def write(self, data, offset=0, stream=None):
        """Copy host ``data`` (buffer-protocol, C-contiguous) into this buffer at
        byte ``offset`` (``cuMemcpyHtoDAsync``). From pinned memory
        (:class:`HostBuffer`, or any page-locked array) the copy is
        asynchronous: keep the data unchanged until the stream has passed it;
        from pageable memory it returns once the data is staged, so the source
        may be reused at once. A pinned source is kept alive until the copy
        has run (``del`` right after the call is safe). ``offset`` counts
        bytes, as every offset and size of the copy methods does (slicing,
        ``buf[a:b]``, counts elements).

        During a capture of the stream, only pinned memory may be copied (the
        graph keeps it alive and reads it at every replay).

        Raises
        ------
        ArgumentValueError
            ``offset + data.nbytes > nbytes``, or non-contiguous data.
        CaptureError
            Pageable host memory while the stream (or a global capture) is capturing.
        """
        cdef size_t off = _byte_arg(offset, "offset", "Buffer.write")
        self.ensure_open()
        _check_writable(self, "Buffer.write")
        src = _host_array(data, False, "write")
        cdef size_t n = src.nbytes
        if off > self._nbytes or n > self._nbytes - off:
            raise ArgumentValueError(f"write of {n} bytes at offset {off} overruns buffer of "
                                     f"{self._nbytes} bytes")
        if n == 0:
            return
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self._alloc.stream
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
            check(d.p_cuMemcpyHtoDAsync(self._ptr + off, &view[0], n, s._handle), "cuMemcpyHtoDAsync")
        s.mark_use()
        if pinned:
            keep_until_done(s, data)     # the DMA engine reads it later: never freed (or reused) before that

    def read(self, out=None, offset=0, nbytes=None, stream=None, synchronize=True):
        """Copy ``nbytes`` (default: to the end) from byte ``offset`` to the
        host and wait for it (``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize``).

        Returns ``out`` (a C-contiguous writable array of exactly that many
        bytes) or a new uint8 array. With ``synchronize=False`` (only sensible
        when ``out`` is pinned, e.g. ``HostBuffer.array``) the copy is left
        running on the stream: synchronise before reading ``out``; such a copy
        into pinned memory may be captured into a graph.

        Raises ArgumentValueError for a range outside the buffer or an
        unsuitable ``out``, ArgumentTypeError for an ``offset`` or ``nbytes``
        that is not an int (both count bytes), CaptureError for a synchronising
        read (or a pageable ``out``) during a capture. A pinned ``out`` of a
        read left running is kept alive until the copy has run."""
        cdef bint wait = yes_no(synchronize, "synchronize", "Buffer.read")
        cdef size_t off = _byte_arg(offset, "offset", "Buffer.read")
        cdef size_t n
        self.ensure_open()
        if off > self._nbytes:
            raise ArgumentValueError(f"read offset {off} beyond buffer of {self._nbytes} bytes")
        n = (self._nbytes - off) if nbytes is None else _byte_arg(nbytes, "nbytes", "Buffer.read")
        if n > self._nbytes - off:
            raise ArgumentValueError(f"read of {n} bytes at offset {off} overruns buffer of "
                                     f"{self._nbytes} bytes")
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        dst = _host_array(out, True, "read")
        if dst.nbytes != n:
            raise ArgumentValueError(f"read: out has {dst.nbytes} bytes, expected {n}")
        if n == 0:
            return out
        cdef unsigned char[::1] view = dst.reshape(-1).view(np.uint8)
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self._alloc.stream
        if wait:
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
            check(d.p_cuMemcpyDtoHAsync(&view[0], self._ptr + off, n, s._handle), "cuMemcpyDtoHAsync")
            if wait:
                check(d.p_cuStreamSynchronize(s._handle), "cuStreamSynchronize")
        s.mark_use()
        if not wait and is_pinned(&view[0]):
            keep_until_done(s, out)      # written by the DMA engine later: never freed before that
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

    def copy_to(self, dst, nbytes=None, src_offset=0, dst_offset=0, stream=None):
        """Device-to-device copy of ``nbytes`` (default: all of this buffer from
        ``src_offset``) into ``dst`` at ``dst_offset``, all in bytes
        (``cuMemcpyDtoDAsync``; ``cuMemcpyPeerAsync`` when ``dst`` is on
        another device, direct where peer access is possible and staged by
        the driver where not). The copy runs on ``stream`` (default: this
        buffer's stream). A copy across devices waits for the work queued on
        every stream that used either buffer (their writers and readers), and
        ``dst``'s stream waits for the copy.

        Raises ArgumentValueError when either range falls outside its buffer
        or ``dst`` is read-only, ArgumentTypeError for a ``dst`` that is not a
        Buffer or an offset or size that is not an int."""
        if not isinstance(dst, Buffer):
            raise ArgumentTypeError(f"Buffer.copy_to: dst must be a Buffer, got {type(dst).__name__} "
                                    f"{short_repr(dst)} (host memory: read(out=...); another library's "
                                    "array: asbuffer(x))")
        cdef Buffer dbuf = <Buffer>dst
        cdef size_t so = _byte_arg(src_offset, "src_offset", "Buffer.copy_to")
        cdef size_t do = _byte_arg(dst_offset, "dst_offset", "Buffer.copy_to")
        cdef size_t n
        self.ensure_open()
        dbuf.ensure_open()
        _check_writable(dbuf, "Buffer.copy_to (destination)")
        if so > self._nbytes:
            raise ArgumentValueError(f"copy src_offset {so} beyond source of {self._nbytes} bytes")
        n = (self._nbytes - so) if nbytes is None else _byte_arg(nbytes, "nbytes", "Buffer.copy_to")
        if n > self._nbytes - so:
            raise ArgumentValueError(f"copy of {n} bytes at src_offset {so} overruns source of "
                                     f"{self._nbytes} bytes")
        if do > dbuf._nbytes or n > dbuf._nbytes - do:
            raise ArgumentValueError(f"copy of {n} bytes at dst_offset {do} overruns destination of "
                                     f"{dbuf._nbytes} bytes")
        if n == 0:
            return
        cdef Stream s = self._copy_stream(stream)
        cdef bint cross = dbuf.device.ordinal != self.device.ordinal
        cdef Allocation da = dbuf._alloc
        if cross:
            # Every writer of the source and every reader or writer of the destination first (the
            # streams that used either), then the copy; later work on the destination sees it.
            _order_after_users(s, self._alloc)
            _order_after_users(s, da)
        da.use_on(s)
        if s._capture is not None:
            s._capture.hold(dbuf)
        self.device.activate()
        if cross:
            check(driver().p_cuMemcpyPeerAsync(dbuf._ptr + do, dbuf.device._context,
                                               self._ptr + so, self.device._context, n, s._handle),
                  "cuMemcpyPeerAsync")
            s.mark_use()
            order_after(da.stream, s)
            return
        check(driver().p_cuMemcpyDtoDAsync(dbuf._ptr + do, self._ptr + so, n, s._handle), "cuMemcpyDtoDAsync")
        s.mark_use()

    def copy_from(self, src, nbytes=None, src_offset=0, dst_offset=0, stream=None):
        """Device-to-device copy from ``src`` (a Buffer) into this buffer; see :meth:`copy_to`."""
        if not isinstance(src, Buffer):
            raise ArgumentTypeError(f"Buffer.copy_from: src must be a Buffer, got {type(src).__name__} "
                                    f"{short_repr(src)} (host memory: write(data); another library's array: "
                                    "asbuffer(x))")
        src.copy_to(self, nbytes, src_offset, dst_offset, stream)

    def fill(self, value, stream=None):
        """Set every element to ``value`` (``cuMemsetD8/D16/D32Async``; an 8- or
        16-byte pattern, such as a float64 NaN, with one ``cuMemsetD2D32Async``
        per 4-byte word, strided by the pattern's size).

        ``value`` is a Python number (or 0-d array) converted to this
        buffer's dtype (uint8 bytes when none is set), or a numpy scalar of 1,
        2, 4, 8 or 16 bytes whose bytes are repeated as they are (a bit
        pattern: ``np.uint32(0x7FC00000)`` into float32); with a dtype set it
        may not be larger than an element (``np.float64`` into float32 would
        straddle two elements).
        ``nbytes`` must be a multiple of the value's size.

        Raises ArgumentValueError for other pattern sizes, sizes that do not
        divide, or a pattern at an address that is not a multiple of its
        size (of 4 for 8- and 16-byte patterns); a Python value out of the
        dtype's range (an integer outside it, a finite float that would become
        inf), or a read-only buffer. Raises ArgumentTypeError for a value that
        is not a number (None, a str, ...), a complex value for a real dtype,
        or a numpy scalar of no device type (object, str, longdouble)."""
        self.ensure_open()
        _check_writable(self, "Buffer.fill")
        v = _fill_value(value, self._dtype)
        raw = np.asarray(v).tobytes()
        full = len(raw)
        if len(raw) == 16 and raw[:8] == raw[8:]:
            raw = raw[:8]
        if len(raw) == 8 and raw[:4] == raw[4:]:
            raw = raw[:4]
        if len(raw) == 4 and raw[:2] == raw[2:]:
            raw = raw[:2]
        if len(raw) == 2 and raw[:1] == raw[1:]:
            raw = raw[:1]
        cdef size_t size = len(raw)
        if size not in (1, 2, 4, 8, 16):
            raise ArgumentValueError(f"fill: a {full}-byte pattern {value!r} cannot be set with cuMemset; use a "
                                     "value of 1, 2, 4, 8 or 16 bytes")
        if self._nbytes % size:
            raise ArgumentValueError(f"fill: buffer of {self._nbytes} bytes is not a multiple of the "
                                     f"{size}-byte pattern")
        if self._ptr % min(size, 4):
            raise ArgumentValueError(f"fill: {'an' if size == 8 else 'a'} {size}-byte pattern needs a "
                                     f"{min(size, 4)}-byte aligned address; this view starts at 0x{self._ptr:x}")
        if self._nbytes == 0:
            return
        cdef Stream s = self._copy_stream(stream)
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        cdef size_t count = self._nbytes // size
        cdef size_t k
        cdef const unsigned char* p = raw
        if size == 1:
            check(d.p_cuMemsetD8Async(self._ptr, (<uint8_t*>p)[0], count, s._handle), "cuMemsetD8Async")
        elif size == 2:
            check(d.p_cuMemsetD16Async(self._ptr, (<uint16_t*>p)[0], count, s._handle), "cuMemsetD16Async")
        elif size == 4:
            check(d.p_cuMemsetD32Async(self._ptr, (<uint32_t*>p)[0], count, s._handle), "cuMemsetD32Async")
        else:
            # Word k of every pattern: a 2D memset one 32-bit word wide, `size` bytes of pitch, `count` rows.
            for k in range(size // 4):
                check(d.p_cuMemsetD2D32Async(self._ptr + 4 * k, size, (<uint32_t*>(p + 4 * k))[0], 1, count,
                                             s._handle), "cuMemsetD2D32Async")
        s.mark_use()

    def __getitem__(self, key):
        """``buf[a:b]``: a view (no copy) of elements a..b (bytes when no dtype
        is set). Keeps the parent alive; usable as a kernel argument and in
        copies; closed when the allocation is."""
        self.ensure_open()
        if not isinstance(key, slice):
            raise ArgumentTypeError("Buffer supports slices only, e.g. buf[16:32]")
        itemsize = self._dtype.itemsize if self._dtype is not None else 1
        for part in (key.start, key.stop, key.step):
            if part is not None and (isinstance(part, (bool, np.bool_)) or not hasattr(type(part), "__index__")):
                raise ArgumentTypeError(f"Buffer slice bounds must be ints (elements) or None, got "
                                        f"{type(part).__name__} {part!r:.40}")
        if key.step is not None and key.step.__index__() != 1:
            raise ArgumentValueError("Buffer slices must be contiguous (step 1)")
        start, stop, step = key.indices(self._nbytes // itemsize)
        if step != 1:
            raise ArgumentValueError("Buffer slices must be contiguous (step 1)")
        if stop < start:
            stop = start
        return buffer_over(self._alloc, self._ptr + start * itemsize, (stop - start) * itemsize, self._dtype,
                           (stop - start,) if self._dtype is not None else None, self)

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
        return buffer_over(self._alloc, self._ptr, self._nbytes, dt, shape if dt is not None else None, self)

    @property
    def __cuda_array_interface__(self):
        self.ensure_open()
        cdef Allocation a = self._alloc
        a.cai_exported = True       # the free now waits for the last reference to the buffer
        shape = self._shape if self._shape is not None else (self.size,)
        typestr = self._dtype.str if self._dtype is not None else "|u1"
        d = {"shape": tuple(shape), "typestr": typestr, "data": (int(self._ptr), bool(a.read_only)),
             "strides": None, "version": 3}
        if a.stream is not None:
            d["stream"] = int(<uintptr_t>a.stream._handle) or None
        if self._dtype is not None and self._dtype.fields is not None:
            d["descr"] = self._dtype.descr
        return d

    def __dlpack_device__(self):
        """``(kDLCUDA = 2, device ordinal)``."""
        return (KDL_CUDA, self.device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (``"dltensor"``), zero-copy; the capsule
        holds the allocation, and a ``close()`` meanwhile waits for the
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
        cdef Allocation a = self._alloc
        if stream is not None and stream != -1:
            consumer = Stream.from_handle(int(stream), self.device)
            _order_after_users(consumer, a)
            a.use_on(consumer)
        dt = self._dtype if self._dtype is not None else np.dtype(np.uint8)
        shape = tuple(self._shape) if self._shape is not None else (self.size,)
        return export_capsule(a, self._ptr, self.device.ordinal, dt, shape)

    def close(self):
        """Free an owned allocation (``cuMemFreeAsync`` on the allocation
        stream, after its queued work and the work of every other stream that
        used it; ``cuMemFree`` for ``async_alloc=False``); deferred while a
        graph or export holds it (see the class docs). Closing a foreign
        buffer (``asbuffer``) lets go of the other library's memory; its views
        are closed with it. A view just detaches. A second close is a no-op."""
        if self._closed:
            return
        self._closed = True
        if self._parent is None and self._alloc is not None:
            self._alloc.request_free(True, False)

    def _user_streams(self):
        """The streams a free of this buffer's allocation waits for (besides its allocation stream), as
        the deferred free will see them: a list of Streams (for the tests)."""
        return list(self._alloc.users or ())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        # The allocation's own Buffer is gone, so are its views (they keep it alive): nothing
        # reaches the memory through this object any more; holds (graphs, capsules) still delay it.
        cdef Allocation a = self._alloc
        if self._parent is None and a is not None and a.device is not None:
            try:
                a.cai_exported = False
                a.request_free(False, True)
            except Exception as e:
                warn_dealloc_failure("Buffer", e)

    def __repr__(self):
        kind = "view" if self._parent is not None else ("owned" if self._alloc.owned else "foreign")
        if self.closed:
            return f"<Buffer closed, {self._nbytes} bytes>"
        meta = f", dtype={self._dtype}, shape={self._shape}" if self._dtype is not None else ""
        if self._alloc.usage != BufferUsages.ALL.value:
            meta += f", usage={usage_names(self._alloc.usage)}"
        return f"<Buffer 0x{self._ptr:x}, {self._nbytes} bytes{meta}, device {self.device.ordinal}, {kind}>"


cdef int _order_after_users(Stream consumer, Allocation a) except -1:
    """Make `consumer` wait for the work queued so far on every stream that used `a`."""
    cdef object u
    order_after_uses(consumer, a.stream)
    for u in (a.users or ()):
        order_after_uses(consumer, <Stream>u)
    return 0
