# cython: language_level=3
"""The owner of a device allocation: allocate, the streams and graphs that used
it, the holds that keep it, its free (ordered after every stream that used it,
deferred while held or while a capture forbids it), pool return, invalidation,
and for another library's memory the object kept alive and the producer's
stream to wait for. Buffer (pycudadrv._memory) is a view over one."""
cimport cython
from libc.stdint cimport uint64_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device
from pycudadrv._stream cimport (Stream, Capture, CaptureWork, check_not_capturing, forbidding_capture, order_after,
                                order_after_uses, capture_info)
from pycudadrv._ordering cimport ReadyEvent

from pycudadrv._ordering import alloc_trace
from pycudadrv._errors import ArgumentTypeError, CaptureError, ClosedError
from pycudadrv._usage import ALL_BITS

__all__ = []

cdef extern from "cuda.h":
    enum:
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD

cdef set _pools_configured = set()
# Creating an Allocation takes this token (allocate() and foreign() pass it).
cdef object _TOKEN = object()
cdef unsigned int _ALL_USAGES = ALL_BITS   # an allocation's usage unless its factory is told otherwise
cdef unsigned long long _serial = 0        # the last Allocation.serial given


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


cdef Allocation _new(Device dev, Stream s, size_t nbytes):
    global _serial
    cdef Allocation a = Allocation.__new__(Allocation, _TOKEN)
    _serial += 1
    a.serial = _serial
    a.device = dev
    a.stream = s
    a.nbytes = nbytes
    a.usage = _ALL_USAGES
    return a


cdef Allocation allocate(size_t nbytes, Device dev, Stream s, bint async_alloc):
    cdef Allocation a = _new(dev, s, nbytes)
    cdef pycudadrv_driver_api* d
    cdef CUresult r
    a.owned = True
    a.async_alloc = async_alloc
    if nbytes == 0:
        return a
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
    d = driver()
    dev.activate()
    if async_alloc:
        _configure_pool(dev)
        r = d.p_cuMemAllocAsync(&a.ptr, nbytes, s._handle)
        call = "cuMemAllocAsync"
    else:
        with nogil:                # cuMemAlloc may wait for the device
            r = d.p_cuMemAlloc(&a.ptr, nbytes)
        call = "cuMemAlloc"
    if r != CUDA_SUCCESS:
        a.ptr = 0
        a.owned = False
        a.freed = True
        ctx = f"allocating {nbytes} bytes on device {dev.ordinal}"
        if r == CUDA_ERROR_OUT_OF_MEMORY:
            try:
                free, total = dev.memory_info()
                ctx += f"; the device has {free} bytes free of {total}"
            except Exception:  # noqa: BLE001 -- the message must not fail
                pass
        raise make_error(r, call, ctx)
    if s._capture is not None:
        a.born_in = s._capture
        s._capture.on_alloc(a)
    elif not s._owned and not _is_capturing(s):
        # Allocated on another library's stream, which may be destroyed before the memory is freed:
        # the device's default stream takes over (it waits for the allocation now), and the free goes there.
        a.stream = <Stream>dev.default_stream
        order_after(a.stream, s)
        s.mark_use()
        a.note_use(s)
    return a


cdef bint _is_capturing(Stream s) except -1:
    return capture_info(s, NULL, NULL) != CU_STREAM_CAPTURE_STATUS_NONE


