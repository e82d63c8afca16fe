# cython: language_level=3
"""Devices and their primary contexts; which devices pycudadrv may use."""
cimport cython
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api

import os
import sys
import threading
import numpy as np
from pycudadrv import _attributes, _capabilities
from pycudadrv._env import env_flag
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, CudaUnavailableError

__all__ = ["Device", "context", "device_count", "get_current_device", "select_devices", "selected_devices"]

cdef extern from "cuda.h":
    enum:
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED

cdef dict _devices = {}
cdef dict _infos = {}              # ordinal -> DeviceInfo (attributes do not change while a process runs)
cdef set _peer_enabled = set()
cdef object _selection = None      # tuple of ordinals pycudadrv may use, or None: all
cdef bint _startup_logged = False
_devices_lock = threading.Lock()
_tls = threading.local()


def device_count():
    """Number of CUDA devices the driver sees (``cuDeviceGetCount``), whatever
    :func:`select_devices` allows.

    Raises CudaUnavailableError when the driver cannot be loaded."""
    cdef pycudadrv_driver_api* d = driver()
    cdef int n = 0
    check(d.p_cuDeviceGetCount(&n), "cuDeviceGetCount")
    _log_startup(n)
    return n


cdef int _log_startup(int n) except -1:
    """With PYCUDADRV_DEBUG=1: once, the driver version and every device (name,
    compute capability, memory) on stderr."""
    global _startup_logged
    if _startup_logged or not env_flag("PYCUDADRV_DEBUG"):
        return 0
    _startup_logged = True
    from pycudadrv._driver import driver_version, driver_library
    cdef pycudadrv_driver_api* d = driver()
    cdef char buf[256]
    cdef CUdevice h
    cdef size_t mem = 0
    cdef int ma = 0, mi = 0
    print(f"[pycudadrv] driver CUDA {'.'.join(map(str, driver_version()))} from {driver_library()}; "
          f"{n} device(s); selection {list(_selection) if _selection is not None else 'all'}", file=sys.stderr)
    for i in range(n):
        try:
            check(d.p_cuDeviceGet(&h, i), "cuDeviceGet")
            check(d.p_cuDeviceGetName(buf, 256, h), "cuDeviceGetName")
            check(d.p_cuDeviceTotalMem(&mem, h), "cuDeviceTotalMem")
            check(d.p_cuDeviceGetAttribute(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, h),
                  "cuDeviceGetAttribute")
            check(d.p_cuDeviceGetAttribute(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, h),
                  "cuDeviceGetAttribute")
            print(f"[pycudadrv]   device {i}: {(<bytes>buf).decode(errors='replace')}, sm_{ma}{mi}, "
                  f"{mem / 2**30:.1f} GiB", file=sys.stderr)
        except Exception as e:  # the log reports failures, it never raises them
            print(f"[pycudadrv]   device {i}: init failed: {e}", file=sys.stderr)
    return 0


def _parse_selection(spec, str where):
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",")]
        if len(parts) > 1 and "" in parts:
            raise ArgumentValueError(f"{where}: an empty entry in the device list {spec!r}; give ordinals separated "
                                     "by single commas (\"0,1\")")
        try:
            spec = [int(p) for p in parts if p]
        except ValueError:
            raise ArgumentValueError(f"{where}: expected comma-separated device ordinals, got {spec!r}") from None
    elif isinstance(spec, (bytes, bytearray, dict, set, frozenset)) or not hasattr(spec, "__iter__"):
        raise ArgumentTypeError(f"{where}: device ordinals are a sequence of ints (in order) or a comma-separated str, "
                                f"got {type(spec).__name__} {spec!r:.60}")
    out = []
    for x in spec:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise ArgumentTypeError(f"{where}: device ordinals must be ints, got {x!r}")
        if int(x) not in out:
            out.append(int(x))
    if not out:
        raise ArgumentValueError(f"{where}: the device selection is empty; name at least one device ordinal "
                                 "(or unset it to use every device)")
    return tuple(out)


