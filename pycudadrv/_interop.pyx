# cython: language_level=3
"""Other libraries' device arrays: reading __cuda_array_interface__ and DLPack
safely, and asbuffer() to wrap them as Buffers, zero-copy."""
from libc.stdint cimport uintptr_t, uint64_t
from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device, get_device, as_device
from pycudadrv._stream cimport Stream, order_after
from pycudadrv._memory cimport Buffer, new_buffer
from pycudadrv._dlpack cimport import_capsule

import numpy as np
from pycudadrv._dlpack import KDL_CUDA, KDL_CUDA_MANAGED
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError

__all__ = ["asbuffer"]


cdef str _short(object v):
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 -- a message must never fail
        return f"<{type(v).__name__} object>"
    return r if len(r) <= 60 else r[:60] + "..."


cdef object read_cai(object obj):
    try:
        return getattr(obj, "__cuda_array_interface__", None)
    except Exception as e:
        raise ArgumentTypeError(f"reading its __cuda_array_interface__ raised {type(e).__name__}: {e}") from e


cdef object cai_data_pointer(object cai):
    data = cai.get("data") if isinstance(cai, dict) else None
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ArgumentValueError("its __cuda_array_interface__ has no valid 'data': (pointer, read_only)")
    ptr = data[0]
    if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0 or ptr >= 2**64:
        raise ArgumentValueError(f"its __cuda_array_interface__ data pointer {_short(ptr)} is not an address")
    return ptr


cdef inline bint _is_int(object v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


cdef tuple cai_geometry(object cai):
    """``(shape, strides or None, dtype)`` of a ``__cuda_array_interface__`` dict
    (``cai_data_pointer`` checked it is one), each checked: ``shape`` a tuple of
    non-negative ints (numpy ints too; returned as ints), ``typestr`` a numpy type string of at least one byte,
    ``strides`` None or one int per dimension. Raises ArgumentValueError."""
    shape = cai.get("shape")
    if not isinstance(shape, (tuple, list)) or any(not _is_int(s) or s < 0 for s in shape):
        raise ArgumentValueError(f"its __cuda_array_interface__ 'shape' must be a tuple of non-negative ints, got "
                                 f"{_short(shape)}")
    typestr = cai.get("typestr")
    if not isinstance(typestr, str):
        raise ArgumentValueError(f"its __cuda_array_interface__ 'typestr' must be a numpy type string such as "
                                 f"'<f4', got {_short(typestr)}")
    try:
        dt = np.dtype(typestr)
    except (TypeError, ValueError):
        raise ArgumentValueError(f"its __cuda_array_interface__ 'typestr' {_short(typestr)} is not a numpy type "
                                 "string") from None
    if dt.itemsize == 0 or dt.hasobject:
        raise ArgumentValueError(f"its __cuda_array_interface__ 'typestr' {_short(typestr)} is not a type of "
                                 "device data")
    strides = cai.get("strides")
    if strides is not None:
        if not isinstance(strides, (tuple, list)) or any(not _is_int(s) for s in strides):
            raise ArgumentValueError(f"its __cuda_array_interface__ 'strides' must be None or a tuple of ints "
                                     f"(bytes), got {_short(strides)}")
        if len(strides) != len(shape):
            raise ArgumentValueError(f"its __cuda_array_interface__ 'strides' {_short(tuple(strides))} has "
                                     f"{len(strides)} entries for the {len(shape)}-dimensional shape "
                                     f"{_short(tuple(shape))}")
        strides = tuple(int(s) for s in strides)
    return tuple(int(s) for s in shape), strides, dt


cdef bint cai_is_contiguous(object cai) except -1:
    if cai.get("strides") is None:
        return True
    shape, strides, dt = cai_geometry(cai)
    expect = dt.itemsize
    count = 1
    for s in shape:
        count *= s
    if count <= 1:
        return True
    for k in reversed(range(len(shape))):
        if shape[k] != 1 and strides[k] != expect:
            return False
        expect *= shape[k]
    return True


cdef Buffer _wrap_foreign(object owner, uint64_t ptr, size_t nbytes, object dt, tuple shape, Device dev):
    cdef Buffer b = new_buffer()
    b.device = dev
    b._stream = <Stream>dev.default_stream
    b._root = b
    b._owner = owner
    b._ptr = <CUdeviceptr>ptr
    b._nbytes = nbytes
    b._dtype = dt
    b._shape = shape
    return b


cdef Buffer _from_dlpack(obj, device):
    cdef Device dev = as_device(device)
    if not callable(getattr(obj, "__dlpack__", None)):
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}.__dlpack__ is not callable")
    try:
        dl_dev = obj.__dlpack_device__()
    except AttributeError:
        dl_dev = None
    if dl_dev is not None:
        try:
            dl_type, dl_id = int(dl_dev[0]), int(dl_dev[1])
        except (TypeError, ValueError, IndexError, OverflowError):
            raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}.__dlpack_device__() returned {_short(dl_dev)}, "
                                    "not (device_type, device_id)") from None
        if dl_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
            raise ArgumentTypeError(f"asbuffer: {type(obj).__name__} lives on DLPack device {(dl_type, dl_id)}, "
                                    "not CUDA")
        if device is None:
            dev = get_device(dl_id)
    capsule = obj.__dlpack__(stream=int(<uintptr_t>(<Stream>dev.default_stream)._handle))
    owner, ptr, dev_type, dev_id, dt, shape, strides = import_capsule(capsule, obj)
    if dev_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ArgumentTypeError(f"asbuffer: DLPack tensor on device type {dev_type}, not CUDA")
    count = 1
    for s in shape:
        count *= s
    if strides is not None and count > 1:
        expect = 1
        for k in reversed(range(len(shape))):
            if shape[k] != 1 and strides[k] != expect:
                raise ArgumentTypeError(f"asbuffer: non-contiguous DLPack tensor (shape {shape}, strides "
                                        f"{strides} in elements); make it contiguous first (e.g. "
                                        "x.contiguous() in PyTorch, jnp.copy / cupy.ascontiguousarray)")
            expect *= shape[k]
    if count * dt.itemsize >= 2**64:
        raise ArgumentTypeError(f"asbuffer: DLPack tensor of shape {shape} and {dt} is more bytes than any device holds")
    return _wrap_foreign(owner, ptr, count * dt.itemsize, dt, shape, get_device(dev_id))