cdef Allocation foreign(CUdeviceptr ptr, size_t nbytes, Device dev, object keeper, ReadyEvent ready):
    cdef Allocation a = _new(dev, <Stream>dev.default_stream, nbytes)
    a.ptr = ptr
    a.keeper = keeper
    a.ready = ready
    a._update_attention()
    return a


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class Allocation(CaptureWork):
    """One device allocation (internal: Buffers are the public views of it)."""

    def __cinit__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("Allocation objects are made by pycudadrv's Buffer factories (Buffer.empty, "
                                    "asbuffer, Module.get_global)")

    cdef int _update_attention(self) except -1:
        self.attention = self.freed or self.ready is not None
        return 0

    cdef int ensure_live(self) except -1:
        if self.freed:
            raise ClosedError("buffer is closed" + (f" ({self.why})" if self.why else ""))
        return 0

    cdef int note_use(self, Stream s) except -1:
        cdef Py_ssize_t k
        if s is self.stream or s is self.last_user:
            return 0
        if self.users is None:
            self.users = []
        if not s._owned:
            # Another library's stream: keep the newest wrapper of that handle (its last-use event is
            # the one recorded after this use); never the fast path, so every use records it. Only a
            # wrapper replaces a wrapper: an owned stream of the same handle value (a stream wrapped with
            # Stream.from_handle(s.handle), or one closed since, whose handle reads NULL like the legacy
            # stream's) stays, and its later uses take the fast path.
            for k in range(len(self.users)):
                if not (<Stream>self.users[k])._owned and (<Stream>self.users[k])._handle == s._handle:
                    self.users[k] = s
                    return 0
            self.users.append(s)
            return 0
        for k in range(len(self.users)):        # by identity (`in` would call Stream.__eq__ per item)
            if self.users[k] is s:
                break
        else:
            self.users.append(s)
        self.last_user = s
        return 0

    cdef int order_on(self, Stream s) except -1:
        cdef ReadyEvent r = self.ready
        cdef object o
        if r is None:
            return 0
        if self.ordered is not None:
            for o in self.ordered:
                if o is s:
                    if not self.ready_captured and r.done():   # done: every later use is fast again
                        self.ready = None
                        self.ordered = None
                        self._update_attention()
                    return 0
        if not self.ready_captured and r.done():
            self.ready = None             # the producer's work is done: nothing to wait for, ever
            self.ordered = None
            return self._update_attention()
        if r.wait_on(s):
            self.ready_captured = True    # a graph waits on it: keep it as long as this allocation
        if self.ordered is None:
            self.ordered = []
        self.ordered.append(s)
        return 0

    cdef int use_on(self, Stream s) except -1:
        if self.attention:
            self.ensure_live()
            if self.ready is not None:
                self.order_on(s)
        if s is not self.stream and s is not self.last_user:
            self.note_use(s)
        return 0

    cdef int mark_ordered(self, Stream s) except -1:
        if self.ready is not None:
            if self.ordered is None:
                self.ordered = []
            self.ordered.append(s)
        return 0

    cdef int set_read_only(self) except -1:
        self.read_only = True
        return 0

    cdef int add_hold(self) except -1:
        self.holds += 1
        return 0

    cdef int release_hold(self) except -1:
        self.holds -= 1
        if self.holds <= 0 and self.free_pending:
            self.request_free(True, False)
        return 0

    cdef int invalidate(self, str why) except -1:
        self.freed = True
        self.why = why
        return self._update_attention()

    cdef int request_free(self, bint raise_errors, bint in_dealloc) except -1:
        cdef Stream fs, u
        cdef Capture c
        self.freed = True
        self._update_attention()
        if not self.owned or self.ptr == 0:
            return 0
        if self.holds > 0 or (self.cai_exported and not in_dealloc):
            self.free_pending = True
            return 0
        self.free_pending = False
        if self.born_in is not None and self.born_in._active:
            # Freed inside the graph that allocated it (a graph memory free node).
            return self.capture_ending(self.born_in, False)
        c = self._forbidding()
        self._to_free = self.ptr
        self.ptr = 0
        if c is not None:
            c.defer(self)                 # freed when the capture ends, in the same order
            return 0
        return self.free_now(raise_errors)

    cdef Capture _forbidding(self):
        """The capture that forbids this allocation's free right now (it would record it, or the
        driver would refuse it and invalidate the capture), or None."""
        cdef Stream fs = self.stream if self.async_alloc else None
        cdef Stream u
        cdef Capture c
        if fs is not None and fs._closed:
            fs = <Stream>self.device.default_stream
        c = forbidding_capture(fs)
        if c is None and self.users:
            for u in self.users:
                if u._capture is not None:
                    return u._capture
        return c

    cdef int free_now(self, bint raise_errors) except -1:
        """The free itself: ``cuMemFreeAsync`` on the allocation stream (the device's
        default stream once that is closed) after the work of every stream that used the
        memory, or ``cuMemFree``."""
        cdef pycudadrv_driver_api* d = driver()
        cdef CUdeviceptr p = self._to_free
        cdef Stream fs
        cdef CUresult r
        if p == 0:
            return 0
        self._to_free = 0
        users, self.users, self.last_user = self.users, None, None
        self.device.activate()
        if not self.async_alloc:
            with nogil:            # cuMemFree waits for the device: never with the GIL held
                r = d.p_cuMemFree(p)
            call = "cuMemFree"
        else:
            fs = self.stream
            if fs._closed:
                fs = <Stream>self.device.default_stream
            try:
                if fs is not self.stream:
                    order_after_uses(fs, self.stream)
                for u in (users or ()):
                    order_after_uses(fs, <Stream>u)
            except Exception:
                if raise_errors:
                    raise
            self.device.activate()
            r = d.p_cuMemFreeAsync(p, fs._handle)
            call = "cuMemFreeAsync"
        if raise_errors:
            check(r, call.encode())
        elif r != CUDA_SUCCESS:
            warn_dealloc_failure("Buffer", make_error(r, call))
        return 0

    # -- the capture that allocated it, or that deferred its free -----------------------
    cdef int capture_ending(self, Capture c, bint discard) except -1:
        cdef CUdeviceptr p = self.ptr
        if not self.owned or p == 0 or self.born_in is not c:
            return 0
        self.ptr = 0
        self.owned = False
        self.freed = True
        self._update_attention()
        if discard:
            # The allocation never happened outside the (destroyed) graph.
            self.why = "it was allocated inside a graph capture that was discarded"
            return 0
        self.why = ("it was allocated inside a graph capture, so it exists only while each replay runs; "
                    "allocate it before the capture to use it outside the graph")
        c.stream.device.activate()
        check(driver().p_cuMemFreeAsync(p, c.stream._handle), "cuMemFreeAsync")
        return 0

    cdef int capture_ended(self) except -1:
        return self.free_now(False)

    def __dealloc__(self):
        # Every Buffer, graph and capsule of it is gone, yet the memory is not freed: its holder (a
        # graph) was in a garbage cycle whose lists the collector cleared, so no release came. Free it
        # now, ordered as ever; while a capture forbids that, a successor record takes the pointer
        # over and the capture frees it at its end.
        cdef Allocation rec
        cdef Capture c
        if self.owned and (self.ptr != 0 or self._to_free != 0) and self.device is not None:
            try:
                if self._to_free == 0:
                    self._to_free, self.ptr = self.ptr, 0
                c = self._forbidding()
                if c is not None:
                    rec = _new(self.device, self.stream, self.nbytes)
                    rec.owned, rec.async_alloc, rec.freed = True, self.async_alloc, True
                    rec._to_free, rec.users = self._to_free, self.users
                    self._to_free = 0
                    c.defer(rec)
                else:
                    self.free_now(False)
            except Exception as e:
                warn_dealloc_failure("Buffer", e)

    def __repr__(self):
        kind = "owned" if self.owned else "foreign"
        state = "freed" if self.freed else "live"
        return f"<Allocation 0x{self.ptr:x}, {self.nbytes} bytes, {kind}, {state}, {self.holds} holds>"
