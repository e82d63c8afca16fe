# cython: language_level=3
"""Driver loader: open libcuda at first use, resolve every entry point with
cuGetProcAddress at the ABI version of the header we compiled against, and turn
CUresult codes into exceptions.

The library is opened through ``ctypes`` (``dlopen`` underneath), so the
extension itself references no ``dl*`` symbol: since glibc 2.34 those live in
libc under a newer symbol version, which would raise the wheel's glibc floor.
"""
cimport cython
from libc.stdint cimport uint64_t, uintptr_t
from libc.string cimport memset

from pycudadrv._cuda cimport *
from pycudadrv._driver_api cimport (
    pycudadrv_driver_api, pycudadrv_entry_points, PYCUDADRV_N_ENTRY_POINTS,
    PYCUDADRV_MIN_DRIVER_VERSION, PYCUDADRV_HEADER_CUDA_VERSION)

import ctypes
import os
import threading
import warnings

from pycudadrv._env import debug_log
from pycudadrv._errors import CudaError, CudaUnavailableError, ArgumentTypeError

__all__ = ["CudaError", "CudaUnavailableError", "LIBCUDA", "MIN_DRIVER_VERSION", "HEADER_CUDA_VERSION",
           "is_available", "require", "driver_version", "driver_library", "fnv1a64"]

cdef extern from "pycudadrv/fnv1a.h" nogil:
    uint64_t pycudadrv_fnv1a64(const void* data, size_t n)

ctypedef CUresult (*getproc_t)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*) noexcept nogil

#: The default name of the driver library; PYCUDADRV_LIBCUDA overrides it.
LIBCUDA = "libcuda.so.1"
#: Oldest driver (CUDA version, 1000*major + 10*minor) pycudadrv runs on.
MIN_DRIVER_VERSION = PYCUDADRV_MIN_DRIVER_VERSION
#: CUDA version of the cuda.h this build was compiled against.
HEADER_CUDA_VERSION = PYCUDADRV_HEADER_CUDA_VERSION


def _version_str(int v):
    return f"{v // 1000}.{(v % 1000) // 10}"


cdef pycudadrv_driver_api _api
cdef bint _loaded = False
cdef bint _names_ready = False   # cuGetErrorName/String resolved (before cuInit runs)
cdef object _load_error = None
cdef int _driver_version = 0
cdef object _lib = None          # the ctypes handle: keeps the library mapped
cdef str _lib_path = ""
_load_lock = threading.Lock()


