# cython: language_level=3, boundscheck=False, wraparound=False
"""Kernel-parameter marshalling: parameter kinds and layouts, the argument
arena, and the value-to-bytes rules (width, kind, range and contiguity checks)."""
cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, uintptr_t, INT64_MIN
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset, memcmp
from cpython.object cimport Py_TYPE, PyObject
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.ref cimport Py_INCREF, Py_DECREF

from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device, peer_enabled
from pycudadrv._stream cimport Stream
from pycudadrv._alloc cimport Allocation
from pycudadrv._memory cimport Buffer
from pycudadrv._interop cimport (read_cai, cai_extent, order_foreign,
                                 dlpack_pointer, take_dlpack_owners)

import numpy as np
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, ClosedError

__all__ = ["ParamKind", "ParamLayout", "pack_arguments", "PARAM_LIMIT_CLASSIC",
           "PARAM_LIMIT_LARGE", "FLOAT32_MAX"]

#: Bytes of kernel parameters every driver accepts, and what CUDA 12.1+ drivers accept on Volta and newer.
PARAM_LIMIT_CLASSIC = 4096
PARAM_LIMIT_LARGE = 32764
#: The largest finite float32. A double up to half a unit in the last place beyond it still rounds to it
#: (3.4028235e38 is FLOAT32_MAX as a float32); only magnitudes of 2**128 - 2**103 or more become inf.
FLOAT32_MAX = 3.4028234663852886e38
# The largest double float32 rounds to a finite value: the next one up is 2**128 - 2**103, which rounds to inf.
# (Compared with <=, as a bound that is itself finite, it costs no more than FLOAT32_MAX did.)
cdef double _F32_FINITE = 3.4028235677973362e38
cdef double _F16_LIMIT = 65520.0                 # 65504 + 16: half precision rounds this and beyond to inf
cdef double _BF16_LIMIT = 3.3961775292304718e38  # bfloat16's largest finite plus half a unit: rounds to inf
# Creating a ParamLayout takes this token (new_layout passes it): one made any other way would crash on use.
cdef object _TOKEN = object()

cdef tuple KIND_TEXT = ("parameter", "integer parameter", "unsigned integer parameter",
                        "floating-point parameter", "pointer parameter", "struct/bytes parameter",
                        "integer parameter", "bool parameter", "__nv_bfloat16 parameter")


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


cdef ParamLayout new_layout(str name, Device device, size_t limit):
    cdef ParamLayout lay = ParamLayout.__new__(ParamLayout, _TOKEN)
    lay.name = name
    lay.device = device
    lay.limit = limit
    lay.n = -1
    lay.specs = NULL
    lay.source = "unknown"
    return lay


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class ParamLayout:
    """A kernel's parameter layout as the marshaller uses it (internal; see
    :attr:`Function.param_layout` for the public view)."""

    def __cinit__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("ParamLayout objects are made by Module.function(); read a kernel's layout "
                                    "from Function.param_layout")
        self.n = -1

    def __dealloc__(self):
        if self.specs != NULL:
            free(self.specs)
            self.specs = NULL

    cdef int set(self, object layout, str source) except -1:
        from pycudadrv._signature import check_layout     # lazy: _signature is built on this module
        layout = check_layout(layout, self.name, self.limit)
        cdef int n = len(layout)
        cdef int k
        cdef ParamSpec* p = <ParamSpec*>malloc(max(n, 1) * sizeof(ParamSpec))
        if p == NULL:
            raise MemoryError()
        for k, prm in enumerate(layout):
            p[k].kind = prm.kind
            p[k].size = prm.size
            p[k].offset = prm.offset
        try:
            _check_param_space(self, p, n, False)
        except BaseException:
            free(p)
            raise
        if self.specs != NULL:
            free(self.specs)
        self.specs = p
        self.n = n
        self.params = list(layout)
        self.source = source
        return 0


cdef str _bounded_repr(object v, Py_ssize_t limit=40):
    """repr(v), cut to ``limit`` characters; never raises (a huge int, a broken __repr__)."""
    try:
        r = repr(v)
    except ValueError:      # an int beyond sys.get_int_max_str_digits()
        return f"<an int of {v.bit_length()} bits>" if isinstance(v, int) else f"<{type(v).__name__} object>"
    except Exception:  # noqa: BLE001 -- a message must never fail
        return f"<{type(v).__name__} object>"
    return r[:limit].replace("\n", " ")


