from pycudadrv._cuda cimport *
from pycudadrv._driver cimport Lifetime
from pycudadrv._device cimport Device

cdef class Module:
    cdef CUmodule _handle
    cdef readonly Device device
    cdef readonly str kind          # "ptx", "cubin" or "fatbin"
    cdef readonly object hash       # FNV-1a 64 of the image bytes
    cdef bytes image
    cdef bytes _layout_info         # what else decided the parameter layouts (PTX, source declarations)
    cdef object ptx_layouts         # entry name -> layout, from PTX text when known
    cdef object _ptx_text
    cdef object source_decls        # entry name -> declared parameters (compile()'s source), or None
    cdef dict _functions
    cdef object _globals            # WeakSet of the Allocations of module globals: invalidated by unload()
    cdef public dict lowered_names  # name expression -> mangled name (from compile())
    cdef Lifetime _life

    cdef int _ensure_open(self) except -1
