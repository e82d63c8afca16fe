from libc.stdint cimport uint64_t

# A "dltensor" capsule over device memory at `ptr`, zero-copy. The capsule keeps
# `owner` alive; when the consumer (or the capsule, if never consumed) releases
# it, `owner._dlpack_released()` runs, then the reference is dropped.
cdef object export_capsule(object owner, uint64_t ptr, int device_id, object dtype, tuple shape)
# The `stream`, `dl_device` and `copy` arguments of __dlpack__ for memory on CUDA device
# `ordinal`: ArgumentTypeError for values of the wrong type, ArgumentValueError for
# another device or copy=True (the export is zero-copy).
cdef int check_export_request(object stream, object dl_device, object copy, int ordinal) except -1

# Take over an unconsumed "dltensor" capsule. Returns (keeper, address,
# device_type, device_id, numpy dtype, shape, strides in elements or None); the
# keeper calls the producer's deleter when it is dropped.
cdef tuple import_capsule(object capsule, object producer)