cdef str describe_value(object a):
    if isinstance(a, Buffer):
        return f"Buffer({(<Buffer>a)._nbytes} bytes)"
    if isinstance(a, np.generic):
        return f"{type(a).__name__}({_bounded_repr(a, 80)})" if not isinstance(a, np.void) else f"struct {a.dtype}"
    if isinstance(a, (bytes, bytearray, memoryview)):
        try:
            return f"{type(a).__name__}[{len(a)}]"
        except ValueError:
            return f"{type(a).__name__} (released)"
    return f"{type(a).__name__} {_bounded_repr(a)}"


cdef str args_summary(tuple args):
    return "[" + ", ".join(describe_value(a) for a in args[:16]) + (", ..." if len(args) > 16 else "") + "]"


cdef object _arg_error(ParamLayout lay, Py_ssize_t i, ParamSpec* p, object a, str why, type cls=ArgumentTypeError):
    what = f"{p.size}-byte {KIND_TEXT[p.kind]}" if p != NULL else "parameter"
    return cls(f"kernel '{lay.name}', parameter #{i} ({what}): {why}; got {describe_value(a)}")


cdef int _check_device(Buffer b, ParamLayout lay, Py_ssize_t i) except -1:
    if b.device is None or lay.device is None or b.device.ordinal == lay.device.ordinal:
        return 0
    if not peer_enabled(lay.device.ordinal, b.device.ordinal):
        raise ArgumentValueError(
            f"kernel '{lay.name}' (device {lay.device.ordinal}), parameter #{i}: the Buffer lives on device "
            f"{b.device.ordinal}; call Device({lay.device.ordinal}).enable_peer_access(Device("
            f"{b.device.ordinal})) or copy it to device {lay.device.ordinal} first")
    return 0


cdef int _int_range_error(ParamLayout lay, Py_ssize_t i, ParamSpec* p, object a) except -1:
    kind = p.kind
    bits = 8 * int(p.size)
    sign = "signed " if kind == INT else ("unsigned " if kind == UINT else "")
    if kind == INT:
        rng = f"[{-(1 << (bits - 1))}, {(1 << (bits - 1)) - 1}]"
    elif kind == UINT or kind == POINTER:
        rng = f"[0, {(1 << bits) - 1}]"
    else:
        rng = f"[{-(1 << (bits - 1))}, {(1 << bits) - 1}]"
    raise _arg_error(lay, i, p, a, f"value out of range for a {bits}-bit {sign}integer {rng}")


