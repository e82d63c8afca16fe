# include/pycudadrv/vcall.h for Cython: a vectorcall entry (PEP 590) for an extension type, which Cython
# does not generate (used by the Timestamps pass's __enter__/__exit__ callables).
from cpython.object cimport PyObject

cdef extern from "pycudadrv/vcall.h":
    int pycudadrv_enable_vectorcall(object t, object sample, void* field) except -1
    Py_ssize_t pycudadrv_vectorcall_nargs(size_t nargsf)
