# cython: language_level=3, boundscheck=False, wraparound=False
"""Kernel-parameter marshalling and launches (generic and prepared)."""
cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, uintptr_t, INT64_MIN
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset, memcmp
from cpython.object cimport Py_TYPE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyObject_CheckBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.complex cimport PyComplex_RealAsDouble, PyComplex_ImagAsDouble

from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, peer_enabled
from pycudadrv._stream cimport Stream, Event, resolve_stream
from pycudadrv._memory cimport Buffer, cai_data_pointer

import numpy as np
from pycudadrv import _signature

cdef enum:
    K_ANY = 0
    K_INT = 1
    K_UINT = 2
    K_FLOAT = 3
    K_POINTER = 4
    K_BYTES = 5
    K_INTEGER = 6

cdef tuple KIND_TEXT = ("parameter", "integer parameter", "unsigned integer parameter",
                        "floating-point parameter", "pointer parameter", "struct/bytes parameter",
                        "integer parameter")

# Launches hold the GIL by default: releasing and re-taking it costs more than a
# third of pycudadrv's own overhead per launch (measured by bench/launch_overhead.py,
# "prepared, GIL held" row). Blocking calls (synchronize, copies to the host) always
# release it.
cdef bint _release_gil = False
cdef pycudadrv_driver_api* _d = NULL
# Instrumentation (profiling / tracing): an object with before(fn, stream) -> token and
# after(token, fn, stream, grid, block, shared_mem_bytes), or None (the fast path).
cdef object _hook = None


def set_launch_hook(hook):
    """Install (or, with None, remove) the launch instrumentation hook used by
    pycudadrv.profile; returns the previous one."""
    global _hook
    prev = _hook
    _hook = hook
    return prev


def get_launch_hook():
    return _hook


def set_release_gil(bint flag):
    """Whether kernel and graph launches release the GIL around the driver
    call (default False: a launch returns in microseconds, and holding the
    GIL is measurably faster). Turn it on when other Python threads must run
    during launches. Returns the previous setting."""
    global _release_gil
    prev = _release_gil
    _release_gil = flag
    return prev


cdef bint launch_releases_gil() noexcept:
    return _release_gil


def get_release_gil():
    """Whether launches release the GIL (see :func:`set_release_gil`)."""
    return _release_gil


class NotSupportedError(RuntimeError):
    """The device or driver cannot do what was asked (e.g. thread-block clusters below sm_90)."""


# --- numpy scalar fast path ---------------------------------------------------------------
# A numpy scalar of a fixed-size builtin type stores its value right after the object
# header (numpy's arrayscalars.h: PyObject_HEAD then `obval`). The offset of each type is
# verified at import against the value's tobytes(); a type that does not verify, or that
# is not in the table, goes through the buffer protocol instead.
cdef enum:
    _NP_MAX = 16
cdef void* _np_type[_NP_MAX]
cdef Py_ssize_t _np_size[_NP_MAX]
cdef Py_ssize_t _np_offset[_NP_MAX]
cdef bint _np_is_float[_NP_MAX]     # float or complex
cdef bint _np_is_complex[_NP_MAX]
cdef int _n_np = 0


def _init_numpy_fast_path():
    global _n_np
    cdef object v
    cdef bytes expect
    cdef Py_ssize_t off
    samples = [(np.bool_, True), (np.int8, -7), (np.uint8, 201), (np.int16, -12345), (np.uint16, 54321),
               (np.int32, -123456789), (np.uint32, 3123456789), (np.int64, -1234567890123),
               (np.uint64, 12345678901234567890), (np.float16, 1.5), (np.float32, -2.75),
               (np.float64, 3.141592653589793), (np.complex64, 1.5 - 2.5j), (np.complex128, -0.5 + 0.25j)]
    _n_np = 0
    for t, sample in samples:
        v = t(sample)
        expect = np.asarray(v).tobytes()
        for off in (16, 24, 32):
            if memcmp(<char*><void*>v + off, <char*>expect, len(expect)) == 0:
                _np_type[_n_np] = <void*>Py_TYPE(v)
                _np_size[_n_np] = len(expect)
                _np_offset[_n_np] = off
                _np_is_float[_n_np] = v.dtype.kind in "fc"
                _np_is_complex[_n_np] = v.dtype.kind == "c"
                _n_np += 1
                break
    return _n_np


_init_numpy_fast_path()


cdef inline int _np_index(object a) noexcept:
    cdef void* t = <void*>Py_TYPE(a)
    cdef int k
    for k in range(_n_np):
        if _np_type[k] == t:
            return k
    return -1


cdef inline pycudadrv_driver_api* _drv() except NULL:
    global _d
    if _d == NULL:
        _d = driver()
    return _d


cdef Function make_function(CUfunction handle, str name, object module, Device device, object layout,
                            str layout_source):
    cdef Function f = Function.__new__(Function)
    cdef pycudadrv_driver_api* d = _drv()
    f.handle = handle
    f.name = name
    f.module = module
    f.device = device
    f.n_params = -1
    f.params = NULL
    check(d.p_cuFuncGetAttribute(&f.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, handle),
          "cuFuncGetAttribute")
    check(d.p_cuFuncGetAttribute(&f.static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle),
          "cuFuncGetAttribute")
    check(d.p_cuFuncGetAttribute(&f.max_dynamic_shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle),
          "cuFuncGetAttribute")
    import pycudadrv._driver as _drvmod
    dv = _drvmod.driver_version()
    f.param_limit = _signature.param_limit(dv[0] * 1000 + dv[1] * 10, device.cc_major)
    if layout is not None:
        f.set_layout(layout, layout_source)
    else:
        f.layout_source = "unknown"
    return f


cdef str _describe_value(object a):
    if isinstance(a, Buffer):
        return f"Buffer({(<Buffer>a).nbytes} bytes)"
    if isinstance(a, np.generic):
        return f"{type(a).__name__}({a!r})" if not isinstance(a, np.void) else f"struct {a.dtype}"
    if isinstance(a, (bytes, bytearray, memoryview)):
        return f"{type(a).__name__}[{len(a)}]"
    r = repr(a)
    return f"{type(a).__name__} {r[:40]}"