cdef int _pack_int128(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    """A Python int into a 16-byte INT (``__int128``) or UINT (``unsigned __int128``) parameter."""
    if p.kind == INT:
        ok = -(1 << 127) <= a < (1 << 127)
    else:
        ok = 0 <= a < (1 << 128)
    if not ok:
        return _int_range_error(lay, i, p, a)
    raw = int(a).to_bytes(16, "little", signed=a < 0)
    memcpy(dst, <const char*>raw, 16)
    return 0


cdef int _pack_int(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(a, &overflow)
    cdef unsigned long long u = 0
    cdef size_t size = p.size
    cdef int kind = p.kind
    if kind == BOOL:
        if overflow != 0 or not (v == 0 or v == 1):
            raise _arg_error(lay, i, p, a, "a bool parameter takes True or False (or 0 and 1); any other value "
                             "would be packed as a byte the kernel reads as neither", ArgumentValueError)
        dst[0] = <unsigned char>v
        return 0
    if kind == FLOAT or kind == BFLOAT16:
        try:
            x = float(a)
        except OverflowError:
            raise _arg_error(lay, i, p, a, f"value out of range for a {size * 8}-bit float",
                             ArgumentTypeError) from None
        return _pack_float(x, lay, i, p, dst, a)
    if kind == BYTES:
        raise _arg_error(lay, i, p, a, "a Python int cannot fill a struct parameter; pass a numpy structured "
                         "scalar or bytes of the exact size")
    if kind == POINTER and (overflow < 0 or (overflow == 0 and v < 0)):
        raise _arg_error(lay, i, p, a, "a raw device pointer must be >= 0")
    if overflow != 0:       # beyond a long long (the checks below cost the common case nothing)
        if size == 16 and (kind == INT or kind == UINT):
            return _pack_int128(a, lay, i, p, dst)
        if overflow < 0 or size != 8 or kind == INT:
            return _int_range_error(lay, i, p, a)
        try:
            u = PyLong_AsUnsignedLongLong(a)
        except OverflowError:
            return _int_range_error(lay, i, p, a)
        memcpy(dst, &u, 8)
        return 0
    # range of the width: signed for INT, unsigned for UINT/POINTER, either for ANY/INTEGER
    cdef long long lo, hi
    if size == 1:
        lo, hi = (-128 if kind != UINT else 0), (127 if kind == INT else 255)
    elif size == 2:
        lo, hi = (-32768 if kind != UINT else 0), (32767 if kind == INT else 65535)
    elif size == 4:
        lo, hi = (-2147483648LL if kind != UINT else 0), (2147483647LL if kind == INT else 4294967295LL)
    elif size == 8:
        lo = INT64_MIN if kind != UINT else 0
        hi = 9223372036854775807LL
    elif size == 16 and (kind == INT or kind == UINT):
        return _pack_int128(a, lay, i, p, dst)
    else:
        raise _arg_error(lay, i, p, a, "a Python int fits 1-, 2-, 4- or 8-byte parameters only")
    if v < lo or v > hi:
        return _int_range_error(lay, i, p, a)
    if size == 8:
        memcpy(dst, &v, 8)
    elif size == 4:
        (<uint32_t*>dst)[0] = <uint32_t>v
    elif size == 2:
        (<uint16_t*>dst)[0] = <uint16_t>v
    else:
        dst[0] = <uint8_t>v
    return 0


cdef int _pack_float(double x, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst, object a) except -1:
    cdef float f
    cdef uint16_t h = 0
    cdef uint32_t bits
    cdef int kind = p.kind
    if kind == BFLOAT16:
        if x == x and x != x * 2 and not (-_BF16_LIMIT < x < _BF16_LIMIT):
            raise _arg_error(lay, i, p, a, "value out of range for a bfloat16 (it would become inf)",
                             ArgumentTypeError)
        f = <float>x
        memcpy(&bits, &f, 4)
        if x != x:
            h = 0x7FC0 | <uint16_t>((bits >> 16) & 0x8000)      # a quiet NaN of the same sign
        else:
            h = <uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)     # to nearest, ties to even
        memcpy(dst, &h, 2)
        return 0
    if kind == FLOAT or kind == ANY:
        if p.size == 4:
            if x != x or -_F32_FINITE <= x <= _F32_FINITE or x == x * 2:
                f = <float>x  # NaN, finite once rounded, or +-inf: representable
            else:
                raise _arg_error(lay, i, p, a, "value out of range for a 32-bit float (it would become inf)",
                                 ArgumentTypeError)
            memcpy(dst, &f, 4)
            return 0
        if p.size == 8:
            memcpy(dst, &x, 8)
            return 0
        if p.size == 2:
            if x == x and x != x * 2 and not (-_F16_LIMIT < x < _F16_LIMIT):
                raise _arg_error(lay, i, p, a, "value out of range for a 16-bit float (it would become inf)",
                                 ArgumentTypeError)
            with np.errstate(over="ignore"):
                h = np.float16(x).view(np.uint16)
            memcpy(dst, &h, 2)
            return 0
        raise _arg_error(lay, i, p, a, "a Python float fits 2-, 4- or 8-byte parameters only")
    if kind == POINTER or (p.size == 8 and kind != BYTES):
        raise _arg_error(lay, i, p, a, "a float given to a pointer-sized parameter (pass a Buffer, None or an int)")
    if kind == BYTES and p.size == 2:
        raise _arg_error(lay, i, p, a, "a Python float is ambiguous for a 2-byte struct parameter (__half or "
                         "__nv_bfloat16?): pass np.float16(x) or the exact bytes")
    raise _arg_error(lay, i, p, a, "a float given to a non-floating-point parameter")


cdef int _pack_pointer(uint64_t ptr, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst,
                       object a) except -1:
    if p.size != 8 or p.kind == FLOAT or p.kind == BYTES:
        raise _arg_error(lay, i, p, a, "a device pointer needs an 8-byte pointer/integer parameter")
    memcpy(dst, &ptr, 8)
    return 0


cdef int _pack_bytes(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst) except -1:
    cdef Py_buffer view
    if p.kind != BYTES and p.kind != ANY and p.kind != BFLOAT16 and not isinstance(a, np.generic):
        raise _arg_error(lay, i, p, a, "raw bytes fit struct parameters only")
    try:
        PyObject_GetBuffer(a, &view, PyBUF_SIMPLE)
    except (BufferError, ValueError, TypeError) as e:
        raise _arg_error(lay, i, p, a, f"cannot read its bytes ({e})") from None
    try:
        if <size_t>view.len != p.size:
            raise _arg_error(lay, i, p, a, f"expected exactly {p.size} bytes, the value has {view.len}")
        memcpy(dst, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef int _ensure_buffer_open(Buffer b, ParamLayout lay, Py_ssize_t i) except -1:
    try:
        b.ensure_open()
    except ClosedError as e:
        raise ClosedError(f"kernel '{lay.name}', parameter #{i}: {e}") from None
    return 0


cdef int _buffer_attention(Buffer b, ParamLayout lay, Py_ssize_t i, Stream s) except -1:
    """A Buffer argument whose allocation asks for attention: closed (raises naming the
    parameter), or foreign memory whose producer `s` must wait for."""
    _ensure_buffer_open(b, lay, i)
    if s is not None and b._alloc.ready is not None:
        b._alloc.order_on(s)
    return 0


cdef uint64_t _cai_pointer(object a, object cai, ParamLayout lay, Py_ssize_t i, ParamSpec* p) except? 0:
    try:
        ptr, lo, hi, contiguous = cai_extent(cai)[:4]
    except (ArgumentTypeError, ArgumentValueError) as e:
        raise _arg_error(lay, i, p, a, str(e), type(e)) from None
    if not contiguous:
        raise _arg_error(lay, i, p, a, f"strided memory (shape {tuple(cai['shape'])}, strides "
                         f"{tuple(cai['strides'])} bytes) would be read as contiguous; pass a contiguous copy "
                         "(x.contiguous() in PyTorch, cupy.ascontiguousarray(x)), or, if the kernel handles the "
                         "strides itself, pycudadrv.data_pointer(x, strided=True)")
    return <uint64_t>ptr


cdef int _pack_slow(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst, Stream s) except -1:
    cdef double re, im
    cdef float fre, fim
    if a is None:
        if p.kind not in (POINTER, INTEGER, ANY) or p.size != 8:
            raise _arg_error(lay, i, p, a, "None (a null pointer) fits pointer parameters only")
        return _pack_pointer(0, lay, i, p, dst, a)
    if isinstance(a, Buffer):
        _buffer_attention(<Buffer>a, lay, i, s)
        _check_device(<Buffer>a, lay, i)
        return _pack_pointer((<Buffer>a)._ptr, lay, i, p, dst, a)
    if isinstance(a, np.ndarray):
        raise _arg_error(lay, i, p, a, "a host numpy array cannot be a kernel argument; copy it to the device "
                         "with Buffer.from_numpy(array)")
    if isinstance(a, np.generic):
        # The kind is known (PTX or a signature): a float scalar for an integer or pointer
        # parameter, or an integer scalar for a float one, is a mistake, not a bit pattern.
        dkind = a.dtype.kind
        if dkind in "fc" and a.dtype.itemsize > (8 if dkind == "f" else 16):
            raise _arg_error(lay, i, p, a, f"a numpy {a.dtype} scalar (long double) has no CUDA equivalent, and "
                             "its padding bytes are undefined; convert it to np.float64 (or np.complex128)")
        if p.kind not in (BYTES, ANY) and dkind not in "biufc":
            raise _arg_error(lay, i, p, a, f"a numpy {a.dtype} scalar fits struct parameters only")
        is_float = dkind in "fc"
        if p.kind == FLOAT and dkind == "c":
            raise _arg_error(lay, i, p, a, "a numpy complex scalar given to a real floating-point parameter")
        if p.kind == POINTER and dkind == "b":
            raise _arg_error(lay, i, p, a, "a bool given to a pointer parameter")
        if p.kind == POINTER and dkind in "iu":
            return _pack_int(int(a), lay, i, p, dst)   # an address: range-checked like a Python int
        if p.kind == BOOL:
            if dkind in "biu":
                return _pack_int(int(a), lay, i, p, dst)      # a bool, or an integer 0 or 1
            raise _arg_error(lay, i, p, a, f"a numpy {a.dtype} scalar given to a bool parameter; pass True or False")
        if p.kind == BFLOAT16:
            if a.dtype.name == "bfloat16" or (dkind == "V" and a.dtype.itemsize == 2):
                return _pack_bytes(a, lay, i, p, dst)          # ml_dtypes.bfloat16, or the raw two bytes
            if dkind == "f" and a.dtype.itemsize == 2:
                raise _arg_error(lay, i, p, a, "a numpy float16 given to a __nv_bfloat16 parameter: its bits mean "
                                 "another number there (1.5 would read as 0.125); pass a Python float (rounded "
                                 "to bfloat16) or an ml_dtypes.bfloat16 scalar")
            raise _arg_error(lay, i, p, a, f"a numpy {a.dtype} scalar given to a __nv_bfloat16 parameter; pass a "
                             "Python float (rounded to bfloat16) or an ml_dtypes.bfloat16 scalar")
        if p.kind in (INT, UINT, INTEGER, POINTER) and is_float:
            raise _arg_error(lay, i, p, a, "a numpy floating-point scalar given to an integer or pointer "
                             "parameter (its bits would be reinterpreted)")
        if p.kind == FLOAT and not is_float and not isinstance(a, np.void):
            raise _arg_error(lay, i, p, a, "a numpy integer scalar given to a floating-point parameter (its bits "
                             "would be reinterpreted); pass a float or a numpy float of that width")
        return _pack_bytes(a, lay, i, p, dst)
    if isinstance(a, bool):
        if p.kind == POINTER:
            raise _arg_error(lay, i, p, a, "a bool given to a pointer parameter")
        return _pack_int(1 if a else 0, lay, i, p, dst)
    if isinstance(a, int):
        return _pack_int(int(a), lay, i, p, dst)
    if isinstance(a, float):
        return _pack_float(float(a), lay, i, p, dst, a)
    if isinstance(a, (bytes, bytearray, memoryview)):
        return _pack_bytes(a, lay, i, p, dst)
    if isinstance(a, complex):
        if p.kind != BYTES and p.kind != ANY:
            raise _arg_error(lay, i, p, a, "a complex value needs an 8- or 16-byte struct parameter")
        re, im = a.real, a.imag
        if p.size == 8:
            if not ((re != re or -_F32_FINITE <= re <= _F32_FINITE or re == re * 2) and
                    (im != im or -_F32_FINITE <= im <= _F32_FINITE or im == im * 2)):
                raise _arg_error(lay, i, p, a, "value out of range for two 32-bit floats (a part would become "
                                 "inf)", ArgumentTypeError)
            fre, fim = <float>re, <float>im
            memcpy(dst, &fre, 4)
            memcpy(dst + 4, &fim, 4)
            return 0
        if p.size == 16:
            memcpy(dst, &re, 8)
            memcpy(dst + 8, &im, 8)
            return 0
        raise _arg_error(lay, i, p, a, "a complex value needs an 8- or 16-byte struct parameter")
    try:
        cai = read_cai(a)
    except ArgumentTypeError as e:
        raise _arg_error(lay, i, p, a, str(e)) from e.__cause__
    cdef uint64_t ptr
    if cai is not None:
        ptr = _cai_pointer(a, cai, lay, i, p)
        _pack_pointer(ptr, lay, i, p, dst, a)      # the checks first: ordering is for a valid argument
        try:
            order_foreign(a, cai, s, lay.device if lay.device is not None else s.device if s is not None else None)
        except ArgumentTypeError as e:
            raise _arg_error(lay, i, p, a, str(e)) from None
        return 0
    if hasattr(a, "__dlpack__"):
        if p.size != 8 or p.kind == FLOAT or p.kind == BYTES:
            return _pack_pointer(0, lay, i, p, dst, a)     # refused before the producer is asked anything
        try:
            ptr = dlpack_pointer(a, s, lay.device if lay.device is not None else s.device if s is not None else None)
        except ArgumentTypeError as e:
            raise _arg_error(lay, i, p, a, str(e)) from None
        return _pack_pointer(ptr, lay, i, p, dst, a)
    raise _arg_error(lay, i, p, a, "unsupported argument type (use a Buffer, a numpy scalar, int, float, "
                     "complex, bool, None, bytes, or an object with __cuda_array_interface__ or __dlpack__)")


cdef inline int _buffer_bytes(Buffer b, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst,
                              Stream s) except -1:
    """pack_arg's Buffer case (closed or foreign: one flag read)."""
    if b._closed or b._alloc.attention:
        _buffer_attention(b, lay, i, s)
    if b.device is not lay.device and lay.device is not None:
        _check_device(b, lay, i)
    if p.size == 8 and p.kind != FLOAT and p.kind != BYTES:
        memcpy(dst, &b._ptr, 8)
        return 0
    return _pack_pointer(b._ptr, lay, i, p, dst, b)


cdef int pack_arg(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p, unsigned char* dst, Stream s) except -1:
    cdef type t = type(a)
    cdef double x
    cdef float f
    cdef int overflow = 0
    cdef long long v
    if t is Buffer:
        return _buffer_bytes(<Buffer>a, lay, i, p, dst, s)
    if t is float:
        x = PyFloat_AS_DOUBLE(a)
        if p.kind == FLOAT or p.kind == ANY:
            if p.size == 4 and -_F32_FINITE <= x <= _F32_FINITE:
                f = <float>x
                memcpy(dst, &f, 4)
                return 0
            if p.size == 8:
                memcpy(dst, &x, 8)
                return 0
        return _pack_float(x, lay, i, p, dst, a)
    if t is int:
        if p.size == 4 and (p.kind == INT or p.kind == INTEGER or p.kind == ANY):
            v = PyLong_AsLongLongAndOverflow(a, &overflow)
            if overflow == 0 and -2147483648LL <= v <= (2147483647LL if p.kind == INT else 4294967295LL):
                (<uint32_t*>dst)[0] = <uint32_t>v          # the common case: a 32-bit int in range
                return 0
        return _pack_int(a, lay, i, p, dst)
    if t is bool and p.kind != POINTER:
        return _pack_int(1 if a is True else 0, lay, i, p, dst)
    cdef int k = _np_index(a)
    if k >= 0 and <size_t>_np_size[k] == p.size and p.kind != POINTER and p.kind != BOOL and p.kind != BFLOAT16 and (
            p.kind == ANY or p.kind == BYTES or
            ((p.kind == FLOAT) == _np_is_float[k] and not _np_is_complex[k])):
        memcpy(dst, <char*><void*>a + _np_offset[k], _np_size[k])   # bit for bit: the dtype was chosen
        return 0
    return _slow_path(a, lay, i, p, dst, s)  # out of line: its checks never weigh on the fast paths above


# pack_arg calls the slow path through this pointer, so the C compiler cannot inline it: inlined, its
# many checks cost pack_arg's fast paths a larger stack frame and register spills on every call.
cdef int (*_slow_path)(object, ParamLayout, Py_ssize_t, ParamSpec*, unsigned char*, Stream) except -1
_slow_path = _pack_slow


cdef int _infer_spec(object a, ParamLayout lay, Py_ssize_t i, ParamSpec* p) except -1:
    """Layout unknown: take the parameter's size from a sized value."""
    cdef Py_buffer view
    p.offset = 0
    if a is None or isinstance(a, Buffer) or read_cai(a) is not None or hasattr(a, "__dlpack__"):
        p.kind = POINTER
        p.size = 8
        return 0
    if isinstance(a, np.generic) or isinstance(a, (bytes, bytearray, memoryview)):
        if isinstance(a, np.generic) and a.dtype.kind in "fc" and a.dtype.itemsize > (8 if a.dtype.kind == "f"
                                                                                       else 16):
            raise _arg_error(lay, i, NULL, a, f"a numpy {a.dtype} scalar (long double) has no CUDA equivalent; "
                             "convert it to np.float64 (or np.complex128)")
        try:
            PyObject_GetBuffer(a, &view, PyBUF_SIMPLE)
        except (BufferError, ValueError, TypeError) as e:
            raise _arg_error(lay, i, NULL, a, f"cannot read its bytes ({e})") from None
        p.size = view.len
        PyBuffer_Release(&view)
        if p.size == 0:
            raise _arg_error(lay, i, NULL, a, "a value of 0 bytes cannot be a kernel parameter")
        p.kind = BYTES
        return 0
    raise ArgumentTypeError(
        f"kernel '{lay.name}', parameter #{i}: the parameter sizes are unknown (the driver cannot report them "
        "-- cuFuncGetParamInfo needs a CUDA 12.4+ driver -- and the module was not PTX), so a Python "
        f"{type(a).__name__} has no width; pass a numpy scalar (e.g. np.int32(7), np.float32(2.0)) or give "
        "module.function(name, signature=...)")


cdef ParamSpec* infer_layout(ParamLayout lay, tuple args) except NULL:
    cdef Py_ssize_t k, n = len(args)
    cdef ParamSpec* specs = <ParamSpec*>malloc(max(n, 1) * sizeof(ParamSpec))
    if specs == NULL:
        raise MemoryError()
    try:
        for k in range(n):
            _infer_spec(args[k], lay, k, &specs[k])
        _check_param_space(lay, specs, n, True)
    except BaseException:
        free(specs)
        raise
    return specs


cdef void** marshal(pycudadrv_arena* arena, ParamLayout lay, tuple args, ParamSpec* specs, Stream s) except NULL:
    cdef Py_ssize_t i, n = len(args)
    if n and pycudadrv_arena_layout(arena, <const unsigned char*>&specs[0].size, sizeof(ParamSpec),
                                    <uint32_t>n) != 0:
        raise MemoryError("kernel argument arena")
    for i in range(n):
        pack_arg(args[i], lay, i, &specs[i], pycudadrv_arena_at(arena, <uint32_t>i), s)
    for i in range(n):      # a Buffer closed since it was packed (by a later argument's Python code): refused
        if isinstance(args[i], Buffer) and ((<Buffer>args[i])._closed or (<Buffer>args[i])._alloc.attention):
            _ensure_buffer_open(<Buffer>args[i], lay, i)
    return pycudadrv_arena_finish(arena)


cdef extern from "Python.h":
    ctypedef struct _PyObjectHead "PyObject":
        void* ob_type

_int_t, _float_t, _bool_t, _bytes_t = int, float, bool, bytes   # the builtin types (kept alive: module globals)
cdef void* _T_INT = <void*>_int_t
cdef void* _T_FLOAT = <void*>_float_t
cdef void* _T_BOOL = <void*>_bool_t
cdef void* _T_BYTES = <void*>_bytes_t
cdef void* _T_BUFFER = <void*>Buffer
cdef void* _NONE = <void*>None


cdef int _pack_cached(pycudadrv_arena* arena, ParamLayout lay, Py_ssize_t i, void* pa, pycudadrv_argcache* c,
                      Stream s) except -1:
    """marshal_cached's argument i, not the object kept there: pack it, keep it if immutable; an
    exact Buffer is only marked (borrowed: marshal_cached's Buffer pass packs it at every launch)."""
    cdef void* t = (<_PyObjectHead*>pa).ob_type
    if t == _T_BUFFER:
        if not c.isbuf[i]:
            pycudadrv_argcache_forget(c, i)
            c.isbuf[i] = c.stale = 1
        c.keep[i] = pa
        return 0
    pycudadrv_argcache_forget(c, i)    # a failure below leaves it to be packed next time
    pack_arg(<object>pa, lay, i, &lay.specs[i], pycudadrv_arena_at(arena, <uint32_t>i), s)
    if t == _T_INT or t == _T_FLOAT or t == _T_BOOL or pa == _NONE or t == _T_BYTES or _np_index(<object>pa) >= 0:
        Py_INCREF(<object>pa)
        c.keep[i] = pa      # immutable: the next call may skip it (only scalars are kept, never memory)
    return 0


# The scan of kept objects against the arguments given (AVX2 where the CPU has it).
cdef pycudadrv_first_diff_fn _first_diff = pycudadrv_pick_first_diff()


cdef void** marshal_cached(pycudadrv_arena* arena, ParamLayout lay, PyObject** items, Py_ssize_t nitems,
                           pycudadrv_argcache* c, Stream s) except NULL:
    cdef Py_ssize_t i, j, k, n = c.n
    cdef void** vals = <void**>items
    cdef void* pa
    cdef Buffer b
    i = _first_diff(c.keep, vals, 0, n)
    while i < n:                    # the rest are the very objects kept: their bytes are in place
        _pack_cached(arena, lay, i, vals[i], c, s)
        i = _first_diff(c.keep, vals, i + 1, n)
    if c.stale:
        pycudadrv_argcache_rebuild(c)
    for j in range(c.nbuf):         # every Buffer, at every launch (closed, device, stream use)
        k = c.bufs[j]
        pa = vals[k]
        if (<_PyObjectHead*>pa).ob_type == _T_BUFFER:
            b = <Buffer>pa
            _buffer_bytes(b, lay, k, &lay.specs[k], pycudadrv_arena_at(arena, <uint32_t>k), s)
            if s is not b._alloc.stream and s is not b._alloc.last_user:
                b._alloc.note_use(s)
        else:                       # another object now at the address of the Buffer marked there
            _pack_cached(arena, lay, k, pa, c, s)
    if c.stale:
        pycudadrv_argcache_rebuild(c)
    return arena.params       # laid out (pycudadrv_arena_layout): the pointers are in place


cdef int _check_param_space(ParamLayout lay, ParamSpec* specs, Py_ssize_t n, bint place) except -1:
    """Raise ArgumentValueError, listing each parameter's offset and size, when the
    parameters exceed the driver's limit. With ``place``, first give each parameter
    its offset at natural alignment (sizes taken from the values carry none)."""
    cdef size_t end = 0, off = 0
    cdef Py_ssize_t k
    cdef size_t al
    cdef size_t cap = (<size_t>1) << 62   # sizes are at most 2**63 (a Py_ssize_t): no sum below wraps
    for k in range(n):
        if place:
            al = 8 if specs[k].size >= 8 else (specs[k].size if specs[k].size in (1, 2, 4) else 8)
            off = (off + al - 1) // al * al
            specs[k].offset = off
            off = min(off + specs[k].size, cap)
        if specs[k].offset > cap or specs[k].size > cap:
            end = cap       # only a layout made by hand gets here; far beyond any limit
        else:
            end = max(end, specs[k].offset + specs[k].size)
    if end > lay.limit:
        end_bytes = max(int(specs[k].offset) + int(specs[k].size) for k in range(n))    # exact, never wrapped
        rows = ", ".join(f"#{k}: offset {specs[k].offset} size {specs[k].size}" for k in range(min(n, 32)))
        if n > 32:
            rows += f", ... ({n - 32} more)"
        raise ArgumentValueError(f"kernel '{lay.name}': {end_bytes} bytes of parameters exceed the driver's limit of "
                                 f"{lay.limit} bytes ({rows})")
    return 0


def pack_arguments(layout, args, name="kernel"):
    """Marshal ``args`` for a parameter ``layout`` (a signature string, a
    sequence of type names / numpy dtypes, or a list of ``_signature.Param``)
    exactly as a launch would, without a GPU.

    Returns ``(params, slot_addresses, spilled)``: the bytes each parameter
    receives, the address of each one's arena slot (16-byte aligned), and
    whether the arena spilled to the heap. Raises as :meth:`Function.launch`;
    ArgumentTypeError for a ``layout`` or ``args`` that is not a sequence, a
    layout that mixes Params and type names, or a ``name`` that is not a str;
    ArgumentValueError for a Param out of range. Used by the CPU tests of the
    marshalling layer.
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(f"pack_arguments: name must be a str, got {type(name).__name__}")
    from pycudadrv._signature import as_layout   # the one upward import (a signature to parse)
    layout = as_layout(layout, name)
    if not isinstance(args, (list, tuple)):
        # A set or dict would put the values in an order of its own; a generator is used up by one reading.
        raise ArgumentTypeError(f"kernel '{name}': args must be a list or tuple of values (in parameter order), got "
                                f"{type(args).__name__} {_bounded_repr(args)}")
    args = tuple(args)
    cdef ParamLayout lay = new_layout(name, None, PARAM_LIMIT_LARGE)
    lay.set(layout, "signature")
    if len(args) != lay.n:
        raise ArgumentTypeError(f"kernel '{name}' takes {lay.n} arguments, {len(args)} given")
    cdef pycudadrv_arena arena
    cdef int k
    cdef void** kp
    pycudadrv_arena_init(&arena)
    try:
        kp = marshal(&arena, lay, args, lay.specs, None)
        out = [(<char*>kp[k])[:lay.specs[k].size] for k in range(lay.n)]
        addrs = [<uintptr_t>kp[k] for k in range(lay.n)]
        spilled = bool(pycudadrv_arena_is_spilled(&arena))
    finally:
        pycudadrv_arena_release(&arena)
        take_dlpack_owners()        # nothing launched: the exports may go
    return out, addrs, spilled
