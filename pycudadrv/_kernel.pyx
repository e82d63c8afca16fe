# cython: language_level=3
"""Kernel handles: launch limits and their validation, function attributes by
name, and occupancy (cuFuncGetAttribute, cuFuncSetAttribute, cuOccupancy*)."""
cimport cython
from libc.stdint cimport uintptr_t
from cpython.long cimport PyLong_AsLongLongAndOverflow
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, Lifetime
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device

import numpy as np
from pycudadrv import _attributes
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, ClosedError, NotSupportedError

__all__ = ["dims3", "SETTABLE_FUNCTION_ATTRIBUTES", "CACHE_PREFERENCES"]

#: Function attributes cuFuncSetAttribute accepts (the rest are read-only).
SETTABLE_FUNCTION_ATTRIBUTES = ("max_dynamic_shared_size_bytes", "preferred_shared_memory_carveout",
                                "required_cluster_width", "required_cluster_height", "required_cluster_depth",
                                "non_portable_cluster_size_allowed", "cluster_scheduling_policy_preference")
#: Cache preferences of :meth:`KernelBase.set_cache_preference` (``cuFuncSetCacheConfig``).
CACHE_PREFERENCES = {"none": CU_FUNC_CACHE_PREFER_NONE, "shared": CU_FUNC_CACHE_PREFER_SHARED,
                     "l1": CU_FUNC_CACHE_PREFER_L1, "equal": CU_FUNC_CACHE_PREFER_EQUAL}

# Kernel objects are made only by Module.function() (make_function passes this token): one made any
# other way (Function.__new__, a subclass) would have no handle, device or layout and crash on use.
cdef object _TOKEN = object()


cdef object kernel_token():
    return _TOKEN


# Dynamic shared memory as a function of the block size, for cuOccupancyMaxPotentialBlockSize's
# callback (the driver calls it synchronously on this thread, with the GIL held).
cdef object _smem_of_block = None
cdef object _smem_error = None


cdef size_t _smem_trampoline(int block_size) noexcept with gil:
    global _smem_error
    if _smem_error is not None:
        return 0
    try:
        v = _smem_of_block(block_size)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ArgumentTypeError(f"shared_mem_bytes(block_size={block_size}) must return a non-negative int "
                                    f"of bytes, returned {v!r}")
        return <size_t>v
    except BaseException as e:
        _smem_error = e
        return 0


cdef int parse_dims(object v, unsigned int* out, str what, bint allow_zero) except -1:
    cdef Py_ssize_t n, k
    cdef long long lo = 0 if allow_zero else 1
    cdef int overflow = 0
    cdef long long c
    if type(v) is int:
        c = PyLong_AsLongLongAndOverflow(v, &overflow)      # C compares: every launch passes here twice
        if overflow != 0 or c < lo or c > 0xFFFFFFFF:
            raise ArgumentValueError(f"{what} dimension must be in [{lo}, 2**32-1], got {v}")
        out[0] = <unsigned int>c
        out[1] = 1
        out[2] = 1
        return 0
    if isinstance(v, bool):
        raise ArgumentTypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {v!r}")
    if isinstance(v, np.integer):
        v = (int(v),)
    if not isinstance(v, (tuple, list)):
        if not hasattr(v, "__iter__") or isinstance(v, (str, bytes)):
            raise ArgumentTypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {v!r}")
        v = tuple(v)
    n = len(v)
    if n < 1 or n > 3:
        raise ArgumentValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {v!r}")
    out[1] = 1
    out[2] = 1
    for k in range(n):
        x = v[k]
        if not isinstance(x, int) or isinstance(x, bool):
            if isinstance(x, np.integer):
                x = int(x)
            else:
                raise ArgumentTypeError(f"{what} dimensions must be ints, got {v!r}")
        if x < lo or x > 0xFFFFFFFF:
            raise ArgumentValueError(f"{what} dimensions must be in [{lo}, 2**32-1], got {v!r}")
        out[k] = <unsigned int>x
    return 0