def select_devices(ordinals):
    """Restrict pycudadrv to the devices ``ordinals`` (a sequence of ints, or
    a comma-separated string as ``PYCUDADRV_DEVICES`` takes), as the zyx
    backend's ``device_ids``; ``None`` allows every device again. The first one
    becomes the current device of threads that have not chosen one.

    Raises
    ------
    ArgumentValueError
        An empty selection, or an ordinal the driver does not have.
    """
    global _selection
    if ordinals is None:
        _selection = None
        return None
    sel = _parse_selection(ordinals, "select_devices")
    n = device_count()
    for o in sel:
        if not 0 <= o < n:
            raise ArgumentValueError(f"select_devices: device {o} does not exist ({n} CUDA device(s) present)")
    _selection = sel
    return list(sel)


def selected_devices():
    """The Devices pycudadrv may use, in selection order (every device when
    nothing was selected)."""
    _init_selection()
    n = device_count()
    return [get_device(o) for o in (_selection if _selection is not None else range(n))]


cdef int _init_selection() except -1:
    global _selection
    if _selection is None and os.environ.get("PYCUDADRV_DEVICES") is not None:
        _selection = _parse_selection(os.environ["PYCUDADRV_DEVICES"], "PYCUDADRV_DEVICES")
    return 0


cdef Device get_device(int ordinal):
    dev = _devices.get(ordinal)
    if dev is None:
        Device(ordinal)  # registers itself as the canonical object of its ordinal
        dev = _devices[ordinal]
    return <Device>dev


cdef bint peer_enabled(int device, int peer):
    return device == peer or (device, peer) in _peer_enabled


cdef Device as_device(object device, str where=None):
    """``device`` (None: the current device; a Device; an int ordinal) as the canonical Device; ``where``
    (the calling function) heads the ArgumentTypeError of anything else."""
    if device is None:
        return current_device()
    if isinstance(device, Device):
        return get_device((<Device>device).ordinal)   # the canonical object of that ordinal
    if isinstance(device, bool) or not isinstance(device, (int, np.integer)):
        raise ArgumentTypeError(f"{where + ': ' if where else ''}device must be a Device or an int ordinal, got "
                                f"{type(device).__name__} {device!r:.60}")
    v = int(device)
    if not 0 <= v < 2**31:
        Device(v)                     # raises ArgumentValueError naming the devices present
    return get_device(v)


cdef Device current_device():
    ordinal = getattr(_tls, "ordinal", None)
    if ordinal is None:
        _init_selection()
        ordinal = _selection[0] if _selection is not None else 0
    return get_device(ordinal)


def get_current_device():
    """The calling thread's current Device: the one last made current with
    :meth:`Device.use` (or a ``with device:`` block) on this thread, else the
    first selected device (device 0 unless :func:`select_devices` or
    ``PYCUDADRV_DEVICES`` says otherwise)."""
    return current_device()


def device_arg(device, str where):
    """``device`` (None: the current device; a Device; an int ordinal) as the canonical Device, for Python
    callers (as_device's rule and error, headed by ``where``)."""
    return as_device(device, where)


