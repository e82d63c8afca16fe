# cython: language_level=3
"""Devices and their primary contexts."""
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check
from pycudadrv._driver_api cimport pycudadrv_driver_api

import threading
import numpy as np
from pycudadrv import _attributes

cdef pycudadrv_driver_api* _d = NULL
cdef dict _devices = {}
cdef set _peer_enabled = set()
_devices_lock = threading.Lock()
_tls = threading.local()


def device_count():
    """Number of CUDA devices the driver sees (``cuDeviceGetCount``).

    Raises CudaUnavailableError when the driver cannot be loaded."""
    cdef pycudadrv_driver_api* d = driver()
    cdef int n = 0
    check(d.p_cuDeviceGetCount(&n), "cuDeviceGetCount")
    return n


cdef Device get_device(int ordinal):
    dev = _devices.get(ordinal)
    if dev is None:
        Device(ordinal)  # registers itself as the canonical object of its ordinal
        dev = _devices[ordinal]
    return <Device>dev


cdef bint peer_enabled(int device, int peer):
    return device == peer or (device, peer) in _peer_enabled


cdef Device as_device(object device):
    if device is None:
        return current_device()
    if isinstance(device, Device):
        return get_device((<Device>device).ordinal)   # the canonical object of that ordinal
    return get_device(int(device))


cdef Device current_device():
    ordinal = getattr(_tls, "ordinal", 0)
    return get_device(ordinal)


def get_current_device():
    """The calling thread's current Device (``Device(0)`` until ``Device.use()``)."""
    return current_device()


