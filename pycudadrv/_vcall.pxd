# include/pycudadrv/vcall.h for Cython: C-level calling conventions Cython does not generate
# (a vectorcall entry for an extension type; a METH_FASTCALL method installed on a type).
from cpython.object cimport PyObject

cdef extern from "pycudadrv/vcall.h":
    ctypedef struct PyMethodDef:
        const char* ml_name
        void* ml_meth
        int ml_flags
        const char* ml_doc
    enum:
        METH_FASTCALL
        METH_KEYWORDS
    int pycudadrv_enable_vectorcall(object t, object sample, void* field) except -1
    Py_ssize_t pycudadrv_vectorcall_nargs(size_t nargsf)
    int pycudadrv_install_method(object t, PyMethodDef* d) except -1
    int pycudadrv_set_call(object t, void* call) except -1
    int pycudadrv_set_method_descriptor(object t) except -1
    int pycudadrv_set_type_attr(object t, const char* name, object v) except -1
    int pycudadrv_disallow_instantiation(object t) except -1
    PyObject** pycudadrv_tuple_items(PyObject* t)
    int pycudadrv_is_caller_constant(PyObject* names)
