# cython: language_level=3
"""DLPack capsules: export device memory, take over imported tensors (the
unversioned "dltensor" ABI, written from the public specification)."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t, uint8_t, uint16_t, int32_t, int64_t
from libc.stdlib cimport malloc, free
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer, PyCapsule_SetName
from cpython.ref cimport Py_INCREF, Py_DECREF
from pycudadrv._alloc cimport Allocation

import traceback
import numpy as np
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError

__all__ = ["KDL_CUDA", "KDL_CUDA_MANAGED"]

cdef extern from "pycudadrv/dlpack.h" nogil:
    enum:
        PYCUDADRV_kDLCPU
        PYCUDADRV_kDLCUDA
        PYCUDADRV_kDLCUDAHost
        PYCUDADRV_kDLCUDAManaged
        PYCUDADRV_kDLInt
        PYCUDADRV_kDLUInt
        PYCUDADRV_kDLFloat
        PYCUDADRV_kDLBfloat
        PYCUDADRV_kDLComplex
        PYCUDADRV_kDLBool
    ctypedef struct pycudadrv_DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct pycudadrv_DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct pycudadrv_DLTensor:
        void* data
        pycudadrv_DLDevice device
        int32_t ndim
        pycudadrv_DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct pycudadrv_DLManagedTensor:
        pycudadrv_DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(pycudadrv_DLManagedTensor*) noexcept nogil

#: DLPack device types of device memory pycudadrv accepts.
KDL_CUDA = PYCUDADRV_kDLCUDA
KDL_CUDA_MANAGED = PYCUDADRV_kDLCUDAManaged

_DL_KIND = {PYCUDADRV_kDLInt: "i", PYCUDADRV_kDLUInt: "u", PYCUDADRV_kDLFloat: "f",
            PYCUDADRV_kDLComplex: "c", PYCUDADRV_kDLBool: "b"}
# The bit widths numpy (and a kernel) have for each kind: no float128 (x87 long double is not
# IEEE binary128), no 16-bit bool.
_DL_BITS = {PYCUDADRV_kDLInt: (8, 16, 32, 64), PYCUDADRV_kDLUInt: (8, 16, 32, 64), PYCUDADRV_kDLFloat: (16, 32, 64),
            PYCUDADRV_kDLComplex: (64, 128), PYCUDADRV_kDLBool: (8,)}
_DL_CODE = {"i": PYCUDADRV_kDLInt, "u": PYCUDADRV_kDLUInt, "f": PYCUDADRV_kDLFloat,
            "c": PYCUDADRV_kDLComplex, "b": PYCUDADRV_kDLBool}


cdef void _dl_deleter(pycudadrv_DLManagedTensor* m) noexcept nogil:
    with gil:
        owner = <Allocation>m.manager_ctx
        try:
            owner.release_hold()
        except BaseException:
            traceback.print_exc()
        Py_DECREF(owner)
    free(m)


cdef void _dl_capsule_destructor(object capsule) noexcept:
    cdef pycudadrv_DLManagedTensor* m
    if PyCapsule_IsValid(capsule, "dltensor"):  # never consumed: we still own it
        m = <pycudadrv_DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
        if m != NULL and m.deleter != NULL:
            m.deleter(m)


cdef int check_export_request(object stream, object dl_device, object copy, int ordinal) except -1:
    if copy:
        raise ArgumentValueError("Buffer.__dlpack__: copy=True is not supported (export is zero-copy)")
    if dl_device is not None:
        try:
            dev = tuple(int(v) for v in dl_device)
        except (TypeError, ValueError, OverflowError):
            raise ArgumentTypeError(f"__dlpack__: dl_device must be (device_type, device_id), got "
                                    f"{dl_device!r:.60}") from None
        if dev != (PYCUDADRV_kDLCUDA, ordinal):
            raise ArgumentValueError(f"Buffer.__dlpack__: buffer lives on {(PYCUDADRV_kDLCUDA, ordinal)}, not {dev}")
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, (int, np.integer))):
        raise ArgumentTypeError(f"__dlpack__: stream must be an int (a CUstream handle; 1, 2 or -1) or None, got "
                                f"{type(stream).__name__}")
    return 0


cdef object export_capsule(Allocation owner, uint64_t ptr, int device_id, object dtype, tuple shape):
    dt = np.dtype(dtype)
    code = _DL_CODE.get(dt.kind)
    if code is None or dt.fields is not None:
        raise ArgumentTypeError(f"__dlpack__: dtype {dt} has no DLPack equivalent")
    cdef int ndim = len(shape)
    cdef int k
    cdef pycudadrv_DLManagedTensor* m = <pycudadrv_DLManagedTensor*>malloc(
        sizeof(pycudadrv_DLManagedTensor) + max(ndim, 1) * sizeof(int64_t))
    if m == NULL:
        raise MemoryError()
    m.dl_tensor.data = <void*><uintptr_t>ptr
    m.dl_tensor.device.device_type = PYCUDADRV_kDLCUDA
    m.dl_tensor.device.device_id = device_id
    m.dl_tensor.ndim = ndim
    m.dl_tensor.dtype.code = code
    m.dl_tensor.dtype.bits = dt.itemsize * 8
    m.dl_tensor.dtype.lanes = 1
    m.dl_tensor.shape = <int64_t*>(<char*>m + sizeof(pycudadrv_DLManagedTensor))
    for k in range(ndim):
        m.dl_tensor.shape[k] = shape[k]
    m.dl_tensor.strides = NULL
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = <void*>owner
    m.deleter = _dl_deleter
    try:
        cap = PyCapsule_New(m, "dltensor", _dl_capsule_destructor)
    except BaseException:
        free(m)
        raise
    Py_INCREF(owner)              # the capsule's (and then the consumer's) reference, dropped by the deleter
    owner.add_hold()
    return cap


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class _DLPackOwner:
    """Keeps an imported DLPack tensor alive; calls its deleter when dropped."""
    cdef pycudadrv_DLManagedTensor* m
    cdef object producer

    def __dealloc__(self):
        if self.m != NULL and self.m.deleter != NULL:
            self.m.deleter(self.m)
        self.m = NULL


cdef tuple import_capsule(object capsule, object producer):
    if not PyCapsule_IsValid(capsule, "dltensor"):
        raise ArgumentTypeError(f"__dlpack__ returned {type(capsule).__name__}, not an unconsumed 'dltensor' capsule")
    cdef pycudadrv_DLManagedTensor* m = <pycudadrv_DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
    cdef _DLPackOwner owner = _DLPackOwner.__new__(_DLPackOwner)
    owner.m = m
    owner.producer = producer
    PyCapsule_SetName(capsule, "used_dltensor")
    cdef pycudadrv_DLTensor* t = &m.dl_tensor
    cdef int k
    if t.dtype.lanes != 1 or t.dtype.code not in _DL_KIND or t.dtype.bits not in _DL_BITS[t.dtype.code]:
        raise ArgumentTypeError(f"unsupported DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, lanes "
                                f"{t.dtype.lanes}): pycudadrv takes one lane of bool (8 bits), int/uint (8-64), "
                                "float (16-64) or complex (64, 128)")
    dt = np.dtype(f"{_DL_KIND[t.dtype.code]}{t.dtype.bits // 8}") if t.dtype.code != PYCUDADRV_kDLBool \
        else np.dtype(np.bool_)
    if t.ndim < 0 or (t.ndim > 0 and t.shape == NULL):
        raise ArgumentTypeError(f"malformed DLPack tensor (ndim {t.ndim})")
    shape = tuple(t.shape[k] for k in range(t.ndim))
    if any(s < 0 for s in shape):
        raise ArgumentTypeError(f"malformed DLPack tensor (negative dimension in shape {shape})")
    strides = None if t.strides == NULL else tuple(t.strides[k] for k in range(t.ndim))
    return (owner, <uintptr_t>t.data + t.byte_offset, t.device.device_type, t.device.device_id, dt, shape, strides)