cdef object _arg_error(Function fn, Py_ssize_t i, ParamSpec* p, object a, str why):
    if p != NULL:
        what = f"{p.size}-byte {KIND_TEXT[p.kind]}"
    else:
        what = "parameter"
    return TypeError(f"kernel '{fn.name}', parameter #{i} ({what}): {why}; got {_describe_value(a)}")


cdef inline CUresult _launch_kernel(pycudadrv_driver_api* d, CUfunction f, unsigned int* g, unsigned int* b,
                                    unsigned int shmem, CUstream s, void** kp) noexcept:
    """The one cuLaunchKernel call of every launch path (GIL held unless set_release_gil(True))."""
    cdef CUresult r
    if _release_gil:
        with nogil:
            r = d.p_cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], shmem, s, kp, NULL)
        return r
    return d.p_cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], shmem, s, kp, NULL)


cdef int _check_device(Buffer b, Function fn, Py_ssize_t i) except -1:
    if b.device is None or b.device.ordinal == fn.device.ordinal:
        return 0
    if not peer_enabled(fn.device.ordinal, b.device.ordinal):
        raise ValueError(f"kernel '{fn.name}' (device {fn.device.ordinal}), parameter #{i}: the Buffer lives on "
                         f"device {b.device.ordinal}; call Device({fn.device.ordinal}).enable_peer_access("
                         f"Device({b.device.ordinal})) or copy it to device {fn.device.ordinal} first")
    return 0


