/* Give a Cython extension type a vectorcall entry (PEP 590) after PyType_Ready; install a
 * METH_FASTCALL method (declared for Cython in pycudadrv/_vcall.pxd).
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

/* After pycudadrv_enable_vectorcall: calls with a tuple and a dict (f(*args, **kw), PyObject_Call)
 * of an instance whose vectorcallfunc is NULL take `call` with that tuple and dict as they are,
 * not PyVectorcall_Call (which copies them into an argument array: a heap block past 64
 * arguments). */
static inline int pycudadrv_set_call(PyObject *t, void *call)
{
    ((PyTypeObject *)t)->tp_call = (ternaryfunc)call;
    PyType_Modified((PyTypeObject *)t);
    return 0;
}

/* Mark `t` (a descriptor type whose tp_descr_get binds) as behaving like a method descriptor:
 * `obj.name(...)` then calls the descriptor itself with obj first, building no bound object. */
static inline int pycudadrv_set_method_descriptor(PyObject *t)
{
    ((PyTypeObject *)t)->tp_flags |= Py_TPFLAGS_METHOD_DESCRIPTOR;
    PyType_Modified((PyTypeObject *)t);
    return 0;
}

/* Instances of `t` are made only by the module's own C code (which calls its tp_new function
 * directly): `t()` and `t.__new__(t)` raise TypeError, as for CPython's method types. (Cython also
 * gives the type a vectorcall of its own that makes an instance: `t()` takes it, not tp_new.) */
static inline int pycudadrv_disallow_instantiation(PyObject *t)
{
    PyTypeObject *tp = (PyTypeObject *)t;
    tp->tp_new = NULL;
    tp->tp_vectorcall = NULL;
    if (PyDict_GetItemString(tp->tp_dict, "__new__") != NULL && PyDict_DelItemString(tp->tp_dict, "__new__") < 0)
        return -1;
    PyType_Modified(tp);
    return 0;
}

/* Set attribute `name` of the (static, immutable) type `t` to `v`, once, at import. */
static inline int pycudadrv_set_type_attr(PyObject *t, const char *name, PyObject *v)
{
    int r = PyDict_SetItemString(((PyTypeObject *)t)->tp_dict, name, v);
    PyType_Modified((PyTypeObject *)t);
    return r;
}

/* Whether `names` (a call's keyword names) is one of the constants of the code in the calling
 * Python frame: a call spelled out borrows its keyword names from there; a call made from a dict
 * gets a new tuple. 0 when no Python frame is running. */
static inline int pycudadrv_is_caller_constant(PyObject *names)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyCodeObject *co;
    PyObject *consts;
    Py_ssize_t k;
    int found = 0;
    if (f == NULL)
        return 0;
    co = PyFrame_GetCode(f);                    /* a new reference */
    consts = co->co_consts;
    for (k = 0; consts != NULL && k < PyTuple_GET_SIZE(consts); k++) {
        if (PyTuple_GET_ITEM(consts, k) == names) {
            found = 1;
            break;
        }
    }
    Py_DECREF(co);
    return found;
}

/* The items of a tuple, in place. */
#define pycudadrv_tuple_items(t) (&PyTuple_GET_ITEM((t), 0))

/* Install `def` as a method descriptor of type `t` (what a `def` in the class body makes, with a C
 * calling convention Cython does not generate for *args: METH_FASTCALL | METH_KEYWORDS). `def`
 * must live as long as the type. */
static inline int pycudadrv_install_method(PyObject *t, PyMethodDef *def)
{
    PyObject *d = PyDescr_NewMethod((PyTypeObject *)t, def);
    int r;
    if (d == NULL)
        return -1;
    r = pycudadrv_set_type_attr(t, def->ml_name, d);
    Py_DECREF(d);
    return r;
}
#endif
