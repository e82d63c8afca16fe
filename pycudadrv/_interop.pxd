# The data pointer of a __cuda_array_interface__ dict, as an int in [0, 2**64);
# ArgumentValueError saying what is wrong otherwise.
cdef object cai_data_pointer(object cai)
# Whether a CAI dict describes C-contiguous memory (strides None or row-major).
cdef bint cai_is_contiguous(object cai) except -1