cdef getproc_t _open_library(str shown, str where, bint from_env) except NULL:
    global _lib, _lib_path
    debug_log("driver", f"dlopen({shown!r}){where}")
    try:
        lib = ctypes.CDLL(shown, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        raise CudaUnavailableError(
            f"CUDA driver library not found: dlopen({shown!r}){where} failed: {e}. "
            + ("Point PYCUDADRV_LIBCUDA at libcuda.so.1 or unset it." if from_env else
               "Install the NVIDIA driver (pycudadrv needs no toolkit).")) from None
    try:
        addr = ctypes.cast(lib.cuGetProcAddress_v2, ctypes.c_void_p).value
    except AttributeError:
        if not hasattr(lib, "cuDriverGetVersion"):
            raise CudaUnavailableError(
                f"{shown!r}{where} is not a CUDA driver library (it has no cuDriverGetVersion)") from None
        raise CudaUnavailableError(
            f"the CUDA driver in {shown!r}{where} has no cuGetProcAddress_v2: driver older than "
            f"CUDA {_version_str(PYCUDADRV_MIN_DRIVER_VERSION)}, the oldest pycudadrv supports") from None
    _lib = lib
    _lib_path = shown
    return <getproc_t><uintptr_t>addr


cdef int _load() except -1:
    global _loaded, _driver_version, _names_ready
    cdef getproc_t getproc
    cdef int i, j, ver
    cdef CUdriverProcAddressQueryResult qres
    cdef void* fn
    cdef char* base
    cdef int drv_ver = 0
    cdef CUresult r
    env = os.environ.get("PYCUDADRV_LIBCUDA")
    shown = os.fsdecode(os.fsencode(env)) if env else LIBCUDA
    where = " (from PYCUDADRV_LIBCUDA)" if env else ""
    getproc = _open_library(shown, where, bool(env))
    # cuDriverGetVersion first, so every other symbol is asked for at a version the driver knows.
    fn = NULL
    r = getproc("cuDriverGetVersion", &fn, 2020, CU_GET_PROC_ADDRESS_DEFAULT, &qres)
    if r != CUDA_SUCCESS or fn == NULL:
        raise CudaUnavailableError(f"the CUDA driver in {shown!r} failed cuGetProcAddress(cuDriverGetVersion): "
                                   f"CUresult {r}", code=r)
    r = (<CUresult (*)(int*) noexcept nogil>fn)(&drv_ver)
    if r != CUDA_SUCCESS:
        raise CudaUnavailableError(f"the CUDA driver in {shown!r} failed cuDriverGetVersion: CUresult {r}",
                                   code=r)
    if drv_ver < PYCUDADRV_MIN_DRIVER_VERSION:
        raise CudaUnavailableError(
            f"CUDA driver too old: it supports CUDA {_version_str(drv_ver)}, "
            f"pycudadrv needs CUDA {_version_str(PYCUDADRV_MIN_DRIVER_VERSION)} or newer")
    memset(&_api, 0, sizeof(_api))
    base = <char*>&_api
    missing = []
    for i in range(PYCUDADRV_N_ENTRY_POINTS):
        fn = NULL
        for j in range(4):
            ver = pycudadrv_entry_points[i].versions[j]
            if ver == 0:
                break
            if ver > drv_ver:
                continue
            r = getproc(pycudadrv_entry_points[i].name, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT, &qres)
            if r == CUDA_SUCCESS and fn != NULL:
                break
            fn = NULL
        (<void**>(base + pycudadrv_entry_points[i].offset))[0] = fn
        if fn == NULL and pycudadrv_entry_points[i].required:
            missing.append((<bytes>pycudadrv_entry_points[i].name).decode())
    if missing:
        raise CudaUnavailableError(
            f"CUDA driver {_version_str(drv_ver)} lacks entry points pycudadrv needs: "
            + ", ".join(missing))
    # Error names are usable from here on, so a cuInit failure says which it was.
    _names_ready = _api.p_cuGetErrorName != NULL and _api.p_cuGetErrorString != NULL
    r = _api.p_cuInit(0)
    if r != CUDA_SUCCESS:
        debug_log("driver", f"cuInit(0) failed: {make_error(r, 'cuInit').name} (CUresult {r}) "
                  f"from {shown!r}, CUDA {_version_str(drv_ver)}")
    else:
        debug_log("driver", f"loaded {shown!r}{where}: CUDA {_version_str(drv_ver)}, cuInit(0) succeeded")
    if r == CUDA_ERROR_NO_DEVICE:
        raise CudaUnavailableError(
            f"no CUDA device: the driver (CUDA {_version_str(drv_ver)}) loaded but cuInit reports "
            "CUDA_ERROR_NO_DEVICE (check CUDA_VISIBLE_DEVICES)", code=r, name="CUDA_ERROR_NO_DEVICE",
            call="cuInit")
    if r != CUDA_SUCCESS:
        err = make_error(r, "cuInit")
        raise CudaUnavailableError(f"cuInit failed: {err}", code=r, name=err.name, call="cuInit") from err
    _driver_version = drv_ver
    _loaded = True
    return 0


cdef pycudadrv_driver_api* driver() except NULL:
    # The fast path alone: every launch asks, and the loading below (a lock, a try) would make
    # each call set up exception state.
    if _loaded:
        return &_api
    return _driver_first_use()


cdef pycudadrv_driver_api* _driver_first_use() except NULL:
    global _load_error
    with _load_lock:
        if not _loaded:
            if _load_error is not None:
                raise CudaUnavailableError(*_load_error.__reduce__()[1])
            try:
                _load()
            except CudaUnavailableError as e:
                _load_error = e
                debug_log("driver", f"unavailable: {e}")
                raise
    return &_api


cdef object make_error(CUresult status, str call, str context=""):
    cdef const char* s = NULL
    name = f"CUDA_ERROR_UNKNOWN_CODE_{status}"
    desc = "unrecognized error code"
    if _names_ready:
        if _api.p_cuGetErrorName(status, &s) == CUDA_SUCCESS and s != NULL:
            name = (<bytes>s).decode()
        s = NULL
        if _api.p_cuGetErrorString(status, &s) == CUDA_SUCCESS and s != NULL:
            desc = (<bytes>s).decode()
    return CudaError(status, name, desc, call, context)


cdef int check(CUresult status, const char* call) except -1 nogil:
    if status == CUDA_SUCCESS:
        return 0
    with gil:
        raise make_error(status, (<bytes>call).decode())


cdef set _dealloc_warned = set()


cdef void warn_dealloc_failure(str what, object err) noexcept:
    try:
        if what in _dealloc_warned:
            return
        _dealloc_warned.add(what)
        warnings.warn(f"pycudadrv: releasing a {what} failed during garbage collection ({err}); "
                      "further failures of this kind are not reported. Call close() to see the error.",
                      RuntimeWarning, stacklevel=2)
    except BaseException:
        pass  # at interpreter shutdown even warnings may be gone


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class Lifetime:
    """Internal: whether the handle an owner holds is still valid."""

    def __cinit__(self, str what=""):
        self.ended = False
        self.what = what


def is_available():
    """Return True if the CUDA driver loads, is new enough, and sees a device.

    Never raises; call :func:`require` (or any CUDA function) to get the reason
    as a :class:`CudaUnavailableError`.
    """
    try:
        driver()
    except Exception:
        return False
    cdef int n = 0
    if _api.p_cuDeviceGetCount(&n) != CUDA_SUCCESS:
        return False
    return n > 0


def require():
    """Load the driver (``dlopen`` + ``cuGetProcAddress`` + ``cuInit``).

    Raises
    ------
    CudaUnavailableError
        Library not found, no device, or driver older than ``MIN_DRIVER_VERSION``.
    """
    driver()


def driver_version():
    """CUDA version the installed driver supports, as ``(major, minor)``
    (``cuDriverGetVersion``). Raises CudaUnavailableError without a driver."""
    driver()
    return (_driver_version // 1000, (_driver_version % 1000) // 10)


def driver_library():
    """The driver library as opened: the name or path given to ``dlopen``
    (``libcuda.so.1`` unless ``PYCUDADRV_LIBCUDA`` says otherwise). Raises
    CudaUnavailableError without a driver."""
    driver()
    return _lib_path


def fnv1a64(data):
    """FNV-1a 64-bit hash of a bytes-like object (the module cache key).

    Offset basis 0xcbf29ce484222325, prime 0x100000001b3. Returns an int in
    [0, 2**64). Raises ArgumentTypeError for objects without the buffer protocol.
    """
    try:
        mv = memoryview(data)
    except TypeError:
        raise ArgumentTypeError(f"fnv1a64: expected a bytes-like object, got {type(data).__name__}") from None
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    cdef const unsigned char[::1] view = mv.cast("B")
    if view.shape[0] == 0:
        return pycudadrv_fnv1a64(NULL, 0)
    return pycudadrv_fnv1a64(&view[0], view.shape[0])