cdef class Device:
    """A CUDA device and its primary context.

    ``Device(ordinal)`` returns the one object for that ordinal in this process;
    its primary context is retained once (``cuDevicePrimaryCtxRetain``) and made
    current on whichever thread uses the device, so launching from a new
    ``threading.Thread`` just works.

    Raises
    ------
    CudaUnavailableError
        No usable driver.
    ValueError
        ``ordinal`` is outside ``[0, device_count())``.
    """

    def __cinit__(self, ordinal=0):
        if isinstance(ordinal, bool) or not isinstance(ordinal, (int, np.integer)):
            raise TypeError(f"device ordinal must be an int, got {ordinal!r}")
        ordinal = int(ordinal)
        cdef pycudadrv_driver_api* d = driver()
        cdef int n = 0
        check(d.p_cuDeviceGetCount(&n), "cuDeviceGetCount")
        if ordinal < 0 or ordinal >= n:
            raise ValueError(f"device ordinal {ordinal} out of range: {n} CUDA device(s) present")
        self.ordinal = ordinal
        check(d.p_cuDeviceGet(&self.handle, ordinal), "cuDeviceGet")
        cdef Device canon
        existing = _devices.get(ordinal)
        if existing is not None:
            # Every Device object of one ordinal shares one retained primary context.
            canon = <Device>existing
            self.context = canon.context
            self.max_threads_per_block = canon.max_threads_per_block
            self.max_block = canon.max_block
            self.max_grid = canon.max_grid
            self.max_shared_per_block = canon.max_shared_per_block
            self.max_shared_optin = canon.max_shared_optin
            self.multiprocessor_count = canon.multiprocessor_count
            self.cc_major = canon.cc_major
            self.cc_minor = canon.cc_minor
            return
        check(d.p_cuDevicePrimaryCtxRetain(&self.context, self.handle), "cuDevicePrimaryCtxRetain")
        self.max_threads_per_block = self._attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        self.max_block[0] = self._attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)
        self.max_block[1] = self._attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)
        self.max_block[2] = self._attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)
        self.max_grid[0] = self._attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)
        self.max_grid[1] = self._attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)
        self.max_grid[2] = self._attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)
        self.max_shared_per_block = self._attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
        self.max_shared_optin = self._attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.multiprocessor_count = self._attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.cc_major = self._attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        self.cc_minor = self._attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        _devices.setdefault(ordinal, self)

    cdef int _attr(self, int attr) except? -1:
        cdef int v = 0
        check(driver().p_cuDeviceGetAttribute(&v, <CUdevice_attribute>attr, self.handle),
              "cuDeviceGetAttribute")
        return v

    cdef int activate(self) except -1:
        global _d
        cdef CUcontext cur = NULL
        if _d == NULL:
            _d = driver()
        if _d.p_cuCtxGetCurrent(&cur) != CUDA_SUCCESS or cur != self.context:
            check(_d.p_cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        return 0

    def set_current(self):
        """Make this device's primary context current on the calling thread
        (``cuCtxSetCurrent``). Every pycudadrv call does this itself."""
        self.activate()

    def use(self):
        """Make this the calling thread's current device for calls that take
        ``device=None``; returns self (usable as a context manager)."""
        self._prev = getattr(_tls, "ordinal", 0)
        _tls.ordinal = self.ordinal
        self.activate()
        return self

    def __enter__(self):
        return self.use()

    def __exit__(self, *exc):
        _tls.ordinal = getattr(self, "_prev", 0)
        return False

    @property
    def name(self):
        """Marketing name, e.g. ``"NVIDIA H200"`` (``cuDeviceGetName``)."""
        cdef char buf[256]
        check(driver().p_cuDeviceGetName(buf, 256, self.handle), "cuDeviceGetName")
        return (<bytes>buf).decode(errors="replace")

    @property
    def compute_capability(self):
        """``(major, minor)``, e.g. ``(9, 0)`` for Hopper."""
        return (self.cc_major, self.cc_minor)

    @property
    def arch(self):
        """NVRTC/nvcc architecture name of this device, e.g. ``"sm_90"``."""
        return f"sm_{self.cc_major}{self.cc_minor}"

    @property
    def total_memory(self):
        """Total device memory in bytes (``cuDeviceTotalMem``)."""
        cdef size_t n = 0
        check(driver().p_cuDeviceTotalMem(&n, self.handle), "cuDeviceTotalMem")
        return n

    def memory_info(self):
        """``(free, total)`` device memory in bytes (``cuMemGetInfo``)."""
        cdef size_t free = 0, total = 0
        self.activate()
        check(driver().p_cuMemGetInfo(&free, &total), "cuMemGetInfo")
        return free, total

    def attribute(self, name):
        """Value of a ``CU_DEVICE_ATTRIBUTE_*`` (``cuDeviceGetAttribute``).

        ``name`` is the full name, the name without the prefix (any case, e.g.
        ``"max_threads_per_block"``) or the integer value.

        Raises
        ------
        ValueError
            Unknown attribute name.
        CudaError
            The driver rejects the attribute (``CUDA_ERROR_INVALID_VALUE``).
        """
        if isinstance(name, str):
            key = name.upper()
            if not key.startswith("CU_DEVICE_ATTRIBUTE_"):
                key = "CU_DEVICE_ATTRIBUTE_" + key
            if key not in _attributes.DEVICE_ATTRIBUTES:
                raise ValueError(f"unknown device attribute {name!r}; see pycudadrv.DEVICE_ATTRIBUTES")
            attr = _attributes.DEVICE_ATTRIBUTES[key]
        else:
            attr = int(name)
        return self._attr(attr)

    def can_access_peer(self, Device peer):
        """Whether this device can map ``peer``'s memory (``cuDeviceCanAccessPeer``)."""
        cdef int v = 0
        check(driver().p_cuDeviceCanAccessPeer(&v, self.handle, peer.handle), "cuDeviceCanAccessPeer")
        return bool(v)

    def enable_peer_access(self, Device peer not None):
        """Let kernels on this device read and write ``peer``'s memory
        (``cuCtxEnablePeerAccess``, and ``cuMemPoolSetAccess`` on the peer's
        default memory pool, where stream-ordered Buffers live). Idempotent.

        Raises ValueError if the devices cannot access each other."""
        if peer.ordinal == self.ordinal:
            return
        if not self.can_access_peer(peer):
            raise ValueError(f"device {self.ordinal} cannot access device {peer.ordinal}'s memory (no P2P path)")
        self.activate()
        cdef pycudadrv_driver_api* d = driver()
        cdef CUresult r = d.p_cuCtxEnablePeerAccess(peer.context, 0)
        if r != CUDA_SUCCESS and r != 704:  # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            check(r, "cuCtxEnablePeerAccess")
        # Stream-ordered allocations (Buffer's default) live in the peer's memory pool, whose
        # access is granted per pool, not by cuCtxEnablePeerAccess.
        cdef CUmemoryPool pool = NULL
        cdef CUmemAccessDesc_v1 desc
        check(d.p_cuDeviceGetDefaultMemPool(&pool, peer.handle), "cuDeviceGetDefaultMemPool")
        desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = self.ordinal
        desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        check(d.p_cuMemPoolSetAccess(pool, &desc, 1), "cuMemPoolSetAccess")
        _peer_enabled.add((self.ordinal, peer.ordinal))

    def peer_access_enabled(self, Device peer not None):
        """Whether :meth:`enable_peer_access` was called for ``peer`` (or it is this device)."""
        return peer_enabled(self.ordinal, peer.ordinal)

    @property
    def default_stream(self):
        """This device's owned, non-blocking default Stream (created on first use).
        Unlike the legacy NULL stream it can be captured into a graph."""
        cdef Device canon = get_device(self.ordinal)
        if canon._default_stream is None:
            from pycudadrv._stream import Stream
            with _devices_lock:
                if canon._default_stream is None:
                    canon._default_stream = Stream(canon)
        return canon._default_stream

    def encoder(self, stream=None):
        """A shader-style :class:`pycudadrv.dispatch.Encoder` on ``stream``
        (this device's default stream if None)."""
        from pycudadrv.dispatch import Encoder
        return Encoder(self, stream)

    def synchronize(self):
        """Wait for all work on this device's default stream (``cuStreamSynchronize``)."""
        self.default_stream.synchronize()

    def __eq__(self, other):
        return isinstance(other, Device) and (<Device>other).ordinal == self.ordinal

    def __hash__(self):
        return hash(("pycudadrv.Device", self.ordinal))

    def __repr__(self):
        return (f"<Device {self.ordinal}: {self.name}, sm_{self.cc_major}{self.cc_minor}, "
                f"{self.multiprocessor_count} SMs>")
