from libc.stdint cimport uint64_t
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream
from pycudadrv._memory cimport Buffer

# obj.__cuda_array_interface__, or None when it has none; ArgumentTypeError when reading it raises.
cdef object read_cai(object obj)
# The data pointer of a __cuda_array_interface__ dict, as an int in [0, 2**64);
# ArgumentValueError saying what is wrong otherwise.
cdef object cai_data_pointer(object cai)
# (shape, strides or None, numpy dtype) of a CAI dict, each checked (ArgumentValueError).
cdef tuple cai_geometry(object cai)
# (ptr, lo, hi, contiguous, shape, strides, dtype) of a CAI dict, every entry checked (ArgumentValueError):
# the one reader of its geometry, for launches, the builder, asbuffer, the Queue and MPI.
cdef tuple cai_extent(object cai)

# Order the work that produced foreign memory `obj` (its __cuda_array_interface__ `cai`,
# or None when it has none) before `s`: CAI v3's `stream`, or for an object whose CAI names
# no stream (or that has none) its __dlpack__(stream=...) request; nothing when the
# PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC switch is off or `s` is None. Inside a capture the
# wait is an external event node the capture keeps alive.
cdef int order_foreign(object obj, object cai, Stream s, Device dev) except -1
# The device pointer of a DLPack-only object (C-contiguous), its producer ordered before `s`
# (None: no ordering). ArgumentTypeError naming what is wrong. The capsule's owner waits in
# dlpack_owners() for the code that packed the argument to settle or take it.
cdef uint64_t dlpack_pointer(object obj, Stream s, Device dev) except? 0
# The list of owners waiting (the same list object always: a launch path tests it is empty).
cdef list dlpack_owners()
# How many owners this thread has waiting: a launch that may run inside another's packing (an
# argument's Python code launching) settles or takes only those after its mark (`keep`).
cdef Py_ssize_t dlpack_mark() except -1
# After a launch on `s`: keep this thread's waiting owners (after the first `keep`) until it has run
# (keep_until_done), or for the graph's life when `s` captures.
cdef int settle_dlpack_owners(Stream s, Py_ssize_t keep=*) except -1
# This thread's waiting owners (after the first `keep`), handed to a holder (a graph whose node now
# uses them, or nobody: a refused launch); they leave the list.
cdef tuple take_dlpack_owners(Py_ssize_t keep=*)
# asbuffer() of a CAI object (`cai` its dict) for `who` (named in errors); with `strided`, a
# strided array (no negative stride) gives a raw-bytes Buffer over the bytes it spans from its
# data pointer, its producer ordered as asbuffer orders it.
cdef Buffer cai_buffer(object obj, object cai, object device, bint strided, str who)

# A Buffer, None or a scalar: an argument that is not another library's array.
cdef bint is_own_value(object a)
# Another library's array given as it is (CAI or DLPack; not a Buffer, None or a scalar).
cdef bint is_foreign_memory(object a)
# An array that exports __dlpack__ but no __cuda_array_interface__ (JAX, some PyTorch uses).
cdef bint is_dlpack_only(object a) except -1