cdef int _pack_int(object a, Function fn, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(a, &overflow)
    cdef unsigned long long u = 0
    cdef size_t size = p.size
    cdef int kind = p.kind
    if kind == K_FLOAT:
        try:
            x = float(a)
        except OverflowError:
            raise _arg_error(fn, i, p, a, f"value out of range for a {size * 8}-bit float") from None
        return _pack_float(x, fn, i, p, dst, a)
    if kind == K_BYTES:
        raise _arg_error(fn, i, p, a, "a Python int cannot fill a struct parameter; pass a numpy structured "
                         "scalar or bytes of the exact size")
    if kind == K_POINTER and (overflow < 0 or (overflow == 0 and v < 0)):
        raise _arg_error(fn, i, p, a, "a raw device pointer must be >= 0")
    if overflow > 0:
        if size != 8 or kind == K_INT:
            raise _arg_error(fn, i, p, a, f"value out of range for a {size * 8}-bit "
                             f"{'signed' if kind == K_INT else ''} integer".replace("  ", " "))
        try:
            u = PyLong_AsUnsignedLongLong(a)
        except OverflowError:
            raise _arg_error(fn, i, p, a, "value out of range for a 64-bit integer") from None
        memcpy(dst, &u, 8)
        return 0
    if overflow < 0:
        raise _arg_error(fn, i, p, a, f"value out of range for a {size * 8}-bit "
                         + ("unsigned " if kind == K_UINT else ("signed " if kind == K_INT else "")) + "integer")
    # range of the width: signed for INT, unsigned for UINT/POINTER, either for ANY
    cdef long long lo, hi
    if size == 1:
        lo, hi = (-128 if kind != K_UINT else 0), (127 if kind == K_INT else 255)
    elif size == 2:
        lo, hi = (-32768 if kind != K_UINT else 0), (32767 if kind == K_INT else 65535)
    elif size == 4:
        lo, hi = (-2147483648LL if kind != K_UINT else 0), (2147483647LL if kind == K_INT else 4294967295LL)
    elif size == 8:
        lo = INT64_MIN if kind != K_UINT else 0
        hi = 9223372036854775807LL
    else:
        raise _arg_error(fn, i, p, a, "a Python int fits 1-, 2-, 4- or 8-byte parameters only")
    if v < lo or v > hi:
        raise _arg_error(fn, i, p, a, f"value out of range for a {size * 8}-bit "
                         + ("signed " if kind == K_INT else ("unsigned " if kind == K_UINT else "")) + "integer")
    if size == 8:
        memcpy(dst, &v, 8)
    elif size == 4:
        (<uint32_t*>dst)[0] = <uint32_t>v
    elif size == 2:
        (<uint16_t*>dst)[0] = <uint16_t>v
    else:
        dst[0] = <uint8_t>v
    return 0


cdef int _pack_float(double x, Function fn, Py_ssize_t i, ParamSpec* p, unsigned char* dst, object a) except -1:
    cdef float f
    cdef uint16_t h = 0
    cdef int kind = p.kind
    if kind == K_FLOAT or kind == K_ANY:
        if p.size == 4:
            if x != x or -3.4028234663852886e38 <= x <= 3.4028234663852886e38 or x == x * 2:
                f = <float>x  # NaN, in range, or +-inf: representable
            else:
                raise _arg_error(fn, i, p, a, "value out of range for a 32-bit float (it would become inf)")
            memcpy(dst, &f, 4)
            return 0
        if p.size == 8:
            memcpy(dst, &x, 8)
            return 0
        if p.size == 2:
            if x == x and x != x * 2 and not (-65520.0 < x < 65520.0):
                raise _arg_error(fn, i, p, a, "value out of range for a 16-bit float (it would become inf)")
            with np.errstate(over="ignore"):
                h = np.float16(x).view(np.uint16)
            memcpy(dst, &h, 2)
            return 0
        raise _arg_error(fn, i, p, a, "a Python float fits 2-, 4- or 8-byte parameters only")
    if kind == K_POINTER or (p.size == 8 and kind != K_BYTES):
        raise _arg_error(fn, i, p, a, "a float given to a pointer-sized parameter (pass a Buffer, None or an int)")
    if kind == K_BYTES and p.size == 2:
        raise _arg_error(fn, i, p, a, "a Python float is ambiguous for a 2-byte struct parameter (__half or "
                         "__nv_bfloat16?): pass np.float16(x) or the exact bytes")
    raise _arg_error(fn, i, p, a, "a float given to a non-floating-point parameter")


cdef int _pack_pointer(uint64_t ptr, Function fn, Py_ssize_t i, ParamSpec* p, unsigned char* dst, object a) except -1:
    if p.size != 8 or p.kind == K_FLOAT or p.kind == K_BYTES:
        raise _arg_error(fn, i, p, a, "a device pointer needs an 8-byte pointer/integer parameter")
    memcpy(dst, &ptr, 8)
    return 0


cdef int _pack_bytes(object a, Function fn, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    cdef Py_buffer view
    if p.kind != K_BYTES and p.kind != K_ANY and not isinstance(a, np.generic):
        raise _arg_error(fn, i, p, a, "raw bytes fit struct parameters only")
    try:
        PyObject_GetBuffer(a, &view, PyBUF_SIMPLE)
    except (BufferError, ValueError) as e:
        raise _arg_error(fn, i, p, a, f"cannot read its bytes ({e})") from None
    try:
        if <size_t>view.len != p.size:
            raise _arg_error(fn, i, p, a, f"expected exactly {p.size} bytes, the value has {view.len}")
        memcpy(dst, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef int _pack_slow(object a, Function fn, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    cdef double re, im
    cdef float fre, fim
    if a is None:
        if p.kind not in (K_POINTER, K_INTEGER, K_ANY) or p.size != 8:
            raise _arg_error(fn, i, p, a, "None (a null pointer) fits pointer parameters only")
        return _pack_pointer(0, fn, i, p, dst, a)
    if isinstance(a, Buffer):
        _ensure_buffer_open(<Buffer>a, fn, i, p)
        if fn.device is not None:
            _check_device(<Buffer>a, fn, i)
        return _pack_pointer((<Buffer>a).ptr, fn, i, p, dst, a)
    if isinstance(a, np.ndarray):
        raise _arg_error(fn, i, p, a, "a host numpy array cannot be a kernel argument; copy it to the device "
                         "with Buffer.from_numpy(array)")
    if isinstance(a, np.generic):
        # The kind is known (PTX or a signature): a float scalar for an integer or pointer
        # parameter, or an integer scalar for a float one, is a mistake, not a bit pattern.
        dkind = a.dtype.kind
        if p.kind not in (K_BYTES, K_ANY) and dkind not in "biufc":
            raise _arg_error(fn, i, p, a, f"a numpy {a.dtype} scalar fits struct parameters only")
        is_float = dkind in "fc"
        if p.kind == K_FLOAT and dkind == "c":
            raise _arg_error(fn, i, p, a, "a numpy complex scalar given to a real floating-point parameter")
        if p.kind == K_POINTER and dkind == "b":
            raise _arg_error(fn, i, p, a, "a bool given to a pointer parameter")
        if p.kind == K_POINTER and dkind in "iu":
            return _pack_int(int(a), fn, i, p, dst)   # an address: range-checked like a Python int
        if p.kind in (K_INT, K_UINT, K_INTEGER, K_POINTER) and is_float:
            raise _arg_error(fn, i, p, a, "a numpy floating-point scalar given to an integer or pointer "
                             "parameter (its bits would be reinterpreted)")
        if p.kind == K_FLOAT and not is_float and not isinstance(a, np.void):
            raise _arg_error(fn, i, p, a, "a numpy integer scalar given to a floating-point parameter (its bits "
                             "would be reinterpreted); pass a float or a numpy float of that width")
        return _pack_bytes(a, fn, i, p, dst)
    if isinstance(a, bool):
        if p.kind == K_POINTER:
            raise _arg_error(fn, i, p, a, "a bool given to a pointer parameter")
        return _pack_int(1 if a else 0, fn, i, p, dst)
    if isinstance(a, int):
        return _pack_int(int(a), fn, i, p, dst)
    if isinstance(a, float):
        return _pack_float(float(a), fn, i, p, dst, a)
    if isinstance(a, (bytes, bytearray, memoryview)):
        return _pack_bytes(a, fn, i, p, dst)
    if isinstance(a, complex):
        if p.kind != K_BYTES and p.kind != K_ANY:
            raise _arg_error(fn, i, p, a, "a complex value needs an 8- or 16-byte struct parameter")
        re, im = a.real, a.imag
        if p.size == 8:
            fre, fim = <float>re, <float>im
            memcpy(dst, &fre, 4)
            memcpy(dst + 4, &fim, 4)
            return 0
        if p.size == 16:
            memcpy(dst, &re, 8)
            memcpy(dst + 8, &im, 8)
            return 0
        raise _arg_error(fn, i, p, a, "a complex value needs an 8- or 16-byte struct parameter")
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return _pack_pointer(_cai_pointer(a, cai, fn, i, p), fn, i, p, dst, a)
    raise _arg_error(fn, i, p, a, "unsupported argument type (use a Buffer, a numpy scalar, int, float, "
                     "complex, bool, None, bytes, or an object with __cuda_array_interface__)")


cdef int _ensure_buffer_open(Buffer b, Function fn, Py_ssize_t i, ParamSpec* p) except -1:
    try:
        b.ensure_open()
    except ValueError as e:
        raise ValueError(f"kernel '{fn.name}', parameter #{i}: {e}") from None
    return 0


cdef uint64_t _cai_pointer(object a, object cai, Function fn, Py_ssize_t i, ParamSpec* p) except? 0:
    try:
        return <uint64_t>cai_data_pointer(cai)
    except ValueError as e:
        raise _arg_error(fn, i, p, a, str(e)) from None


cdef inline int pack_arg(object a, Function fn, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    """Write argument `a` for parameter `p` into `dst` (at least p.size bytes, zeroed)."""
    cdef type t = type(a)
    cdef Buffer b
    cdef double x
    cdef float f
    if t is Buffer:
        b = <Buffer>a
        if b.closed or (b.root is not None and b.root.closed):
            _ensure_buffer_open(b, fn, i, p)
        if b.device is not fn.device and fn.device is not None:
            _check_device(b, fn, i)
        if p.size == 8 and p.kind != K_FLOAT and p.kind != K_BYTES:
            memcpy(dst, &b.ptr, 8)
            return 0
        return _pack_pointer(b.ptr, fn, i, p, dst, a)
    if t is float:
        x = PyFloat_AS_DOUBLE(a)
        if p.kind == K_FLOAT or p.kind == K_ANY:
            if p.size == 4 and -3.4028234663852886e38 <= x <= 3.4028234663852886e38:
                f = <float>x
                memcpy(dst, &f, 4)
                return 0
            if p.size == 8:
                memcpy(dst, &x, 8)
                return 0
        return _pack_float(x, fn, i, p, dst, a)
    if t is int:
        return _pack_int(a, fn, i, p, dst)
    if t is bool and p.kind != K_POINTER:
        return _pack_int(1 if a is True else 0, fn, i, p, dst)
    cdef int k = _np_index(a)
    if k >= 0 and <size_t>_np_size[k] == p.size and p.kind != K_POINTER and (
            p.kind == K_ANY or p.kind == K_BYTES or
            ((p.kind == K_FLOAT) == _np_is_float[k] and not _np_is_complex[k])):
        memcpy(dst, <char*><void*>a + _np_offset[k], _np_size[k])
        return 0
    return _pack_slow(a, fn, i, p, dst)


cdef int infer_spec(object a, Function fn, Py_ssize_t i, ParamSpec* p) except -1:
    """Layout unknown: take the parameter's size from a sized value."""
    cdef Py_buffer view
    p.offset = 0
    if a is None or isinstance(a, Buffer) or hasattr(a, "__cuda_array_interface__"):
        p.kind = K_POINTER
        p.size = 8
        return 0
    if isinstance(a, np.generic) or isinstance(a, (bytes, bytearray, memoryview)):
        PyObject_GetBuffer(a, &view, PyBUF_SIMPLE)
        p.size = view.len
        PyBuffer_Release(&view)
        p.kind = K_BYTES
        return 0
    raise TypeError(
        f"kernel '{fn.name}', parameter #{i}: the parameter sizes are unknown (the driver cannot report them "
        "-- cuFuncGetParamInfo needs a CUDA 12.4+ driver -- and the module was not PTX), so a Python "
        f"{type(a).__name__} has no width; pass a numpy scalar (e.g. np.int32(7), np.float32(2.0)) or give "
        "module.function(name, signature=...)")


cdef int _parse_dims(object v, unsigned int* out, str what) except -1:
    cdef Py_ssize_t n, k
    if type(v) is int:
        if v < 1 or v > 0xFFFFFFFF:
            raise ValueError(f"{what} dimension must be in [1, 2**32-1], got {v}")
        out[0] = <unsigned int>v
        out[1] = 1
        out[2] = 1
        return 0
    if not isinstance(v, (tuple, list)):
        v = tuple(v) if hasattr(v, "__iter__") else (v,)
    n = len(v)
    if n < 1 or n > 3:
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {v!r}")
    out[1] = 1
    out[2] = 1
    for k in range(n):
        x = v[k]
        if not isinstance(x, int) or isinstance(x, bool):
            if isinstance(x, np.integer):
                x = int(x)
            else:
                raise TypeError(f"{what} dimensions must be ints, got {v!r}")
        if x < 1 or x > 0xFFFFFFFF:
            raise ValueError(f"{what} dimensions must be >= 1, got {v!r}")
        out[k] = <unsigned int>x
    return 0


cdef int _validate(Function fn, unsigned int* grid, unsigned int* block, unsigned int shmem) except -1:
    cdef Device dev = fn.device
    cdef int k
    cdef unsigned long long threads = <unsigned long long>block[0] * block[1] * block[2]
    for k in range(3):
        if block[k] > <unsigned int>dev.max_block[k]:
            raise ValueError(f"kernel '{fn.name}': block{('xyz')[k]} = {block[k]} exceeds the device limit "
                             f"{dev.max_block[k]} (block = ({block[0]}, {block[1]}, {block[2]}))")
        if grid[k] > <unsigned int>dev.max_grid[k]:
            raise ValueError(f"kernel '{fn.name}': grid{('xyz')[k]} = {grid[k]} exceeds the device limit "
                             f"{dev.max_grid[k]} (grid = ({grid[0]}, {grid[1]}, {grid[2]}))")
    if threads > <unsigned long long>fn.max_threads:
        raise ValueError(f"kernel '{fn.name}': block of {threads} threads ({block[0]}x{block[1]}x{block[2]}) "
                         f"exceeds the kernel's MAX_THREADS_PER_BLOCK = {fn.max_threads} "
                         f"(device limit {dev.max_threads_per_block})")
    if <int>shmem > fn.max_dynamic_shared:
        _raise_shared_limit(fn, shmem)
    return 0


cdef int _raise_shared_limit(Function fn, unsigned int shmem) except -1:
    cdef Device dev = fn.device
    cdef int limit = dev.max_shared_optin - fn.static_shared
    if <long long>shmem > limit:
        raise ValueError(f"kernel '{fn.name}': {shmem} bytes of dynamic shared memory requested; the kernel has "
                         f"{fn.static_shared} bytes static and the device allows {dev.max_shared_optin} per block "
                         f"(opt-in), so at most {limit} dynamic")
    check(_drv().p_cuFuncSetAttribute(fn.handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, <int>shmem),
          "cuFuncSetAttribute")
    fn.max_dynamic_shared = <int>shmem
    return 0


cdef str _args_summary(tuple args):
    return "[" + ", ".join(_describe_value(a) for a in args[:16]) + (", ..." if len(args) > 16 else "") + "]"


cdef object _launch_error(CUresult r, str call, Function fn, unsigned int* grid, unsigned int* block,
                          unsigned int shmem, tuple args):
    return make_error(r, call,
                      f"launching kernel '{fn.name}' grid=({grid[0]}, {grid[1]}, {grid[2]}) "
                      f"block=({block[0]}, {block[1]}, {block[2]}) shared_mem_bytes={shmem} "
                      f"args={_args_summary(args)}")


cdef ParamSpec* infer_layout(Function fn, tuple args) except NULL:
    """Layout unknown: each parameter's size from its value, checked against the
    parameter-space limit. The array is malloc'd; the caller frees it."""
    cdef Py_ssize_t k, n = len(args)
    cdef ParamSpec* specs = <ParamSpec*>malloc(max(n, 1) * sizeof(ParamSpec))
    if specs == NULL:
        raise MemoryError()
    try:
        for k in range(n):
            infer_spec(args[k], fn, k, &specs[k])
        _check_param_space(fn, specs, n, True)
    except BaseException:
        free(specs)
        raise
    return specs


cdef void** marshal(pycudadrv_arena* arena, Function fn, tuple args, ParamSpec* specs) except NULL:
    """Marshal each argument for parameter ``specs[i]`` into ``arena`` (freshly
    initialised) and return the void* array cuLaunchKernel takes."""
    cdef Py_ssize_t i
    cdef unsigned char* dst
    for i in range(len(args)):
        dst = pycudadrv_arena_push(arena, specs[i].size)
        if dst == NULL:
            raise MemoryError("kernel argument arena")
        pack_arg(args[i], fn, i, &specs[i], dst)
    return pycudadrv_arena_finish(arena)


cdef int _check_param_space(Function fn, ParamSpec* specs, Py_ssize_t n, bint place) except -1:
    """Raise ValueError, listing each parameter's offset and size, when the parameters
    exceed the driver's limit. With ``place``, first give each parameter its offset at
    natural alignment (sizes taken from the values carry none)."""
    cdef size_t end = 0, off = 0
    cdef Py_ssize_t k
    cdef size_t al
    for k in range(n):
        if place:
            al = 8 if specs[k].size >= 8 else (specs[k].size if specs[k].size in (1, 2, 4) else 8)
            off = (off + al - 1) // al * al
            specs[k].offset = off
            off += specs[k].size
        end = max(end, specs[k].offset + specs[k].size)
    if end > fn.param_limit:
        rows = ", ".join(f"#{k}: offset {specs[k].offset} size {specs[k].size}" for k in range(min(n, 32)))
        if n > 32:
            rows += f", ... ({n - 32} more)"
        raise ValueError(f"kernel '{fn.name}': {end} bytes of parameters exceed the driver's limit of "
                         f"{fn.param_limit} bytes ({rows})")
    return 0


cdef int _fill_ex(CUlaunchConfig* cfg, CUlaunchAttribute* attrs, LaunchConfig lc, CUstream stream):
    cdef unsigned int n = 0
    cfg.gridDimX = lc.grid[0]
    cfg.gridDimY = lc.grid[1]
    cfg.gridDimZ = lc.grid[2]
    cfg.blockDimX = lc.block[0]
    cfg.blockDimY = lc.block[1]
    cfg.blockDimZ = lc.block[2]
    cfg.sharedMemBytes = lc.shared_mem_bytes
    cfg.hStream = stream
    if lc.cooperative:
        memset(&attrs[n], 0, sizeof(CUlaunchAttribute))
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attrs[n].value.cooperative = 1
        n += 1
    if lc.cluster[0] * lc.cluster[1] * lc.cluster[2] > 1:
        memset(&attrs[n], 0, sizeof(CUlaunchAttribute))
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[n].value.clusterDim.x = lc.cluster[0]
        attrs[n].value.clusterDim.y = lc.cluster[1]
        attrs[n].value.clusterDim.z = lc.cluster[2]
        n += 1
    if lc.programmatic:
        memset(&attrs[n], 0, sizeof(CUlaunchAttribute))
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attrs[n].value.programmaticStreamSerializationAllowed = 1
        n += 1
    cfg.attrs = attrs
    cfg.numAttrs = n
    return 0


def _timed(Stream s, launch, *args, **kwargs):
    s.synchronize()
    start = Event(device=s.device)
    end = Event(device=s.device)
    start.record(s)
    launch(*args, **kwargs)
    end.record(s)
    return int(round(Event.elapsed_ms(start, end) * 1e6))


cdef class LaunchConfig:
    """Grid, block, dynamic shared memory and launch attributes, validated once."""

    def __init__(self, Function fn not None, grid, block, unsigned int shared_mem_bytes=0, *,
                 bint cooperative=False, cluster=None, bint programmatic_dependent=False):
        _parse_dims(grid, self.grid, "grid")
        _parse_dims(block, self.block, "block")
        self.shared_mem_bytes = shared_mem_bytes
        self.cooperative = cooperative
        self.programmatic = programmatic_dependent
        self.cluster[0] = self.cluster[1] = self.cluster[2] = 1
        if cluster is not None:
            _parse_dims(cluster, self.cluster, "cluster")
        _validate(fn, self.grid, self.block, shared_mem_bytes)
        cdef Device dev = fn.device
        cdef int k, blocks_per_sm = 0
        cdef unsigned long long nblocks
        if self.cluster[0] * self.cluster[1] * self.cluster[2] > 1 or programmatic_dependent:
            if dev.cc_major < 9:
                raise NotSupportedError(
                    f"kernel '{fn.name}': thread-block clusters and programmatic dependent launch need compute "
                    f"capability 9.0 or newer; device {dev.ordinal} is {dev.cc_major}.{dev.cc_minor}")
            for k in range(3):
                if self.grid[k] % self.cluster[k]:
                    raise ValueError(f"kernel '{fn.name}': grid ({self.grid[0]}, {self.grid[1]}, {self.grid[2]}) "
                                     f"is not a multiple of cluster ({self.cluster[0]}, {self.cluster[1]}, "
                                     f"{self.cluster[2]})")
        if cooperative:
            if not dev._attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH):
                raise NotSupportedError(f"device {dev.ordinal} does not support cooperative launches")
            check(_drv().p_cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &blocks_per_sm, fn.handle, <int>(self.block[0] * self.block[1] * self.block[2]),
                shared_mem_bytes), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            nblocks = <unsigned long long>self.grid[0] * self.grid[1] * self.grid[2]
            if nblocks > <unsigned long long>blocks_per_sm * dev.multiprocessor_count:
                raise ValueError(f"kernel '{fn.name}': cooperative launch of {nblocks} blocks exceeds the "
                                 f"{blocks_per_sm * dev.multiprocessor_count} that can be resident at once "
                                 f"({blocks_per_sm} per SM x {dev.multiprocessor_count} SMs)")
        self.use_ex = cooperative or programmatic_dependent or (self.cluster[0] * self.cluster[1] * self.cluster[2] > 1)

    @property
    def grid(self):
        return (self.grid[0], self.grid[1], self.grid[2])

    @property
    def block(self):
        return (self.block[0], self.block[1], self.block[2])

    @property
    def shared_mem_bytes(self):
        return self.shared_mem_bytes


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class Function:
    """A kernel entry point of a loaded Module (``cuModuleGetFunction``).

    Call :meth:`launch` to run it, or :meth:`bind` for a prepared launch that
    caches everything that does not change between launches.

    The parameter layout (count, size and kind of each parameter) comes from
    an explicit signature, else the module's PTX ``.entry`` signature, else
    ``cuFuncGetParamInfo``; ``layout_source`` says which. See the
    kernel-parameter rules in the docs for which Python value becomes which bytes.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Function objects come from Module.function(name)")

    def __dealloc__(self):
        if self.params != NULL:
            free(self.params)
            self.params = NULL

    cdef int set_layout(self, layout, str source) except -1:
        cdef int n = len(layout)
        for k, prm in enumerate(layout):
            if not (0 <= prm.kind < 7) or prm.size <= 0 or prm.size > 32764 or prm.offset < 0:
                raise ValueError(f"kernel '{self.name}': invalid parameter #{k} in layout: {prm!r}")
        cdef ParamSpec* p = <ParamSpec*>malloc(max(n, 1) * sizeof(ParamSpec))
        if p == NULL:
            raise MemoryError()
        for k, prm in enumerate(layout):
            p[k].kind = prm.kind
            p[k].size = prm.size
            p[k].offset = prm.offset
        if self.params != NULL:
            free(self.params)
        self.params = p
        self.n_params = n
        self._layout = list(layout)
        self.layout_source = source
        _check_param_space(self, p, n, False)
        return 0

    def set_signature(self, signature):
        """Declare the parameter types explicitly (overrides what the driver or
        PTX reported): a C-like string ``"float*, const float*, int, float"`` or
        a sequence of type names / numpy dtypes. Raises ValueError when the
        count or sizes disagree with the layout the kernel already has (from
        its PTX or ``cuFuncGetParamInfo``)."""
        layout = _signature.parse_signature(signature)
        if self.n_params >= 0:
            if len(layout) != self.n_params or any(
                    layout[k].size != self.params[k].size for k in range(self.n_params)):
                raise ValueError(f"kernel '{self.name}': signature {signature!r} ({_signature.format_layout(layout)}) "
                                 f"disagrees with the kernel's own parameter info ({self.layout_source}): "
                                 f"({_signature.format_layout(self._layout)})")
        self.set_layout(layout, "signature")
        return self

    @property
    def param_layout(self):
        """List of ``Param(kind, size, align, offset)``, or None when unknown."""
        return None if self._layout is None else list(self._layout)

    @property
    def num_params(self):
        """Number of kernel parameters, or None when unknown."""
        return None if self.n_params < 0 else self.n_params

    @property
    def max_threads_per_block(self):
        """``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`` for this kernel."""
        return self.max_threads

    @property
    def static_shared_bytes(self):
        """Static shared memory per block in bytes (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``)."""
        return self.static_shared

    @property
    def handle(self):
        """The ``CUfunction`` as an int."""
        return <uintptr_t>self.handle

    def attribute(self, name):
        """Value of a ``CU_FUNC_ATTRIBUTE_*`` (``cuFuncGetAttribute``); name with or without prefix."""
        from pycudadrv import _attributes
        key = name.upper() if isinstance(name, str) else name
        if isinstance(key, str) and not key.startswith("CU_FUNC_ATTRIBUTE_"):
            key = "CU_FUNC_ATTRIBUTE_" + key
        if isinstance(key, str):
            if key not in _attributes.FUNCTION_ATTRIBUTES:
                raise ValueError(f"unknown function attribute {name!r}")
            key = _attributes.FUNCTION_ATTRIBUTES[key]
        cdef int v = 0
        check(_drv().p_cuFuncGetAttribute(&v, <CUfunction_attribute>key, self.handle), "cuFuncGetAttribute")
        return v

    def launch(self, grid, block, *args, unsigned int shared_mem_bytes=0, stream=None,
               bint cooperative=False, cluster=None, bint programmatic_dependent=False):
        """Launch the kernel (``cuLaunchKernel``; ``cuLaunchKernelEx`` when a
        launch attribute is asked for).

        Parameters
        ----------
        grid, block : int or tuple of 1-3 ints
            Grid size in blocks; block size in threads. Checked against the
            device (block x/y/z, grid x/y/z, 65,535 in y and z) and the
            kernel's MAX_THREADS_PER_BLOCK before any driver call.
        *args
            One value per kernel parameter: Buffer or view (device pointer),
            None (null pointer), numpy scalars (bit-for-bit; the width must
            match), Python int/float/complex/bool (take the parameter's width),
            bytes-like or structured numpy scalars for structs, any object with
            ``__cuda_array_interface__``.
        shared_mem_bytes : int
            Dynamic shared memory per block in bytes. Above the default 48 KB
            the kernel's max-dynamic-shared-size attribute is raised
            automatically up to the opt-in limit minus static shared memory.
        stream : Stream, optional
            Defaults to the device's default stream (owned, non-blocking).
        cooperative, cluster, programmatic_dependent
            Launch attributes (``cuLaunchKernelEx``): cooperative launch,
            thread-block cluster dimensions, programmatic dependent launch
            (clusters and PDL need compute capability 9.0+).

        Raises
        ------
        TypeError
            Wrong argument count, a value of the wrong width or kind (message
            names the kernel, the parameter index, its size and the value).
        ValueError
            Grid/block/shared memory beyond the limits (names the limit).
        NotSupportedError
            Clusters or PDL below compute capability 9.0.
        CudaError
            The driver rejected the launch (names kernel, grid, block, shared
            memory and the arguments).
        """
        cdef pycudadrv_driver_api* d = _drv()
        cdef unsigned int g[3]
        cdef unsigned int b[3]
        cdef Stream s
        cdef pycudadrv_arena arena
        cdef ParamSpec* specs = self.params
        cdef ParamSpec* inferred = NULL
        cdef Py_ssize_t n = len(args)
        cdef void** kp
        cdef CUresult r
        cdef LaunchConfig lc
        cdef CUlaunchConfig cfg
        cdef CUlaunchAttribute attrs[3]
        if cooperative or cluster is not None or programmatic_dependent:
            lc = LaunchConfig(self, grid, block, shared_mem_bytes, cooperative=cooperative, cluster=cluster,
                              programmatic_dependent=programmatic_dependent)
            memcpy(g, lc.grid, sizeof(g))
            memcpy(b, lc.block, sizeof(b))
        else:
            lc = None
            _parse_dims(grid, g, "grid")
            _parse_dims(block, b, "block")
            _validate(self, g, b, shared_mem_bytes)
        if self.n_params >= 0 and n != self.n_params:
            raise TypeError(f"kernel '{self.name}' takes {self.n_params} arguments "
                            f"({_signature.format_layout(self._layout)}), {n} given")
        if stream is None:
            s = self.default_stream
            if s is None:
                s = self.default_stream = <Stream>self.device.default_stream
        else:
            s = resolve_stream(stream, self.device)
        if s.closed:
            s.ensure_open()
        pycudadrv_arena_init(&arena)
        try:
            if self.n_params < 0:
                specs = inferred = infer_layout(self, args)
            kp = marshal(&arena, self, args, specs)
            self.device.activate()
            tok = None
            if _hook is not None and s._capture is None:
                tok = _hook.before(self, s)
            if lc is None:
                r = _launch_kernel(d, self.handle, g, b, shared_mem_bytes, s.handle, kp)
                call = "cuLaunchKernel"
            else:
                _fill_ex(&cfg, attrs, lc, s.handle)
                r = d.p_cuLaunchKernelEx(&cfg, self.handle, kp, NULL)
                call = "cuLaunchKernelEx"
            if r != CUDA_SUCCESS:
                raise _launch_error(r, call, self, g, b, shared_mem_bytes, args)
            if tok is not None:
                _hook.after(tok, self, s, (g[0], g[1], g[2]), (b[0], b[1], b[2]), shared_mem_bytes)
            if s._capture is not None:
                s._capture._on_launch(self, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem_bytes, args)
        finally:
            pycudadrv_arena_release(&arena)
            free(inferred)

    def __call__(self, grid, block, *args, **kwargs):
        """Same as :meth:`launch`."""
        return self.launch(grid, block, *args, **kwargs)

    def launch_timed(self, grid, block, *args, **kwargs):
        """Run the kernel alone and return its GPU time in nanoseconds (int).

        Drains the stream first (``cuStreamSynchronize``), then records an
        event, launches (as :meth:`launch`, same arguments), records a second
        event and waits for it (``cuEventElapsedTime``; resolution about 0.5 us)."""
        stream = kwargs.get("stream")
        cdef Stream s = <Stream>self.device.default_stream if stream is None else resolve_stream(stream, self.device)
        return _timed(s, self.launch, grid, block, *args, **kwargs)

    def bind(self, grid, block, *args, unsigned int shared_mem_bytes=0, stream=None,
             bint cooperative=False, cluster=None, bint programmatic_dependent=False):
        """A :class:`PreparedLaunch` of this kernel with a fixed configuration.

        The grid, block, shared memory, stream and launch attributes are
        validated once here; ``args`` (optional) are bound now. Raises as
        :meth:`launch`.
        """
        return PreparedLaunch(self, grid, block, *args, shared_mem_bytes=shared_mem_bytes, stream=stream,
                              cooperative=cooperative, cluster=cluster,
                              programmatic_dependent=programmatic_dependent)

    def __repr__(self):
        n = "?" if self.n_params < 0 else str(self.n_params)
        if self.device is None:
            return f"<Function '{self.name}', {n} params, not loaded>"
        return f"<Function '{self.name}', {n} params ({self.layout_source}), device {self.device.ordinal}>"


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class PreparedLaunch:
    """A launch of one kernel with its configuration and argument storage
    prepared once (``fn.bind(grid, block, *args, ...)``).

    ``p(*args)`` marshals the arguments into the reused arena and launches;
    ``p()`` launches again with the arguments bound last; ``p.set_arg(i, v)``
    updates one argument without re-marshalling the rest. Nothing is
    allocated per launch. The bound Python objects are kept alive.
    """

    def __cinit__(self):
        pycudadrv_arena_init(&self.arena)
        self.specs = NULL
        self.n = 0

    def __init__(self, Function fn not None, grid, block, *args, unsigned int shared_mem_bytes=0, stream=None,
                 bint cooperative=False, cluster=None, bint programmatic_dependent=False):
        cdef int k
        cdef unsigned char* dst
        self.fn = fn
        self.config = LaunchConfig(fn, grid, block, shared_mem_bytes, cooperative=cooperative, cluster=cluster,
                                   programmatic_dependent=programmatic_dependent)
        self.stream = <Stream>fn.device.default_stream if stream is None else resolve_stream(stream, fn.device)
        if fn.n_params >= 0:
            self.n = fn.n_params
            if args and len(args) != self.n:
                raise TypeError(f"kernel '{fn.name}' takes {self.n} arguments "
                                f"({_signature.format_layout(fn._layout)}), {len(args)} given")
        else:
            if not args:
                raise TypeError(f"kernel '{fn.name}': its parameter sizes are unknown, so bind() needs the "
                                "arguments (numpy scalars or Buffers) to fix them")
            self.n = len(args)
        if fn.n_params >= 0:
            self.specs = <ParamSpec*>malloc(max(self.n, 1) * sizeof(ParamSpec))
            if self.specs == NULL:
                raise MemoryError()
            memcpy(self.specs, fn.params, self.n * sizeof(ParamSpec))
        else:
            self.specs = infer_layout(fn, args)
        for k in range(self.n):
            if pycudadrv_arena_push(&self.arena, self.specs[k].size) == NULL:
                raise MemoryError("kernel argument arena")
        self.kernel_params = pycudadrv_arena_finish(&self.arena)
        self._held = [None] * self.n
        if self.config.use_ex:
            _fill_ex(&self.ex_config, self.ex_attrs, self.config, self.stream.handle)
        if args:
            for k in range(self.n):
                pack_arg(args[k], fn, k, &self.specs[k], pycudadrv_arena_at(&self.arena, k))
                self._held[k] = args[k]
        else:
            self._held = None

    def __dealloc__(self):
        pycudadrv_arena_release(&self.arena)
        if self.specs != NULL:
            free(self.specs)

    cdef int _launch(self) except -1:
        cdef pycudadrv_driver_api* d = _d
        cdef CUresult r
        cdef Function fn = self.fn
        cdef LaunchConfig c = self.config
        if fn is None:
            raise TypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        if self._held is None:
            raise TypeError(f"kernel '{fn.name}': no arguments bound yet; call p(*args) first")
        if self.stream.closed:
            self.stream.ensure_open()
        fn.device.activate()
        tok = None
        if _hook is not None and self.stream._capture is None:
            tok = _hook.before(fn, self.stream)
        if not c.use_ex:
            r = _launch_kernel(d, fn.handle, c.grid, c.block, c.shared_mem_bytes, self.stream.handle,
                               self.kernel_params)
            if r != CUDA_SUCCESS:
                raise _launch_error(r, "cuLaunchKernel", fn, c.grid, c.block, c.shared_mem_bytes, tuple(self._held))
        else:
            r = d.p_cuLaunchKernelEx(&self.ex_config, fn.handle, self.kernel_params, NULL)
            if r != CUDA_SUCCESS:
                raise _launch_error(r, "cuLaunchKernelEx", fn, c.grid, c.block, c.shared_mem_bytes,
                                    tuple(self._held))
        if tok is not None:
            _hook.after(tok, fn, self.stream, self.config.grid, self.config.block, c.shared_mem_bytes)
        if self.stream._capture is not None:
            self.stream._capture._on_launch(fn, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1],
                                            c.block[2], c.shared_mem_bytes, tuple(self._held))
        return 0

    def __call__(self, *args):
        """Marshal ``args`` (all of them) and launch; with no arguments, launch
        again with those bound last. Raises as :meth:`Function.launch`."""
        cdef Py_ssize_t k, n = len(args)
        cdef Function fn = self.fn
        cdef list held
        if fn is None:
            raise TypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        if n:
            if n != self.n:
                raise TypeError(f"kernel '{fn.name}' takes {self.n} arguments, {n} given")
            for k in range(n):
                pack_arg(args[k], fn, k, &self.specs[k], pycudadrv_arena_at(&self.arena, <uint32_t>k))
            held = self._held
            if held is None:
                self._held = list(args)
            else:
                for k in range(n):
                    held[k] = args[k]
        self._launch()

    def launch(self):
        """Launch with the arguments bound now (``cuLaunchKernel``)."""
        self._launch()

    def launch_timed(self):
        """Drain the stream, launch alone between two events, return the GPU
        time in nanoseconds (int)."""
        if self.fn is None:
            raise TypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        return _timed(self.stream, self.launch)

    def set_arg(self, Py_ssize_t index, value):
        """Replace argument ``index`` (re-marshals that one only).

        Raises IndexError for an index outside ``[0, num_params)`` and
        TypeError as :meth:`Function.launch` for a bad value."""
        if self.fn is None:
            raise TypeError("PreparedLaunch is not initialised: make one with Function.bind(...)")
        if index < 0 or index >= self.n:
            raise IndexError(f"kernel '{self.fn.name}' has {self.n} parameters; index {index} is out of range")
        if self._held is None:
            raise TypeError(f"kernel '{self.fn.name}': bind all arguments first (p(*args)), then set_arg")
        pack_arg(value, self.fn, index, &self.specs[index], pycudadrv_arena_at(&self.arena, <uint32_t>index))
        self._held[index] = value

    @property
    def function(self):
        return self.fn

    @property
    def stream(self):
        return self.stream

    @property
    def args(self):
        """The bound arguments (tuple), or None."""
        return None if self._held is None else tuple(self._held)

    def param_bytes(self):
        """The marshalled bytes of each bound argument, as a list of ``bytes``
        (the exact bits the kernel will receive)."""
        cdef int k
        return [(<char*>pycudadrv_arena_at(&self.arena, k))[:self.specs[k].size] for k in range(self.n)]

    @property
    def spilled(self):
        """True if the arguments did not fit the arena's inline storage (heap spill)."""
        return bool(pycudadrv_arena_is_spilled(&self.arena))

    def __repr__(self):
        c = self.config
        if self.fn is None or c is None:
            return "<PreparedLaunch (not initialised)>"
        return (f"<PreparedLaunch '{self.fn.name}' grid={c.grid} block={c.block} "
                f"shared_mem_bytes={c.shared_mem_bytes}>")


def pack_arguments(layout, args, name="kernel"):
    """Marshal ``args`` for a parameter ``layout`` (list of ``_signature.Param``,
    or a signature string) exactly as a launch would, without a GPU.

    Returns ``(params, slot_addresses, spilled)``: the bytes each parameter
    receives, the address of each one's arena slot (16-byte aligned), and
    whether the arena spilled to the heap. Raises as :meth:`Function.launch`.
    Used by the CPU tests of the marshalling layer.
    """
    if isinstance(layout, str) or (layout and not isinstance(layout[0], _signature.Param)):
        layout = _signature.parse_signature(layout)
    cdef Function f = Function.__new__(Function)
    f.name = name
    f.n_params = -1
    f.param_limit = _signature.PARAM_LIMIT_LARGE
    f.set_layout(layout, "signature")
    if len(args) != f.n_params:
        raise TypeError(f"kernel '{name}' takes {f.n_params} arguments, {len(args)} given")
    cdef pycudadrv_arena arena
    cdef int k
    cdef void** kp
    pycudadrv_arena_init(&arena)
    try:
        kp = marshal(&arena, f, tuple(args), f.params)
        out = [(<char*>kp[k])[:f.params[k].size] for k in range(f.n_params)]
        addrs = [<uintptr_t>kp[k] for k in range(f.n_params)]
        spilled = bool(pycudadrv_arena_is_spilled(&arena))
    finally:
        pycudadrv_arena_release(&arena)
    return out, addrs, spilled
