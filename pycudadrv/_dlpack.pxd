from libc.stdint cimport uint64_t
from pycudadrv._alloc cimport Allocation

# A "dltensor" capsule over device memory at `ptr` (inside `owner`), zero-copy. The
# capsule holds `owner` (Allocation.add_hold: its free waits); when the consumer (or the
# capsule, if never consumed) releases it, owner.release_hold() runs.
cdef object export_capsule(Allocation owner, uint64_t ptr, int device_id, object dtype, tuple shape)
# The `stream`, `dl_device` and `copy` arguments of __dlpack__ for memory on CUDA device
# `ordinal`: ArgumentTypeError for values of the wrong type, ArgumentValueError for
# another device or copy=True (the export is zero-copy).
cdef int check_export_request(object stream, object dl_device, object copy, int ordinal) except -1

# Take over an unconsumed "dltensor" capsule. Returns (keeper, address,
# device_type, device_id, numpy dtype, shape, strides in elements or None); the
# keeper calls the producer's deleter when it is dropped.
cdef tuple import_capsule(object capsule, object producer)
