# obj.__cuda_array_interface__, or None when it has none; ArgumentTypeError when reading it raises.
cdef object read_cai(object obj)
# The data pointer of a __cuda_array_interface__ dict, as an int in [0, 2**64);
# ArgumentValueError saying what is wrong otherwise.
cdef object cai_data_pointer(object cai)
# (shape, strides or None, numpy dtype) of a CAI dict, each checked (ArgumentValueError).
cdef tuple cai_geometry(object cai)
# Whether a CAI dict describes C-contiguous memory (strides None or row-major); with
# strides, its shape, typestr and strides are checked first (ArgumentValueError).
cdef bint cai_is_contiguous(object cai) except -1