def context(device=None):
    """The primary context (``CUcontext``) of ``device`` (a Device or an
    ordinal; None: :func:`get_current_device`) as an int, like
    ``Stream.handle``: :attr:`Device.context`. Raises as ``Device(ordinal)``."""
    return as_device(device, "context").context


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class Device:
    """A CUDA device and its primary context.

    ``Device(ordinal)`` may be called any number of times: every object of one
    ordinal compares equal, hashes equal, and shares the one primary context
    retained for that ordinal (``cuDevicePrimaryCtxRetain``, once per
    process). pycudadrv itself always hands out the first object made for an
    ordinal (``buffer.device``, ``get_current_device()``), so those are
    identical (``is``). The context is made current on whichever thread uses
    the device, so launching from a new ``threading.Thread`` just works.

    Raises
    ------
    CudaUnavailableError
        No usable driver.
    ArgumentTypeError
        ``ordinal`` is not an int.
    ArgumentValueError
        ``ordinal`` is outside ``[0, device_count())`` or not among the
        selected devices (:func:`select_devices`).
    """

    def __cinit__(self, *args, **kwargs):
        if len(args) > 1 or (args and kwargs) or any(k != "ordinal" for k in kwargs):
            given = [repr(a)[:20] for a in args] + [f"{k}={v!r:.20}" for k, v in kwargs.items()]
            raise ArgumentTypeError(f"Device takes one ordinal: Device(ordinal=0), got Device({', '.join(given)})")
        ordinal = args[0] if args else kwargs.get("ordinal", 0)
        if isinstance(ordinal, bool) or not isinstance(ordinal, (int, np.integer)):
            raise ArgumentTypeError(f"device ordinal must be an int, got {ordinal!r}")
        ordinal = int(ordinal)
        cdef pycudadrv_driver_api* d = driver()
        cdef int n = 0
        check(d.p_cuDeviceGetCount(&n), "cuDeviceGetCount")
        _log_startup(n)
        if ordinal < 0 or ordinal >= n:
            raise ArgumentValueError(f"device ordinal {ordinal} out of range: {n} CUDA device(s) present")
        _init_selection()
        if _selection is not None and ordinal not in _selection:
            raise ArgumentValueError(f"device {ordinal} is not among the selected devices {list(_selection)} "
                                     "(select_devices() / PYCUDADRV_DEVICES)")
        self.ordinal = ordinal
        check(d.p_cuDeviceGet(&self._handle, ordinal), "cuDeviceGet")
        cdef Device canon
        existing = _devices.get(ordinal)
        if existing is not None:
            # Every Device object of one ordinal shares one retained primary context.
            canon = <Device>existing
            self._context = canon._context
            self.max_threads_per_block = canon.max_threads_per_block
            self.max_block = canon.max_block
            self.max_grid = canon.max_grid
            self.max_shared_per_block = canon.max_shared_per_block
            self.max_shared_optin = canon.max_shared_optin
            self.multiprocessor_count = canon.multiprocessor_count
            self.cc_major = canon.cc_major
            self.cc_minor = canon.cc_minor
            return
        check(d.p_cuDevicePrimaryCtxRetain(&self._context, self._handle), "cuDevicePrimaryCtxRetain")
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
        check(driver().p_cuDeviceGetAttribute(&v, <CUdevice_attribute>attr, self._handle),
              "cuDeviceGetAttribute")
        return v

    cdef int activate(self) except -1:
        return make_current(driver(), self)

    cdef tuple stream_priority_range(self):
        cdef int least = 0, greatest = 0
        self.activate()
        check(driver().p_cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange")
        return least, greatest

    def set_current(self):
        """Make this device's primary context current on the calling thread
        (``cuCtxSetCurrent``). Every pycudadrv call does this itself."""
        self.activate()

    @property
    def context(self):
        """The device's primary context (``CUcontext``, retained once per
        process with ``cuDevicePrimaryCtxRetain`` and never released) as an
        int, like ``Stream.handle``: what ``cuCtxGetCurrent`` reports once the
        device is current (:meth:`set_current`), for passing to another
        library. The same for every Device object of one ordinal."""
        return <size_t>self._context

    def use(self):
        """Make this the calling thread's current device (for calls that take
        ``device=None``) until another ``use()``; returns self.

        As a context manager (``with device:``) the previous current device of
        the thread comes back when the block ends; blocks nest."""
        _tls.ordinal = self.ordinal
        self.activate()
        return self

    def __enter__(self):
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        stack.append(getattr(_tls, "ordinal", None))
        return self.use()

    def __exit__(self, *exc):
        stack = getattr(_tls, "stack", None)
        prev = stack.pop() if stack else None
        _tls.ordinal = prev
        if prev is not None:
            get_device(prev).activate()
        return False

    @property
    def name(self):
        """Marketing name, e.g. ``"NVIDIA H200"`` (``cuDeviceGetName``)."""
        cdef char buf[256]
        check(driver().p_cuDeviceGetName(buf, 256, self._handle), "cuDeviceGetName")
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
        check(driver().p_cuDeviceTotalMem(&n, self._handle), "cuDeviceTotalMem")
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
        ArgumentValueError
            Unknown attribute name.
        CudaError
            The driver rejects the attribute (``CUDA_ERROR_INVALID_VALUE``).
        """
        if isinstance(name, str):
            key = name.upper()
            if not key.startswith("CU_DEVICE_ATTRIBUTE_"):
                key = "CU_DEVICE_ATTRIBUTE_" + key
            if key not in _attributes.DEVICE_ATTRIBUTES:
                raise ArgumentValueError(f"unknown device attribute {name!r}; see pycudadrv._attributes.DEVICE_ATTRIBUTES")
            attr = _attributes.DEVICE_ATTRIBUTES[key]
        else:
            attr = int(name)
        return self._attr(attr)

    @property
    def info(self):
        """What this device can do, as a frozen :class:`pycudadrv.DeviceInfo`:
        tensor cores (sm_70 and newer), bfloat16 (sm_80 and newer), the FP64
        rate class (``"full"``, ``"reduced"``, ``"minimal"``, from the FP32:FP64
        throughput ratio), register bytes per block, per SM and per thread,
        warp size, block, grid and shared-memory limits (bytes). Read once per
        device with ``cuDeviceGetAttribute`` (derivation rules:
        ``pycudadrv._capabilities.derive``).

        Raises CudaError if the driver refuses an attribute."""
        info = _infos.get(self.ordinal)
        if info is None:
            info = _capabilities.derive(
                lambda name: self._attr(_attributes.DEVICE_ATTRIBUTES["CU_DEVICE_ATTRIBUTE_" + name.upper()]))
            _infos[self.ordinal] = info
        return info

    def can_access_peer(self, Device peer not None):
        """Whether this device can map ``peer``'s memory (``cuDeviceCanAccessPeer``)."""
        cdef int v = 0
        check(driver().p_cuDeviceCanAccessPeer(&v, self._handle, peer._handle), "cuDeviceCanAccessPeer")
        return bool(v)

    def enable_peer_access(self, Device peer not None):
        """Let kernels on this device read and write ``peer``'s memory
        (``cuCtxEnablePeerAccess``, and ``cuMemPoolSetAccess`` on the peer's
        default memory pool, where stream-ordered Buffers live). Idempotent.

        Raises ArgumentValueError if the devices cannot access each other."""
        if peer.ordinal == self.ordinal:
            return
        if not self.can_access_peer(peer):
            raise ArgumentValueError(f"device {self.ordinal} cannot access device {peer.ordinal}'s memory "
                                     "(no P2P path)")
        self.activate()
        cdef pycudadrv_driver_api* d = driver()
        cdef CUresult r = d.p_cuCtxEnablePeerAccess(peer._context, 0)
        if r != CUDA_SUCCESS and r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            check(r, "cuCtxEnablePeerAccess")
        # Stream-ordered allocations (Buffer's default) live in the peer's memory pool, whose
        # access is granted per pool, not by cuCtxEnablePeerAccess.
        cdef CUmemoryPool pool = NULL
        cdef CUmemAccessDesc_v1 desc
        check(d.p_cuDeviceGetDefaultMemPool(&pool, peer._handle), "cuDeviceGetDefaultMemPool")
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

    def synchronize_all(self):
        """Wait for all work on every stream of this device's primary context
        (``cuCtxSynchronize``)."""
        from pycudadrv._stream import synchronize_context
        synchronize_context(self)

    def __eq__(self, other):
        return isinstance(other, Device) and (<Device>other).ordinal == self.ordinal

    def __hash__(self):
        return hash(("pycudadrv.Device", self.ordinal))

    def __repr__(self):
        return (f"<Device {self.ordinal}: {self.name}, sm_{self.cc_major}{self.cc_minor}, "
                f"{self.multiprocessor_count} SMs>")