def asbuffer(obj, *, device=None):
    """Wrap a device array from another library as a Buffer, zero-copy,
    keeping it alive: anything exporting ``__cuda_array_interface__`` (CuPy,
    PyTorch, Numba) or ``__dlpack__`` (PyTorch, JAX, CuPy, ...).

    The data must be C-contiguous; the buffer records the object's dtype and
    shape. With CAI v3 the producer's stream is made to precede this device's
    default stream; with DLPack the producer orders its pending work itself.

    Raises
    ------
    ArgumentTypeError
        ``obj`` exports neither protocol, lives on the host, or is not
        C-contiguous (strided memory is never treated as contiguous).
    """
    if isinstance(obj, Buffer):
        return obj
    cai = read_cai(obj)
    if cai is None:
        if hasattr(obj, "__dlpack__"):
            return _from_dlpack(obj, device)
        raise ArgumentTypeError(f"{type(obj).__name__} exports neither __cuda_array_interface__ nor __dlpack__")
    try:
        ptr = cai_data_pointer(cai)
        shape, strides, dt = cai_geometry(cai)
        descr = cai.get("descr")
        if descr is not None and isinstance(descr, list) and len(descr) > 1:
            dt = np.dtype(descr)
        contiguous = cai_is_contiguous(cai)
    except (ArgumentValueError, TypeError, ValueError) as e:
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}: {e}") from e
    if dt.itemsize == 0 or dt.hasobject:
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}: its __cuda_array_interface__ 'descr' {dt} is not "
                                "a type of device data")
    if not contiguous:
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__} is not C-contiguous (shape {shape}, strides "
                                f"{strides} in bytes); make it contiguous first (e.g. "
                                "x.contiguous() in PyTorch, cupy.ascontiguousarray(x))")
    count = 1
    for s in shape:
        count *= s
    if count * dt.itemsize >= 2**64:
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}: shape {shape} of {dt} is {count * dt.itemsize} "
                                "bytes, more than any device holds")
    producer_stream = cai.get("stream")
    if producer_stream is not None and (isinstance(producer_stream, bool) or not isinstance(producer_stream, int)):
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}: its __cuda_array_interface__ 'stream' must be an "
                                f"int (a CUstream handle) or None, got {_short(producer_stream)}")
    cdef Device dev = as_device(device)
    cdef Buffer b = _wrap_foreign(obj, ptr, count * dt.itemsize, dt, shape, dev)
    if producer_stream:  # CAI v3: order the producer's pending work before ours
        order_after(b._stream, Stream.from_handle(int(producer_stream), dev))
    return b
