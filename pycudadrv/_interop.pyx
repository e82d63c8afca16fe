# cython: language_level=3
"""Other libraries' device arrays: reading __cuda_array_interface__ and DLPack
safely, and asbuffer() to wrap them as Buffers, zero-copy."""
from libc.stdint cimport uintptr_t, uint64_t
from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device, get_device, as_device
from pycudadrv._stream cimport Stream, order_after
from pycudadrv._memory cimport Buffer
from pycudadrv._dlpack cimport import_capsule

import numpy as np
from pycudadrv._dlpack import KDL_CUDA, KDL_CUDA_MANAGED
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError

__all__ = ["asbuffer"]


cdef object cai_data_pointer(object cai):
    data = cai.get("data") if isinstance(cai, dict) else None
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ArgumentValueError("its __cuda_array_interface__ has no valid 'data': (pointer, read_only)")
    ptr = data[0]
    if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0 or ptr >= 2**64:
        raise ArgumentValueError(f"its __cuda_array_interface__ data pointer {ptr!r} is not an address")
    return ptr


cdef bint cai_is_contiguous(object cai) except -1:
    strides = cai.get("strides")
    if strides is None:
        return True
    shape = tuple(cai.get("shape", ()))
    itemsize = np.dtype(cai["typestr"]).itemsize
    expect = itemsize
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
    cdef Buffer b = Buffer.__new__(Buffer)
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
    try:
        dl_dev = obj.__dlpack_device__()
    except AttributeError:
        dl_dev = None
    if dl_dev is not None and int(dl_dev[0]) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__} lives on DLPack device {tuple(dl_dev)}, not CUDA")
    if dl_dev is not None and device is None:
        dev = get_device(int(dl_dev[1]))
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
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        if hasattr(obj, "__dlpack__"):
            return _from_dlpack(obj, device)
        raise ArgumentTypeError(f"{type(obj).__name__} exports neither __cuda_array_interface__ nor __dlpack__")
    try:
        ptr = cai_data_pointer(cai)
    except ArgumentValueError as e:
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__}: {e}") from e
    dt = np.dtype(cai.get("descr", cai["typestr"])) if "descr" in cai and len(cai["descr"]) > 1 \
        else np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    if not cai_is_contiguous(cai):
        raise ArgumentTypeError(f"asbuffer: {type(obj).__name__} is not C-contiguous (shape {shape}, strides "
                                f"{tuple(cai['strides'])} in bytes); make it contiguous first (e.g. "
                                "x.contiguous() in PyTorch, cupy.ascontiguousarray(x))")
    cdef Device dev = as_device(device)
    count = 1
    for s in shape:
        count *= s
    cdef Buffer b = _wrap_foreign(obj, ptr, count * dt.itemsize, dt, shape, dev)
    producer_stream = cai.get("stream")
    if producer_stream:  # CAI v3: order the producer's pending work before ours
        order_after(b._stream, Stream.from_handle(int(producer_stream), dev))
    return b
