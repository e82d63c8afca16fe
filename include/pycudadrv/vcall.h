/* Give a Cython extension type a vectorcall entry (PEP 590) after PyType_Ready (declared for
 * Cython in pycudadrv/_vcall.pxd).
 *
 * Cython makes `__call__` a tp_call slot: every call packs its arguments into a tuple. A type whose
 * instances hold a vectorcallfunc at a fixed offset, with Py_TPFLAGS_HAVE_VECTORCALL set, is called
 * with the caller's argument array instead (what CPython's own functions do); its tp_call becomes
 * PyVectorcall_Call, so a call with a tuple and a dict (f(*args, **kw)) takes the same function. */
#ifndef PYCUDADRV_VCALL_H
#define PYCUDADRV_VCALL_H
#include <Python.h>

#ifndef Py_TPFLAGS_HAVE_VECTORCALL
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#endif

/* `field` is the address of the instance field (in `sample`, an instance of `t`) that holds each
 * instance's vectorcallfunc. */
static inline int pycudadrv_enable_vectorcall(PyObject *t, PyObject *sample, void *field)
{
    PyTypeObject *tp = (PyTypeObject *)t;
    tp->tp_call = PyVectorcall_Call;
    tp->tp_vectorcall_offset = (Py_ssize_t)((char *)field - (char *)sample);
    tp->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    return 0;
}

#define pycudadrv_vectorcall_nargs(nargsf) PyVectorcall_NARGS(nargsf)

#endif