def dims3(v, str what="grid", bint allow_zero=False):
    """``(x, y, z)`` from an int or 1 to 3 ints (missing ones are 1): the one
    rule for every grid, block and cluster argument. Raises ArgumentTypeError
    for non-ints and ArgumentValueError outside ``[1, 2**32)`` (``[0, ...)``
    with ``allow_zero``)."""
    cdef unsigned int out[3]
    parse_dims(v, out, what, allow_zero)
    return (out[0], out[1], out[2])


cdef int validate_config(KernelBase fn, const unsigned int* grid, const unsigned int* block,
                         unsigned int shmem) except -1:
    cdef Device dev = fn.device
    cdef int k
    cdef unsigned long long threads = <unsigned long long>block[0] * block[1] * block[2]
    for k in range(3):
        if block[k] > <unsigned int>dev.max_block[k]:
            raise ArgumentValueError(f"kernel '{fn.name}': block{('xyz')[k]} = {block[k]} exceeds the device "
                                     f"limit {dev.max_block[k]} (block = ({block[0]}, {block[1]}, {block[2]}))")
        if grid[k] > <unsigned int>dev.max_grid[k]:
            raise ArgumentValueError(f"kernel '{fn.name}': grid{('xyz')[k]} = {grid[k]} exceeds the device "
                                     f"limit {dev.max_grid[k]} (grid = ({grid[0]}, {grid[1]}, {grid[2]}))")
    if threads > <unsigned long long>fn.max_threads:
        raise ArgumentValueError(f"kernel '{fn.name}': block of {threads} threads ({block[0]}x{block[1]}x"
                                 f"{block[2]}) exceeds the kernel's MAX_THREADS_PER_BLOCK = {fn.max_threads} "
                                 f"(device limit {dev.max_threads_per_block})")
    if <long long>shmem > fn.max_dynamic_shared:
        _raise_shared_limit(fn, shmem)
    return 0


cdef int _raise_shared_limit(KernelBase fn, unsigned int shmem) except -1:
    cdef Device dev = fn.device
    cdef int limit = dev.max_shared_optin - fn.static_shared
    if <long long>shmem > limit:
        raise ArgumentValueError(f"kernel '{fn.name}': {shmem} bytes of dynamic shared memory requested; the "
                                 f"kernel has {fn.static_shared} bytes static and the device allows "
                                 f"{dev.max_shared_optin} per block (opt-in), so at most {limit} dynamic")
    check(driver().p_cuFuncSetAttribute(fn._handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, <int>shmem),
          "cuFuncSetAttribute")
    fn.max_dynamic_shared = <int>shmem
    return 0


