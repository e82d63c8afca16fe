from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device

cdef class Module:
    cdef CUmodule handle
    cdef readonly Device device
    cdef readonly str kind          # "ptx", "cubin" or "fatbin"
    cdef readonly object hash       # FNV-1a 64 of the image bytes
    cdef bytes image
    cdef object ptx_layouts         # entry name -> layout, from PTX text when known
    cdef dict _functions
    cdef public dict lowered_names  # name expression -> mangled name (from compile())
    cdef bint closed
