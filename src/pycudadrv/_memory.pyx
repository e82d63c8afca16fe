# cython: language_level=3
"""Device memory: Buffer (device allocation or a view of one) and asbuffer()."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t, uint8_t, uint16_t, uint32_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, get_device, current_device
from pycudadrv._stream cimport Stream, resolve_stream, check_not_capturing

import numpy as np

cdef extern from "cuda.h":
    enum:
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD

ctypedef void* CUmemoryPool_p

cdef set _pools_configured = set()


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


cdef Device _as_device(device):
    if device is None:
        return current_device()
    if isinstance(device, Device):
        return <Device>device
    return get_device(int(device))


def _shape_dtype(shape, dtype):
    dt = np.dtype(dtype) if dtype is not None else None
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(int(s) for s in shape)
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
        cdef Device dev = _as_device(device)
        cdef Stream s = resolve_stream(stream, dev)
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
        byte ``offset`` (``cuMemcpyHtoDAsync``).

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

    def read(self, out=None, size_t offset=0, nbytes=None, stream=None):
        """Copy ``nbytes`` (default: to the end) from byte ``offset`` to the
        host and wait for it (``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize``).

        Returns ``out`` (a C-contiguous writable array of exactly that many
        bytes) or a new uint8 array.

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
        check_not_capturing(s, "copy device memory to the host (it synchronizes)")
        cdef pycudadrv_driver_api* d = driver()
        self.device.activate()
        with nogil:
            check(d.p_cuMemcpyDtoHAsync(&view[0], self.ptr + offset, n, s.handle), "cuMemcpyDtoHAsync")
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
        ``src_offset``) into ``dst`` at ``dst_offset`` (``cuMemcpyDtoDAsync``).

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
        if dst.device.ordinal != self.device.ordinal:
            raise NotImplementedError("copies between devices are not supported yet")
        cdef Stream s = resolve_stream(stream, self.device) if stream is not None else self.stream
        if s._capture is not None:
            s._capture._hold((self, dst))
        self.device.activate()
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

    def close(self):
        """Free an owned allocation (``cuMemFreeAsync`` on the allocation stream,
        after its queued work; ``cuMemFree`` for ``async_alloc=False``). Views
        and foreign buffers just detach. A second close is a no-op."""
        if self.closed:
            return
        self.closed = True
        if self.owned and self.ptr != 0:
            ptr = self.ptr
            self.ptr = 0
            self.device.activate()
            if self.async_alloc:
                check(driver().p_cuMemFreeAsync(<CUdeviceptr>ptr, self.stream.handle), "cuMemFreeAsync")
            else:
                check(driver().p_cuMemFree(<CUdeviceptr>ptr), "cuMemFree")
        self.owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __dealloc__(self):
        cdef pycudadrv_driver_api* d
        if self.owned and not self.closed and self.ptr != 0 and self.device is not None:
            try:
                d = driver()
                d.p_cuCtxSetCurrent(self.device.context)
                if self.async_alloc and self.stream is not None and not self.stream.closed:
                    d.p_cuMemFreeAsync(self.ptr, (<Stream>self.stream).handle)
                else:
                    d.p_cuMemFree(self.ptr)
            except Exception:
                pass

    def __repr__(self):
        kind = "view" if (self.root is not None and self.root is not self) else ("owned" if self.owned else "foreign")
        if self.closed:
            return f"<Buffer closed, {self.nbytes} bytes>"
        meta = f", dtype={self.dtype}, shape={self.shape}" if self.dtype is not None else ""
        return (f"<Buffer 0x{self.ptr:x}, {self.nbytes} bytes{meta}, device {self.device.ordinal}, {kind}>")


def asbuffer(obj, *, device=None):
    """Wrap any object exporting ``__cuda_array_interface__`` (CuPy, PyTorch,
    Numba, another Buffer) as a Buffer, zero-copy, keeping ``obj`` alive.

    The data must be C-contiguous; the buffer records the object's dtype and shape.

    Raises
    ------
    TypeError
        ``obj`` has no ``__cuda_array_interface__``.
    ValueError
        Non-contiguous strides.
    """
    if isinstance(obj, Buffer):
        return obj
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{type(obj).__name__} does not export __cuda_array_interface__")
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
    b.device = _as_device(device)
    b.stream = <Stream>b.device.default_stream
    b.root = b
    b.owner = obj
    b.ptr = <CUdeviceptr>int(cai["data"][0])
    b.nbytes = int(np.prod(shape)) * dt.itemsize
    b.dtype = dt
    b.shape = shape
    return b