def _attribute_key(name):
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        raise ArgumentTypeError(f"a function attribute is a name or a CU_FUNC_ATTRIBUTE_* value, got {name!r}")
    if isinstance(name, int):
        if name not in _attributes.FUNCTION_ATTRIBUTES.values():
            raise ArgumentValueError(f"unknown function attribute value {name}")
        return name
    key = name.upper()
    if not key.startswith("CU_FUNC_ATTRIBUTE_"):
        key = "CU_FUNC_ATTRIBUTE_" + key
    if key not in _attributes.FUNCTION_ATTRIBUTES:
        known = ", ".join(k[len("CU_FUNC_ATTRIBUTE_"):].lower() for k in _attributes.FUNCTION_ATTRIBUTES)
        raise ArgumentValueError(f"unknown function attribute {name!r}; known: {known}")
    return _attributes.FUNCTION_ATTRIBUTES[key]


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class KernelBase:
    """A kernel handle: its launch limits, attributes and occupancy (the base
    of :class:`Function`; not constructed directly)."""

    def __cinit__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("Function objects come from Module.function(name)")

    cdef int init_kernel(self, CUfunction handle, str name, Device device, Lifetime module_life) except -1:
        cdef pycudadrv_driver_api* d = driver()
        self._handle = handle
        self.name = name
        self.device = device
        self._module_life = module_life
        check(d.p_cuFuncGetAttribute(&self.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, handle),
              "cuFuncGetAttribute")
        check(d.p_cuFuncGetAttribute(&self.static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle),
              "cuFuncGetAttribute")
        check(d.p_cuFuncGetAttribute(&self.max_dynamic_shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     handle), "cuFuncGetAttribute")
        return 0

    cdef int ensure_loaded(self) except -1:
        if self._module_life is not None and self._module_life.ended:
            raise ClosedError(f"kernel '{self.name}': its module was unloaded (Module.unload()); load the module "
                              "again and look the function up anew")
        return 0

    def attribute(self, name):
        """Value of a function attribute (``cuFuncGetAttribute``): a
        ``CU_FUNC_ATTRIBUTE_*`` name with or without the prefix, any case
        (``"num_regs"``, ``"local_size_bytes"``, ``"shared_size_bytes"``,
        ``"max_threads_per_block"``, ``"ptx_version"``, ``"binary_version"``,
        ...), or its value. Raises ArgumentValueError for an unknown name."""
        key = _attribute_key(name)
        self.ensure_loaded()
        cdef int v = 0
        check(driver().p_cuFuncGetAttribute(&v, <CUfunction_attribute>key, self._handle), "cuFuncGetAttribute")
        return v

    @property
    def attributes(self):
        """Every readable function attribute, ``{short lowercase name: value}``."""
        out = {}
        for full, value in _attributes.FUNCTION_ATTRIBUTES.items():
            try:
                out[full[len("CU_FUNC_ATTRIBUTE_"):].lower()] = self.attribute(value)
            except Exception:   # an attribute this driver does not know
                pass
        return out

    def set_attribute(self, name, int value):
        """Set a settable function attribute (``cuFuncSetAttribute``): one of
        :data:`SETTABLE_FUNCTION_ATTRIBUTES` (``"max_dynamic_shared_size_bytes"``,
        ``"preferred_shared_memory_carveout"`` in percent, the required cluster
        size, ``"non_portable_cluster_size_allowed"``,
        ``"cluster_scheduling_policy_preference"``).

        Raises ArgumentValueError for an unknown or read-only attribute, or a
        dynamic shared memory size beyond the device's opt-in limit; CudaError
        when the driver refuses the value."""
        key = _attribute_key(name)
        short = next(k for k, v in _attributes.FUNCTION_ATTRIBUTES.items() if v == key)[18:].lower()
        if short not in SETTABLE_FUNCTION_ATTRIBUTES:
            raise ArgumentValueError(f"function attribute {short!r} is read-only; settable: "
                                     + ", ".join(SETTABLE_FUNCTION_ATTRIBUTES))
        self.ensure_loaded()
        if key == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            if value < 0 or value > self.device.max_shared_optin - self.static_shared:
                raise ArgumentValueError(f"kernel '{self.name}': max_dynamic_shared_size_bytes must be in [0, "
                                         f"{self.device.max_shared_optin - self.static_shared}], got {value}")
        check(driver().p_cuFuncSetAttribute(self._handle, <CUfunction_attribute>key, value), "cuFuncSetAttribute")
        if key == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            self.max_dynamic_shared = value
            self._ok_grid[0] = 0

    def set_cache_preference(self, str preference):
        """Prefer more shared memory or more L1 for this kernel
        (``cuFuncSetCacheConfig``): ``"none"``, ``"shared"``, ``"l1"`` or
        ``"equal"``. Raises ArgumentValueError for another value."""
        if preference not in CACHE_PREFERENCES:
            raise ArgumentValueError(f"cache preference must be one of {sorted(CACHE_PREFERENCES)}, got "
                                     f"{preference!r}")
        self.ensure_loaded()
        check(driver().p_cuFuncSetCacheConfig(self._handle, <CUfunc_cache>CACHE_PREFERENCES[preference]),
              "cuFuncSetCacheConfig")

    cdef int _block_threads(self, block, unsigned int shmem) except -1:
        cdef unsigned int b[3]
        cdef unsigned int g[3]
        g[0] = g[1] = g[2] = 1
        parse_dims(block, b, "block", False)
        validate_config(self, g, b, shmem)
        return <int>(b[0] * b[1] * b[2])

    def max_active_blocks_per_multiprocessor(self, block, unsigned int shared_mem_bytes=0):
        """Blocks of this kernel that fit on one multiprocessor at once with
        ``block`` threads and ``shared_mem_bytes`` of dynamic shared memory
        (``cuOccupancyMaxActiveBlocksPerMultiprocessor``). The block and
        shared memory are validated as for a launch."""
        self.ensure_loaded()
        cdef int threads = self._block_threads(block, shared_mem_bytes)
        cdef int n = 0
        self.device.activate()
        check(driver().p_cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, self._handle, threads, shared_mem_bytes),
              "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n

    def max_cooperative_grid(self, block, unsigned int shared_mem_bytes=0):
        """The most blocks a cooperative launch of this kernel may have:
        resident blocks per multiprocessor x multiprocessors. Raises
        NotSupportedError when the device cannot launch cooperatively."""
        if not self.device._attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH):
            raise NotSupportedError(f"device {self.device.ordinal} does not support cooperative launches")
        return self.max_active_blocks_per_multiprocessor(block, shared_mem_bytes) * self.device.multiprocessor_count

    def max_potential_block_size(self, shared_mem_bytes=0, int block_size_limit=0):
        """The block size (threads) that maximises occupancy, and the smallest
        grid (blocks) that reaches it: ``(min_grid_size, block_size)``
        (``cuOccupancyMaxPotentialBlockSize``).

        ``shared_mem_bytes`` is the dynamic shared memory per block in bytes,
        or a callable ``f(block_size) -> bytes`` when it depends on the block
        size. ``block_size_limit`` caps the block size (0: the kernel's limit).
        Raises ArgumentValueError for a negative limit or size, and whatever
        the callable raises."""
        global _smem_of_block, _smem_error
        cdef int min_grid = 0, block_size = 0
        cdef CUresult r
        if block_size_limit < 0:
            raise ArgumentValueError(f"block_size_limit must be >= 0, got {block_size_limit}")
        self.ensure_loaded()
        self.device.activate()
        if callable(shared_mem_bytes):
            _smem_of_block, _smem_error = shared_mem_bytes, None
            try:
                r = driver().p_cuOccupancyMaxPotentialBlockSize(&min_grid, &block_size, self._handle,
                                                                _smem_trampoline, 0, block_size_limit)
                if _smem_error is not None:
                    raise _smem_error
            finally:
                _smem_of_block, _smem_error = None, None
        else:
            if isinstance(shared_mem_bytes, bool) or not isinstance(shared_mem_bytes, (int, np.integer)) or \
                    shared_mem_bytes < 0:
                raise ArgumentValueError(f"shared_mem_bytes must be a non-negative int or a callable, got "
                                         f"{shared_mem_bytes!r}")
            r = driver().p_cuOccupancyMaxPotentialBlockSize(&min_grid, &block_size, self._handle, NULL,
                                                            <size_t>shared_mem_bytes, block_size_limit)
        check(r, "cuOccupancyMaxPotentialBlockSize")
        return (min_grid, block_size)

    def available_dynamic_shared_memory(self, int num_blocks, block):
        """Dynamic shared memory per block, in bytes, that still lets
        ``num_blocks`` blocks of ``block`` threads be resident on one
        multiprocessor (``cuOccupancyAvailableDynamicSMemPerBlock``)."""
        if num_blocks < 1:
            raise ArgumentValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.ensure_loaded()
        cdef int threads = self._block_threads(block, 0)
        cdef size_t n = 0
        self.device.activate()
        check(driver().p_cuOccupancyAvailableDynamicSMemPerBlock(&n, self._handle, num_blocks, threads),
              "cuOccupancyAvailableDynamicSMemPerBlock")
        return n
